package mq_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// runConsumer runs c until stop is called, failing the test if Run errs.
func runConsumer(t *testing.T, c *mq.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
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

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
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

func TestConsumerAcksHandledBatches(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
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
}

func TestConsumerRetriesWithBackoffThenSucceeds(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	var attempts []int
	var mu sync.Mutex
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, b.MaxAttempt())
		if len(attempts) < 3 {
			return errors.New("transient failure")
		}
		return nil
	}, mq.ConsumerOptions{Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
	enqueue(t, q, mq.Message{Queue: "jobs", Payload: []byte("x")})
	stop := runConsumer(t, c)
	waitFor(t, "three attempts", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 3 })
	waitFor(t, "the queue is empty", func() bool { return stats(t, q, "jobs") == mq.Stats{} })
	stop()
	if attempts[0] != 1 || attempts[1] != 2 || attempts[2] != 3 {
		t.Fatalf("attempt numbers %v, want [1 2 3]", attempts)
	}
}

func TestConsumerBackoffDelaysTheRetry(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	var calls atomic.Int32
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		calls.Add(1)
		return errors.New("fail")
	}, mq.ConsumerOptions{Backoff: func(int) time.Duration { return time.Hour }})
	enqueue(t, q, mq.Message{Queue: "jobs"})
	stop := runConsumer(t, c)
	waitFor(t, "the message is delayed", func() bool { return stats(t, q, "jobs").Delayed == 1 })
	stop()
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1 (the retry is an hour away)", n)
	}
}

func TestConsumerDeadLettersAfterMaxAttempts(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	var dead atomic.Pointer[mq.Batch]
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		return errors.New("poison")
	}, mq.ConsumerOptions{MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 },
		OnDeadLetter: func(b *mq.Batch, err error) { dead.Store(b) }})
	enqueue(t, q, mq.Message{Queue: "jobs", RoutingKey: "k", Payload: []byte("a"), Tag: "t"},
		mq.Message{Queue: "jobs", RoutingKey: "k", Payload: []byte("b"), Tag: "t"})
	stop := runConsumer(t, c)
	waitFor(t, "the batch is dead-lettered", func() bool { return dead.Load() != nil })
	stop()
	if got := dead.Load().MaxAttempt(); got != 3 {
		t.Fatalf("dead-lettered at attempt %d, want 3", got)
	}
	if st := stats(t, q, "jobs"); st != (mq.Stats{}) {
		t.Fatalf("the original queue still holds %+v", st)
	}
	b, err := q.DequeueBatch(t.Context(), "jobs.dead", mq.DequeueOptions{})
	if err != nil || b == nil {
		t.Fatalf("dead-letter queue: batch %v, err %v", b, err)
	}
	if b.RoutingKey != "k" || len(b.Messages) != 2 || string(b.Messages[0].Payload) != "a" ||
		string(b.Messages[1].Payload) != "b" || b.Messages[0].Tag != "t" {
		t.Fatalf("dead-letter copies %+v, want the two payloads in order with key and tag", b)
	}
}

func TestConsumerDiscardsDeadLettersWhenAsked(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	var dead atomic.Int32
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		panic("handler bug") // a panic counts as a failure
	}, mq.ConsumerOptions{MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 }, DiscardDeadLetters: true,
		OnDeadLetter: func(b *mq.Batch, err error) { dead.Add(1) }})
	enqueue(t, q, mq.Message{Queue: "jobs"})
	stop := runConsumer(t, c)
	waitFor(t, "the batch is discarded", func() bool { return dead.Load() == 1 })
	stop()
	for _, name := range []string{"jobs", "jobs.dead"} {
		if st := stats(t, q, name); st != (mq.Stats{}) {
			t.Fatalf("queue %s holds %+v after a discard", name, st)
		}
	}
}

func TestConsumerRenewsTheLockOfALongHandler(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	var calls atomic.Int32
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		calls.Add(1)
		select {
		case <-time.After(600 * time.Millisecond): // four lock timeouts
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, mq.ConsumerOptions{LockTimeout: 150 * time.Millisecond, Concurrency: 2})
	enqueue(t, q, mq.Message{Queue: "jobs"})
	stop := runConsumer(t, c)
	waitFor(t, "the message is acked", func() bool { return calls.Load() == 1 && stats(t, q, "jobs") == mq.Stats{} })
	stop()
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times: the lock lapsed while it ran", n)
	}
}

func TestConsumerCancelsAHandlerWhoseLockIsLost(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	started := make(chan struct{})
	cancelled := make(chan struct{})
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}, mq.ConsumerOptions{LockTimeout: 90 * time.Millisecond})
	enqueue(t, q, mq.Message{Queue: "jobs", Key: "job-1"})
	stop := runConsumer(t, c)
	<-started
	if n, err := q.Remove(t.Context(), "jobs", "job-1"); n != 1 || err != nil {
		t.Fatalf("Remove: %d, %v", n, err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled after its lock was lost")
	}
	stop()
}

func TestConsumerShutdownDrainsRunningHandlers(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
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
}

func TestConsumerShutdownCancelsAfterGraceAndReleasesTheBatch(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	started := make(chan struct{})
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, mq.ConsumerOptions{ShutdownGrace: 20 * time.Millisecond})
	enqueue(t, q, mq.Message{Queue: "jobs"})
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
		t.Fatalf("the cancelled batch is not available again: %v, %v", b, err)
	}
	if got := b.MaxAttempt(); got != 1 {
		t.Fatalf("attempt %d after a shutdown release, want 1 (shutdown is not the message's fault)", got)
	}
}

func TestConsumerStopsWhenTheQueueIsClosed(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	c := newConsumer(t, q, func(ctx context.Context, b *mq.Batch) error { return nil }, mq.ConsumerOptions{PollWait: 10 * time.Millisecond})
	q.Close()
	err := c.Run(t.Context())
	if !errors.Is(err, mq.ErrClosed) {
		t.Fatalf("Run on a closed queue: %v, want ErrClosed", err)
	}
}

func TestNewConsumerRejectsBadInput(t *testing.T) {
	q := mq.NewMemory(mq.MemoryOptions{})
	if _, err := mq.NewConsumer(q, "", func(context.Context, *mq.Batch) error { return nil }, mq.ConsumerOptions{}); !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("empty queue name: %v, want ErrInvalid", err)
	}
	if _, err := mq.NewConsumer(q, "jobs", nil, mq.ConsumerOptions{}); !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("nil handler: %v, want ErrInvalid", err)
	}
	if _, err := mq.NewConsumer(q, "jobs", func(context.Context, *mq.Batch) error { return nil }, mq.ConsumerOptions{LockTimeout: -1}); !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("negative lock timeout: %v, want ErrInvalid", err)
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
