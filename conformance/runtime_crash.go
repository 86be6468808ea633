package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerRuntimeGroup(runtimeGroup{name: "Crash", cases: []runtimeCase{
		{"ChildKilledMidRunIsResumedByAnother", rtChildKilledMidRun},
	}})
}

// crashChildEnv tells a re-executed test binary to act as the runtime process that
// gets killed, on the store at its value.
const crashChildEnv = "DUROQ_RUNTIME_CRASH_CHILD"

func crashChild() string { return os.Getenv(crashChildEnv) }

// childCacheEnv tells a child process whether its runtime keeps a state cache (a
// bool), as the scenario's runtimes do.
const childCacheEnv = "DUROQ_RUNTIME_CHILD_CACHE"

const (
	crashInstances = 20
	crashSteps     = 5
)

// crashRegistry is the code both processes run: steps with a durable timer between
// them, so the kill lands among activities, timers and turns.
func crashRegistry(t *testing.T) *runtime.Registry {
	return newRegistry(t).
		act("Step", func(a *runtime.ActivityContext, in string) (string, error) {
			time.Sleep(10 * time.Millisecond)
			return in + ":" + strconv.FormatUint(a.ActivityID(), 10), nil
		}).
		orch("CrashWork", func(ctx *runtime.Context, in string) (string, error) {
			v := in
			for i := range crashSteps {
				var err error
				if v, err = ctx.ScheduleActivity("Step", v).Get(); err != nil {
					return "", err
				}
				if i == 2 {
					if _, err := ctx.CreateTimer(50 * time.Millisecond).Get(); err != nil {
						return "", err
					}
				}
			}
			return v, nil
		}).Registry
}

// crashOptions keep locks short so the survivor takes over the dead process's work
// quickly.
func crashOptions() runtime.Options {
	o := fastOptions()
	o.OrchestratorLockTimeout, o.WorkerLockTimeout = time.Second, 2*time.Second
	return o
}

// runCrashChild is the killed process: it runs the crash registry until killed.
func runCrashChild(t *testing.T, f RuntimeFactory, location string) {
	runChildRuntime(t, f, location, crashRegistry(t), crashOptions())
}

// runChildRuntime is a child process of a case: it opens the store at location and
// runs reg with opts, in the parent's state cache mode, until killed (or long after
// the parent's waits end).
func runChildRuntime(t *testing.T, f RuntimeFactory, location string, reg *runtime.Registry, opts runtime.Options) {
	p, err := f.Open(location)
	if err != nil {
		t.Fatalf("child process: open %s: %v", location, err)
	}
	defer p.Close()
	cache, _ := strconv.ParseBool(os.Getenv(childCacheEnv))
	child := &rig{t: t, P: p, cache: cache}
	rt, err := runtime.New(p, reg, child.options(opts))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	_ = rt.Run(ctx)
}

// startChild re-executes the test binary as a child process of the case t runs:
// only the top-level test runs, and it turns into the child at once, seeing env
// (KEY=value) and the case's state cache mode. The child's output is collected in
// the returned builder; the child is killed when the test ends.
func startChild(t *testing.T, e renv, env string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	top := strings.SplitN(t.Name(), "/", 2)[0]
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), env, childCacheEnv+"="+strconv.FormatBool(e.cache))
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a child process: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

func rtChildKilledMidRun(t *testing.T, e renv) {
	if e.f.NewStore == nil || e.f.Open == nil {
		t.Skip("crash recovery needs a durable store another process can open: RuntimeFactory.NewStore and Open are not set")
	}
	location := e.f.NewStore(t)
	p, err := e.f.Open(location)
	if err != nil {
		t.Fatalf("open %s: %v", location, err)
	}
	defer p.Close()
	c := runtime.NewClient(p)
	ctx := context.Background()
	for i := range crashInstances {
		if err := c.StartOrchestration(ctx, fmt.Sprintf("crash-%02d", i), "CrashWork", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}

	cmd, out := startChild(t, e, crashChildEnv+"="+location)
	// Kill it once it has finished some instances but not all.
	doneBefore := 0
	deadline := time.Now().Add(waitTimeout)
	for doneBefore < 3 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("the child finished only %d instances in %s; its output:\n%s", doneBefore, waitTimeout, out.String())
		}
		time.Sleep(5 * time.Millisecond)
		doneBefore = countCompleted(t, c)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill the child: %v", err)
	}
	_ = cmd.Wait()
	doneAtKill := countCompleted(t, c)
	t.Logf("child killed with %d of %d instances completed", doneAtKill, crashInstances)

	// Another runtime resumes everything from the store.
	r := &rig{t: t, P: p, C: c, cache: e.cache}
	r.start(crashRegistry(t), crashOptions())
	for i := range crashInstances {
		id := fmt.Sprintf("crash-%02d", i)
		st := r.wait(id)
		want := strconv.Itoa(i)
		for s := range crashSteps {
			// Step s is the activity scheduled as event 2+2s (+2 after the timer).
			eventID := 2 + 2*s
			if s > 2 {
				eventID += 2
			}
			want += ":" + strconv.Itoa(eventID)
		}
		completed(t, st, want)
		h := r.history(id)
		if n := countKind(h, provider.EventActivityCompleted); n != crashSteps {
			t.Fatalf("%s: %d activity completions in history, want %d (each exactly once)", id, n, crashSteps)
		}
	}
	if doneAtKill == crashInstances {
		t.Logf("note: the child completed every instance before the kill landed")
	}
}

func countCompleted(t *testing.T, c *runtime.Client) int {
	t.Helper()
	n := 0
	for i := range crashInstances {
		st, err := c.Status(context.Background(), fmt.Sprintf("crash-%02d", i))
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if st.State == runtime.StateCompleted {
			n++
		} else if st.State == runtime.StateFailed {
			t.Fatalf("crash-%02d failed: %s", i, st.Failure.DisplayMessage())
		}
	}
	return n
}
