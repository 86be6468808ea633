package conformance

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// The RaceReplay group ports duroxide's provider_validation/race_replay.rs (0.1.30/
// 0.1.31): runtime-in-the-loop checks of the hand-over from an execution that
// continued as new to its successor, of queue and select races replayed from crafted
// histories, and of the runtime-version stamps a provider must keep as written.
// Histories are crafted the way duroxide's cases craft them: a start is fetched and
// acked with the events and messages of the scenario, then a real runtime runs on.
// Where duroq's semantics differ from duroxide's, each case says so at its top.
func init() {
	registerRuntimeGroup(runtimeGroup{name: "RaceReplay", cases: []runtimeCase{
		{"DuplicateStartPreservesPinnedHandler", rrDuplicateStartPreservesPinnedHandler},
		{"ContinueAsNewUnregisteredBackoff", rrContinueAsNewUnregisteredBackoff},
		{"ContinueAsNewDuplicateStart", rrContinueAsNewDuplicateStart},
		{"ContinueAsNewTransitionDelivery", rrContinueAsNewTransitionDelivery},
		{"QueueRaceCancellationReplay", rrQueueRaceCancellationReplay},
		{"ContinueAsNewQueueRaceReplay", rrContinueAsNewQueueRaceReplay},
		{"QueueReplayVersionStampRoundtrip", rrQueueReplayVersionStampRoundtrip},
		{"PositionalWaitRaceReplay", rrPositionalWaitRaceReplay},
		{"LegacyQueueRaceDecisionPreserved", rrLegacyQueueRaceDecisionPreserved},
	}})
}

// ---- helpers of this file ----

// rrOldStamp is a runtime version older than runtime.Version: the stamp of events an
// earlier duroq wrote (duroxide's cases use 0.1.30 against a 0.1.31 build).
const rrOldStamp = "0.1.0"

// rrDeadline bounds the waits of this group that a lost message would make
// endless: generous for a few turns, short enough that a loss fails in reasonable
// time.
const rrDeadline = 30 * time.Second

// rrHist builds the events of one crafted execution, with the metadata a runtime
// writes: instance, execution, timestamp and the stamp of the writing runtime.
type rrHist struct {
	instance string
	x        uint64
	stamp    string
	ts       int64
}

func newRRHist(instance, stamp string) rrHist {
	return rrHist{instance: instance, x: provider.InitialExecutionID, stamp: stamp, ts: time.Now().UnixMilli()}
}

// ev completes e as event id of the execution, answering src (0: none).
func (h rrHist) ev(id, src uint64, e provider.Event) provider.Event {
	e.EventID, e.SourceEventID = id, src
	e.InstanceID, e.ExecutionID, e.TimestampMs, e.RuntimeVersion = h.instance, h.x, h.ts, h.stamp
	return e
}

func (h rrHist) started(name, input string) provider.Event {
	return h.ev(1, 0, provider.Event{Kind: provider.EventOrchestrationStarted, Name: name, Version: runtime.DefaultVersion, Input: input})
}

func (h rrHist) queueSub(id uint64) provider.Event {
	return h.ev(id, 0, provider.Event{Kind: provider.EventQueueSubscribed, Name: "q"})
}

func (h rrHist) queueSubCancelled(id, src uint64) provider.Event {
	return h.ev(id, src, provider.Event{Kind: provider.EventQueueSubscriptionCancelled, Reason: "lost a select"})
}

func (h rrHist) delivered(id uint64, data string) provider.Event {
	return h.ev(id, 0, provider.Event{Kind: provider.EventQueueEventDelivered, Name: "q", Data: data})
}

func (h rrHist) timer(id uint64, after time.Duration) provider.Event {
	return h.ev(id, 0, provider.Event{Kind: provider.EventTimerCreated, FireAtMs: h.ts + after.Milliseconds()})
}

func (h rrHist) timerFired(id, src uint64, after time.Duration) provider.Event {
	return h.ev(id, src, provider.Event{Kind: provider.EventTimerFired, FireAtMs: h.ts + after.Milliseconds()})
}

// rrMeta is the metadata a runtime acks a new execution with (pinned to stamp),
// ending it with status and output when status is not empty.
func rrMeta(name, stamp, status, output string) provider.ExecutionMetadata {
	pin := provider.MustSemVer(stamp)
	md := provider.ExecutionMetadata{OrchestrationName: ptr(name), OrchestrationVersion: ptr(runtime.DefaultVersion), PinnedVersion: &pin}
	if status != "" {
		md.Status, md.Output = ptr(status), ptr(output)
	}
	return md
}

// rrSeed creates instance with the crafted history of its first execution, the
// orchestrator messages items and metadata md, in one ack of a fetched start (the
// way duroxide's cases persist their seeds).
func rrSeed(t *testing.T, p provider.Provider, history []provider.Event, items []provider.WorkItem, md provider.ExecutionMetadata) {
	t.Helper()
	instance := history[0].InstanceID
	enqueueOrch(t, p, startItem(instance, history[0].Name, history[0].Version, history[0].Input), 0)
	item := mustFetchOrch(t, p, longLock, "the seed start of "+instance)
	if item.Instance != instance {
		t.Fatalf("seed fetched instance %q, want %q", item.Instance, instance)
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID,
		HistoryDelta: history, OrchestratorItems: items, Metadata: md})
}

// rrCANItem is the message that starts the successor of a continued-as-new
// "name" execution, carrying the unread queue message "carried".
func rrCANItem(instance, name string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkContinueAsNew, Instance: instance, Name: name, Version: runtime.DefaultVersion,
		Input: "next", CarryForward: []provider.NameData{{Name: "q", Data: "carried"}}}
}

// rrCANTerminal is a first execution of name that continued as new with input
// "next", stamped stamp.
func rrCANTerminal(instance, name, stamp string) []provider.Event {
	h := newRRHist(instance, stamp)
	return []provider.Event{h.started(name, "old"),
		h.ev(2, 0, provider.Event{Kind: provider.EventOrchestrationContinuedAsNew, Input: "next"})}
}

func rrQueueItem(instance, data string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkQueueMessage, Instance: instance, Name: "q", Data: data}
}

// rrSettled is how a runtime settled a fetched batch a probe watched.
type rrSettled struct {
	kinds []provider.WorkItemKind // the batch's messages
	acked bool                    // acked; else abandoned
	delay time.Duration           // of an abandon
	free  bool                    // an abandon that undid the attempt (shutdown, contention)
	at    time.Time
}

func (s rrSettled) has(k provider.WorkItemKind) bool { return slices.Contains(s.kinds, k) }

// rrProbe wraps a provider to record how a runtime settles the batches holding a
// watched message.
type rrProbe struct {
	provider.Provider
	watch func(provider.WorkItem) bool

	mu      sync.Mutex
	fetched map[string][]provider.WorkItemKind // lock token → kinds of a watched batch
	settled []rrSettled
}

func newRRProbe(p provider.Provider, watch func(provider.WorkItem) bool) *rrProbe {
	return &rrProbe{Provider: p, watch: watch, fetched: map[string][]provider.WorkItemKind{}}
}

func (p *rrProbe) FetchOrchestrationItem(ctx context.Context, opts provider.FetchOptions) (*provider.OrchestrationItem, error) {
	item, err := p.Provider.FetchOrchestrationItem(ctx, opts)
	if item != nil && slices.ContainsFunc(item.Messages, p.watch) {
		kinds := make([]provider.WorkItemKind, len(item.Messages))
		for i, m := range item.Messages {
			kinds[i] = m.Kind
		}
		p.mu.Lock()
		p.fetched[item.LockToken] = kinds
		p.mu.Unlock()
	}
	return item, err
}

func (p *rrProbe) record(token string, s rrSettled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if kinds, ok := p.fetched[token]; ok {
		delete(p.fetched, token)
		s.kinds, s.at = kinds, time.Now()
		p.settled = append(p.settled, s)
	}
}

func (p *rrProbe) AckOrchestrationItem(ctx context.Context, token string, ack provider.OrchestrationAck) error {
	err := p.Provider.AckOrchestrationItem(ctx, token, ack)
	if err == nil {
		p.record(token, rrSettled{acked: true})
	}
	return err
}

func (p *rrProbe) AbandonOrchestrationItem(ctx context.Context, token string, delay provider.Duration, ignoreAttempt bool) error {
	err := p.Provider.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
	if err == nil {
		p.record(token, rrSettled{delay: delay, free: ignoreAttempt})
	}
	return err
}

// find returns the first settlement that satisfies cond.
func (p *rrProbe) find(cond func(rrSettled) bool) (rrSettled, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.settled {
		if cond(s) {
			return s, true
		}
	}
	return rrSettled{}, false
}

// String lists the first settlements, for failure messages.
func (p *rrProbe) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for i, s := range p.settled {
		if i == 8 {
			fmt.Fprintf(&b, "\n  ... %d more", len(p.settled)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %v acked=%v delay=%s free=%v", s.kinds, s.acked, s.delay, s.free)
	}
	return b.String()
}

// rrUntil polls cond until it holds, failing the test after d (with the record of
// probe, when given).
func rrUntil(t *testing.T, d time.Duration, what string, cond func() bool, probe ...*rrProbe) {
	t.Helper()
	pollUntil(t, d, cond, func() string {
		record := ""
		for _, p := range probe {
			record += "; batches the runtime settled:" + p.String()
		}
		return fmt.Sprintf("timed out after %s waiting for %s%s", d, what, record)
	})
}

// rrWait waits at most rrDeadline for instance to end; when it does not, the test
// fails with the status, the latest history and why (the probe's record, if any).
func rrWait(t *testing.T, r *rig, instance, why string, probe *rrProbe) runtime.OrchestrationStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rrDeadline)
	defer cancel()
	st, err := r.C.WaitForOrchestration(ctx, instance)
	if err != nil {
		record := ""
		if probe != nil {
			record = "; batches the runtime settled:" + probe.String()
		}
		t.Fatalf("%s: %s did not end within %s (%v): status %s, latest history %s%s",
			why, instance, rrDeadline, err, st.State, rrKinds(r.history(instance)), record)
	}
	return st
}

// rrRead reads one execution's history.
func rrRead(t *testing.T, r *rig, instance string, x uint64) []provider.Event {
	t.Helper()
	h, err := r.P.ReadWithExecution(context.Background(), instance, x)
	if err != nil {
		t.Fatalf("read %s execution %d: %v", instance, x, err)
	}
	return h
}

// rrKinds renders a history compactly for failure messages.
func rrKinds(h []provider.Event) string {
	parts := make([]string, len(h))
	for i, e := range h {
		s := fmt.Sprintf("%d:%s", e.EventID, e.Kind)
		if e.SourceEventID != 0 {
			s += fmt.Sprintf("(src %d)", e.SourceEventID)
		}
		if e.Data != "" || e.Kind == provider.EventQueueEventDelivered {
			s += "=" + e.Data
		}
		parts[i] = s
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// rrDelivered lists the data of the QueueEventDelivered events of queue q.
func rrDelivered(h []provider.Event) []string {
	var out []string
	for _, e := range h {
		if e.Kind == provider.EventQueueEventDelivered && e.Name == "q" {
			out = append(out, e.Data)
		}
	}
	return out
}

// rrSameHistory fails the test unless got is exactly want (every field, as written).
func rrSameHistory(t *testing.T, what string, got, want []provider.Event) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: the provider returned a history that differs from what was written:\n got %+v\nwant %+v", what, got, want)
	}
}

// rrDequeue dequeues from q.
func rrDequeue(ctx *runtime.Context) (string, error) { return ctx.DequeueEvent("q").Get() }

// ---- the cases ----

// rrDuplicateStartPreservesPinnedHandler ports test_duplicate_start_preserves_pinned_handler:
// a running execution of "Original" 1.0.0 receives, in the batch that completes its
// activity, a duplicate StartOrchestration naming the same handler, or another one,
// with another input. The duplicate is inert: the execution finishes on the 1.0.0
// code with its own input, although the registry's latest "Original" is 2.0.0.
// duroq: the handler is pinned by the name and version in OrchestrationStarted (the
// runtime-version pin is a separate capability stamp), as in duroxide.
func rrDuplicateStartPreservesPinnedHandler(t *testing.T, e renv) {
	for _, dup := range []string{"Original", "WrongHandler"} {
		t.Run(dup, func(t *testing.T) {
			r := e.rig(t)
			instance := "rr-pinned-handler-" + dup
			h := newRRHist(instance, runtime.Version)
			seed := []provider.Event{h.started("Original", "original-input"),
				h.ev(2, 0, provider.Event{Kind: provider.EventActivityScheduled, Name: "tick", Input: "v1"})}
			rrSeed(t, r.P, seed, []provider.WorkItem{
				{Kind: provider.WorkStartOrchestration, Instance: instance, ExecutionID: 1, Name: dup, Input: "wrong-input"},
				{Kind: provider.WorkActivityCompleted, Instance: instance, ExecutionID: 1, ID: 2, Result: "ok"},
			}, rrMeta("Original", runtime.Version, "", ""))
			reg := newRegistry(t).act("tick", echo).
				orchV("Original", "1.0.0", func(ctx *runtime.Context, in string) (string, error) {
					if _, err := ctx.ScheduleActivity("tick", "v1").Get(); err != nil {
						return "", err
					}
					return "v1:" + in, nil
				}).
				orchV("Original", "2.0.0", func(ctx *runtime.Context, in string) (string, error) {
					_, err := ctx.ScheduleActivity("tick", "v2").Get()
					return "v2:" + in, err
				}).
				orch("WrongHandler", func(ctx *runtime.Context, in string) (string, error) {
					_, err := ctx.ScheduleActivity("tick", "wrong").Get()
					return "wrong:" + in, err
				})
			r.startFast(reg.Registry)
			st := rrWait(t, r, instance, "the duplicate start must be inert", nil)
			completed(t, st, "v1:original-input")
			hist := r.history(instance)
			if hist[0].ExecutionID != 1 || countKind(hist, provider.EventOrchestrationStarted) != 1 ||
				countKind(hist, provider.EventActivityScheduled) != 1 {
				t.Fatalf("history after the duplicate start: %s; want execution 1 with one start and one activity", rrKinds(hist))
			}
			if !reflect.DeepEqual(hist[:2], seed) {
				t.Fatalf("the recorded start and schedule changed: %+v, want %+v", hist[:2], seed)
			}
		})
	}
}

// rrContinueAsNewUnregisteredBackoff ports test_continue_as_new_unregistered_backoff:
// during a rolling upgrade a node without the successor's code postpones the
// continue-as-new start with unregistered-code backoff, so the start is hidden (a
// fetch returns nothing once that node stopped: delayed, not merely locked) and
// execution 1 is untouched. A queue message sent during that window, and the message
// carried forward, both reach the successor, in order, once a node with the code
// runs it. duroq: the backoff is Options.UnregisteredBackoff (duroxide's
// base_delay/max_delay); carried messages arrive in the successor's
// OrchestrationStarted (CarryForward), not as QueueEventDelivered events.
func rrContinueAsNewUnregisteredBackoff(t *testing.T, e renv) {
	const instance = "rr-can-unregistered"
	const backoff = 2 * time.Second // the window; the successor cannot start sooner
	r := e.rig(t)
	seed := rrCANTerminal(instance, "RollingSuccessor", runtime.Version)
	rrSeed(t, r.P, seed, []provider.WorkItem{rrCANItem(instance, "RollingSuccessor")},
		rrMeta("RollingSuccessor", runtime.Version, provider.StatusContinuedAsNew, "next"))

	oldNode := newRRProbe(r.P, func(m provider.WorkItem) bool { return m.Kind == provider.WorkContinueAsNew })
	other := newRegistry(t).orch("Other", func(*runtime.Context, string) (string, error) { return "other", nil })
	old := r.startOn(oldNode, other.Registry, func(o *runtime.Options) {
		o.OrchestrationConcurrency, o.UnregisteredBackoff = 1, backoff
	})
	var hidden rrSettled
	rrUntil(t, waitTimeout, "the node without RollingSuccessor to postpone the successor start", func() bool {
		var ok bool
		hidden, ok = oldNode.find(func(s rrSettled) bool { return !s.acked && !s.free })
		return ok
	})
	old.stop()
	if hidden.delay <= 0 {
		t.Fatalf("the successor start was given back without a delay (batch %v)", hidden.kinds)
	}
	if item := fetchOrch(t, r.P, longLock); item != nil {
		_ = r.P.AbandonOrchestrationItem(context.Background(), item.LockToken, 0, true)
		// A margin keeps the clocks of the store and of this process out of it.
		if since := time.Since(hidden.at); since < hidden.delay-250*time.Millisecond {
			t.Fatalf("%s after the start was postponed for %s, a fetch returned it (%v): it must be hidden by the backoff, not merely locked",
				since.Round(time.Millisecond), hidden.delay, item.Messages)
		}
		t.Logf("the machine was too slow to check the window (%s passed); the rest still runs", time.Since(hidden.at))
	}
	if x1 := rrRead(t, r, instance, 1); !reflect.DeepEqual(x1, seed) {
		t.Fatalf("the postponed successor changed execution 1: %s", rrKinds(x1))
	}
	if latest := r.history(instance); len(latest) != 2 || latest[0].ExecutionID != 1 {
		t.Fatalf("an execution started on a node without its code: latest history %s", rrKinds(latest))
	}

	if err := r.C.EnqueueEvent(context.Background(), instance, "q", "late"); err != nil {
		t.Fatal(err)
	}
	newNode := newRRProbe(r.P, func(m provider.WorkItem) bool { return m.Kind == provider.WorkQueueMessage })
	reg := newRegistry(t).orch("RollingSuccessor", func(ctx *runtime.Context, _ string) (string, error) {
		if x := ctx.ExecutionID(); x != 2 {
			return "", fmt.Errorf("RollingSuccessor ran in execution %d", x)
		}
		first, err := rrDequeue(ctx)
		if err != nil {
			return "", err
		}
		second, err := rrDequeue(ctx)
		return first + "," + second, err
	})
	r.startOn(newNode, reg.Registry)
	st := rrWait(t, r, instance, "the successor and the message sent during the backoff must survive the rolling node", newNode)
	completed(t, st, "carried,late")
	x2 := rrRead(t, r, instance, 2)
	if s := x2[0]; s.Name != "RollingSuccessor" || s.Input != "next" || !slices.Equal(s.CarryForward, []provider.NameData{{Name: "q", Data: "carried"}}) {
		t.Fatalf("execution 2 started as %+v", s)
	}
	if got := rrDelivered(x2); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("execution 2 received %q, want [late] exactly once", got)
	}
	if _, alone := newNode.find(func(s rrSettled) bool { return !s.has(provider.WorkContinueAsNew) }); !alone {
		t.Logf("the successor start was visible again before the late message was fetched: the window was not exercised")
	}
}

// rrContinueAsNewDuplicateStart ports test_continue_as_new_duplicate_start: a
// duplicate start queued ahead of the continue-as-new successor (with a parent link
// when a colliding parent asked for the same explicit child id) must neither replace
// the successor nor keep it from running: the successor completes with
// "carried,late", the colliding parent is told the instance already exists,
// execution 1 keeps its 2 events and execution 2 starts as the successor.
// duroq: duroxide runs this for event stamps 0.1.30 and 0.1.31; duroq selects no
// behaviour by stamp, so the seed is stamped once (an older stamp, which this runtime
// runs). duroq answers the collision with a SubOrchFailed saying "already exists".
func rrContinueAsNewDuplicateStart(t *testing.T, e renv) {
	for _, collision := range []bool{false, true} {
		t.Run(map[bool]string{false: "Duplicate", true: "CollidingParent"}[collision], func(t *testing.T) {
			r := e.rig(t)
			const parent = "rr-can-dup-parent"
			const child = parent + "::can-child"
			if collision {
				h := newRRHist(parent, rrOldStamp)
				rrSeed(t, r.P, []provider.Event{h.started("CollisionParent", ""),
					h.ev(2, 0, provider.Event{Kind: provider.EventSubOrchestrationScheduled, Name: "Transition", Instance: child, Input: "duplicate"}),
				}, nil, rrMeta("CollisionParent", rrOldStamp, "", ""))
			}
			dup := provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: child, ExecutionID: 1, Name: "WrongHandler", Input: "duplicate"}
			if collision {
				dup.ParentInstance, dup.ParentID, dup.ParentExecutionID = parent, 2, 1
			}
			seed := rrCANTerminal(child, "Transition", rrOldStamp)
			rrSeed(t, r.P, seed, []provider.WorkItem{dup, rrCANItem(child, "Transition"), rrQueueItem(child, "late")},
				rrMeta("Transition", rrOldStamp, provider.StatusContinuedAsNew, "next"))
			reg := newRegistry(t).
				orch("Transition", func(ctx *runtime.Context, in string) (string, error) {
					if x := ctx.ExecutionID(); x != 2 {
						return "", fmt.Errorf("Transition ran in execution %d with %q", x, in)
					}
					first, err := rrDequeue(ctx)
					if err != nil {
						return "", err
					}
					second, err := rrDequeue(ctx)
					return first + "," + second, err
				}).
				orch("CollisionParent", func(ctx *runtime.Context, _ string) (string, error) {
					v, err := ctx.ScheduleSubOrchestration("Transition", "duplicate", runtime.WithInstanceID(child)).Get()
					if err == nil {
						return "", fmt.Errorf("collision unexpectedly resolved: %s", v)
					}
					return err.Error(), nil
				})
			r.startFast(reg.Registry)
			completed(t, rrWait(t, r, child, "the successor must not be replaced or livelocked by the duplicate start", nil), "carried,late")
			if collision {
				st := rrWait(t, r, parent, "the colliding parent must be told", nil)
				if st.State != runtime.StateCompleted || !strings.Contains(st.Output, "already exists") {
					t.Fatalf("colliding parent ended %s with %q (%s); want the collision reported as an instance that already exists",
						st.State, st.Output, st.Failure.DisplayMessage())
				}
			}
			if x1 := rrRead(t, r, child, 1); !reflect.DeepEqual(x1, seed) {
				t.Fatalf("the duplicate start changed execution 1: %s", rrKinds(x1))
			}
			x2 := rrRead(t, r, child, 2)
			if s := x2[0]; s.Kind != provider.EventOrchestrationStarted || s.Name != "Transition" || s.Input != "next" || s.ParentInstance != "" {
				t.Fatalf("execution 2 started as %+v; want the successor Transition(next)", s)
			}
			if latest := r.history(child); latest[0].ExecutionID != 2 {
				t.Fatalf("latest execution %d, want 2", latest[0].ExecutionID)
			}
		})
	}
}

// rrContinueAsNewTransitionDelivery ports test_continue_as_new_transition_delivery:
// messages that reach an instance whose execution continued as new while the
// successor's start is not yet visible. Seven shapes: a queue message; the same
// consumed through a dequeue/timer race; with stale completions of execution 1; with
// an external event; with a cancellation; a completion addressed to execution 2 that
// nothing scheduled; stale completions only. Queue messages are neither lost nor
// duplicated ("carried" then "late"), stale completions never reach execution 2, a
// cancellation reaches the successor, execution 1 keeps exactly its 2 events and the
// successor is stamped by the runtime that starts it, not with its predecessor's
// stamp.
// duroq: duroxide hides the successor by enqueueing it with a 2 s delay; here the
// successor is enqueued only after the runtime has settled (acked or given back) a
// batch of the arrivals, which is the same window without a race against a clock.
// Two shapes assert duroq's rules where they differ from duroxide's: an external
// event accepted in the successor's turn resolves a wait the code makes in that turn
// (events are applied after the code's first step), so "signal" expects "answer"
// whenever it is applied (duroxide expects the "fresh" signal raised after the
// binding when the window's one was applied before it); and a completion of an
// event no code scheduled is dropped (duroxide fails the execution as
// nondeterministic), so "future-completion" expects it not to be applied and the
// successor to go on with a later message. In "future-completion" and "stale-only"
// the successor keeps running until the runtime has consumed the completion, so the
// completion cannot miss it by arriving after it ended.
func rrContinueAsNewTransitionDelivery(t *testing.T, e renv) {
	for _, shape := range []string{"queue", "race", "mixed-stale", "signal", "cancel", "future-completion", "stale-only"} {
		t.Run(shape, func(t *testing.T) {
			r := e.rig(t)
			instance := "rr-can-window-" + shape
			late := rrQueueItem(instance, "late")
			arrivals := []provider.WorkItem{late}
			switch shape {
			case "mixed-stale":
				arrivals = append(arrivals,
					provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: instance, ExecutionID: 1, ID: 99, Result: "stale"},
					provider.WorkItem{Kind: provider.WorkTimerFired, Instance: instance, ExecutionID: 1, ID: 100, FireAtMs: 1},
					provider.WorkItem{Kind: provider.WorkSubOrchCompleted, Instance: "rr-stale-child", ParentInstance: instance,
						ParentExecutionID: 1, ParentID: 101, Result: "stale"})
			case "signal":
				arrivals = append(arrivals, externalRaised(instance, "signal", "answer"))
			case "cancel":
				arrivals = append(arrivals, provider.WorkItem{Kind: provider.WorkCancelInstance, Instance: instance, Reason: "requested-during-CAN"})
			case "future-completion":
				arrivals = []provider.WorkItem{{Kind: provider.WorkActivityCompleted, Instance: instance, ExecutionID: 2, ID: 99, Result: "unmatched"}}
			case "stale-only":
				arrivals = []provider.WorkItem{{Kind: provider.WorkActivityCompleted, Instance: instance, ExecutionID: 1, ID: 99, Result: "stale"}}
			}
			seed := rrCANTerminal(instance, "Transition", rrOldStamp)
			rrSeed(t, r.P, seed, arrivals, rrMeta("Transition", rrOldStamp, provider.StatusContinuedAsNew, "next"))

			reg := newRegistry(t).orch("Transition", func(ctx *runtime.Context, _ string) (string, error) {
				if ctx.ExecutionID() == 1 {
					return "", ctx.ContinueAsNew("next")
				}
				switch shape {
				case "stale-only":
					v, err := rrDequeue(ctx)
					if err != nil {
						return "", err
					}
					_, err = ctx.WaitForEvent("finish").Get() // running until the stale completion is consumed
					return v, err
				case "signal":
					answer, err := ctx.WaitForEvent("signal").Get()
					if err != nil {
						return "", err
					}
					first, err := rrDequeue(ctx)
					if err != nil {
						return "", err
					}
					second, err := rrDequeue(ctx)
					return first + "," + second + "|" + answer, err
				}
				var values []string
				for len(values) < 2 {
					if shape != "race" {
						v, err := rrDequeue(ctx)
						if err != nil {
							return "", err
						}
						values = append(values, v)
						continue
					}
					dq := ctx.DequeueEvent("q")
					if ctx.Select(dq, ctx.CreateTimer(50*time.Millisecond)) == 0 {
						v, err := dq.Get()
						if err != nil {
							return "", err
						}
						values = append(values, v)
					}
				}
				return strings.Join(values, ","), nil
			})
			probe := newRRProbe(r.P, func(m provider.WorkItem) bool { return m.Kind != provider.WorkContinueAsNew })
			r.startOn(probe, reg.Registry)
			rrUntil(t, waitTimeout, "the runtime to settle the arrivals while execution 1 has no successor", func() bool {
				_, ok := probe.find(func(rrSettled) bool { return true })
				return ok
			})
			if err := r.P.EnqueueForOrchestrator(context.Background(), rrCANItem(instance, "Transition"), 0); err != nil {
				t.Fatal(err)
			}
			switch shape {
			case "signal":
				rrUntil(t, rrDeadline, "execution 2 to bind its wait and receive the window's signal", func() bool {
					h := r.history(instance)
					return h[0].ExecutionID == 2 && cnvSubscribed("signal")(h) && slices.ContainsFunc(h, func(e provider.Event) bool {
						return e.Kind == provider.EventExternalEvent && e.Name == "signal" && e.Data == "answer"
					})
				}, probe)
				cnvRaise(t, r, instance, "signal", "fresh")
			case "future-completion", "stale-only":
				// The successor keeps running until the completion is consumed, then
				// gets what it needs to finish.
				rrUntil(t, rrDeadline, "the runtime to consume the completion", func() bool {
					_, ok := probe.find(func(s rrSettled) bool { return s.acked && s.has(provider.WorkActivityCompleted) })
					return ok
				}, probe)
				if shape == "stale-only" {
					rrUntil(t, rrDeadline, "execution 2 to wait for finish", func() bool { return cnvSubscribed("finish")(r.history(instance)) }, probe)
					cnvRaise(t, r, instance, "finish", "")
					break
				}
				rrUntil(t, rrDeadline, "execution 2 to start", func() bool { return r.history(instance)[0].ExecutionID == 2 }, probe)
				if err := r.C.EnqueueEvent(context.Background(), instance, "q", "late"); err != nil {
					t.Fatal(err)
				}
			}
			st := rrWait(t, r, instance, "the continue-as-new hand-over must keep the window's arrivals", probe)

			if x1 := rrRead(t, r, instance, 1); !reflect.DeepEqual(x1, seed) {
				t.Fatalf("admission changed execution 1: %s", rrKinds(x1))
			}
			x2 := rrRead(t, r, instance, 2)
			if len(x2) == 0 {
				t.Fatal("execution 2 never started")
			}
			if s := x2[0]; s.Name != "Transition" || s.Input != "next" || s.RuntimeVersion != runtime.Version ||
				!slices.Equal(s.CarryForward, []provider.NameData{{Name: "q", Data: "carried"}}) {
				t.Fatalf("execution 2 started as %+v; want Transition(next) stamped %s carrying [q:carried] (execution 1 is stamped %s)",
					s, runtime.Version, rrOldStamp)
			}
			for _, ev := range x2 {
				if (ev.Kind == provider.EventActivityCompleted || ev.Kind == provider.EventTimerFired || ev.Kind == provider.EventSubOrchestrationCompleted) &&
					ev.SourceEventID >= 99 && shape != "race" {
					t.Fatalf("a completion of another execution, or of nothing scheduled, was applied to execution 2: %+v", ev)
				}
			}
			switch shape {
			case "cancel":
				d := failed(t, st)
				if d.Kind != provider.ErrorApplication || d.AppKind != provider.AppCancelled || d.Reason != "requested-during-CAN" {
					t.Fatalf("cancelled successor failed with %+v; want Cancelled(requested-during-CAN)", d)
				}
				return
			case "stale-only":
				completed(t, st, "carried")
				if got := rrDelivered(x2); len(got) != 0 {
					t.Fatalf("execution 2 received %q, want nothing", got)
				}
				return
			case "signal":
				completed(t, st, "carried,late|answer")
				n := 0
				for _, ev := range x2 {
					if ev.Kind == provider.EventExternalEvent && ev.Name == "signal" && ev.Data == "answer" {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("the window's signal reached execution 2 %d times, want once: %s", n, rrKinds(x2))
				}
			default:
				completed(t, st, "carried,late")
			}
			if got := rrDelivered(x2); !slices.Equal(got, []string{"late"}) {
				t.Fatalf("execution 2 received %q, want [late]: no loss, no duplicate", got)
			}
		})
	}
}

// rrQueueRaceHandler is the code of the crafted queue-race histories: for q1 and q2 a
// three-way race of two dequeues and a timer, then dequeues until two values; for q6
// a race of a dequeue and two timers, then one dequeue. It checkpoints its result in
// an activity.
func rrQueueRaceHandler(ctx *runtime.Context, in string) (string, error) {
	var values []string
	if in == "q6" {
		ctx.Select(ctx.DequeueEvent("q"), ctx.CreateTimer(10*time.Millisecond), ctx.CreateTimer(100*time.Millisecond))
		v, err := rrDequeue(ctx)
		if err != nil {
			return "", err
		}
		values = append(values, v)
	} else {
		fs := []*runtime.Future{ctx.DequeueEvent("q"), ctx.DequeueEvent("q"), ctx.CreateTimer(10 * time.Millisecond)}
		if i := ctx.Select(fs...); i < 2 {
			v, err := fs[i].Get()
			if err != nil {
				return "", err
			}
			values = append(values, v)
		}
		for len(values) < 2 {
			v, err := rrDequeue(ctx)
			if err != nil {
				return "", err
			}
			values = append(values, v)
		}
	}
	out := strings.Join(values, ",")
	if _, err := ctx.ScheduleActivity("checkpoint", out).Get(); err != nil {
		return "", err
	}
	return out, nil
}

// rrQueueRaceCancellationReplay ports test_queue_race_cancellation_replay: three
// crafted histories mixing queue subscriptions, withdrawn subscriptions and timers
// (q1: the timer wins the race, both dequeues are withdrawn and the two messages go
// to the next dequeues; q2: the first dequeue wins, the second is withdrawn; q6: a
// timer wins, the dequeue is withdrawn and the message goes to the next dequeue).
// The provider returns each history exactly as written (every field, the old stamp
// included), and the runtime's replay takes exactly the recorded decisions: the
// execution completes with the FIFO values ("first,second" or "first") and only the
// checkpoint's completion and the end are appended.
// duroq: the histories are what duroq's engine records for this code (a withdrawn
// subscription is recorded when the select is decided, before the next dequeue).
// duroq has no select of selects, so q6's nested race (a dequeue/timer race inside a
// race with a longer timer) is one three-way Select with the same outcome.
func rrQueueRaceCancellationReplay(t *testing.T, e renv) {
	for _, shape := range []string{"q1", "q2", "q6"} {
		t.Run(shape, func(t *testing.T) {
			r := e.rig(t)
			instance := "rr-queue-race-" + shape
			h := newRRHist(instance, rrOldStamp)
			history := []provider.Event{h.started("QueueRace", shape)}
			want := "first,second"
			switch shape {
			case "q1":
				history = append(history, h.queueSub(2), h.queueSub(3), h.timer(4, 10*time.Millisecond),
					h.timerFired(5, 4, 10*time.Millisecond), h.delivered(6, "first"), h.delivered(7, "second"),
					h.queueSubCancelled(8, 2), h.queueSubCancelled(9, 3), h.queueSub(10), h.queueSub(11))
			case "q2":
				history = append(history, h.queueSub(2), h.queueSub(3), h.timer(4, 10*time.Millisecond),
					h.delivered(5, "first"), h.delivered(6, "second"), h.queueSubCancelled(7, 3), h.queueSub(8))
			case "q6":
				history = append(history, h.queueSub(2), h.timer(3, 10*time.Millisecond), h.timer(4, 100*time.Millisecond),
					h.timerFired(5, 4, 100*time.Millisecond), h.delivered(6, "first"), h.queueSubCancelled(7, 2), h.queueSub(8))
				want = "first"
			}
			checkpoint := uint64(len(history) + 1)
			history = append(history, h.ev(checkpoint, 0, provider.Event{Kind: provider.EventActivityScheduled, Name: "checkpoint", Input: want}))
			rrSeed(t, r.P, history, []provider.WorkItem{{Kind: provider.WorkActivityCompleted, Instance: instance,
				ExecutionID: 1, ID: checkpoint, Result: "ok"}}, rrMeta("QueueRace", rrOldStamp, "", ""))
			rrSameHistory(t, "read", rrRead(t, r, instance, 1), history)

			r.startFast(newRegistry(t).orch("QueueRace", rrQueueRaceHandler).Registry)
			completed(t, rrWait(t, r, instance, "the crafted queue race must replay", nil), want)
			final := rrRead(t, r, instance, 1)
			if len(final) != len(history)+2 {
				t.Fatalf("replay appended %s; want the checkpoint's completion and the end only", rrKinds(final[min(len(final), len(history)):]))
			}
			rrSameHistory(t, "read after the replay", final[:len(history)], history)
			done, end := final[len(history)], final[len(history)+1]
			if done.Kind != provider.EventActivityCompleted || done.SourceEventID != checkpoint || done.Result != "ok" ||
				end.Kind != provider.EventOrchestrationCompleted || end.Output != want || end.RuntimeVersion != runtime.Version {
				t.Fatalf("replay appended %+v and %+v", done, end)
			}
		})
	}
}

// rrContinueAsNewQueueRaceReplay ports test_continue_as_new_queue_race_replay: the
// queue messages an execution did not read when it continued as new are carried into
// the next one. Execution 1 is crafted with a queue subscription and a timer; the
// timer fires, then m1 (and m2) arrive in one batch:
//   - can: the timer wins the race, the dequeue is withdrawn, m1 is carried;
//   - can-drain: the same, then a dequeue reads m1, m2 is carried;
//   - can-held: a dequeue kept aside (never awaited) while the timer runs; the code
//     continues as new before m1 is applied, so m1 is carried;
//   - can-held-nonprefix: the same, then a second dequeue; the kept subscription is
//     the older one, so it takes m1 and the second takes m2.
//
// duroq: a Select always withdraws its losers, so duroxide's subscription "held"
// across a select (select2(&mut held, timer)) is here a dequeue the code never
// passes to a Select. duroq hands messages to live subscriptions in subscription
// order and counts a resolved subscription as having consumed its message, awaited
// or not, so in can-held-nonprefix m1 is consumed by the kept subscription and
// nothing is carried (duroxide carries m1, the message the code never read); the
// successor then gets a message sent to it (m3). Execution 1's continue-as-new input
// records what its explicit dequeue returned.
func rrContinueAsNewQueueRaceReplay(t *testing.T, e renv) {
	for _, c := range []struct {
		shape, want string
		carried     []string
	}{
		{"can", "can/-|m1", []string{"m1"}},
		{"can-drain", "can-drain/m1|m2", []string{"m2"}},
		{"can-held", "can-held/-|m1", []string{"m1"}},
		{"can-held-nonprefix", "can-held-nonprefix/m2|m3", nil},
	} {
		t.Run(c.shape, func(t *testing.T) {
			r := e.rig(t)
			instance := "rr-can-race-" + c.shape
			h := newRRHist(instance, rrOldStamp)
			seed := []provider.Event{h.started("CombinedRace", c.shape), h.queueSub(2), h.timer(3, 10*time.Millisecond)}
			// The timer is due already, so it is visible with the messages and fetched
			// first; replay matches a timer by position, not by deadline.
			seed[2].FireAtMs = 1
			items := []provider.WorkItem{{Kind: provider.WorkTimerFired, Instance: instance, ExecutionID: 1, ID: 3, FireAtMs: 1},
				rrQueueItem(instance, "m1")}
			if c.shape == "can-drain" || c.shape == "can-held-nonprefix" {
				items = append(items, rrQueueItem(instance, "m2"))
			}
			rrSeed(t, r.P, seed, items, rrMeta("CombinedRace", rrOldStamp, "", ""))
			reg := newRegistry(t).orch("CombinedRace", func(ctx *runtime.Context, in string) (string, error) {
				if ctx.ExecutionID() > 1 {
					v, err := rrDequeue(ctx)
					return in + "|" + v, err
				}
				got := "-"
				if strings.HasPrefix(in, "can-held") {
					_ = ctx.DequeueEvent("q") // kept aside, never awaited
					if _, err := ctx.CreateTimer(10 * time.Millisecond).Get(); err != nil {
						return "", err
					}
				} else {
					ctx.Select(ctx.DequeueEvent("q"), ctx.CreateTimer(10*time.Millisecond))
				}
				if in == "can-drain" || in == "can-held-nonprefix" {
					v, err := rrDequeue(ctx)
					if err != nil {
						return "", err
					}
					got = v
				}
				return "", ctx.ContinueAsNew(in + "/" + got)
			})
			r.startFast(reg.Registry)
			if c.carried == nil {
				rrUntil(t, rrDeadline, "execution 2 to wait on its queue", func() bool {
					h := r.history(instance)
					return h[0].ExecutionID == 2 && countKind(h, provider.EventQueueSubscribed) == 1
				})
				if err := r.C.EnqueueEvent(context.Background(), instance, "q", "m3"); err != nil {
					t.Fatal(err)
				}
			}
			completed(t, rrWait(t, r, instance, "unread messages must be carried across continue-as-new", nil), c.want)
			x1 := rrRead(t, r, instance, 1)
			rrSameHistory(t, "execution 1's recorded prefix", x1[:len(seed)], seed)
			if end := cnvLast(x1); end.Kind != provider.EventOrchestrationContinuedAsNew {
				t.Fatalf("execution 1 ends with %s", end.Kind)
			}
			var carried []string
			for _, cf := range rrRead(t, r, instance, 2)[0].CarryForward {
				carried = append(carried, cf.Name+":"+cf.Data)
			}
			var want []string
			for _, m := range c.carried {
				want = append(want, "q:"+m)
			}
			if !slices.Equal(carried, want) {
				t.Fatalf("execution 2 carried %q, want %q", carried, want)
			}
		})
	}
}

// rrQueueReplayVersionStampRoundtrip ports test_queue_replay_version_stamp_roundtrip:
// an event stamped by an older runtime is returned with its own stamp by read and by
// fetch (providers must not re-stamp), and a runtime that runs the execution on
// keeps it: only the events it writes carry its version.
func rrQueueReplayVersionStampRoundtrip(t *testing.T, e renv) {
	const instance = "rr-stamp-roundtrip"
	r := e.rig(t)
	h := newRRHist(instance, rrOldStamp)
	seed := []provider.Event{h.started("TestOrch", "{}")}
	rrSeed(t, r.P, seed, nil, rrMeta("TestOrch", rrOldStamp, "", ""))
	rrSameHistory(t, "read_with_execution", rrRead(t, r, instance, 1), seed)
	rrSameHistory(t, "read", r.history(instance), seed)

	enqueueOrch(t, r.P, externalRaised(instance, "fetch-stamp", "wake"), 0)
	item := mustFetchOrch(t, r.P, longLock, "the stamped execution")
	rrSameHistory(t, "fetch", item.History, seed)
	if err := r.P.AbandonOrchestrationItem(context.Background(), item.LockToken, 0, true); err != nil {
		t.Fatal(err)
	}

	r.startFast(newRegistry(t).orch("TestOrch", func(ctx *runtime.Context, _ string) (string, error) {
		return ctx.WaitForEvent("fetch-stamp").Get()
	}).Registry)
	completed(t, rrWait(t, r, instance, "the stamped execution must run", nil), "wake")
	final := r.history(instance)
	rrSameHistory(t, "read after a newer runtime ran the execution", final[:1], seed)
	for _, ev := range final[1:] {
		if ev.RuntimeVersion != runtime.Version {
			t.Fatalf("%s written by this runtime is stamped %q, want %s", ev.Kind, ev.RuntimeVersion, runtime.Version)
		}
	}
}

// rrLiveSignalRace waits for signal s against a long timer, then waits for s again.
func rrLiveSignalRace(ctx *runtime.Context, _ string) (string, error) {
	w := ctx.WaitForEvent("s")
	first := "timeout"
	if ctx.Select(w, ctx.CreateTimer(30*time.Second)) == 0 {
		v, err := w.Get()
		if err != nil {
			return "", err
		}
		first = v
	}
	second, err := ctx.WaitForEvent("s").Get()
	return first + ":" + second, err
}

// rrPositionalWaitRaceReplay ports test_positional_wait_race_replay: a live signal
// race (a wait against a 30 s timer, then a second wait; each signal raised once its
// wait is recorded) completes, and an offline replay of the recorded history
// reproduces the result without deciding anything new, twice.
// duroq: the offline replay is runtime.RunTurn over the history read back without
// its terminal event (as duroxide's does: an ended history is not replayed), so the
// one event it appends is that end, equal to the recorded one; "no new decisions"
// means nothing else, no work items and no cancellations.
func rrPositionalWaitRaceReplay(t *testing.T, e renv) {
	const instance = "rr-live-signal"
	r := e.rig(t)
	r.startFast(newRegistry(t).orch("LiveSignalRace", rrLiveSignalRace).Registry)
	r.startOrch(instance, "LiveSignalRace", "")
	waits := func(n int) func() bool {
		return func() bool { return countKind(r.history(instance), provider.EventExternalSubscribed) >= n }
	}
	eventually(t, "the first wait to be recorded", waits(1))
	cnvRaise(t, r, instance, "s", "one")
	eventually(t, "the second wait to be recorded", waits(2))
	cnvRaise(t, r, instance, "s", "two")
	st := r.wait(instance)
	completed(t, st, "one:two")

	history := r.history(instance)
	end := cnvLast(history)
	if end.Kind != provider.EventOrchestrationCompleted {
		t.Fatalf("history ends with %s", end.Kind)
	}
	body := history[:len(history)-1]
	var first runtime.TurnResult
	for i := range 2 {
		res := runtime.RunTurn(runtime.Turn{Instance: instance, ExecutionID: end.ExecutionID, History: body,
			Now: time.UnixMilli(end.TimestampMs), RuntimeVersion: runtime.Version}, rrLiveSignalRace)
		if res.Status != provider.StatusCompleted || res.Output != st.Output {
			t.Fatalf("replay %d: %s %q (%s); live run completed with %q; history %s",
				i+1, res.Status, res.Output, res.Failure.DisplayMessage(), st.Output, rrKinds(body))
		}
		if len(res.NewEvents) != 1 || res.NewEvents[0].Kind != provider.EventOrchestrationCompleted ||
			res.NewEvents[0].EventID != end.EventID || res.NewEvents[0].Output != end.Output {
			t.Fatalf("replay %d decided %s; want only the recorded end %d:%s", i+1, rrKinds(res.NewEvents), end.EventID, end.Kind)
		}
		if len(res.WorkerItems)+len(res.OrchestratorItems)+len(res.CancelledActivities) != 0 {
			t.Fatalf("replay %d issued work: %+v %+v %+v", i+1, res.WorkerItems, res.OrchestratorItems, res.CancelledActivities)
		}
		if i == 1 && !reflect.DeepEqual(res, first) {
			t.Fatalf("two replays of one history differ:\n%+v\n%+v", first, res)
		}
		first = res
	}
}

// rrLegacyCompetition subscribes twice to q and starts two timers, races the first
// subscription against the first timer, then the second against the second, and
// checkpoints what the second race gave.
func rrLegacyCompetition(ctx *runtime.Context, _ string) (string, error) {
	first, second := ctx.DequeueEvent("q"), ctx.DequeueEvent("q")
	t0, t1 := ctx.CreateTimer(30*time.Second), ctx.CreateTimer(60*time.Second)
	ctx.Select(first, t0)
	value := "second-timeout"
	if ctx.Select(second, t1) == 0 {
		v, err := second.Get()
		if err != nil {
			return "", err
		}
		value = v
	}
	if _, err := ctx.ScheduleActivity("checkpoint", value).Get(); err != nil {
		return "", err
	}
	return value, nil
}

// rrLegacyQueueRaceDecisionPreserved ports test_legacy_queue_race_decision_preserved:
// the first turn of the competition is computed offline and persisted, its timers due
// at once; the first timer fires, then "first" arrives, then the second timer. The
// fetched history keeps its stamp, the turn computed from it is committed, and a
// runtime finishes the execution.
// duroq: duroxide selects one of two queue/timer decision rules by the execution's
// stamp (0.1.30 keeps the legacy "second-timeout", 0.1.31 takes "first"). duroq has
// one rule: a subscription withdrawn by a lost select never takes a message, so the
// message goes to the live subscription of the second race. The nearest assertion
// duroq makes is that an execution stamped by an older runtime and one stamped by
// this runtime take that same decision ("first"), the fetch path keeps the stamp and
// the runtime's replay agrees with the committed turn.
func rrLegacyQueueRaceDecisionPreserved(t *testing.T, e renv) {
	for _, stamp := range []string{rrOldStamp, runtime.Version} {
		t.Run(stamp, func(t *testing.T) {
			r := e.rig(t)
			instance := "rr-legacy-decision-" + stamp
			h := newRRHist(instance, stamp)
			start := h.started("LegacyCompetition", "")
			res := runtime.RunTurn(runtime.Turn{Instance: instance, ExecutionID: 1, History: []provider.Event{start},
				Now: time.UnixMilli(h.ts), RuntimeVersion: stamp}, rrLegacyCompetition)
			if res.Status != provider.StatusRunning || len(res.NewEvents) != 4 {
				t.Fatalf("first turn: %s %s", res.Status, rrKinds(res.NewEvents))
			}
			history := append([]provider.Event{start}, res.NewEvents...)
			var items []provider.WorkItem
			for i := range history {
				if ev := &history[i]; ev.Kind == provider.EventTimerCreated {
					ev.FireAtMs = 1 // due now; replay matches a timer by position, not by deadline
					items = append(items, provider.WorkItem{Kind: provider.WorkTimerFired, Instance: instance, ExecutionID: 1, ID: ev.EventID, FireAtMs: 1})
				}
			}
			if len(items) != 2 {
				t.Fatalf("first turn created %d timers, want 2", len(items))
			}
			items = []provider.WorkItem{items[0], rrQueueItem(instance, "first"), items[1]}
			rrSeed(t, r.P, history, items, rrMeta("LegacyCompetition", stamp, "", ""))

			item := mustFetchOrch(t, r.P, longLock, "the competition's turn")
			rrSameHistory(t, "fetch", item.History, history)
			var kinds []provider.WorkItemKind
			for _, m := range item.Messages {
				kinds = append(kinds, m.Kind)
			}
			if !slices.Equal(kinds, []provider.WorkItemKind{provider.WorkTimerFired, provider.WorkQueueMessage, provider.WorkTimerFired}) {
				t.Fatalf("fetched messages %+v; want timer, queue message, timer in enqueue order", item.Messages)
			}
			turn := runtime.RunTurn(runtime.Turn{Instance: instance, ExecutionID: 1, History: item.History, Messages: item.Messages,
				KVSnapshot: item.KVSnapshot, Now: time.Now(), RuntimeVersion: runtime.Version}, rrLegacyCompetition)
			if turn.Status != provider.StatusRunning || len(turn.WorkerItems) != 1 || turn.WorkerItems[0].Name != "checkpoint" {
				t.Fatalf("competition turn: %s %s work %+v (%s)", turn.Status, rrKinds(turn.NewEvents), turn.WorkerItems, turn.Failure.DisplayMessage())
			}
			ackOrch(t, r.P, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: turn.NewEvents,
				WorkerItems: turn.WorkerItems, OrchestratorItems: turn.OrchestratorItems, CancelledActivities: turn.CancelledActivities})

			r.startFast(newRegistry(t).act("checkpoint", echo).orch("LegacyCompetition", rrLegacyCompetition).Registry)
			st := rrWait(t, r, instance, "the competition must finish", nil)
			completed(t, st, "first")
			final := r.history(instance)
			rrSameHistory(t, "read after the runtime finished", final[:len(history)], history)
		})
	}
}
