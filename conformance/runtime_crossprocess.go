package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
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
	child, out := startChild(t, e, wakeChildEnv+"="+location)

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
	watchOtherProcessEnds(t, p, c)

	// Now idle, the worker waits for the database's notifications and its 30 s
	// poll: it should use next to no CPU. Real time is what is measured, so the
	// test waits for it.
	time.Sleep(idleSettle)
	cpu0, err := processCPU(child.Process.Pid)
	if errors.Is(err, os.ErrNotExist) {
		t.Logf("the idle worker's CPU is not measured here: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	time.Sleep(idleWindow)
	cpu1, err := processCPU(child.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	share := float64(cpu1-cpu0) / float64(time.Since(began))
	t.Logf("the idle worker process used %v of CPU in %v: %.2f %% of a core", cpu1-cpu0, idleWindow, 100*share)
	if share > idleCPUBound {
		t.Errorf("the idle worker process used %.1f %% of a core (%v in %v), want at most %.0f %%: it is polling",
			100*share, cpu1-cpu0, idleWindow, 100*idleCPUBound)
	}
}

// watchOtherProcessEnds: where the provider watches instances
// (provider.InstanceWatcher), a watch taken in this process before an instance
// starts closes on a commit of the worker process, and watching again after each
// wake-up, with nothing but the watch to wait on, this process sees the instance
// Completed: every change that matters reaches it as a notice. (Signals name ends
// only; a provider that watches the instance's state also wakes at its first
// turn.)
func watchOtherProcessEnds(t *testing.T, p provider.Provider, c *runtime.Client) {
	w, ok := p.(provider.InstanceWatcher)
	var probe <-chan struct{}
	if ok {
		var release func()
		probe, release = w.WatchInstance(context.Background(), "watch-probe")
		release()
	}
	if probe == nil {
		t.Logf("%T watches no instance: clients see other processes' ends by reading", p)
		return
	}
	for i := range 5 {
		id := fmt.Sprintf("watch-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		changed, release := w.WatchInstance(ctx, id)
		if err := c.StartOrchestration(ctx, id, "OneActivity", id); err != nil {
			t.Fatal(err)
		}
		for wakes := 1; ; wakes++ {
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("%s: no notice of a change within %v (%d so far)", id, waitTimeout, wakes-1)
			}
			release()
			changed, release = w.WatchInstance(ctx, id)
			st, err := c.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == runtime.StateCompleted {
				break
			}
			if wakes == 10 {
				t.Fatalf("%s: %v after %d notices, want Completed", id, st.State, wakes)
			}
		}
		release()
		cancel()
	}
}

const (
	// idleSettle lets the worker finish what the last orchestration left (its acks,
	// its lock releases) before its idle CPU is measured over idleWindow.
	idleSettle = time.Second
	idleWindow = 3 * time.Second
	// idleCPUBound is the share of a core an idle worker may use. Measured idle, a
	// worker used less than a clock tick (10 ms) in 3 s; one polling its store
	// every millisecond (PollTimeout 1 µs, the runtime pausing between empty
	// polls) used 30–40 ms.
	idleCPUBound = 0.01
)

// processCPU returns the CPU time (user and system) process pid has used, as
// Linux reports it in /proc/<pid>/stat in clock ticks of 10 ms (USER_HZ 100);
// os.ErrNotExist where there is no /proc.
func processCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count the fields after it
	// (the state is field 3, utime 14 and stime 15).
	_, rest, found := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest)
	if !found || len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected content %.100q", pid, stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
