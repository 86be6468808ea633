package mq

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of the Consumer's spans and metrics.
const scope = "github.com/duroq/duroq/mq"

// Attributes, after OpenTelemetry's messaging semantic conventions where they have
// one.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrOperation   = attribute.Key("messaging.operation.type")
	attrBatchCount  = attribute.Key("messaging.batch.message_count")
	attrMessageID   = attribute.Key("messaging.message.id")
	attrErrorType   = attribute.Key("error.type")
	attrRoutingKey  = attribute.Key("duroq.mq.routing_key")
	attrAttempt     = attribute.Key("duroq.mq.attempt")
	attrOutcome     = attribute.Key("duroq.mq.outcome")
)

// The outcomes of a batch, as its span and duroq.mq.batches count them.
const (
	outcomeAcked        = "acked"
	outcomeRetried      = "retried"
	outcomeDeadLettered = "dead_lettered"
	outcomeReleased     = "released"  // cut short by shutdown
	outcomeLockLost     = "lock_lost" // redelivered later
	outcomeUnsettled    = "unsettled" // Settle failed: redelivered after the lock lapses
)

// telemetry is a Consumer's spans and metrics; nil records nothing and costs
// nothing.
type telemetry struct {
	tracer   trace.Tracer // nil without ConsumerOptions.TracerProvider
	duration metric.Float64Histogram
	consumed metric.Int64Counter
	batches  metric.Int64Counter
	queue    attribute.KeyValue
}

func newTelemetry(queue string, tp trace.TracerProvider, mp metric.MeterProvider) *telemetry {
	if tp == nil && mp == nil {
		return nil
	}
	t := &telemetry{queue: attrDestination.String(queue)}
	if tp != nil {
		t.tracer = tp.Tracer(scope)
	}
	if mp != nil {
		m := mp.Meter(scope)
		// Instruments an SDK refuses are replaced by no-ops: telemetry never stops consuming.
		t.duration, _ = m.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
			metric.WithDescription("Time a Consumer's handler took for a batch"))
		t.consumed, _ = m.Int64Counter("messaging.client.consumed.messages",
			metric.WithDescription("Messages a Consumer handled (delivered to its handler)"))
		t.batches, _ = m.Int64Counter("duroq.mq.batches", metric.WithDescription("Batches a Consumer settled, by outcome"))
	}
	return t
}

// start begins the span of b's processing; the handler's context carries it.
func (t *telemetry) start(ctx context.Context, b *Batch) (context.Context, trace.Span) {
	if t == nil || t.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	attrs := []attribute.KeyValue{attrSystem.String("duroq"), t.queue, attrOperation.String("process"),
		attrBatchCount.Int(len(b.Messages)), attrAttempt.Int(b.MaxAttempt())}
	if b.RoutingKey != "" {
		attrs = append(attrs, attrRoutingKey.String(b.RoutingKey))
	}
	if len(b.Messages) == 1 {
		attrs = append(attrs, attrMessageID.Int64(b.Messages[0].ID))
	}
	return t.tracer.Start(ctx, "process "+b.Queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// end records how b's processing ended: its outcome, the handler's error and how
// long the handler took.
func (t *telemetry) end(span trace.Span, b *Batch, outcome string, handlerErr error, took time.Duration) {
	defer span.End()
	if t == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(outcome))
		if handlerErr != nil {
			span.RecordError(handlerErr)
			span.SetStatus(codes.Error, Clip(handlerErr.Error()))
		}
	}
	if t.duration == nil {
		return
	}
	attrs := []attribute.KeyValue{attrSystem.String("duroq"), t.queue}
	if handlerErr != nil {
		attrs = append(attrs, attrErrorType.String("handler_error"))
	}
	t.duration.Record(context.Background(), took.Seconds(), metric.WithAttributes(attrs...))
	t.consumed.Add(context.Background(), int64(len(b.Messages)), metric.WithAttributes(attrSystem.String("duroq"), t.queue))
	t.batches.Add(context.Background(), 1, metric.WithAttributes(t.queue, attrOutcome.String(outcome)))
}
