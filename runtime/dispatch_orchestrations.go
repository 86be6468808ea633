package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// orchestrationLoop fetches instances and runs their turns until fetchCtx ends.
func (r *Runtime) orchestrationLoop(fetchCtx, workCtx context.Context) {
	bp, batched := r.p.(BatchProvider)
	batched = batched && r.opts.OrchestrationBatch > 1
	failures := 0
	for fetchCtx.Err() == nil {
		began := time.Now()
		opts := FetchOptions{LockTimeout: r.opts.OrchestratorLockTimeout, PollTimeout: r.opts.PollTimeout, Filter: r.opts.SupportedVersions}
		var items []*OrchestrationItem
		var err error
		if batched {
			items, err = bp.FetchOrchestrationItems(fetchCtx, opts, r.opts.OrchestrationBatch)
		} else {
			var item *OrchestrationItem
			if item, err = r.p.FetchOrchestrationItem(fetchCtx, opts); item != nil {
				items = []*OrchestrationItem{item}
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
			r.log.Warn("fetch orchestration item", "err", err)
			sleep(fetchCtx, fetchBackoff(err, failures))
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

// runTurns processes locked items: decide how to run each, replay, and commit them
// (together when the provider batches).
func (r *Runtime) runTurns(ctx context.Context, items []*OrchestrationItem, bp BatchProvider) {
	stopRenew := renewLock(ctx, renewEvery(r.opts.OrchestratorLockTimeout, r.opts.LockRenewalBuffer),
		func(ctx context.Context) error {
			for _, item := range items {
				if err := r.p.RenewOrchestrationItemLock(ctx, item.LockToken, r.opts.OrchestratorLockTimeout); err != nil && !IsRetryable(err) {
					r.log.Warn("orchestration lock lost during a turn", "instance", item.Instance, "err", err)
				}
			}
			return nil
		}, nil)
	defer stopRenew()

	var ready []*OrchestrationItem
	var acks []TurnAck
	var engines []*engine // of the ready turns: to cache once committed (nil: nothing to cache)
	for _, item := range items {
		ack, e, delay, err := r.decideTurn(item)
		if err != nil {
			r.log.Warn("orchestration turn postponed", "instance", item.Instance, "reason", err, "delay", delay)
			if err := r.p.AbandonOrchestrationItem(ctx, item.LockToken, delay, false); err != nil {
				r.log.Warn("abandon orchestration item", "instance", item.Instance, "err", err)
			}
			continue
		}
		ready = append(ready, item)
		acks = append(acks, TurnAck{Token: item.LockToken, Ack: ack})
		engines = append(engines, e)
	}
	if len(acks) > 1 && bp != nil {
		if err := bp.AckOrchestrationItems(ctx, acks); err == nil {
			for i, a := range acks {
				r.ended(ready[i], a.Ack)
				r.states.put(engines[i])
			}
			return
		}
	}
	for i, item := range ready {
		if r.commit(ctx, item, acks[i].Ack) {
			r.states.put(engines[i])
		} else {
			engines[i].close() // the turn runs again: its state is not the stored one
		}
	}
}

// ended tells waiters and the hook about an execution a committed turn ended.
func (r *Runtime) ended(item *OrchestrationItem, ack OrchestrationAck) {
	if s := ack.Metadata.Status; s != nil {
		r.notify.done(item.Instance)
		if r.opts.OnExecutionEnded != nil {
			r.opts.OnExecutionEnded(item.Instance, ack.ExecutionID, *s)
		}
	}
}

// errPostpone marks turns that cannot run here now (the item is abandoned).
var errPostpone = errors.New("postponed")

// decideTurn computes the ack of a turn and the engine to cache once it is committed
// (nil: none), or an error and a delay when the item must be offered again later.
func (r *Runtime) decideTurn(item *OrchestrationItem) (ack OrchestrationAck, e *engine, delay time.Duration, err error) {
	poisoned := item.AttemptCount > r.opts.MaxAttempts
	if item.HistoryError != "" {
		r.states.drop(item.Instance) // whatever it holds is not the stored history
		if !poisoned {
			return ack, nil, time.Second, fmt.Errorf("%w: history of %s cannot be read: %s", errPostpone, item.Instance, item.HistoryError)
		}
		// Nothing can be appended to a history nobody can read: end it in metadata.
		d := &ErrorDetails{Kind: ErrorPoison, PoisonType: PoisonFailedDeserialization, Instance: item.Instance,
			ExecutionID: item.ExecutionID, Error: item.HistoryError, AttemptCount: item.AttemptCount, MaxAttempts: r.opts.MaxAttempts}
		status, out := StatusFailed, d.DisplayMessage()
		return OrchestrationAck{ExecutionID: item.ExecutionID, Metadata: ExecutionMetadata{Status: &status, Output: &out}}, nil, 0, nil
	}

	turn := Turn{Instance: item.Instance, ExecutionID: item.ExecutionID, History: item.History, Messages: item.Messages,
		KVSnapshot: item.KVSnapshot, Now: r.opts.Now(), RuntimeVersion: r.opts.RuntimeVersion, Logger: r.log}
	if n := len(item.History); n > 0 && item.History[n-1].Kind == EventOrchestrationContinuedAsNew && hasKind(item.Messages, WorkContinueAsNew) {
		// The successor execution starts with a fresh history; the store's KV
		// snapshot already holds what the ended execution wrote.
		turn.ExecutionID, turn.History = item.ExecutionID+1, nil
	}

	var fn Orchestration
	if len(turn.History) > 0 {
		s := &turn.History[0]
		if s.RuntimeVersion != "" && !r.accepts(s.RuntimeVersion) {
			return ack, nil, time.Second, fmt.Errorf("%w: execution pinned to %s, outside this runtime's capability", errPostpone, s.RuntimeVersion)
		}
		var ok bool
		if fn, ok = r.reg.orchestration(s.Name, s.Version); !ok && !poisoned && !turn.History[len(turn.History)-1].IsTerminal() {
			return ack, nil, r.unregisteredDelay(item.AttemptCount),
				fmt.Errorf("%w: orchestration %s version %s is not registered here", errPostpone, s.Name, s.Version)
		}
	} else if i := firstStart(turn.Messages); i >= 0 {
		// A new execution: pick its version now, so history records it.
		m := turn.Messages
		turn.Messages = append([]WorkItem(nil), m...)
		version, ok := r.reg.resolveVersion(m[i].Name, m[i].Version)
		if ok {
			turn.Messages[i].Version = version
			fn, _ = r.reg.orchestration(m[i].Name, version)
		} else if !poisoned {
			return ack, nil, r.unregisteredDelay(item.AttemptCount),
				fmt.Errorf("%w: orchestration %s version %q is not registered here", errPostpone, m[i].Name, m[i].Version)
		} else if turn.Messages[i].Version == "" {
			turn.Messages[i].Version = DefaultVersion
		}
	}
	if poisoned {
		turn.Poison = &ErrorDetails{Kind: ErrorPoison, PoisonType: PoisonOrchestration, Instance: item.Instance,
			ExecutionID: turn.ExecutionID, AttemptCount: item.AttemptCount, MaxAttempts: r.opts.MaxAttempts}
	}
	if fn == nil {
		fn = func(*Context, string) (string, error) { return "", errors.New("no code") } // ended, poisoned or not started: never run
	}

	res, e := r.states.run(turn, fn)
	ack = OrchestrationAck{ExecutionID: turn.ExecutionID, HistoryDelta: res.NewEvents, WorkerItems: res.WorkerItems,
		OrchestratorItems: res.OrchestratorItems, CancelledActivities: res.CancelledActivities}
	if len(turn.History) == 0 && len(res.NewEvents) > 0 {
		pin, _ := ParseSemVer(r.opts.RuntimeVersion)
		ack.Metadata = ExecutionMetadata{OrchestrationName: &res.Name, OrchestrationVersion: &res.Version,
			ParentInstanceID: &res.ParentInstance, PinnedVersion: &pin}
	}
	if res.Status != StatusRunning {
		ack.Metadata.Status, ack.Metadata.Output = &res.Status, &res.Output
	}
	return ack, e, 0, nil
}

// accepts reports whether this runtime may replay an execution pinned to version.
func (r *Runtime) accepts(version string) bool {
	v, err := ParseSemVer(version)
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

// commit acks a turn, retrying transient failures, and reports whether it did; a turn
// that cannot be committed is abandoned so it runs again.
func (r *Runtime) commit(ctx context.Context, item *OrchestrationItem, ack OrchestrationAck) bool {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = r.p.AckOrchestrationItem(ctx, item.LockToken, ack); err == nil {
			r.ended(item, ack)
			return true
		}
		if !IsRetryable(err) || !sleep(ctx, 10*time.Millisecond<<attempt) {
			break
		}
	}
	r.log.Warn("ack orchestration item failed; the turn will run again", "instance", item.Instance, "err", err)
	if errors.Is(err, ErrLockLost) {
		return false // another dispatcher owns the instance now
	}
	if err := r.p.AbandonOrchestrationItem(context.WithoutCancel(ctx), item.LockToken, 50*time.Millisecond, false); err != nil {
		r.log.Warn("abandon orchestration item", "instance", item.Instance, "err", err)
	}
	return false
}

func hasKind(items []WorkItem, k WorkItemKind) bool {
	for i := range items {
		if items[i].Kind == k {
			return true
		}
	}
	return false
}

// firstStart is the index of the message that starts an execution, or -1.
func firstStart(items []WorkItem) int {
	for i := range items {
		if items[i].Kind == WorkStartOrchestration || items[i].Kind == WorkContinueAsNew {
			return i
		}
	}
	return -1
}
