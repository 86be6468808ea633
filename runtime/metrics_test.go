package runtime_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

// TestMetrics runs a known workload and reads the runtime's metrics: three Seq
// instances of two sequential activities each, one that schedules an activity no
// runtime has (poison after MaxAttempts, then the instance fails), and one that
// sleeps on a durable timer (its message waits in the orchestrator queue).
func TestMetrics(t *testing.T) {
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) {
			p, _ := pair.open(t)
			testMetrics(t, p)
		})
	}
}

func testMetrics(t *testing.T, p *adapter.Provider) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Double", func(_ *runtime.ActivityContext, in string) (string, error) { return in + in, nil })
	_ = reg.RegisterOrchestration("Seq", func(ctx *runtime.Context, in string) (string, error) {
		a, err := ctx.ScheduleActivity("Double", in).Get()
		if err != nil {
			return "", err
		}
		return ctx.ScheduleActivity("Double", a).Get()
	})
	_ = reg.RegisterOrchestration("Lost", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Missing", in).Get()
	})
	_ = reg.RegisterOrchestration("Sleeper", func(ctx *runtime.Context, in string) (string, error) {
		ctx.SetCustomStatus("sleeping")
		_, err := ctx.CreateTimer(time.Hour).Get()
		return "", err
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rt := runOn(t, p, reg, runtime.Options{MeterProvider: mp, MaxAttempts: 2})
	c := rt.Client()
	for _, s := range [][2]string{{"s1", "Seq"}, {"s2", "Seq"}, {"s3", "Seq"}, {"lost", "Lost"}, {"sleeper", "Sleeper"}} {
		if err := c.StartOrchestration(ctx, s[0], s[1], "x"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"s1", "s2", "s3", "lost"} {
		if _, err := c.WaitForOrchestration(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WaitForStatusChange(ctx, "sleeper", 0); err != nil {
		t.Fatal(err)
	}
	// A runtime records an execution's end once it learns that the turn's commit
	// succeeded, which can be just after a client sees the instance completed: wait
	// for the four ends (three Seqs and Lost).
	var rm metricdata.ResourceMetrics
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		ends := histogramCount(byName(rm), "duroq.execution.duration")
		if ends >= 4 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("duroq.execution.duration holds %d ends, want 4", ends)
		case <-tick.C:
		}
	}

	got := byName(rm)
	completed := attribute.String("duroq.orchestration.status", "Completed")
	seq := attribute.String("duroq.orchestration.name", "Seq")
	if n := histogramCount(got, "duroq.execution.duration", seq, completed); n != 3 {
		t.Errorf("duroq.execution.duration of completed Seqs: %d, want 3", n)
	}
	if n := histogramCount(got, "duroq.execution.duration", attribute.String("duroq.orchestration.status", "Failed")); n != 1 {
		t.Errorf("duroq.execution.duration of failed executions: %d, want 1 (Lost)", n)
	}
	if n := histogramCount(got, "duroq.activity.duration", attribute.String("duroq.activity.name", "Double"), attribute.String("duroq.activity.outcome", "completed")); n != 6 {
		t.Errorf("duroq.activity.duration of completed Doubles: %d, want 6", n)
	}
	// Each Seq runs three turns: its start and each activity's completion.
	if all, done := histogramCount(got, "duroq.turn.duration", seq), histogramCount(got, "duroq.turn.duration", seq, completed); all != 9 || done != 3 {
		t.Errorf("duroq.turn.duration of Seq: %d turns, %d ending Completed; want 9 and 3", all, done)
	}
	if n := histogramCount(got, "duroq.turn.duration", seq, attribute.Bool("duroq.turn.resumed", true)); n == 0 || n > 6 {
		t.Errorf("Seq turns that resumed cached state: %d, want 1 to 6 (never a first turn)", n)
	}
	if poison, _ := got["duroq.poison"].(metricdata.Sum[int64]); sumOf(poison, attribute.String("duroq.poison.type", "activity")) != 1 {
		t.Errorf("duroq.poison of activities: %+v, want 1 (Missing)", poison.DataPoints)
	}
	depth, _ := got["duroq.queue.depth"].(metricdata.Gauge[int64])
	queued := map[string]int64{}
	for _, dp := range depth.DataPoints {
		q, _ := dp.Attributes.Value("duroq.queue")
		queued[q.AsString()] = dp.Value
	}
	if len(queued) != 3 || queued["orchestrator"] != 1 || queued["timer"] != 1 || queued["worker"] != 0 {
		t.Errorf("duroq.queue.depth: %v, want the orchestrator queue to hold the sleeper's timer, and nothing else", queued)
	}
	// Every queue is drained but for the sleeper's timer, which is not ready.
	age, _ := got["duroq.queue.oldest_ready.age"].(metricdata.Gauge[float64])
	ages := map[string]float64{}
	for _, dp := range age.DataPoints {
		q, _ := dp.Attributes.Value("duroq.queue")
		ages[q.AsString()] = dp.Value
	}
	if len(ages) != 2 || ages["orchestrator"] != 0 || ages["worker"] != 0 {
		t.Errorf("duroq.queue.oldest_ready.age: %v, want 0 for the orchestrator and worker queues (nothing ready)", ages)
	}
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func sumOf(s metricdata.Sum[int64], want ...attribute.KeyValue) int64 {
	var n int64
	for _, dp := range s.DataPoints {
		if hasAll(dp.Attributes, want) {
			n += dp.Value
		}
	}
	return n
}

// byName returns rm's metrics by name.
func byName(rm metricdata.ResourceMetrics) map[string]metricdata.Aggregation {
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	return got
}

// histogramCount sums the counts of the points of histogram name in got whose
// attributes hold want.
func histogramCount(got map[string]metricdata.Aggregation, name string, want ...attribute.KeyValue) uint64 {
	h, _ := got[name].(metricdata.Histogram[float64])
	var n uint64
	for _, dp := range h.DataPoints {
		if hasAll(dp.Attributes, want) {
			n += dp.Count
		}
	}
	return n
}
