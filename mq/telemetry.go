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
	attrState       = attribute.Key("duroq.mq.state")
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
	depth    metric.Int64ObservableGauge
	age      metric.Float64ObservableGauge
	meter    metric.Meter
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
		// The buckets semantic conventions advise for messaging durations, and finer
		// ones below them: a batch of an embedded queue often takes microseconds.
		t.duration, _ = m.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10),
			metric.WithDescription("Time a Consumer's handler took for a batch"))
		t.consumed, _ = m.Int64Counter("messaging.client.consumed.messages",
			metric.WithDescription("Messages a Consumer handled (delivered to its handler)"))
		t.batches, _ = m.Int64Counter("duroq.mq.batches", metric.WithDescription("Batches a Consumer settled, by outcome"))
		t.depth, _ = m.Int64ObservableGauge("duroq.mq.queue.messages",
			metric.WithDescription("Messages in a running Consumer's queue, by state (ready, delayed, locked)"))
		t.age, _ = m.Float64ObservableGauge("duroq.mq.queue.oldest_ready.age", metric.WithUnit("s"),
			metric.WithDescription("How long the ready message of a running Consumer's queue that has waited longest has been visible"))
		t.meter = m
	}
	return t
}

// observe reports q's Stats for the consumer's queue at each collection, until the
// returned function is called.
func (t *telemetry) observe(q MessageQueue, queue string, log func(error)) (stop func()) {
	if t == nil || t.meter == nil {
		return func() {}
	}
	reg, err := t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := q.Stats(ctx, queue)
		if err != nil {
			return err
		}
		for _, s := range []struct {
			state MessageState
			n     int
		}{{StateReady, st.Ready}, {StateDelayed, st.Delayed}, {StateLocked, st.Locked}} {
			o.ObserveInt64(t.depth, int64(s.n), metric.WithAttributes(t.queue, attrState.String(string(s.state))))
		}
		age := 0.0
		if !st.OldestReady.IsZero() {
			age = max(0, time.Since(st.OldestReady).Seconds())
		}
		o.ObserveFloat64(t.age, age, metric.WithAttributes(t.queue))
		return nil
	}, t.depth, t.age)
	if err != nil {
		log(err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// start begins the span of b's processing, a child of the span that produced a
// one-message batch, linked to the producers of a larger one; the handler's context
// carries it.
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
	ctx, opts := producers(ctx, b)
	return t.tracer.Start(ctx, "process "+b.Queue, append(opts, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))...)
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
