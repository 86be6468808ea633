package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/duroq/duroq/runtime/provider"
)

// orchestrationLoop fetches instances and runs their turns until fetchCtx ends.
func (r *Runtime) orchestrationLoop(fetchCtx, workCtx context.Context) {
	bp, batched := r.p.(provider.BatchProvider)
	batched = batched && r.opts.OrchestrationBatch > 1
	failures := 0
	for fetchCtx.Err() == nil {
		began := time.Now()
		opts := provider.FetchOptions{LockTimeout: r.opts.OrchestratorLockTimeout, PollTimeout: r.opts.PollTimeout, Filter: r.opts.SupportedVersions}
		var items []*provider.OrchestrationItem
		var err error
		if batched {
			items, err = bp.FetchOrchestrationItems(fetchCtx, opts, r.opts.OrchestrationBatch)
		} else {
			var item *provider.OrchestrationItem
			if item, err = r.p.FetchOrchestrationItem(fetchCtx, opts); item != nil {
				items = []*provider.OrchestrationItem{item}
			}
		}
		switch {
		case fetchCtx.Err() != nil:
			for _, item := range items {
				_ = r.p.AbandonOrchestrationItem(workCtx, item.LockToken, 0, true)
			}
			return
		case err != nil:
			failures++
			r.fetchFailed(fetchCtx, "fetch orchestration item", err, failures)
			continue
		case len(items) == 0:
			failures = 0
			r.pollPause(fetchCtx, began)
			continue
		}
		failures = 0
		r.runTurns(workCtx, items, bp)
	}
}

// runTurns processes locked items: their turns run one after another on a runner
// goroutine, under TurnTimeout each, and are committed together (when the provider
// batches). A slow turn holds up neither the others nor the dispatcher: when no
// turn finished for stragglerWait, another runner takes the turns not yet started,
// those that finished are committed, and the rest are awaited in the background
// while the dispatcher fetches again. A turn still running at TurnTimeout (or when
// ctx ends) is given up.
func (r *Runtime) runTurns(ctx context.Context, items []*provider.OrchestrationItem, bp provider.BatchProvider) {
	b := &turnBatch{items: items, bp: bp, held: newHeldItems(items), outcomes: make(chan turnOutcome, len(items)),
		running: len(items), deadline: time.NewTimer(r.opts.TurnTimeout)}
	b.stopRenew = renewLock(ctx, renewEvery(r.opts.OrchestratorLockTimeout, r.opts.LockRenewalBuffer),
		func(ctx context.Context) error {
			for _, item := range b.held.live() {
				if err := r.p.RenewOrchestrationItemLock(ctx, item.LockToken, r.opts.OrchestratorLockTimeout); err != nil && !provider.IsRetryable(err) {
					r.log.Warn("orchestration lock lost during a turn", "instance", item.Instance, "err", err)
					r.metrics.lostLock("orchestration")
				}
			}
			return nil
		}, nil)
	go r.runNextTurns(b)
	r.awaitTurns(ctx, b, true)
}

// runNextTurns runs the turns of b not yet started, in order, until none is left.
func (r *Runtime) runNextTurns(b *turnBatch) {
	for {
		i := int(b.next.Add(1)) - 1
		if i >= len(b.items) {
			return
		}
		ack, e, delay, err := r.decideTurn(b.items[i], nil)
		b.outcomes <- turnOutcome{i, ack, e, delay, err}
	}
}

// turnBatch is the fetched items of runTurns and the state of their turns.
type turnBatch struct {
	items     []*provider.OrchestrationItem
	bp        provider.BatchProvider
	held      *heldItems
	next      atomic.Int32 // the next item whose turn a runner starts
	outcomes  chan turnOutcome
	running   int // turns not yet received from outcomes
	deadline  *time.Timer
	stopRenew func()
}

// awaitTurns receives b's outcomes and settles them until every turn finished or
// was given up. With detach, once the turns that finished are committed while
// others run, the wait goes on in the background (counted in r.turns) and
// awaitTurns returns.
func (r *Runtime) awaitTurns(ctx context.Context, b *turnBatch, detach bool) {
	stall := time.NewTimer(stragglerWait)
	defer stall.Stop()
	var ready []turnOutcome
wait:
	for b.running > 0 {
		select {
		case o := <-b.outcomes:
			b.running--
			b.held.finished(o.i)
			ready = append(ready, o)
			stall.Reset(stragglerWait)
		case <-stall.C:
			if int(b.next.Load()) < len(b.items) {
				go r.runNextTurns(b) // the current runner is stuck in a turn
			}
			r.settleTurns(ctx, b, ready)
			ready = nil
			if detach {
				r.turns.Go(func() { r.awaitTurns(ctx, b, false) })
				return
			}
			stall.Reset(stragglerWait)
		case <-b.deadline.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	r.settleTurns(ctx, b, ready)
	if b.running > 0 {
		r.giveUp(ctx, b)
	}
	b.deadline.Stop()
	b.stopRenew()
}

// stragglerWait is how long a batch may go without a turn finishing before its
// finished turns are committed without the others.
const stragglerWait = 20 * time.Millisecond

// turnOutcome is what a turn of items[i] decided (see decideTurn).
type turnOutcome struct {
	i     int
	ack   provider.OrchestrationAck
	e     *engine
	delay time.Duration
	err   error
}

// heldItems tracks the items of a batch whose locks are still held (renewed) and
// those whose turn has not finished.
type heldItems struct {
	mu       sync.Mutex
	items    []*provider.OrchestrationItem
	settled  []bool
	finishes []bool
}

func newHeldItems(items []*provider.OrchestrationItem) *heldItems {
	return &heldItems{items: items, settled: make([]bool, len(items)), finishes: make([]bool, len(items))}
}

// live is the items whose lock is still held; unfinished the indexes of those whose
// turn has not finished.
func (h *heldItems) live() []*provider.OrchestrationItem {
	var out []*provider.OrchestrationItem
	for _, i := range h.unmarked(h.settled) {
		out = append(out, h.items[i])
	}
	return out
}
func (h *heldItems) unfinished() []int { return h.unmarked(h.finishes) }

func (h *heldItems) settle(i int)   { h.mark(h.settled, i) }
func (h *heldItems) finished(i int) { h.mark(h.finishes, i) }

func (h *heldItems) mark(marks []bool, i int) {
	h.mu.Lock()
	marks[i] = true
	h.mu.Unlock()
}

func (h *heldItems) unmarked(marks []bool) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for i, marked := range marks {
		if !marked {
			out = append(out, i)
		}
	}
	return out
}

// settleTurns commits the finished turns (together when the provider batches) and
// postpones those that cannot run here now.
func (r *Runtime) settleTurns(ctx context.Context, b *turnBatch, outcomes []turnOutcome) {
	items, bp, held := b.items, b.bp, b.held
	var ready []turnOutcome
	for _, o := range outcomes {
		if o.err != nil {
			item := items[o.i]
			r.log.Warn("orchestration turn postponed", "instance", item.Instance, "reason", o.err, "delay", o.delay)
			r.postpone(ctx, item, o.delay, o.err)
			held.settle(o.i)
			continue
		}
		ready = append(ready, o)
	}
	defer func() {
		for _, o := range ready {
			held.settle(o.i)
		}
	}()
	if len(ready) > 1 && bp != nil {
		acks := make([]provider.TurnAck, len(ready))
		for j, o := range ready {
			acks[j] = provider.TurnAck{Token: items[o.i].LockToken, Ack: o.ack}
		}
		if err := bp.AckOrchestrationItems(ctx, acks); err == nil {
			for _, o := range ready {
				r.ended(items[o.i], o.ack)
				r.states.put(o.e)
			}
			return
		}
	}
	for _, o := range ready {
		if r.commit(ctx, items[o.i], o.ack) {
			r.states.put(o.e)
		} else {
			o.e.close() // the turn runs again: its state is not the stored one
		}
	}
}

// postpone abandons item so that it is offered again after delay, saying why.
func (r *Runtime) postpone(ctx context.Context, item *provider.OrchestrationItem, delay time.Duration, reason error) {
	why := strings.TrimPrefix(reason.Error(), errPostpone.Error()+": ")
	// Messages waiting for their execution to start are not failing: no attempt.
	waiting := errors.Is(reason, errAwaitSuccessor)
	if err := abandonOrchestration(context.WithoutCancel(ctx), r.p, item.LockToken, delay, waiting, why); err != nil {
		r.log.Warn("abandon orchestration item", "instance", item.Instance, "err", err)
	}
}

// giveUp settles the items of b whose turns did not finish in time: those not
// started, and all at shutdown, are released untouched; otherwise each is offered
// again with backoff, or, on its last attempt, its instance fails saying its code
// blocked. The turns'
// goroutines cannot be stopped: their results, if they ever come, are discarded.
func (r *Runtime) giveUp(ctx context.Context, b *turnBatch) {
	started := min(int(b.next.Swap(int32(len(b.items)))), len(b.items)) // no runner starts another turn
	for _, i := range b.held.unfinished() {
		item := b.items[i]
		if i < started {
			r.log.Error("orchestration code did not yield within the turn timeout; its goroutine is left running",
				"instance", item.Instance, "execution", item.ExecutionID, "timeout", r.opts.TurnTimeout, "attempt", item.AttemptCount)
		}
		switch {
		case i >= started || ctx.Err() != nil: // never run, or shutting down
			if err := r.p.AbandonOrchestrationItem(context.WithoutCancel(ctx), item.LockToken, 0, true); err != nil {
				r.log.Warn("abandon orchestration item", "instance", item.Instance, "err", err)
			}
		case item.AttemptCount >= r.opts.MaxAttempts:
			blocked := &provider.ErrorDetails{Kind: provider.ErrorPoison, PoisonType: provider.PoisonOrchestration, Instance: item.Instance,
				ExecutionID: item.ExecutionID, AttemptCount: item.AttemptCount, MaxAttempts: r.opts.MaxAttempts,
				Message: fmt.Sprintf("its code blocked: no turn yielded within the turn timeout (%s); orchestration code must not wait on anything but its Context", r.opts.TurnTimeout)}
			r.failTurn(ctx, item, blocked)
		default:
			r.postpone(ctx, item, r.retryDelay(item.AttemptCount),
				fmt.Errorf("its code did not yield within the turn timeout (%s)", r.opts.TurnTimeout))
		}
	}
	go func(running int) { // the turns that started and did not finish
		for range running {
			o := <-b.outcomes
			o.e.close()
			r.log.Warn("a turn given up for blocking returned at last; its result is discarded", "instance", b.items[o.i].Instance)
		}
	}(b.running - (len(b.items) - started))
}

// ended tells waiters and the hook about an execution a committed turn ended.
func (r *Runtime) ended(item *provider.OrchestrationItem, ack provider.OrchestrationAck) {
	if s := ack.Metadata.Status; s != nil {
		r.metrics.executionEnded(item, ack)
		r.notify.done(item.Instance)
		if r.opts.OnExecutionEnded != nil {
			r.opts.OnExecutionEnded(item.Instance, ack.ExecutionID, *s)
		}
	}
}

// errPostpone marks turns that cannot run here now (the item is abandoned).
var errPostpone = errors.New("postponed")

// errAwaitSuccessor postpones messages fetched for an execution that continued as new
// before its successor started.
var errAwaitSuccessor = errors.New("the execution continued as new and its successor has not started yet")

// decideTurn computes the ack of a turn and the engine to cache once it is committed
// (nil: none), or an error and a delay when the item must be offered again later.
// A non-nil failure ends the execution with it instead of running any code; past
// MaxAttempts the execution fails as poison.
func (r *Runtime) decideTurn(item *provider.OrchestrationItem, failure *provider.ErrorDetails) (ack provider.OrchestrationAck, e *engine, delay time.Duration, err error) {
	poisoned := failure != nil || item.AttemptCount > r.opts.MaxAttempts
	if item.HistoryError != "" {
		r.states.drop(item.Instance) // whatever it holds is not the stored history
		if !poisoned {
			return ack, nil, time.Second, fmt.Errorf("%w: history of %s cannot be read: %s", errPostpone, item.Instance, item.HistoryError)
		}
		// Nothing can be appended to a history nobody can read: end it in metadata.
		d := &provider.ErrorDetails{Kind: provider.ErrorPoison, PoisonType: provider.PoisonFailedDeserialization, Instance: item.Instance,
			ExecutionID: item.ExecutionID, Error: item.HistoryError, AttemptCount: item.AttemptCount, MaxAttempts: r.opts.MaxAttempts}
		status, out := provider.StatusFailed, d.DisplayMessage()
		return provider.OrchestrationAck{ExecutionID: item.ExecutionID, Metadata: provider.ExecutionMetadata{Status: &status, Output: &out}}, nil, 0, nil
	}

	turn := Turn{Instance: item.Instance, ExecutionID: item.ExecutionID, History: item.History, Messages: item.Messages,
		KVSnapshot: item.KVSnapshot, Now: r.opts.Now(), RuntimeVersion: r.opts.RuntimeVersion, Logger: r.log}
	if n := len(item.History); n > 0 && item.History[n-1].Kind == provider.EventOrchestrationContinuedAsNew {
		if !hasKind(item.Messages, provider.WorkContinueAsNew) {
			// The successor's start was queued with the end of this execution but not
			// fetched with these messages (it is offered later: backing off on a
			// runtime without its code, say). They are the successor's: handled as
			// the ended execution's, they would be dropped. They wait for the start.
			return ack, nil, r.opts.UnregisteredBackoff, fmt.Errorf("%w: %w", errPostpone, errAwaitSuccessor)
		}
		// The successor execution starts with a fresh history, from its
		// continue-as-new message even when a start arrived before it (that start
		// collides with the running instance); the store's KV snapshot already holds
		// what the ended execution wrote.
		turn.ExecutionID, turn.History = item.ExecutionID+1, nil
		turn.Messages = continueAsNewFirst(item.Messages)
	}

	var fn Orchestration
	unregistered := ""
	if len(turn.History) > 0 {
		s := &turn.History[0]
		if s.RuntimeVersion != "" && !r.accepts(s.RuntimeVersion) {
			return ack, nil, time.Second, fmt.Errorf("%w: execution pinned to %s, outside this runtime's capability", errPostpone, s.RuntimeVersion)
		}
		var ok bool
		if fn, ok = r.reg.orchestration(s.Name, s.Version); !ok && !turn.History[len(turn.History)-1].IsTerminal() {
			unregistered = fmt.Sprintf("orchestration %q version %q is not registered on runtime %s", s.Name, s.Version, r.opts.WorkerNodeID)
			if !poisoned {
				return ack, nil, r.retryDelay(item.AttemptCount), fmt.Errorf("%w: %s", errPostpone, unregistered)
			}
		}
	} else if i := firstStart(turn.Messages); i >= 0 {
		// A new execution: pick its version now, so history records it.
		m := turn.Messages
		turn.Messages = append([]provider.WorkItem(nil), m...)
		version, ok := r.reg.resolveVersion(m[i].Name, m[i].Version)
		if ok {
			turn.Messages[i].Version = version
			fn, _ = r.reg.orchestration(m[i].Name, version)
		} else {
			unregistered = fmt.Sprintf("orchestration %q version %q is not registered on runtime %s", m[i].Name, m[i].Version, r.opts.WorkerNodeID)
			if !poisoned {
				return ack, nil, r.retryDelay(item.AttemptCount), fmt.Errorf("%w: %s", errPostpone, unregistered)
			}
			if turn.Messages[i].Version == "" {
				turn.Messages[i].Version = DefaultVersion
			}
		}
	}
	switch {
	case failure != nil:
		turn.Poison = failure
	case poisoned:
		// The last attempt's reason, when this runtime knows it.
		turn.Poison = &provider.ErrorDetails{Kind: provider.ErrorPoison, PoisonType: provider.PoisonOrchestration, Instance: item.Instance,
			ExecutionID: turn.ExecutionID, AttemptCount: item.AttemptCount, MaxAttempts: r.opts.MaxAttempts, Message: unregistered}
	}
	if fn == nil {
		fn = func(*Context, string) (string, error) { return "", errors.New("no code") } // ended, poisoned or not started: never run
	}

	if turn.Poison != nil {
		r.metrics.poisoned("orchestration")
	}
	spanCtx, span := r.startTurnSpan(&turn)
	began := time.Now()
	res, e, resumed := r.states.run(turn, fn)
	r.metrics.turnRan(res.Name, res.Status, resumed, time.Since(began))
	if span.IsRecording() {
		span.SetAttributes(attrResumed.Bool(resumed))
	}
	ack = provider.OrchestrationAck{ExecutionID: turn.ExecutionID, HistoryDelta: res.NewEvents, WorkerItems: res.WorkerItems,
		OrchestratorItems: res.OrchestratorItems, CancelledActivities: res.CancelledActivities}
	endTurnSpan(spanCtx, span, &ack, res.Status, res.Output)
	r.timerSpans(&turn, res.NewEvents)
	if len(turn.History) == 0 && len(res.NewEvents) > 0 {
		pin, _ := provider.ParseSemVer(r.opts.RuntimeVersion)
		ack.Metadata = provider.ExecutionMetadata{OrchestrationName: &res.Name, OrchestrationVersion: &res.Version,
			ParentInstanceID: &res.ParentInstance, PinnedVersion: &pin}
	}
	if res.Status != provider.StatusRunning {
		ack.Metadata.Status, ack.Metadata.Output = &res.Status, &res.Output
	}
	return ack, e, 0, nil
}

// accepts reports whether this runtime may replay an execution pinned to version.
func (r *Runtime) accepts(version string) bool {
	v, err := provider.ParseSemVer(version)
	if err != nil {
		return false
	}
	ranges := r.opts.SupportedVersions.SupportedVersions
	for _, rg := range ranges {
		if v.Ordinal() >= rg.Min.Ordinal() && v.Ordinal() <= rg.Max.Ordinal() {
			return true
		}
	}
	return false
}

// commit acks a turn, retrying transient failures, and reports whether it did. A
// turn whose results can never be stored (too large, invalid) fails its execution
// at once with the reason; a turn that cannot be committed is abandoned so it runs
// again. When a reply is lost (the ack failed, then the lock was gone), the stored
// history tells whether the commit landed.
func (r *Runtime) commit(ctx context.Context, item *provider.OrchestrationItem, ack provider.OrchestrationAck) bool {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = r.p.AckOrchestrationItem(ctx, item.LockToken, ack); err == nil {
			r.ended(item, ack)
			return true
		}
		if !provider.IsRetryable(err) || !sleep(ctx, 10*time.Millisecond<<attempt) {
			break
		}
	}
	switch {
	case errors.Is(err, provider.ErrLockLost):
		// Lost by a commit whose reply was lost (this one, or the batch's), or taken
		// by another dispatcher after the lock lapsed.
		if r.landed(ctx, item, ack) {
			r.ended(item, ack)
			return true
		}
		r.log.Warn("turn not committed: its lock was lost; the instance's next fetch runs it again", "instance", item.Instance, "err", err)
		return false
	case unstorable(err):
		r.log.Error("turn results cannot be stored; the execution fails", "instance", item.Instance, "err", err)
		return r.failTurn(ctx, item, &provider.ErrorDetails{Kind: provider.ErrorConfiguration, ConfigKind: provider.ConfigLimitExceeded,
			Message: "the turn's results cannot be stored: " + clip(err.Error(), maxReasonBytes)})
	}
	r.log.Warn("ack orchestration item failed; the turn will run again", "instance", item.Instance, "err", err)
	r.postpone(ctx, item, 50*time.Millisecond, err)
	return false
}

// unstorable reports whether a failed ack says that what it was to store never can
// be (too large, invalid): retrying cannot help.
func unstorable(err error) bool {
	return errors.Is(err, provider.ErrInvalid) && !provider.IsRetryable(err)
}

// failTurn ends item's execution with failure instead of running its code, and
// reports whether that was committed.
func (r *Runtime) failTurn(ctx context.Context, item *provider.OrchestrationItem, failure *provider.ErrorDetails) bool {
	ack, _, delay, err := r.decideTurn(item, failure)
	if err != nil {
		r.postpone(ctx, item, delay, err)
		return false
	}
	if err := r.p.AckOrchestrationItem(ctx, item.LockToken, ack); err != nil {
		r.log.Warn("ack of an execution's failure failed; the turn will run again", "instance", item.Instance, "err", err)
		r.postpone(ctx, item, r.retryDelay(item.AttemptCount), err)
		return false
	}
	r.ended(item, ack)
	return true
}

// landed reports whether ack's history delta is stored: its last event is in the
// execution's history. A turn without new events cannot be told apart (false).
func (r *Runtime) landed(ctx context.Context, item *provider.OrchestrationItem, ack provider.OrchestrationAck) bool {
	n := len(ack.HistoryDelta)
	if n == 0 {
		return false
	}
	last := &ack.HistoryDelta[n-1]
	for attempt := 0; attempt < 5; attempt++ {
		events, err := r.p.ReadWithExecution(context.WithoutCancel(ctx), item.Instance, ack.ExecutionID)
		if err == nil {
			return slices.ContainsFunc(events, func(e provider.Event) bool { return eventEqual(&e, last) })
		}
		if !provider.IsRetryable(err) || !sleep(ctx, 10*time.Millisecond<<attempt) {
			return false
		}
	}
	return false
}

// maxReasonBytes bounds the error text recorded in a failure's details.
const maxReasonBytes = 1024

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func hasKind(items []provider.WorkItem, k provider.WorkItemKind) bool {
	for i := range items {
		if items[i].Kind == k {
			return true
		}
	}
	return false
}

// firstStart is the index of the message that starts an execution, or -1.
// continueAsNewFirst returns items with its continue-as-new messages first, the
// others after them in their order.
func continueAsNewFirst(items []provider.WorkItem) []provider.WorkItem {
	out := make([]provider.WorkItem, 0, len(items))
	for _, first := range []bool{true, false} {
		for _, m := range items {
			if (m.Kind == provider.WorkContinueAsNew) == first {
				out = append(out, m)
			}
		}
	}
	return out
}

func firstStart(items []provider.WorkItem) int {
	for i := range items {
		if items[i].Kind == provider.WorkStartOrchestration || items[i].Kind == provider.WorkContinueAsNew {
			return i
		}
	}
	return -1
}
