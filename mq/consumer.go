package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Handler processes one batch. Returning nil acks the batch; returning an error
// abandons it for a retry after a backoff, or dead-letters it once it has been
// attempted ConsumerOptions.MaxAttempts times. ctx ends when the lock is lost or the
// consumer's shutdown grace period is over; a handler should then stop promptly.
type Handler func(ctx context.Context, b *Batch) error

// ConsumerOptions tune a Consumer. The zero value gives the documented defaults.
type ConsumerOptions struct {
	// Concurrency is the number of batches handled at once. Default 1.
	Concurrency int
	// LockTimeout is the lock taken on each batch; the consumer renews it every
	// LockTimeout/3 while the handler runs. Default DefaultLockTimeout.
	LockTimeout time.Duration
	// PollWait is how long one fetch waits for work (a long poll). Messages enqueued
	// in this process wake the consumer at once; those enqueued by another process
	// are seen within PollWait. Default 1s.
	PollWait time.Duration
	// MaxAttempts is how many times a batch may fail before it is dead-lettered.
	// Default 10; negative retries forever.
	MaxAttempts int
	// Backoff gives the delay before retry number attempt+1 after attempt failed.
	// Default ExponentialBackoff(time.Second, 5*time.Minute).
	Backoff func(attempt int) time.Duration
	// DeadLetterQueue receives a copy of each message of a dead-lettered batch (same
	// payload, routing key and tag), enqueued atomically with the ack that removes the
	// originals. Default: the queue's name + ".dead".
	DeadLetterQueue string
	// DiscardDeadLetters drops dead-lettered batches instead (after logging them and
	// calling OnDeadLetter).
	DiscardDeadLetters bool
	// OnDeadLetter, if set, is called with each dead-lettered batch and its last error.
	OnDeadLetter func(b *Batch, err error)
	// Tags, Session and KeyAttr are passed to every DequeueBatch.
	Tags    TagFilter
	Session *SessionOptions
	KeyAttr *AttrFilter
	// ShutdownGrace is how long Run lets running handlers finish after its context
	// ends before cancelling theirs. Default 30s.
	ShutdownGrace time.Duration
	// Logger receives the consumer's records; nil is silent.
	Logger *slog.Logger
}

// ExponentialBackoff returns base·2^(attempt-1), capped at limit.
func ExponentialBackoff(base, limit time.Duration) func(attempt int) time.Duration {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < limit; i++ {
			d *= 2
		}
		return min(d, limit)
	}
}

// Consumer runs a Handler over a queue: it fetches batches, renews their locks while
// the handler runs, acks on success, retries with backoff on failure, dead-letters
// after too many attempts and shuts down gracefully.
type Consumer struct {
	q       MessageQueue
	queue   string
	handle  Handler
	o       ConsumerOptions
	log     *slog.Logger
	running sync.Mutex // one Run at a time
}

// NewConsumer returns a consumer of queue on q. It does nothing until Run.
func NewConsumer(q MessageQueue, queue string, h Handler, o ConsumerOptions) (*Consumer, error) {
	const op = "new consumer"
	if err := CheckQueue(op, queue); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, invalid(op, "handler", "must not be nil")
	}
	for name, d := range map[string]time.Duration{"LockTimeout": o.LockTimeout, "PollWait": o.PollWait, "ShutdownGrace": o.ShutdownGrace} {
		if err := CheckDuration(op, name, d); err != nil {
			return nil, err
		}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.PollWait == 0 {
		o.PollWait = time.Second
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 10
	}
	if o.Backoff == nil {
		o.Backoff = ExponentialBackoff(time.Second, 5*time.Minute)
	}
	if o.DeadLetterQueue == "" {
		o.DeadLetterQueue = queue + ".dead"
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{q: q, queue: queue, handle: h, o: o, log: o.Logger.With("queue", queue)}, nil
}

// Run consumes until ctx ends, then stops fetching, lets running handlers finish for
// up to ShutdownGrace, cancels the ones still running, and returns nil once all have
// returned (batches whose handler was cancelled are abandoned without counting the
// attempt). It returns an error early only if the queue fails for good (ErrClosed).
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.TryLock() {
		return fmt.Errorf("mq: consumer of %q: Run is already running", c.queue)
	}
	defer c.running.Unlock()

	// Handlers and their acks outlive ctx: they get the grace period.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	fetchCtx, stopFetching := context.WithCancel(ctx)
	defer stopFetching()

	var wg sync.WaitGroup
	errs := make(chan error, c.o.Concurrency)
	for range c.o.Concurrency {
		wg.Go(func() {
			if err := c.loop(fetchCtx, work); err != nil {
				errs <- err
				stopFetching()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	select {
	case <-done:
	case <-fetchCtx.Done():
		c.log.Debug("consumer stopping: draining running handlers", "grace", c.o.ShutdownGrace)
		grace := time.NewTimer(c.o.ShutdownGrace)
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
			c.log.Warn("consumer shutdown grace elapsed: cancelling running handlers")
			cancelWork()
			<-done
		}
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// loop fetches and handles batches until fetchCtx ends or the queue fails for good.
func (c *Consumer) loop(fetchCtx, work context.Context) error {
	opts := DequeueOptions{LockTimeout: c.o.LockTimeout, Wait: c.o.PollWait, Tags: c.o.Tags, Session: c.o.Session, KeyAttr: c.o.KeyAttr}
	failures := 0
	for fetchCtx.Err() == nil {
		b, err := c.q.DequeueBatch(fetchCtx, c.queue, opts)
		switch {
		case fetchCtx.Err() != nil:
			return nil
		case errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid):
			return fmt.Errorf("mq: consumer of %q: %w", c.queue, err)
		case err != nil:
			// A transient storage error: back off so a broken database is not hammered.
			failures++
			delay := ExponentialBackoff(50*time.Millisecond, 5*time.Second)(failures)
			c.log.Error("consumer fetch failed", "err", err, "retry_in", delay)
			select {
			case <-fetchCtx.Done():
			case <-time.After(delay):
			}
			continue
		case b == nil:
			continue
		}
		failures = 0
		c.process(work, b)
	}
	return nil
}

// process runs the handler on b with lock renewal and settles the batch.
func (c *Consumer) process(work context.Context, b *Batch) {
	hctx, cancel := context.WithCancel(work)
	defer cancel()
	lost := make(chan struct{})
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		c.renew(hctx, b, lost, cancel)
	}()
	err := c.call(hctx, b)
	cancel()
	<-renewDone
	log := c.log.With("routing_key", b.RoutingKey, "messages", len(b.Messages), "attempt", b.MaxAttempt())
	select {
	case <-lost:
		log.Warn("consumer lost the batch's lock; it will be redelivered", "handler_err", err)
		return
	default:
	}
	// Settle with a context of its own: shutdown must not strand a finished batch.
	ctx, stop := context.WithTimeout(context.WithoutCancel(work), c.o.LockTimeout)
	defer stop()
	var settleErr error
	switch {
	case err == nil:
		settleErr = c.q.Ack(ctx, b.Token)
	case work.Err() != nil:
		// Cancelled by shutdown: not the batch's fault.
		settleErr = c.q.Abandon(ctx, b.Token, AbandonOptions{IgnoreAttempt: true})
	case c.o.MaxAttempts > 0 && b.MaxAttempt() >= c.o.MaxAttempts:
		settleErr = c.deadLetter(ctx, b, err)
	default:
		delay := c.o.Backoff(b.MaxAttempt())
		log.Debug("handler failed; retrying later", "err", err, "delay", delay)
		settleErr = c.q.Abandon(ctx, b.Token, AbandonOptions{Delay: delay})
	}
	if settleErr != nil {
		log.Error("consumer could not settle a batch; it will be redelivered after its lock lapses", "err", settleErr)
	}
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, b *Batch) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("mq: handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return c.handle(ctx, b)
}

// renew extends b's lock every LockTimeout/3 until ctx ends; on a lost lock it closes
// lost and cancels the handler.
func (c *Consumer) renew(ctx context.Context, b *Batch, lost chan<- struct{}, cancel context.CancelFunc) {
	t := time.NewTicker(c.o.LockTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, err := c.q.Renew(ctx, b.Token, c.o.LockTimeout)
			if errors.Is(err, ErrLockLost) {
				close(lost)
				cancel()
				return
			}
			if err != nil && ctx.Err() == nil {
				c.log.Warn("consumer could not renew a lock; retrying", "err", err)
			}
		}
	}
}

// deadLetter removes b from the queue, moving its messages to the dead-letter queue
// in the same step unless they are discarded.
func (c *Consumer) deadLetter(ctx context.Context, b *Batch, cause error) error {
	c.log.Warn("batch dead-lettered after too many attempts", "routing_key", b.RoutingKey,
		"attempt", b.MaxAttempt(), "err", cause, "discarded", c.o.DiscardDeadLetters)
	var copies []Message
	if !c.o.DiscardDeadLetters {
		for _, d := range b.Messages {
			copies = append(copies, Message{Queue: c.o.DeadLetterQueue, RoutingKey: b.RoutingKey, Payload: d.Payload, Tag: d.Tag})
		}
	}
	if err := c.q.Ack(ctx, b.Token, copies...); err != nil {
		return err
	}
	if c.o.OnDeadLetter != nil {
		c.o.OnDeadLetter(b, cause)
	}
	return nil
}
