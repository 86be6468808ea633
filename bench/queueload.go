package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duroq/duroq/mq"
)

// QueueConfig describes a raw queue load: Messages messages enqueued (in batches of
// 100), then drained by Consumers goroutines doing DequeueBatch + Ack.
type QueueConfig struct {
	Messages  int // default 20000
	Consumers int // default 1
	// PerKey > 0 spreads messages over routing keys with PerKey messages each (keyed
	// traffic, batches of up to PerKey); 0 sends un-keyed messages.
	PerKey int
}

// QueueReport is the outcome of a queue load.
type QueueReport struct {
	Config        QueueConfig `json:"config"`
	EnqueuePerSec float64     `json:"enqueue_msgs_per_s"`
	DrainPerSec   float64     `json:"dequeue_ack_msgs_per_s"`
	Batches       int64       `json:"batches"`
}

func (r QueueReport) String() string {
	keys := "un-keyed"
	if r.Config.PerKey > 0 {
		keys = fmt.Sprintf("keyed, %d per key", r.Config.PerKey)
	}
	return fmt.Sprintf("queue %d msgs, %s, %d consumers: enqueue %.0f msgs/s (batches of 100), dequeue+ack %.0f msgs/s (%.1f msgs per batch)",
		r.Config.Messages, keys, r.Config.Consumers, r.EnqueuePerSec, r.DrainPerSec, float64(r.Config.Messages)/float64(max(r.Batches, 1)))
}

// QueueLoad runs cfg on q's queue "bench-load" (which must be empty).
func QueueLoad(ctx context.Context, q mq.MessageQueue, cfg QueueConfig) (QueueReport, error) {
	if cfg.Messages <= 0 {
		cfg.Messages = 20000
	}
	if cfg.Consumers <= 0 {
		cfg.Consumers = 1
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

	var left atomic.Int64
	left.Store(int64(cfg.Messages))
	var batches atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Consumers)
	began = time.Now()
	for range cfg.Consumers {
		wg.Go(func() {
			for left.Load() > 0 {
				b, err := q.DequeueBatch(ctx, queue, mq.DequeueOptions{LockTimeout: time.Minute, Wait: 50 * time.Millisecond})
				if err != nil {
					errs <- err
					return
				}
				if b == nil {
					continue
				}
				if err := q.Ack(ctx, b.Token); err != nil {
					errs <- err
					return
				}
				batches.Add(1)
				left.Add(-int64(len(b.Messages)))
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return QueueReport{}, err
	}
	r.DrainPerSec = float64(cfg.Messages) / time.Since(began).Seconds()
	r.Batches = batches.Load()
	return r, nil
}
