package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/txn"
)

// TxPairFactory makes a queue and an event store that share a database, for
// TestTransactional.
type TxPairFactory struct {
	// New returns a fresh, empty queue and store living in one database (their
	// Database methods return equal values). The suite closes both.
	New func(t *testing.T) (mq.TxQueue, eventstore.TxStore)
}

// TestTransactional runs the conformance suite of the seam between the primitives
// (package txn): a queue and a store whose writes join one transaction of their
// shared database commit together and roll back together, wake consumers only
// once committed, and refuse transactions of another database. A pair that passes
// it can be composed by adapter.New into a runtime provider.
func TestTransactional(t *testing.T, f TxPairFactory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("conformance: TxPairFactory.New is nil")
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, p txPair)
	}{
		{"SharedDatabaseIsEqual", testTxSharedDatabaseIsEqual},
		{"WritesCommitTogether", testTxWritesCommitTogether},
		{"WritesRollBackTogether", testTxWritesRollBackTogether},
		{"FailedStoreWriteUndoesQueueWrite", testTxFailedStoreWriteUndoesQueueWrite},
		{"AckCommitsWithHistory", testTxAckCommitsWithHistory},
		{"DequeueInTransactionLocksUntilRollback", testTxDequeueLocksUntilRollback},
		{"ReadStatesSkipsAbsentStreams", testTxReadStates},
		{"ListStreamInfosSeesOwnWrites", testTxListStreamInfos},
		{"CommitWakesWaitingConsumer", testTxCommitWakesWaitingConsumer},
		{"ForeignTransactionIsRefused", testTxForeignTransactionIsRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q, s := f.New(t)
			if q == nil || s == nil {
				t.Fatal("conformance: TxPairFactory.New returned a nil backend")
			}
			t.Cleanup(func() {
				if err := errors.Join(q.Close(), s.Close()); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			c.run(t, txPair{q: q, s: s})
		})
	}
}

type txPair struct {
	q mq.TxQueue
	s eventstore.TxStore
}

// run runs fn in a transaction of the pair's database with both backends in it.
func (p txPair) run(t *testing.T, fn func(ctx context.Context, q mq.QueueTx, s eventstore.StoreTx) error) error {
	t.Helper()
	return p.q.Database().Run(t.Context(), func(ctx context.Context, tx txn.Tx) error {
		q, err := p.q.In(tx)
		if err != nil {
			t.Fatalf("queue In(a transaction of its own database): %v", err)
		}
		s, err := p.s.In(tx)
		if err != nil {
			t.Fatalf("store In(a transaction of its own database): %v", err)
		}
		return fn(ctx, q, s)
	})
}

var txEvents = []eventstore.Event{{Seq: 1, Type: "started", Data: []byte("a")}, {Seq: 2, Type: "step", Data: []byte("b")}}

// writeBoth enqueues payload in qn and appends txEvents to stream.
func writeBoth(ctx context.Context, q mq.QueueTx, s eventstore.StoreTx, stream, payload string) error {
	if err := q.Enqueue(ctx, msg(payload)); err != nil {
		return err
	}
	return s.Append(ctx, stream, 1, txEvents)
}

func testTxSharedDatabaseIsEqual(t *testing.T, p txPair) {
	a, b := p.q.Database(), p.s.Database()
	if a == nil || b == nil {
		t.Fatalf("Database() = %v, %v; want the shared database", a, b)
	}
	if a != b {
		t.Fatalf("the queue's Database (%T) is not == the store's (%T): adapter.New could not compose them", a, b)
	}
	if p.q.Database() != a {
		t.Fatal("Database returns unequal values on two calls")
	}
}

func testTxWritesCommitTogether(t *testing.T, p txPair) {
	if err := p.run(t, func(ctx context.Context, q mq.QueueTx, s eventstore.StoreTx) error {
		return writeBoth(ctx, q, s, "st", "m1")
	}); err != nil {
		t.Fatal(err)
	}
	fetchPayloads(t, p.q, mq.DequeueOptions{}, "the committed message", "m1")
	evs, err := p.s.Read(t.Context(), "st", 1)
	if err != nil || len(evs) != 2 {
		t.Fatalf("Read after commit = %d events, %v; want the 2 appended", len(evs), err)
	}
}

func testTxWritesRollBackTogether(t *testing.T, p txPair) {
	boom := errors.New("the caller gives up")
	err := p.run(t, func(ctx context.Context, q mq.QueueTx, s eventstore.StoreTx) error {
		if err := writeBoth(ctx, q, s, "st", "m1"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v; want the function's error", err)
	}
	wantEmpty(t, p.q, qn, "a rolled-back enqueue leaves nothing")
	if _, err := p.s.Stream(t.Context(), "st"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("Stream after a rolled-back append = %v; want ErrNotFound", err)
	}
}

func testTxFailedStoreWriteUndoesQueueWrite(t *testing.T, p txPair) {
	if err := p.s.Append(t.Context(), "st", 1, txEvents[:1]); err != nil {
		t.Fatal(err)
	}
	err := p.run(t, func(ctx context.Context, q mq.QueueTx, s eventstore.StoreTx) error {
		if err := q.Enqueue(ctx, msg("m1")); err != nil {
			return err
		}
		return s.Append(ctx, "st", 1, txEvents) // seq 1 exists: a conflict
	})
	if !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("Run = %v; want the store's ErrConflict", err)
	}
	wantEmpty(t, p.q, qn, "the enqueue of a transaction whose store write failed is undone")
}

func testTxAckCommitsWithHistory(t *testing.T, p txPair) {
	put(t, p.q, kmsg("inst", "m1"))
	b := mustFetch(t, p.q, mq.DequeueOptions{LockTimeout: long}, "the message")
	boom := errors.New("crash before commit")
	if err := p.run(t, func(ctx context.Context, q mq.QueueTx, s eventstore.StoreTx) error {
		if _, err := q.Ack(ctx, b.Token); err != nil {
			return err
		}
		if err := s.Append(ctx, "inst", 1, txEvents); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, err := p.q.Lock(t.Context(), b.Token); err != nil {
		t.Fatalf("after a rolled-back ack the lock must still hold: %v", err)
	}
	var infos []mq.LockInfo
	if err := p.run(t, func(ctx context.Context, q mq.QueueTx, s eventstore.StoreTx) error {
		var err error
		if infos, err = q.Ack(ctx, b.Token); err != nil {
			return err
		}
		return s.Commit(ctx, []eventstore.StreamCommit{{Stream: "inst", Events: txEvents, Update: eventstore.StreamUpdate{Partition: 1}}})
	}); err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Queue != qn || infos[0].RoutingKey != "inst" {
		t.Errorf("Ack said the token held %+v; want queue %q, key inst", infos, qn)
	}
	wantEmpty(t, p.q, qn, "the committed ack deleted the message")
	if evs, err := p.s.Read(t.Context(), "inst", 1); err != nil || len(evs) != 2 {
		t.Fatalf("Read = %d events, %v; want the 2 committed with the ack", len(evs), err)
	}
	if _, err := p.q.Lock(t.Context(), b.Token); !errors.Is(err, mq.ErrLockLost) {
		t.Fatalf("Lock after the committed ack = %v; want ErrLockLost", err)
	}
}

func testTxDequeueLocksUntilRollback(t *testing.T, p txPair) {
	put(t, p.q, kmsg("A", "a1"), kmsg("B", "b1"), kmsg("C", "c1"))
	var got []string
	err := p.run(t, func(ctx context.Context, q mq.QueueTx, _ eventstore.StoreTx) error {
		batches, err := q.DequeueBatches(ctx, qn, mq.DequeueOptions{LockTimeout: long}, 2)
		for _, b := range batches {
			got = append(got, b.RoutingKey)
		}
		if err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil || !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("DequeueBatches(max 2) in a transaction = %v, %v; want keys A and B", got, err)
	}
	wantStats(t, p.q, qn, mq.Stats{Ready: 3}, "locks taken in a rolled-back transaction are not held")
	if err := p.run(t, func(ctx context.Context, q mq.QueueTx, _ eventstore.StoreTx) error {
		_, err := q.DequeueBatches(ctx, qn, mq.DequeueOptions{LockTimeout: long}, 5)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantStats(t, p.q, qn, mq.Stats{Locked: 3}, "locks taken in a committed transaction hold")
}

func testTxReadStates(t *testing.T, p txPair) {
	ctx := t.Context()
	if err := p.s.Append(ctx, "one", 1, txEvents); err != nil {
		t.Fatal(err)
	}
	var states map[string]*eventstore.StreamState
	if err := p.run(t, func(ctx context.Context, _ mq.QueueTx, s eventstore.StoreTx) (err error) {
		states, err = s.ReadStates(ctx, []string{"one", "absent"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states["one"] == nil || len(states["one"].Events) != 2 || states["one"].Info.CurrentPartition != 1 {
		t.Fatalf("ReadStates(one, absent) = %+v; want only one, with its 2 events in partition 1", states)
	}
}

// testTxListStreamInfos lists, inside a transaction, a stream the transaction
// renamed, and after the rollback the stream as it was.
func testTxListStreamInfos(t *testing.T, p txPair) {
	ctx := t.Context()
	if err := p.s.Append(ctx, "one", 1, txEvents); err != nil {
		t.Fatal(err)
	}
	byName := eventstore.StreamFilter{Name: "renamed"}
	boom := errors.New("the caller gives up")
	err := p.run(t, func(ctx context.Context, _ mq.QueueTx, s eventstore.StoreTx) error {
		if err := s.Update(ctx, "one", eventstore.StreamUpdate{Partition: 1, Name: ptr("renamed")}); err != nil {
			return err
		}
		infos, err := s.ListStreamInfos(ctx, byName)
		if err != nil {
			return err
		}
		if len(infos) != 1 || infos[0].Stream != "one" || infos[0].Name != "renamed" || infos[0].CurrentPartition != 1 {
			t.Errorf("ListStreamInfos(Name renamed) in the transaction that renamed one = %+v; want one, renamed", infos)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v; want the function's error", err)
	}
	if infos, err := p.s.ListStreamInfos(ctx, byName); err != nil || len(infos) != 0 {
		t.Fatalf("ListStreamInfos(Name renamed) after the rollback = %+v, %v; want none", infos, err)
	}
}

func testTxCommitWakesWaitingConsumer(t *testing.T, p txPair) {
	got := make(chan *mq.Batch, 1)
	go func() {
		b, err := p.q.DequeueBatch(t.Context(), qn, mq.DequeueOptions{Wait: time.Minute})
		if err != nil {
			t.Errorf("waiting DequeueBatch: %v", err)
		}
		got <- b
	}()
	time.Sleep(50 * time.Millisecond) // let the consumer start waiting
	committed := time.Now()
	if err := p.run(t, func(ctx context.Context, q mq.QueueTx, _ eventstore.StoreTx) error {
		return q.Enqueue(ctx, msg("m1"))
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if b == nil || string(b.Messages[0].Payload) != "m1" {
			t.Fatalf("the waiting consumer got %v; want m1", b)
		}
		if waited := time.Since(committed); waited > 10*time.Second {
			t.Fatalf("the consumer woke %v after the commit; the commit must wake it", waited)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a consumer waiting for the queue was not woken by a committed enqueue")
	}
}

// alienTx is a transaction of no backend's database.
type alienTx struct{}

func (alienTx) AfterCommit(func()) {}

func testTxForeignTransactionIsRefused(t *testing.T, p txPair) {
	other := txn.NewMemoryDatabase()
	err := other.Run(t.Context(), func(_ context.Context, memTx txn.Tx) error {
		for _, tx := range []txn.Tx{alienTx{}, memTx} {
			if _, err := p.q.In(tx); !errors.Is(err, mq.ErrInvalid) {
				t.Errorf("queue In(%T of another database) = %v; want ErrInvalid", tx, err)
			}
			if _, err := p.s.In(tx); !errors.Is(err, eventstore.ErrInvalid) {
				t.Errorf("store In(%T of another database) = %v; want ErrInvalid", tx, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
