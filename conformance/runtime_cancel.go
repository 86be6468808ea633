package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// The CancellationPoison group ports duroxide's cancellation, poison-message,
// nondeterminism, lock-timeout, reliability and error tests (tests/cancellation_tests.rs,
// tests/poison_message_tests.rs, tests/nondeterminism_tests.rs, tests/lock_timeout_tests.rs,
// tests/reliability_tests.rs, tests/errors_tests.rs) and the runtime lifecycle rules of
// src/runtime/mod.rs: what happens to an instance, its activities and the runtime itself
// when work is cancelled, poisoned, replayed by other code, outlives its locks, arrives
// twice, or is in flight at shutdown.
func init() {
	registerRuntimeGroup(runtimeGroup{name: "CancellationPoison", cases: []runtimeCase{
		{"CancelRunningInstance", rtCancelRunningInstance},
		{"CancelEndedOrUnknownInstanceIsNoop", rtCancelEndedOrUnknownInstanceIsNoop},
		{"CancelBeforeOrchestrationStarts", rtCancelBeforeOrchestrationStarts},
		{"MultipleCancelCallsAreIdempotent", rtMultipleCancelCallsAreIdempotent},
		{"SelectLoserActivityCancelled", rtSelectLoserActivityCancelled},
		{"ActivityAbortedAfterCancellationGrace", rtActivityAbortedAfterCancellationGrace},
		{"PoisonOrchestrationFails", rtPoisonOrchestrationFails},
		{"PoisonActivityFailsOrchestration", rtPoisonActivityFailsOrchestration},
		{"PoisonChildFailsParent", rtPoisonChildFailsParent},
		{"CustomMaxAttemptsRespected", rtCustomMaxAttemptsRespected},
		{"UnknownActivityEventuallyPoisons", rtUnknownActivityEventuallyPoisons},
		{"CodeSwapTriggersNondeterminism", rtCodeSwapTriggersNondeterminism},
		{"LongRunningActivityWithLockRenewal", rtLongRunningActivityWithLockRenewal},
		{"OrchestrationLockRenewalPreventsExpiration", rtOrchestrationLockRenewalPreventsExpiration},
		{"DuplicateActivityCompletionDeduplicated", rtDuplicateActivityCompletionDeduplicated},
		{"ExternalDuplicateWorkItemsNotDeduplicated", rtExternalDuplicateWorkItemsNotDeduplicated},
		{"ShutdownDrainsInFlightActivity", rtShutdownDrainsInFlightActivity},
		{"ShutdownPastDrainTimeoutHandsActivityOn", rtShutdownPastDrainTimeoutHandsActivityOn},
		{"RunTwiceIsRefused", rtRunTwiceIsRefused},
		{"SessionIdleTimeoutMustExceedRenewal", rtSessionIdleTimeoutMustExceedRenewal},
	}})
}

// cpFaultProvider wraps a provider for these scenarios, like duroxide's
// PoisonInjectingProvider (tests/common/fault_injection.rs): it can inflate the
// attempt count the runtime sees for chosen instances and activities, and it records
// what the runtime committed (the messages of acked turns, the acked work items) and
// whether a fetch saw its context cancelled (the runtime began to shut down).
type cpFaultProvider struct {
	provider.Provider

	mu           sync.Mutex
	orchAttempts map[string]uint32              // instance → attempt count reported on fetch
	actAttempts  map[string]uint32              // activity name → attempt count reported on fetch
	fetched      map[string][]provider.WorkItem // lock token → the messages of a fetched turn
	acked        []provider.WorkItem            // messages of committed turns
	workAcks     int

	stopOnce sync.Once
	stopped  chan struct{} // closed when a fetch returns with its context cancelled
}

// cpFaultRig is a rig whose runtimes and client run over a cpFaultProvider.
func cpFaultRig(t *testing.T, e renv) (*rig, *cpFaultProvider) {
	t.Helper()
	r := e.rig(t)
	fp := &cpFaultProvider{Provider: r.P, orchAttempts: map[string]uint32{}, actAttempts: map[string]uint32{},
		fetched: map[string][]provider.WorkItem{}, stopped: make(chan struct{})}
	r.P, r.C = fp, runtime.NewClient(fp)
	return r, fp
}

// poisonInstance makes every fetch of instance report attempt count n.
func (f *cpFaultProvider) poisonInstance(instance string, n uint32) {
	f.mu.Lock()
	f.orchAttempts[instance] = n
	f.mu.Unlock()
}

// poisonActivity makes every fetch of an activity called name report attempt count n.
func (f *cpFaultProvider) poisonActivity(name string, n uint32) {
	f.mu.Lock()
	f.actAttempts[name] = n
	f.mu.Unlock()
}

func (f *cpFaultProvider) sawStop(ctx context.Context) {
	if ctx.Err() != nil {
		f.stopOnce.Do(func() { close(f.stopped) })
	}
}

func (f *cpFaultProvider) FetchOrchestrationItem(ctx context.Context, opts provider.FetchOptions) (*provider.OrchestrationItem, error) {
	item, err := f.Provider.FetchOrchestrationItem(ctx, opts)
	f.sawStop(ctx)
	if item != nil {
		f.mu.Lock()
		if n := f.orchAttempts[item.Instance]; n > 0 {
			item.AttemptCount = n
		}
		f.fetched[item.LockToken] = append([]provider.WorkItem(nil), item.Messages...)
		f.mu.Unlock()
	}
	return item, err
}

func (f *cpFaultProvider) AckOrchestrationItem(ctx context.Context, token string, ack provider.OrchestrationAck) error {
	err := f.Provider.AckOrchestrationItem(ctx, token, ack)
	if err == nil {
		f.mu.Lock()
		f.acked = append(f.acked, f.fetched[token]...)
		delete(f.fetched, token)
		f.mu.Unlock()
	}
	return err
}

func (f *cpFaultProvider) AbandonOrchestrationItem(ctx context.Context, token string, delay provider.Duration, ignoreAttempt bool) error {
	f.mu.Lock()
	delete(f.fetched, token)
	f.mu.Unlock()
	return f.Provider.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
}

func (f *cpFaultProvider) FetchWorkItem(ctx context.Context, opts provider.WorkFetchOptions) (*provider.WorkItemLease, error) {
	lease, err := f.Provider.FetchWorkItem(ctx, opts)
	f.sawStop(ctx)
	if lease != nil {
		f.mu.Lock()
		if n := f.actAttempts[lease.Item.Name]; n > 0 {
			lease.AttemptCount = n
		}
		f.mu.Unlock()
	}
	return lease, err
}

func (f *cpFaultProvider) AckWorkItem(ctx context.Context, token string, completion *provider.WorkItem) error {
	err := f.Provider.AckWorkItem(ctx, token, completion)
	if err == nil {
		f.mu.Lock()
		f.workAcks++
		f.mu.Unlock()
	}
	return err
}

// consumed counts the messages of kind for instance that committed turns took in.
func (f *cpFaultProvider) consumed(instance string, kind provider.WorkItemKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for i := range f.acked {
		if f.acked[i].Kind == kind && f.acked[i].TargetInstance() == instance {
			n++
		}
	}
	return n
}

func (f *cpFaultProvider) workAcked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workAcks
}

// cpSignal is a channel closed once, however often fire is called.
type cpSignal struct {
	once sync.Once
	ch   chan struct{}
}

func cpNewSignal() *cpSignal { return &cpSignal{ch: make(chan struct{})} }
func (s *cpSignal) fire()    { s.once.Do(func() { close(s.ch) }) }
func (s *cpSignal) fired() bool {
	select {
	case <-s.ch:
		return true
	default:
		return false
	}
}

// await waits for s or fails the test after the suite's wait timeout.
func (s *cpSignal) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// cpWaitHistory waits until instance's history satisfies cond and returns it.
func cpWaitHistory(r *rig, instance, what string, cond func([]provider.Event) bool) []provider.Event {
	r.t.Helper()
	var h []provider.Event
	eventually(r.t, what, func() bool {
		h = r.history(instance)
		return cond(h)
	})
	return h
}

// cpScheduledID is the event id of the first ActivityScheduled of activity name (0: none).
func cpScheduledID(h []provider.Event, name string) uint64 {
	for _, ev := range h {
		if ev.Kind == provider.EventActivityScheduled && ev.Name == name {
			return ev.EventID
		}
	}
	return 0
}

// cpCancelled asserts that st failed as cancelled with reason.
func cpCancelled(t *testing.T, st runtime.OrchestrationStatus, reason string) {
	t.Helper()
	d := failed(t, st)
	if d.Kind != provider.ErrorApplication || d.AppKind != provider.AppCancelled || d.Reason != reason ||
		d.DisplayMessage() != "canceled: "+reason {
		t.Fatalf("failure %+v (%q), want Application/Cancelled with reason %q", d, d.DisplayMessage(), reason)
	}
}

// cpShortWorkerLock makes cancellation reach running activities quickly: lock stealing
// is noticed at the next renewal, every half of a short lock timeout.
func cpShortWorkerLock(o *runtime.Options) { o.WorkerLockTimeout = time.Second }

// cancellation_tests.rs: activity_receives_cancellation_signal and
// activity_result_dropped_when_orchestration_cancelled.
func rtCancelRunningInstance(t *testing.T, e renv) {
	r := e.rig(t)
	started, sawCancel, returned := cpNewSignal(), cpNewSignal(), cpNewSignal()
	reg := newRegistry(t).
		act("Long", func(a *runtime.ActivityContext, in string) (string, error) {
			started.fire()
			defer returned.fire()
			select {
			case <-a.Done():
				sawCancel.fire()
			case <-time.After(waitTimeout):
			}
			return "late result", nil // a result nobody may record
		}).
		orch("LongActivityOrch", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Long", in).Get()
		})
	r.startFast(reg.Registry, cpShortWorkerLock)
	r.startOrch("inst-activity-cancel", "LongActivityOrch", "")
	started.await(t, "the activity to start")
	if err := r.C.CancelInstance(context.Background(), "inst-activity-cancel", "test_cancellation"); err != nil {
		t.Fatal(err)
	}
	cpCancelled(t, r.wait("inst-activity-cancel"), "test_cancellation")
	sawCancel.await(t, "the running activity to see its context cancelled")
	returned.await(t, "the cancelled activity to return")
	h := r.history("inst-activity-cancel")
	if n := countKind(h, provider.EventActivityCompleted); n != 0 {
		t.Fatalf("history records %d activity completions; the cancelled activity's result must be dropped", n)
	}
	if n := countKind(h, provider.EventOrchestrationCancelRequested); n != 1 {
		t.Fatalf("history has %d OrchestrationCancelRequested events, want 1", n)
	}
	if last := h[len(h)-1]; last.Kind != provider.EventOrchestrationFailed {
		t.Fatalf("history ends with %s, want OrchestrationFailed", last.Kind)
	}
}

// cancellation_tests.rs: cancel_after_completion_is_noop and
// cancel_nonexistent_instance_is_noop.
func rtCancelEndedOrUnknownInstanceIsNoop(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	reg := newRegistry(t).orch("Quick", func(ctx *runtime.Context, in string) (string, error) { return "ok", nil })
	r.startFast(reg.Registry)
	completed(t, r.run("inst-cancel-noop", "Quick", ""), "ok")
	before := len(r.history("inst-cancel-noop"))
	if err := r.C.CancelInstance(context.Background(), "inst-cancel-noop", "late"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late cancel to be consumed", func() bool {
		return fp.consumed("inst-cancel-noop", provider.WorkCancelInstance) == 1
	})
	h := r.history("inst-cancel-noop")
	if len(h) != before || countKind(h, provider.EventOrchestrationCancelRequested) != 0 {
		t.Fatalf("a cancel after completion changed history: %d events before, %d after: %+v", before, len(h), h)
	}
	completed(t, r.wait("inst-cancel-noop"), "ok")

	// Cancelling an instance that does not exist succeeds and creates nothing. (Like
	// duroxide's providers, the store keeps such a cancel queued in case a start is
	// racing it, so it is not awaited here.)
	if err := r.C.CancelInstance(context.Background(), "ghost", "nobody home"); err != nil {
		t.Fatalf("cancel of an unknown instance: %v", err)
	}
	if st, err := r.C.Status(context.Background(), "ghost"); err != nil || st.State != runtime.StateNotFound {
		t.Fatalf("status of the unknown instance after a cancel: %+v, %v", st, err)
	}
	if h := r.history("ghost"); len(h) != 0 {
		t.Fatalf("a cancel created history for an unknown instance: %+v", h)
	}
}

// cancellation_tests.rs: cancel_before_orchestration_starts. The start and the cancel
// are both queued before any runtime runs, so one turn sees them together; the
// instance must end cancelled, not completed, even though its code would finish at once.
func rtCancelBeforeOrchestrationStarts(t *testing.T, e renv) {
	r := e.rig(t)
	r.startOrch("inst-early-cancel", "Early", "input")
	if err := r.C.CancelInstance(context.Background(), "inst-early-cancel", "early_cancel"); err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t).orch("Early", func(ctx *runtime.Context, in string) (string, error) { return "done", nil })
	r.startFast(reg.Registry)
	cpCancelled(t, r.wait("inst-early-cancel"), "early_cancel")
	h := r.history("inst-early-cancel")
	if countKind(h, provider.EventOrchestrationCompleted) != 0 || countKind(h, provider.EventOrchestrationCancelRequested) != 1 {
		t.Fatalf("history %+v: want one OrchestrationCancelRequested and no OrchestrationCompleted", h)
	}
}

// cancellation_tests.rs: multiple_cancel_calls_are_idempotent.
func rtMultipleCancelCallsAreIdempotent(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	reg := newRegistry(t).orch("Waiter", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.WaitForEvent("Go").Get()
	})
	r.startFast(reg.Registry)
	r.startOrch("inst-multi-cancel", "Waiter", "")
	cpWaitHistory(r, "inst-multi-cancel", "the subscription", func(h []provider.Event) bool {
		return countKind(h, provider.EventExternalSubscribed) == 1
	})
	for i := range 5 {
		if err := r.C.CancelInstance(context.Background(), "inst-multi-cancel", fmt.Sprintf("cancel-%d", i)); err != nil {
			t.Fatalf("cancel %d: %v", i, err)
		}
	}
	cpCancelled(t, r.wait("inst-multi-cancel"), "cancel-0")
	eventually(t, "all five cancels to be consumed", func() bool {
		return fp.consumed("inst-multi-cancel", provider.WorkCancelInstance) == 5
	})
	h := r.history("inst-multi-cancel")
	if n := countKind(h, provider.EventOrchestrationCancelRequested); n != 1 {
		t.Fatalf("history has %d OrchestrationCancelRequested events, want 1: %+v", n, h)
	}
	for _, ev := range h {
		if ev.Kind == provider.EventOrchestrationCancelRequested && ev.Reason != "cancel-0" {
			t.Fatalf("cancel reason %q, want the first cancel's %q", ev.Reason, "cancel-0")
		}
	}
	if n := countKind(h, provider.EventOrchestrationFailed); n != 1 || !h[len(h)-1].IsTerminal() {
		t.Fatalf("history has %d OrchestrationFailed events or does not end with one: %+v", n, h)
	}
}

// cancellation_tests.rs: select2_loser_activity_receives_cancellation_signal. The
// loser is given up while it runs: its context is cancelled (lock stealing), history
// records ActivityCancelRequested for it, and the orchestration goes on.
func rtSelectLoserActivityCancelled(t *testing.T, e renv) {
	r := e.rig(t)
	started, sawCancel := cpNewSignal(), cpNewSignal()
	reg := newRegistry(t).
		act("Long", func(a *runtime.ActivityContext, in string) (string, error) {
			started.fire()
			select {
			case <-a.Done():
				sawCancel.fire()
				return "", a.Err()
			case <-time.After(waitTimeout):
				return "timeout", nil
			}
		}).
		act("Echo", echo).
		orch("SelectLoserCancelOrch", func(ctx *runtime.Context, in string) (string, error) {
			long := ctx.ScheduleActivity("Long", "")
			stop := ctx.WaitForEvent("stop")
			if i := ctx.Select(long, stop); i != 1 {
				return "", errors.New("the activity should not win")
			}
			// Keep going to prove the orchestration is not terminal.
			return ctx.ScheduleActivity("Echo", "after").Get()
		})
	r.startFast(reg.Registry, cpShortWorkerLock)
	r.startOrch("inst-select-loser", "SelectLoserCancelOrch", "")
	started.await(t, "the activity to start")
	if err := r.C.RaiseEvent(context.Background(), "inst-select-loser", "stop", ""); err != nil {
		t.Fatal(err)
	}
	completed(t, r.wait("inst-select-loser"), "after")
	sawCancel.await(t, "the select loser to see its context cancelled")
	h := r.history("inst-select-loser")
	id := cpScheduledID(h, "Long")
	if id == 0 {
		t.Fatalf("no ActivityScheduled for Long in %+v", h)
	}
	found := false
	for _, ev := range h {
		switch {
		case ev.Kind == provider.EventActivityCancelRequested && ev.SourceEventID == id:
			found = true
		case (ev.Kind == provider.EventActivityCompleted || ev.Kind == provider.EventActivityFailed) && ev.SourceEventID == id:
			t.Fatalf("history records an outcome of the cancelled loser: %+v", ev)
		}
	}
	if !found {
		t.Fatalf("no ActivityCancelRequested for event %d in %+v", id, h)
	}
}

// cancellation_tests.rs: activity_aborted_after_cancellation_grace. An activity that
// ignores its cancelled context is given up after ActivityCancellationGrace; its
// worker slot (the only one) is free again, so other instances keep running.
func rtActivityAbortedAfterCancellationGrace(t *testing.T, e renv) {
	r := e.rig(t)
	var attempts atomic.Int32
	started, release := cpNewSignal(), cpNewSignal()
	t.Cleanup(release.fire)
	reg := newRegistry(t).
		act("Stubborn", func(a *runtime.ActivityContext, in string) (string, error) {
			attempts.Add(1)
			started.fire()
			<-release.ch // ignores a.Done()
			return "done", nil
		}).
		act("Echo", echo).
		orch("StubbornOrch", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Stubborn", in).Get()
		}).
		orch("Other", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Echo", in).Get()
		})
	r.startFast(reg.Registry, cpShortWorkerLock, func(o *runtime.Options) {
		o.WorkerConcurrency = 1
		o.ActivityCancellationGrace = 300 * time.Millisecond
	})
	r.startOrch("inst-grace", "StubbornOrch", "")
	started.await(t, "the stubborn activity to start")
	if err := r.C.CancelInstance(context.Background(), "inst-grace", "cancel_now"); err != nil {
		t.Fatal(err)
	}
	cpCancelled(t, r.wait("inst-grace"), "cancel_now")
	// The stubborn activity still blocks; the single worker must have moved on.
	completed(t, r.run("inst-other", "Other", "still running"), "still running")
	if release.fired() {
		t.Fatal("the stubborn activity was released early")
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("stubborn activity ran %d times, want 1", n)
	}
	if n := countKind(r.history("inst-grace"), provider.EventActivityCompleted); n != 0 {
		t.Fatalf("history of the cancelled instance records %d activity completions", n)
	}
}

// poison_message_tests.rs: e2e_orchestration_item_poison_fails_orchestration and
// e2e_poison_message_creates_instance_if_missing.
func rtPoisonOrchestrationFails(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	var ran atomic.Int32
	reg := newRegistry(t).orch("SimpleOrch", func(ctx *runtime.Context, in string) (string, error) {
		ran.Add(1)
		return "ran", nil
	})
	fp.poisonInstance("poison-orch", 11)
	r.startFast(reg.Registry, func(o *runtime.Options) { o.MaxAttempts = 10 })
	st := r.run("poison-orch", "SimpleOrch", "{}")
	d := failed(t, st)
	if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonOrchestration || d.Instance != "poison-orch" ||
		d.ExecutionID != provider.InitialExecutionID || d.AttemptCount != 11 || d.MaxAttempts != 10 {
		t.Fatalf("failure %+v, want Poison/Orchestration of poison-orch execution 1 with 11 of 10 attempts", d)
	}
	if !strings.Contains(d.DisplayMessage(), "poison") {
		t.Fatalf("display message %q does not say poison", d.DisplayMessage())
	}
	if ran.Load() != 0 {
		t.Fatal("the code of a poisoned orchestration ran")
	}
	// The instance exists with its identity even though its first message was poison.
	if st.Name != "SimpleOrch" || st.Version != runtime.DefaultVersion {
		t.Fatalf("poisoned instance status name %q version %q", st.Name, st.Version)
	}
	h := r.history("poison-orch")
	if len(h) != 2 || h[0].Kind != provider.EventOrchestrationStarted || h[1].Kind != provider.EventOrchestrationFailed {
		t.Fatalf("history %+v, want OrchestrationStarted then OrchestrationFailed", h)
	}
}

// poison_message_tests.rs: e2e_activity_item_poison_fails_orchestration and
// e2e_one_poisoned_activity_among_many. The poisoned activity never runs; its Poison
// failure is recorded in history and fails the orchestration with the same details.
// Only application errors reach orchestration code, so code that would catch the
// error (and complete) never sees it, and the step after it never runs.
func rtPoisonActivityFailsOrchestration(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	var poisonRuns, fineRuns atomic.Int32
	reg := newRegistry(t).
		act("TestActivity", func(*runtime.ActivityContext, string) (string, error) {
			poisonRuns.Add(1)
			return "activity-result", nil
		}).
		act("Fine", func(_ *runtime.ActivityContext, in string) (string, error) {
			fineRuns.Add(1)
			return in, nil
		}).
		orch("MultiActivityOrch", func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.ScheduleActivity("Fine", "1").Get(); err != nil {
				return "", err
			}
			if _, err := ctx.ScheduleActivity("TestActivity", "{}").Get(); err != nil {
				return "caught: " + err.Error(), nil // must not happen: poison is not the code's to handle
			}
			return ctx.ScheduleActivity("Fine", "3").Get()
		})
	fp.poisonActivity("TestActivity", 11)
	r.startFast(reg.Registry, func(o *runtime.Options) { o.MaxAttempts = 10 })
	d := failed(t, r.run("poison-activity", "MultiActivityOrch", ""))
	if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonActivity || d.ActivityName != "TestActivity" ||
		d.ActivityID != 4 || d.Instance != "poison-activity" || d.ExecutionID != provider.InitialExecutionID ||
		d.AttemptCount != 11 || d.MaxAttempts != 10 {
		t.Fatalf("failure %+v, want Poison/Activity of TestActivity (id 4) in poison-activity execution 1 with 11 of 10 attempts", d)
	}
	if !strings.HasPrefix(d.DisplayMessage(), "poison: activity TestActivity") {
		t.Fatalf("display message %q", d.DisplayMessage())
	}
	if poisonRuns.Load() != 0 {
		t.Fatalf("the poisoned activity ran %d times", poisonRuns.Load())
	}
	if fineRuns.Load() != 1 {
		t.Fatalf("the healthy activity ran %d times, want 1 (the step after the poisoned one must not run)", fineRuns.Load())
	}
	h := r.history("poison-activity")
	if countKind(h, provider.EventActivityFailed) != 1 || countKind(h, provider.EventActivityScheduled) != 2 {
		t.Fatalf("history %+v: want the two scheduled activities and one ActivityFailed", h)
	}
}

// poison_message_tests.rs: e2e_sub_orchestration_poison_fails_parent and
// e2e_activity_poisons_suborchestration_poisons_parent. A poisoned child fails with
// Poison/Orchestration and its parent fails with the same details; a poisoned
// activity of a child fails the child and then the grandparent with the activity's
// Poison details. Parent code that would catch the child's error never sees it.
func rtPoisonChildFailsParent(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	var childRuns atomic.Int32
	catching := func(child, id string) runtime.Orchestration {
		return func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.ScheduleSubOrchestration(child, "{}", runtime.WithInstanceID(id)).Get(); err != nil {
				return "caught: " + err.Error(), nil // must not happen: poison is not the code's to handle
			}
			return "child completed", nil
		}
	}
	reg := newRegistry(t).
		orch("ParentOrch", catching("ChildOrch", "poison-child")).
		orch("ChildOrch", func(ctx *runtime.Context, in string) (string, error) {
			childRuns.Add(1)
			return "child-result", nil
		}).
		orch("GrandparentOrch", catching("ChildWithActivityOrch", "poison-chain-child")).
		orch("ChildWithActivityOrch", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("ChildActivity", "{}").Get()
		}).
		act("ChildActivity", func(*runtime.ActivityContext, string) (string, error) { return "activity-result", nil })
	fp.poisonInstance("poison-child", 11)
	fp.poisonActivity("ChildActivity", 11)
	r.startFast(reg.Registry, func(o *runtime.Options) { o.MaxAttempts = 10 })

	parent := failed(t, r.run("poison-parent", "ParentOrch", "{}"))
	child := failed(t, r.wait("poison-child"))
	for who, d := range map[string]*provider.ErrorDetails{"parent": parent, "child": child} {
		if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonOrchestration || d.Instance != "poison-child" ||
			d.ExecutionID != provider.InitialExecutionID || d.AttemptCount != 11 || d.MaxAttempts != 10 {
			t.Fatalf("%s failure %+v, want the child's Poison/Orchestration details", who, d)
		}
	}
	if h := r.history("poison-parent"); countKind(h, provider.EventSubOrchestrationFailed) != 1 {
		t.Fatalf("parent history does not record the child's failure: %+v", h)
	}
	if childRuns.Load() != 0 {
		t.Fatal("the poisoned child's code ran")
	}

	grandparent := failed(t, r.run("poison-chain", "GrandparentOrch", "{}"))
	child = failed(t, r.wait("poison-chain-child"))
	for who, d := range map[string]*provider.ErrorDetails{"grandparent": grandparent, "child": child} {
		if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonActivity || d.ActivityName != "ChildActivity" ||
			d.Instance != "poison-chain-child" || d.AttemptCount != 11 || d.MaxAttempts != 10 {
			t.Fatalf("%s failure %+v, want the child activity's Poison/Activity details", who, d)
		}
	}
}

// poison_message_tests.rs: e2e_custom_max_attempts_respected. Poison means strictly
// more attempts than Options.MaxAttempts.
func rtCustomMaxAttemptsRespected(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	reg := newRegistry(t).orch("CustomMaxOrch", func(ctx *runtime.Context, in string) (string, error) { return "success", nil })
	fp.poisonInstance("over-max", 4)
	fp.poisonInstance("at-max", 3)
	r.startFast(reg.Registry, func(o *runtime.Options) { o.MaxAttempts = 3 })
	d := failed(t, r.run("over-max", "CustomMaxOrch", ""))
	if d.Kind != provider.ErrorPoison || d.AttemptCount != 4 || d.MaxAttempts != 3 {
		t.Fatalf("failure %+v, want Poison with 4 of 3 attempts", d)
	}
	completed(t, r.run("at-max", "CustomMaxOrch", ""), "success")
}

// errors_tests.rs: unknown_activity_fails (with unregistered_backoff_tests.rs). An
// activity no runtime registers is offered again with backoff, each offer counted,
// until it exceeds MaxAttempts and fails the orchestration as poison. No attempt
// count is injected here: the provider's own counting gets there.
func rtUnknownActivityEventuallyPoisons(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("CallsMissing", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Missing", in).Get()
	})
	r.startFast(reg.Registry, func(o *runtime.Options) {
		o.MaxAttempts = 2
		o.UnregisteredBackoff = 10 * time.Millisecond
	})
	d := failed(t, r.run("unknown-activity", "CallsMissing", "x"))
	if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonActivity || d.ActivityName != "Missing" ||
		d.AttemptCount != 3 || d.MaxAttempts != 2 {
		t.Fatalf("failure %+v, want Poison/Activity of Missing after 3 of 2 attempts", d)
	}
}

// nondeterminism_tests.rs: code_swap_triggers_nondeterminism. Runtime A's code
// schedules ActA, which blocks until A shuts down; runtime B's code schedules ActB at
// the same point. When B replays the instance it must fail it as nondeterministic.
func rtCodeSwapTriggersNondeterminism(t *testing.T, e renv) {
	r := e.rig(t)
	startedA := cpNewSignal()
	regA := newRegistry(t).
		act("ActA", func(a *runtime.ActivityContext, in string) (string, error) {
			startedA.fire()
			<-a.Done() // blocked until runtime A gives it up
			return "", a.Err()
		}).
		act("ActB", echo).
		orch("SwapTest", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("ActA", "foo").Get()
		})
	a := r.startFast(regA.Registry, cpShortWorkerLock, func(o *runtime.Options) { o.DrainTimeout = 200 * time.Millisecond })
	r.startOrch("inst-swap", "SwapTest", "")
	cpWaitHistory(r, "inst-swap", "ActA to be scheduled", func(h []provider.Event) bool { return cpScheduledID(h, "ActA") != 0 })
	startedA.await(t, "ActA to start on runtime A")
	a.stop()

	regB := newRegistry(t).
		act("ActA", func(*runtime.ActivityContext, string) (string, error) { return "a-done", nil }).
		act("ActB", echo).
		orch("SwapTest", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("ActB", "bar").Get()
		})
	r.startFast(regB.Registry, cpShortWorkerLock)
	d := failed(t, r.wait("inst-swap"))
	if d.Kind != provider.ErrorConfiguration || d.ConfigKind != provider.ConfigNondeterminism {
		t.Fatalf("failure %+v, want Configuration/Nondeterminism", d)
	}
	if !strings.Contains(d.Message, "ActA") || !strings.Contains(d.Message, "ActB") {
		t.Fatalf("nondeterminism message %q does not name both ActA and ActB", d.Message)
	}
	if countKind(r.history("inst-swap"), provider.EventOrchestrationCompleted) != 0 {
		t.Fatal("the swapped instance completed")
	}
}

// lock_timeout_tests.rs: long_running_activity_with_lock_renewal and
// concurrent_activities_with_renewal. Activities running 2.5 times their lock timeout
// keep their locks by renewal: each runs exactly once, on its first attempt.
func rtLongRunningActivityWithLockRenewal(t *testing.T, e renv) {
	r := e.rig(t)
	var mu sync.Mutex
	runs := map[string]int{}
	reg := newRegistry(t).
		act("Slow", func(a *runtime.ActivityContext, in string) (string, error) {
			mu.Lock()
			runs[in]++
			mu.Unlock()
			select {
			case <-time.After(2500 * time.Millisecond):
				return fmt.Sprintf("%s@%d", in, a.Attempt()), nil
			case <-a.Done():
				return "", a.Err()
			}
		}).
		orch("LongRunner", func(ctx *runtime.Context, in string) (string, error) {
			fa, fb := ctx.ScheduleActivity("Slow", "a"), ctx.ScheduleActivity("Slow", "b")
			for _, err := range ctx.Join(fa, fb) {
				if err != nil {
					return "", err
				}
			}
			va, _ := fa.Get()
			vb, _ := fb.Get()
			return va + "," + vb, nil
		})
	r.startFast(reg.Registry, func(o *runtime.Options) {
		o.WorkerLockTimeout = time.Second
		o.WorkerConcurrency = 2
	})
	completed(t, r.run("long-activity", "LongRunner", ""), "a@1,b@1")
	mu.Lock()
	defer mu.Unlock()
	if runs["a"] != 1 || runs["b"] != 1 {
		t.Fatalf("activity executions %v, want each exactly once", runs)
	}
	if n := countKind(r.history("long-activity"), provider.EventActivityCompleted); n != 2 {
		t.Fatalf("history records %d completions, want 2", n)
	}
}

// lock_timeout_tests.rs: orchestration_lock_renewal_prevents_expiration (duroxide
// delays the turn with a test hook; here the orchestration code itself is slow, which
// only a test may do). The first turn takes 2.5 times the orchestrator lock timeout;
// renewal keeps the instance locked, so no other dispatcher runs the turn again and
// it commits once.
func rtOrchestrationLockRenewalPreventsExpiration(t *testing.T, e renv) {
	r := e.rig(t)
	var slowTurns atomic.Int32
	reg := newRegistry(t).
		act("A", echo).
		orch("SlowTurn", func(ctx *runtime.Context, in string) (string, error) {
			if !ctx.IsReplaying() {
				slowTurns.Add(1)
				time.Sleep(2500 * time.Millisecond)
			}
			return ctx.ScheduleActivity("A", in).Get()
		})
	r.startFast(reg.Registry, func(o *runtime.Options) {
		o.OrchestratorLockTimeout = time.Second
		o.OrchestrationConcurrency = 2
	})
	completed(t, r.run("slow-turn", "SlowTurn", "v"), "v")
	if n := slowTurns.Load(); n != 1 {
		t.Fatalf("the first turn ran %d times, want 1 (its lock expired and another dispatcher took it)", n)
	}
	h := r.history("slow-turn")
	if countKind(h, provider.EventOrchestrationStarted) != 1 || countKind(h, provider.EventActivityScheduled) != 1 {
		t.Fatalf("history %+v: want one start and one schedule", h)
	}
}

// reliability_tests.rs: activity_duplicate_completion_workitems_dedup. Two extra
// copies of an activity's completion arrive before the real one; all three are
// consumed while the instance runs, and history records one completion.
func rtDuplicateActivityCompletionDeduplicated(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	release := cpNewSignal()
	t.Cleanup(release.fire)
	reg := newRegistry(t).
		act("Gate", func(a *runtime.ActivityContext, in string) (string, error) {
			select {
			case <-release.ch:
				return in, nil
			case <-a.Done():
				return "", a.Err()
			}
		}).
		orch("OneSlowAct", func(ctx *runtime.Context, in string) (string, error) {
			out, err := ctx.ScheduleActivity("Gate", "x").Get()
			if err != nil {
				return "", err
			}
			if _, err := ctx.WaitForEvent("finish").Get(); err != nil {
				return "", err
			}
			return out, nil
		})
	r.startFast(reg.Registry)
	const inst = "inst-act-dup"
	r.startOrch(inst, "OneSlowAct", "")
	id := cpScheduledID(cpWaitHistory(r, inst, "Gate to be scheduled", func(h []provider.Event) bool {
		return cpScheduledID(h, "Gate") != 0
	}), "Gate")
	dup := provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: inst, ExecutionID: 1, ID: id, Result: "x"}
	for range 2 {
		if err := r.P.EnqueueForOrchestrator(context.Background(), dup, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "both copies to be consumed", func() bool { return fp.consumed(inst, provider.WorkActivityCompleted) == 2 })
	cpWaitHistory(r, inst, "the subscription after the activity", func(h []provider.Event) bool {
		return countKind(h, provider.EventExternalSubscribed) == 1
	})
	release.fire()
	eventually(t, "the real completion to be consumed", func() bool {
		return fp.workAcked() == 1 && fp.consumed(inst, provider.WorkActivityCompleted) == 3
	})
	if err := r.C.RaiseEvent(context.Background(), inst, "finish", ""); err != nil {
		t.Fatal(err)
	}
	completed(t, r.wait(inst), "x")
	n := 0
	for _, ev := range r.history(inst) {
		if ev.Kind == provider.EventActivityCompleted && ev.SourceEventID == id {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("history records %d completions of activity %d, want 1", n, id)
	}
}

// reliability_tests.rs: external_duplicate_workitems_dedup. Two identical
// ExternalRaised items for one wait are not deduplicated by payload: both are recorded
// in history, the first resolves the wait and the second, finding no live
// subscription, changes nothing. (The two-waits case is TimersEvents'
// DuplicateExternalEventsNotDeduplicated.) The instance is held open by an activity so
// that the second copy arrives while it runs.
func rtExternalDuplicateWorkItemsNotDeduplicated(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	release := cpNewSignal()
	t.Cleanup(release.fire)
	reg := newRegistry(t).
		act("Hold", func(a *runtime.ActivityContext, in string) (string, error) {
			select {
			case <-release.ch:
				return in, nil
			case <-a.Done():
				return "", a.Err()
			}
		}).
		orch("WaitEvt", func(ctx *runtime.Context, in string) (string, error) {
			v, err := ctx.WaitForEvent("Evt").Get()
			if err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Hold", v).Get()
		})
	r.startFast(reg.Registry)
	const inst = "inst-ext-dup"
	r.startOrch(inst, "WaitEvt", "")
	cpWaitHistory(r, inst, "the subscription", func(h []provider.Event) bool {
		return countKind(h, provider.EventExternalSubscribed) == 1
	})
	dup := provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: inst, Name: "Evt", Data: "ok"}
	for range 2 {
		if err := r.P.EnqueueForOrchestrator(context.Background(), dup, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "both copies to be consumed", func() bool { return fp.consumed(inst, provider.WorkExternalRaised) == 2 })
	release.fire()
	completed(t, r.wait(inst), "ok")
	h := r.history(inst)
	n := 0
	for _, ev := range h {
		if ev.Kind == provider.EventExternalEvent && ev.Name == "Evt" && ev.Data == "ok" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("history records %d copies of the event, want 2: %+v", n, h)
	}
	if c := countKind(h, provider.EventActivityScheduled); c != 1 {
		t.Fatalf("the wait was resolved %d times, want once", c)
	}
}

// cpAwaitStop waits (briefly) until the runtime over fp has stopped fetching, so that
// what follows happens during the drain. Fetches normally notice the cancellation at
// once; the bound only keeps a dispatcher that was between fetches from hanging the test.
func cpAwaitStop(fp *cpFaultProvider) {
	select {
	case <-fp.stopped:
	case <-time.After(5 * time.Second):
	}
}

// Runtime lifecycle (src/runtime/mod.rs shutdown; worker_reliability_test.rs): an
// activity in flight when shutdown is requested finishes within DrainTimeout and its
// completion is committed before Run returns; a later runtime does not run it again.
func rtShutdownDrainsInFlightActivity(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	started, release := cpNewSignal(), cpNewSignal()
	t.Cleanup(release.fire)
	reg1 := newRegistry(t).
		act("Work", func(a *runtime.ActivityContext, in string) (string, error) {
			started.fire()
			select {
			case <-release.ch:
				return "first", nil
			case <-a.Done():
				return "", a.Err()
			}
		}).
		orch("Drain", func(ctx *runtime.Context, in string) (string, error) { return ctx.ScheduleActivity("Work", in).Get() })
	o := fastOptions()
	o.DrainTimeout = 30 * time.Second
	h := r.start(reg1.Registry, o)
	r.startOrch("drain", "Drain", "")
	started.await(t, "the activity to start")

	shut := make(chan error, 1)
	go func() { shut <- h.rt.Shutdown(context.Background()) }()
	cpAwaitStop(fp)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while an activity was still running", err)
	default:
	}
	release.fire()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Shutdown did not return after the activity finished")
	}
	h.stop()
	if h.err != nil {
		t.Fatalf("Run returned %v", h.err)
	}
	if n := fp.workAcked(); n != 1 {
		t.Fatalf("%d work items acked before Run returned, want 1 (the drained activity)", n)
	}

	var reruns atomic.Int32
	reg2 := newRegistry(t).
		act("Work", func(*runtime.ActivityContext, string) (string, error) { reruns.Add(1); return "second", nil }).
		orch("Drain", func(ctx *runtime.Context, in string) (string, error) { return ctx.ScheduleActivity("Work", in).Get() })
	r.startFast(reg2.Registry)
	completed(t, r.wait("drain"), "first")
	if reruns.Load() != 0 {
		t.Fatalf("the drained activity ran again %d times on the second runtime", reruns.Load())
	}
}

// Runtime lifecycle: an activity still running when DrainTimeout ends is cancelled;
// when it returns on its cancelled context its item is handed back without counting
// the attempt, and a second runtime runs it (as attempt 1) to completion.
func rtShutdownPastDrainTimeoutHandsActivityOn(t *testing.T, e renv) {
	r, fp := cpFaultRig(t, e)
	started, gaveUp := cpNewSignal(), cpNewSignal()
	reg1 := newRegistry(t).
		act("Work", func(a *runtime.ActivityContext, in string) (string, error) {
			started.fire()
			select {
			case <-a.Done():
				gaveUp.fire()
				return "", a.Err()
			case <-time.After(waitTimeout):
				return "too late", nil
			}
		}).
		orch("Handoff", func(ctx *runtime.Context, in string) (string, error) { return ctx.ScheduleActivity("Work", in).Get() })
	h := r.startFast(reg1.Registry, func(o *runtime.Options) { o.DrainTimeout = 200 * time.Millisecond })
	r.startOrch("handoff", "Handoff", "")
	started.await(t, "the activity to start")
	if err := h.rt.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	h.stop()
	if h.err != nil {
		t.Fatalf("Run returned %v", h.err)
	}
	if !gaveUp.fired() {
		t.Fatal("Run returned before the in-flight activity saw its context cancelled")
	}
	if n := fp.workAcked(); n != 0 {
		t.Fatalf("%d work items acked; the cancelled activity's item must be handed back", n)
	}

	reg2 := newRegistry(t).
		act("Work", func(a *runtime.ActivityContext, in string) (string, error) {
			return fmt.Sprintf("second@%d", a.Attempt()), nil
		}).
		orch("Handoff", func(ctx *runtime.Context, in string) (string, error) { return ctx.ScheduleActivity("Work", in).Get() })
	r.startFast(reg2.Registry)
	completed(t, r.wait("handoff"), "second@1")
}

// Runtime lifecycle: a runtime runs once. A second concurrent Run and any Run after
// the first returned fail with ErrRunning; the first still does its work.
func rtRunTwiceIsRefused(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).act("A", echo).orch("O", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("A", in).Get()
	})
	rt, err := runtime.New(r.P, reg.Registry, r.options(fastOptions()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- rt.Run(ctx) }()
	go func() { errs <- rt.Run(ctx) }()
	select {
	case err := <-errs:
		if !errors.Is(err, runtime.ErrRunning) {
			t.Fatalf("the second Run returned %v, want ErrRunning", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("neither Run refused to run twice")
	}
	completed(t, r.run("run-once", "O", "works"), "works")
	cancel()
	select {
	case err := <-errs:
		if err != nil {
			t.Fatalf("the running Run returned %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if err := rt.Run(context.Background()); !errors.Is(err, runtime.ErrRunning) {
		t.Fatalf("Run after the runtime stopped returned %v, want ErrRunning", err)
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of a stopped runtime: %v", err)
	}
}

// Runtime lifecycle (src/runtime/mod.rs start-up validation): the session idle
// timeout must exceed the worker lock renewal interval, or New refuses the options.
func rtSessionIdleTimeoutMustExceedRenewal(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).Registry
	for _, c := range []struct {
		lock, idle time.Duration
		ok         bool
	}{
		{2 * time.Second, 500 * time.Millisecond, false}, // renewal every 1 s
		{2 * time.Second, time.Second, false},            // equal is not enough
		{2 * time.Second, 1001 * time.Millisecond, true},
		{0, 25 * time.Second, false}, // default 30 s lock, renewed 5 s before expiry
		{0, 26 * time.Second, true},
	} {
		_, err := runtime.New(r.P, reg, runtime.Options{WorkerLockTimeout: c.lock, SessionIdleTimeout: c.idle})
		if c.ok && err != nil {
			t.Errorf("lock %s, idle %s: New refused valid options: %v", c.lock, c.idle, err)
		}
		if !c.ok && !errors.Is(err, provider.ErrInvalid) {
			t.Errorf("lock %s, idle %s: New returned %v, want ErrInvalid", c.lock, c.idle, err)
		}
	}
	if _, err := runtime.New(nil, reg, runtime.Options{}); !errors.Is(err, provider.ErrInvalid) {
		t.Errorf("New without a provider: %v, want ErrInvalid", err)
	}
	if _, err := runtime.New(r.P, nil, runtime.Options{}); !errors.Is(err, provider.ErrInvalid) {
		t.Errorf("New without a registry: %v, want ErrInvalid", err)
	}
}
