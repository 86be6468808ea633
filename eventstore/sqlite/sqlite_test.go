package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqlitedb"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/jmoiron/sqlx"
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

// corrupt damages one stored event the way an outside writer would: the data
// changes, the checksum does not.
func corrupt(t *testing.T, db *sqlx.DB, stream string, partition, seq int64) {
	t.Helper()
	res, err := db.Exec(`UPDATE es_events SET data = X'DEAD' || data WHERE stream = ? AND partition = ? AND seq = ?`,
		stream, partition, seq)
	if err != nil {
		t.Fatalf("corrupt: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("corrupt: no event %s/%d/%d", stream, partition, seq)
	}
}

func TestConformance(t *testing.T) {
	conformance.TestEventStore(t, conformance.EventStoreFactory{
		New: func(t *testing.T, now func() time.Time) eventstore.EventStore {
			return open(t, filepath.Join(t.TempDir(), "es.db"), now)
		},
		Corrupt: func(t *testing.T, s eventstore.EventStore, stream string, partition, seq int64) {
			corrupt(t, s.(*sqlite.Store).DB(), stream, partition, seq)
		},
	})
}

func BenchmarkEventStore(b *testing.B) {
	bench.EventStore(b, func(b *testing.B) eventstore.EventStore {
		return open(b, filepath.Join(b.TempDir(), "es.db"), nil)
	})
}

func ptr[T any](v T) *T { return &v }

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestReopenKeepsEverything writes every kind of state, closes the file, opens it
// again and reads it all back.
func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "es.db")
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	s := open(t, path, now)
	can, running := eventstore.StatusContinuedAsNew, eventstore.StatusRunning
	must(t, s.Append(ctx, "parent", 1, []eventstore.Event{{Seq: 1, Type: "Started", Data: []byte("in")}}), "Append")
	must(t, s.Append(ctx, "child", 1, []eventstore.Event{{Seq: 1, Type: "Started", Data: []byte("a")}, {Seq: 2, Data: []byte("b")}}), "Append")
	must(t, s.ApplyKV(ctx, "child", 1, []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "stored", Value: "s"}}), "ApplyKV")
	must(t, s.Update(ctx, "child", eventstore.StreamUpdate{Partition: 1, Name: ptr("Child"), Version: ptr("1.2"),
		Parent: ptr("parent"), Status: &can, Output: ptr("carried"), PinnedVersion: ptr("0.1.0")}), "Update")
	must(t, s.Update(ctx, "child", eventstore.StreamUpdate{Partition: 2, Status: &running}), "Update(partition 2)")
	must(t, s.ApplyKV(ctx, "child", 2, []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "delta", Value: "d"}}), "ApplyKV")
	if _, err := s.SetCustomStatus(ctx, "child", ptr("half way")); err != nil {
		t.Fatal(err)
	}
	must(t, s.Close(), "Close")

	s = open(t, path, now)
	info, err := s.Stream(ctx, "child")
	must(t, err, "Stream")
	if info.Name != "Child" || info.Version != "1.2" || info.Parent != "parent" || info.CurrentPartition != 2 ||
		info.Status != running || *info.CustomStatus != "half way" || info.CustomStatusVersion != 1 || !info.CreatedAt.Equal(at) {
		t.Fatalf("Stream after reopen = %+v", info)
	}
	events, err := s.Read(ctx, "child", 1)
	must(t, err, "Read")
	if len(events) != 2 || events[0].Type != "Started" || string(events[1].Data) != "b" || !events[0].CreatedAt.Equal(at) {
		t.Fatalf("Read after reopen = %+v", events)
	}
	parts, err := s.Partitions(ctx, "child")
	must(t, err, "Partitions")
	if len(parts) != 2 || parts[0].Status != can || *parts[0].Output != "carried" || *parts[0].PinnedVersion != "0.1.0" ||
		parts[0].Events != 2 || parts[0].Bytes != 2 || !parts[0].CompletedAt.Equal(at) {
		t.Fatalf("Partitions after reopen = %+v", parts)
	}
	snap, err := s.KVSnapshot(ctx, "child")
	must(t, err, "KVSnapshot")
	all, err := s.KVAll(ctx, "child")
	must(t, err, "KVAll")
	if len(snap) != 1 || snap["stored"].Value != "s" || len(all) != 2 || all["delta"].Value != "d" {
		t.Fatalf("KV after reopen: snapshot %v, all %v", snap, all)
	}
	kids, err := s.ListStreams(ctx, eventstore.StreamFilter{Parent: "parent"})
	must(t, err, "ListStreams")
	if len(kids) != 1 || kids[0] != "child" {
		t.Fatalf("children after reopen = %v", kids)
	}
}

// sharedDB opens one database file holding this store's tables and a stand-in for
// another package's (its own migration line, like mq/sqlite's "mq").
func sharedDB(t *testing.T) (*sqlx.DB, *sqlite.Store) {
	t.Helper()
	db, err := sqlite.OpenDB(filepath.Join(t.TempDir(), "shared.db"), sqlite.DBOptions{})
	must(t, err, "OpenDB")
	t.Cleanup(func() { db.Close() })
	s := sqlite.New(db, sqlite.Options{})
	must(t, s.Migrate(context.Background()), "Migrate")
	other := []migrate.Migration{{Version: 1, Name: "0001_side.sql", SQL: `CREATE TABLE side_rows (v TEXT NOT NULL)`}}
	must(t, migrate.Apply(context.Background(), db.DB, migrate.SQLite, "side", other), "migrate side line")
	return db, s
}

func sideRows(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var rows []string
	must(t, db.Select(&rows, `SELECT v FROM side_rows ORDER BY v`), "select side rows")
	return rows
}

// turn writes what an orchestration turn writes, plus a row of the other package.
func turn(ctx context.Context, s *sqlite.Store, tx *sqlx.Tx, stream string) error {
	completed := eventstore.StatusCompleted
	if _, _, err := s.ReadLatestTx(ctx, tx, stream); err != nil {
		return err
	}
	if _, err := s.KVSnapshotTx(ctx, tx, stream); err != nil {
		return err
	}
	if err := s.AppendTx(ctx, tx, stream, 1, []eventstore.Event{{Seq: 1, Data: []byte("started")}}); err != nil {
		return err
	}
	if err := s.UpdateTx(ctx, tx, stream, eventstore.StreamUpdate{Partition: 1, Name: ptr("Orch")}); err != nil {
		return err
	}
	if _, err := s.SetCustomStatusTx(ctx, tx, stream, ptr("busy")); err != nil {
		return err
	}
	if err := s.ApplyKVTx(ctx, tx, stream, 1, []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "k", Value: "v"}}); err != nil {
		return err
	}
	if err := s.UpdateTx(ctx, tx, stream, eventstore.StreamUpdate{Partition: 1, Status: &completed}); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO side_rows (v) VALUES (?)`, stream)
	return err
}

func TestSharedDBTransactionCommitsAndRollsBackTogether(t *testing.T) {
	ctx := context.Background()
	db, s := sharedDB(t)
	lock := sqlitedb.WriteLock(db)
	must(t, sqltx.RunLocked(ctx, db, lock, func(tx *sqlx.Tx) error { return turn(ctx, s, tx, "kept") }), "committed turn")

	boom := errors.New("the queue write failed")
	err := sqltx.RunLocked(ctx, db, lock, func(tx *sqlx.Tx) error {
		if err := turn(ctx, s, tx, "rolled-back"); err != nil {
			return err
		}
		if err := s.AppendTx(ctx, tx, "kept", 1, []eventstore.Event{{Seq: 2}}); err != nil {
			return err
		}
		if _, err := s.DeleteTx(ctx, tx, []string{"kept"}, eventstore.DeleteOptions{}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("rolled-back turn = %v, want %v", err, boom)
	}

	if rows := sideRows(t, db); len(rows) != 1 || rows[0] != "kept" {
		t.Fatalf("side rows = %v, want [kept]", rows)
	}
	if _, err := s.Stream(ctx, "rolled-back"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("Stream(rolled-back) = %v, want ErrNotFound", err)
	}
	info, err := s.Stream(ctx, "kept")
	must(t, err, "Stream(kept)")
	if info.Name != "Orch" || info.Status != eventstore.StatusCompleted || info.CustomStatusVersion != 1 {
		t.Fatalf("kept = %+v, want the committed turn", info)
	}
	events, err := s.Read(ctx, "kept", 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("Read(kept) = %d events, %v; want the committed event only", len(events), err)
	}
	snap, err := s.KVSnapshot(ctx, "kept")
	if err != nil || snap["k"].Value != "v" {
		t.Fatalf("KVSnapshot(kept) = %v, %v; want k=v", snap, err)
	}
}

// TestFailedTxWriteLeavesNothing: a twin failing inside a transaction that the
// caller commits anyway has left nothing of itself (it ran under a savepoint).
func TestFailedTxWriteLeavesNothing(t *testing.T) {
	ctx := context.Background()
	db, s := sharedDB(t)
	must(t, s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 3}}), "Append")
	err := sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
		err := s.AppendTx(ctx, tx, "s", 1, []eventstore.Event{{Seq: 1}, {Seq: 2}, {Seq: 3}})
		if !errors.Is(err, eventstore.ErrConflict) {
			t.Errorf("AppendTx = %v, want ErrConflict", err)
		}
		if _, err := s.DeleteTx(ctx, tx, []string{"s"}, eventstore.DeleteOptions{}); !errors.Is(err, eventstore.ErrRunning) {
			t.Errorf("DeleteTx(running) = %v, want ErrRunning", err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO side_rows (v) VALUES ('after')`)
		return err
	})
	must(t, err, "transaction")
	events, err := s.Read(ctx, "s", 1)
	if err != nil || len(events) != 1 || events[0].Seq != 3 {
		t.Fatalf("Read = %+v, %v; want only event 3", events, err)
	}
	parts, err := s.Partitions(ctx, "s")
	if err != nil || parts[0].Events != 1 {
		t.Fatalf("Partitions = %+v, %v; want a count of 1", parts, err)
	}
	if rows := sideRows(t, db); len(rows) != 1 {
		t.Fatalf("side rows = %v, want the transaction's own write", rows)
	}
}

// TestConcurrentMigrate runs Migrate from several connections pools at once, as
// several processes starting together would.
func TestConcurrentMigrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "migrate.db")
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Go(func() {
			db, err := sqlite.OpenDB(path, sqlite.DBOptions{})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			if err := sqlite.New(db, sqlite.Options{}).Migrate(context.Background()); err != nil {
				errs <- fmt.Errorf("migrator %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := open(t, path, nil)
	var versions []int
	must(t, s.DB().Select(&versions, `SELECT version FROM duroq_migrations WHERE line = ?`, sqlite.MigrationLine), "versions")
	if len(versions) != 1 || versions[0] != 1 {
		t.Fatalf("recorded versions = %v, want [1]", versions)
	}
	must(t, s.Append(context.Background(), "s", 1, []eventstore.Event{{Seq: 1}}), "Append after migrations")
}

// TestDamagedColumnsAreCorruption: a row whose columns hold the wrong SQLite types is
// reported as corrupt, not as a scan failure.
func TestDamagedColumnsAreCorruption(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "es.db"), nil)
	must(t, s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1, Data: []byte("x")}, {Seq: 2}}), "Append")
	for _, damage := range []string{
		`UPDATE es_events SET checksum = 'not a number' WHERE seq = 2`,
		`UPDATE es_events SET checksum = -1 WHERE seq = 2`,
		`UPDATE es_events SET type = 42 WHERE seq = 2`,
		`UPDATE es_events SET data = 7 WHERE seq = 2`,
	} {
		t.Run(damage, func(t *testing.T) {
			must(t, sqltx.Run(ctx, s.DB(), func(tx *sqlx.Tx) error {
				if _, err := tx.Exec(`SAVEPOINT damage`); err != nil {
					return err
				}
				if _, err := tx.Exec(damage); err != nil {
					return err
				}
				_, err := s.ReadTx(ctx, tx, "s", 1)
				var ce *eventstore.CorruptError
				if !errors.As(err, &ce) || ce.Seq != 2 {
					t.Errorf("ReadTx = %v, want a *CorruptError for seq 2", err)
				}
				_, err = tx.Exec(`ROLLBACK TO damage`)
				return err
			}), "damage")
		})
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := sqlite.Open(filepath.Join(t.TempDir(), "x.db"), sqlite.Options{DB: sqlite.DBOptions{Synchronous: "SOMETIMES"}})
	if err == nil {
		t.Fatal("Open with an unknown synchronous mode succeeded")
	}
	if _, err := sqlite.Open("", sqlite.Options{}); err == nil {
		t.Fatal("Open with an empty path succeeded")
	}
}

func TestNilTxIsInvalid(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "es.db"), nil)
	if err := s.AppendTx(ctx, nil, "s", 1, []eventstore.Event{{Seq: 1}}); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("AppendTx(nil tx) = %v, want ErrInvalid", err)
	}
	var tx *sqlx.Tx
	if _, err := s.ReadTx(ctx, tx, "s", 1); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("ReadTx(nil tx) = %v, want ErrInvalid", err)
	}
	if _, err := s.StreamTx(ctx, nil, "s"); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("StreamTx(nil) = %v, want ErrInvalid", err)
	}
}
