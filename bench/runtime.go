package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// ProviderFactory returns a fresh, empty provider for one benchmark; the harness
// closes it.
type ProviderFactory func(b *testing.B) provider.Provider

func openProvider(b *testing.B, f ProviderFactory) provider.Provider {
	b.Helper()
	p := f(b)
	b.Cleanup(func() { p.Close() })
	return p
}

// Runtime runs the end-to-end workloads of Load on the providers f makes, an
// orchestration per op (b.N instances, all started before the runtime):
// seq/k=2 (2 sequential no-op activities), fanout/f=5, timers/k=2 and events/k=2.
// Each reports orch/s and the p99 latency.
func Runtime(b *testing.B, f ProviderFactory) {
	for _, c := range []Config{{Workload: WorkloadSeq, K: 2}, {Workload: WorkloadFanout, F: 5, ActivityDelay: -1},
		{Workload: WorkloadTimers, K: 2}, {Workload: WorkloadEvents, K: 2}} {
		name := fmt.Sprintf("%s/k=%d", c.Workload, c.K)
		if c.Workload == WorkloadFanout {
			name = fmt.Sprintf("%s/f=%d", c.Workload, c.F)
		}
		b.Run(name, func(b *testing.B) {
			p := openProvider(b, f)
			c.N = b.N
			b.ResetTimer()
			r, err := Load(context.Background(), p, c)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.OrchPerSec, "orch/s")
			b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
		})
	}
}

// Provider measures the provider contract alone: an op is one orchestration turn
// (fetch of a start item, ack appending two events and enqueueing one activity) and
// one activity (fetch, ack with its completion).
func Provider(b *testing.B, f ProviderFactory) {
	b.Run("ConcurrentStarts", func(b *testing.B) { benchConcurrentStarts(b, f) })
	b.Run("TurnAndActivity", func(b *testing.B) {
		p := openProvider(b, f)
		ctx := context.Background()
		for i := range b.N {
			id := fmt.Sprintf("p-%d", i)
			if err := p.EnqueueForOrchestrator(ctx, provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: id,
				ExecutionID: 1, Name: "O", Version: "1.0.0"}, 0); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for range b.N {
			item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: 30e9})
			if err != nil || item == nil {
				b.Fatalf("fetch: %v, %v", item, err)
			}
			ack := provider.OrchestrationAck{ExecutionID: 1,
				HistoryDelta: []provider.Event{{Kind: provider.EventOrchestrationStarted, EventID: 1, Name: "O", Version: "1.0.0"},
					{Kind: provider.EventActivityScheduled, EventID: 2, Name: "A"}},
				WorkerItems: []provider.WorkItem{{Kind: provider.WorkActivityExecute, Instance: item.Instance, ExecutionID: 1, ID: 2, Name: "A"}}}
			if err := p.AckOrchestrationItem(ctx, item.LockToken, ack); err != nil {
				b.Fatal(err)
			}
			lease, err := p.FetchWorkItem(ctx, provider.WorkFetchOptions{LockTimeout: 30e9})
			if err != nil || lease == nil {
				b.Fatalf("fetch work: %v, %v", lease, err)
			}
			done := &provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: lease.Item.Instance, ExecutionID: 1, ID: 2}
			if err := p.AckWorkItem(ctx, lease.LockToken, done); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
	})
}

// benchConcurrentStarts: an op is one Client.StartOrchestration, made by 32
// goroutines per CPU at once, as a web process serving many requests does.
func benchConcurrentStarts(b *testing.B, f ProviderFactory) {
	c := runtime.NewClient(openProvider(b, f))
	var next atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("start-%d", next.Add(1))
			if err := c.StartOrchestration(context.Background(), id, "O", ""); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "starts/s")
}
