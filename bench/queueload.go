package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duroq/duroq/mq"
)

// QueueConfig describes a raw queue load: Messages messages enqueued (in batches of
// 100), then drained by Consumers mq.Consumers at once with a no-op handler, as an
// application (or several of its processes) would drain them.
type QueueConfig struct {
	Messages int // default 20000
	// Consumers is how many mq.Consumers drain the queue at once, as several
	// processes would. Default 1.
	Consumers int `json:"consumers"`
	// Concurrency is each Consumer's: batches handled at once, fetched together and
	// settled together. Default 1.
	Concurrency int `json:"concurrency"`
	// PerKey > 0 spreads messages over routing keys with PerKey messages each (keyed
	// traffic, batches of up to PerKey); 0 sends un-keyed messages.
	PerKey int
	// Warmup runs the load once before the measured run, on the same queue, with at
	// most warmupMessages messages, and discards it: the figures are those of a
	// process whose connections have already prepared (and on PostgreSQL planned)
	// every statement of the load, as a long-running one has. Without it a short
	// drain mostly measures that start.
	Warmup bool `json:"warmup,omitempty"`
}

// QueueReport is the outcome of a queue load.
type QueueReport struct {
	Config        QueueConfig `json:"config"`             // the configuration run, defaults filled in
	EnqueuePerSec float64     `json:"enqueue_msgs_per_s"` // messages enqueued per second, in batches of 100
	DrainPerSec   float64     `json:"drain_msgs_per_s"`   // messages consumed and acked per second by the Consumers together
	Batches       int64       `json:"batches"`            // batches the handlers received (Messages/Batches is the mean batch size)
}

// String renders the report on one line.
func (r QueueReport) String() string {
	keys := "un-keyed"
	if r.Config.PerKey > 0 {
		keys = fmt.Sprintf("keyed, %d per key", r.Config.PerKey)
	}
	consumers := fmt.Sprintf("consumer concurrency %d", r.Config.Concurrency)
	if r.Config.Consumers > 1 {
		consumers = fmt.Sprintf("%d consumers of concurrency %d", r.Config.Consumers, r.Config.Concurrency)
	}
	warm := ""
	if r.Config.Warmup {
		warm = ", after a warm-up run"
	}
	return fmt.Sprintf("queue %d msgs, %s, %s%s: enqueue %.0f msgs/s (batches of 100), drain through mq.Consumer %.0f msgs/s (%.1f msgs per batch)",
		r.Config.Messages, keys, consumers, warm, r.EnqueuePerSec, r.DrainPerSec, float64(r.Config.Messages)/float64(max(r.Batches, 1)))
}

// warmupMessages bounds a warm-up run: enough for every consumer to run every
// statement of the load, few enough that it leaves the tables (and, where
// autovacuum is off, their dead rows) as they were.
const warmupMessages = 1000

// QueueLoad runs cfg on q's queue "bench-load" (which must be empty).
func QueueLoad(ctx context.Context, q mq.MessageQueue, cfg QueueConfig) (QueueReport, error) {
	if cfg.Messages <= 0 {
		cfg.Messages = 20000
	}
	cfg.Consumers = max(cfg.Consumers, 1)
	cfg.Concurrency = max(cfg.Concurrency, 1)
	if cfg.Warmup {
		cold := cfg
		cold.Warmup, cold.Messages = false, min(cfg.Messages, warmupMessages)
		if _, err := QueueLoad(ctx, q, cold); err != nil {
			return QueueReport{}, fmt.Errorf("bench: warm-up run: %w", err)
		}
	}
	const queue = "bench-load"
	began := time.Now()
	batch := make([]mq.Message, 0, 100)
	for i := range cfg.Messages {
		m := mq.Message{Queue: queue, Payload: payload}
		if cfg.PerKey > 0 {
			m.RoutingKey = fmt.Sprintf("key-%d", i/cfg.PerKey)
		}
		batch = append(batch, m)
		if len(batch) == cap(batch) || i == cfg.Messages-1 {
			if err := q.Enqueue(ctx, batch...); err != nil {
				return QueueReport{}, err
			}
			batch = batch[:0]
		}
	}
	r := QueueReport{Config: cfg, EnqueuePerSec: float64(cfg.Messages) / time.Since(began).Seconds()}

	drainCtx, drained := context.WithCancel(ctx)
	defer drained()
	var left, batches atomic.Int64
	left.Store(int64(cfg.Messages))
	handle := func(ctx context.Context, b *mq.Batch) error {
		batches.Add(1)
		if left.Add(-int64(len(b.Messages))) == 0 {
			drained() // Run returns once the last settlements are applied
		}
		return nil
	}
	consumers := make([]*mq.Consumer, cfg.Consumers)
	for i := range consumers {
		c, err := mq.NewConsumer(q, queue, handle, mq.ConsumerOptions{Concurrency: cfg.Concurrency, LockTimeout: time.Minute, PollWait: 50 * time.Millisecond})
		if err != nil {
			return QueueReport{}, err
		}
		consumers[i] = c
	}
	began = time.Now()
	errs := make([]error, len(consumers))
	var wg sync.WaitGroup
	for i, c := range consumers {
		wg.Go(func() {
			if errs[i] = c.Run(drainCtx); errs[i] != nil {
				drained() // a failed consumer ends the run
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return QueueReport{}, err
	}
	elapsed := time.Since(began)
	if err := ctx.Err(); err != nil {
		return QueueReport{}, err
	}
	if st, err := q.Stats(ctx, queue); err != nil || st != (mq.Stats{}) {
		return QueueReport{}, fmt.Errorf("bench: queue: %+v left after the drain (%v)", st, err)
	}
	r.DrainPerSec = float64(cfg.Messages) / elapsed.Seconds()
	r.Batches = batches.Load()
	return r, nil
}

// cycle sends one message to queue, receives it and acks it.
func cycle(ctx context.Context, q mq.MessageQueue, queue string) error {
	if err := q.Enqueue(ctx, mq.Message{Queue: queue, Payload: payload}); err != nil {
		return err
	}
	b, err := q.DequeueBatch(ctx, queue, mq.DequeueOptions{LockTimeout: time.Minute})
	if err != nil {
		return err
	}
	if b == nil {
		return errors.New("bench: cycle: the enqueued message was not delivered")
	}
	return q.Ack(ctx, b.Token)
}

// CycleReport is the outcome of QueueCycle.
type CycleReport struct {
	Cycles int           `json:"cycles"`       // cycles run
	PerSec float64       `json:"cycles_per_s"` // cycles per second, one at a time
	P50    time.Duration `json:"p50_ns"`       // the median duration of one cycle
	P99    time.Duration `json:"p99_ns"`       // the 99th percentile duration of one cycle
}

// String renders the report on one line.
func (r CycleReport) String() string {
	return fmt.Sprintf("queue cycle (Enqueue, DequeueBatch, Ack), one message at a time, %d cycles: %.0f cycles/s, latency p50 %v p99 %v",
		r.Cycles, r.PerSec, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
}

// QueueCycle runs n send-receive-ack cycles one message at a time on q's empty queue
// "bench-cycle": Enqueue one message, DequeueBatch it, Ack it. It reports cycles/s
// and the latency of a whole cycle.
func QueueCycle(ctx context.Context, q mq.MessageQueue, n int) (CycleReport, error) {
	const queue = "bench-cycle"
	if n <= 0 {
		n = 1000
	}
	lat := make([]time.Duration, n)
	began := time.Now()
	for i := range n {
		t := time.Now()
		if err := cycle(ctx, q, queue); err != nil {
			return CycleReport{}, err
		}
		lat[i] = time.Since(t)
	}
	total := time.Since(began)
	slices.Sort(lat)
	return CycleReport{Cycles: n, PerSec: float64(n) / total.Seconds(), P50: percentile(lat, 0.50), P99: percentile(lat, 0.99)}, nil
}
