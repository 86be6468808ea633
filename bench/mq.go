package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// QueueFactory returns a fresh, empty queue for one benchmark; the harness closes it.
type QueueFactory func(b *testing.B) mq.MessageQueue

const benchQueue = "bench"

// MessageQueue runs the queue benchmarks against the queues f makes:
//
//   - Enqueue/single and Enqueue/batch=100: enqueue throughput, one message per call
//     and 100 per call (one transaction each);
//   - DequeueAck/{unkeyed,keyed}/consumers={1,4,16}: a prefilled queue drained by
//     that many goroutines doing DequeueBatch+Ack; keyed traffic spreads messages over
//     64 routing keys, so batches carry several messages;
//   - KeyBatch/per-key={1,10,100}: the cost of one routing-key batch (dequeue+ack) as
//     the number of messages sharing the key grows.
//
// Each reports msgs/s beside ns/op (an op is one message unless stated).
func MessageQueue(b *testing.B, f QueueFactory) {
	b.Run("Enqueue/single", func(b *testing.B) { benchEnqueue(b, f, 1) })
	b.Run("Enqueue/batch=100", func(b *testing.B) { benchEnqueue(b, f, 100) })
	for _, keyed := range []bool{false, true} {
		for _, consumers := range []int{1, 4, 16} {
			name := fmt.Sprintf("DequeueAck/unkeyed/consumers=%d", consumers)
			if keyed {
				name = fmt.Sprintf("DequeueAck/keyed/consumers=%d", consumers)
			}
			b.Run(name, func(b *testing.B) { benchDrain(b, f, keyed, consumers) })
		}
	}
	b.Run("Cycle", func(b *testing.B) { benchCycle(b, f) })
	for _, perKey := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("KeyBatch/per-key=%d", perKey), func(b *testing.B) { benchKeyBatch(b, f, perKey) })
	}
}

func open(b *testing.B, f QueueFactory) mq.MessageQueue {
	b.Helper()
	q := f(b)
	b.Cleanup(func() { q.Close() })
	return q
}

var payload = make([]byte, 128)

// benchEnqueue: an op is one Enqueue call of per messages.
func benchEnqueue(b *testing.B, f QueueFactory, per int) {
	q := open(b, f)
	msgs := make([]mq.Message, per)
	for i := range msgs {
		msgs[i] = mq.Message{Queue: benchQueue, Payload: payload}
	}
	ctx := b.Context()
	n := 0
	for b.Loop() {
		if err := q.Enqueue(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
		n += per
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}

// benchCycle: an op is one send-receive-ack cycle of a single message.
func benchCycle(b *testing.B, f QueueFactory) {
	q := open(b, f)
	ctx := b.Context()
	for b.Loop() {
		if err := cycle(ctx, q, benchQueue); err != nil {
			b.Fatal(err)
		}
	}
}

// prefill enqueues n messages (keyed over keys routing keys when keys > 0) in chunks.
func prefill(b *testing.B, q mq.MessageQueue, n, keys int) {
	b.Helper()
	const chunk = 500
	msgs := make([]mq.Message, 0, chunk)
	for i := range n {
		m := mq.Message{Queue: benchQueue, Payload: payload}
		if keys > 0 {
			m.RoutingKey = fmt.Sprintf("key-%d", i%keys)
		}
		msgs = append(msgs, m)
		if len(msgs) == chunk || i == n-1 {
			if err := q.Enqueue(b.Context(), msgs...); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
}

// benchDrain: an op is one message dequeued and acked.
func benchDrain(b *testing.B, f QueueFactory, keyed bool, consumers int) {
	q := open(b, f)
	keys := 0
	if keyed {
		keys = 64
	}
	prefill(b, q, b.N, keys)
	ctx := b.Context()
	var done atomic.Int64
	var batches atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	b.ResetTimer()
	for range consumers {
		wg.Go(func() {
			for done.Load() < int64(b.N) {
				batch, err := q.DequeueBatch(ctx, benchQueue, mq.DequeueOptions{LockTimeout: time.Minute, Wait: 10 * time.Millisecond})
				if err != nil {
					errs <- err
					return
				}
				if batch == nil {
					continue
				}
				if err := q.Ack(ctx, batch.Token); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(batch.Messages)))
				batches.Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N)/float64(max(batches.Load(), 1)), "msgs/batch")
}

// benchKeyBatch: an op is one routing-key batch of perKey messages dequeued and acked.
func benchKeyBatch(b *testing.B, f QueueFactory, perKey int) {
	q := open(b, f)
	ctx := b.Context()
	msgs := make([]mq.Message, perKey)
	for i := range b.N {
		for j := range msgs {
			msgs[j] = mq.Message{Queue: benchQueue, RoutingKey: fmt.Sprintf("key-%d", i), Payload: payload}
		}
		if err := q.Enqueue(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		batch, err := q.DequeueBatch(ctx, benchQueue, mq.DequeueOptions{LockTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if batch == nil || len(batch.Messages) != perKey {
			b.Fatalf("batch %+v, want %d messages of one key", batch, perKey)
		}
		if err := q.Ack(ctx, batch.Token); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*perKey)/b.Elapsed().Seconds(), "msgs/s")
}
