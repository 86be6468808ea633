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
// un-keyed poison message fails twice and is dead-lettered. The messages are
// enqueued under a producer's span: a one-message batch's span is its child, the
// two-message batch's span links to it.
func TestConsumerTelemetry(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	q := mq.NewMemory(mq.MemoryOptions{})
	defer q.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pctx, producer := tp.Tracer("test").Start(ctx, "send")
	if err := q.Enqueue(pctx, mq.Message{Queue: "orders", RoutingKey: "a", Payload: []byte("ok")},
		mq.Message{Queue: "orders", RoutingKey: "a", Payload: []byte("bad")}, mq.Message{Queue: "orders", Payload: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	producer.End()
	sent := producer.SpanContext()
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
	var children, linked int
	for _, s := range rec.Ended() {
		if s.Name() == "send" {
			continue
		}
		if s.Parent().Equal(sent.WithRemote(true)) {
			children++
		} else if links := s.Links(); len(links) == 2 && links[0].SpanContext.Equal(sent.WithRemote(true)) && links[1].SpanContext.Equal(sent.WithRemote(true)) {
			linked++
		} else {
			t.Errorf("span %q has parent %v and links %v, want the producer's span as its parent or as the link of each message", s.Name(), s.Parent(), s.Links())
		}
		if s.Name() != "process orders" || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span %q of kind %v, want process orders, consumer", s.Name(), s.SpanKind())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "duroq.mq.outcome" {
				outcomes[kv.Value.AsString()]++
			}
		}
	}
	if children != 3 || linked != 1 {
		t.Errorf("%d spans are the producer's children and %d link to it, want 3 (bad's retry, poison twice) and 1 (key a's batch)", children, linked)
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

// TestConsumerQueueGauges: while a Consumer runs, each collection reads its queue's
// Stats: messages by state and the age of the longest-waiting ready message. The
// queue's clock stands an hour behind: its messages have waited that long.
func TestConsumerQueueGauges(t *testing.T) {
	epoch := time.Now().Add(-time.Hour)
	q := mq.NewMemory(mq.MemoryOptions{Now: func() time.Time { return epoch }})
	defer q.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := q.Enqueue(ctx, mq.Message{Queue: "jobs", Payload: []byte("1")}, mq.Message{Queue: "jobs", Payload: []byte("2")},
		mq.Message{Queue: "jobs", Payload: []byte("3")}, mq.Message{Queue: "jobs", Payload: []byte("later"), Delay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}, 1), make(chan struct{})
	c, err := mq.NewConsumer(q, "jobs", func(ctx context.Context, b *mq.Batch) error {
		select { // the batches taken after the release (before the stop) need not say so
		case started <- struct{}{}:
		default:
		}
		<-release
		return nil
	}, mq.ConsumerOptions{MeterProvider: mp, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	collect := func() (map[string]int64, float64) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		depth, age := map[string]int64{}, -1.0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Gauge[int64]:
					for _, dp := range d.DataPoints {
						st, _ := dp.Attributes.Value("duroq.mq.state")
						depth[st.AsString()] = dp.Value
					}
				case metricdata.Gauge[float64]:
					age = d.DataPoints[0].Value
				}
			}
		}
		return depth, age
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	<-started
	depth, age := collect()
	if depth["ready"] != 2 || depth["locked"] != 1 || depth["delayed"] != 1 {
		t.Errorf("duroq.mq.queue.messages = %v, want 2 ready, 1 locked, 1 delayed", depth)
	}
	if age < 3590 || age > 3600+30 {
		t.Errorf("duroq.mq.queue.oldest_ready.age = %.1f s, want about 3600 (the queue's clock is an hour behind)", age)
	}
	close(release)
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if depth, age := collect(); len(depth) != 0 || age != -1 {
		t.Errorf("after Run returned the gauges still report %v and %v", depth, age)
	}
}
