package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// ActivityContext is an activity's context: a context.Context cancelled when the
// activity is given up (the orchestration cancelled it or ended, its lock was lost)
// or the runtime stops, plus what the activity runs for.
type ActivityContext struct {
	context.Context
	item    *provider.WorkItem
	attempt uint32
	worker  string
	client  *Client
	log     *slog.Logger
}

// InstanceID is the orchestration instance that scheduled the activity.
func (a *ActivityContext) InstanceID() string { return a.item.Instance }

// ExecutionID is the execution of that instance that scheduled the activity.
func (a *ActivityContext) ExecutionID() uint64 { return a.item.ExecutionID }

// ActivityID is the id of the activity's ActivityScheduled event: with InstanceID
// and ExecutionID, it names this schedule across attempts (an idempotency key).
func (a *ActivityContext) ActivityID() uint64 { return a.item.ID }

// Name is the activity's name.
func (a *ActivityContext) Name() string { return a.item.Name }

// SessionID is the session the activity runs on (OnSession; "" when none).
func (a *ActivityContext) SessionID() string { return a.item.SessionID }

// Tag is the activity's routing tag (WithTag; "" when untagged).
func (a *ActivityContext) Tag() string { return a.item.Tag }

// Attempt counts the deliveries of this schedule (1 on the first run; more after a
// crash or a lost lock).
func (a *ActivityContext) Attempt() uint32 { return a.attempt }

// WorkerID is the node id of the runtime running the activity.
func (a *ActivityContext) WorkerID() string { return a.worker }

// Client is a client over the runtime's provider, for activities that start or
// signal orchestrations.
func (a *ActivityContext) Client() *Client { return a.client }

// Logger logs with the activity's identity attached.
func (a *ActivityContext) Logger() *slog.Logger { return a.log }

// workers runs activities until fetchCtx ends: one fetcher leases as many items as
// there are free slots (one transaction with a BatchProvider), each activity runs on
// its own goroutine, and one committer acks the completions that are ready together.
func (r *Runtime) workers(fetchCtx, workCtx context.Context) {
	bp, batched := r.p.(provider.BatchProvider)
	slots := make(chan struct{}, r.opts.WorkerConcurrency)
	settled := make(chan settledActivity, r.opts.WorkerConcurrency)
	committed := make(chan struct{})
	last := &lastErrors{m: map[activityKey]string{}}
	go func() { r.ackCommitter(workCtx, bp, batched, settled, last); close(committed) }()
	settle := func(s settledActivity) { settled <- s }
	var running sync.WaitGroup
	failures := 0
	for fetchCtx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-fetchCtx.Done():
			continue
		}
		free := 1
		for free < r.opts.WorkerConcurrency && free < maxBatch {
			select {
			case slots <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		began := time.Now()
		opts := provider.WorkFetchOptions{LockTimeout: r.opts.WorkerLockTimeout, PollTimeout: r.opts.PollTimeout, Tags: r.opts.WorkerTags}
		if r.sessions.active() < r.opts.MaxSessionsPerRuntime {
			opts.Session = &provider.SessionFetchConfig{OwnerID: r.opts.WorkerNodeID, LockTimeout: r.opts.SessionLockTimeout}
		}
		var leases []*provider.WorkItemLease
		var err error
		if batched && free > 1 {
			leases, err = bp.FetchWorkItems(fetchCtx, opts, free)
		} else {
			var lease *provider.WorkItemLease
			if lease, err = r.p.FetchWorkItem(fetchCtx, opts); lease != nil {
				leases = []*provider.WorkItemLease{lease}
			}
		}
		for range free - len(leases) {
			<-slots
		}
		switch {
		case fetchCtx.Err() != nil:
			for _, l := range leases {
				_ = r.p.AbandonWorkItem(workCtx, l.LockToken, 0, true)
				<-slots
			}
			continue
		case err != nil:
			failures++
			r.fetchFailed(fetchCtx, "fetch work item", err, failures)
			continue
		case len(leases) == 0:
			failures = 0
			r.pollPause(fetchCtx, began)
			continue
		}
		failures = 0
		for _, l := range leases {
			running.Go(func() {
				defer func() { <-slots }()
				r.runActivity(workCtx, l, settle, last)
			})
		}
	}
	running.Wait()
	close(settled)
	<-committed
}

// maxBatch bounds the items of one batched fetch or commit.
const maxBatch = 128

// settledActivity is an activity's outcome waiting for its ack.
type settledActivity struct {
	lease      *provider.WorkItemLease
	completion *provider.WorkItem
	log        *slog.Logger
}

// ackCommitter acks settled activities, all those ready at once in one transaction
// (group commit); a failed group is acked item by item to isolate the failure.
func (r *Runtime) ackCommitter(ctx context.Context, bp provider.BatchProvider, batched bool, settled <-chan settledActivity, last *lastErrors) {
	for first := range settled {
		group := []settledActivity{first}
		// What is buffered now, not what arrives while draining: a group is at most
		// the buffer plus one, which bounds the work a crash can leave executed but
		// not committed (running, buffered, being committed).
		for n := len(settled); batched && n > 0 && len(group) < maxBatch; n-- {
			group = append(group, <-settled)
		}
		if len(group) > 1 {
			acks := make([]provider.WorkAck, len(group))
			for i, s := range group {
				acks[i] = provider.WorkAck{Token: s.lease.LockToken, Completion: s.completion}
			}
			if err := bp.AckWorkItems(context.WithoutCancel(ctx), acks); err == nil {
				for _, s := range group {
					last.forget(&s.lease.Item)
				}
				continue
			}
		}
		for _, s := range group {
			r.complete(ctx, s.lease, s.completion, s.log, last)
		}
	}
}

// runActivity executes one leased activity and commits its completion.
func (r *Runtime) runActivity(ctx context.Context, lease *provider.WorkItemLease, settle func(settledActivity), last *lastErrors) {
	item := &lease.Item
	log := r.log
	if !discards(log) {
		log = log.With("instance", item.Instance, "execution", item.ExecutionID, "activity", item.Name, "activity_id", item.ID)
	}
	r.activities.Store(lease, log) // for Run to name it if it outlives the runtime
	defer r.activities.Delete(lease)
	if item.SessionID != "" {
		if !r.sessions.acquire(item.SessionID, r.opts.MaxSessionsPerRuntime) {
			// Claimed by a fetch that raced the cap: give it back for a moment.
			if err := r.p.AbandonWorkItem(ctx, lease.LockToken, 20*time.Millisecond, true); err != nil {
				log.Warn("abandon work item over the session cap", "err", err)
			}
			return
		}
		defer r.sessions.release(item.SessionID)
	}
	if lease.AttemptCount > r.opts.MaxAttempts {
		// Why it kept failing, when this runtime can tell.
		reason := last.get(item)
		if r.activity(item.Name) == nil {
			reason = fmt.Sprintf("activity %q is not registered on runtime %s", item.Name, r.opts.WorkerNodeID)
		}
		d := &provider.ErrorDetails{Kind: provider.ErrorPoison, PoisonType: provider.PoisonActivity, Instance: item.Instance, ExecutionID: item.ExecutionID,
			ActivityName: item.Name, ActivityID: item.ID, AttemptCount: lease.AttemptCount, MaxAttempts: r.opts.MaxAttempts, Message: reason}
		log.Warn("poison activity", "attempts", lease.AttemptCount, "reason", reason)
		r.metrics.poisoned("activity")
		settle(settledActivity{lease, failedItem(item, d), log})
		return
	}
	fn := r.activity(item.Name)
	if fn == nil {
		delay := r.retryDelay(lease.AttemptCount)
		log.Warn("activity not registered here; offered again later", "delay", delay)
		if err := r.p.AbandonWorkItem(ctx, lease.LockToken, delay, false); err != nil {
			log.Warn("abandon work item", "err", err)
		}
		return
	}

	spanCtx, span := r.startActivitySpan(ctx, lease)
	traced, failure := "abandoned", error(nil) // the outcome, as each return below sets it
	began := time.Now()
	ended := false
	end := func() {
		if !ended {
			ended = true
			r.metrics.activityRan(item.Name, traced, time.Since(began))
			endActivitySpan(span, traced, failure)
		}
	}
	defer end()
	actx, cancel := context.WithCancel(spanCtx)
	defer cancel()
	var lostMu sync.Mutex
	var lost error
	stopRenew := renewLock(ctx, renewEvery(r.opts.WorkerLockTimeout, r.opts.LockRenewalBuffer),
		func(ctx context.Context) error {
			return r.p.RenewWorkItemLock(ctx, lease.LockToken, r.opts.WorkerLockTimeout)
		},
		func(err error) {
			lostMu.Lock()
			lost = err
			lostMu.Unlock()
			cancel() // cancelled by its orchestration, or the instance ended
		})
	defer stopRenew()

	type outcome struct {
		result string
		err    error
	}
	out := make(chan outcome, 1)
	ac := &ActivityContext{Context: actx, item: item, attempt: lease.AttemptCount, worker: r.opts.WorkerNodeID,
		client: r.Client(), log: log}
	go func() {
		res, err := callUser(fn, ac, item.Input)
		out <- outcome{res, err}
	}()

	var o outcome
	select {
	case o = <-out:
	case <-actx.Done():
		select {
		case o = <-out:
		case <-time.After(r.opts.ActivityCancellationGrace):
			log.Warn("cancelled activity did not return within the grace period; abandoned", "grace", r.opts.ActivityCancellationGrace)
			return
		}
	}
	stopRenew()
	lostMu.Lock()
	gone := lost
	lostMu.Unlock()
	if gone != nil {
		log.Info("activity cancelled; its result is dropped", "reason", gone)
		traced = "cancelled"
		r.metrics.lostLock("activity")
		return
	}
	if ctx.Err() != nil && o.err != nil {
		// Stopped by shutdown: let another runtime run it again.
		_ = r.p.AbandonWorkItem(context.WithoutCancel(ctx), lease.LockToken, 0, true)
		return
	}
	traced, failure = "completed", o.err
	if o.err != nil {
		traced = "failed"
	}
	completion := &provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: item.Instance, ExecutionID: item.ExecutionID, ID: item.ID, Result: o.result}
	if p, ok := o.err.(*userPanic); ok {
		completion = failedItem(item, p.details())
	} else if o.err != nil {
		completion = failedItem(item, &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppActivityFailed, Message: o.err.Error()})
	}
	// Ended before the outcome is handed over: once its ack commits, the
	// orchestration may finish, and whoever then flushes the spans must find this
	// one ended.
	end()
	settle(settledActivity{lease, completion, log})
}

func failedItem(item *provider.WorkItem, d *provider.ErrorDetails) *provider.WorkItem {
	return &provider.WorkItem{Kind: provider.WorkActivityFailed, Instance: item.Instance, ExecutionID: item.ExecutionID, ID: item.ID, Details: d}
}

// complete acks an activity with its completion. A completion that can never be
// stored (ErrInvalid: a result over the size limit, say) is replaced by a failure
// saying why, so the orchestration learns at once instead of after MaxAttempts
// runs; any other failed ack abandons the item so it runs again soon instead of
// waiting for its lock to expire.
func (r *Runtime) complete(ctx context.Context, lease *provider.WorkItemLease, completion *provider.WorkItem, log *slog.Logger, last *lastErrors) {
	ctx = context.WithoutCancel(ctx)
	err := r.ackWork(ctx, lease.LockToken, completion)
	if unstorable(err) {
		log.Error("activity outcome cannot be stored; the activity fails", "err", err)
		what := "result"
		if completion.Kind != provider.WorkActivityCompleted {
			what = "failure"
		}
		completion = failedItem(&lease.Item, &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppActivityFailed,
			Message: fmt.Sprintf("its %s cannot be stored: %s", what, clip(err.Error(), maxReasonBytes))})
		err = r.ackWork(ctx, lease.LockToken, completion)
	}
	switch {
	case err == nil:
		last.forget(&lease.Item)
	case errors.Is(err, provider.ErrLockLost):
		log.Info("activity result dropped: its item was cancelled or re-leased", "err", err)
	default:
		log.Warn("ack work item failed; the activity will run again", "err", err)
		last.set(&lease.Item, "the last attempt's completion was not acked: "+clip(err.Error(), maxReasonBytes))
		_ = r.p.AbandonWorkItem(ctx, lease.LockToken, 100*time.Millisecond, false)
	}
}

// ackWork acks a work item, retrying transient failures a few times.
func (r *Runtime) ackWork(ctx context.Context, token string, completion *provider.WorkItem) error {
	err := r.p.AckWorkItem(ctx, token, completion)
	for attempt := 0; err != nil && provider.IsRetryable(err) && attempt < 4; attempt++ {
		time.Sleep(10 * time.Millisecond << attempt)
		err = r.p.AckWorkItem(ctx, token, completion)
	}
	return err
}

// lastErrors remembers why this runtime's last completion of an activity failed
// (it runs again), for its poison failure to say. It holds at most maxLastErrors:
// an item may run again on another runtime and never come back here.
type lastErrors struct {
	mu sync.Mutex
	m  map[activityKey]string
}

// activityKey names a scheduled activity.
type activityKey struct {
	instance  string
	execution uint64
	id        uint64
}

const maxLastErrors = 1024

func keyOf(item *provider.WorkItem) activityKey {
	return activityKey{item.Instance, item.ExecutionID, item.ID}
}

func (l *lastErrors) set(item *provider.WorkItem, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := keyOf(item)
	if _, ok := l.m[k]; ok || len(l.m) < maxLastErrors {
		l.m[k] = reason
	}
}

func (l *lastErrors) get(item *provider.WorkItem) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[keyOf(item)]
}

func (l *lastErrors) forget(item *provider.WorkItem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, keyOf(item))
}

// activity returns the code of activity name, built-ins included (nil: unknown).
func (r *Runtime) activity(name string) Activity {
	if name == SysKVGet {
		return r.kvGet
	}
	return r.reg.activities[name]
}

// kvGet is the built-in behind Context.KVFromInstance: "1"+value, or "0" when unset.
func (r *Runtime) kvGet(ctx *ActivityContext, input string) (string, error) {
	instance, key, err := decodeKVGet(input)
	if err != nil {
		return "", err
	}
	v, ok, err := r.p.GetKVValue(ctx, instance, key)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "0", nil
	}
	return "1" + v, nil
}

// encodeKVGet packs the arguments of SysKVGet: the instance's length, ':', the
// instance, the key.
func encodeKVGet(instance, key string) string {
	return strconv.Itoa(len(instance)) + ":" + instance + key
}

func decodeKVGet(s string) (instance, key string, err error) {
	n, rest, ok := strings.Cut(s, ":")
	size, convErr := strconv.Atoi(n)
	if !ok || convErr != nil || size < 0 || size > len(rest) {
		return "", "", fmt.Errorf("%w: %s input %q", provider.ErrInvalid, SysKVGet, s)
	}
	return rest[:size], rest[size:], nil
}

// sessionTracker counts the activities this runtime runs per session, to cap the
// sessions it serves at once.
type sessionTracker struct {
	mu       sync.Mutex
	inFlight map[string]int
}

// acquire counts an activity of session; it refuses (false) one that would make
// more than limit sessions active.
func (s *sessionTracker) acquire(session string, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight[session] == 0 && len(s.inFlight) >= limit {
		return false
	}
	s.inFlight[session]++
	return true
}

func (s *sessionTracker) release(session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight[session]--; s.inFlight[session] <= 0 {
		delete(s.inFlight, session)
	}
}

// active counts the sessions with activities running.
func (s *sessionTracker) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inFlight)
}

// sessionManager renews this node's sessions and sweeps lapsed ones until ctx ends.
func (r *Runtime) sessionManager(ctx context.Context) {
	renew := time.NewTicker(renewEvery(r.opts.SessionLockTimeout, r.opts.LockRenewalBuffer))
	defer renew.Stop()
	sweep := time.NewTicker(r.opts.SessionCleanupInterval)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			if _, err := r.p.RenewSessionLock(ctx, []string{r.opts.WorkerNodeID}, r.opts.SessionLockTimeout, r.opts.SessionIdleTimeout); err != nil && ctx.Err() == nil {
				r.log.Warn("renew sessions", "err", err)
			}
		case <-sweep.C:
			if _, err := r.p.CleanupOrphanedSessions(ctx, r.opts.SessionIdleTimeout); err != nil && ctx.Err() == nil {
				r.log.Warn("clean up sessions", "err", err)
			}
		}
	}
}
