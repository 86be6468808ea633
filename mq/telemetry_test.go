package mq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/mq"
)

// TestConsumerTelemetry: a Consumer's batches as spans and metrics. Key a's batch
// acks its first message and fails its second once (retried, then acked alone); an
// un-keyed poison message fails twice and is dead-lettered.
func TestConsumerTelemetry(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	q := mq.NewMemory(mq.MemoryOptions{})
	defer q.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := q.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: "a", Payload: []byte("ok")},
		mq.Message{Queue: "orders", RoutingKey: "a", Payload: []byte("bad")}, mq.Message{Queue: "orders", Payload: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	var badFailed atomic.Bool
	var untraced atomic.Int32
	done := make(chan struct{}, 4)
	c, err := mq.NewConsumer(q, "orders", func(ctx context.Context, b *mq.Batch) error {
		if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
			untraced.Add(1)
		}
		for i, d := range b.Messages {
			switch string(d.Payload) {
			case "bad":
				if badFailed.CompareAndSwap(false, true) {
					return &mq.MessageError{Index: i, Err: errors.New("bad once")}
				}
				done <- struct{}{}
			case "poison":
				return errors.New("always fails")
			}
		}
		return nil
	}, mq.ConsumerOptions{TracerProvider: tp, MeterProvider: mp, MaxAttempts: 2, Backoff: func(int) time.Duration { return 0 },
		OnDeadLetter: func(*mq.Batch, mq.Delivery, error) { done <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	for range 2 {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the consumer did not settle every batch")
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if n := untraced.Load(); n != 0 {
		t.Errorf("%d handler calls had no span in their context", n)
	}

	outcomes := map[string]int{}
	for _, s := range rec.Ended() {
		if s.Name() != "process orders" || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span %q of kind %v, want process orders, consumer", s.Name(), s.SpanKind())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "duroq.mq.outcome" {
				outcomes[kv.Value.AsString()]++
			}
		}
	}
	want := map[string]int{"retried": 2, "acked": 1, "dead_lettered": 1}
	if len(outcomes) != len(want) || outcomes["retried"] != 2 || outcomes["acked"] != 1 || outcomes["dead_lettered"] != 1 {
		t.Errorf("span outcomes %v, want %v", outcomes, want)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					key := m.Name
					if o, ok := dp.Attributes.Value(attribute.Key("duroq.mq.outcome")); ok {
						key += " " + o.AsString()
					}
					sums[key] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					sums[m.Name] += int64(dp.Count)
				}
			}
		}
	}
	for k, v := range map[string]int64{"messaging.client.consumed.messages": 5, "messaging.process.duration": 4,
		"duroq.mq.batches retried": 2, "duroq.mq.batches acked": 1, "duroq.mq.batches dead_lettered": 1} {
		if sums[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, sums[k], v, sums)
		}
	}
}
