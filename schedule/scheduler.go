package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/duroq/duroq/mq"
)

// Starter starts orchestration instances for OrchestrationTarget schedules.
// *runtime.Client is one. Starting an instance that exists must change nothing
// and succeed, as the runtime's does: a firing run twice starts its slot's
// instance twice.
type Starter interface {
	// StartOrchestration starts instance running orchestration name with input.
	StartOrchestration(ctx context.Context, instance, name, input string) error
}

// SchedulerOptions tune NewScheduler. The zero value gives the documented
// defaults.
type SchedulerOptions struct {
	// Queue is the queue that holds the schedules (see ManagerOptions.Queue).
	// Default DefaultQueue.
	Queue string
	// Starter starts the instances of Orchestration targets. Without it such a
	// schedule's firings are put back, logged, for a Scheduler that has one.
	Starter Starter
	// Running reports whether an instance is still running (started and not
	// ended; an instance whose start is queued counts as running), for
	// OverlapSkip. Without it such a schedule's firings are put back, logged. With
	// a runtime.Client c:
	//
	//	func(ctx context.Context, id string) (bool, error) {
	//		st, err := c.Status(ctx, id)
	//		return !st.Terminal() && st.State != runtime.StateNotFound, err
	//	}
	Running func(ctx context.Context, instance string) (bool, error)
	// Now is the clock (default time.Now). It must be the queue's clock: a
	// firing is due when the queue makes it visible, and its slots are the ones
	// up to Now.
	Now func() time.Time
	// LockTimeout is how long a firing stays locked to this Scheduler: if the
	// process dies while firing, another Scheduler fires the same slots once it
	// lapses. A firing is given up (and fired again later) when it takes longer.
	// Default mq.DefaultLockTimeout.
	LockTimeout time.Duration
	// PollWait is how long Run waits for a due firing per poll. Firings made due
	// in this process wake it at once; those of other processes are seen within
	// PollWait. Default 1s.
	PollWait time.Duration
	// Logger receives the Scheduler's records; nil is silent.
	Logger *slog.Logger
}

// Scheduler fires the schedules of a queue. Any number of Schedulers, in any
// number of processes, may consume the same queue: each slot fires once.
//
// A firing is the schedule's message, visible at its slot (plus jitter). The
// Scheduler that takes it computes the slots to fire (catch-up policy), starts the
// instances of an Orchestration target (with the slot ids as instance ids), then
// in one atomic Settle acks the firing, enqueues the messages of an Enqueue target
// and enqueues the next firing. A Scheduler that dies before the Settle leaves
// the firing locked; when the lock lapses another takes it and fires the same
// slots: the enqueues happen with the Settle that consumes the firing, and a
// repeated start is a no-op.
type Scheduler struct {
	q   mq.MessageQueue
	o   SchedulerOptions
	log *slog.Logger
}

// NewScheduler returns a Scheduler of the schedules o.Queue of q holds. It does
// nothing until Run or FireDue.
func NewScheduler(q mq.MessageQueue, o SchedulerOptions) (*Scheduler, error) {
	const op = "new scheduler"
	if q == nil {
		return nil, invalid(op, "", "queue", "the MessageQueue must not be nil")
	}
	o.Queue = cmp.Or(o.Queue, DefaultQueue)
	if err := mq.CheckQueue(op, o.Queue); err != nil {
		return nil, invalid(op, "", "Queue", err.Error())
	}
	for name, d := range map[string]time.Duration{"LockTimeout": o.LockTimeout, "PollWait": o.PollWait} {
		if d < 0 {
			return nil, invalid(op, "", name, fmt.Sprintf("negative duration %v", d))
		}
	}
	o.LockTimeout = cmp.Or(o.LockTimeout, mq.DefaultLockTimeout)
	o.PollWait = cmp.Or(o.PollWait, time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{q: q, o: o, log: o.Logger.With("queue", o.Queue)}, nil
}

// Run fires schedules as they fall due until ctx ends, then returns nil once the
// firing in progress, if any, is settled. It returns an error early only when the
// queue fails for good (mq.ErrClosed, mq.ErrInvalid, mq.ErrCorrupt); other
// failures are logged and retried.
func (s *Scheduler) Run(ctx context.Context) error {
	opts := mq.DequeueOptions{LockTimeout: s.o.LockTimeout, Wait: s.o.PollWait}
	failures := 0
	for {
		b, err := s.q.DequeueBatch(ctx, s.o.Queue, opts)
		if b != nil {
			_ = s.fire(ctx, b) // logged; a firing that failed comes back
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			failures = 0
		case permanent(err):
			return fmt.Errorf("schedule: scheduler of %q: %w", mq.Clip(s.o.Queue), err)
		default:
			failures++
			delay := mq.ExponentialBackoff(50*time.Millisecond, 5*time.Second)(failures)
			s.log.Error("scheduler could not poll its queue", "err", err, "retry_in", delay)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
		}
	}
}

// FireDue fires every firing due now and returns how many it handled (fired,
// skipped or put back), with the errors of those that failed: a failed firing is
// put back and comes due again later. Run does this as firings fall due; FireDue
// suits a process started by an external cron, and tests that move a clock.
func (s *Scheduler) FireDue(ctx context.Context) (int, error) {
	opts := mq.DequeueOptions{LockTimeout: s.o.LockTimeout}
	var errs []error
	for n := 0; ; n++ {
		b, err := s.q.DequeueBatch(ctx, s.o.Queue, opts)
		if err != nil || b == nil {
			return n, errors.Join(append(errs, err)...)
		}
		if err := s.fire(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
}

// permanent reports whether a queue error will not go away by retrying.
func permanent(err error) bool {
	return errors.Is(err, mq.ErrClosed) || errors.Is(err, mq.ErrInvalid) || errors.Is(err, mq.ErrCorrupt)
}

// Bounds of one firing's work: the rest of a long catch-up is fired by the
// firings that follow at once.
const (
	maxSlotsPerFiring = 100
	maxBytesPerFiring = 8 << 20
)

// unreadableRetry is how long an unreadable firing waits before it is offered
// again: a newer version of this package may be deployed to read it.
const unreadableRetry = time.Minute

// retryBackoff is the delay before a failed firing is offered again.
var retryBackoff = mq.ExponentialBackoff(time.Second, time.Minute)

// fire handles the firing b and logs what happened. It returns nil when the
// firing was settled (fired, or skipped) or lost its lock (the schedule was
// deleted, paused or fired by another Scheduler), else why it failed.
func (s *Scheduler) fire(ctx context.Context, b *mq.Batch) error {
	// A firing started is finished, even if ctx ends: left locked, its slots would
	// wait for the lock to lapse. It cannot outlive its lock anyway.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.LockTimeout)
	defer cancel()
	d := b.Messages[0]
	log := s.log.With("schedule", d.Key, "attempt", d.Attempt)
	r, sl, err := decode(s.o.Queue, d.Key, d.Payload)
	if err != nil {
		log.Error("scheduler cannot read a schedule; offering it again later", "err", err, "retry_in", unreadableRetry)
		return s.release(ctx, log, b, unreadableRetry, err)
	}
	now := s.o.Now()
	var due []time.Time
	if !r.Paused { // a paused firing made visible (by a redrive, say) is put back
		due = r.due(sl, now)
		if r.Next.Before(now) && (len(due) == 0 || due[0].After(r.Next)) {
			log.Info("scheduler skipped missed slots (catch-up policy)", "from", r.Next, "catchup", r.Catchup,
				"firing", len(due))
		}
	}
	fire := due[:min(len(due), slotsPerFiring(r))]
	if err := s.start(ctx, log, r, fire); err != nil {
		delay := retryBackoff(d.Attempt)
		log.Warn("scheduler could not start a slot's orchestration; retrying", "err", err, "retry_in", delay)
		return s.release(ctx, log, b, delay, err)
	}
	next, delay := r.Next, pausedDelay
	switch {
	case r.Paused:
	case len(fire) < len(due):
		next, delay = due[len(fire)], 0 // more of the catch-up, at once
	case r.Next.After(now):
		delay = r.Next.Add(jitter(time.Duration(r.Jitter))).Sub(now) // offered early (another clock): wait
	default:
		if next = sl.next(now); next.IsZero() {
			log.Error("scheduler paused a schedule whose cron expression names no time in the next five years")
			r.Paused = true
		} else {
			delay = next.Add(jitter(time.Duration(r.Jitter))).Sub(now)
		}
	}
	var then []mq.Message
	if e := r.Enqueue; e != nil {
		for _, slot := range fire {
			then = append(then, mq.Message{Queue: e.Queue, RoutingKey: e.RoutingKey, Tag: e.Tag, Payload: e.Payload, Key: SlotID(r.ID, slot)})
		}
	}
	r.Next = next
	m, err := r.message(s.o.Queue, delay)
	if err != nil {
		return s.release(ctx, log, b, unreadableRetry, err)
	}
	err = s.q.Settle(ctx, mq.Settlement{Token: b.Token, Acked: 1, Then: append(then, m)})
	if errors.Is(err, mq.ErrDuplicateKey) && len(then) > 0 {
		// A message keyed with one of the slot ids is pending in the target queue:
		// an application's own, since each slot is enqueued once. Rescheduling
		// matters more than these slots.
		log.Warn("scheduler skipped slots whose slot id is already a pending message key in the target queue",
			"target_queue", r.Enqueue.Queue, "slots", len(then), "err", err)
		err = s.q.Settle(ctx, mq.Settlement{Token: b.Token, Acked: 1, Then: []mq.Message{m}})
	}
	switch {
	case errors.Is(err, mq.ErrLockLost):
		log.Info("scheduler lost a firing's lock before settling it: the schedule was deleted, paused or fired by another scheduler",
			"err", err)
		return nil
	case err != nil:
		log.Error("scheduler could not settle a firing; it fires again once its lock lapses", "err", err)
		return fmt.Errorf("schedule %q: settle: %w", mq.Clip(r.ID), err)
	}
	if len(fire) > 0 {
		log.Debug("scheduler fired", "slots", len(fire), "first", fire[0], "next", next)
	}
	return nil
}

// slotsPerFiring bounds the slots one firing of r fires, by number and bytes.
func slotsPerFiring(r *record) int {
	size := 0
	if r.Enqueue != nil {
		size = len(r.Enqueue.Payload)
	}
	return max(1, min(maxSlotsPerFiring, maxBytesPerFiring/(size+1)))
}

// due returns the slots of r to fire at now, oldest first, by its catch-up policy.
func (r *record) due(sl slots, now time.Time) []time.Time {
	switch r.Catchup {
	case CatchupAll:
		return sl.latest(r.Next, now, r.MaxCatchup)
	case CatchupSkip:
		last := sl.latest(r.Next, now, 1)
		if len(last) == 1 && now.Sub(last[0]) > time.Duration(r.Jitter+r.CatchupWindow) {
			return nil
		}
		return last
	default:
		return sl.latest(r.Next, now, 1)
	}
}

// start starts the instances of r's Orchestration target for the slots (none for
// other targets), as its overlap policy allows, and records the last one started.
func (s *Scheduler) start(ctx context.Context, log *slog.Logger, r *record, slots []time.Time) error {
	o := r.Orchestration
	if o == nil || len(slots) == 0 {
		return nil
	}
	if s.o.Starter == nil {
		return errors.New("this Scheduler has no Starter (SchedulerOptions.Starter) for Orchestration targets")
	}
	running := false // the last instance started is still running
	if r.Overlap == OverlapSkip && r.LastInstance != "" {
		if s.o.Running == nil {
			return errors.New("this Scheduler cannot tell whether an instance runs (SchedulerOptions.Running) for OverlapSkip")
		}
		var err error
		if running, err = s.o.Running(ctx, r.LastInstance); err != nil {
			return fmt.Errorf("is %q running: %w", mq.Clip(r.LastInstance), err)
		}
	}
	for _, slot := range slots {
		instance := SlotID(r.ID, slot)
		if running && r.Overlap == OverlapSkip {
			log.Info("scheduler skipped a slot: the previous instance is still running (overlap policy)",
				"slot", instance, "running", r.LastInstance)
			continue
		}
		if err := s.o.Starter.StartOrchestration(ctx, instance, o.Name, o.Input); err != nil {
			return fmt.Errorf("start %q: %w", mq.Clip(instance), err)
		}
		// Just started: running (or about to) as far as the next slot is concerned.
		r.LastInstance, running = instance, true
	}
	return nil
}

// release puts the firing b back, offered again after delay, recording why.
func (s *Scheduler) release(ctx context.Context, log *slog.Logger, b *mq.Batch, delay time.Duration, why error) error {
	err := s.q.Settle(ctx, mq.Settlement{Token: b.Token, Tried: 1, Delay: delay, Reason: why.Error(), ReleaseKey: true})
	if err != nil && !errors.Is(err, mq.ErrLockLost) {
		log.Error("scheduler could not put a firing back; it is offered again once its lock lapses", "err", err)
	}
	return fmt.Errorf("schedule %q: %w", mq.Clip(b.Messages[0].Key), why)
}
