package runtime

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/internal/tracectx"
	"github.com/duroq/duroq/runtime/provider"
)

// tracerName is the instrumentation scope of the runtime's spans.
const tracerName = "github.com/duroq/duroq/runtime"

// Span attributes. Names follow OpenTelemetry's rules (a namespace, dots, snake
// case); there is no semantic convention for workflow engines.
const (
	attrInstance      = attribute.Key("duroq.instance.id")
	attrExecution     = attribute.Key("duroq.execution.id")
	attrOrchestration = attribute.Key("duroq.orchestration.name")
	attrVersion       = attribute.Key("duroq.orchestration.version")
	attrStatus        = attribute.Key("duroq.orchestration.status")
	attrReplayed      = attribute.Key("duroq.turn.replayed_events")
	attrMessages      = attribute.Key("duroq.turn.messages")
	attrNewEvents     = attribute.Key("duroq.turn.new_events")
	attrActivity      = attribute.Key("duroq.activity.name")
	attrActivityID    = attribute.Key("duroq.activity.id")
	attrAttempt       = attribute.Key("duroq.activity.attempt")
	attrOutcome       = attribute.Key("duroq.activity.outcome")
	attrTimerID       = attribute.Key("duroq.timer.id")
	attrTimerFireAt   = attribute.Key("duroq.timer.fire_at")
)

// newTracer is tp's tracer for the runtime (nil for a nil tp: no spans).
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// noSpan is what the span functions return when tracing is off: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// startTurnSpan starts the span of a turn of turn's execution, a child of the span
// that started the execution (recorded in its OrchestrationStarted event, or carried
// by the start being handled).
func (r *Runtime) startTurnSpan(turn *Turn) (context.Context, trace.Span) {
	if r.tracer == nil {
		return context.Background(), noSpan
	}
	parent, name, version := executionOf(turn)
	ctx := tracectx.WithParent(context.Background(), parent)
	return r.tracer.Start(ctx, "turn "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attrInstance.String(turn.Instance), attrExecution.Int64(int64(turn.ExecutionID)), attrOrchestration.String(name),
		attrVersion.String(version), attrReplayed.Int(len(turn.History)), attrMessages.Int(len(turn.Messages))))
}

// executionOf is the traceparent, orchestration name and version of turn's
// execution: its OrchestrationStarted event's, or the start the turn handles.
func executionOf(turn *Turn) (parent, name, version string) {
	if len(turn.History) > 0 {
		return turn.History[0].TraceParent, turn.History[0].Name, turn.History[0].Version
	}
	if i := firstStart(turn.Messages); i >= 0 {
		m := &turn.Messages[i]
		return m.TraceParent, m.Name, m.Version
	}
	return "", "", ""
}

// timerSpans records a span "timer" for each timer the turn saw fire (the
// TimerFired events of delta, the turn's new events, so replay adds none): from the
// turn that created it to the one that received it, a sibling of the execution's
// turns.
func (r *Runtime) timerSpans(turn *Turn, delta []provider.Event) {
	if r.tracer == nil {
		return
	}
	for i := range delta {
		fired := &delta[i]
		if fired.Kind != provider.EventTimerFired {
			continue
		}
		created := eventByID(turn.History, fired.SourceEventID)
		if created == nil {
			created = eventByID(delta, fired.SourceEventID)
		}
		if created == nil || created.Kind != provider.EventTimerCreated {
			continue
		}
		parent, name, _ := executionOf(turn)
		_, span := r.tracer.Start(tracectx.WithParent(context.Background(), parent), "timer", trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(time.UnixMilli(created.TimestampMs)), trace.WithAttributes(
				attrInstance.String(turn.Instance), attrExecution.Int64(int64(turn.ExecutionID)), attrOrchestration.String(name),
				attrTimerID.Int64(int64(created.EventID)), attrTimerFireAt.String(time.UnixMilli(created.FireAtMs).UTC().Format(time.RFC3339Nano))))
		span.End(trace.WithTimestamp(time.UnixMilli(fired.TimestampMs)))
	}
}

// eventByID finds the event with id in events, ordered by EventID (nil if none).
func eventByID(events []provider.Event, id uint64) *provider.Event {
	i, found := slices.BinarySearchFunc(events, id, func(e provider.Event, id uint64) int { return cmp.Compare(e.EventID, id) })
	if !found {
		return nil
	}
	return &events[i]
}

// endTurnSpan records a turn's outcome on its span, ends it and stamps the items the
// turn sends with its traceparent: the activities it schedules and the executions
// it starts (children, a continue-as-new) are traced as its children.
func endTurnSpan(ctx context.Context, span trace.Span, ack *provider.OrchestrationAck, status, output string) {
	defer span.End()
	if !span.SpanContext().IsValid() {
		return // tracing is off, or the SDK samples nothing and no parent was given
	}
	span.SetAttributes(attrNewEvents.Int(len(ack.HistoryDelta)), attrStatus.String(status))
	if status == provider.StatusFailed {
		span.SetStatus(codes.Error, clip(output, maxReasonBytes))
	}
	tp := tracectx.Parent(ctx)
	// Copies: the turn's result may be cached with the instance's state.
	ack.WorkerItems, ack.OrchestratorItems = slices.Clone(ack.WorkerItems), slices.Clone(ack.OrchestratorItems)
	for i := range ack.WorkerItems {
		ack.WorkerItems[i].TraceParent = tp
	}
	for i := range ack.OrchestratorItems {
		if k := ack.OrchestratorItems[i].Kind; k == provider.WorkStartOrchestration || k == provider.WorkContinueAsNew {
			ack.OrchestratorItems[i].TraceParent = tp
		}
	}
}

// startActivitySpan starts the span of an activity execution, a child of the turn
// that scheduled it.
func (r *Runtime) startActivitySpan(ctx context.Context, lease *provider.WorkItemLease) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, noSpan
	}
	item := &lease.Item
	ctx = tracectx.WithParent(ctx, item.TraceParent)
	return r.tracer.Start(ctx, "activity "+item.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attrInstance.String(item.Instance), attrExecution.Int64(int64(item.ExecutionID)), attrActivity.String(item.Name),
		attrActivityID.Int64(int64(item.ID)), attrAttempt.Int64(int64(lease.AttemptCount))))
}

// endActivitySpan records an activity's outcome ("completed", "failed",
// "cancelled", "abandoned") on its span and ends it.
func endActivitySpan(span trace.Span, outcome string, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attrOutcome.String(outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, clip(err.Error(), maxReasonBytes))
	}
	span.End()
}
