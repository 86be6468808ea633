package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/sqliteprovider"
)

// parentRegistry: Parent fans out two Double activities, then runs Child.
func parentRegistry() *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Double", func(_ *runtime.ActivityContext, in string) (string, error) { return in + in, nil })
	_ = reg.RegisterOrchestration("Parent", func(ctx *runtime.Context, in string) (string, error) {
		a, b := ctx.ScheduleActivity("Double", "a"), ctx.ScheduleActivity("Double", "b")
		if errs := ctx.Join(a, b); errors.Join(errs...) != nil {
			return "", errors.Join(errs...)
		}
		return ctx.ScheduleSubOrchestration("Child", in, runtime.WithInstanceID("child-1")).Get()
	})
	return reg
}

// childRegistry: Child's Flaky activity fails once and is retried.
func childRegistry(flaky *atomic.Int32) *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Flaky", func(_ *runtime.ActivityContext, in string) (string, error) {
		if flaky.Add(1) == 1 {
			return "", errors.New("first call fails")
		}
		return "ok", nil
	})
	_ = reg.RegisterOrchestration("Child", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivityWithRetry("Flaky", in, runtime.RetryPolicy{MaxAttempts: 2, Backoff: runtime.FixedBackoff{Interval: time.Millisecond}}).Get()
	})
	return reg
}

// pairs open two providers over one database (memory: one provider twice), as two
// processes would: nothing passes between them but what the database stores.
var pairs = []struct {
	name string
	open func(t *testing.T) (a, b *adapter.Provider)
}{
	{"memory", func(t *testing.T) (*adapter.Provider, *adapter.Provider) {
		p := adapter.NewMemory(adapter.Options{})
		t.Cleanup(func() { p.Close() })
		return p, p
	}},
	{"sqlite", func(t *testing.T) (*adapter.Provider, *adapter.Provider) {
		path := filepath.Join(t.TempDir(), "app.db")
		var ps [2]*adapter.Provider
		for i := range ps {
			p, err := sqliteprovider.Open(path, sqliteprovider.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ps[i] = p
		}
		return ps[0], ps[1]
	}},
	{"postgres", func(t *testing.T) (*adapter.Provider, *adapter.Provider) {
		dsn, schema := pgtest.Schema(t)
		var ps [2]*adapter.Provider
		for i := range ps {
			p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 4}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ps[i] = p
		}
		return ps[0], ps[1]
	}},
}

// runOn runs a runtime of reg with o on p until the test ends.
func runOn(t *testing.T, p *adapter.Provider, reg *runtime.Registry, o runtime.Options) *runtime.Runtime {
	t.Helper()
	o.UnregisteredBackoff, o.MinPollInterval = time.Millisecond, time.Millisecond
	// Two runtimes with different registries offer back what only the other has:
	// neither may give it up as poison (MaxAttempts) before the other takes it,
	// which with a backoff of a millisecond a loaded machine can delay past ten
	// offers. A test that wants poison sets its own threshold.
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 1000
	}
	rt, err := runtime.New(p, reg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("runtime: %v", err)
		}
	})
	return rt
}

// TestTracing: one trace follows an orchestration from the span around
// StartOrchestration through its turns, its fanned-out activities, a retried
// activity and a sub-orchestration, each span a child of the span that caused it.
func TestTracing(t *testing.T) {
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) { testTracing(t, pair.open) })
	}
}

// testTracing runs Parent on one runtime and Child, which only the other runtime
// has, over one database: the child's spans join the parent's trace through what
// the database stores.
func testTracing(t *testing.T, open func(t *testing.T) (a, b *adapter.Provider)) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pa, pb := open(t)
	var flaky atomic.Int32
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rt := runOn(t, pa, parentRegistry(), runtime.Options{TracerProvider: tp})
	runOn(t, pb, childRegistry(&flaky), runtime.Options{TracerProvider: tp})

	reqCtx, request := tp.Tracer("test").Start(ctx, "request")
	if err := rt.Client().StartOrchestration(reqCtx, "parent-1", "Parent", "x"); err != nil {
		t.Fatal(err)
	}
	request.End()
	if st, err := rt.Client().WaitForOrchestration(ctx, "parent-1"); err != nil || st.State != runtime.StateCompleted {
		t.Fatalf("parent-1: %+v, %v", st, err)
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
	p, _ := pairs[0].open(t)
	var flaky atomic.Int32
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rt := runOn(t, p, parentRegistry(), runtime.Options{})
	runOn(t, p, childRegistry(&flaky), runtime.Options{})
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

// slowActivityEnds is a span processor that takes a while to end an activity's span,
// and notes when it has.
type slowActivityEnds struct {
	sdktrace.SpanProcessor
	ended atomic.Bool
}

func (s *slowActivityEnds) OnEnd(span sdktrace.ReadOnlySpan) {
	if strings.HasPrefix(span.Name(), "activity") {
		time.Sleep(100 * time.Millisecond)
		s.ended.Store(true)
	}
}

// An activity's span has ended before its completion can reach the orchestration:
// a caller that waits for the orchestration and then flushes the spans (as
// README's tracing example does) finds it, however slowly the span ends.
func TestActivitySpanEndsBeforeItsCompletionIsVisible(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Greet", func(_ *runtime.ActivityContext, in string) (string, error) { return "hi " + in, nil })
	_ = reg.RegisterOrchestration("Greeting", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Greet", in).Get()
	})
	p := adapter.NewMemory(adapter.Options{})
	t.Cleanup(func() { p.Close() })
	spans := &slowActivityEnds{SpanProcessor: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	rt := runOn(t, p, reg, runtime.Options{TracerProvider: tp})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := rt.Client().StartOrchestration(ctx, "greet-1", "Greeting", "ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Client().WaitForOrchestration(ctx, "greet-1"); err != nil {
		t.Fatal(err)
	}
	if !spans.ended.Load() {
		t.Fatal("the orchestration completed before its activity's span ended")
	}
}
