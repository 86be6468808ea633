package conformance

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/faultprovider"
	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerRuntimeGroup(runtimeGroup{name: "Faults", cases: []runtimeCase{
		{"WorkloadRidesOutTransientFaults", rtFaultsWorkload},
		{"ActivityFetchFailingOftenStaysFast", rtFaultsActivityFetch},
	}})
}

// faultRoots is how many root instances a fault workload starts (each has a child).
const faultRoots = 150

// faultClients is how many clients start and wait for a workload's instances at once.
const faultClients = 8

// faultRegistry is the fault workload: a root runs an activity, a timer, a fan-out
// of three activities and a sub-orchestration that runs an activity.
func faultRegistry(t *testing.T) *runtime.Registry {
	num := func(in string) (int, error) {
		n, err := strconv.Atoi(in)
		if err != nil {
			return 0, fmt.Errorf("not a number: %q", in)
		}
		return n, nil
	}
	return newRegistry(t).
		act("Square", func(_ *runtime.ActivityContext, in string) (string, error) {
			n, err := num(in)
			return strconv.Itoa(n * n), err
		}).
		act("Inc", func(_ *runtime.ActivityContext, in string) (string, error) {
			n, err := num(in)
			return strconv.Itoa(n + 1), err
		}).
		orch("FaultChild", func(ctx *runtime.Context, in string) (string, error) {
			n, err := num(in)
			if err != nil {
				return "", err
			}
			v, err := ctx.ScheduleActivity("Square", strconv.Itoa(n+1)).Get()
			return "child=" + v, err
		}).
		orch("FaultRoot", func(ctx *runtime.Context, in string) (string, error) {
			n, err := num(in)
			if err != nil {
				return "", err
			}
			sq, err := ctx.ScheduleActivity("Square", in).Get()
			if err != nil {
				return "", err
			}
			if _, err := ctx.CreateTimer(5 * time.Millisecond).Get(); err != nil {
				return "", err
			}
			fan := []*runtime.Future{ctx.ScheduleActivity("Inc", in), ctx.ScheduleActivity("Inc", strconv.Itoa(n+10)),
				ctx.ScheduleActivity("Inc", strconv.Itoa(n+20))}
			sum := 0
			for _, f := range fan {
				v, err := f.Get()
				if err != nil {
					return "", err
				}
				k, err := num(v)
				if err != nil {
					return "", err
				}
				sum += k
			}
			child, err := ctx.ScheduleSubOrchestration("FaultChild", in, runtime.WithInstanceID(faultChild(ctx.InstanceID()))).Get()
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("sq=%s sum=%d %s", sq, sum, child), nil
		}).Registry
}

// faultRoot, faultChild and faultOutput name the workload's i-th root, a root's
// child, and the i-th root's output.
func faultRoot(i int) string        { return fmt.Sprintf("faults-%03d", i) }
func faultChild(root string) string { return root + "-child" }
func faultOutput(i int) string {
	return fmt.Sprintf("sq=%d sum=%d child=%d", i*i, 3*i+33, (i+1)*(i+1))
}

// faultInstances lists the roots and children of a workload of n roots.
func faultInstances(n int) []string {
	ids := make([]string, 0, 2*n)
	for i := range n {
		ids = append(ids, faultRoot(i), faultChild(faultRoot(i)))
	}
	return ids
}

// faultRun is what a fault workload observed.
type faultRun struct {
	elapsed time.Duration       // from the first start to the last wait's return
	errs    []string            // failed starts and waits
	wrong   []string            // roots that did not complete with their output
	hooks   map[string][]string // OnExecutionEnded's statuses, per instance
	runErr  error               // what Run returned when stopped
}

// faultWorkload is a runtime running the fault workload, with its observations.
type faultWorkload struct {
	r   *rig
	h   *running
	mu  sync.Mutex
	run faultRun
}

// startFaults starts a runtime for the fault workload over p, tune adjusting its
// options (nil: none).
func startFaults(t *testing.T, e renv, p provider.Provider, tune func(*runtime.Options)) *faultWorkload {
	t.Helper()
	w := &faultWorkload{r: &rig{t: t, P: p, C: runtime.NewClient(p), cache: e.cache}, run: faultRun{hooks: map[string][]string{}}}
	w.h = w.r.startFast(faultRegistry(t), func(o *runtime.Options) {
		// A lock left behind by a faulted abandon lapses within the test's budget.
		o.WorkerLockTimeout = 5 * time.Second
		o.OnExecutionEnded = func(instance string, _ uint64, status string) {
			w.mu.Lock()
			w.run.hooks[instance] = append(w.run.hooks[instance], status)
			w.mu.Unlock()
		}
		if tune != nil {
			tune(o)
		}
	})
	return w
}

// drive runs faultRoots instances: clients start them (retrying retryable errors,
// which is safe: a second start of an instance changes nothing) and wait for each
// once, without retrying the wait. Half of the clients are the runtime's own (woken
// by its completions), half plain clients (polling). It then stops the runtime and
// returns what it observed. It may run on any goroutine.
func (w *faultWorkload) drive() faultRun {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	failed := func(format string, args ...any) {
		w.mu.Lock()
		w.run.errs = append(w.run.errs, fmt.Sprintf(format, args...))
		w.mu.Unlock()
	}
	began := time.Now()
	var wg sync.WaitGroup
	for k := range faultClients {
		c := w.r.C
		if k%2 == 0 {
			c = w.h.rt.Client()
		}
		wg.Go(func() {
			var mine []int
			for i := k; i < faultRoots; i += faultClients {
				mine = append(mine, i)
			}
			for _, i := range mine {
				err := c.StartOrchestration(ctx, faultRoot(i), "FaultRoot", strconv.Itoa(i))
				for provider.IsRetryable(err) && ctx.Err() == nil {
					err = c.StartOrchestration(ctx, faultRoot(i), "FaultRoot", strconv.Itoa(i))
				}
				if err != nil {
					failed("start %s: %v", faultRoot(i), err)
				}
			}
			for _, i := range mine {
				st, err := c.WaitForOrchestration(ctx, faultRoot(i))
				switch {
				case err != nil:
					failed("%v", err)
				case st.State != runtime.StateCompleted || st.Output != faultOutput(i):
					w.mu.Lock()
					w.run.wrong = append(w.run.wrong, fmt.Sprintf("%s: %s %q %s", faultRoot(i), st.State, st.Output, st.Failure.DisplayMessage()))
					w.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	// A hook runs just after its commit, so it may trail the wait that saw the commit;
	// one never called is what the case checks, hence a bounded wait.
	hooked := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, id := range faultInstances(faultRoots) {
			if len(w.run.hooks[id]) == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(5 * time.Second); !hooked() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	w.h.stop() // no hook runs after this
	w.mu.Lock()
	defer w.mu.Unlock()
	run := w.run
	run.elapsed, run.runErr = elapsed, w.h.err
	return run
}

// check asserts that every wait returned, every root completed with its output,
// OnExecutionEnded was called exactly once, with Completed, for every root and
// child, and Run returned nil. It reports every failure with its figures.
func (run faultRun) check(t *testing.T) {
	t.Helper()
	n := faultRoots
	if len(run.errs) > 0 {
		t.Errorf("%d of %d starts or waits failed; first: %s", len(run.errs), n, strings.Join(run.errs[:min(3, len(run.errs))], "; "))
	}
	if len(run.wrong) > 0 {
		t.Errorf("%d of %d roots ended wrong; first: %s", len(run.wrong), n, strings.Join(run.wrong[:min(3, len(run.wrong))], "; "))
	}
	var missingRoots, missingChildren, repeated, badStatus []string
	want := faultInstances(n)
	for _, id := range want {
		calls := run.hooks[id]
		switch {
		case len(calls) == 0 && strings.HasSuffix(id, "-child"):
			missingChildren = append(missingChildren, id)
		case len(calls) == 0:
			missingRoots = append(missingRoots, id)
		case len(calls) > 1:
			repeated = append(repeated, fmt.Sprintf("%s %v", id, calls))
		case calls[0] != provider.StatusCompleted:
			badStatus = append(badStatus, fmt.Sprintf("%s %v", id, calls))
		}
	}
	if len(missingRoots)+len(missingChildren) > 0 {
		t.Errorf("OnExecutionEnded never called for %d of %d instances (%d roots, %d children); first: %s",
			len(missingRoots)+len(missingChildren), len(want), len(missingRoots), len(missingChildren),
			strings.Join(append(missingRoots, missingChildren...)[:min(5, len(missingRoots)+len(missingChildren))], ", "))
	}
	if len(repeated) > 0 {
		t.Errorf("OnExecutionEnded called more than once for %d instances; first: %s", len(repeated), strings.Join(repeated[:min(3, len(repeated))], "; "))
	}
	if len(badStatus) > 0 {
		t.Errorf("OnExecutionEnded reported %d instances not Completed; first: %s", len(badStatus), strings.Join(badStatus[:min(3, len(badStatus))], "; "))
	}
	for id := range run.hooks {
		if !slices.Contains(want, id) {
			t.Errorf("OnExecutionEnded called for %s, not an instance of the workload", id)
		}
	}
	if run.runErr != nil {
		t.Errorf("Run returned %v, want nil after a shutdown", run.runErr)
	}
}

// faultKind is a category of faults a case must have injected: failures of ops
// (and lost replies too with lost), summed over ops.
type faultKind struct {
	name string
	ops  []faultprovider.Op
	lost bool
}

// faultsHappened asserts that f injected every kind, so that the case cannot pass
// without faults, and logs what it injected.
func faultsHappened(t *testing.T, f *faultprovider.Injector, kinds []faultKind) {
	t.Helper()
	counts := f.Counts()
	for _, op := range slices.Sorted(maps.Keys(counts)) {
		if c := counts[op]; c.Failed+c.LostReplies > 0 {
			t.Logf("%s: %d calls, %d failed, %d lost replies", op, c.Calls, c.Failed, c.LostReplies)
		}
	}
	for _, k := range kinds {
		var sum faultprovider.Counts
		for _, op := range k.ops {
			sum.Calls += counts[op].Calls
			sum.Failed += counts[op].Failed
			sum.LostReplies += counts[op].LostReplies
		}
		if sum.Failed == 0 || k.lost && sum.LostReplies == 0 {
			t.Errorf("%s: %d calls, %d failed, %d lost replies: the case did not inject the faults it is about", k.name, sum.Calls, sum.Failed, sum.LostReplies)
		}
	}
}

// A runtime and clients over a provider failing 8% of its calls, half of the
// writes' faults being lost replies (the write landed), run 150 roots with an
// activity, a timer, a fan-out and a child each: every wait returns the completed
// root with its output, and OnExecutionEnded is called once per root and child.
func rtFaultsWorkload(t *testing.T, e renv) {
	// Which calls fail is fixed by the seed and each operation's call count; with
	// seed 844 every fault this case is about falls within the first 14 calls of
	// each operation it checks (the workload makes dozens), so faultsHappened
	// cannot miss them however the batches fall. (With seed 14 the first plain
	// failure of ack_work_items came after its 52nd call, and the case failed on a
	// run that batched well.)
	f, err := faultprovider.New(e.rig(t).P, faultprovider.Options{Seed: 844, Rate: 0.08, LostReply: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	run := startFaults(t, e, f.Provider(), nil).drive()
	t.Logf("%d roots and their children under faults in %s", faultRoots, run.elapsed.Round(time.Millisecond))
	run.check(t)
	faultsHappened(t, f, []faultKind{
		{"orchestration fetch", []faultprovider.Op{faultprovider.OpFetchOrchestrationItem, faultprovider.OpFetchOrchestrationItems}, false},
		{"turn commit", []faultprovider.Op{faultprovider.OpAckOrchestrationItem, faultprovider.OpAckOrchestrationItems}, true},
		{"activity fetch", []faultprovider.Op{faultprovider.OpFetchWorkItem, faultprovider.OpFetchWorkItems}, false},
		{"activity commit", []faultprovider.Op{faultprovider.OpAckWorkItem, faultprovider.OpAckWorkItems}, true},
		{"client start", []faultprovider.Op{faultprovider.OpEnqueueForOrchestrator}, true},
		{"status read", []faultprovider.Op{faultprovider.OpRead}, false},
	})
}

// With half of the activity fetches failing, the workload takes at most a few times
// as long as the same workload without faults run alongside it (so both see the
// same load): a failed fetch is retried promptly, not after a long pause.
func rtFaultsActivityFetch(t *testing.T, e renv) {
	f, err := faultprovider.New(e.rig(t).P, faultprovider.Options{Seed: 14, Ops: map[faultprovider.Op]float64{
		faultprovider.OpFetchWorkItem: 0.5, faultprovider.OpFetchWorkItems: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	faultyW, cleanW := startFaults(t, e, f.Provider(), nil), startFaults(t, e, e.rig(t).P, nil)
	var faulty, clean faultRun
	var wg sync.WaitGroup
	wg.Go(func() { faulty = faultyW.drive() })
	wg.Go(func() { clean = cleanW.drive() })
	wg.Wait()
	t.Logf("%d roots and their children in %s with half of the activity fetches failing, %s without",
		faultRoots, faulty.elapsed.Round(time.Millisecond), clean.elapsed.Round(time.Millisecond))
	faulty.check(t)
	clean.check(t)
	if bound := 3*clean.elapsed + 2*time.Second; faulty.elapsed > bound {
		t.Errorf("with half of the activity fetches failing the workload took %s, over %s (3× the %s it took without, plus 2 s)",
			faulty.elapsed.Round(time.Millisecond), bound.Round(time.Millisecond), clean.elapsed.Round(time.Millisecond))
	}
	faultsHappened(t, f, []faultKind{{"activity fetch", []faultprovider.Op{faultprovider.OpFetchWorkItem, faultprovider.OpFetchWorkItems}, false}})
}
