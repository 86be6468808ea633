package conformance

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerRuntimeGroup(runtimeGroup{name: "FailFast", cases: []runtimeCase{
		{"OversizedActivityResultFailsAfterOneRun", rtOversizedActivityResult},
		{"UnstorableResultAmongOthers", rtUnstorableResultAmongOthers},
		{"InvalidUTF8ResultFailsOnce", rtInvalidUTF8ActivityResult},
		{"OrchestrationPanicHasStack", rtOrchestrationPanicHasStack},
		{"ActivityPanicHasStack", rtActivityPanicHasStack},
		{"PoisonActivitySaysWhy", rtPoisonActivitySaysWhy},
	}})
}

// maxReasonLen bounds the failure messages the cases accept: a reason may quote the
// provider's error, never the payload it rejected.
const maxReasonLen = 4096

// An activity whose result is over the provider's size limit runs once: its ack is
// a failure saying why, which the orchestration sees and, returning it, fails with.
func rtOversizedActivityResult(t *testing.T, e renv) {
	r := e.rig(t)
	var runs atomic.Int32
	reg := newRegistry(t).
		act("Unstorable", func(*runtime.ActivityContext, string) (string, error) {
			runs.Add(1)
			return strings.Repeat("x", 5<<20), nil
		}).
		orch("CallsUnstorable", func(ctx *runtime.Context, in string) (string, error) {
			_, err := ctx.ScheduleActivity("Unstorable", in).Get()
			var ae *runtime.ActivityError
			if !errors.As(err, &ae) || ae.Details == nil || ae.Details.AppKind != provider.AppActivityFailed {
				return "unexpected", nil // fails the case below: the code must see an activity failure
			}
			return "", err
		})
	r.startFast(reg.Registry)
	d := failed(t, r.run("unstorable", "CallsUnstorable", ""))
	msg := d.DisplayMessage()
	if len(msg) > maxReasonLen {
		t.Fatalf("failure message is %d bytes (%.300q...), want at most %d", len(msg), msg, maxReasonLen)
	}
	for _, w := range []string{"Unstorable", "cannot be stored", "limit"} {
		if !strings.Contains(msg, w) {
			t.Fatalf("failure %q does not contain %q", msg, w)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the activity ran %d times, want 1: a result that can never be stored must not be retried", n)
	}
}

// Activities that finish together, so that their acks can share a commit, one of
// them with a result over the size limit: each runs once, the others complete and
// the oversized one fails, and the orchestration, handling that failure, completes.
func rtUnstorableResultAmongOthers(t *testing.T, e renv) {
	r := e.rig(t)
	const n, huge = 4, 2
	var runs [n]atomic.Int32
	var arrived atomic.Int32
	together := make(chan struct{})
	reg := newRegistry(t).
		act("Part", func(ctx *runtime.ActivityContext, in string) (string, error) {
			i, err := strconv.Atoi(in)
			if err != nil {
				return "", err
			}
			runs[i].Add(1)
			if arrived.Add(1) == n {
				close(together)
			}
			select {
			case <-together:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			if i == huge {
				return strings.Repeat("x", 5<<20), nil
			}
			return "ok" + in, nil
		}).
		orch("Parts", func(ctx *runtime.Context, _ string) (string, error) {
			fs := make([]*runtime.Future, n)
			for i := range fs {
				fs[i] = ctx.ScheduleActivity("Part", strconv.Itoa(i))
			}
			out := make([]string, n)
			for i, err := range ctx.Join(fs...) {
				switch {
				case err == nil:
					out[i], _ = fs[i].Get()
				case strings.Contains(err.Error(), "cannot be stored"):
					out[i] = "unstorable"
				default:
					return "", err
				}
			}
			return strings.Join(out, ","), nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("parts", "Parts", ""), "ok0,ok1,unstorable,ok3")
	for i := range runs {
		if got := runs[i].Load(); got != 1 {
			t.Fatalf("activity %d ran %d times, want 1", i, got)
		}
	}
}

// An activity result that is not valid UTF-8 reaches the orchestration intact
// (results are opaque), after one run; returned as the orchestration's output, which
// stores must keep as text, it fails the orchestration at once, saying why.
func rtInvalidUTF8ActivityResult(t *testing.T, e renv) {
	r := e.rig(t)
	const result = "ok\xff\xfe"
	var runs, returns atomic.Int32
	reg := newRegistry(t).
		act("Latin1", func(*runtime.ActivityContext, string) (string, error) {
			runs.Add(1)
			return result, nil
		}).
		orch("ReturnsLatin1", func(ctx *runtime.Context, in string) (string, error) {
			res, err := ctx.ScheduleActivity("Latin1", in).Get()
			if err != nil {
				return "", err
			}
			if res != result {
				return "", errors.New("the activity's result was altered")
			}
			returns.Add(1)
			return res, nil
		})
	r.startFast(reg.Registry)
	d := failed(t, r.run("latin1", "ReturnsLatin1", ""))
	if msg := d.DisplayMessage(); !strings.Contains(msg, "cannot be stored") || !strings.Contains(msg, "UTF-8") || len(msg) > maxReasonLen {
		t.Fatalf("failure %q does not give the reason, bounded", msg)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the activity ran %d times, want 1", n)
	}
	if n := returns.Load(); n != 1 {
		t.Fatalf("the turn returning the output ran %d times, want 1: an output that can never be stored must not be retried", n)
	}
}

// failFastPanickingOrchestration panics; its name must appear in the failure's stack.
func failFastPanickingOrchestration(ctx *runtime.Context, in string) (string, error) {
	if _, err := ctx.ScheduleActivity("Echo", in).Get(); err != nil {
		return "", err
	}
	panic("orchestration exploded on " + in)
}

// failFastPanickingActivity panics; its name must appear in the failure's stack.
func failFastPanickingActivity(_ *runtime.ActivityContext, in string) (string, error) {
	var m map[string]string
	m[in] = in // assignment to entry in nil map: a runtime panic, not a call to panic
	return "", nil
}

// hasStack checks that details carry a stack naming fn and none of the runtime's
// own panic handling, bounded.
func hasStack(t *testing.T, d *provider.ErrorDetails, fn string) {
	t.Helper()
	if !strings.Contains(d.Stack, "conformance."+fn) {
		t.Fatalf("stack does not name %s:\n%s", fn, d.Stack)
	}
	if strings.Contains(d.Stack, "runtime.gopanic") || strings.Contains(d.Stack, "debug.Stack") || strings.Contains(d.Stack, "runtime.Callers") {
		t.Fatalf("stack shows the runtime's panic handling:\n%s", d.Stack)
	}
	if len(d.Stack) > maxReasonLen {
		t.Fatalf("stack is %d bytes, want at most %d", len(d.Stack), maxReasonLen)
	}
	if !strings.Contains(d.DisplayMessage(), d.Stack) {
		t.Fatalf("the display message %q omits the stack", d.DisplayMessage())
	}
}

// An orchestration's panic fails it with the panic value and the stack of the code
// that panicked; the failure, recorded once, replays without running the code.
func rtOrchestrationPanicHasStack(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).act("Echo", echo).orch("Panics", failFastPanickingOrchestration)
	r.startFast(reg.Registry)
	d := failed(t, r.run("panics", "Panics", "x"))
	if d.AppKind != provider.AppPanicked || d.Message != "orchestration exploded on x" {
		t.Fatalf("failure %+v, want Panicked with the panic value", d)
	}
	hasStack(t, d, "failFastPanickingOrchestration")
	evs := r.history("panics")
	if n := countKind(evs, provider.EventOrchestrationFailed); n != 1 {
		t.Fatalf("history has %d OrchestrationFailed events, want 1", n)
	}
	if last := evs[len(evs)-1]; last.Details == nil || last.Details.Stack != d.Stack {
		t.Fatalf("the stored failure %+v differs from the status's", last.Details)
	}
}

// An activity's panic fails the activity with the panic value and its stack, which
// the orchestration sees in its error.
func rtActivityPanicHasStack(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Panics", failFastPanickingActivity).
		orch("CallsPanics", func(ctx *runtime.Context, in string) (string, error) {
			_, err := ctx.ScheduleActivity("Panics", in).Get()
			var ae *runtime.ActivityError
			if !errors.As(err, &ae) || ae.Details == nil {
				return "", errors.New("the activity's panic did not fail it")
			}
			if ae.Details.AppKind != provider.AppPanicked || !strings.Contains(ae.Details.Stack, "conformance.failFastPanickingActivity") {
				return "", errors.New("the activity's failure lacks its stack: " + ae.Details.DisplayMessage())
			}
			return "", err
		})
	r.startFast(reg.Registry)
	d := failed(t, r.run("activity-panics", "CallsPanics", "x"))
	msg := d.DisplayMessage()
	for _, w := range []string{"assignment to entry in nil map", "conformance.failFastPanickingActivity"} {
		if !strings.Contains(msg, w) {
			t.Fatalf("failure %q does not contain %q", msg, w)
		}
	}
	if len(msg) > 2*maxReasonLen {
		t.Fatalf("failure message is %d bytes, want a bounded one", len(msg))
	}
}

// An activity no runtime registered is poison after MaxAttempts, and its failure
// says why rather than only counting attempts.
func rtPoisonActivitySaysWhy(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("CallsMissing", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("MissingActivity", in).Get()
	})
	r.startFast(reg.Registry, func(o *runtime.Options) { o.MaxAttempts = 2 })
	d := failed(t, r.run("calls-missing", "CallsMissing", ""))
	if d.Kind != provider.ErrorPoison || d.PoisonType != provider.PoisonActivity {
		t.Fatalf("failure %+v, want an activity poison", d)
	}
	if msg := d.DisplayMessage(); !strings.Contains(msg, "MissingActivity") || !strings.Contains(msg, "not registered") {
		t.Fatalf("failure %q does not say the activity is not registered", msg)
	}
}
