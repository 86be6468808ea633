// Package estest holds the tests every SQL event store backend (eventstore/sqlite,
// eventstore/postgres) runs alike beyond the conformance suite: durability across
// a reopen, migrations racing each other, damaged rows, and the transactional twins
// inside a caller's transaction that also writes another package's table.
package estest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/jmoiron/sqlx"
)

// TxStore is a SQL event store with transactional twins.
type TxStore interface {
	eventstore.EventStore
	DB() *sqlx.DB
	ReadTx(ctx context.Context, q sqlx.QueryerContext, stream string, partition int64) ([]eventstore.Event, error)
	ReadLatestTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, []eventstore.Event, error)
	StreamTx(ctx context.Context, q sqlx.QueryerContext, stream string) (eventstore.StreamInfo, error)
	KVSnapshotTx(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error)
	AppendTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error
	UpdateTx(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate) error
	SetCustomStatusTx(ctx context.Context, tx *sqlx.Tx, stream string, value *string) (int64, error)
	ApplyKVTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, muts []eventstore.KVMutation) error
	DeleteTx(ctx context.Context, tx *sqlx.Tx, streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error)
}

func ptr[T any](v T) *T { return &v }

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Corrupt damages the stored event (stream, partition, seq) of s the way an outside
// writer would: prefix, an SQL expression of bytes, is put before its data; the
// checksum stays.
func Corrupt(t *testing.T, s TxStore, prefix, stream string, partition, seq int64) {
	t.Helper()
	db := s.DB()
	res, err := db.Exec(db.Rebind(`UPDATE es_events SET data = `+prefix+` || data WHERE stream = ? AND partition = ? AND seq = ?`),
		stream, partition, seq)
	if err != nil {
		t.Fatalf("corrupt: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("corrupt: no event %s/%d/%d", stream, partition, seq)
	}
}

// ReopenKeepsEverything writes every kind of state, closes the store, opens the
// same database again (each call of open does) and reads it all back.
func ReopenKeepsEverything(t *testing.T, open func(now func() time.Time) eventstore.EventStore) {
	ctx := t.Context()
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	s := open(now)
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

	s = open(now)
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

// ConcurrentMigrate runs migrate for n migrators at once, as several processes
// starting together would, then checks, through the store open returns, that each
// version of line was recorded once (1, 2, ... without a gap or a repeat) and the
// store takes writes.
func ConcurrentMigrate(t *testing.T, n int, migrate func(i int) error, open func() TxStore, line string) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := migrate(i); err != nil {
				errs <- fmt.Errorf("migrator %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := open()
	var versions []int
	must(t, s.DB().Select(&versions, s.DB().Rebind(`SELECT version FROM duroq_migrations WHERE line = ? ORDER BY version`), line), "versions")
	for i, v := range versions {
		if v != i+1 {
			t.Fatalf("recorded versions = %v, want each version once: 1, 2, ...", versions)
		}
	}
	if len(versions) == 0 {
		t.Fatal("no version recorded")
	}
	must(t, s.Append(t.Context(), "s", 1, []eventstore.Event{{Seq: 1}}), "Append after migrations")
}

// DamageIsCorruption damages the second of two stored events with each of the
// statements in damages (on the columns of es_events, inside a transaction rolled
// back afterwards) and expects the reads to report corruption, not a scan failure.
func DamageIsCorruption(t *testing.T, s TxStore, damages []string) {
	ctx := t.Context()
	must(t, s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1, Data: []byte("x")}, {Seq: 2}}), "Append")
	for _, damage := range damages {
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
				if !errors.As(err, &ce) || ce.Seq < 2 {
					t.Errorf("ReadTx = %v, want a *CorruptError for the damaged event", err)
				}
				if _, _, err := s.ReadLatestTx(ctx, tx, "s"); !errors.Is(err, eventstore.ErrCorrupt) {
					t.Errorf("ReadLatestTx = %v, want ErrCorrupt", err)
				}
				_, err = tx.Exec(`ROLLBACK TO SAVEPOINT damage`)
				return err
			}), "damage")
		})
	}
}

// NilTxIsInvalid checks that the twins refuse a nil transaction or database.
func NilTxIsInvalid(t *testing.T, s TxStore) {
	ctx := t.Context()
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

// Shared is a store on a database that also holds another package's table,
// side_rows (v TEXT NOT NULL), made by SideTable.
type Shared struct {
	DB    *sqlx.DB
	Store TxStore
	// Run runs fn in a transaction of DB as the adapter does (SQLite: under the
	// process's write lock).
	Run func(ctx context.Context, fn func(tx *sqlx.Tx) error) error
}

// SideTable creates side_rows in db, as its own migration line ("side"), standing
// in for another package sharing the database (mq/sqlite's "mq", say).
func SideTable(t testing.TB, db *sqlx.DB, d migrate.Dialect) {
	t.Helper()
	other := []migrate.Migration{{Version: 1, Name: "0001_side.sql", SQL: `CREATE TABLE side_rows (v TEXT NOT NULL)`}}
	must(t, migrate.Apply(context.Background(), db.DB, d, "side", other), "migrate side line")
}

// SideRows returns the rows of side_rows in order.
func (f Shared) SideRows(t testing.TB) []string {
	t.Helper()
	var rows []string
	must(t, f.DB.Select(&rows, `SELECT v FROM side_rows ORDER BY v`), "select side rows")
	return rows
}

// AddSideRow writes a row of side_rows inside tx.
func AddSideRow(ctx context.Context, tx *sqlx.Tx, v string) error {
	_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO side_rows (v) VALUES (?)`), v)
	return err
}

// turn writes what an orchestration turn writes, plus a row of the other package.
func turn(ctx context.Context, s TxStore, tx *sqlx.Tx, stream string) error {
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
	return AddSideRow(ctx, tx, stream)
}

// TransactionCommitsAndRollsBackTogether runs a turn through the twins in a
// transaction that commits, then one that fails after it: the store's writes and
// the other table's commit and roll back together.
func TransactionCommitsAndRollsBackTogether(t *testing.T, f Shared) {
	ctx := t.Context()
	s := f.Store
	must(t, f.Run(ctx, func(tx *sqlx.Tx) error { return turn(ctx, s, tx, "kept") }), "committed turn")

	boom := errors.New("the queue write failed")
	err := f.Run(ctx, func(tx *sqlx.Tx) error {
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

	if rows := f.SideRows(t); len(rows) != 1 || rows[0] != "kept" {
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

// FailedTxWriteLeavesNothing: a twin failing inside a transaction that the caller
// commits anyway has left nothing of itself (it ran under a savepoint), and the
// transaction stays usable: PostgreSQL would otherwise refuse every later
// statement.
func FailedTxWriteLeavesNothing(t *testing.T, f Shared) {
	ctx := t.Context()
	s := f.Store
	must(t, s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 3}}), "Append")
	err := f.Run(ctx, func(tx *sqlx.Tx) error {
		err := s.AppendTx(ctx, tx, "s", 1, []eventstore.Event{{Seq: 1}, {Seq: 2}, {Seq: 3}})
		if ce, ok := errors.AsType[*eventstore.ConflictError](err); !ok || ce.Seq != 3 {
			t.Errorf("AppendTx = %v, want a *ConflictError for seq 3", err)
		}
		if _, err := s.DeleteTx(ctx, tx, []string{"s"}, eventstore.DeleteOptions{}); !errors.Is(err, eventstore.ErrRunning) {
			t.Errorf("DeleteTx(running) = %v, want ErrRunning", err)
		}
		if _, err := s.SetCustomStatusTx(ctx, tx, "nobody", ptr("x")); !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("SetCustomStatusTx(unknown) = %v, want ErrNotFound", err)
		}
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
			return fmt.Errorf("transaction unusable after failed twins: %w", err)
		}
		if err := s.AppendTx(ctx, tx, "s", 1, []eventstore.Event{{Seq: 4}}); err != nil {
			return err
		}
		return AddSideRow(ctx, tx, "after")
	})
	must(t, err, "transaction")
	events, err := s.Read(ctx, "s", 1)
	if err != nil || len(events) != 2 || events[0].Seq != 3 || events[1].Seq != 4 {
		t.Fatalf("Read = %+v, %v; want events 3 and 4", events, err)
	}
	parts, err := s.Partitions(ctx, "s")
	if err != nil || parts[0].Events != 2 {
		t.Fatalf("Partitions = %+v, %v; want a count of 2", parts, err)
	}
	if rows := f.SideRows(t); len(rows) != 1 {
		t.Fatalf("side rows = %v, want the transaction's own write", rows)
	}
}

// ClosedDatabaseIsErrClosed: once the caller closes the shared database under the
// store, its operations fail with eventstore.ErrClosed (a permanent error), not with
// a bare driver error that callers would retry.
func ClosedDatabaseIsErrClosed(t *testing.T, f Shared) {
	ctx := t.Context()
	if err := f.Store.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1, Type: "Started"}}); err != nil {
		t.Fatal(err)
	}
	f.DB.Close()
	if err := f.Store.Append(ctx, "s", 1, []eventstore.Event{{Seq: 2, Type: "Next"}}); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Append on a closed database: %v, want ErrClosed", err)
	}
	if _, err := f.Store.Read(ctx, "s", 1); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Read on a closed database: %v, want ErrClosed", err)
	}
}
