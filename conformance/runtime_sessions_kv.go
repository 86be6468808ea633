package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// Sessions, activity tags, the instance KV store and ScheduleActivityWithRetry, end
// to end. Ports duroxide's tests/session_e2e_tests.rs, tests/tag_serde_tests.rs,
// tests/kv_store_tests.rs and tests/schedule_with_retry_tests.rs.
func init() {
	registerRuntimeGroup(runtimeGroup{name: "SessionsTagsKVRetry", cases: []runtimeCase{
		{"SessionAffinityAcrossTwoRuntimes", rtSKVSessionAffinityAcrossTwoRuntimes},
		{"SessionAffinitySurvivesContinueAsNew", rtSKVSessionAffinitySurvivesContinueAsNew},
		{"SessionCapOneServesSessionsInTurn", rtSKVSessionCapOneServesSessionsInTurn},
		{"SessionCapBlocksThenUnblocks", rtSKVSessionCapBlocksThenUnblocks},
		{"SameSessionSharesOneSlot", rtSKVSameSessionSharesOneSlot},
		{"TaggedActivityRunsOnMatchingWorker", rtSKVTaggedActivityRunsOnMatchingWorker},
		{"TaggedActivityStarvesWithoutMatchingWorker", rtSKVTaggedActivityStarvesWithoutMatchingWorker},
		{"TagNoneRunsOrchestrationsOnly", rtSKVTagNoneRunsOrchestrationsOnly},
		{"TagDefaultAndRunsUntaggedAndListed", rtSKVTagDefaultAndRunsUntaggedAndListed},
		{"TagLengthLimit", rtSKVTagLengthLimit},
		{"KVBasicsAndClientReads", rtSKVKVBasicsAndClientReads},
		{"KVReadModifyWriteAcrossContinueAsNew", rtSKVKVReadModifyWriteAcrossContinueAsNew},
		{"KVFromInstance", rtSKVKVFromInstance},
		{"KVPruneUpdatedBefore", rtSKVKVPruneUpdatedBefore},
		{"KVLimits", rtSKVKVLimits},
		{"RetrySucceedsAfterFailures", rtSKVRetrySucceedsAfterFailures},
		{"RetryExhaustionReturnsLastError", rtSKVRetryExhaustionReturnsLastError},
		{"RetryTimeoutIsNotRetried", rtSKVRetryTimeoutIsNotRetried},
		{"RetryOnSessionKeepsAttemptsOnOneWorker", rtSKVRetryOnSessionKeepsAttemptsOnOneWorker},
		{"RetryBackoffIsDurableAcrossRestart", rtSKVRetryBackoffIsDurableAcrossRestart},
	}})
}

// skvRun is what an activity saw of one run.
type skvRun struct {
	instance, name, input, session, tag, worker string
	execution, id                               uint64
	attempt                                     uint32
}

// skvLog records activity runs across goroutines and runtimes.
type skvLog struct {
	mu   sync.Mutex
	runs []skvRun
}

func (l *skvLog) add(a *runtime.ActivityContext, input string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, skvRun{instance: a.InstanceID(), name: a.Name(), input: input, session: a.SessionID(), tag: a.Tag(),
		worker: a.WorkerID(), execution: a.ExecutionID(), id: a.ActivityID(), attempt: a.Attempt()})
}

func (l *skvLog) all() []skvRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// skvWorkersBy groups the workers of the runs by key.
func skvWorkersBy(runs []skvRun, key func(skvRun) string) map[string][]string {
	out := map[string][]string{}
	for _, r := range runs {
		k := key(r)
		if !slices.Contains(out[k], r.worker) {
			out[k] = append(out[k], r.worker)
		}
	}
	return out
}

// node names the runtime's worker node.
func skvNode(id string) func(*runtime.Options) {
	return func(o *runtime.Options) { o.WorkerNodeID = id }
}

// tags sets the runtime's worker tag filter.
func skvTags(mode provider.TagMode, ts ...string) func(*runtime.Options) {
	return func(o *runtime.Options) { o.WorkerTags = provider.TagFilter{Mode: mode, Tags: ts} }
}

// skvShortSessions makes sessions lapse quickly: a session unused for 700 ms is idle,
// its lease is 700 ms, and the worker lock (1 s, renewed every 500 ms) stays below
// the idle timeout as Options requires.
func skvShortSessions(o *runtime.Options) {
	o.WorkerLockTimeout = time.Second
	o.SessionIdleTimeout = 700 * time.Millisecond
	o.SessionLockTimeout = 700 * time.Millisecond
	o.SessionCleanupInterval = 200 * time.Millisecond
}

// waitWithin waits for instance to end, at most d.
func skvWaitWithin(r *rig, instance string, d time.Duration) runtime.OrchestrationStatus {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := r.C.WaitForOrchestration(ctx, instance)
	if err != nil {
		r.t.Fatalf("%s did not end within %s: %v (last status %s)", instance, d, err, st.State)
	}
	return st
}

// skvJoin waits for every future and returns the results in order.
func skvJoin(ctx *runtime.Context, fs []*runtime.Future) ([]string, error) {
	out := make([]string, len(fs))
	for i, err := range ctx.Join(fs...) {
		if err != nil {
			return nil, err
		}
		out[i], _ = fs[i].Get()
	}
	return out, nil
}

// skvShape abbreviates the activity and timer events of a history, in order: S
// scheduled, F failed, C completed, T timer created, t timer fired.
func skvShape(evs []provider.Event) string {
	var parts []string
	for _, e := range evs {
		switch e.Kind {
		case provider.EventActivityScheduled:
			parts = append(parts, "S")
		case provider.EventActivityFailed:
			parts = append(parts, "F")
		case provider.EventActivityCompleted:
			parts = append(parts, "C")
		case provider.EventTimerCreated:
			parts = append(parts, "T")
		case provider.EventTimerFired:
			parts = append(parts, "t")
		}
	}
	return strings.Join(parts, "")
}

// --- sessions ---

// Ports test_session_worker_node_id_multiple_sessions_parallel,
// test_multi_worker_complex_orchestration, test_mixed_session_and_regular_activities
// and test_session_id_visible_in_activity_context: two runtimes with their own node
// ids share a provider; every activity of a session runs on the one worker that
// claimed it, across turns, while session-less activities go anywhere.
func rtSKVSessionAffinityAcrossTwoRuntimes(t *testing.T, e renv) {
	r := e.rig(t)
	var log skvLog
	const rounds, perSession, plain = 3, 4, 2
	reg := newRegistry(t).
		act("Where", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			time.Sleep(2 * time.Millisecond) // some work, so both nodes poll meanwhile
			return a.SessionID() + "@" + a.WorkerID(), nil
		}).
		orch("Affinity", func(ctx *runtime.Context, in string) (string, error) {
			for round := range rounds {
				var fs []*runtime.Future
				for i := range perSession {
					fs = append(fs, ctx.ScheduleActivity("Where", fmt.Sprintf("s1/%d/%d", round, i), runtime.OnSession("s1")),
						ctx.ScheduleActivity("Where", fmt.Sprintf("s2/%d/%d", round, i), runtime.OnSession("s2")))
				}
				for i := range plain {
					fs = append(fs, ctx.ScheduleActivity("Where", fmt.Sprintf("none/%d/%d", round, i)))
				}
				res, err := skvJoin(ctx, fs)
				if err != nil {
					return "", err
				}
				for i, v := range res {
					if want := []string{"s1@", "s2@"}; i < 2*perSession && !strings.HasPrefix(v, want[i%2]) {
						return "", fmt.Errorf("session activity %d returned %q", i, v)
					}
				}
			}
			return "ok", nil
		})
	r.startFast(reg.Registry, skvNode("node-a"))
	r.startFast(reg.Registry, skvNode("node-b"))
	completed(t, r.run("affinity", "Affinity", ""), "ok")

	runs := log.all()
	if want := rounds * (2*perSession + plain); len(runs) != want {
		t.Fatalf("%d activity runs, want %d", len(runs), want)
	}
	by := skvWorkersBy(runs, func(a skvRun) string { return a.session })
	for _, s := range []string{"s1", "s2"} {
		if len(by[s]) != 1 {
			t.Fatalf("session %s ran on workers %v, want exactly one", s, by[s])
		}
		if w := by[s][0]; w != "node-a" && w != "node-b" {
			t.Fatalf("session %s ran on %q, not a configured node id", s, w)
		}
	}
	for _, a := range runs {
		if want, _, _ := strings.Cut(a.input, "/"); a.session != strings.TrimPrefix(want, "none") {
			t.Fatalf("activity %q saw session %q", a.input, a.session)
		}
	}
	h := r.history("affinity")
	n := map[string]int{}
	for _, ev := range h {
		if ev.Kind == provider.EventActivityScheduled {
			n[ev.SessionID]++
		}
	}
	if n["s1"] != rounds*perSession || n["s2"] != rounds*perSession || n[""] != rounds*plain {
		t.Fatalf("ActivityScheduled by session %v", n)
	}
}

// Ports test_session_survives_continue_as_new (with two runtimes, as in
// test_multi_worker_complex_orchestration): a session stays on its worker across
// executions of the instance.
func rtSKVSessionAffinitySurvivesContinueAsNew(t *testing.T, e renv) {
	r := e.rig(t)
	var log skvLog
	reg := newRegistry(t).
		act("Track", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			time.Sleep(2 * time.Millisecond)
			return "tracked:" + in, nil
		}).
		orch("SessionCAN", func(ctx *runtime.Context, in string) (string, error) {
			n, _ := strconv.Atoi(in)
			var fs []*runtime.Future
			for i := range 3 {
				fs = append(fs, ctx.ScheduleActivity("Track", fmt.Sprintf("iter-%d-%d", n, i), runtime.OnSession("persistent-session")))
			}
			res, err := skvJoin(ctx, fs)
			if err != nil {
				return "", err
			}
			if n < 2 {
				return "", ctx.ContinueAsNew(strconv.Itoa(n + 1))
			}
			return res[0], nil
		})
	r.startFast(reg.Registry, skvNode("pod-a"))
	r.startFast(reg.Registry, skvNode("pod-b"))
	st := r.run("session-can", "SessionCAN", "0")
	completed(t, st, "tracked:iter-2-0")
	if st.ExecutionID != 3 {
		t.Fatalf("ended in execution %d, want 3", st.ExecutionID)
	}
	runs := log.all()
	if len(runs) != 9 {
		t.Fatalf("%d runs, want 9", len(runs))
	}
	execs := map[uint64]bool{}
	for _, a := range runs {
		execs[a.execution] = true
		if a.session != "persistent-session" {
			t.Fatalf("run %q saw session %q", a.input, a.session)
		}
	}
	if len(execs) != 3 {
		t.Fatalf("runs came from executions %v, want 1..3", execs)
	}
	if w := skvWorkersBy(runs, func(skvRun) string { return "" })[""]; len(w) != 1 {
		t.Fatalf("the session moved between workers across continue-as-new: %v", w)
	}
}

// The brief's cap scenario (after test_max_sessions_per_runtime_enforced): one
// runtime with MaxSessionsPerRuntime=1 and two sessions with several activities
// each still completes everything; the second session is served once the first
// goes idle (short idle timeout).
func rtSKVSessionCapOneServesSessionsInTurn(t *testing.T, e renv) {
	r := e.rig(t)
	var log skvLog
	reg := newRegistry(t).
		act("Step", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			return a.SessionID() + ":" + in, nil
		}).
		orch("TwoSessions", func(ctx *runtime.Context, in string) (string, error) {
			var fs []*runtime.Future
			for i := range 3 {
				fs = append(fs, ctx.ScheduleActivity("Step", strconv.Itoa(i), runtime.OnSession("session-A")),
					ctx.ScheduleActivity("Step", strconv.Itoa(i), runtime.OnSession("session-B")))
			}
			res, err := skvJoin(ctx, fs)
			return strings.Join(res, ","), err
		})
	r.startFast(reg.Registry, skvNode("capped"), skvShortSessions, func(o *runtime.Options) { o.MaxSessionsPerRuntime = 1 })
	r.startOrch("cap-one", "TwoSessions", "")
	completed(t, skvWaitWithin(r, "cap-one", 45*time.Second),
		"session-A:0,session-B:0,session-A:1,session-B:1,session-A:2,session-B:2")
	runs := log.all()
	if len(runs) != 6 {
		t.Fatalf("%d runs, want 6", len(runs))
	}
	for _, a := range runs {
		if a.worker != "capped" || (a.session != "session-A" && a.session != "session-B") {
			t.Fatalf("run %+v", a)
		}
	}
}

// Ports test_session_cap_blocks_then_unblocks (and test_max_sessions_per_runtime_enforced):
// with MaxSessionsPerRuntime=1 and two worker slots, an activity of a second
// session does not start while the first session's activity holds the cap; it
// starts after the first is released.
func rtSKVSessionCapBlocksThenUnblocks(t *testing.T, e renv) {
	r := e.rig(t)
	var mu sync.Mutex
	var events []string
	logEvent := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	seen := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(events, s)
	}
	release := map[string]chan struct{}{"A": make(chan struct{}), "B": make(chan struct{})}
	reg := newRegistry(t).
		act("Tracked", func(a *runtime.ActivityContext, in string) (string, error) {
			logEvent(in + "-started")
			select {
			case <-release[in]:
			case <-a.Done():
				return "", a.Err()
			}
			logEvent(in + "-finished")
			return "result-" + in, nil
		}).
		orch("BlockUnblock", func(ctx *runtime.Context, in string) (string, error) {
			res, err := skvJoin(ctx, []*runtime.Future{
				ctx.ScheduleActivity("Tracked", "A", runtime.OnSession("session-A")),
				ctx.ScheduleActivity("Tracked", "B", runtime.OnSession("session-B")),
			})
			return strings.Join(res, "|"), err
		})
	r.startFast(reg.Registry, skvNode("cap-node"), skvShortSessions, func(o *runtime.Options) {
		o.MaxSessionsPerRuntime = 1
		o.WorkerConcurrency = 2
	})
	r.startOrch("block-unblock", "BlockUnblock", "")
	first := ""
	eventually(t, "either activity to start", func() bool {
		switch {
		case seen("A-started"):
			first = "A"
		case seen("B-started"):
			first = "B"
		}
		return first != ""
	})
	second := map[string]string{"A": "B", "B": "A"}[first]
	// Absence can only be observed over a window: the second session must not
	// start while the first holds the only session slot.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if seen(second + "-started") {
			close(release[first])
			close(release[second])
			t.Fatalf("%s (session-%s) started while %s held the only session slot (MaxSessionsPerRuntime=1)", second, second, first)
		}
	}
	close(release[first])
	eventually(t, second+" to start after "+first+" finished", func() bool { return seen(second + "-started") })
	close(release[second])
	completed(t, r.wait("block-unblock"), "result-A|result-B")
	mu.Lock()
	defer mu.Unlock()
	if f, s := slices.Index(events, first+"-finished"), slices.Index(events, second+"-started"); f < 0 || f > s {
		t.Fatalf("%s started before %s finished: %v", second, first, events)
	}
}

// Ports test_same_session_shares_one_slot: with MaxSessionsPerRuntime=1 the runtime
// keeps serving the session it already holds (one session is one slot, however many
// activities it has), so a session-only orchestration is not throttled by the idle
// timeout — here long (30 s), so a stall shows as a timeout.
func rtSKVSameSessionSharesOneSlot(t *testing.T, e renv) {
	r := e.rig(t)
	var log skvLog
	reg := newRegistry(t).
		act("SlowSame", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			return "ok" + in, nil
		}).
		orch("SameSession", func(ctx *runtime.Context, in string) (string, error) {
			var out []string
			for i := range 4 {
				v, err := ctx.ScheduleActivity("SlowSame", strconv.Itoa(i), runtime.OnSession("shared-session")).Get()
				if err != nil {
					return "", err
				}
				out = append(out, v)
			}
			res, err := skvJoin(ctx, []*runtime.Future{
				ctx.ScheduleActivity("SlowSame", "a", runtime.OnSession("shared-session")),
				ctx.ScheduleActivity("SlowSame", "b", runtime.OnSession("shared-session")),
			})
			return strings.Join(append(out, res...), "|"), err
		})
	r.startFast(reg.Registry, skvNode("one-slot"), func(o *runtime.Options) {
		o.MaxSessionsPerRuntime = 1
		o.WorkerConcurrency = 2
		o.SessionIdleTimeout = 30 * time.Second
	})
	r.startOrch("same-session", "SameSession", "")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	st, err := r.C.WaitForOrchestration(ctx, "same-session")
	if err != nil {
		t.Fatalf("a runtime at MaxSessionsPerRuntime=1 stalled on the session it holds: %d of 6 activities ran in 15s (%v)",
			len(log.all()), err)
	}
	completed(t, st, "ok0|ok1|ok2|ok3|oka|okb")
}

// --- tags ---

// Ports e2e_tagged_activity_runs_on_matching_worker, e2e_with_tag_persists_tag_in_event_history,
// e2e_activity_context_tag_visible_in_handler, e2e_activity_context_tag_none_for_untagged
// and e2e_tag_routing_survives_continue_as_new: a "gpu" activity runs only on the
// runtime whose filter is TagOnly(gpu), untagged ones only on the DefaultOnly runtime.
func rtSKVTaggedActivityRunsOnMatchingWorker(t *testing.T, e renv) {
	r := e.rig(t)
	var log skvLog
	reg := newRegistry(t).
		act("Render", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			return a.Tag() + "@" + a.WorkerID(), nil
		}).
		orch("Pipeline", func(ctx *runtime.Context, in string) (string, error) {
			var fs []*runtime.Future
			for i := range 3 {
				fs = append(fs, ctx.ScheduleActivity("Render", "gpu-"+in+strconv.Itoa(i), runtime.WithTag("gpu")),
					ctx.ScheduleActivity("Render", "cpu-"+in+strconv.Itoa(i)))
			}
			res, err := skvJoin(ctx, fs)
			if err != nil {
				return "", err
			}
			if in == "0" {
				return "", ctx.ContinueAsNew("1")
			}
			return res[0] + "," + res[1], nil
		})
	r.startFast(reg.Registry, skvNode("cpu-node"))
	r.startFast(reg.Registry, skvNode("gpu-node"), skvTags(provider.TagOnly, "gpu"))
	completed(t, r.run("tagged", "Pipeline", "0"), "gpu@gpu-node,@cpu-node")
	runs := log.all()
	if len(runs) != 12 {
		t.Fatalf("%d runs, want 12", len(runs))
	}
	for _, a := range runs {
		gpu := strings.HasPrefix(a.input, "gpu-")
		if gpu && (a.tag != "gpu" || a.worker != "gpu-node") || !gpu && (a.tag != "" || a.worker != "cpu-node") {
			t.Fatalf("activity %q ran on %s with tag %q", a.input, a.worker, a.tag)
		}
	}
	tagged := 0
	for _, ev := range r.history("tagged") {
		if ev.Kind == provider.EventActivityScheduled && ev.Tag == "gpu" {
			tagged++
		}
	}
	if tagged != 3 {
		t.Fatalf("history of the second execution has %d gpu-tagged ActivityScheduled events, want 3", tagged)
	}
}

// Ports e2e_tagged_activity_starvation_times_out and e2e_dropped_tagged_future_triggers_cancellation:
// with no worker accepting the tag the activity never runs; a timer wins the select
// and the abandoned activity is cancelled (removed from the worker queue).
func rtSKVTaggedActivityStarvesWithoutMatchingWorker(t *testing.T, e renv) {
	r := e.rig(t)
	var runs atomic.Int32
	reg := newRegistry(t).
		act("Train", func(_ *runtime.ActivityContext, in string) (string, error) { runs.Add(1); return in, nil }).
		orch("Starve", func(ctx *runtime.Context, in string) (string, error) {
			act := ctx.ScheduleActivity("Train", in, runtime.WithTag("gpu"))
			if ctx.Select(act, ctx.CreateTimer(300*time.Millisecond)) == 1 {
				return "starved", nil
			}
			return act.Get()
		})
	r.startFast(reg.Registry) // DefaultOnly
	completed(t, r.run("starve", "Starve", "x"), "starved")
	if runs.Load() != 0 {
		t.Fatalf("the gpu activity ran %d times on a DefaultOnly runtime", runs.Load())
	}
	if n := countKind(r.history("starve"), provider.EventActivityCancelRequested); n != 1 {
		t.Fatalf("%d ActivityCancelRequested events, want 1", n)
	}
	if admin, err := r.C.Admin(); err == nil {
		eventually(t, "the cancelled tagged activity to leave the worker queue", func() bool {
			d, err := admin.GetQueueDepths(context.Background())
			return err == nil && d.WorkerQueue == 0
		})
	}
}

// A runtime with TagNone is orchestrator-only: it runs turns but no activity; a
// worker runtime started later runs the activity.
func rtSKVTagNoneRunsOrchestrationsOnly(t *testing.T, e renv) {
	r := e.rig(t)
	var log skvLog
	reg := newRegistry(t).
		act("Work", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			return "worked:" + in, nil
		}).
		orch("Delegate", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Work", in).Get()
		})
	r.startFast(reg.Registry, skvNode("orchestrator-only"), skvTags(provider.TagNone))
	r.startOrch("delegate", "Delegate", "job")
	eventually(t, "the orchestrator-only runtime to run the first turn", func() bool {
		return countKind(r.history("delegate"), provider.EventActivityScheduled) == 1
	})
	// Absence needs a window: the activity stays queued while only TagNone runs.
	time.Sleep(300 * time.Millisecond)
	if n := len(log.all()); n != 0 {
		t.Fatalf("a TagNone runtime ran %d activities", n)
	}
	if st, err := r.C.Status(context.Background(), "delegate"); err != nil || st.State != runtime.StateRunning {
		t.Fatalf("status %+v, %v; want Running", st, err)
	}
	r.startFast(reg.Registry, skvNode("worker"))
	completed(t, r.wait("delegate"), "worked:job")
	if runs := log.all(); len(runs) != 1 || runs[0].worker != "worker" {
		t.Fatalf("runs %+v, want one on the worker runtime", runs)
	}
}

// TagDefaultAnd(gpu) runs untagged and gpu activities but not tpu ones, which a
// TagOnly(tpu) runtime takes.
func rtSKVTagDefaultAndRunsUntaggedAndListed(t *testing.T, e renv) {
	r := e.rig(t)
	var log skvLog
	reg := newRegistry(t).
		act("Op", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			return in, nil
		}).
		orch("Mixed", func(ctx *runtime.Context, in string) (string, error) {
			var fs []*runtime.Future
			for i := range 3 {
				n := strconv.Itoa(i)
				fs = append(fs, ctx.ScheduleActivity("Op", "plain-"+n), ctx.ScheduleActivity("Op", "gpu-"+n, runtime.WithTag("gpu")),
					ctx.ScheduleActivity("Op", "tpu-"+n, runtime.WithTag("tpu")))
			}
			res, err := skvJoin(ctx, fs)
			return strconv.Itoa(len(res)), err
		})
	r.startFast(reg.Registry, skvNode("mixed-node"), skvTags(provider.TagDefaultAnd, "gpu"))
	r.startFast(reg.Registry, skvNode("tpu-node"), skvTags(provider.TagOnly, "tpu"))
	completed(t, r.run("mixed", "Mixed", ""), "9")
	for _, a := range log.all() {
		want := "mixed-node"
		if strings.HasPrefix(a.input, "tpu-") {
			want = "tpu-node"
		}
		if a.worker != want {
			t.Fatalf("activity %q (tag %q) ran on %s, want %s", a.input, a.tag, a.worker, want)
		}
	}
	if n := len(log.all()); n != 9 {
		t.Fatalf("%d runs, want 9", n)
	}
}

// Ports e2e_oversized_tag_fails_orchestration and e2e_tag_at_boundary_succeeds: a tag
// of MaxTagBytes routes normally; one byte more fails the orchestration with a
// Configuration LimitExceeded error.
func rtSKVTagLengthLimit(t *testing.T, e renv) {
	r := e.rig(t)
	boundary := strings.Repeat("t", runtime.MaxTagBytes)
	var log skvLog
	reg := newRegistry(t).
		act("Op", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			return "ran", nil
		}).
		orch("Tagged", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Op", in, runtime.WithTag(in)).Get()
		})
	r.startFast(reg.Registry, skvTags(provider.TagOnly, boundary))
	completed(t, r.run("tag-boundary", "Tagged", boundary), "ran")
	d := failed(t, r.run("tag-oversized", "Tagged", boundary+"x"))
	if d.Kind != provider.ErrorConfiguration || d.ConfigKind != provider.ConfigLimitExceeded {
		t.Fatalf("oversized tag failure %+v, want Configuration/LimitExceeded", d)
	}
	if n := countKind(r.history("tag-oversized"), provider.EventActivityScheduled); n != 0 {
		t.Fatalf("the oversized tag was scheduled %d times", n)
	}
	if runs := log.all(); len(runs) != 1 || runs[0].tag != boundary {
		t.Fatalf("runs %d (want 1, with the boundary tag)", len(runs))
	}
}

// --- KV ---

// Ports kv_set_value_visible_via_client, kv_overwrite_same_key, kv_clear_single_value,
// kv_clear_all_values, kv_get_missing_key_returns_none, client_get_value_running,
// kv_client_get_all_values and kv_accessible_after_completion: the KV API inside the
// orchestration, and client reads while it runs and after it ended.
func rtSKVKVBasicsAndClientReads(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("KVBasics", func(ctx *runtime.Context, in string) (string, error) {
			ctx.SetKV("a", "1")
			ctx.SetKV("b", "2")
			ctx.SetKV("c", "3")
			ctx.SetKV("a", "1b")
			if k := ctx.KVKeys(); !slices.Equal(k, []string{"a", "b", "c"}) {
				return "", fmt.Errorf("keys %v", k)
			}
			ctx.ClearKV("b")
			if _, ok := ctx.KV("b"); ok {
				return "", errors.New("b still set after ClearKV")
			}
			if v, ok := ctx.KV("a"); !ok || v != "1b" {
				return "", fmt.Errorf("a = %q, %v", v, ok)
			}
			ctx.SetKV("phase", "ready")
			if _, err := ctx.WaitForEvent("go").Get(); err != nil {
				return "", err
			}
			// A later turn: the state is rebuilt by replay.
			if all := ctx.KVAll(); !maps.Equal(all, map[string]string{"a": "1b", "c": "3", "phase": "ready"}) {
				return "", fmt.Errorf("KVAll after replay %v", all)
			}
			ctx.ClearAllKV()
			if n := len(ctx.KVKeys()); n != 0 {
				return "", fmt.Errorf("%d keys after ClearAllKV", n)
			}
			ctx.SetKV("final", "yes")
			return strings.Join(ctx.KVKeys(), ","), nil
		})
	r.startFast(reg.Registry)
	r.startOrch("kv-basics", "KVBasics", "")
	bg := context.Background()
	wctx, cancel := context.WithTimeout(bg, waitTimeout)
	defer cancel()
	if v, err := r.C.WaitForKV(wctx, "kv-basics", "phase"); err != nil || v != "ready" {
		t.Fatalf("WaitForKV(phase) = %q, %v", v, err)
	}
	if v, ok, err := r.C.KV(bg, "kv-basics", "a"); err != nil || !ok || v != "1b" {
		t.Fatalf("client KV(a) while running = %q, %v, %v; want 1b", v, ok, err)
	}
	if _, ok, err := r.C.KV(bg, "kv-basics", "b"); err != nil || ok {
		t.Fatalf("client KV(b) after ClearKV: ok %v err %v", ok, err)
	}
	if _, ok, err := r.C.KV(bg, "kv-basics", "missing"); err != nil || ok {
		t.Fatalf("client KV(missing): ok %v err %v", ok, err)
	}
	if all, err := r.C.KVAll(bg, "kv-basics"); err != nil || !maps.Equal(all, map[string]string{"a": "1b", "c": "3", "phase": "ready"}) {
		t.Fatalf("client KVAll while running = %v, %v", all, err)
	}
	if err := r.C.RaiseEvent(bg, "kv-basics", "go", ""); err != nil {
		t.Fatal(err)
	}
	completed(t, r.wait("kv-basics"), "final")
	if all, err := r.C.KVAll(bg, "kv-basics"); err != nil || !maps.Equal(all, map[string]string{"final": "yes"}) {
		t.Fatalf("client KVAll after completion = %v, %v; want only final", all, err)
	}
	if all, err := r.C.KVAll(bg, "nobody"); err != nil || len(all) != 0 {
		t.Fatalf("client KVAll of an unknown instance = %v, %v", all, err)
	}
}

// Ports kv_rmw_across_can_boundary, kv_read_modify_write_across_turns,
// kv_survives_continue_as_new, kv_can_chain_accumulation and
// kv_client_get_all_values_across_can: a counter read-modify-written on every turn of
// every execution. Replaying a later turn must see the value as of the start of the
// execution (the snapshot), then this execution's writes — duroxide 0.1.26 fixed a
// bug where the snapshot already held the current execution's writes and replay
// diverged.
func rtSKVKVReadModifyWriteAcrossContinueAsNew(t *testing.T, e renv) {
	r := e.rig(t)
	const executions, turns = 4, 3
	reg := newRegistry(t).
		act("Noop", echo).
		orch("Counter", func(ctx *runtime.Context, in string) (string, error) {
			n, _ := strconv.Atoi(in)
			for i := range turns {
				v, _ := ctx.KV("counter")
				c, _ := strconv.Atoi(v)
				if want := n*turns + i; c != want {
					return "", fmt.Errorf("execution %d turn %d read counter %d, want %d", n, i, c, want)
				}
				ctx.SetKV("counter", strconv.Itoa(c+1))
				if _, err := ctx.ScheduleActivity("Noop", "").Get(); err != nil {
					return "", err
				}
			}
			ctx.SetKV(fmt.Sprintf("exec-%d", n), strconv.FormatUint(ctx.ExecutionID(), 10))
			if n+1 < executions {
				return "", ctx.ContinueAsNew(strconv.Itoa(n + 1))
			}
			v, _ := ctx.KV("counter")
			return v + ":" + strings.Join(ctx.KVKeys(), ","), nil
		})
	r.startFast(reg.Registry)
	st := r.run("kv-rmw", "Counter", "0")
	completed(t, st, "12:counter,exec-0,exec-1,exec-2,exec-3")
	if st.ExecutionID != executions {
		t.Fatalf("ended in execution %d, want %d", st.ExecutionID, executions)
	}
	all, err := r.C.KVAll(context.Background(), "kv-rmw")
	want := map[string]string{"counter": "12", "exec-0": "1", "exec-1": "2", "exec-2": "3", "exec-3": "4"}
	if err != nil || !maps.Equal(all, want) {
		t.Fatalf("client KVAll = %v, %v; want %v", all, err, want)
	}
}

// Ports kv_get_value_from_instance, kv_get_value_from_instance_key_missing,
// kv_get_value_from_instance_unknown_instance, kv_get_value_from_instance_replay_safe
// and kv_get_value_from_instance_after_source_update: KVFromInstance reads another
// instance's value; a missing key (or instance) fails with ErrKVNotFound; a recorded
// read replays with its recorded value after the source changed.
func rtSKVKVFromInstance(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("Source", func(ctx *runtime.Context, in string) (string, error) {
			ctx.SetKV("config", "blue")
			if _, err := ctx.WaitForEvent("change").Get(); err != nil {
				return "", err
			}
			ctx.SetKV("config", "green")
			_, err := ctx.WaitForEvent("stop").Get()
			return "source done", err
		}).
		orch("Reader", func(ctx *runtime.Context, in string) (string, error) {
			first, err := ctx.KVFromInstance("kv-src", "config").Get()
			if err != nil {
				return "", err
			}
			_, errMissing := ctx.KVFromInstance("kv-src", "missing").Get()
			_, errUnknown := ctx.KVFromInstance("kv-nobody", "config").Get()
			for _, err := range []error{errMissing, errUnknown} {
				if !errors.Is(err, runtime.ErrKVNotFound) {
					return "", fmt.Errorf("read of a missing key: %v, want ErrKVNotFound", err)
				}
			}
			ctx.SetKV("stage", "read1")
			if _, err := ctx.WaitForEvent("next").Get(); err != nil {
				return "", err
			}
			second, err := ctx.KVFromInstance("kv-src", "config").Get()
			return first + "|" + second, err
		})
	r.startFast(reg.Registry)
	bg := context.Background()
	wctx, cancel := context.WithTimeout(bg, waitTimeout)
	defer cancel()
	r.startOrch("kv-src", "Source", "")
	if v, err := r.C.WaitForKV(wctx, "kv-src", "config"); err != nil || v != "blue" {
		t.Fatalf("source config = %q, %v", v, err)
	}
	r.startOrch("kv-reader", "Reader", "")
	if _, err := r.C.WaitForKV(wctx, "kv-reader", "stage"); err != nil {
		t.Fatal(err)
	}
	if err := r.C.RaiseEvent(bg, "kv-src", "change", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the source to publish green", func() bool {
		v, _, _ := r.C.KV(bg, "kv-src", "config")
		return v == "green"
	})
	if err := r.C.RaiseEvent(bg, "kv-reader", "next", ""); err != nil {
		t.Fatal(err)
	}
	completed(t, r.wait("kv-reader"), "blue|green")
	if err := r.C.RaiseEvent(bg, "kv-src", "stop", ""); err != nil {
		t.Fatal(err)
	}
	completed(t, r.wait("kv-src"), "source done")
}

// Ports kv_prune_old_values_by_timestamp and kv_prune_selective_by_age, plus the
// documented rule that keys written in the current turn are never pruned: keys from
// the previous execution (50 ms older at least) are pruned at a cutoff of Now; a key
// written this turn survives even a cutoff an hour ahead. Instance "prune-replayed"
// runs one more turn afterwards, which replays the pruning turn: it must decide the
// same clears.
func rtSKVKVPruneUpdatedBefore(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Noop", echo).
		orch("Prune", func(ctx *runtime.Context, in string) (string, error) {
			exec, mode, _ := strings.Cut(in, ":")
			if exec == "1" {
				ctx.SetKV("old1", "v1")
				ctx.SetKV("old2", "v2")
				return "", ctx.ContinueAsNew("2:" + mode)
			}
			if _, err := ctx.CreateTimer(50 * time.Millisecond).Get(); err != nil {
				return "", err
			}
			if n := ctx.PruneKVUpdatedBefore(time.UnixMilli(0)); n != 0 {
				return "", fmt.Errorf("a cutoff at the epoch pruned %d keys", n)
			}
			ctx.SetKV("fresh", "v3")
			removed := ctx.PruneKVUpdatedBefore(ctx.Now())
			again := ctx.PruneKVUpdatedBefore(ctx.Now().Add(time.Hour))
			out := fmt.Sprintf("removed:%d,again:%d,keys:%s", removed, again, strings.Join(ctx.KVKeys(), ","))
			if mode == "replayed" {
				if _, err := ctx.ScheduleActivity("Noop", "").Get(); err != nil {
					return "", err
				}
			}
			return out, nil
		})
	r.startFast(reg.Registry)
	for _, id := range []string{"prune-last", "prune-replayed"} {
		r.startOrch(id, "Prune", "1:"+strings.TrimPrefix(id, "prune-"))
	}
	for _, id := range []string{"prune-last", "prune-replayed"} {
		st := r.wait(id)
		if st.State == runtime.StateFailed {
			t.Errorf("%s failed: %s", id, st.Failure.DisplayMessage())
			continue
		}
		completed(t, st, "removed:2,again:0,keys:fresh")
		if all, err := r.C.KVAll(context.Background(), id); err != nil || !maps.Equal(all, map[string]string{"fresh": "v3"}) {
			t.Errorf("%s: client KVAll = %v, %v; want only fresh", id, all, err)
		}
	}
}

// Ports kv_exceeding_key_limit_fails_orchestration, kv_exceeding_value_size_limit_fails_orchestration,
// kv_at_key_limit_succeeds and kv_clear_all_resets_key_count.
func rtSKVKVLimits(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("KVLimit", func(ctx *runtime.Context, in string) (string, error) {
			switch in {
			case "keys-at-limit", "keys-over", "clear-all-resets":
				n := runtime.MaxKVKeys
				if in == "keys-over" {
					n++
				}
				for i := range n {
					ctx.SetKV("k"+strconv.Itoa(i), "v")
				}
				ctx.SetKV("k0", "overwrite is not a new key")
				if in == "clear-all-resets" {
					ctx.ClearAllKV()
					for i := range runtime.MaxKVKeys {
						ctx.SetKV("again"+strconv.Itoa(i), "v")
					}
				}
			case "value-at-limit":
				ctx.SetKV("big", strings.Repeat("v", runtime.MaxKVValueBytes))
			case "value-over":
				ctx.SetKV("big", strings.Repeat("v", runtime.MaxKVValueBytes+1))
			}
			return strconv.Itoa(len(ctx.KVKeys())), nil
		})
	r.startFast(reg.Registry)
	cases := []struct {
		id, want string // want "" = fails with LimitExceeded
	}{{"keys-at-limit", strconv.Itoa(runtime.MaxKVKeys)}, {"keys-over", ""}, {"clear-all-resets", strconv.Itoa(runtime.MaxKVKeys)},
		{"value-at-limit", "1"}, {"value-over", ""}}
	for _, c := range cases {
		r.startOrch("kv-"+c.id, "KVLimit", c.id)
	}
	for _, c := range cases {
		st := r.wait("kv-" + c.id)
		if c.want != "" {
			completed(t, st, c.want)
			continue
		}
		if d := failed(t, st); d.Kind != provider.ErrorConfiguration || d.ConfigKind != provider.ConfigLimitExceeded {
			t.Fatalf("%s failed with %+v, want Configuration/LimitExceeded", c.id, d)
		}
	}
	bg := context.Background()
	if all, err := r.C.KVAll(bg, "kv-keys-at-limit"); err != nil || len(all) != runtime.MaxKVKeys || all["k0"] != "overwrite is not a new key" {
		t.Fatalf("client sees %d keys (k0=%q), %v; want %d", len(all), all["k0"], err, runtime.MaxKVKeys)
	}
	if v, ok, err := r.C.KV(bg, "kv-value-at-limit", "big"); err != nil || !ok || len(v) != runtime.MaxKVValueBytes {
		t.Fatalf("client read of a %d-byte value: %d bytes, %v, %v", runtime.MaxKVValueBytes, len(v), ok, err)
	}
}

// --- retry ---

// skvCounter counts calls per instance.
type skvCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *skvCounter) next(instance string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[instance]++
	return c.n[instance]
}

func (c *skvCounter) get(instance string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[instance]
}

// Ports test_activity_fails_then_succeeds, test_history_contains_all_activity_scheduled_events
// and test_retry_with_fixed_backoff: the activity fails twice, succeeds on the third
// attempt; history has one ActivityScheduled per attempt and a backoff timer
// (TimerCreated, TimerFired) between attempts, fired after the policy's delay.
func rtSKVRetrySucceedsAfterFailures(t *testing.T, e renv) {
	r := e.rig(t)
	var calls skvCounter
	var log skvLog
	reg := newRegistry(t).
		act("Flaky", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			if n := calls.next(a.InstanceID()); n <= 2 {
				return "", fmt.Errorf("attempt %d failed", n)
			}
			return "ok after " + strconv.Itoa(calls.get(a.InstanceID())), nil
		}).
		orch("Retry", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivityWithRetry("Flaky", in, runtime.RetryPolicy{MaxAttempts: 5,
				Backoff: runtime.LinearBackoff{Base: 20 * time.Millisecond}}).Get()
		})
	r.startFast(reg.Registry)
	completed(t, r.run("retry-ok", "Retry", "x"), "ok after 3")
	if n := calls.get("retry-ok"); n != 3 {
		t.Fatalf("activity ran %d times, want 3", n)
	}
	h := r.history("retry-ok")
	if got := skvShape(h); got != "SFTtSFTtSC" {
		t.Fatalf("history shape %s, want SFTtSFTtSC (S scheduled, F failed, T timer created, t fired, C completed)", got)
	}
	delays := []time.Duration{}
	for _, ev := range h {
		if ev.Kind == provider.EventTimerCreated {
			delays = append(delays, time.Duration(ev.FireAtMs-ev.TimestampMs)*time.Millisecond)
		}
	}
	if !slices.Equal(delays, []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}) {
		t.Fatalf("backoff timers %v, want [20ms 40ms] (linear)", delays)
	}
	ids := map[uint64]bool{}
	for _, a := range log.all() {
		if a.input != "x" || a.attempt != 1 {
			t.Fatalf("attempt %+v: want input x, first delivery of its own schedule", a)
		}
		ids[a.id] = true
	}
	if len(ids) != 3 {
		t.Fatalf("attempts used %d activity ids, want 3 distinct schedules", len(ids))
	}
}

// Ports test_activity_exhausts_all_attempts and test_single_attempt_fails: after
// MaxAttempts failures the future returns the last error.
func rtSKVRetryExhaustionReturnsLastError(t *testing.T, e renv) {
	r := e.rig(t)
	var calls skvCounter
	reg := newRegistry(t).
		act("Broken", func(a *runtime.ActivityContext, in string) (string, error) {
			return "", fmt.Errorf("failure %d", calls.next(a.InstanceID()))
		}).
		orch("Exhaust", func(ctx *runtime.Context, in string) (string, error) {
			attempts, _ := strconv.Atoi(in)
			_, err := ctx.ScheduleActivityWithRetry("Broken", "", runtime.RetryPolicy{MaxAttempts: attempts,
				Backoff: runtime.FixedBackoff{Interval: 10 * time.Millisecond}}).Get()
			var ae *runtime.ActivityError
			if !errors.As(err, &ae) || ae.Name != "Broken" || ae.Details == nil || ae.Details.AppKind != provider.AppActivityFailed {
				return "", fmt.Errorf("error %v is not the activity's failure", err)
			}
			return "last: " + ae.Details.Message, nil
		}).
		orch("Unhandled", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivityWithRetry("Broken", "", runtime.RetryPolicy{MaxAttempts: 2, Backoff: runtime.NoBackoff{}}).Get()
		})
	r.startFast(reg.Registry)
	r.startOrch("exhaust-3", "Exhaust", "3")
	r.startOrch("exhaust-1", "Exhaust", "1")
	r.startOrch("unhandled", "Unhandled", "")
	completed(t, r.wait("exhaust-3"), "last: failure 3")
	completed(t, r.wait("exhaust-1"), "last: failure 1")
	d := failed(t, r.wait("unhandled"))
	if !strings.Contains(d.Message, "failure 2") {
		t.Fatalf("unhandled exhaustion failed with %q, want the second failure", d.Message)
	}
	for id, want := range map[string]string{"exhaust-3": "SFTtSFTtSF", "exhaust-1": "SF", "unhandled": "SFSF"} {
		if got := skvShape(r.history(id)); got != want {
			t.Fatalf("%s history shape %s, want %s", id, got, want)
		}
		if n := calls.get(id); n != strings.Count(want, "S") {
			t.Fatalf("%s: activity ran %d times", id, n)
		}
	}
}

// Ports test_timeout_exits_immediately_without_retry and test_error_retries_but_timeout_exits:
// a failed attempt is retried, but an attempt that outlives the policy's timeout
// ends the call with ErrActivityTimeout, with no further attempt; the hung
// activity is cancelled.
func rtSKVRetryTimeoutIsNotRetried(t *testing.T, e renv) {
	r := e.rig(t)
	var calls skvCounter
	var cancelled atomic.Bool
	reg := newRegistry(t).
		act("Slowpoke", func(a *runtime.ActivityContext, in string) (string, error) {
			if calls.next(a.InstanceID()) == 1 {
				return "", errors.New("fast failure")
			}
			select {
			case <-a.Done():
				cancelled.Store(true)
				return "", a.Err()
			case <-time.After(waitTimeout):
				return "too late", nil
			}
		}).
		orch("Timeout", func(ctx *runtime.Context, in string) (string, error) {
			_, err := ctx.ScheduleActivityWithRetry("Slowpoke", "", runtime.RetryPolicy{MaxAttempts: 4, Timeout: 2 * time.Second,
				Backoff: runtime.NoBackoff{}}).Get()
			if !errors.Is(err, runtime.ErrActivityTimeout) {
				return "", fmt.Errorf("error %v, want ErrActivityTimeout", err)
			}
			return "timed out", nil
		})
	r.startFast(reg.Registry, func(o *runtime.Options) { o.WorkerLockTimeout = time.Second })
	completed(t, r.run("retry-timeout", "Timeout", ""), "timed out")
	if n := calls.get("retry-timeout"); n != 2 {
		t.Fatalf("activity ran %d times, want 2 (a failure, then a timeout that is not retried)", n)
	}
	h := r.history("retry-timeout")
	if n := countKind(h, provider.EventActivityScheduled); n != 2 {
		t.Fatalf("%d ActivityScheduled events, want 2", n)
	}
	if n := countKind(h, provider.EventActivityCancelRequested); n != 1 {
		t.Fatalf("%d ActivityCancelRequested events, want 1 (the timed-out attempt)", n)
	}
	eventually(t, "the timed-out attempt to be cancelled", cancelled.Load)
}

// Ports retry_on_session_basic_success: with two runtimes, every attempt of a retry on
// a session runs on the session's worker.
func rtSKVRetryOnSessionKeepsAttemptsOnOneWorker(t *testing.T, e renv) {
	r := e.rig(t)
	var calls skvCounter
	var log skvLog
	reg := newRegistry(t).
		act("SessionFlaky", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			if n := calls.next(a.InstanceID()); n <= 2 {
				return "", fmt.Errorf("attempt %d failed", n)
			}
			return "ok on " + a.SessionID(), nil
		}).
		orch("SessionRetry", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivityWithRetry("SessionFlaky", in, runtime.RetryPolicy{MaxAttempts: 4,
				Backoff: runtime.FixedBackoff{Interval: 20 * time.Millisecond}}, runtime.OnSession("retry-session")).Get()
		})
	r.startFast(reg.Registry, skvNode("node-a"))
	r.startFast(reg.Registry, skvNode("node-b"))
	completed(t, r.run("session-retry", "SessionRetry", "in"), "ok on retry-session")
	runs := log.all()
	if len(runs) != 3 {
		t.Fatalf("%d attempts, want 3", len(runs))
	}
	for _, a := range runs {
		if a.session != "retry-session" || a.worker != runs[0].worker {
			t.Fatalf("attempts %+v: want all on retry-session and one worker", runs)
		}
	}
	for _, ev := range r.history("session-retry") {
		if ev.Kind == provider.EventActivityScheduled && ev.SessionID != "retry-session" {
			t.Fatalf("attempt scheduled without the session: %+v", ev)
		}
	}
}

// The backoff between attempts is a durable timer: a runtime stopped during the
// backoff leaves it in the store, and another runtime fires it and runs the next
// attempt (duroxide: "durable timers, so restarts keep the schedule").
func rtSKVRetryBackoffIsDurableAcrossRestart(t *testing.T, e renv) {
	r := e.rig(t)
	var calls skvCounter
	var log skvLog
	reg := newRegistry(t).
		act("FailOnce", func(a *runtime.ActivityContext, in string) (string, error) {
			log.add(a, in)
			if calls.next(a.InstanceID()) == 1 {
				return "", errors.New("first attempt fails")
			}
			return "second attempt on " + a.WorkerID(), nil
		}).
		orch("DurableBackoff", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivityWithRetry("FailOnce", "", runtime.RetryPolicy{MaxAttempts: 2,
				Backoff: runtime.FixedBackoff{Interval: 500 * time.Millisecond}}).Get()
		})
	first := r.startFast(reg.Registry, skvNode("first"))
	r.startOrch("durable-backoff", "DurableBackoff", "")
	eventually(t, "the backoff timer to be recorded", func() bool {
		return countKind(r.history("durable-backoff"), provider.EventTimerCreated) == 1
	})
	first.stop()
	if first.err != nil {
		t.Fatalf("first runtime: %v", first.err)
	}
	if n := calls.get("durable-backoff"); n != 1 {
		t.Fatalf("%d attempts before the restart, want 1", n)
	}
	r.startFast(reg.Registry, skvNode("second"))
	completed(t, r.wait("durable-backoff"), "second attempt on second")
	if got := skvShape(r.history("durable-backoff")); got != "SFTtSC" {
		t.Fatalf("history shape %s, want SFTtSC", got)
	}
}
