package runtime

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
)

// traceContext carries a span across processes in work items and history: the W3C
// traceparent, which OpenTelemetry's API encodes without an SDK.
var traceContext = propagation.TraceContext{}

// traceParent is the traceparent of the span in ctx ("" when it holds none or an
// invalid one: tracing is off).
func traceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c.Get("traceparent")
}

// withTraceParent returns ctx with the remote span tp names as its parent (ctx
// itself when tp is empty or malformed).
func withTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

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
	parent, name, version := "", "", ""
	if len(turn.History) > 0 {
		parent, name, version = turn.History[0].TraceParent, turn.History[0].Name, turn.History[0].Version
	} else if i := firstStart(turn.Messages); i >= 0 {
		m := &turn.Messages[i]
		parent, name, version = m.TraceParent, m.Name, m.Version
	}
	ctx := withTraceParent(context.Background(), parent)
	return r.tracer.Start(ctx, "turn "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attrInstance.String(turn.Instance), attrExecution.Int64(int64(turn.ExecutionID)), attrOrchestration.String(name),
		attrVersion.String(version), attrReplayed.Int(len(turn.History)), attrMessages.Int(len(turn.Messages))))
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
	tp := traceParent(ctx)
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
	ctx = withTraceParent(ctx, item.TraceParent)
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
