package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// RuntimeFactory makes providers for TestRuntime.
type RuntimeFactory struct {
	// New returns a new, empty provider; the suite closes it.
	New func(t *testing.T) provider.Provider
	// NewStore and Open, when both are set, make the crash-recovery and
	// cross-process cases possible. Without them those cases skip, saying so.
	// NewStore creates an empty durable store and returns its location (a string a
	// child process can open).
	NewStore func(t *testing.T) string
	// Open opens a provider on a location NewStore returned, in the test's process
	// or in a child process it starts; the caller closes the provider.
	Open func(location string) (provider.Provider, error)
}

// runtimeCase is one end-to-end scenario.
type runtimeCase struct {
	name string
	run  func(t *testing.T, e renv)
}

// runtimeGroup is one file's scenarios.
type runtimeGroup struct {
	name  string
	cases []runtimeCase
}

// runtimeGroups lists every scenario group; each file appends its group in an init
// function so files stay independent.
var runtimeGroups []runtimeGroup

func registerRuntimeGroup(g runtimeGroup) { runtimeGroups = append(runtimeGroups, g) }

// TestRuntime runs end-to-end orchestrations through the real runtime (dispatchers,
// client, registry) on the providers f makes: one subtest per scenario, named
// Mode/Group/Case, each on a fresh provider. The scenarios port duroxide's e2e
// samples and runtime tests: activities, timers, events, queues, sub-orchestrations,
// continue-as-new, cancellation, versioning, sessions, tags, KV, custom status,
// retries, poison, nondeterminism, crash recovery and a 1,000-way fan-out, plus
// production's situations: code that blocks (Isolation), results that can never be
// stored and panics (FailFast), started instances not yet run (Pending) and a
// workload over runtime/faultprovider's injected transient faults (Faults). Every
// scenario runs twice: with the runtime's state cache (Mode StateCache) and without
// it (NoStateCache), since the two must behave the same.
func TestRuntime(t *testing.T, f RuntimeFactory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("conformance: RuntimeFactory.New is nil")
	}
	if child := crashChild(); child != "" {
		runCrashChild(t, f, child)
		return
	}
	if child := wakeChild(); child != "" {
		runWakeChild(t, f, child)
		return
	}
	for _, mode := range []struct {
		name  string
		cache bool
	}{{"StateCache", true}, {"NoStateCache", false}} {
		e := renv{f: f, cache: mode.cache}
		t.Run(mode.name, func(t *testing.T) {
			for _, g := range runtimeGroups {
				t.Run(g.name, func(t *testing.T) {
					for _, c := range g.cases {
						t.Run(c.name, func(t *testing.T) {
							t.Parallel()
							c.run(t, e)
						})
					}
				})
			}
		})
	}
}

// renv gives scenarios the factory and shared helpers; cache tells whether the
// runtimes they start keep a state cache.
type renv struct {
	f     RuntimeFactory
	cache bool
}

// rig is one provider with the runtimes and client of a scenario.
type rig struct {
	t     *testing.T
	P     provider.Provider
	C     *runtime.Client
	cache bool // the runtimes keep a state cache
}

// rig makes a fresh provider (closed when the test ends).
func (e renv) rig(t *testing.T) *rig {
	t.Helper()
	p := e.f.New(t)
	t.Cleanup(func() { _ = p.Close() })
	return &rig{t: t, P: p, C: runtime.NewClient(p), cache: e.cache}
}

// fastOptions are runtime options for tests: short polls and backoffs so scenarios
// finish quickly, the rest at the defaults.
func fastOptions() runtime.Options {
	return runtime.Options{PollTimeout: 200 * time.Millisecond, MinPollInterval: 5 * time.Millisecond,
		UnregisteredBackoff: 20 * time.Millisecond, DrainTimeout: 2 * time.Second, ActivityCancellationGrace: 2 * time.Second}
}

// options are opts with the rig's state cache mode.
func (r *rig) options(opts runtime.Options) runtime.Options {
	if !r.cache {
		opts.StateCacheSize = -1
	}
	return opts
}

// start runs a runtime over the rig's provider until the test ends (or stop).
func (r *rig) start(reg *runtime.Registry, opts runtime.Options) *running {
	r.t.Helper()
	rt, err := runtime.New(r.P, reg, r.options(opts))
	if err != nil {
		r.t.Fatalf("runtime.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	h := &running{rt: rt, cancel: cancel, done: done}
	r.t.Cleanup(h.stop)
	return h
}

// running is a started runtime.
type running struct {
	rt     *runtime.Runtime
	cancel context.CancelFunc
	done   chan error
	err    error
	closed bool
}

// stop shuts the runtime down and waits for Run to return.
func (h *running) stop() {
	if h.closed {
		return
	}
	h.closed = true
	h.cancel()
	h.err = <-h.done
}

// startFast runs reg on a runtime with fastOptions adjusted by tune.
func (r *rig) startFast(reg *runtime.Registry, tune ...func(*runtime.Options)) *running {
	o := fastOptions()
	for _, f := range tune {
		f(&o)
	}
	return r.start(reg, o)
}

// waitTimeout bounds every wait of the suite.
const waitTimeout = 60 * time.Second

// wait waits for instance to end and returns its status.
func (r *rig) wait(instance string) runtime.OrchestrationStatus {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := r.C.WaitForOrchestration(ctx, instance)
	if err != nil {
		r.t.Fatalf("wait for %s: %v (last status %+v)", instance, err, st)
	}
	return st
}

// startOrch starts instance and fails the test on error.
func (r *rig) startOrch(instance, name, input string) {
	r.t.Helper()
	if err := r.C.StartOrchestration(context.Background(), instance, name, input); err != nil {
		r.t.Fatalf("start %s: %v", instance, err)
	}
}

// run starts instance and waits for it to end.
func (r *rig) run(instance, name, input string) runtime.OrchestrationStatus {
	r.t.Helper()
	r.startOrch(instance, name, input)
	return r.wait(instance)
}

// completed asserts that st completed with output want.
func completed(t *testing.T, st runtime.OrchestrationStatus, want string) {
	t.Helper()
	if st.State != runtime.StateCompleted || st.Output != want {
		t.Fatalf("status %s output %q failure %s, want Completed with %q", st.State, st.Output, st.Failure.DisplayMessage(), want)
	}
}

// failed asserts that st failed and returns its details.
func failed(t *testing.T, st runtime.OrchestrationStatus) *provider.ErrorDetails {
	t.Helper()
	if st.State != runtime.StateFailed || st.Failure == nil {
		t.Fatalf("status %s output %q, want Failed", st.State, st.Output)
	}
	return st.Failure
}

// registry builds a registry, failing the test on a registration error.
type registry struct {
	t *testing.T
	*runtime.Registry
}

func newRegistry(t *testing.T) registry { return registry{t: t, Registry: runtime.NewRegistry()} }

func (r registry) act(name string, fn runtime.Activity) registry {
	r.t.Helper()
	if err := r.RegisterActivity(name, fn); err != nil {
		r.t.Fatal(err)
	}
	return r
}

func (r registry) orch(name string, fn runtime.Orchestration) registry {
	r.t.Helper()
	if err := r.RegisterOrchestration(name, fn); err != nil {
		r.t.Fatal(err)
	}
	return r
}

func (r registry) orchV(name, version string, fn runtime.Orchestration) registry {
	r.t.Helper()
	if err := r.RegisterOrchestrationVersion(name, version, fn); err != nil {
		r.t.Fatal(err)
	}
	return r
}

// echo is an activity returning its input.
func echo(_ *runtime.ActivityContext, in string) (string, error) { return in, nil }

// history reads instance's latest execution history.
func (r *rig) history(instance string) []provider.Event {
	r.t.Helper()
	evs, err := r.P.Read(context.Background(), instance)
	if err != nil {
		r.t.Fatalf("read %s: %v", instance, err)
	}
	return evs
}

// countKind counts the events of kind k.
func countKind(evs []provider.Event, k provider.EventKind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds or the wait times out.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	pollUntil(t, waitTimeout, cond, func() string { return "timed out waiting for " + what })
}

// pollUntil polls cond until it holds, failing the test with failure() after d.
func pollUntil(t *testing.T, d time.Duration, cond func() bool, failure func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(failure())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errBoom = errors.New("boom")
