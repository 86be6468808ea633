package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/postgres"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/pgdb"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/jmoiron/sqlx"
)

// testPool is the pool size of test stores: enough for the suite's concurrent
// cases, small enough for many parallel tests on one server.
const testPool = 8

// open opens a store on schema (Open migrates it) and closes it when t ends.
func open(t testing.TB, dsn, schema string, now func() time.Time) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{
		DB:  postgres.DBOptions{Schema: schema, MaxOpenConns: testPool},
		Now: now,
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fresh opens a store on a new schema of its own.
func fresh(t testing.TB, now func() time.Time) *postgres.Store {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	return open(t, dsn, schema, now)
}

// corrupt damages one stored event the way an outside writer would: the data
// changes, the checksum does not.
func corrupt(t *testing.T, db *sqlx.DB, stream string, partition, seq int64) {
	t.Helper()
	res, err := db.Exec(`UPDATE es_events SET data = '\xdead'::bytea || data WHERE stream = $1 AND partition = $2 AND seq = $3`,
		stream, partition, seq)
	if err != nil {
		t.Fatalf("corrupt: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("corrupt: no event %s/%d/%d", stream, partition, seq)
	}
}

func TestConformance(t *testing.T) {
	pgtest.DSN(t) // skip, saying how to enable the test, before the suite starts
	conformance.TestEventStore(t, conformance.EventStoreFactory{
		New: func(t *testing.T, now func() time.Time) eventstore.EventStore { return fresh(t, now) },
		Corrupt: func(t *testing.T, s eventstore.EventStore, stream string, partition, seq int64) {
			corrupt(t, s.(*postgres.Store).DB(), stream, partition, seq)
		},
	})
}

func BenchmarkEventStore(b *testing.B) {
	bench.EventStore(b, func(b *testing.B) eventstore.EventStore { return fresh(b, nil) })
}

func ptr[T any](v T) *T { return &v }

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestReopenKeepsEverything writes every kind of state, closes the store (and its
// pool), opens the schema again and reads it all back.
func TestReopenKeepsEverything(t *testing.T) {
	ctx := t.Context()
	dsn, schema := pgtest.Schema(t)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return at }
	s := open(t, dsn, schema, now)
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

	s = open(t, dsn, schema, now)
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

// sharedDB opens one database schema holding this store's tables and a stand-in for
// another package's (its own migration line, like mq/postgres's "mq").
func sharedDB(t *testing.T) (*sqlx.DB, *postgres.Store) {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	db, err := postgres.OpenDB(t.Context(), dsn, postgres.DBOptions{Schema: schema, MaxOpenConns: testPool})
	must(t, err, "OpenDB")
	t.Cleanup(func() { db.Close() })
	s := postgres.New(db, postgres.Options{})
	must(t, s.Migrate(t.Context()), "Migrate")
	other := []migrate.Migration{{Version: 1, Name: "0001_side.sql", SQL: `CREATE TABLE side_rows (v TEXT NOT NULL)`}}
	must(t, migrate.Apply(t.Context(), db.DB, pgdb.Dialect, "side", other), "migrate side line")
	return db, s
}

func sideRows(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var rows []string
	must(t, db.Select(&rows, `SELECT v FROM side_rows ORDER BY v`), "select side rows")
	return rows
}

// turn writes what an orchestration turn writes, plus a row of the other package.
func turn(ctx context.Context, s *postgres.Store, tx *sqlx.Tx, stream string) error {
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
	_, err := tx.ExecContext(ctx, `INSERT INTO side_rows (v) VALUES ($1)`, stream)
	return err
}

func TestSharedDBTransactionCommitsAndRollsBackTogether(t *testing.T) {
	ctx := t.Context()
	db, s := sharedDB(t)
	must(t, sqltx.Run(ctx, db, func(tx *sqlx.Tx) error { return turn(ctx, s, tx, "kept") }), "committed turn")

	boom := errors.New("the queue write failed")
	err := sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
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
// caller commits anyway has left nothing of itself (it ran under a savepoint), and
// the transaction stays usable: PostgreSQL would otherwise refuse every later
// statement.
func TestFailedTxWriteLeavesNothing(t *testing.T) {
	ctx := t.Context()
	db, s := sharedDB(t)
	must(t, s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 3}}), "Append")
	err := sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
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
		_, err = tx.ExecContext(ctx, `INSERT INTO side_rows (v) VALUES ('after')`)
		return err
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
	if rows := sideRows(t, db); len(rows) != 1 {
		t.Fatalf("side rows = %v, want the transaction's own write", rows)
	}
}

// TestTxStatementErrorRollsBackToSavepoint: a twin whose statement PostgreSQL itself
// rejects (the transaction would be aborted) leaves the caller's transaction usable.
func TestTxStatementErrorRollsBackToSavepoint(t *testing.T) {
	ctx := t.Context()
	db, s := sharedDB(t)
	// Make the partition upsert fail after the events went in: a check the store's
	// own writes break.
	_, err := db.ExecContext(ctx, `ALTER TABLE es_partitions ADD CONSTRAINT small CHECK (event_count < 3)`)
	must(t, err, "add constraint")
	err = sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
		if err := s.AppendTx(ctx, tx, "s", 1, []eventstore.Event{{Seq: 1}, {Seq: 2}, {Seq: 3}}); err == nil {
			t.Error("AppendTx breaking a check succeeded")
		}
		if err := s.AppendTx(ctx, tx, "s", 1, []eventstore.Event{{Seq: 1}}); err != nil {
			return fmt.Errorf("AppendTx after a failed twin: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO side_rows (v) VALUES ('after')`)
		return err
	})
	must(t, err, "transaction")
	events, err := s.Read(ctx, "s", 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("Read = %+v, %v; want event 1 only", events, err)
	}
}

// TestConcurrentMigrate opens the same schema from several pools at once, as several
// processes starting together would, each migrating.
func TestConcurrentMigrate(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: postgres.DBOptions{Schema: schema, MaxOpenConns: 2}})
			if err != nil {
				errs <- fmt.Errorf("migrator %d: %w", i, err)
				return
			}
			// Migrating again is a no-op.
			if err := s.Migrate(context.Background()); err != nil {
				errs <- fmt.Errorf("migrator %d again: %w", i, err)
			}
			s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := open(t, dsn, schema, nil)
	var versions []int
	must(t, s.DB().Select(&versions, `SELECT version FROM duroq_migrations WHERE line = $1`, postgres.MigrationLine), "versions")
	if len(versions) != 1 || versions[0] != 1 {
		t.Fatalf("recorded versions = %v, want [1]", versions)
	}
	must(t, s.Append(t.Context(), "s", 1, []eventstore.Event{{Seq: 1}}), "Append after migrations")
}

// TestSchemasAreIsolated: two stores on two schemas of one database see nothing of
// each other.
func TestSchemasAreIsolated(t *testing.T) {
	ctx := t.Context()
	a, b := fresh(t, nil), fresh(t, nil)
	must(t, a.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1}}), "Append(a)")
	must(t, b.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1}}), "Append(b): the same key in another schema")
	if ids, err := b.ListStreams(ctx, eventstore.StreamFilter{}); err != nil || len(ids) != 1 {
		t.Fatalf("ListStreams(b) = %v, %v", ids, err)
	}
}

// TestDamagedChecksumIsCorruption: a checksum column holding no 32-bit value is
// reported as corrupt, not as a scan failure.
func TestDamagedChecksumIsCorruption(t *testing.T) {
	ctx := t.Context()
	s := fresh(t, nil)
	must(t, s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1, Data: []byte("x")}, {Seq: 2}}), "Append")
	for _, damage := range []string{
		`UPDATE es_events SET checksum = -1 WHERE seq = 2`,
		`UPDATE es_events SET checksum = 4294967296 WHERE seq = 2`,
		`UPDATE es_events SET checksum = checksum # 1 WHERE seq = 2`,
		`UPDATE es_events SET type = 'other' WHERE seq = 2`,
		`UPDATE es_events SET seq = 3 WHERE seq = 2`,
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

func TestOpenRejectsBadDSN(t *testing.T) {
	if _, err := postgres.Open(t.Context(), "postgres://%zz", postgres.Options{}); err == nil {
		t.Fatal("Open with a malformed DSN succeeded")
	}
}

func TestNilTxIsInvalid(t *testing.T) {
	ctx := t.Context()
	s := fresh(t, nil)
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

// TestDeleteWaitsForAnUncommittedTurn: a delete planned while a turn of the stream is
// in flight waits for it (the stream's row is locked) and then judges the committed
// state: the turn started a new partition, so the stream is running.
func TestDeleteWaitsForAnUncommittedTurn(t *testing.T) {
	ctx := t.Context()
	s := fresh(t, nil)
	completed := eventstore.StatusCompleted
	must(t, s.Append(ctx, "s", 1, []eventstore.Event{{Seq: 1}}), "Append")
	must(t, s.Update(ctx, "s", eventstore.StreamUpdate{Partition: 1, Status: &completed}), "Update")

	tx, err := s.DB().BeginTxx(ctx, nil)
	must(t, err, "begin")
	defer tx.Rollback()
	must(t, s.AppendTx(ctx, tx, "s", 2, []eventstore.Event{{Seq: 1}}), "AppendTx(partition 2)")

	done := make(chan error, 1)
	go func() {
		_, err := s.Delete(ctx, []string{"s"}, eventstore.DeleteOptions{})
		done <- err
	}()
	// The delete cannot finish while the turn holds the stream.
	select {
	case err := <-done:
		t.Fatalf("Delete returned %v while a turn of the stream was uncommitted; it must wait", err)
	case <-time.After(200 * time.Millisecond):
	}
	must(t, tx.Commit(), "commit")
	if err := <-done; !errors.Is(err, eventstore.ErrRunning) {
		t.Fatalf("Delete after the turn committed = %v, want ErrRunning (partition 2 is running)", err)
	}
	if p, err := s.LatestPartition(ctx, "s"); err != nil || p != 2 {
		t.Fatalf("LatestPartition = %d, %v; want 2", p, err)
	}
}

// TestConcurrentWritersAcrossProcesses runs several stores, each with a pool of its
// own as separate processes would have, writing and deleting a few overlapping
// streams at once, with parent links that form trees and cycles and deletes that
// take two streams with their descendants, and turns through the Tx twins in
// transactions of their own. Every call must succeed or fail with a contract error;
// no transaction may deadlock (the one order of locks makes it
// impossible, so none is retried); afterwards every partition's counters match its
// events and nothing is left without its stream.
func TestConcurrentWritersAcrossProcesses(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	const (
		processes = 4
		workers   = 4
		rounds    = 150
		streams   = 4
	)
	stores := make([]*postgres.Store, processes)
	for i := range stores {
		stores[i] = open(t, dsn, schema, nil)
	}
	var wg sync.WaitGroup
	errs := make(chan error, processes*workers*rounds)
	for p := range processes {
		for w := range workers {
			wg.Go(func() {
				ctx := context.Background()
				s := stores[p]
				r := rand.New(rand.NewPCG(uint64(p), uint64(w)))
				for range rounds {
					stream := fmt.Sprintf("s%d", r.IntN(streams))
					parent := fmt.Sprintf("s%d", r.IntN(streams))
					partition := int64(1 + r.IntN(3))
					status := []eventstore.Status{eventstore.StatusRunning, eventstore.StatusCompleted, eventstore.StatusContinuedAsNew}[r.IntN(3)]
					var err error
					first := int64(1 + r.IntN(20))
					events := []eventstore.Event{{Seq: first, Data: []byte("a")}, {Seq: first + 1, Data: []byte("bb")}}
					switch r.IntN(8) {
					case 0, 1:
						err = s.Append(ctx, stream, partition, events)
					case 7:
						// A turn through the twins, in a transaction of the caller's;
						// a deadlock here would reach the caller.
						err = sqltx.Run(ctx, s.DB(), func(tx *sqlx.Tx) error {
							if _, _, err := s.ReadLatestTx(ctx, tx, stream); err != nil {
								return err
							}
							if err := s.AppendTx(ctx, tx, stream, partition, events); err != nil {
								return err
							}
							if err := s.ApplyKVTx(ctx, tx, stream, partition, []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "t", Value: "v"}}); err != nil {
								return err
							}
							if _, err := s.SetCustomStatusTx(ctx, tx, stream, ptr("turn")); err != nil {
								return err
							}
							return s.UpdateTx(ctx, tx, stream, eventstore.StreamUpdate{Partition: partition, Status: &status})
						})
					case 2:
						u := eventstore.StreamUpdate{Partition: partition, Status: &status}
						if parent != stream {
							u.Parent = &parent
						}
						err = s.Update(ctx, stream, u)
					case 3:
						err = s.ApplyKV(ctx, stream, partition, []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "k", Value: "v"}})
					case 4:
						_, err = s.SetCustomStatus(ctx, stream, ptr("x"))
					case 5:
						_, err = s.Prune(ctx, stream, eventstore.PruneOptions{})
					case 6:
						_, err = s.Delete(ctx, []string{stream, parent}, eventstore.DeleteOptions{Force: true, AllowNonRoot: true})
					}
					if err != nil && !errors.Is(err, eventstore.ErrConflict) && !errors.Is(err, eventstore.ErrNotFound) {
						errs <- fmt.Errorf("process %d worker %d: %w", p, w, err)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, s := range stores {
		if n := postgres.Retries(s); n > 0 {
			t.Errorf("process %d ran %d transactions again after a deadlock or another transient failure; want none", i, n)
		}
	}
	// Counters agree with the stored events, whatever interleaving happened.
	var mismatches []string
	must(t, stores[0].DB().Select(&mismatches, `
		SELECT p.stream || '/' || p.partition || ': ' || p.event_count || ' counted, ' || COUNT(e.seq) || ' stored'
		FROM es_partitions p LEFT JOIN es_events e ON e.stream = p.stream AND e.partition = p.partition
		GROUP BY p.stream, p.partition, p.event_count, p.bytes
		HAVING p.event_count <> COUNT(e.seq) OR p.bytes <> COALESCE(SUM(length(e.data)), 0)`), "check counters")
	if len(mismatches) > 0 {
		t.Fatalf("partition counters disagree with the events: %v", mismatches)
	}
	var orphans []string
	must(t, stores[0].DB().Select(&orphans, `
		SELECT DISTINCT stream FROM es_partitions WHERE stream NOT IN (SELECT stream FROM es_streams)
		UNION SELECT DISTINCT stream FROM es_events WHERE stream NOT IN (SELECT stream FROM es_streams)`), "check orphans")
	if len(orphans) > 0 {
		t.Fatalf("partitions or events without a stream: %v", orphans)
	}
}
