package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
)

// TestDequeueBatchesAndSettleUnderContention: consumers in two backend instances
// fetch several small bounded batches at once from hot keys and settle each fetch in
// one Settle call, message by message: most batches are acked whole, some ack a
// prefix and release the rest (with or without a retry delay, which keeps the key
// held), some dead-letter a message. No key may be held twice, each key's messages
// must be finished in order, exactly once, and the lock protocol must cause no
// deadlock.
func TestDequeueBatchesAndSettleUnderContention(t *testing.T) {
	q1, dsn, schema := openSchema(t)
	q2 := openOn(t, dsn, schema)
	const (
		queue     = "hot"
		dlq       = "dead"
		perKey    = 150
		consumers = 8
	)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	total := len(keys) * perKey
	ledger := newKeyLedger(t)
	producers := produce(t, q1, queue, keys, perKey)

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var calls, batches, retried, held, deadLettered atomic.Int64
	var wg sync.WaitGroup
	for c := range consumers {
		q := []*postgres.Queue{q1, q2}[c%2]
		wg.Go(func() {
			opts := mq.DequeueOptions{LockTimeout: time.Minute, Wait: 50 * time.Millisecond, MaxMessages: 3}
			for ctx.Err() == nil && ledger.acked() < total && !t.Failed() {
				bs, err := q.DequeueBatches(ctx, queue, opts, 3)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("consumer %d: DequeueBatches: %v", c, err)
					}
					return
				}
				var ss []mq.Settlement
				for _, b := range bs {
					ledger.take(c, b)
					n := len(b.Messages)
					st := mq.Settlement{Token: b.Token, Acked: n}
					switch rand.IntN(10) {
					case 0: // a message fails: the ones before it are done, it and the rest come again
						st = mq.Settlement{Token: b.Token, Acked: rand.IntN(n), Tried: 1, Reason: "retry",
							Delay: time.Duration(rand.IntN(3)) * 10 * time.Millisecond}
						retried.Add(1)
						if st.HoldsKey(n) {
							held.Add(1)
						}
					case 1:
						st = mq.Settlement{Token: b.Token, Acked: rand.IntN(n), DeadLettered: 1, DeadLetterQueue: dlq, Reason: "poison"}
						deadLettered.Add(1)
					}
					ledger.release(b, st.Acked+st.DeadLettered) // before the call: once it returns, others may hold the key
					ss = append(ss, st)
				}
				if len(ss) == 0 {
					continue
				}
				calls.Add(1)
				batches.Add(int64(len(ss)))
				if err := q.Settle(ctx, ss...); err != nil {
					t.Errorf("consumer %d: Settle of %d batches: %v", c, len(ss), err)
					return
				}
			}
		})
	}
	producers.Wait()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if got := ledger.acked(); got != total {
		t.Fatalf("%d of %d messages finished before the timeout", got, total)
	}
	if st, err := q1.Stats(t.Context(), queue); err != nil || st.Ready+st.Locked+st.Delayed != 0 {
		t.Fatalf("Stats after draining = %+v, %v; want an empty queue", st, err)
	}
	if st, err := q1.Stats(t.Context(), dlq); err != nil || st.Ready != int(deadLettered.Load()) {
		t.Fatalf("dead-letter queue Stats = %+v, %v; want %d ready dead letters", st, err, deadLettered.Load())
	}
	if n := postgres.Retries(q1) + postgres.Retries(q2); n != 0 {
		t.Fatalf("%d transient failures (deadlocks or serialization failures) were retried; the lock protocol should cause none", n)
	}
	t.Logf("%d messages on %d hot keys: %d batches settled in %d calls (%d retried, %d holding their key, %d dead letters); %d attempts lost a key",
		total, len(keys), batches.Load(), calls.Load(), retried.Load(), held.Load(), deadLettered.Load(), postgres.Losses(q1)+postgres.Losses(q2))
}

// TestPurgeAndRedriveSpanMoreKeysThanOneTransactionCanLock: one transaction taking
// the advisory locks of 20,000 routing keys fails with "out of shared memory" on a
// default server (its lock table holds about 13,000 locks for all sessions), so
// Redrive and Purge work through the keys a thousand per transaction.
func TestPurgeAndRedriveSpanMoreKeysThanOneTransactionCanLock(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	const keys = 20000
	msgs := make([]mq.Message, keys)
	for i := range msgs {
		msgs[i] = mq.Message{Queue: "dead", RoutingKey: fmt.Sprintf("k%05d", i), Payload: []byte("x")}
	}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	// Make them dead letters of "work" as Settle would, without 20,000 fetches.
	if _, err := q.DB().ExecContext(ctx, `UPDATE mq_messages SET origin_queue = 'work', dead_lettered_at = 1 WHERE queue = 'dead'`); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Redrive(ctx, "dead", mq.RedriveOptions{}); err != nil || n != keys {
		t.Fatalf("Redrive = %d, %v; want %d", n, err, keys)
	}
	if st, err := q.Stats(ctx, "work"); err != nil || st.Ready != keys {
		t.Fatalf("Stats(work) after Redrive = %+v, %v; want %d ready", st, err, keys)
	}
	if n, err := q.Purge(ctx, "work", mq.PurgeOptions{}); err != nil || n != keys {
		t.Fatalf("Purge = %d, %v; want %d", n, err, keys)
	}
	if st, err := q.Stats(ctx, "work"); err != nil || st != (mq.Stats{}) {
		t.Fatalf("Stats(work) after Purge = %+v, %v; want an empty queue", st, err)
	}
}

// TestDamagedStorageIsReportedAsCorrupt: PostgreSQL's data_corrupted and
// index_corrupted errors (simulated by triggers) match mq.ErrCorrupt and are not
// retried.
func TestDamagedStorageIsReportedAsCorrupt(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	if err := q.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("stored before the damage")}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE FUNCTION damaged_page() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'simulated damaged page' USING ERRCODE = 'data_corrupted'; END $$`,
		`CREATE FUNCTION damaged_index() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'simulated damaged index' USING ERRCODE = 'index_corrupted'; END $$`,
		`CREATE TRIGGER damaged_page BEFORE INSERT ON mq_messages FOR EACH ROW EXECUTE FUNCTION damaged_page()`,
		`CREATE TRIGGER damaged_index BEFORE UPDATE ON mq_messages FOR EACH ROW EXECUTE FUNCTION damaged_index()`,
	} {
		if _, err := q.DB().ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Enqueue(ctx, mq.Message{Queue: "q"}); !errors.Is(err, mq.ErrCorrupt) {
		t.Errorf("Enqueue on a damaged page = %v, want ErrCorrupt", err)
	}
	if _, err := q.DequeueBatch(ctx, "q", mq.DequeueOptions{}); !errors.Is(err, mq.ErrCorrupt) {
		t.Errorf("DequeueBatch on a damaged index = %v, want ErrCorrupt", err)
	}
	if n := postgres.Retries(q); n != 0 {
		t.Errorf("%d retries of permanent errors, want none", n)
	}
}

// TestReasonsPostgreSQLCannotStoreAreReplaced: a failure reason is free text (often
// an error message), so what PostgreSQL text cannot hold is replaced by U+FFFD
// instead of failing the settlement, and the result stays within MaxReasonSize.
func TestReasonsPostgreSQLCannotStoreAreReplaced(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	for _, tc := range []struct{ reason, want string }{
		{"nul\x00and\xffbad", "nul\uFFFDand\uFFFDbad"},
		// Each invalid byte becomes three: 4,096 bytes, clipped again.
		{strings.Repeat("\xffa", mq.MaxReasonSize/2), strings.Repeat("\uFFFDa", mq.MaxReasonSize/4)},
	} {
		if err := q.Enqueue(ctx, mq.Message{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		b, err := q.DequeueBatch(ctx, "q", mq.DequeueOptions{})
		if err != nil || b == nil {
			t.Fatalf("DequeueBatch = %v, %v", b, err)
		}
		if err := q.Settle(ctx, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "dlq", Reason: tc.reason}); err != nil {
			t.Fatalf("Settle with reason %q: %v", mq.Clip(tc.reason), err)
		}
		infos, err := q.Peek(ctx, "dlq", mq.PeekOptions{AfterID: b.Messages[0].ID - 1, Limit: 1})
		if err != nil || len(infos) != 1 {
			t.Fatalf("Peek = %v, %v", infos, err)
		}
		got := infos[0].LastError
		if got != tc.want || !utf8.ValidString(got) || len(got) > mq.MaxReasonSize {
			t.Errorf("reason %q stored as %q (%d bytes), want %q", mq.Clip(tc.reason), mq.Clip(got), len(got), mq.Clip(tc.want))
		}
	}
}

// TestMovedMessageMeetingAConcurrentEnqueueOfItsKeyIsRetried: a dead letter or a
// redriven message drops its message key when its new queue holds the key. When an
// Enqueue of that key into that queue is in flight, the move waits for it and, once
// it commits, fails on the key's unique index; the move is retried (no error for
// the caller) and drops the key.
func TestMovedMessageMeetingAConcurrentEnqueueOfItsKeyIsRetried(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	// racing runs move while an uncommitted Enqueue of key into queue waits, and
	// commits the Enqueue once move waits for it.
	racing := func(queue, key string, move func() error) {
		t.Helper()
		tx, err := q.DB().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := q.EnqueueTx(ctx, tx, mq.Message{Queue: queue, Key: key, Payload: []byte("enqueued meanwhile")}); err != nil {
			t.Fatal(err)
		}
		var xid string
		if err := tx.GetContext(ctx, &xid, `SELECT (pg_current_xact_id()::text::numeric % 4294967296)::text`); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- move() }()
		for waiting := false; !waiting; {
			select {
			case err := <-done:
				t.Fatalf("the move ended (%v) before the enqueue of its key committed", err)
			case <-time.After(time.Millisecond):
			}
			if err := q.DB().GetContext(ctx, &waiting, `SELECT EXISTS (SELECT 1 FROM pg_locks
				WHERE locktype = 'transactionid' AND transactionid = $1::xid AND NOT granted)`, xid); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("the move failed: %v", err)
		}
	}
	keyOf := func(queue string, id int64) string {
		t.Helper()
		infos, err := q.Peek(ctx, queue, mq.PeekOptions{AfterID: id - 1, Limit: 1})
		if err != nil || len(infos) != 1 || infos[0].ID != id {
			t.Fatalf("Peek(%s) at %d = %+v, %v", queue, id, infos, err)
		}
		return infos[0].Key
	}

	if err := q.Enqueue(ctx, mq.Message{Queue: "work", Key: "k", Payload: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	b, err := q.DequeueBatch(ctx, "work", mq.DequeueOptions{})
	if err != nil || b == nil {
		t.Fatalf("DequeueBatch = %v, %v", b, err)
	}
	id := b.Messages[0].ID
	racing("dead", "k", func() error {
		return q.Settle(ctx, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "dead"})
	})
	if key := keyOf("dead", id); key != "" {
		t.Fatalf("the dead letter kept message key %q, which the dead-letter queue holds", key)
	}

	if _, err := q.Purge(ctx, "dead", mq.PurgeOptions{IDs: []int64{id}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(ctx, mq.Message{Queue: "work", Key: "j", Payload: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	if b, err = q.DequeueBatch(ctx, "work", mq.DequeueOptions{}); err != nil || b == nil {
		t.Fatalf("DequeueBatch = %v, %v", b, err)
	}
	id = b.Messages[0].ID
	if err := q.Settle(ctx, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "dead"}); err != nil {
		t.Fatal(err)
	}
	racing("work", "j", func() error {
		n, err := q.Redrive(ctx, "dead", mq.RedriveOptions{IDs: []int64{id}})
		if err == nil && n != 1 {
			err = fmt.Errorf("Redrive moved %d messages, want 1", n)
		}
		return err
	})
	if key := keyOf("work", id); key != "" {
		t.Fatalf("the redriven message kept message key %q, which its queue holds", key)
	}
	if n := postgres.Retries(q); n != 2 {
		t.Fatalf("%d retries, want 2 (one per move that met the enqueued key)", n)
	}
}
