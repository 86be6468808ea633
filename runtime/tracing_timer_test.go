package runtime_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

// TestTimerSpan: a durable timer is one span "timer", a sibling of the turns, from
// the turn that created it to the turn that received it; the turns that replay
// its events later add none.
func TestTimerSpan(t *testing.T) {
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) {
			p, _ := pair.open(t)
			testTimerSpan(t, p)
		})
	}
}

func testTimerSpan(t *testing.T, p *adapter.Provider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Echo", func(_ *runtime.ActivityContext, in string) (string, error) { return in, nil })
	const wait = 50 * time.Millisecond
	_ = reg.RegisterOrchestration("Sleeper", func(ctx *runtime.Context, in string) (string, error) {
		if _, err := ctx.CreateTimer(wait).Get(); err != nil {
			return "", err
		}
		// Two turns after the timer's: both replay its events.
		if _, err := ctx.ScheduleActivity("Echo", "a").Get(); err != nil {
			return "", err
		}
		return ctx.ScheduleActivity("Echo", "b").Get()
	})
	rt := runOn(t, p, reg, runtime.Options{TracerProvider: tp})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reqCtx, request := tp.Tracer("test").Start(ctx, "request")
	if err := rt.Client().StartOrchestration(reqCtx, "sleeper-1", "Sleeper", ""); err != nil {
		t.Fatal(err)
	}
	request.End()
	if st, err := rt.Client().WaitForOrchestration(ctx, "sleeper-1"); err != nil || st.State != runtime.StateCompleted {
		t.Fatalf("sleeper-1: %+v, %v", st, err)
	}
	var timers, turns []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "timer":
			timers = append(timers, s)
		case "turn Sleeper":
			turns = append(turns, s)
		}
	}
	if len(timers) != 1 {
		t.Fatalf("%d timer spans, want 1 (the turns replaying its events add none)", len(timers))
	}
	if len(turns) != 4 {
		t.Errorf("%d Sleeper turns, want 4 (start, timer, a, b)", len(turns))
	}
	timer := timers[0]
	if timer.Parent().SpanID() != request.SpanContext().SpanID() || timer.SpanContext().TraceID() != request.SpanContext().TraceID() {
		t.Errorf("the timer span's parent is %v, want the request %v, as the turns'", timer.Parent(), request.SpanContext())
	}
	if d := timer.EndTime().Sub(timer.StartTime()); d < wait || d > 10*time.Second {
		t.Errorf("the timer span lasts %v, want at least the timer's %v", d, wait)
	}
	// It starts with the first turn (which created it) and ends with the second
	// (which received it), at the times the events record: the turn's clock, read
	// as the turn is built, before its span starts (truncated to the millisecond,
	// and on a loaded machine milliseconds earlier: clockMargin). A span started
	// by a later turn would start after the first turn's end.
	const clockMargin = 100 * time.Millisecond
	if first := turns[0]; timer.StartTime().Before(first.StartTime().Add(-clockMargin)) || timer.StartTime().After(first.EndTime()) {
		t.Errorf("the timer span starts at %v, outside the first turn [%v, %v]", timer.StartTime(), first.StartTime(), first.EndTime())
	}
	if second := turns[1]; timer.EndTime().Before(second.StartTime().Add(-clockMargin)) || timer.EndTime().After(second.EndTime()) {
		t.Errorf("the timer span ends at %v, outside the second turn [%v, %v]", timer.EndTime(), second.StartTime(), second.EndTime())
	}
	attrs := map[string]string{}
	for _, kv := range timer.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["duroq.instance.id"] != "sleeper-1" || attrs["duroq.orchestration.name"] != "Sleeper" || attrs["duroq.timer.id"] == "" {
		t.Errorf("timer span attributes %v, want the instance, orchestration and timer id", attrs)
	}
	if fire, err := time.Parse(time.RFC3339Nano, attrs["duroq.timer.fire_at"]); err != nil || fire.Sub(timer.StartTime()) < wait-time.Millisecond {
		t.Errorf("duroq.timer.fire_at = %q (%v), want the creation plus %v", attrs["duroq.timer.fire_at"], err, wait)
	}
}
