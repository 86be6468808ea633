package sqlite_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// BenchmarkDrainBatches drains 10,000 messages of 128 bytes as mq.Consumer does with
// Concurrency 32: DequeueBatches of up to 32 batches, then one Settle acking them
// all. Keyed shapes put perKey consecutive messages on each routing key. An op is
// one drain of the 10,000 (the prefill is not timed).
func BenchmarkDrainBatches(b *testing.B) {
	for _, perKey := range []int{0, 1, 10} {
		name := "un-keyed"
		if perKey > 0 {
			name = fmt.Sprintf("per-key=%d", perKey)
		}
		b.Run(name, func(b *testing.B) {
			const total, fetch = 10000, 32
			q := openQueue(b, filepath.Join(b.TempDir(), "drain.db"))
			defer q.Close()
			ctx := b.Context()
			payload := make([]byte, 128)
			msgs := make([]mq.Message, total)
			for i := range msgs {
				msgs[i] = mq.Message{Queue: "drain", Payload: payload}
				if perKey > 0 {
					msgs[i].RoutingKey = fmt.Sprintf("key-%d", i/perKey)
				}
			}
			fetches := 0
			for b.Loop() {
				b.StopTimer()
				if err := q.Enqueue(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for left := total; left > 0; {
					batches, err := q.DequeueBatches(ctx, "drain", mq.DequeueOptions{LockTimeout: time.Minute}, fetch)
					if err != nil || len(batches) == 0 {
						b.Fatalf("DequeueBatches with %d messages left: %d batches, %v", left, len(batches), err)
					}
					ss := make([]mq.Settlement, len(batches))
					for i, bt := range batches {
						ss[i] = mq.Settlement{Token: bt.Token, Acked: len(bt.Messages)}
						left -= len(bt.Messages)
					}
					if err := q.Settle(ctx, ss...); err != nil {
						b.Fatal(err)
					}
					fetches++
				}
			}
			b.ReportMetric(float64(b.N*total)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(b.N*total)/float64(fetches), "msgs/fetch")
		})
	}
}
