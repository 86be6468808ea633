package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Handler processes one batch. Returning nil acks every message of the batch.
//
// An error fails the batch at one message: FailedAt(i, err) (or a handler built with
// PerMessage) says that message i failed, so the messages before it are acked and
// the ones after it are released without counting an attempt. Any other error is a
// failure of message 0, which releases the whole batch: report the index to spare
// the messages that did not fail.
//
// The failed message is retried after ConsumerOptions.Backoff, or dead-lettered on
// its own once it has been tried MaxAttempts times. While it waits for its retry its
// routing key stays held, so no later message of the key is handled before it.
//
// ctx ends when the batch's lock is lost or the consumer's shutdown grace period is
// over; a handler should then stop promptly.
type Handler func(ctx context.Context, b *Batch) error

// MessageError reports that message Index of a batch (an index into
// Batch.Messages) failed with Err. See Handler.
type MessageError struct {
	Index int   // the failed message's index in Batch.Messages
	Err   error // why it failed
}

// Error names the failed message's index and its error.
func (e *MessageError) Error() string {
	return fmt.Sprintf("mq: message %d of the batch failed: %v", e.Index, e.Err)
}

// Unwrap returns Err.
func (e *MessageError) Unwrap() error { return e.Err }

// FailedAt returns the error with which a Handler reports that message i of its
// batch failed with err. It returns nil when err is nil.
func FailedAt(i int, err error) error {
	if err == nil {
		return nil
	}
	return &MessageError{Index: i, Err: err}
}

// PerMessage returns a Handler that calls fn for each message of the batch in order
// and stops at the first failure, reporting its index (see FailedAt). It also stops
// before the next message once ctx has ended. A nil fn gives a nil Handler.
func PerMessage(fn func(ctx context.Context, b *Batch, d Delivery) error) Handler {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, b *Batch) error {
		for i, d := range b.Messages {
			if err := ctx.Err(); err != nil {
				return FailedAt(i, err)
			}
			if err := fn(ctx, b, d); err != nil {
				return FailedAt(i, err)
			}
		}
		return nil
	}
}

// ConsumerOptions tune a Consumer. The zero value gives the documented defaults.
type ConsumerOptions struct {
	// Concurrency is the number of batches handled at once. Default 1. Each fetch
	// takes up to as many batches as there are idle handlers (DequeueBatches), and
	// the outcomes of the batches that finished meanwhile are applied together, in
	// one Settle call. A handler is idle again as soon as its batch's outcome is
	// queued for settling (its lock still renewed until then); at most Concurrency
	// more batches wait so.
	Concurrency int
	// LockTimeout is the lock taken on each batch; the consumer renews it every
	// LockTimeout/3 until the batch is settled. Default DefaultLockTimeout.
	LockTimeout time.Duration
	// PollWait is how long one fetch waits for work (a long poll). Messages enqueued
	// in this process wake the consumer at once; those enqueued by another process
	// are seen within PollWait. Default 1s.
	PollWait time.Duration
	// MaxAttempts is how many times a message may be tried before it is
	// dead-lettered. Default 10; negative retries forever.
	MaxAttempts int
	// Backoff gives the delay before retry number attempt+1 after attempt failed.
	// Default ExponentialBackoff(time.Second, 5*time.Minute).
	Backoff func(attempt int) time.Duration
	// DeadLetterQueue receives the messages that failed MaxAttempts times: each is
	// moved there with its id, payload, routing key, attempt count, origin queue and
	// the handler's error as its reason (see Settlement; Admin peeks at and redrives
	// dead letters). Default: the queue's name + ".dead".
	DeadLetterQueue string
	// DiscardDeadLetters acks those messages instead (after logging them and calling
	// OnDeadLetter).
	DiscardDeadLetters bool
	// OnDeadLetter, if set, is called once for each dead-lettered (or discarded)
	// message, with its batch and the handler's error, after the queue applied it.
	OnDeadLetter func(b *Batch, d Delivery, err error)
	// MaxMessages bounds the messages of each keyed batch (see
	// DequeueOptions.MaxMessages). Zero means DefaultMaxMessages; negative means no
	// bound.
	MaxMessages int
	// MaxBytes bounds the payload bytes of each keyed batch (see
	// DequeueOptions.MaxBytes). Zero means DefaultMaxBytes; negative means no bound.
	MaxBytes int
	// Tags selects the messages fetched by their tag, as DequeueOptions.Tags; the
	// zero value accepts every tag.
	Tags TagFilter
	// Session, when set, fetches for Session.Owner with session affinity, as
	// DequeueOptions.Session; nil fetches only session-less messages.
	Session *SessionOptions
	// KeyAttr, when set, fetches only keyed messages whose routing key's attribute
	// it accepts, as DequeueOptions.KeyAttr; nil accepts every key.
	KeyAttr *AttrFilter
	// ShutdownGrace is how long Run lets running handlers finish after its context
	// ends before cancelling theirs. Default 30s.
	ShutdownGrace time.Duration
	// Logger receives the consumer's records; nil is silent.
	Logger *slog.Logger
	// TracerProvider, when set, traces each batch: a span "process <queue>" of kind
	// consumer (messaging.* attributes, duroq.mq.outcome: acked, retried,
	// dead_lettered, released, lock_lost, unsettled) that the handler's context
	// carries. Default: none, no cost.
	TracerProvider trace.TracerProvider
	// MeterProvider, when set, receives messaging.process.duration (s, the
	// handler's time per batch), messaging.client.consumed.messages,
	// duroq.mq.batches (by duroq.mq.outcome: retried counts retries, dead_lettered
	// the messages given up, one per batch) and, while Run runs, the gauges
	// duroq.mq.queue.messages (by duroq.mq.state: ready, delayed, locked) and
	// duroq.mq.queue.oldest_ready.age (s since the longest-waiting ready message
	// became visible; 0 when none is ready), read from Stats at each collection.
	// Default: none, no cost.
	MeterProvider metric.MeterProvider
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
// they are handled, acks what succeeded, retries failed messages with backoff
// without breaking per-key order, dead-letters the ones that keep failing and shuts
// down gracefully.
type Consumer struct {
	q       MessageQueue
	queue   string
	handle  Handler
	o       ConsumerOptions
	log     *slog.Logger
	tel     *telemetry // nil without a TracerProvider or MeterProvider
	running sync.Mutex // one Run at a time
}

// NewConsumer returns a consumer of queue on q. It does nothing until Run.
func NewConsumer(q MessageQueue, queue string, h Handler, o ConsumerOptions) (*Consumer, error) {
	const op = "new consumer"
	if q == nil {
		return nil, invalid(op, "queue", "the MessageQueue must not be nil")
	}
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
	if !o.DiscardDeadLetters {
		// Checked now rather than failing every Settle that dead-letters.
		if err := checkName(op, "DeadLetterQueue", o.DeadLetterQueue, true); err != nil {
			return nil, err
		}
		if o.DeadLetterQueue == queue {
			return nil, invalid(op, "DeadLetterQueue", "must differ from the consumed queue")
		}
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{q: q, queue: queue, handle: h, o: o, log: o.Logger.With("queue", queue),
		tel: newTelemetry(queue, o.TracerProvider, o.MeterProvider)}, nil
}

// Run consumes until ctx ends, then stops fetching, lets running handlers finish for
// up to ShutdownGrace, cancels the ones still running, applies the outcomes of all
// of them and returns nil. A batch whose handler was cancelled is released without
// counting the attempt (its messages acked before the failed index stay acked). Run
// returns an error early only if the queue fails for good (ErrClosed, ErrInvalid,
// ErrCorrupt); it still drains the running handlers first.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.TryLock() {
		return fmt.Errorf("mq: consumer of %q: Run is already running", Clip(c.queue))
	}
	defer c.running.Unlock()
	defer c.tel.observe(c.q, c.queue, func(err error) { c.log.Warn("consumer queue metrics not registered", "err", err) })()

	// Handlers and their settlements outlive ctx: they get the grace period.
	base := context.WithoutCancel(ctx)
	work, cancelWork := context.WithCancel(base)
	defer cancelWork()
	fetchCtx, stopFetching := context.WithCancel(ctx)
	defer stopFetching()
	r := &run{
		c:         c,
		work:      work,
		slots:     make(chan struct{}, c.o.Concurrency),
		unsettled: make(chan struct{}, c.o.Concurrency),
		// Every batch being settled holds an unsettled entry while it waits for its
		// outcome, so the channel never holds more than Concurrency requests.
		settles: make(chan settleReq, c.o.Concurrency),
		stop:    stopFetching,
	}
	settlerDone := make(chan struct{})
	go func() {
		defer close(settlerDone)
		r.settler(base)
	}()

	r.fetch(fetchCtx)

	c.log.Debug("consumer stopping: draining running handlers", "grace", c.o.ShutdownGrace)
	drained := make(chan struct{})
	go func() { r.handlers.Wait(); close(drained) }()
	grace := time.NewTimer(c.o.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
		c.log.Warn("consumer shutdown grace elapsed: cancelling running handlers")
		cancelWork()
		<-drained
	}
	close(r.settles)
	<-settlerDone
	return r.fatal
}

// run is the state of one Run: a fetch loop, a goroutine per batch being handled and
// a settler that applies the batches' settlements in rounds.
type run struct {
	c     *Consumer
	work  context.Context // the handlers' context: ends when the shutdown grace is over
	slots chan struct{}   // one entry per batch fetched whose handler has not finished
	// unsettled has one entry per batch whose handler finished and whose settlement
	// waits for its Settle round: a handler's slot is free for the next fetch while
	// its batch is settled, and at most Concurrency batches wait to be.
	unsettled chan struct{}
	settles   chan settleReq
	handlers  sync.WaitGroup

	mu    sync.Mutex
	round chan struct{} // while a Settle round runs: closed when it has applied it

	once  sync.Once
	fatal error
	stop  context.CancelFunc // stops fetching
}

// fail records a permanent queue failure, returned by Run, and stops fetching.
func (r *run) fail(err error) {
	r.once.Do(func() { r.fatal = fmt.Errorf("mq: consumer of %q: %w", Clip(r.c.queue), err) })
	r.stop()
}

// permanent reports whether a queue error will not go away by retrying.
func permanent(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrCorrupt)
}

// fetch fetches batches while slots are free and starts one goroutine per batch,
// until ctx ends or the queue fails for good.
func (r *run) fetch(ctx context.Context) {
	c := r.c
	opts := DequeueOptions{LockTimeout: c.o.LockTimeout, Wait: c.o.PollWait, Tags: c.o.Tags, Session: c.o.Session,
		KeyAttr: c.o.KeyAttr, MaxMessages: c.o.MaxMessages, MaxBytes: c.o.MaxBytes}
	failures := 0
	for {
		free := r.acquire(ctx)
		if free == 0 {
			return
		}
		bs, err := c.q.DequeueBatches(ctx, c.queue, opts, free)
		// Batches that came are handled even if ctx ended meanwhile: they are locked.
		for _, b := range bs {
			r.handlers.Go(func() { r.process(b) })
		}
		for range free - len(bs) {
			<-r.slots
		}
		switch {
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
			return
		case permanent(err):
			r.fail(err)
			return
		default:
			// A transient storage error: back off so a broken database is not hammered.
			failures++
			delay := ExponentialBackoff(50*time.Millisecond, 5*time.Second)(failures)
			c.log.Error("consumer fetch failed", "err", err, "retry_in", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}
}

// acquire waits for a free slot and takes every free one, and returns how many it
// took: 0 when ctx ended first. When a Settle round is running it waits for the
// round to end too: the handlers whose batches it settles have freed their slots by
// then, so one fetch refills them all rather than each fetch taking the few that
// happened to be free.
func (r *run) acquire(ctx context.Context) int {
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	r.mu.Lock()
	round := r.round
	r.mu.Unlock()
	if round != nil {
		select {
		case <-round:
		case <-ctx.Done():
			<-r.slots
			return 0
		}
	}
	n := 1
	for n < cap(r.slots) {
		select {
		case r.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// process runs the handler on b with lock renewal and settles the batch.
func (r *run) process(b *Batch) {
	c := r.c
	hctx, cancel := context.WithCancel(r.work)
	defer cancel()
	// The lock is renewed until the batch is settled, not only while the handler
	// runs: its settlement may wait for the Settle round in progress.
	renewCtx, stopRenew := context.WithCancel(r.work)
	lost := make(chan struct{})
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		c.renew(renewCtx, b, lost, cancel)
	}()
	defer func() { stopRenew(); <-renewDone }()

	hctx, span := c.tel.start(hctx, b)
	began := time.Now()
	err := c.call(hctx, b)
	took, outcome := time.Since(began), outcomeAcked
	defer func() { c.tel.end(span, b, outcome, err, took) }()
	select {
	case <-lost:
		<-r.slots // nothing to settle
		c.batchLog(b).Warn("consumer lost the batch's lock; it will be redelivered", "handler_err", err)
		outcome = outcomeLockLost
		return
	default:
	}
	s, dead, cause := c.settlement(b, err, r.work.Err() != nil)
	switch {
	case dead != nil:
		outcome = outcomeDeadLettered
	case err != nil && s.Tried > 0:
		outcome = outcomeRetried
	case err != nil:
		outcome = outcomeReleased
	}
	done := make(chan error, 1)
	r.unsettled <- struct{}{} // the settler frees it
	<-r.slots
	r.settles <- settleReq{s, done}
	switch err := <-done; {
	case errors.Is(err, ErrLockLost):
		c.batchLog(b).Warn("consumer lost the batch's lock before settling it; it will be redelivered", "err", err)
		outcome = outcomeLockLost
	case err != nil:
		c.batchLog(b).Error("consumer could not settle a batch; it will be redelivered after its lock lapses", "err", err)
		outcome = outcomeUnsettled
	case dead != nil:
		c.batchLog(b).Warn("message dead-lettered after too many attempts", "id", dead.ID, "message_attempt", dead.Attempt,
			"err", cause, "discarded", c.o.DiscardDeadLetters)
		if c.o.OnDeadLetter != nil {
			c.o.OnDeadLetter(b, *dead, cause)
		}
	}
}

// settlement decides how b ends after its handler returned err (cancelled: cut
// short by shutdown). dead is the message it dead-letters, if any, and cause the
// failure.
func (c *Consumer) settlement(b *Batch, err error, cancelled bool) (s Settlement, dead *Delivery, cause error) {
	s.Token = b.Token
	if err == nil {
		s.Acked = len(b.Messages)
		return s, nil, nil
	}
	i, cause := c.failure(b, err)
	s.Acked = i
	if cancelled {
		// Not the messages' fault: the rest is released at once, no attempt counted.
		return s, nil, cause
	}
	d := b.Messages[i]
	s.Reason = cause.Error()
	switch {
	case c.o.MaxAttempts < 0 || d.Attempt < c.o.MaxAttempts:
		// Only message i counts the failure; the key stays held while it waits for its
		// retry, so the messages after it keep their order.
		s.Tried = 1
		s.Delay = max(0, c.o.Backoff(d.Attempt))
		c.batchLog(b).Debug("handler failed; retrying later", "index", i, "id", d.ID, "err", cause, "delay", s.Delay)
	case c.o.DiscardDeadLetters:
		s.Acked = i + 1
		dead = &d
	default:
		s.DeadLettered = 1
		s.DeadLetterQueue = c.o.DeadLetterQueue
		dead = &d
	}
	// The messages after i were not tried: they are released at once (with no Delay
	// the key goes too) and keep their place in the key's order.
	return s, dead, cause
}

// failure returns the index of the message of b whose failure err reports, and its
// cause: message 0 and err itself unless err is a MessageError.
func (c *Consumer) failure(b *Batch, err error) (int, error) {
	var me *MessageError
	if !errors.As(err, &me) || me.Err == nil {
		return 0, err
	}
	if me.Index < 0 || me.Index >= len(b.Messages) {
		c.batchLog(b).Warn("handler reported a failed message outside its batch; failing message 0", "index", me.Index, "err", me.Err)
		return 0, me.Err
	}
	return me.Index, me.Err
}

// batchLog is the consumer's logger with b's attributes (built only to log).
func (c *Consumer) batchLog(b *Batch) *slog.Logger {
	return c.log.With("routing_key", b.RoutingKey, "messages", len(b.Messages), "attempt", b.MaxAttempt())
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

// settleReq is one batch's settlement and where its outcome goes.
type settleReq struct {
	s    Settlement
	done chan<- error
}

// settleTries bounds the attempts of one Settle round that failed without changing
// anything: after that its batches are redelivered once their locks lapse.
const settleTries = 3

// settler applies settlements until r.settles is closed: every request waiting when
// a round starts joins it, so while one Settle call runs the next round accumulates
// (group commit).
func (r *run) settler(ctx context.Context) {
	for req := range r.settles {
		round := []settleReq{req}
		// Batches fetched together tend to finish together: let the handlers that are
		// ready to run post their settlements before the round is cut.
		runtime.Gosched()
	gather:
		for {
			select {
			case req, ok := <-r.settles:
				if !ok {
					break gather
				}
				round = append(round, req)
			default:
				break gather
			}
		}
		ended := make(chan struct{})
		r.mu.Lock()
		r.round = ended
		r.mu.Unlock()
		r.settleRound(ctx, round)
		for range round {
			<-r.unsettled
		}
		r.mu.Lock()
		r.round = nil
		r.mu.Unlock()
		close(ended)
	}
}

// settleRound applies one round in one Settle call and reports each request's
// outcome: nil, its lock-lost error, or the error that failed the whole call.
func (r *run) settleRound(ctx context.Context, round []settleReq) {
	c := r.c
	ss := make([]Settlement, len(round))
	for i, req := range round {
		ss[i] = req.s
	}
	var err error
	for try := 1; ; try++ {
		sctx, cancel := context.WithTimeout(ctx, c.o.LockTimeout)
		err = c.q.Settle(sctx, ss...)
		cancel()
		if err == nil || errors.Is(err, ErrLockLost) || permanent(err) || errors.Is(err, context.DeadlineExceeded) || try == settleTries {
			break
		}
		c.log.Warn("consumer could not settle; retrying", "err", err, "batches", len(ss))
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
	}
	if permanent(err) {
		r.fail(err)
	}
	var se *SettleError
	lostSome := errors.As(err, &se)
	for i, req := range round {
		if lostSome {
			req.done <- se.Lost[i] // nil: applied
		} else {
			req.done <- err
		}
	}
}
