package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerRuntimeGroup(runtimeGroup{name: "Basics", cases: []runtimeCase{
		{"HelloWorld", rtHelloWorld},
		{"SequentialActivities", rtSequentialActivities},
		{"ControlFlowAndLoops", rtControlFlowAndLoops},
		{"ErrorHandlingCompensation", rtErrorHandlingCompensation},
		{"PanicsBecomeFailures", rtPanicsBecomeFailures},
		{"ActivityPanicIsAnActivityFailure", rtActivityPanicIsAnActivityFailure},
		{"StartIsIdempotent", rtStartIsIdempotent},
		{"StatusNotFound", rtStatusNotFound},
		{"FanOut1000", rtFanOut1000},
		{"ContextMetadata", rtContextMetadata},
		{"DeterministicHelpers", rtDeterministicHelpers},
	}})
}

func rtHelloWorld(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Hello", func(_ *runtime.ActivityContext, in string) (string, error) { return "Hello, " + in + "!", nil }).
		orch("HelloWorld", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Hello", in).Get()
		})
	r.startFast(reg.Registry)
	st := r.run("hello-1", "HelloWorld", "Rust")
	completed(t, st, "Hello, Rust!")
	if st.Name != "HelloWorld" || st.Version != runtime.DefaultVersion {
		t.Fatalf("status name %q version %q", st.Name, st.Version)
	}
	h := r.history("hello-1")
	want := []provider.EventKind{provider.EventOrchestrationStarted, provider.EventActivityScheduled,
		provider.EventActivityCompleted, provider.EventOrchestrationCompleted}
	if len(h) != len(want) {
		t.Fatalf("history has %d events, want %d: %+v", len(h), len(want), h)
	}
	for i, k := range want {
		if h[i].Kind != k || h[i].EventID != uint64(i+1) {
			t.Fatalf("event %d is %s #%d, want %s #%d", i, h[i].Kind, h[i].EventID, k, i+1)
		}
	}
}

func rtSequentialActivities(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Add1", func(_ *runtime.ActivityContext, in string) (string, error) {
			n, err := strconv.Atoi(in)
			return strconv.Itoa(n + 1), err
		}).
		orch("Chain", func(ctx *runtime.Context, in string) (string, error) {
			v := in
			for range 10 {
				var err error
				if v, err = ctx.ScheduleActivity("Add1", v).Get(); err != nil {
					return "", err
				}
			}
			return v, nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("chain", "Chain", "5"), "15")
	if n := countKind(r.history("chain"), provider.EventActivityCompleted); n != 10 {
		t.Fatalf("%d activity completions in history, want 10", n)
	}
}

func rtControlFlowAndLoops(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("IsEven", func(_ *runtime.ActivityContext, in string) (string, error) {
			n, _ := strconv.Atoi(in)
			return strconv.FormatBool(n%2 == 0), nil
		}).
		act("Describe", func(_ *runtime.ActivityContext, in string) (string, error) { return "<" + in + ">", nil }).
		orch("Branches", func(ctx *runtime.Context, in string) (string, error) {
			var parts []string
			for i := range 4 {
				even, err := ctx.ScheduleActivity("IsEven", strconv.Itoa(i)).Get()
				if err != nil {
					return "", err
				}
				if even == "true" {
					d, err := ctx.ScheduleActivity("Describe", strconv.Itoa(i)).Get()
					if err != nil {
						return "", err
					}
					parts = append(parts, d)
				}
			}
			return strings.Join(parts, ","), nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("branches", "Branches", ""), "<0>,<2>")
}

func rtErrorHandlingCompensation(t *testing.T, e renv) {
	r := e.rig(t)
	var refunds atomic.Int32
	reg := newRegistry(t).
		act("Debit", echo).
		act("Ship", func(_ *runtime.ActivityContext, in string) (string, error) { return "", errors.New("warehouse closed") }).
		act("Refund", func(_ *runtime.ActivityContext, in string) (string, error) {
			refunds.Add(1)
			return "refunded " + in, nil
		}).
		orch("Saga", func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.ScheduleActivity("Debit", in).Get(); err != nil {
				return "", err
			}
			if _, err := ctx.ScheduleActivity("Ship", in).Get(); err != nil {
				var ae *runtime.ActivityError
				if !errors.As(err, &ae) || ae.Details.Kind != provider.ErrorApplication || !strings.Contains(ae.Details.Message, "warehouse closed") {
					return "", fmt.Errorf("unexpected error shape: %v", err)
				}
				return ctx.ScheduleActivity("Refund", in).Get()
			}
			return "shipped", nil
		}).
		orch("Unhandled", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Ship", in).Get()
		})
	r.startFast(reg.Registry)
	completed(t, r.run("saga", "Saga", "42"), "refunded 42")
	if refunds.Load() != 1 {
		t.Fatalf("refund ran %d times", refunds.Load())
	}
	d := failed(t, r.run("unhandled", "Unhandled", "1"))
	if d.Kind != provider.ErrorApplication || d.AppKind != provider.AppOrchestrationFailed || !strings.Contains(d.Message, "warehouse closed") {
		t.Fatalf("failure %+v", d)
	}
}

func rtPanicsBecomeFailures(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("A", echo).
		orch("Panicky", func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.ScheduleActivity("A", in).Get(); err != nil {
				return "", err
			}
			panic("kaboom " + in)
		})
	r.startFast(reg.Registry)
	d := failed(t, r.run("panicky", "Panicky", "x"))
	if d.Kind != provider.ErrorApplication || d.AppKind != provider.AppPanicked || !strings.Contains(d.Message, "kaboom x") {
		t.Fatalf("failure %+v", d)
	}
	// The runtime survived: another instance still runs.
	reg2 := newRegistry(t).orch("Fine", func(ctx *runtime.Context, in string) (string, error) { return "fine", nil })
	r2 := e.rig(t)
	r2.startFast(reg2.Registry)
	completed(t, r2.run("fine", "Fine", ""), "fine")
}

func rtActivityPanicIsAnActivityFailure(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Bad", func(*runtime.ActivityContext, string) (string, error) { panic("activity exploded") }).
		orch("O", func(ctx *runtime.Context, in string) (string, error) {
			_, err := ctx.ScheduleActivity("Bad", in).Get()
			if err == nil || !strings.Contains(err.Error(), "activity exploded") {
				return "", fmt.Errorf("want the panic as an activity error, got %v", err)
			}
			return "caught", nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("bad", "O", ""), "caught")
}

func rtStartIsIdempotent(t *testing.T, e renv) {
	r := e.rig(t)
	var runs atomic.Int32
	reg := newRegistry(t).
		act("Once", func(_ *runtime.ActivityContext, in string) (string, error) { runs.Add(1); return in, nil }).
		orch("O", func(ctx *runtime.Context, in string) (string, error) { return ctx.ScheduleActivity("Once", in).Get() })
	r.startFast(reg.Registry)
	completed(t, r.run("idem", "O", "first"), "first")
	// A second start of the same id (even with other input) changes nothing.
	completed(t, r.run("idem", "O", "second"), "first")
	if runs.Load() != 1 {
		t.Fatalf("activity ran %d times", runs.Load())
	}
	if got, want := len(r.history("idem")), 4; got != want {
		t.Fatalf("history has %d events after a repeated start, want %d", got, want)
	}
}

func rtStatusNotFound(t *testing.T, e renv) {
	r := e.rig(t)
	st, err := r.C.Status(context.Background(), "nobody")
	if err != nil || st.State != runtime.StateNotFound {
		t.Fatalf("status of unknown instance: %+v, %v", st, err)
	}
	if _, err := r.C.Status(context.Background(), ""); !errors.Is(err, provider.ErrInvalid) {
		t.Fatalf("status of empty id: %v, want ErrInvalid", err)
	}
	if err := r.C.StartOrchestration(context.Background(), "x", "", ""); !errors.Is(err, provider.ErrInvalid) {
		t.Fatalf("start with empty name: %v, want ErrInvalid", err)
	}
}

func rtFanOut1000(t *testing.T, e renv) {
	r := e.rig(t)
	const n = 1000
	reg := newRegistry(t).
		act("Square", func(_ *runtime.ActivityContext, in string) (string, error) {
			v, err := strconv.Atoi(in)
			return strconv.Itoa(v * v), err
		}).
		orch("FanOut", func(ctx *runtime.Context, in string) (string, error) {
			fs := make([]*runtime.Future, n)
			for i := range fs {
				fs[i] = ctx.ScheduleActivity("Square", strconv.Itoa(i))
			}
			sum := 0
			for i, err := range ctx.Join(fs...) {
				if err != nil {
					return "", err
				}
				v, _ := fs[i].Get()
				x, _ := strconv.Atoi(v)
				sum += x
			}
			return strconv.Itoa(sum), nil
		})
	r.startFast(reg.Registry, func(o *runtime.Options) { o.WorkerConcurrency = 8 })
	want := 0
	for i := range n {
		want += i * i
	}
	completed(t, r.run("fan", "FanOut", ""), strconv.Itoa(want))
	h := r.history("fan")
	if countKind(h, provider.EventActivityScheduled) != n || countKind(h, provider.EventActivityCompleted) != n {
		t.Fatalf("history: %d scheduled, %d completed, want %d each", countKind(h, provider.EventActivityScheduled),
			countKind(h, provider.EventActivityCompleted), n)
	}
}

func rtContextMetadata(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Who", func(a *runtime.ActivityContext, in string) (string, error) {
			return fmt.Sprintf("%s/%d/%d/%s/%d", a.InstanceID(), a.ExecutionID(), a.ActivityID(), a.Name(), a.Attempt()), nil
		}).
		orch("Meta", func(ctx *runtime.Context, in string) (string, error) {
			who, err := ctx.ScheduleActivity("Who", "").Get()
			return fmt.Sprintf("%s|%d|%s|%s|%s", ctx.InstanceID(), ctx.ExecutionID(), ctx.Name(), ctx.Version(), who), err
		})
	r.startFast(reg.Registry)
	completed(t, r.run("meta", "Meta", ""), "meta|1|Meta|1.0.0|meta/1/2/Who/1")
}

func rtDeterministicHelpers(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("A", echo).
		orch("Det", func(ctx *runtime.Context, in string) (string, error) {
			g1, t1 := ctx.NewGUID(), ctx.Now().UnixMilli()
			// A second turn replays the first: the helpers must give the same values.
			if _, err := ctx.ScheduleActivity("A", g1).Get(); err != nil {
				return "", err
			}
			g2 := ctx.NewGUID()
			if g1 == g2 || t1 <= 0 {
				return "", fmt.Errorf("guids %s %s, now %d", g1, g2, t1)
			}
			ctx.SetKV("g1", g1)
			ctx.SetKV("t1", strconv.FormatInt(t1, 10))
			if _, err := ctx.ScheduleActivity("A", g2).Get(); err != nil {
				return "", err
			}
			if v, _ := ctx.KV("g1"); v != g1 {
				return "", fmt.Errorf("guid changed across replay: %s then %s", v, g1)
			}
			return "ok", nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("det", "Det", ""), "ok")
}
