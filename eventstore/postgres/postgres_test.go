package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/postgres"
	"github.com/duroq/duroq/internal/estest"
	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/pgdb"
)

// testPool is the pool size of test stores: enough for the suite's concurrent
// cases, small enough for many parallel tests on one server.
const testPool = 8

// open opens a store on schema (Open migrates it) and closes it when t ends.
func open(t testing.TB, dsn, schema string, now func() time.Time) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{
		DB:  pgdb.Options{Schema: schema, MaxOpenConns: testPool},
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

func TestConformance(t *testing.T) {
	pgtest.DSN(t) // skip, saying how to enable the test, before the suite starts
	conformance.TestEventStore(t, conformance.EventStoreFactory{
		New: func(t *testing.T, now func() time.Time) eventstore.EventStore { return fresh(t, now) },
		Corrupt: func(t *testing.T, s eventstore.EventStore, stream string, partition, seq int64) {
			estest.Corrupt(t, s.(*postgres.Store), `'\xdead'::bytea`, stream, partition, seq)
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
	dsn, schema := pgtest.Schema(t)
	estest.ReopenKeepsEverything(t, func(now func() time.Time) eventstore.EventStore { return open(t, dsn, schema, now) })
}

// sharedDB opens one database schema holding this store's tables and a stand-in for
// another package's (its own migration line, like mq/postgres's "mq").
func sharedDB(t *testing.T) estest.Shared {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	db, err := pgdb.Open(t.Context(), dsn, pgdb.Options{Schema: schema, MaxOpenConns: testPool})
	must(t, err, "open the database")
	t.Cleanup(func() { db.Close() })
	s := postgres.New(db, postgres.Options{})
	must(t, s.Migrate(t.Context()), "Migrate")
	estest.SideTable(t, db, pgsql.Dialect)
	return estest.Shared{DB: db, Store: s, Run: func(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
		return sqltx.Run(ctx, db, fn)
	}}
}

func TestSharedDBTransactionCommitsAndRollsBackTogether(t *testing.T) {
	estest.TransactionCommitsAndRollsBackTogether(t, sharedDB(t))
}

func TestFailedTxWriteLeavesNothing(t *testing.T) {
	estest.FailedTxWriteLeavesNothing(t, sharedDB(t))
}

// TestTxStatementErrorRollsBackToSavepoint: a twin whose statement PostgreSQL itself
// rejects (the transaction would be aborted) leaves the caller's transaction usable.
func TestTxStatementErrorRollsBackToSavepoint(t *testing.T) {
	ctx := t.Context()
	f := sharedDB(t)
	db, s := f.DB, f.Store
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
		return estest.AddSideRow(ctx, tx, "after")
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
	estest.ConcurrentMigrate(t, 8, func(int) error {
		s, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 2}})
		if err != nil {
			return err
		}
		defer s.Close()
		// Migrating again is a no-op.
		if err := s.Migrate(context.Background()); err != nil {
			return fmt.Errorf("again: %w", err)
		}
		return nil
	}, func() estest.TxStore { return open(t, dsn, schema, nil) }, postgres.MigrationLine)
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

// TestDamagedChecksumIsCorruption: a checksum column holding no 32-bit value, or a
// row changed outside the store, is reported as corrupt, not as a scan failure.
func TestDamagedChecksumIsCorruption(t *testing.T) {
	estest.DamageIsCorruption(t, fresh(t, nil), []string{
		`UPDATE es_events SET checksum = -1 WHERE seq = 2`,
		`UPDATE es_events SET checksum = 4294967296 WHERE seq = 2`,
		`UPDATE es_events SET checksum = checksum # 1 WHERE seq = 2`,
		`UPDATE es_events SET type = 'other' WHERE seq = 2`,
		`UPDATE es_events SET seq = 3 WHERE seq = 2`,
	})
}

func TestOpenRejectsBadDSN(t *testing.T) {
	if _, err := postgres.Open(t.Context(), "postgres://%zz", postgres.Options{}); err == nil {
		t.Fatal("Open with a malformed DSN succeeded")
	}
}

func TestNilTxIsInvalid(t *testing.T) {
	estest.NilTxIsInvalid(t, fresh(t, nil))
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
	retries := make([]func() int64, processes)
	for i := range stores {
		db, err := pgdb.Open(t.Context(), dsn, pgdb.Options{Schema: schema, MaxOpenConns: testPool})
		must(t, err, "open the database")
		t.Cleanup(func() { db.Close() })
		stores[i], retries[i] = postgres.NewCounting(db, postgres.Options{})
		must(t, stores[i].Migrate(t.Context()), "migrate")
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
	for i, retried := range retries {
		if n := retried(); n > 0 {
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

func TestCommitManyMatchesAppendThenUpdate(t *testing.T) {
	estest.CommitManyMatchesAppendThenUpdate(t, func(t *testing.T, now func() time.Time) estest.CommitStore {
		return fresh(t, now)
	}, sqltx.Run)
}

func TestCommitManyIsAllOrNothing(t *testing.T) {
	estest.CommitManyIsAllOrNothing(t, fresh(t, nil), sqltx.Run)
}

func TestClosedDatabaseIsErrClosed(t *testing.T) {
	estest.ClosedDatabaseIsErrClosed(t, sharedDB(t))
}
