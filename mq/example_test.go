package mq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// A consumer that handles each customer's events in order, message by message: a
// failed message is retried after a backoff without letting the customer's later
// events overtake it, and a message that keeps failing is moved to the dead-letter
// queue with its reason while the customer's next events go on.
func ExampleConsumer() {
	q := mq.NewMemory(mq.MemoryOptions{})
	defer q.Close()
	ctx, stop := context.WithCancel(context.Background())
	for _, e := range [][2]string{
		{"alice", "created"}, {"bob", "created"}, {"alice", "paid"}, {"bob", "paid"}, {"alice", "shipped"}, {"bob", "shipped"},
	} {
		if err := q.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: e[0], Payload: []byte(e[1])}); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	handled := map[string][]string{}
	left := 6 // events still to be handled or dead-lettered
	finished := func() {
		if left--; left == 0 {
			stop() // all done: shut the consumer down gracefully
		}
	}
	consumer, err := mq.NewConsumer(q, "orders", mq.PerMessage(func(ctx context.Context, b *mq.Batch, d mq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		event := b.RoutingKey + " " + string(d.Payload)
		switch {
		case event == "alice paid" && d.Attempt == 1:
			handled[b.RoutingKey] = append(handled[b.RoutingKey], "(paid failed)")
			return errors.New("payment service timeout") // retried after the backoff
		case event == "bob paid":
			return errors.New("card declined") // fails every time: dead-lettered
		}
		handled[b.RoutingKey] = append(handled[b.RoutingKey], string(d.Payload))
		finished()
		return nil
	}), mq.ConsumerOptions{
		Concurrency: 4,
		MaxAttempts: 3,
		Backoff:     func(attempt int) time.Duration { return 10 * time.Millisecond },
		OnDeadLetter: func(b *mq.Batch, d mq.Delivery, err error) {
			mu.Lock()
			defer mu.Unlock()
			finished()
		},
	})
	if err != nil {
		panic(err)
	}
	if err := consumer.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("alice:", handled["alice"])
	fmt.Println("bob:", handled["bob"])

	dead, err := q.Peek(context.Background(), "orders.dead", mq.PeekOptions{})
	if err != nil {
		panic(err)
	}
	for _, m := range dead {
		fmt.Printf("dead letter: %s %s from %s after %d attempts: %s\n", m.RoutingKey, m.Payload, m.OriginQueue, m.Attempt, m.LastError)
	}
	// Output:
	// alice: [created (paid failed) paid shipped]
	// bob: [created shipped]
	// dead letter: bob paid from orders after 3 attempts: card declined
}

// Settling a batch message by message: the first two messages are done, the third
// is moved to the dead-letter queue with its reason, and the fourth, not tried, is
// released for the next delivery without counting an attempt.
func ExampleSettlement() {
	q := mq.NewMemory(mq.MemoryOptions{})
	defer q.Close()
	ctx := context.Background()
	for _, p := range []string{"m1", "m2", "m3", "m4"} {
		if err := q.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: "alice", Payload: []byte(p)}); err != nil {
			panic(err)
		}
	}
	b, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil {
		panic(err)
	}
	err = q.Settle(ctx, mq.Settlement{
		Token:           b.Token,
		Acked:           2, // m1, m2
		DeadLettered:    1, // m3
		DeadLetterQueue: "orders.dead",
		Reason:          "invalid address",
	}) // m4 is released at once, its attempt undone
	if err != nil {
		panic(err)
	}

	next, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil {
		panic(err)
	}
	for _, d := range next.Messages {
		fmt.Printf("next delivery: %s (attempt %d)\n", d.Payload, d.Attempt)
	}
	dead, err := q.Peek(ctx, "orders.dead", mq.PeekOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("dead letter: %s: %s\n", dead[0].Payload, dead[0].LastError)
	// Output:
	// next delivery: m4 (attempt 1)
	// dead letter: m3: invalid address
}

// Looking at a dead-letter queue and sending its messages back once the cause is
// fixed. A redriven message keeps its id, so it is delivered before the later
// messages of its key.
func ExampleAdmin() {
	q := mq.NewMemory(mq.MemoryOptions{})
	defer q.Close()
	var admin mq.Admin = q
	ctx := context.Background()
	if err := q.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: "alice", Payload: []byte("paid")}); err != nil {
		panic(err)
	}
	b, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil {
		panic(err)
	}
	err = q.Settle(ctx, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "orders.dead", Reason: "ledger unavailable"})
	if err != nil {
		panic(err)
	}
	if err := q.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: "alice", Payload: []byte("shipped")}); err != nil {
		panic(err)
	}

	dead, err := admin.Peek(ctx, "orders.dead", mq.PeekOptions{RoutingKey: "alice"})
	if err != nil {
		panic(err)
	}
	for _, m := range dead {
		fmt.Printf("dead letter %s of %s from %s, %d attempt: %s\n", m.Payload, m.RoutingKey, m.OriginQueue, m.Attempt, m.LastError)
	}

	n, err := admin.Redrive(ctx, "orders.dead", mq.RedriveOptions{RoutingKey: "alice"})
	if err != nil {
		panic(err)
	}
	fmt.Println("redriven:", n)

	pending, err := admin.Peek(ctx, "orders", mq.PeekOptions{})
	if err != nil {
		panic(err)
	}
	for _, m := range pending {
		fmt.Printf("orders: %s (last error %q)\n", m.Payload, m.LastError)
	}
	// Output:
	// dead letter paid of alice from orders, 1 attempt: ledger unavailable
	// redriven: 1
	// orders: paid (last error "ledger unavailable")
	// orders: shipped (last error "")
}
