package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/estest"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqliteconn"
	"github.com/duroq/duroq/sqlitedb"
)

func open(t testing.TB, path string, now func() time.Time) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path, sqlite.Options{Now: now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	conformance.TestEventStore(t, conformance.EventStoreFactory{
		New: func(t *testing.T, now func() time.Time) eventstore.EventStore {
			return open(t, filepath.Join(t.TempDir(), "es.db"), now)
		},
		Corrupt: func(t *testing.T, s eventstore.EventStore, stream string, partition, seq int64) {
			estest.Corrupt(t, s.(*sqlite.Store), `X'DEAD'`, stream, partition, seq)
		},
	})
}

func BenchmarkEventStore(b *testing.B) {
	bench.EventStore(b, func(b *testing.B) eventstore.EventStore {
		return open(b, filepath.Join(b.TempDir(), "es.db"), nil)
	})
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestReopenKeepsEverything writes every kind of state, closes the file, opens it
// again and reads it all back.
func TestReopenKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "es.db")
	estest.ReopenKeepsEverything(t, func(now func() time.Time) eventstore.EventStore { return open(t, path, now) })
}

// sharedDB opens one database file holding this store's tables and a stand-in for
// another package's (its own migration line, like mq/sqlite's "mq").
func sharedDB(t *testing.T) estest.Shared {
	t.Helper()
	db, err := sqlitedb.Open(filepath.Join(t.TempDir(), "shared.db"), sqlitedb.Options{})
	must(t, err, "open the database")
	t.Cleanup(func() { db.Close() })
	s := sqlite.New(db, sqlite.Options{})
	must(t, s.Migrate(context.Background()), "Migrate")
	estest.SideTable(t, db, migrate.SQLite)
	return estest.Shared{DB: db, Store: s, Run: func(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
		return sqliteconn.WriterOf(db).Run(ctx, fn)
	}}
}

func TestSharedDBTransactionCommitsAndRollsBackTogether(t *testing.T) {
	estest.TransactionCommitsAndRollsBackTogether(t, sharedDB(t))
}

func TestFailedTxWriteLeavesNothing(t *testing.T) {
	estest.FailedTxWriteLeavesNothing(t, sharedDB(t))
}

// TestConcurrentMigrate runs Migrate from several connections pools at once, as
// several processes starting together would.
func TestConcurrentMigrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "migrate.db")
	estest.ConcurrentMigrate(t, 6, func(int) error {
		db, err := sqlitedb.Open(path, sqlitedb.Options{})
		if err != nil {
			return err
		}
		defer db.Close()
		return sqlite.New(db, sqlite.Options{}).Migrate(context.Background())
	}, func() estest.TxStore { return open(t, path, nil) }, sqlite.MigrationLine)
}

// TestDamagedColumnsAreCorruption: a row whose columns hold the wrong SQLite types is
// reported as corrupt, not as a scan failure.
func TestDamagedColumnsAreCorruption(t *testing.T) {
	estest.DamageIsCorruption(t, open(t, filepath.Join(t.TempDir(), "es.db"), nil), []string{
		`UPDATE es_events SET checksum = 'not a number' WHERE seq = 2`,
		`UPDATE es_events SET checksum = -1 WHERE seq = 2`,
		`UPDATE es_events SET type = 42 WHERE seq = 2`,
		`UPDATE es_events SET data = 7 WHERE seq = 2`,
	})
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := sqlite.Open(filepath.Join(t.TempDir(), "x.db"), sqlite.Options{DB: sqlitedb.Options{Synchronous: "SOMETIMES"}})
	if err == nil {
		t.Fatal("Open with an unknown synchronous mode succeeded")
	}
	if _, err := sqlite.Open("", sqlite.Options{}); err == nil {
		t.Fatal("Open with an empty path succeeded")
	}
}

func TestNilTxIsInvalid(t *testing.T) {
	estest.NilTxIsInvalid(t, open(t, filepath.Join(t.TempDir(), "es.db"), nil))
}

// runWrite runs fn on the store's writer, as the store's own writes do.
func runWrite(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return sqliteconn.WriterOf(db).Run(ctx, fn)
}

func TestCommitManyMatchesAppendThenUpdate(t *testing.T) {
	estest.CommitManyMatchesAppendThenUpdate(t, func(t *testing.T, now func() time.Time) estest.CommitStore {
		return open(t, filepath.Join(t.TempDir(), "es.db"), now)
	}, runWrite)
}

func TestCommitManyIsAllOrNothing(t *testing.T) {
	estest.CommitManyIsAllOrNothing(t, open(t, filepath.Join(t.TempDir(), "es.db"), nil), runWrite)
}

func TestClosedDatabaseIsErrClosed(t *testing.T) {
	estest.ClosedDatabaseIsErrClosed(t, sharedDB(t))
}
