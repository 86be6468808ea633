package mq_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/duroq/duroq/mq"
)

type OrderEvent struct {
	Customer string
	Status   string
}

// Per-customer ordered processing: the customer is the routing key, so one consumer
// at a time owns all of a customer's pending events and sees them in order, while
// different customers are processed in parallel.
func Example_perCustomerOrdering() {
	q := mq.NewMemory(mq.MemoryOptions{})
	defer q.Close()
	events := mq.NewTyped[OrderEvent](q, nil)

	ctx, stop := context.WithCancel(context.Background())
	for _, e := range []OrderEvent{
		{"alice", "created"}, {"bob", "created"}, {"alice", "paid"}, {"bob", "paid"}, {"alice", "shipped"},
	} {
		if err := events.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: e.Customer}, e); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	history := map[string][]string{}
	remaining := 5
	consumer, err := mq.NewConsumer(q, "orders", func(ctx context.Context, b *mq.Batch) error {
		evs, err := events.Values(b)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			history[e.Customer] = append(history[e.Customer], e.Status)
		}
		if remaining -= len(evs); remaining == 0 {
			stop() // all done: shut the consumer down gracefully
		}
		return nil
	}, mq.ConsumerOptions{Concurrency: 4})
	if err != nil {
		panic(err)
	}
	if err := consumer.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("alice:", history["alice"])
	fmt.Println("bob:", history["bob"])
	// Output:
	// alice: [created paid shipped]
	// bob: [created paid]
}
