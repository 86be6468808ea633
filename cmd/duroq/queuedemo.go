package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

type orderEvent struct {
	Customer int `json:"customer"`
	Seq      int `json:"seq"`
}

func queueDemo(args []string) error {
	fs := flag.NewFlagSet("queue-demo", flag.ExitOnError)
	path := fs.String("db", "duroq-demo.db", "SQLite database file")
	customers := fs.Int("customers", 50, "number of customers (routing keys)")
	perCustomer := fs.Int("events", 20, "events per customer")
	workers := fs.Int("workers", 4, "concurrent handlers")
	fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	q, err := sqlite.Open(*path, sqlite.Options{})
	if err != nil {
		return err
	}
	defer q.Close()
	events := mq.NewTyped[orderEvent](q, nil)

	total := *customers * *perCustomer
	start := time.Now()
	for seq := range *perCustomer {
		for c := range *customers {
			if err := events.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: fmt.Sprint("customer-", c)}, orderEvent{c, seq}); err != nil {
				return err
			}
		}
	}
	fmt.Printf("enqueued %d events for %d customers into %s in %v\n", total, *customers, *path, time.Since(start).Round(time.Millisecond))

	var mu sync.Mutex
	seen := map[int][]int{}
	handled, failures := 0, 0
	runCtx, done := context.WithCancel(ctx)
	defer done()
	consumer, err := mq.NewConsumer(q, "orders", func(ctx context.Context, b *mq.Batch) error {
		evs, err := events.Values(b)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if rand.IntN(10) == 0 { // a flaky downstream: the whole batch is retried
			failures++
			return errors.New("downstream unavailable")
		}
		for _, e := range evs {
			seen[e.Customer] = append(seen[e.Customer], e.Seq)
		}
		if handled += len(evs); handled == total {
			done()
		}
		return nil
	}, mq.ConsumerOptions{Concurrency: *workers, Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
	if err != nil {
		return err
	}
	start = time.Now()
	if err := consumer.Run(runCtx); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted after handling %d of %d events", handled, total)
	}
	for c := range *customers {
		if !slices.IsSorted(seen[c]) || len(seen[c]) != *perCustomer {
			return fmt.Errorf("customer %d saw events %v: want %d events in order", c, seen[c], *perCustomer)
		}
	}
	fmt.Printf("handled %d events (%d batch failures retried) in %v: every customer's events exactly once, in order\n",
		handled, failures, elapsed.Round(time.Millisecond))
	return nil
}
