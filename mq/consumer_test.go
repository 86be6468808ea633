package mq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// opener returns a fresh queue whose clock is now (nil: the real clock), closed when
// the test ends.
type opener func(now func() time.Time) mq.MessageQueue

// backend opens queues of one backend for the consumer tests.
type backend struct {
	name string
	open func(t *testing.T, now func() time.Time) mq.MessageQueue
}

// backends lists the backends the consumer is tested on: the in-memory reference
// here, the others in their own files.
var backends = []backend{{"memory", func(t *testing.T, now func() time.Time) mq.MessageQueue {
	q := mq.NewMemory(mq.MemoryOptions{Now: now})
	t.Cleanup(func() { q.Close() })
	return q
}}}

// forEachBackend runs test on every backend of backends.
func forEachBackend(t *testing.T, test func(t *testing.T, open opener)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			test(t, func(now func() time.Time) mq.MessageQueue { return b.open(t, now) })
		})
	}
}

// clock is an injectable clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// journal records what handlers did, in order; safe for concurrent use.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, fmt.Sprintf(format, args...))
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

func (j *journal) has(entry string) bool { return slices.Contains(j.list(), entry) }

// runConsumer runs c until stop is called, failing the test if Run errs.
func runConsumer(t *testing.T, c *mq.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		t.Helper()
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newConsumer(t *testing.T, q mq.MessageQueue, h mq.Handler, o mq.ConsumerOptions) *mq.Consumer {
	t.Helper()
	c, err := mq.NewConsumer(q, "jobs", h, o)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	return c
}

func enqueue(t *testing.T, q mq.MessageQueue, msgs ...mq.Message) {
	t.Helper()
	if err := q.Enqueue(t.Context(), msgs...); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
}

// keyed returns messages of queue "jobs" with routing key key and the payloads.
func keyed(key string, payloads ...string) []mq.Message {
	msgs := make([]mq.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = mq.Message{Queue: "jobs", RoutingKey: key, Payload: []byte(p)}
	}
	return msgs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func stats(t *testing.T, q mq.MessageQueue, queue string) mq.Stats {
	t.Helper()
	st, err := q.Stats(t.Context(), queue)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func peek(t *testing.T, q mq.MessageQueue, queue string) []mq.MessageInfo {
	t.Helper()
	msgs, err := q.(mq.Admin).Peek(t.Context(), queue, mq.PeekOptions{})
	if err != nil {
		t.Fatalf("Peek %s: %v", queue, err)
	}
	return msgs
}

func noBackoff(int) time.Duration { return 0 }

func TestConsumerAcksHandledBatches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		var handled atomic.Int32
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			handled.Add(int32(len(b.Messages)))
			return nil
		}, mq.ConsumerOptions{Concurrency: 3})
		stop := runConsumer(t, c)
		for i := range 20 {
			enqueue(t, q, mq.Message{Queue: "jobs", Payload: []byte{byte(i)}})
		}
		waitFor(t, "20 messages handled", func() bool { return handled.Load() == 20 })
		stop()
		if st := stats(t, q, "jobs"); st != (mq.Stats{}) {
			t.Fatalf("after acking everything the queue holds %+v, want nothing", st)
		}
	})
}

func TestConsumerRetriesWithBackoffThenSucceeds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		var j journal
		var calls atomic.Int32
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			j.add("attempt %d", b.MaxAttempt())
			if calls.Add(1) < 3 {
				return errors.New("transient failure")
			}
			return nil
		}, mq.ConsumerOptions{Backoff: func(int) time.Duration { return 5 * time.Millisecond }})
		enqueue(t, q, mq.Message{Queue: "jobs", Payload: []byte("x")})
		runConsumer(t, c)
		waitFor(t, "the queue is empty", func() bool { return calls.Load() == 3 && stats(t, q, "jobs") == mq.Stats{} })
		if got, want := j.list(), []string{"attempt 1", "attempt 2", "attempt 3"}; !slices.Equal(got, want) {
			t.Fatalf("handler saw %q, want %q", got, want)
		}
	})
}

func TestConsumerBackoffDelaysTheRetry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		clk := newClock()
		q := open(clk.Now)
		var j, backoffs journal
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			j.add("%s@%d", b.Messages[0].Payload, b.MaxAttempt())
			return errors.New("fail")
		}, mq.ConsumerOptions{PollWait: 5 * time.Millisecond, LockTimeout: time.Hour,
			Backoff: func(attempt int) time.Duration { backoffs.add("%d", attempt); return time.Hour }})
		enqueue(t, q, mq.Message{Queue: "jobs", Payload: []byte("x")})
		runConsumer(t, c)
		waitFor(t, "x is delayed", func() bool { return stats(t, q, "jobs").Delayed == 1 })
		// The consumer keeps fetching (it handles another message), but x waits.
		enqueue(t, q, mq.Message{Queue: "jobs", Payload: []byte("y")})
		waitFor(t, "y is handled", func() bool { return j.has("y@1") })
		clk.Advance(time.Hour - time.Second)
		if got := j.list(); !slices.Equal(got, []string{"x@1", "y@1"}) {
			t.Fatalf("handled %q before the backoff elapsed, want [x@1 y@1]", got)
		}
		clk.Advance(time.Second)
		waitFor(t, "both are retried", func() bool { return len(j.list()) == 4 })
		if got, want := j.list(), []string{"x@1", "y@1", "x@2", "y@2"}; !slices.Equal(got, want) {
			t.Fatalf("handled %q, want %q", got, want)
		}
		if got := backoffs.list(); !slices.Equal(got[:2], []string{"1", "1"}) {
			t.Fatalf("Backoff called with attempts %q, want the failed attempt's number (1, 1, ...)", got)
		}
	})
}

// The reorder bug of issue 13: A fails and waits for its retry; B, of the same key,
// enqueued meanwhile, must not be handled before A succeeds.
func TestConsumerKeepsKeyOrderThroughRetries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		clk := newClock()
		q := open(clk.Now)
		var j journal
		var failed atomic.Bool
		c := newConsumer(t, q, mq.PerMessage(func(ctx context.Context, b *mq.Batch, d mq.Delivery) error {
			if p := string(d.Payload); p == "A" && failed.CompareAndSwap(false, true) {
				j.add("A failed")
				return errors.New("downstream unavailable")
			}
			j.add("%s", d.Payload)
			return nil
		}), mq.ConsumerOptions{PollWait: 5 * time.Millisecond, LockTimeout: time.Hour,
			Backoff: func(int) time.Duration { return time.Minute }})
		enqueue(t, q, keyed("customer-1", "A")...)
		runConsumer(t, c)
		waitFor(t, "A failed and waits for its retry", func() bool { return stats(t, q, "jobs").Delayed == 1 })

		enqueue(t, q, keyed("customer-1", "B")...)
		enqueue(t, q, keyed("customer-2", "C")...)
		// C is younger than B: the fetch that took C would have taken B first had B
		// been eligible.
		waitFor(t, "C is handled", func() bool { return j.has("C") })
		if got := j.list(); !slices.Equal(got, []string{"A failed", "C"}) {
			t.Fatalf("handled %q while A waited for its retry, want [A failed C]: B overtook A", got)
		}
		st, err := q.KeyStats(t.Context(), "jobs", "customer-1")
		if err != nil || st.Delayed != 1 || st.Ready != 1 {
			t.Fatalf("customer-1 holds %+v (err %v), want A delayed and B waiting behind it", st, err)
		}

		clk.Advance(time.Minute)
		waitFor(t, "A and B are handled", func() bool { return len(j.list()) == 4 })
		if got, want := j.list(), []string{"A failed", "C", "A", "B"}; !slices.Equal(got, want) {
			t.Fatalf("handled %q, want %q", got, want)
		}
	})
}

// A batch failing at its third message: the first two are acked once, the third is
// retried and then dead-lettered alone, and the fourth is handled only after that.
func TestConsumerSettlesAPartialFailureMessageByMessage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		var j journal
		var deadID atomic.Int64
		var onDead journal
		c := newConsumer(t, q, mq.PerMessage(func(ctx context.Context, b *mq.Batch, d mq.Delivery) error {
			j.add("%s@%d", d.Payload, d.Attempt)
			switch string(d.Payload) {
			case "m3":
				deadID.Store(d.ID)
				return errors.New("m3 is poison")
			case "m4":
				// m4 comes after m3 left: it is in the dead-letter queue already.
				dl, err := q.(mq.Admin).Peek(ctx, "jobs.dead", mq.PeekOptions{})
				if err != nil || len(dl) != 1 || string(dl[0].Payload) != "m3" {
					t.Errorf("m4 handled while the dead-letter queue holds %d messages (err %v): m3 had not left yet", len(dl), err)
				}
			}
			return nil
		}), mq.ConsumerOptions{MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Millisecond },
			OnDeadLetter: func(b *mq.Batch, d mq.Delivery, err error) { onDead.add("%s@%d: %v", d.Payload, d.Attempt, err) }})
		enqueue(t, q, keyed("k", "m1", "m2", "m3", "m4")...)
		runConsumer(t, c)
		waitFor(t, "the queue is drained", func() bool {
			return len(j.list()) == 6 && len(onDead.list()) == 1 && stats(t, q, "jobs") == mq.Stats{}
		})

		// m4's three fetches behind the failing m3 were undone: it is handled at attempt 1.
		if got, want := j.list(), []string{"m1@1", "m2@1", "m3@1", "m3@2", "m3@3", "m4@1"}; !slices.Equal(got, want) {
			t.Fatalf("handled %q, want %q", got, want)
		}
		if got, want := onDead.list(), []string{"m3@3: m3 is poison"}; !slices.Equal(got, want) {
			t.Fatalf("OnDeadLetter calls %q, want %q", got, want)
		}
		dl := peek(t, q, "jobs.dead")
		if len(dl) != 1 {
			t.Fatalf("dead-letter queue holds %d messages, want m3 alone", len(dl))
		}
		m := dl[0]
		if string(m.Payload) != "m3" || m.ID != deadID.Load() || m.RoutingKey != "k" || m.Attempt != 3 ||
			m.LastError != "m3 is poison" || m.OriginQueue != "jobs" || m.FirstFailedAt.IsZero() ||
			m.LastFailedAt.Before(m.FirstFailedAt) || m.DeadLetteredAt.IsZero() {
			t.Fatalf("dead letter %+v, want m3 (same id, key k, attempt 3, reason, origin jobs, failure times)", m)
		}
	})
}

// A plain error (no index) fails message 0: only it is dead-lettered.
func TestConsumerPlainErrorFailsTheFirstMessageOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		var j journal
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			var ps []string
			for _, d := range b.Messages {
				ps = append(ps, fmt.Sprintf("%s@%d", d.Payload, d.Attempt))
			}
			j.add("%s", strings.Join(ps, " "))
			if string(b.Messages[0].Payload) == "a" {
				return errors.New("cannot handle a")
			}
			return nil
		}, mq.ConsumerOptions{MaxAttempts: 2, Backoff: noBackoff})
		enqueue(t, q, keyed("k", "a", "b", "c")...)
		runConsumer(t, c)
		waitFor(t, "the queue is drained", func() bool { return len(j.list()) == 3 && stats(t, q, "jobs") == mq.Stats{} })
		if got, want := j.list(), []string{"a@1 b@1 c@1", "a@2 b@1 c@1", "b@1 c@1"}; !slices.Equal(got, want) {
			t.Fatalf("batches %q, want %q", got, want)
		}
		dl := peek(t, q, "jobs.dead")
		if len(dl) != 1 || string(dl[0].Payload) != "a" || dl[0].LastError != "cannot handle a" {
			t.Fatalf("dead letters %+v, want a alone with its reason", dl)
		}
	})
}

func TestConsumerTreatsAnIndexOutsideTheBatchAsMessageZero(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		if string(b.Messages[0].Payload) == "a" {
			return mq.FailedAt(7, errors.New("bad index"))
		}
		return nil
	}, mq.ConsumerOptions{MaxAttempts: 1})
	enqueue(t, q, keyed("k", "a", "b")...)
	runConsumer(t, c)
	waitFor(t, "a is dead-lettered and b handled", func() bool {
		return stats(t, q, "jobs.dead").Ready == 1 && stats(t, q, "jobs") == mq.Stats{}
	})
	dl := peek(t, q, "jobs.dead")
	if len(dl) != 1 || string(dl[0].Payload) != "a" {
		t.Fatalf("dead letters %+v, want message 0 (a) alone", dl)
	}
}

func TestConsumerDiscardsDeadLettersWhenAsked(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		var dead journal
		var calls atomic.Int32
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			if calls.Add(1) <= 2 {
				panic("handler bug") // a panic is a failure of message 0
			}
			return nil
		}, mq.ConsumerOptions{MaxAttempts: 2, Backoff: noBackoff, DiscardDeadLetters: true,
			OnDeadLetter: func(b *mq.Batch, d mq.Delivery, err error) {
				dead.add("%s %t", d.Payload, strings.Contains(err.Error(), "handler bug"))
			}})
		enqueue(t, q, keyed("k", "a", "b")...)
		runConsumer(t, c)
		waitFor(t, "the queue is drained", func() bool {
			return calls.Load() == 3 && len(dead.list()) == 1 && stats(t, q, "jobs") == mq.Stats{}
		})
		if got, want := dead.list(), []string{"a true"}; !slices.Equal(got, want) {
			t.Fatalf("OnDeadLetter calls %q, want %q (the panic's message)", got, want)
		}
		if st := stats(t, q, "jobs.dead"); st != (mq.Stats{}) {
			t.Fatalf("the dead-letter queue holds %+v after a discard", st)
		}
	})
}

// Concurrency 8 over many keys, with messages arriving while the consumer runs and
// some failing once: every message succeeds exactly once, and a message is tried
// only after every earlier message of its key succeeded, never beside another one
// of its key.
func TestConsumerConcurrentKeysKeepTheirOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		const keys, perKey = 40, 10
		var mu sync.Mutex
		done := map[int]int{}        // key -> messages succeeded
		busy := map[int]bool{}       // key -> a batch of it is being handled
		failedOnce := map[int]bool{} // message -> failed once already
		var errs journal
		var successes atomic.Int32
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			var key int
			fmt.Sscan(strings.TrimPrefix(b.RoutingKey, "key-"), &key)
			mu.Lock()
			if busy[key] {
				errs.add("key %d handled by two batches at once", key)
			}
			busy[key] = true
			mu.Unlock()
			defer func() { mu.Lock(); busy[key] = false; mu.Unlock() }()
			for i, d := range b.Messages {
				var k, seq int
				fmt.Sscanf(string(d.Payload), "%d/%d", &k, &seq)
				mu.Lock()
				if done[key] != seq {
					errs.add("key %d: message %d tried after %d successes", key, seq, done[key])
				}
				fail := (k+seq)%7 == 3 && !failedOnce[k*perKey+seq]
				if fail {
					failedOnce[k*perKey+seq] = true
				} else {
					done[key]++
				}
				mu.Unlock()
				if fail {
					return mq.FailedAt(i, errors.New("flaky"))
				}
				successes.Add(1)
			}
			return nil
		}, mq.ConsumerOptions{Concurrency: 8, Backoff: func(int) time.Duration { return 20 * time.Millisecond }})
		runConsumer(t, c)
		for seq := range perKey {
			var msgs []mq.Message
			for k := range keys {
				msgs = append(msgs, mq.Message{Queue: "jobs", RoutingKey: fmt.Sprint("key-", k), Payload: fmt.Appendf(nil, "%d/%d", k, seq)})
			}
			enqueue(t, q, msgs...)
		}
		waitFor(t, "every message succeeded", func() bool { return successes.Load() == keys*perKey })
		waitFor(t, "the queue is empty", func() bool { return stats(t, q, "jobs") == mq.Stats{} })
		if e := errs.list(); len(e) > 0 {
			t.Fatalf("order broken: %q", e)
		}
		mu.Lock()
		defer mu.Unlock()
		for k := range keys {
			if done[k] != perKey {
				t.Fatalf("key %d: %d messages succeeded, want %d", k, done[k], perKey)
			}
		}
	})
}

// countingQueue counts Settle calls; each takes commitTime, like a disk commit.
type countingQueue struct {
	mq.MessageQueue
	commitTime  time.Duration
	calls       atomic.Int32
	settlements atomic.Int32
}

func (q *countingQueue) Settle(ctx context.Context, ss ...mq.Settlement) error {
	q.calls.Add(1)
	q.settlements.Add(int32(len(ss)))
	time.Sleep(q.commitTime)
	return q.MessageQueue.Settle(ctx, ss...)
}

func TestConsumerGroupsSettlements(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := &countingQueue{MessageQueue: open(nil), commitTime: time.Millisecond}
		const n = 200
		var msgs []mq.Message
		for i := range n {
			msgs = append(msgs, mq.Message{Queue: "jobs", Payload: []byte{byte(i)}})
		}
		enqueue(t, q, msgs...)
		var handled atomic.Int32
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			handled.Add(1)
			return nil
		}, mq.ConsumerOptions{Concurrency: 8})
		runConsumer(t, c)
		waitFor(t, "the queue is empty", func() bool { return stats(t, q, "jobs") == mq.Stats{} })
		calls, settled := q.calls.Load(), q.settlements.Load()
		if handled.Load() != n || settled != n {
			t.Fatalf("%d batches handled and %d settled, want %d", handled.Load(), settled, n)
		}
		if calls >= n/2 {
			t.Fatalf("%d Settle calls for %d batches: settlements are not grouped", calls, n)
		}
		t.Logf("%d batches settled in %d Settle calls", n, calls)
	})
}

func TestConsumerBoundsBatches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		var j journal
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			j.add("%d", len(b.Messages))
			return nil
		}, mq.ConsumerOptions{MaxMessages: 2})
		enqueue(t, q, keyed("k", "1", "2", "3", "4", "5")...)
		runConsumer(t, c)
		waitFor(t, "the queue is empty", func() bool { return stats(t, q, "jobs") == mq.Stats{} })
		if got, want := j.list(), []string{"2", "2", "1"}; !slices.Equal(got, want) {
			t.Fatalf("batch sizes %q, want %q", got, want)
		}
	})
}

func TestConsumerRenewsTheLockOfALongHandler(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		var calls atomic.Int32
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			calls.Add(1)
			select {
			case <-time.After(1200 * time.Millisecond): // four lock timeouts
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, mq.ConsumerOptions{LockTimeout: 300 * time.Millisecond, Concurrency: 2}) // margin for a loaded machine
		enqueue(t, q, mq.Message{Queue: "jobs"})
		runConsumer(t, c)
		waitFor(t, "the message is acked", func() bool { return calls.Load() == 1 && stats(t, q, "jobs") == mq.Stats{} })
		if n := calls.Load(); n != 1 {
			t.Fatalf("handler ran %d times: the lock lapsed while it ran", n)
		}
	})
}

func TestConsumerCancelsAHandlerWhoseLockIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		started := make(chan struct{})
		cancelled := make(chan struct{})
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			close(started)
			<-ctx.Done()
			close(cancelled)
			return ctx.Err()
		}, mq.ConsumerOptions{LockTimeout: 90 * time.Millisecond})
		enqueue(t, q, mq.Message{Queue: "jobs", Key: "job-1"})
		runConsumer(t, c)
		<-started
		if n, err := q.Remove(t.Context(), "jobs", "job-1"); n != 1 || err != nil {
			t.Fatalf("Remove: %d, %v", n, err)
		}
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler's context was not cancelled after its lock was lost")
		}
	})
}

func TestConsumerShutdownDrainsRunningHandlers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		started := make(chan struct{})
		release := make(chan struct{})
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
			close(started)
			<-release
			return nil
		}, mq.ConsumerOptions{ShutdownGrace: 10 * time.Second})
		enqueue(t, q, mq.Message{Queue: "jobs"})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		<-started
		cancel()
		select {
		case <-done:
			t.Fatal("Run returned while a handler was still running within the grace period")
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if st := stats(t, q, "jobs"); st != (mq.Stats{}) {
			t.Fatalf("the drained batch was not acked: %+v", st)
		}
	})
}

// A handler cut short by the end of the grace period: the messages it finished stay
// acked, the rest is released at once without counting the attempt.
func TestConsumerShutdownCancelsAfterGraceAndReleasesTheRest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		started := make(chan struct{})
		c := newConsumer(t, q, mq.PerMessage(func(ctx context.Context, b *mq.Batch, d mq.Delivery) error {
			if string(d.Payload) == "a" {
				return nil
			}
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}), mq.ConsumerOptions{ShutdownGrace: 20 * time.Millisecond, Backoff: func(int) time.Duration { return time.Hour }})
		enqueue(t, q, keyed("k", "a", "b", "c")...)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		<-started
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		b, err := q.DequeueBatch(t.Context(), "jobs", mq.DequeueOptions{})
		if err != nil || b == nil {
			t.Fatalf("the cancelled messages are not available at once: %v, %v", b, err)
		}
		var got []string
		for _, d := range b.Messages {
			got = append(got, fmt.Sprintf("%s@%d", d.Payload, d.Attempt))
		}
		if want := []string{"b@1", "c@1"}; !slices.Equal(got, want) {
			t.Fatalf("after the shutdown the batch is %q, want %q (a acked, no attempt counted)", got, want)
		}
	})
}

func TestConsumerStopsWhenTheQueueIsClosed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open opener) {
		q := open(nil)
		c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error { return nil }, mq.ConsumerOptions{PollWait: 10 * time.Millisecond})
		q.Close()
		if err := c.Run(t.Context()); !errors.Is(err, mq.ErrClosed) {
			t.Fatalf("Run on a closed queue: %v, want ErrClosed", err)
		}
	})
}

func TestNewConsumerRejectsBadInput(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	ok := func(context.Context, *mq.Batch) error { return nil }
	for name, tc := range map[string]struct {
		q     mq.MessageQueue
		queue string
		h     mq.Handler
		o     mq.ConsumerOptions
	}{
		"nil queue":                         {nil, "jobs", ok, mq.ConsumerOptions{}},
		"empty queue name":                  {q, "", ok, mq.ConsumerOptions{}},
		"nil handler":                       {q, "jobs", nil, mq.ConsumerOptions{}},
		"nil PerMessage function":           {q, "jobs", mq.PerMessage(nil), mq.ConsumerOptions{}},
		"negative lock timeout":             {q, "jobs", ok, mq.ConsumerOptions{LockTimeout: -1}},
		"dead letters to themselves":        {q, "jobs", ok, mq.ConsumerOptions{DeadLetterQueue: "jobs"}},
		"default dead-letter name too long": {q, strings.Repeat("q", mq.MaxNameSize), ok, mq.ConsumerOptions{}},
	} {
		if _, err := mq.NewConsumer(tc.q, tc.queue, tc.h, tc.o); !errors.Is(err, mq.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestFailedAt(t *testing.T) {
	if err := mq.FailedAt(3, nil); err != nil {
		t.Fatalf("FailedAt(3, nil) = %v, want nil", err)
	}
	cause := errors.New("boom")
	err := fmt.Errorf("handler: %w", mq.FailedAt(2, cause))
	var me *mq.MessageError
	if !errors.As(err, &me) || me.Index != 2 || !errors.Is(err, cause) {
		t.Fatalf("FailedAt(2, boom) wrapped: %v, want a MessageError for index 2 that unwraps to boom", err)
	}
}

func TestExponentialBackoff(t *testing.T) {
	b := mq.ExponentialBackoff(time.Second, 5*time.Second)
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 40: 5 * time.Second} {
		if got := b(attempt); got != want {
			t.Errorf("backoff(%d) = %v, want %v", attempt, got, want)
		}
	}
}
