package readme_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

// The queue in 30 seconds (README): per-customer ordered events on a SQLite file, a
// failure retried without reordering, a poison message dead-lettered with its
// reason, then redriven.
func Example_queue() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	handled := make(chan string, 16)

	q, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{}) // WAL file, migrations applied
	if err != nil {
		panic(err)
	}
	defer q.Close()

	// Producer: the events of one customer share a routing key.
	err = q.Enqueue(ctx,
		mq.Message{Queue: "orders", RoutingKey: "alice", Payload: []byte("created")},
		mq.Message{Queue: "orders", RoutingKey: "alice", Payload: []byte("paid")},
		mq.Message{Queue: "orders", RoutingKey: "bob", Payload: []byte("created")},
		mq.Message{Queue: "orders", RoutingKey: "bob", Payload: []byte("refund")})
	if err != nil {
		panic(err)
	}

	// Consumer: one customer's events at a time and in order, customers in parallel.
	// A failed message is retried after a backoff while its customer's later events
	// wait; after MaxAttempts it alone moves to "orders.dead" with its reason.
	c, err := mq.NewConsumer(q, "orders", mq.PerMessage(func(ctx context.Context, b *mq.Batch, d mq.Delivery) error {
		if string(d.Payload) == "refund" {
			return errors.New("refunds are not supported yet")
		}
		handled <- b.RoutingKey + " " + string(d.Payload)
		return nil
	}), mq.ConsumerOptions{
		Concurrency: 8,
		MaxAttempts: 2,
		Backoff:     mq.ExponentialBackoff(10*time.Millisecond, time.Second),
		OnDeadLetter: func(b *mq.Batch, d mq.Delivery, err error) {
			handled <- fmt.Sprintf("%s %s dead-lettered: %v", b.RoutingKey, d.Payload, err)
		},
	})
	if err != nil {
		panic(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }() // cancel ctx to stop: running handlers finish, then Run returns

	byCustomer := map[string][]string{}
	for range 4 {
		h := <-handled
		customer, _, _ := strings.Cut(h, " ")
		byCustomer[customer] = append(byCustomer[customer], h)
	}
	fmt.Println(byCustomer["alice"])
	fmt.Println(byCustomer["bob"])

	// Operators: look at the dead letters and send them back once the cause is fixed.
	dead, err := q.Peek(ctx, "orders.dead", mq.PeekOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s from %q after %d attempts: %s\n", dead[0].Payload, dead[0].OriginQueue, dead[0].Attempt, dead[0].LastError)
	n, err := q.Redrive(ctx, "orders.dead", mq.RedriveOptions{})
	fmt.Println("redriven:", n, err)
	stop()
	fmt.Println("consumer stopped:", <-ran)
	// Output:
	// [alice created alice paid]
	// [bob created bob refund dead-lettered: refunds are not supported yet]
	// refund from "orders" after 2 attempts: refunds are not supported yet
	// redriven: 1 <nil>
	// consumer stopped: <nil>
}

// Deduplication (README): a retried request enqueues the same payment twice; the
// second is answered as accepted and stores nothing, even after the first was handled.
func Example_dedup() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	q, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	pay := mq.Message{Queue: "payments", Payload: []byte("charge order-42"), DedupID: "order-42", DedupWindow: 10 * time.Minute}
	if err := q.Enqueue(ctx, pay); err != nil {
		panic(err)
	}
	b, err := q.DequeueBatch(ctx, "payments", mq.DequeueOptions{})
	if err != nil {
		panic(err)
	}
	if err := q.Ack(ctx, b.Token); err != nil {
		panic(err)
	}
	if err := q.Enqueue(ctx, pay); err != nil { // the retry: accepted, nothing stored
		panic(err)
	}
	st, err := q.Stats(ctx, "payments")
	if err != nil {
		panic(err)
	}
	fmt.Println("charged:", string(b.Messages[0].Payload), "· pending after the retry:", st.Ready)
	// Output: charged: charge order-42 · pending after the retry: 0
}

// Priorities (README): an urgent job overtakes the backlog, a background one waits
// for it to drain.
func Example_priorities() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	q, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	if err := q.Enqueue(ctx,
		mq.Message{Queue: "jobs", Payload: []byte("nightly report")}, // priority 0, the default
		mq.Message{Queue: "jobs", Payload: []byte("reindex"), Priority: -5},
		mq.Message{Queue: "jobs", Payload: []byte("password reset"), Priority: 10},
	); err != nil {
		panic(err)
	}
	for {
		b, err := q.DequeueBatch(ctx, "jobs", mq.DequeueOptions{})
		if err != nil {
			panic(err)
		}
		if b == nil {
			break
		}
		fmt.Printf("%s (priority %d)\n", b.Messages[0].Payload, b.Messages[0].Priority)
		if err := q.Ack(ctx, b.Token); err != nil {
			panic(err)
		}
	}
	// Output:
	// password reset (priority 10)
	// nightly report (priority 0)
	// reindex (priority -5)
}
