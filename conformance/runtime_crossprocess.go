package conformance

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
)

func init() {
	registerRuntimeGroup(runtimeGroup{name: "CrossProcess", cases: []runtimeCase{
		{"WakeUpLatency", rtCrossProcessWakeUp},
	}})
}

// wakeChildEnv tells a re-executed test binary to act as the worker process of
// rtCrossProcessWakeUp, on the store at its value.
const wakeChildEnv = "DUROQ_RUNTIME_WAKEUP_CHILD"

func wakeChild() string { return os.Getenv(wakeChildEnv) }

func wakeRegistry(t *testing.T) *runtime.Registry {
	return newRegistry(t).
		act("Echo", echo).
		orch("OneActivity", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Echo", in).Get()
		}).Registry
}

// runWakeChild is the worker process: a runtime with the default options (a 30 s
// poll timeout) until the parent kills it.
func runWakeChild(t *testing.T, f RuntimeFactory, location string) {
	runChildRuntime(t, f, location, wakeRegistry(t), runtime.Options{})
}

// A client process starts one-activity orchestrations one at a time and waits for
// each; a worker process, a real second process whose runtime polls every 30 s,
// runs them. Each must complete within seconds: the processes notice each other's
// commits instead of waiting for a poll. The latencies are reported, not asserted,
// so that a slow machine cannot make the case flaky.
func rtCrossProcessWakeUp(t *testing.T, e renv) {
	if e.f.NewStore == nil || e.f.Open == nil {
		t.Skip("cross-process wake-ups need a durable store another process can open: RuntimeFactory.NewStore and Open are not set")
	}
	location := e.f.NewStore(t)
	p, err := e.f.Open(location)
	if err != nil {
		t.Fatalf("open %s: %v", location, err)
	}
	defer p.Close()
	_, out := startChild(t, e, wakeChildEnv+"="+location)

	c := runtime.NewClient(p)
	run := func(id string, bound time.Duration) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		began := time.Now()
		if err := c.StartOrchestration(ctx, id, "OneActivity", id); err != nil {
			t.Fatal(err)
		}
		st, err := c.WaitForOrchestration(ctx, id)
		if err != nil || st.State != runtime.StateCompleted || st.Output != id {
			t.Fatalf("%s: %+v, %v (within %v); the worker's output:\n%s", id, st, err, bound, out.String())
		}
		return time.Since(began)
	}
	run("warm-up", waitTimeout) // the worker process starts first

	const n = 100
	lat := make([]time.Duration, n)
	for i := range lat {
		// Without cross-process wake-ups a start waits for the worker's next poll
		// (30 s).
		lat[i] = run(fmt.Sprintf("wake-%03d", i), 5*time.Second)
	}
	slices.Sort(lat)
	t.Logf("start-to-completion across processes, %d one-activity orchestrations one at a time: p50 %v, p99 %v",
		n, lat[n/2].Round(10*time.Microsecond), lat[n*99/100].Round(10*time.Microsecond))
}
