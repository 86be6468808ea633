package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

// tracedRegistry: Parent fans out two Double activities, then runs Child, whose
// Flaky activity fails once and is retried.
func tracedRegistry(flaky *atomic.Int32) *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Double", func(_ *runtime.ActivityContext, in string) (string, error) { return in + in, nil })
	_ = reg.RegisterActivity("Flaky", func(_ *runtime.ActivityContext, in string) (string, error) {
		if flaky.Add(1) == 1 {
			return "", errors.New("first call fails")
		}
		return "ok", nil
	})
	_ = reg.RegisterOrchestration("Child", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivityWithRetry("Flaky", in, runtime.RetryPolicy{MaxAttempts: 2, Backoff: runtime.FixedBackoff{Interval: time.Millisecond}}).Get()
	})
	_ = reg.RegisterOrchestration("Parent", func(ctx *runtime.Context, in string) (string, error) {
		a, b := ctx.ScheduleActivity("Double", "a"), ctx.ScheduleActivity("Double", "b")
		if errs := ctx.Join(a, b); errors.Join(errs...) != nil {
			return "", errors.Join(errs...)
		}
		return ctx.ScheduleSubOrchestration("Child", in, runtime.WithInstanceID("child-1")).Get()
	})
	return reg
}

// TestTracing: one trace follows an orchestration from the span around
// StartOrchestration through its turns, its fanned-out activities, a retried
// activity and a sub-orchestration, each span a child of the span that caused it.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	var flaky atomic.Int32
	rt, err := runtime.New(p, tracedRegistry(&flaky), runtime.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { ran <- rt.Run(runCtx) }()

	reqCtx, request := tp.Tracer("test").Start(ctx, "request")
	if err := rt.Client().StartOrchestration(reqCtx, "parent-1", "Parent", "x"); err != nil {
		t.Fatal(err)
	}
	request.End()
	if st, err := rt.Client().WaitForOrchestration(ctx, "parent-1"); err != nil || st.State != runtime.StateCompleted {
		t.Fatalf("parent-1: %+v, %v", st, err)
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	spans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.SpanContext().SpanID()] = s
		byName[s.Name()] = append(byName[s.Name()], s)
		if s.SpanContext().TraceID() != request.SpanContext().TraceID() {
			t.Errorf("span %q is in trace %s, want the request's %s", s.Name(), s.SpanContext().TraceID(), request.SpanContext().TraceID())
		}
	}
	parentOf := func(s sdktrace.ReadOnlySpan) string {
		if s.Parent().SpanID() == request.SpanContext().SpanID() {
			return "request"
		}
		if ps, ok := spans[s.Parent().SpanID()]; ok {
			return ps.Name()
		}
		return "?"
	}
	attr := func(s sdktrace.ReadOnlySpan, k attribute.Key) string {
		for _, kv := range s.Attributes() {
			if kv.Key == k {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	// Parent: a turn for the start, one per activity completion (or one for both) and
	// one for the child's completion; all children of the request.
	turns := byName["turn Parent"]
	if len(turns) < 3 {
		t.Fatalf("%d Parent turns, want at least 3 (start, activities, child): %v", len(turns), names(rec.Ended()))
	}
	for _, s := range turns {
		if parentOf(s) != "request" || attr(s, "duroq.instance.id") != "parent-1" {
			t.Errorf("Parent turn: parent %q, instance %q; want the request, parent-1", parentOf(s), attr(s, "duroq.instance.id"))
		}
	}
	if last := turns[len(turns)-1]; attr(last, "duroq.orchestration.status") != "Completed" {
		t.Errorf("the last Parent turn's status is %q, want Completed", attr(last, "duroq.orchestration.status"))
	}
	if first := turns[0]; attr(first, "duroq.turn.replayed_events") != "0" {
		t.Errorf("the first Parent turn replayed %s events, want 0", attr(first, "duroq.turn.replayed_events"))
	}
	if got := byName["activity Double"]; len(got) != 2 || parentOf(got[0]) != "turn Parent" || parentOf(got[1]) != "turn Parent" {
		t.Errorf("Double spans: %d, parents %v; want 2, children of a Parent turn", len(got), parents(got, parentOf))
	}
	for _, s := range byName["turn Child"] {
		if parentOf(s) != "turn Parent" || attr(s, "duroq.instance.id") != "child-1" {
			t.Errorf("Child turn: parent %q; want the Parent turn that started it", parentOf(s))
		}
	}
	flakies := byName["activity Flaky"]
	if len(flakies) != 2 {
		t.Fatalf("%d Flaky spans, want 2 (a failure, then its retry)", len(flakies))
	}
	outcomes := []string{attr(flakies[0], "duroq.activity.outcome"), attr(flakies[1], "duroq.activity.outcome")}
	if outcomes[0] != "failed" || outcomes[1] != "completed" || parentOf(flakies[0]) != "turn Child" || parentOf(flakies[1]) != "turn Child" {
		t.Errorf("Flaky spans: outcomes %v, parents %v; want failed then completed, children of Child turns", outcomes, parents(flakies, parentOf))
	}
	if flakies[0].Status().Code.String() != "Error" || len(flakies[0].Events()) == 0 {
		t.Errorf("the failed Flaky span: status %v, %d events; want Error with the error recorded", flakies[0].Status(), len(flakies[0].Events()))
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func parents(spans []sdktrace.ReadOnlySpan, parentOf func(sdktrace.ReadOnlySpan) string) []string {
	var out []string
	for _, s := range spans {
		out = append(out, parentOf(s))
	}
	return out
}

// Without a TracerProvider nothing is stamped: a start made under a span that no
// runtime traces still runs, and the history records no trace parent.
func TestTracingOffStampsNothing(t *testing.T) {
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	var flaky atomic.Int32
	rt, err := runtime.New(p, tracedRegistry(&flaky), runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go rt.Run(runCtx)
	if err := rt.Client().StartOrchestration(ctx, "parent-1", "Parent", "x"); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.Client().WaitForOrchestration(ctx, "parent-1"); err != nil || st.State != runtime.StateCompleted {
		t.Fatalf("parent-1: %+v, %v", st, err)
	}
	for _, id := range []string{"parent-1", "child-1"} {
		h, err := p.ReadHistory(ctx, id)
		if err != nil || len(h) == 0 || h[0].TraceParent != "" {
			t.Errorf("%s: %d events, %v; started event trace parent %q, want none", id, len(h), err, h[0].TraceParent)
		}
	}
}
