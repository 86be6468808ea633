package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/jmoiron/sqlx"
)

// keyLedger checks, across consumers, that no routing key is held by two batches at
// once and that each key's messages are delivered in order, each exactly once.
type keyLedger struct {
	t      *testing.T
	mu     sync.Mutex
	holder map[string]int // routing key -> consumer holding its batch
	next   map[string]int // routing key -> sequence number its next batch must start at
	done   int            // messages finished
}

func newKeyLedger(t *testing.T) *keyLedger {
	return &keyLedger{t: t, holder: map[string]int{}, next: map[string]int{}}
}

// take records that consumer c received b; it fails the test on a key held twice or
// a sequence gap.
func (l *keyLedger) take(c int, b *mq.Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.holder[b.RoutingKey]; ok {
		l.t.Errorf("consumer %d received key %q while consumer %d holds it", c, b.RoutingKey, h)
	}
	l.holder[b.RoutingKey] = c
	for i, d := range b.Messages {
		key, seq := parsePayload(l.t, d.Payload)
		if key != b.RoutingKey {
			l.t.Errorf("message %q is in the batch of key %q", d.Payload, b.RoutingKey)
		}
		if want := l.next[key] + i; seq != want {
			l.t.Errorf("key %q: batch message %d is %q, want sequence %d (each key's messages in order, exactly once)", key, i, d.Payload, want)
		}
	}
}

// release records that the batch of key ends with its first finished messages done
// (acked or dead-lettered), which advance the key; the others come again.
func (l *keyLedger) release(b *mq.Batch, finished int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.holder, b.RoutingKey)
	l.next[b.RoutingKey] += finished
	l.done += finished
}

func (l *keyLedger) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

func payloadOf(key string, seq int) []byte { return fmt.Appendf(nil, "%s/%d", key, seq) }

func parsePayload(t *testing.T, p []byte) (string, int) {
	key, seq, ok := strings.Cut(string(p), "/")
	n, err := strconv.Atoi(seq)
	if !ok || err != nil {
		t.Fatalf("unexpected payload %q", p)
	}
	return key, n
}

// produce enqueues perKey messages for each key, one producer goroutine per key so
// each key's enqueue order is its sequence order, in small random batches.
func produce(t *testing.T, q mq.MessageQueue, queue string, keys []string, perKey int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			for seq := 0; seq < perKey; {
				n := min(1+rand.IntN(5), perKey-seq)
				msgs := make([]mq.Message, n)
				for i := range msgs {
					msgs[i] = mq.Message{Queue: queue, RoutingKey: key, Payload: payloadOf(key, seq+i)}
				}
				if err := q.Enqueue(t.Context(), msgs...); err != nil {
					t.Errorf("Enqueue: %v", err)
					return
				}
				seq += n
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			}
		})
	}
	return &wg
}

// TestHotKeysUnderContention is the scenario that deadlocked duroxide's PostgreSQL
// provider: many consumers, in two backend instances (two pools, as two processes
// would have), fetch from a queue whose messages fall on a few hot routing keys
// while producers keep adding to those keys, and some batches are abandoned. Every
// DequeueBatch, Ack and Abandon must succeed without a retried deadlock, no key may
// be held twice, and every message must be acked exactly once, in order per key.
func TestHotKeysUnderContention(t *testing.T) {
	q1, dsn, schema := openSchema(t)
	q2 := openOn(t, dsn, schema)
	const (
		queue     = "hot"
		perKey    = 400
		consumers = 16
	)
	keys := []string{"k0", "k1", "k2", "k3"}
	total := len(keys) * perKey
	ledger := newKeyLedger(t)
	producers := produce(t, q1, queue, keys, perKey)

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var batches, abandoned atomic.Int64
	var wg sync.WaitGroup
	for c := range consumers {
		q := []*postgres.Queue{q1, q2}[c%2]
		wg.Go(func() {
			for ctx.Err() == nil && ledger.acked() < total && !t.Failed() {
				b, err := q.DequeueBatch(ctx, queue, mq.DequeueOptions{LockTimeout: time.Minute, Wait: 100 * time.Millisecond})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("consumer %d: DequeueBatch: %v", c, err)
					}
					return
				}
				if b == nil {
					continue
				}
				batches.Add(1)
				ledger.take(c, b)
				if rand.IntN(10) == 0 {
					abandoned.Add(1)
					ledger.release(b, 0) // before the call: once it returns, others may hold the key
					if err := q.Abandon(ctx, b.Token, mq.AbandonOptions{}); err != nil {
						t.Errorf("consumer %d: Abandon: %v", c, err)
						return
					}
					continue
				}
				ledger.release(b, len(b.Messages))
				if err := q.Ack(ctx, b.Token); err != nil {
					t.Errorf("consumer %d: Ack: %v", c, err)
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
		t.Fatalf("%d of %d messages acked before the timeout", got, total)
	}
	if st, err := q1.Stats(t.Context(), queue); err != nil || st != (mq.Stats{MaxAttempt: 0}) {
		t.Fatalf("Stats after draining = %+v, %v; want an empty queue", st, err)
	}
	if n := postgres.Retries(q1) + postgres.Retries(q2); n != 0 {
		t.Fatalf("%d transient failures (deadlocks or serialization failures) were retried; the lock protocol should cause none", n)
	}
	t.Logf("%d messages on %d hot keys: %d batches (%d abandoned) by %d consumers in 2 instances; %d attempts lost a key to another consumer",
		total, len(keys), batches.Load(), abandoned.Load(), consumers, postgres.Losses(q1)+postgres.Losses(q2))
}

// TestAcksRacingLockExpiry makes acks, renewals and abandons race with the expiry of
// their locks and the re-delivery of the batch to another consumer: the interleaving
// in which an instance-lock upsert deadlocked in duroxide. The only error allowed is
// ErrLockLost, nothing is lost, and no deadlock happens.
func TestAcksRacingLockExpiry(t *testing.T) {
	q1, dsn, schema := openSchema(t)
	q2 := openOn(t, dsn, schema)
	const (
		queue     = "expiring"
		perKey    = 100
		consumers = 12
		lock      = 40 * time.Millisecond
	)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	total := len(keys) * perKey
	producers := produce(t, q1, queue, keys, perKey)

	var mu sync.Mutex
	acked := map[string]bool{}
	var lost, renewed atomic.Int64
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for c := range consumers {
		q := []*postgres.Queue{q1, q2}[c%2]
		wg.Go(func() {
			for ctx.Err() == nil && !t.Failed() {
				mu.Lock()
				finished := len(acked) == total
				mu.Unlock()
				if finished {
					return
				}
				b, err := q.DequeueBatch(ctx, queue, mq.DequeueOptions{LockTimeout: lock, Wait: 50 * time.Millisecond})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("DequeueBatch: %v", err)
					}
					return
				}
				if b == nil {
					continue
				}
				time.Sleep(time.Duration(rand.IntN(int(lock * 3 / 2)))) // a third of the batches outlive their lock
				switch rand.IntN(6) {
				case 0:
					if _, err = q.Renew(ctx, b.Token, lock); err == nil {
						renewed.Add(1)
						time.Sleep(time.Duration(rand.IntN(int(lock))))
						err = q.Ack(ctx, b.Token)
					}
				case 1:
					err = q.Abandon(ctx, b.Token, mq.AbandonOptions{})
					if err == nil {
						continue
					}
				default:
					err = q.Ack(ctx, b.Token)
				}
				switch {
				case errors.Is(err, mq.ErrLockLost):
					lost.Add(1)
				case err != nil:
					t.Errorf("settling a batch racing its expiry: %v (only ErrLockLost is acceptable)", err)
					return
				default:
					mu.Lock()
					for _, d := range b.Messages {
						acked[string(d.Payload)] = true
					}
					mu.Unlock()
				}
			}
		})
	}
	producers.Wait()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(acked) != total {
		t.Fatalf("%d of %d messages acked before the timeout", len(acked), total)
	}
	if st, err := q1.Stats(t.Context(), queue); err != nil || st.Ready+st.Locked+st.Delayed != 0 {
		t.Fatalf("Stats after draining = %+v, %v; want an empty queue", st, err)
	}
	if n := postgres.Retries(q1) + postgres.Retries(q2); n != 0 {
		t.Fatalf("%d transient failures (deadlocks or serialization failures) were retried; the lock protocol should cause none", n)
	}
	t.Logf("%d messages acked; %d settlements lost their lock to expiry, %d renewals, %d dequeue attempts lost a key",
		total, lost.Load(), renewed.Load(), postgres.Losses(q1)+postgres.Losses(q2))
}

// TestDequeueTxAndAckTxInCallerTransactionsUnderContention runs consumers the way the
// adapter does: each batch is fetched, recorded in the caller's own table and acked
// with a follow-up message, all in the caller's transaction, while other consumers
// contend for the same hot keys. Transactions that lose a candidate must not keep
// locks (DequeueTx rolls back to its savepoint), so nothing here may fail or deadlock.
func TestDequeueTxAndAckTxInCallerTransactionsUnderContention(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	db := q.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE app_seen (payload TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	const (
		queue     = "work"
		perKey    = 120
		consumers = 10
	)
	keys := []string{"x", "y", "z"}
	total := len(keys) * perKey
	ledger := newKeyLedger(t)
	producers := produce(t, q, queue, keys, perKey)

	var wg sync.WaitGroup
	for c := range consumers {
		wg.Go(func() {
			for ctx.Err() == nil && ledger.acked() < total && !t.Failed() {
				var b *mq.Batch
				err := sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
					var err error
					if b, _, err = q.DequeueTx(ctx, tx, queue, mq.DequeueOptions{LockTimeout: time.Minute}); err != nil || b == nil {
						return err
					}
					ledger.take(c, b)
					for _, d := range b.Messages {
						if _, err := tx.ExecContext(ctx, `INSERT INTO app_seen (payload) VALUES ($1)`, string(d.Payload)); err != nil {
							return err
						}
					}
					ledger.release(b, len(b.Messages)) // before the commit: once it commits, others may hold the key
					return q.AckTx(ctx, tx, b.Token, mq.Message{Queue: "done", Payload: []byte(b.RoutingKey)})
				})
				if err != nil {
					t.Errorf("consumer %d: transaction: %v", c, err)
					return
				}
				if b == nil {
					time.Sleep(2 * time.Millisecond)
				}
			}
		})
	}
	producers.Wait()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var seen int
	if err := db.GetContext(ctx, &seen, `SELECT count(*) FROM app_seen`); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages in caller transactions by %d consumers; %d attempts lost a key (rolled back to the savepoint)", total, consumers, postgres.Losses(q))
	if seen != total || ledger.acked() != total {
		t.Fatalf("the caller's table holds %d messages and %d were acked, want %d each", seen, ledger.acked(), total)
	}
	if st, err := q.Stats(ctx, queue); err != nil || st != (mq.Stats{}) {
		t.Fatalf("Stats after draining = %+v, %v; want an empty queue", st, err)
	}
}

// TestSessionsUnderContention: three owners, four goroutines each, in two backend
// instances, fetch from sessions that fill while they run. Leases are long, so a
// session must stay with the owner that claimed it; every message is acked exactly
// once and nothing is retried.
func TestSessionsUnderContention(t *testing.T) {
	q1, dsn, schema := openSchema(t)
	q2 := openOn(t, dsn, schema)
	const (
		queue      = "sessions"
		sessions   = 12
		perSession = 25
		owners     = 3
		perOwner   = 4
	)
	total := sessions * perSession
	var names []string
	for i := range sessions {
		names = append(names, fmt.Sprintf("s%02d", i))
	}
	// A backlog first, so consumers race to claim sessions with several messages.
	const backlog = 5
	var first []mq.Message
	for _, s := range names { // each session's messages side by side: racing consumers pick siblings
		for seq := range backlog {
			first = append(first, mq.Message{Queue: queue, Session: s, Payload: payloadOf(s, seq)})
		}
	}
	if err := q1.Enqueue(t.Context(), first...); err != nil {
		t.Fatal(err)
	}
	var producers sync.WaitGroup
	for _, s := range names {
		producers.Go(func() {
			for seq := backlog; seq < perSession; seq++ {
				if err := q1.Enqueue(t.Context(), mq.Message{Queue: queue, Session: s, Payload: payloadOf(s, seq)}); err != nil {
					t.Errorf("Enqueue: %v", err)
					return
				}
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			}
		})
	}

	var (
		mu      sync.Mutex
		ownerOf = map[string]string{}
		acked   = map[string]bool{}
	)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for o := range owners {
		owner := fmt.Sprintf("owner-%d", o)
		for g := range perOwner {
			q := []*postgres.Queue{q1, q2}[(o+g)%2]
			wg.Go(func() {
				opts := mq.DequeueOptions{LockTimeout: time.Minute, Wait: 50 * time.Millisecond,
					Session: &mq.SessionOptions{Owner: owner, LeaseTimeout: time.Minute}}
				for ctx.Err() == nil && !t.Failed() {
					mu.Lock()
					finished := len(acked) == total
					mu.Unlock()
					if finished {
						return
					}
					b, err := q.DequeueBatch(ctx, queue, opts)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("%s: DequeueBatch: %v", owner, err)
						}
						return
					}
					if b == nil {
						continue
					}
					d := b.Messages[0]
					mu.Lock()
					if prev, ok := ownerOf[d.Session]; ok && prev != owner {
						t.Errorf("session %s was claimed by %s and then delivered to %s (message %q)", d.Session, prev, owner, d.Payload)
					}
					ownerOf[d.Session] = owner
					if acked[string(d.Payload)] {
						t.Errorf("message %q delivered again after its ack", d.Payload)
					}
					acked[string(d.Payload)] = true
					mu.Unlock()
					if err := q.Ack(ctx, b.Token); err != nil {
						t.Errorf("%s: Ack: %v", owner, err)
						return
					}
				}
			})
		}
	}
	producers.Wait()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(acked) != total {
		t.Fatalf("%d of %d messages acked before the timeout", len(acked), total)
	}
	if n := postgres.Retries(q1) + postgres.Retries(q2); n != 0 {
		t.Fatalf("%d transient failures were retried; the lock protocol should cause none", n)
	}
	perOwnerCount := map[string]int{}
	for _, o := range ownerOf {
		perOwnerCount[o]++
	}
	t.Logf("%d session messages acked; sessions per owner %v; %d attempts lost or waited for a session",
		total, perOwnerCount, postgres.Losses(q1)+postgres.Losses(q2))
}

// TestScanSkipsAKeyWhoseFirstMessageIsTaken holds the first rows of key K1 in
// another transaction, as another consumer's scan does while it takes the key. A
// dequeue then passes K1 by, without trying it (which would cost a lost attempt
// and a wait for those rows), and takes K2.
func TestScanSkipsAKeyWhoseFirstMessageIsTaken(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	var msgs []mq.Message
	for _, key := range []string{"K1", "K2"} {
		for i := range 10 {
			msgs = append(msgs, mq.Message{Queue: "q", RoutingKey: key, Payload: fmt.Appendf(nil, "%s-%d", key, i)})
		}
	}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	other, err := q.DB().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	if _, err := other.ExecContext(ctx, `SELECT id FROM mq_messages WHERE routing_key = 'K1' ORDER BY id LIMIT 5 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	b, err := q.DequeueBatch(ctx, "q", mq.DequeueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b == nil || b.RoutingKey != "K2" || len(b.Messages) != 10 {
		t.Fatalf("DequeueBatch while K1's first rows are held = %v; want K2's 10 messages", b)
	}
	if n := postgres.Losses(q); n != 0 {
		t.Errorf("DequeueBatch lost %d attempts: it tried K1, whose first rows another transaction holds", n)
	}
}
