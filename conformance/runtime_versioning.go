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

func init() {
	registerRuntimeGroup(runtimeGroup{name: "ContinueAsNewVersioning", cases: []runtimeCase{
		{"ContinueAsNewCounter", cnvCounter},
		{"ContinueAsNewEventRoutesToLatest", cnvEventRoutesToLatest},
		{"ContinueAsNewCarriesStatusKVAndQueue", cnvCarriesState},
		{"StaleExecutionCompletionsIgnored", cnvStaleCompletions},
		{"StartUsesLatestOrExplicitVersion", cnvStartVersions},
		{"PolicyExactPinsStart", cnvPolicyExactPinsStart},
		{"ContinueAsNewUpgradesToLatest", cnvCANUpgradesToLatest},
		{"ContinueAsNewVersionedPicksExactVersion", cnvCANVersioned},
		{"SubOrchestrationAndDetachedVersions", cnvSubOrchVersions},
		{"CompletionOnlyReplayUsesHistoryVersion", cnvReplayPinnedVersion},
		{"CompletionOnlyReplayAfterCANUsesHistoryVersion", cnvReplayPinnedVersionAfterCAN},
		{"CapabilityFilterSkipsNewerPins", cnvCapabilitySkipsNewerPins},
		{"CapabilityRangesRouteRuntimes", cnvCapabilityRangesRoute},
		{"RollingDeploymentUnregisteredOrchestration", cnvRollingOrchestration},
		{"RollingDeploymentUnregisteredActivity", cnvRollingActivity},
		{"UnknownOrchestrationFailsWithPoison", cnvUnknownOrchestrationPoison},
		{"ContinueAsNewToMissingVersionFailsWithPoison", cnvCANMissingVersionPoison},
		{"UnknownActivityFailsWithPoison", cnvUnknownActivityPoison},
	}})
}

// ---- helpers of this file ----

// cnvProbe wraps a provider to observe what a runtime does with it: fetches,
// abandons, and the commits of watched orchestrator messages.
type cnvProbe struct {
	provider.Provider
	watch func(provider.WorkItem) bool // nil: none

	fetches      atomic.Int64 // completed FetchOrchestrationItem calls
	orchAbandons atomic.Int64 // AbandonOrchestrationItem calls that kept the attempt
	workAbandons atomic.Int64 // AbandonWorkItem calls that kept the attempt
	watchedAcked atomic.Int64 // watched messages committed by an ack

	mu      sync.Mutex
	pending map[string]int64 // lock token → watched messages of the item
}

func newCNVProbe(p provider.Provider, watch func(provider.WorkItem) bool) *cnvProbe {
	return &cnvProbe{Provider: p, watch: watch, pending: map[string]int64{}}
}

func (p *cnvProbe) FetchOrchestrationItem(ctx context.Context, opts provider.FetchOptions) (*provider.OrchestrationItem, error) {
	item, err := p.Provider.FetchOrchestrationItem(ctx, opts)
	p.fetches.Add(1)
	if item != nil && p.watch != nil {
		var n int64
		for _, m := range item.Messages {
			if p.watch(m) {
				n++
			}
		}
		if n > 0 {
			p.mu.Lock()
			p.pending[item.LockToken] = n
			p.mu.Unlock()
		}
	}
	return item, err
}

func (p *cnvProbe) AckOrchestrationItem(ctx context.Context, token string, ack provider.OrchestrationAck) error {
	err := p.Provider.AckOrchestrationItem(ctx, token, ack)
	p.mu.Lock()
	n := p.pending[token]
	if err == nil {
		delete(p.pending, token)
	}
	p.mu.Unlock()
	if err == nil {
		p.watchedAcked.Add(n)
	}
	return err
}

func (p *cnvProbe) AbandonOrchestrationItem(ctx context.Context, token string, delay provider.Duration, ignoreAttempt bool) error {
	p.mu.Lock()
	delete(p.pending, token)
	p.mu.Unlock()
	if !ignoreAttempt {
		p.orchAbandons.Add(1)
	}
	return p.Provider.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
}

func (p *cnvProbe) AbandonWorkItem(ctx context.Context, token string, delay provider.Duration, ignoreAttempt bool) error {
	if !ignoreAttempt {
		p.workAbandons.Add(1)
	}
	return p.Provider.AbandonWorkItem(ctx, token, delay, ignoreAttempt)
}

// startOn runs reg on a runtime over p (a probe wrapping the rig's provider) instead
// of the rig's provider, with fastOptions adjusted by tune.
func (r *rig) startOn(p provider.Provider, reg *runtime.Registry, tune ...func(*runtime.Options)) *running {
	r.t.Helper()
	o := fastOptions()
	for _, f := range tune {
		f(&o)
	}
	pr := &rig{t: r.t, P: p, C: r.C, cache: r.cache}
	return pr.start(reg, o)
}

// cnvPollsPass waits until the runtimes over probe have completed several more
// orchestration fetches: at least one fetch that began after this call has
// returned, so whatever was visible to them then has been offered.
func cnvPollsPass(t *testing.T, probe *cnvProbe) {
	t.Helper()
	mark := probe.fetches.Load()
	eventually(t, "more orchestration fetches", func() bool { return probe.fetches.Load() >= mark+8 })
}

// cnvWaitHistory waits until the latest execution's history satisfies cond and
// returns it.
func cnvWaitHistory(t *testing.T, r *rig, instance, what string, cond func([]provider.Event) bool) []provider.Event {
	t.Helper()
	var h []provider.Event
	eventually(t, what, func() bool {
		evs, err := r.P.Read(context.Background(), instance)
		if err != nil {
			t.Fatalf("read %s: %v", instance, err)
		}
		h = evs
		return cond(evs)
	})
	return h
}

// cnvSubscribed reports whether the history subscribed to external event name.
func cnvSubscribed(name string) func([]provider.Event) bool {
	return func(h []provider.Event) bool {
		return slices.ContainsFunc(h, func(e provider.Event) bool {
			return e.Kind == provider.EventExternalSubscribed && e.Name == name
		})
	}
}

// cnvRaise raises an event and fails the test on error.
func cnvRaise(t *testing.T, r *rig, instance, name, data string) {
	t.Helper()
	if err := r.C.RaiseEvent(context.Background(), instance, name, data); err != nil {
		t.Fatalf("raise %s on %s: %v", name, instance, err)
	}
}

// cnvStatus reads the instance's status and fails the test on error.
func cnvStatus(t *testing.T, r *rig, instance string) runtime.OrchestrationStatus {
	t.Helper()
	st, err := r.C.Status(context.Background(), instance)
	if err != nil {
		t.Fatalf("status %s: %v", instance, err)
	}
	return st
}

// cnvExecutions reads executions 1..n of instance and checks that exactly those
// exist: the latest is n (Status, Read), each history starts with
// OrchestrationStarted and numbers its events from 1, and — when the provider has
// the management API — ListExecutions and LatestExecutionID agree.
func cnvExecutions(t *testing.T, r *rig, instance string, n int) [][]provider.Event {
	t.Helper()
	ctx := context.Background()
	out := make([][]provider.Event, n)
	for x := 1; x <= n; x++ {
		h, err := r.P.ReadWithExecution(ctx, instance, uint64(x))
		if err != nil {
			t.Fatalf("read %s execution %d: %v", instance, x, err)
		}
		if len(h) == 0 || h[0].Kind != provider.EventOrchestrationStarted {
			t.Fatalf("execution %d of %s does not start with OrchestrationStarted: %+v", x, instance, h)
		}
		for i, e := range h {
			if e.EventID != uint64(i+1) || e.ExecutionID != uint64(x) {
				t.Fatalf("execution %d event %d is #%d of execution %d", x, i, e.EventID, e.ExecutionID)
			}
		}
		out[x-1] = h
	}
	if st := cnvStatus(t, r, instance); st.ExecutionID != uint64(n) {
		t.Fatalf("status execution id %d, want %d", st.ExecutionID, n)
	}
	if latest := r.history(instance); !slices.EqualFunc(latest, out[n-1], func(a, b provider.Event) bool {
		return a.Kind == b.Kind && a.EventID == b.EventID && a.ExecutionID == b.ExecutionID
	}) {
		t.Fatalf("Read does not return the latest execution's history")
	}
	admin, err := r.C.Admin()
	if errors.Is(err, runtime.ErrManagementUnavailable) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	xs, err := admin.ListExecutions(ctx, instance)
	if err != nil {
		t.Fatalf("list executions of %s: %v", instance, err)
	}
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if !slices.Equal(xs, want) {
		t.Fatalf("executions of %s: %v, want %v", instance, xs, want)
	}
	if latest, err := admin.LatestExecutionID(ctx, instance); err != nil || latest != uint64(n) {
		t.Fatalf("latest execution of %s: %d, %v; want %d", instance, latest, err, n)
	}
	return out
}

// cnvLast returns the last event of h.
func cnvLast(h []provider.Event) provider.Event { return h[len(h)-1] }

// ---- continue-as-new ----

// cnvCounter ports continue_as_new_multiexec and continue_as_new_without_await
// (continue_as_new_tests.rs): a counter continues as new until N, one execution per
// step, each with its own history.
func cnvCounter(t *testing.T, e renv) {
	const n = 5
	r := e.rig(t)
	reg := newRegistry(t).
		orch("Counter", func(ctx *runtime.Context, in string) (string, error) {
			k, err := strconv.Atoi(in)
			if err != nil {
				return "", err
			}
			if uint64(k+1) != ctx.ExecutionID() {
				return "", fmt.Errorf("input %d in execution %d", k, ctx.ExecutionID())
			}
			if k < n {
				return "", ctx.ContinueAsNew(strconv.Itoa(k + 1))
			}
			return "done:" + in, nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("can-counter", "Counter", "0"), "done:5")
	execs := cnvExecutions(t, r, "can-counter", n+1)
	for i, h := range execs {
		if h[0].Input != strconv.Itoa(i) || h[0].Name != "Counter" || h[0].Version != runtime.DefaultVersion {
			t.Fatalf("execution %d started with %s %s input %q", i+1, h[0].Name, h[0].Version, h[0].Input)
		}
		end := cnvLast(h)
		if i < n {
			if end.Kind != provider.EventOrchestrationContinuedAsNew || end.Input != strconv.Itoa(i+1) {
				t.Fatalf("execution %d ends with %s input %q, want ContinuedAsNew with %d", i+1, end.Kind, end.Input, i+1)
			}
			if countKind(h, provider.EventOrchestrationCompleted) != 0 {
				t.Fatalf("execution %d has a completion", i+1)
			}
		} else if end.Kind != provider.EventOrchestrationCompleted || end.Output != "done:5" {
			t.Fatalf("last execution ends with %s %q", end.Kind, end.Output)
		}
	}
}

// cnvEventRoutesToLatest ports continue_as_new_event_routes_to_latest
// (continue_as_new_tests.rs): an event raised after continue-as-new reaches the new
// execution, not the ended one.
func cnvEventRoutesToLatest(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("EvtCAN", func(ctx *runtime.Context, in string) (string, error) {
			switch in {
			case "start":
				return "", ctx.ContinueAsNew("wait")
			case "wait":
				v, err := ctx.WaitForEvent("Go").Get()
				return fmt.Sprintf("%s@%d", v, ctx.ExecutionID()), err
			}
			return in, nil
		})
	r.startFast(reg.Registry)
	r.startOrch("can-evt", "EvtCAN", "start")
	h := cnvWaitHistory(t, r, "can-evt", "the second execution to subscribe", cnvSubscribed("Go"))
	if h[0].ExecutionID != 2 {
		t.Fatalf("subscription in execution %d", h[0].ExecutionID)
	}
	cnvRaise(t, r, "can-evt", "Go", "ok")
	completed(t, r.wait("can-evt"), "ok@2")
	execs := cnvExecutions(t, r, "can-evt", 2)
	if countKind(execs[0], provider.EventExternalEvent) != 0 || countKind(execs[1], provider.EventExternalEvent) != 1 {
		t.Fatalf("external events: %d in execution 1, %d in execution 2; want 0 and 1",
			countKind(execs[0], provider.EventExternalEvent), countKind(execs[1], provider.EventExternalEvent))
	}
	if end := cnvLast(execs[0]); end.Kind != provider.EventOrchestrationContinuedAsNew || end.Input != "wait" {
		t.Fatalf("execution 1 ends with %s %q", end.Kind, end.Input)
	}
}

// cnvCarriesState ports the carry-forward behaviour of continue-as-new (duroxide
// execution.rs collect_unmatched_queue_messages; copilot_chat and toygres scenarios):
// the custom status, the KV state and the queue messages the ended execution never
// dequeued pass to the next execution.
func cnvCarriesState(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("Carrier", func(ctx *runtime.Context, in string) (string, error) {
			if in == "first" {
				ctx.SetCustomStatus("gen-1")
				ctx.SetKV("first", "a")
				ctx.SetKV("count", "1")
				if _, err := ctx.WaitForEvent("go").Get(); err != nil {
					return "", err
				}
				m, err := ctx.DequeueEvent("inbox").Get()
				if err != nil {
					return "", err
				}
				ctx.SetKV("took", m)
				return "", ctx.ContinueAsNew("second")
			}
			status, ok := ctx.CustomStatus()
			if !ok {
				status = "<none>"
			}
			first, _ := ctx.KV("first")
			count, _ := ctx.KV("count")
			took, _ := ctx.KV("took")
			ctx.SetKV("count", "2")
			m2, err := ctx.DequeueEvent("inbox").Get()
			if err != nil {
				return "", err
			}
			m3, err := ctx.DequeueEvent("inbox").Get()
			if err != nil {
				return "", err
			}
			return strings.Join([]string{status, first, count, took, m2, m3}, "|"), nil
		})
	r.startFast(reg.Registry)
	r.startOrch("can-carry", "Carrier", "first")
	cnvWaitHistory(t, r, "can-carry", "the first execution to subscribe", cnvSubscribed("go"))
	for _, m := range []string{"m1", "m2", "m3"} {
		if err := r.C.EnqueueEvent(context.Background(), "can-carry", "inbox", m); err != nil {
			t.Fatal(err)
		}
	}
	cnvRaise(t, r, "can-carry", "go", "")
	st := r.wait("can-carry")
	completed(t, st, "gen-1|a|1|m1|m2|m3")
	if st.CustomStatus == nil || *st.CustomStatus != "gen-1" {
		t.Fatalf("final custom status %v, want gen-1 (carried, never reset)", st.CustomStatus)
	}
	execs := cnvExecutions(t, r, "can-carry", 2)
	if got := countKind(execs[0], provider.EventQueueEventDelivered); got != 3 {
		t.Fatalf("execution 1 received %d queue messages, want 3", got)
	}
	s2 := execs[1][0]
	want := []provider.NameData{{Name: "inbox", Data: "m2"}, {Name: "inbox", Data: "m3"}}
	if !slices.Equal(s2.CarryForward, want) {
		t.Fatalf("execution 2 carried %+v, want %+v", s2.CarryForward, want)
	}
	if s2.InitialCustomStatus == nil || *s2.InitialCustomStatus != "gen-1" {
		t.Fatalf("execution 2 starts with custom status %v, want gen-1", s2.InitialCustomStatus)
	}
	if countKind(execs[1], provider.EventQueueEventDelivered) != 0 {
		t.Fatalf("execution 2 received queue messages itself; they should come from the carry-forward")
	}
	kv, err := r.C.KVAll(context.Background(), "can-carry")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"first": "a", "count": "2", "took": "m1"}; !maps.Equal(kv, want) {
		t.Fatalf("KV after the second execution %v, want %v", kv, want)
	}
}

// cnvStaleCompletions ports old_execution_completions_are_ignored and
// future_execution_completions_are_ignored (continue_as_new_tests.rs): completions
// addressed to another execution never resolve the current one's activity, even
// when the activity ids collide (ids restart in every execution).
func cnvStaleCompletions(t *testing.T, e renv) {
	r := e.rig(t)
	release := make(chan struct{})
	var once sync.Once
	reg := newRegistry(t).
		act("Work", func(a *runtime.ActivityContext, in string) (string, error) {
			if in == "b" {
				select {
				case <-release:
				case <-a.Done():
					return "", a.Err()
				}
			}
			return "fresh-" + in, nil
		}).
		orch("Gen", func(ctx *runtime.Context, in string) (string, error) {
			if in == "1" {
				if _, err := ctx.ScheduleActivity("Work", "a").Get(); err != nil {
					return "", err
				}
				return "", ctx.ContinueAsNew("2")
			}
			return ctx.ScheduleActivity("Work", "b").Get()
		})
	stale := func(m provider.WorkItem) bool {
		return m.Kind == provider.WorkActivityCompleted && strings.HasPrefix(m.Result, "stale")
	}
	probe := newCNVProbe(r.P, stale)
	r.startOn(probe, reg.Registry)
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	r.startOrch("can-stale", "Gen", "1")
	h := cnvWaitHistory(t, r, "can-stale", "the second execution's activity", func(h []provider.Event) bool {
		return len(h) > 0 && h[0].ExecutionID == 2 && countKind(h, provider.EventActivityScheduled) == 1
	})
	id := h[1].EventID
	if h[1].Kind != provider.EventActivityScheduled || id != 2 {
		t.Fatalf("execution 2 event 2 is %s #%d", h[1].Kind, id)
	}
	ctx := context.Background()
	for _, x := range []uint64{1, 99} {
		item := provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: "can-stale", ExecutionID: x, ID: id,
			Result: fmt.Sprintf("stale-x%d", x)}
		if err := r.P.EnqueueForOrchestrator(ctx, item, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the stale completions to be processed", func() bool { return probe.watchedAcked.Load() == 2 })
	h = r.history("can-stale")
	if last := cnvLast(h); countKind(h, provider.EventActivityCompleted) != 0 || last.IsTerminal() {
		t.Fatalf("a completion of another execution reached execution 2: history %+v", h)
	}
	once.Do(func() { close(release) })
	completed(t, r.wait("can-stale"), "fresh-b")
	if n := countKind(r.history("can-stale"), provider.EventActivityCompleted); n != 1 {
		t.Fatalf("%d activity completions in execution 2, want 1", n)
	}
}

// ---- versioning ----

// cnvVersioned registers versions of name whose code returns "<tag>:<input>".
func cnvVersioned(reg registry, name string, versions ...string) registry {
	for _, v := range versions {
		tag := "v" + strings.TrimSuffix(strings.TrimSuffix(v, ".0"), ".0")
		reg = reg.orchV(name, v, func(ctx *runtime.Context, in string) (string, error) {
			return tag + ":" + in, nil
		})
	}
	return reg
}

func cnvStartVersioned(t *testing.T, r *rig, instance, name, version, input string) {
	t.Helper()
	if err := r.C.StartOrchestrationVersioned(context.Background(), instance, name, version, input); err != nil {
		t.Fatalf("start %s at %s: %v", instance, version, err)
	}
}

// cnvVersion asserts the instance's recorded version.
func cnvVersion(t *testing.T, st runtime.OrchestrationStatus, want string) {
	t.Helper()
	if st.Version != want {
		t.Fatalf("instance runs version %q, want %q", st.Version, want)
	}
}

// cnvStartVersions ports start_uses_latest_version and
// runtime_start_versioned_string_uses_explicit_version (versioning_tests.rs).
func cnvStartVersions(t *testing.T, e renv) {
	r := e.rig(t)
	reg := cnvVersioned(newRegistry(t), "OrderFlow", "1.0.0", "1.1.0", "2.0.0")
	r.startFast(reg.Registry)
	st := r.run("ver-latest", "OrderFlow", "X")
	completed(t, st, "v2:X")
	cnvVersion(t, st, "2.0.0")
	for _, c := range []struct{ version, want string }{{"1.0.0", "v1:Y"}, {"1.1.0", "v1.1:Y"}, {"2.0.0", "v2:Y"}} {
		id := "ver-explicit-" + c.version
		cnvStartVersioned(t, r, id, "OrderFlow", c.version, "Y")
		st := r.wait(id)
		completed(t, st, c.want)
		cnvVersion(t, st, c.version)
		if h := r.history(id); h[0].Version != c.version {
			t.Fatalf("%s: OrchestrationStarted records version %q", id, h[0].Version)
		}
	}
}

// cnvPolicyExactPinsStart ports policy_exact_pins_start (versioning_tests.rs): an
// Exact policy picks the version of starts without one; an explicit version still
// wins.
func cnvPolicyExactPinsStart(t *testing.T, e renv) {
	r := e.rig(t)
	reg := cnvVersioned(newRegistry(t), "OrderFlow", "1.0.0", "1.1.0")
	if err := reg.SetVersionPolicy("OrderFlow", runtime.VersionPolicy{Exact: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	r.startFast(reg.Registry)
	st := r.run("ver-pin", "OrderFlow", "Y")
	completed(t, st, "v1:Y")
	cnvVersion(t, st, "1.0.0")
	cnvStartVersioned(t, r, "ver-pin-explicit", "OrderFlow", "1.1.0", "Z")
	st = r.wait("ver-pin-explicit")
	completed(t, st, "v1.1:Z")
	cnvVersion(t, st, "1.1.0")
}

// cnvCANUpgradesToLatest ports the upgrade path of e2e_rolling_deployment_version_upgrade
// (scenarios/rolling_deployment.rs): an instance pinned to v1 continues as new
// without naming a version and the next execution runs the latest version.
func cnvCANUpgradesToLatest(t *testing.T, e renv) {
	r := e.rig(t)
	var v1Runs atomic.Int32
	reg := newRegistry(t).
		orchV("Upgrader", "1.0.0", func(ctx *runtime.Context, in string) (string, error) {
			v1Runs.Add(1)
			return "", ctx.ContinueAsNew("from-" + ctx.Version() + ":" + in)
		}).
		orchV("Upgrader", "2.0.0", func(ctx *runtime.Context, in string) (string, error) {
			return "v2 " + ctx.Version() + " got " + in, nil
		})
	r.startFast(reg.Registry)
	cnvStartVersioned(t, r, "ver-upgrade", "Upgrader", "1.0.0", "seed")
	st := r.wait("ver-upgrade")
	completed(t, st, "v2 2.0.0 got from-1.0.0:seed")
	cnvVersion(t, st, "2.0.0")
	execs := cnvExecutions(t, r, "ver-upgrade", 2)
	if execs[0][0].Version != "1.0.0" || execs[1][0].Version != "2.0.0" {
		t.Fatalf("executions ran %s then %s, want 1.0.0 then 2.0.0", execs[0][0].Version, execs[1][0].Version)
	}
	if v1Runs.Load() == 0 {
		t.Fatal("v1 never ran")
	}
}

// cnvCANVersioned ports continue_as_new_upgrades_version_deterministically and
// continue_as_new_versioned_typed_explicit (versioning_tests.rs): with an Exact
// policy a plain continue-as-new stays on the policy's version, and
// ContinueAsNewVersioned moves to exactly the version it names (not the latest).
func cnvCANVersioned(t *testing.T, e renv) {
	r := e.rig(t)
	v1 := func(ctx *runtime.Context, in string) (string, error) {
		switch in {
		case "0":
			return "", ctx.ContinueAsNew("1")
		case "1":
			return "", ctx.ContinueAsNewVersioned("2.0.0", "2")
		}
		return "", fmt.Errorf("v1 got %q", in)
	}
	reg := newRegistry(t).
		orchV("Stepper", "1.0.0", v1).
		orchV("Stepper", "2.0.0", func(ctx *runtime.Context, in string) (string, error) { return "v2:" + in, nil }).
		orchV("Stepper", "3.0.0", func(ctx *runtime.Context, in string) (string, error) { return "v3:" + in, nil })
	if err := reg.SetVersionPolicy("Stepper", runtime.VersionPolicy{Exact: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	r.startFast(reg.Registry)
	st := r.run("ver-can", "Stepper", "0")
	completed(t, st, "v2:2")
	cnvVersion(t, st, "2.0.0")
	execs := cnvExecutions(t, r, "ver-can", 3)
	var got []string
	for _, h := range execs {
		got = append(got, h[0].Version)
	}
	if want := []string{"1.0.0", "1.0.0", "2.0.0"}; !slices.Equal(got, want) {
		t.Fatalf("execution versions %v, want %v", got, want)
	}
}

// cnvSubOrchVersions ports sub_orchestration_versioned_explicit_and_policy and
// detached_versioned_uses_policy_latest (versioning_tests.rs).
func cnvSubOrchVersions(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("Parent", func(ctx *runtime.Context, in string) (string, error) {
			a, err := ctx.ScheduleSubOrchestration("Child", "A", runtime.WithInstanceID("vsub-a"), runtime.WithVersion("1.0.0")).Get()
			if err != nil {
				return "", err
			}
			b, err := ctx.ScheduleSubOrchestration("Child", "B", runtime.WithInstanceID("vsub-b")).Get()
			if err != nil {
				return "", err
			}
			ctx.StartOrchestration("Leaf", "vleaf", "L")
			return a + "," + b, nil
		})
	reg = cnvVersioned(reg, "Child", "1.0.0", "2.0.0")
	reg = cnvVersioned(reg, "Leaf", "1.0.0", "2.0.0")
	r.startFast(reg.Registry)
	completed(t, r.run("vparent", "Parent", ""), "v1:A,v2:B")
	for id, want := range map[string]string{"vsub-a": "1.0.0", "vsub-b": "2.0.0"} {
		cnvVersion(t, cnvStatus(t, r, id), want)
	}
	st := r.wait("vleaf")
	completed(t, st, "v2:L")
	cnvVersion(t, st, "2.0.0")
}

// cnvPinnedRegistries returns registries with two incompatible versions of
// SystemPruner: v1 waits for "go" then runs activity Prune (after an explicit
// continue-as-new when its input says so); v2 first runs Prune2, so replaying v1's
// history with v2 would be nondeterministic. v1Only has just v1, both has v1 and v2.
func cnvPinnedRegistries(t *testing.T, v2Runs *sync.Map) (v1Only, both registry) {
	prune := func(_ *runtime.ActivityContext, in string) (string, error) { return "pruned:" + in, nil }
	prune2 := func(_ *runtime.ActivityContext, in string) (string, error) { return "pruned2:" + in, nil }
	v1 := func(ctx *runtime.Context, in string) (string, error) {
		if in == "first-execution" {
			return "", ctx.ContinueAsNewVersioned("1.0.0", "second-execution")
		}
		ev, err := ctx.WaitForEvent("go").Get()
		if err != nil {
			return "", err
		}
		res, err := ctx.ScheduleActivity("Prune", ev).Get()
		return fmt.Sprintf("v1(%s,%s,x%d):%s", ctx.Version(), in, ctx.ExecutionID(), res), err
	}
	v2 := func(ctx *runtime.Context, in string) (string, error) {
		v2Runs.Store(ctx.InstanceID(), true)
		res, err := ctx.ScheduleActivity("Prune2", in).Get()
		return "v2:" + res, err
	}
	v1Only = newRegistry(t).act("Prune", prune).act("Prune2", prune2).orchV("SystemPruner", "1.0.0", v1)
	both = newRegistry(t).act("Prune", prune).act("Prune2", prune2).orchV("SystemPruner", "1.0.0", v1).orchV("SystemPruner", "2.0.0", v2)
	return v1Only, both
}

// cnvReplayPinnedVersion ports e2e_replay_completion_only_must_use_version_from_history
// (scenarios/version_replay_bug.rs, issue #49): after a restart onto a runtime that
// also has v2 (the latest), turns without a start message still run the version
// recorded in history.
func cnvReplayPinnedVersion(t *testing.T, e renv) {
	r := e.rig(t)
	var v2Runs sync.Map
	v1Only, both := cnvPinnedRegistries(t, &v2Runs)
	old := r.startFast(v1Only.Registry)
	r.startOrch("pin-49", "SystemPruner", "orig-input") // latest here is v1
	cnvWaitHistory(t, r, "pin-49", "the v1 execution to subscribe", cnvSubscribed("go"))
	old.stop()

	r.startFast(both.Registry)
	cnvRaise(t, r, "pin-49", "go", "evt")
	st := r.wait("pin-49")
	completed(t, st, "v1(1.0.0,orig-input,x1):pruned:evt")
	cnvVersion(t, st, "1.0.0")
	if _, ran := v2Runs.Load("pin-49"); ran {
		t.Fatal("v2 ran for an instance pinned to v1")
	}
	// The restarted runtime's latest is v2: a new start gets it.
	completed(t, r.run("pin-49-new", "SystemPruner", "n"), "v2:pruned2:n")
}

// cnvReplayPinnedVersionAfterCAN ports
// e2e_replay_completion_only_after_can_must_use_version_from_history and
// e2e_can_input_preserved_during_completion_only_replay (scenarios/version_replay_bug.rs):
// the version and input of the current execution come from its own
// OrchestrationStarted.
func cnvReplayPinnedVersionAfterCAN(t *testing.T, e renv) {
	r := e.rig(t)
	var v2Runs sync.Map
	v1Only, both := cnvPinnedRegistries(t, &v2Runs)
	old := r.startFast(v1Only.Registry)
	r.startOrch("pin-49-can", "SystemPruner", "first-execution")
	h := cnvWaitHistory(t, r, "pin-49-can", "execution 2 to subscribe", cnvSubscribed("go"))
	if h[0].ExecutionID != 2 || h[0].Version != "1.0.0" {
		t.Fatalf("subscribed in execution %d version %s", h[0].ExecutionID, h[0].Version)
	}
	old.stop()

	r.startFast(both.Registry)
	cnvRaise(t, r, "pin-49-can", "go", "evt")
	completed(t, r.wait("pin-49-can"), "v1(1.0.0,second-execution,x2):pruned:evt")
	if _, ran := v2Runs.Load("pin-49-can"); ran {
		t.Fatal("v2 ran for an execution pinned to v1")
	}
	cnvExecutions(t, r, "pin-49-can", 2)
}

// ---- capability filtering ----

// cnvGate waits for "go" and returns what it got.
func cnvGate(ctx *runtime.Context, in string) (string, error) {
	v, err := ctx.WaitForEvent("go").Get()
	return "done:" + v, err
}

// cnvCapabilitySkipsNewerPins ports runtime_abandons_incompatible_execution,
// default_supported_range_excludes_future_versions and
// mixed_cluster_compatible_and_incompatible_items (capability_filtering_tests.rs):
// an execution pinned by a 0.9.0 runtime is never run by a 0.5.0 runtime (it stays
// Running while that runtime serves other work), and a compatible runtime finishes it.
func cnvCapabilitySkipsNewerPins(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("Gate", cnvGate)
	newer := r.startFast(reg.Registry, func(o *runtime.Options) { o.RuntimeVersion = "0.9.0" })
	r.startOrch("cap-new", "Gate", "")
	h := cnvWaitHistory(t, r, "cap-new", "the 0.9.0 execution to subscribe", cnvSubscribed("go"))
	for _, ev := range h {
		if ev.RuntimeVersion != "0.9.0" {
			t.Fatalf("event %s written by runtime %q, want 0.9.0", ev.Kind, ev.RuntimeVersion)
		}
	}
	newer.stop()

	probe := newCNVProbe(r.P, nil)
	r.startOn(probe, reg.Registry, func(o *runtime.Options) { o.RuntimeVersion = "0.5.0" })
	cnvRaise(t, r, "cap-new", "go", "late")
	// The older runtime serves work it can run…
	r.startOrch("cap-old", "Gate", "")
	h = cnvWaitHistory(t, r, "cap-old", "the 0.5.0 runtime to start cap-old", cnvSubscribed("go"))
	if h[0].RuntimeVersion != "0.5.0" {
		t.Fatalf("cap-old pinned by runtime %q, want 0.5.0", h[0].RuntimeVersion)
	}
	cnvRaise(t, r, "cap-old", "go", "old")
	completed(t, r.wait("cap-old"), "done:old")
	// …but never the execution pinned to 0.9.0.
	cnvPollsPass(t, probe)
	st := cnvStatus(t, r, "cap-new")
	if st.State != runtime.StateRunning || countKind(r.history("cap-new"), provider.EventExternalEvent) != 0 {
		t.Fatalf("the 0.5.0 runtime ran an execution pinned to 0.9.0: %s, history %+v", st.State, r.history("cap-new"))
	}

	r.startFast(reg.Registry, func(o *runtime.Options) { o.RuntimeVersion = "1.0.0" })
	completed(t, r.wait("cap-new"), "done:late")
	h = r.history("cap-new")
	if h[0].RuntimeVersion != "0.9.0" || cnvLast(h).RuntimeVersion != "1.0.0" {
		t.Fatalf("pin %q, completion written by %q; want 0.9.0 and 1.0.0", h[0].RuntimeVersion, cnvLast(h).RuntimeVersion)
	}
}

// cnvCapabilityRangesRoute ports two_runtimes_different_version_ranges_route_correctly
// (capability_filtering_tests.rs): runtimes with disjoint SupportedVersions each run
// only the executions pinned inside their range.
func cnvCapabilityRangesRoute(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("Gate", cnvGate)
	for _, c := range []struct{ id, version string }{{"route-1", "1.0.0"}, {"route-2", "2.0.0"}} {
		h := r.startFast(reg.Registry, func(o *runtime.Options) { o.RuntimeVersion = c.version })
		r.startOrch(c.id, "Gate", "")
		cnvWaitHistory(t, r, c.id, c.id+" to subscribe", cnvSubscribed("go"))
		h.stop()
	}
	rangeOf := func(lo, hi string) *provider.CapabilityFilter {
		return &provider.CapabilityFilter{SupportedVersions: []provider.SemVerRange{{Min: provider.MustSemVer(lo), Max: provider.MustSemVer(hi)}}}
	}
	r.startFast(reg.Registry, func(o *runtime.Options) {
		o.RuntimeVersion, o.SupportedVersions = "1.5.0", rangeOf("1.0.0", "1.99.99")
	})
	r.startFast(reg.Registry, func(o *runtime.Options) {
		o.RuntimeVersion, o.SupportedVersions = "2.5.0", rangeOf("2.0.0", "2.99.99")
	})
	cnvRaise(t, r, "route-1", "go", "a")
	cnvRaise(t, r, "route-2", "go", "b")
	for _, c := range []struct{ id, want, by string }{{"route-1", "done:a", "1.5.0"}, {"route-2", "done:b", "2.5.0"}} {
		completed(t, r.wait(c.id), c.want)
		h := r.history(c.id)
		for _, ev := range h[2:] { // the turn after the raise
			if ev.RuntimeVersion != c.by {
				t.Fatalf("%s: %s written by runtime %q, want %s", c.id, ev.Kind, ev.RuntimeVersion, c.by)
			}
		}
	}
}

// ---- unregistered code ----

// cnvRolling are the options of a rolling deployment: fast backoff, and enough
// attempts that the old nodes' bounces never poison the work.
func cnvRolling(o *runtime.Options) {
	o.MaxAttempts = 50
	o.UnregisteredBackoff = 10 * time.Millisecond
}

// cnvRollingOrchestration ports the orchestration half of the rolling-deployment
// scenarios (unregistered_backoff_tests.rs, scenarios/rolling_deployment.rs): a node
// without the orchestration keeps offering it back, and a node with it runs it.
func cnvRollingOrchestration(t *testing.T, e renv) {
	r := e.rig(t)
	oldReg := newRegistry(t).orch("Other", func(*runtime.Context, string) (string, error) { return "other", nil })
	probe := newCNVProbe(r.P, nil)
	r.startOn(probe, oldReg.Registry, cnvRolling)
	r.startOrch("roll-orch", "NewOrch", "in")
	eventually(t, "the old node to bounce NewOrch three times", func() bool { return probe.orchAbandons.Load() >= 3 })
	if st := cnvStatus(t, r, "roll-orch"); st.State != runtime.StatePending && st.State != runtime.StateNotFound {
		t.Fatalf("a node without NewOrch started it: %+v", st)
	}
	newReg := newRegistry(t).
		orch("Other", func(*runtime.Context, string) (string, error) { return "other", nil }).
		orch("NewOrch", func(ctx *runtime.Context, in string) (string, error) { return "new:" + in, nil })
	r.startFast(newReg.Registry, cnvRolling) // the old node keeps running
	st := r.wait("roll-orch")
	completed(t, st, "new:in")
	cnvVersion(t, st, runtime.DefaultVersion)
}

// cnvRollingActivity ports e2e_rolling_deployment_three_nodes
// (scenarios/rolling_deployment.rs): a node without the activity bounces it with
// backoff until an upgraded node runs it.
func cnvRollingActivity(t *testing.T, e renv) {
	r := e.rig(t)
	orch := func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("NewActivity", in).Get()
	}
	oldReg := newRegistry(t).orch("RollingDeployOrch", orch)
	probe := newCNVProbe(r.P, nil)
	r.startOn(probe, oldReg.Registry, cnvRolling, func(o *runtime.Options) { o.WorkerNodeID = "old-node" })
	r.startOrch("roll-act", "RollingDeployOrch", "test-input")
	eventually(t, "the old node to bounce NewActivity three times", func() bool { return probe.workAbandons.Load() >= 3 })
	h := r.history("roll-act")
	if st := cnvStatus(t, r, "roll-act"); st.State != runtime.StateRunning || countKind(h, provider.EventActivityCompleted)+countKind(h, provider.EventActivityFailed) != 0 {
		t.Fatalf("status %s, history %+v; want Running with the activity pending", st.State, h)
	}
	newReg := newRegistry(t).orch("RollingDeployOrch", orch).
		act("NewActivity", func(a *runtime.ActivityContext, in string) (string, error) {
			return "NewActivity result on " + a.WorkerID() + ": " + in, nil
		})
	r.startFast(newReg.Registry, cnvRolling, func(o *runtime.Options) { o.WorkerNodeID = "new-node" })
	completed(t, r.wait("roll-act"), "NewActivity result on new-node: test-input")
}

// cnvPoisonFast are options that poison unregistered work quickly.
func cnvPoisonFast(o *runtime.Options) {
	o.MaxAttempts = 3
	o.UnregisteredBackoff = 10 * time.Millisecond
}

// cnvPoisoned asserts an orchestration-poison failure.
func cnvPoisoned(t *testing.T, st runtime.OrchestrationStatus, instance string) {
	t.Helper()
	d := failed(t, st)
	if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonOrchestration || d.AttemptCount <= d.MaxAttempts || d.MaxAttempts != 3 {
		t.Fatalf("%s failed with %+v, want Poison(Orchestration) with attempts above 3", instance, d)
	}
	if !strings.Contains(st.Failure.DisplayMessage(), "poison") {
		t.Fatalf("%s: failure message %q", instance, st.Failure.DisplayMessage())
	}
}

// cnvUnknownOrchestrationPoison ports unknown_orchestration_fails_with_poison
// (unregistered_backoff_tests.rs): an unknown name, and a known name at an unknown
// version, bounce until MaxAttempts and then fail with Poison.
func cnvUnknownOrchestrationPoison(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orchV("VersionedOrch", "1.0.0", func(ctx *runtime.Context, in string) (string, error) { return "v1: " + in, nil })
	r.startFast(reg.Registry, cnvPoisonFast)
	r.startOrch("unknown-name", "DoesNotExist", "")
	cnvStartVersioned(t, r, "unknown-version", "VersionedOrch", "9.9.9", "input")
	for _, c := range []struct{ id, name, version string }{{"unknown-name", "DoesNotExist", ""}, {"unknown-version", "VersionedOrch", "9.9.9"}} {
		st := r.wait(c.id)
		cnvPoisoned(t, st, c.id)
		h := r.history(c.id)
		if h[0].Kind != provider.EventOrchestrationStarted || h[0].Name != c.name || cnvLast(h).Kind != provider.EventOrchestrationFailed {
			t.Fatalf("%s history %+v", c.id, h)
		}
		if c.version != "" && st.Version != c.version {
			t.Fatalf("%s records version %q, want the requested %s", c.id, st.Version, c.version)
		}
	}
	// A registered version still runs.
	cnvStartVersioned(t, r, "known-version", "VersionedOrch", "1.0.0", "ok")
	completed(t, r.wait("known-version"), "v1: ok")
}

// cnvCANMissingVersionPoison ports continue_as_new_to_missing_version_fails_with_poison
// (unregistered_backoff_tests.rs): the execution continued into an unregistered
// version poisons; the first execution stays continued-as-new.
func cnvCANMissingVersionPoison(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orchV("CanToMissing", "1.0.0", func(ctx *runtime.Context, in string) (string, error) {
		return "", ctx.ContinueAsNewVersioned("3.0.0", "new-input")
	})
	r.startFast(reg.Registry, cnvPoisonFast)
	cnvStartVersioned(t, r, "can-missing", "CanToMissing", "1.0.0", "start")
	st := r.wait("can-missing")
	cnvPoisoned(t, st, "can-missing")
	execs := cnvExecutions(t, r, "can-missing", 2)
	if end := cnvLast(execs[0]); end.Kind != provider.EventOrchestrationContinuedAsNew || end.Input != "new-input" {
		t.Fatalf("execution 1 ends with %s %q", end.Kind, end.Input)
	}
	if s := execs[1][0]; s.Version != "3.0.0" || s.Input != "new-input" || cnvLast(execs[1]).Kind != provider.EventOrchestrationFailed {
		t.Fatalf("execution 2: %+v", execs[1])
	}
}

// cnvUnknownActivityPoison ports unknown_activity_fails_with_poison
// (unregistered_backoff_tests.rs): an activity no node has poisons after MaxAttempts,
// and the orchestration fails with the Poison error itself (a system error, not an
// application error the code handles: duroxide's replay engine aborts the turn).
func cnvUnknownActivityPoison(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("SimpleOrch", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("UnknownActivity", "input").Get()
	})
	r.startFast(reg.Registry, cnvPoisonFast)
	st := r.run("unknown-activity", "SimpleOrch", "")
	d := failed(t, st)
	h := r.history("unknown-activity")
	if n := countKind(h, provider.EventActivityFailed); n != 1 {
		t.Fatalf("%d ActivityFailed events, want 1", n)
	}
	for _, ev := range h {
		if ev.Kind == provider.EventActivityFailed {
			if ev.Details == nil || ev.Details.Kind != provider.ErrorPoison || ev.Details.PoisonType != provider.PoisonActivity ||
				ev.Details.ActivityName != "UnknownActivity" || ev.Details.AttemptCount <= 3 {
				t.Fatalf("activity failure %+v, want Poison(Activity UnknownActivity)", ev.Details)
			}
		}
	}
	if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonActivity || d.ActivityName != "UnknownActivity" {
		t.Fatalf("orchestration failed with %s/%s %q, want the activity's Poison error (duroxide: system errors abort the turn)",
			d.Kind, d.AppKind, d.DisplayMessage())
	}
}
