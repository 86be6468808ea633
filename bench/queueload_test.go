package bench_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/mq"
)

// countingQueue counts the messages enqueued through it.
type countingQueue struct {
	mq.MessageQueue
	enqueued atomic.Int64
}

func (c *countingQueue) Enqueue(ctx context.Context, msgs ...mq.Message) error {
	c.enqueued.Add(int64(len(msgs)))
	return c.MessageQueue.Enqueue(ctx, msgs...)
}

// With Warmup the load runs twice on the same queue, the first run unmeasured and of
// at most 1,000 messages, and the report says so; without it, once.
func TestQueueLoadWarmup(t *testing.T) {
	for _, warm := range []bool{false, true} {
		q := &countingQueue{MessageQueue: mq.NewMemory(mq.MemoryOptions{})}
		cfg := bench.QueueConfig{Messages: 1200, Consumers: 2, Concurrency: 4, PerKey: 3, Warmup: warm}
		r, err := bench.QueueLoad(context.Background(), q, cfg)
		if err != nil {
			t.Fatalf("warmup %v: %v", warm, err)
		}
		want := int64(1200)
		if warm {
			want += 1000
		}
		if got := q.enqueued.Load(); got != want {
			t.Errorf("warmup %v: %d messages enqueued, want %d", warm, got, want)
		}
		if r.Config != cfg || r.DrainPerSec <= 0 || r.Batches != 400 {
			t.Errorf("warmup %v: report %+v, want the config %+v and 400 measured batches of 3", warm, r, cfg)
		}
		if said := strings.Contains(r.String(), "after a warm-up run"); said != warm {
			t.Errorf("warmup %v: report %q names a warm-up: %v", warm, r, said)
		}
	}
}
