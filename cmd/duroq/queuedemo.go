package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

// orderEvent is one event of a customer's order; the customer is the routing key.
type orderEvent struct {
	Customer string `json:"customer"`
	Step     string `json:"step"`
	Address  string `json:"address,omitempty"`
}

const (
	demoQueue       = "orders"
	demoDeadLetters = "orders.dead"
	demoBackoff     = 100 * time.Millisecond
	demoMaxAttempts = 3
)

var (
	demoCustomers = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	demoSteps     = []string{"placed", "paid", "packed", "shipped", "delivered", "reviewed"}
)

// demoName is names[i], or prefix-(i+1) past the end of names.
func demoName(names []string, prefix string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s-%d", prefix, i+1)
}

func queueDemo(args []string) error { return runQueueDemo(args, os.Stdout) }

// runQueueDemo tells, on out, the story of several customers' ordered events going
// through a Consumer on a SQLite queue: the second customer's second event fails once
// and is retried without being overtaken, the third customer's last event is poison
// and lands in the dead-letter queue with its reason, and after the handler is
// fixed a redrive sends it back and it is handled.
func runQueueDemo(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("queue-demo", flag.ExitOnError)
	path := fs.String("db", "", "SQLite database file; messages left there by earlier runs are purged (default: a fresh file in a temporary directory)")
	customers := fs.Int("customers", 3, "number of customers (routing keys), at least 3")
	perCustomer := fs.Int("events", 4, "events per customer, at least 2")
	workers := fs.Int("workers", 4, "concurrent handlers")
	fs.Parse(args)
	if *customers < 3 || *perCustomer < 2 || *workers < 1 {
		return errors.New("queue-demo: want -customers >= 3, -events >= 2 and -workers >= 1")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *path == "" {
		dir, err := os.MkdirTemp("", "duroq-queue-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*path = filepath.Join(dir, "queue.db")
	}
	q, err := sqlite.Open(*path, sqlite.Options{})
	if err != nil {
		return err
	}
	defer q.Close()
	leftovers := 0
	for _, name := range []string{demoQueue, demoDeadLetters} {
		n, err := q.Purge(ctx, name, mq.PurgeOptions{})
		if err != nil {
			return err
		}
		leftovers += n
	}
	fmt.Fprintf(out, "Queue %q in the SQLite file %s", demoQueue, *path)
	if leftovers > 0 {
		fmt.Fprintf(out, " (messages left by an earlier run, removed: %d)", leftovers)
	}
	fmt.Fprintln(out, ".")

	d := &queueDemoRun{
		flaky:   orderEvent{Customer: demoName(demoCustomers, "customer", 1), Step: demoName(demoSteps, "step", 1)},
		poison:  orderEvent{Customer: demoName(demoCustomers, "customer", 2), Step: demoName(demoSteps, "step", *perCustomer-1)},
		handled: map[string][]string{},
	}
	events := mq.NewTyped[orderEvent](q, nil)
	var names []string
	for c := range *customers {
		names = append(names, demoName(demoCustomers, "customer", c))
	}
	// Step by step, every customer's next event: the customers' events interleave as
	// they would in real traffic.
	for s := range *perCustomer {
		for _, name := range names {
			e := orderEvent{Customer: name, Step: demoName(demoSteps, "step", s), Address: "1 Main Street"}
			if e.Customer == d.poison.Customer && e.Step == d.poison.Step {
				e.Address = "" // the poison message: the handler cannot ship without an address
			}
			if err := events.Enqueue(ctx, mq.Message{Queue: demoQueue, RoutingKey: name}, e); err != nil {
				return err
			}
		}
	}
	total := *customers * *perCustomer
	fmt.Fprintf(out, "Enqueued %d events of %d customers (%s), keyed by customer so that each customer's events are handled one at a time, in order.\n",
		total, *customers, strings.Join(names, ", "))

	consumer, err := mq.NewConsumer(q, demoQueue, mq.PerMessage(func(ctx context.Context, b *mq.Batch, m mq.Delivery) error {
		e, err := events.Codec.Decode(m.Payload)
		if err != nil {
			return err
		}
		return d.handle(e, m.Attempt)
	}), mq.ConsumerOptions{
		Concurrency:     *workers,
		MaxAttempts:     demoMaxAttempts,
		Backoff:         func(int) time.Duration { return demoBackoff },
		DeadLetterQueue: demoDeadLetters,
		OnDeadLetter:    func(*mq.Batch, mq.Delivery, error) { d.finished() },
	})
	if err != nil {
		return err
	}

	began := time.Now()
	if err := d.run(ctx, consumer, total); err != nil {
		return err
	}
	var want []string
	for s := range *perCustomer {
		want = append(want, demoName(demoSteps, "step", s))
	}
	// Until the redrive, the poison customer's last event is missing.
	if err := d.check(names, want, want[:len(want)-1]); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nA consumer with %d concurrent handlers went through the events in %v. Each customer's events, in the order handled:\n",
		*workers, time.Since(began).Round(time.Millisecond))
	for _, name := range names {
		var steps []string
		for _, s := range d.handled[name] {
			if name == d.flaky.Customer && s == d.flaky.Step {
				s += " (after a retry)"
			}
			steps = append(steps, s)
		}
		if name == d.poison.Customer {
			steps = append(steps, fmt.Sprintf("(%s: dead-lettered)", d.poison.Step))
		}
		fmt.Fprintf(out, "  %-8s %s\n", name+":", strings.Join(steps, " → "))
	}
	if d.retryGap == 0 {
		return fmt.Errorf("queue-demo: %s's %q was never retried", d.flaky.Customer, d.flaky.Step)
	}
	fmt.Fprintf(out, "\n%s's %q failed on its first attempt (payment service timed out) and was retried %v later; "+
		"meanwhile %s's later events waited behind it, so none of them overtook it.\n",
		d.flaky.Customer, d.flaky.Step, d.retryGap.Round(time.Millisecond), d.flaky.Customer)

	dead, err := q.Peek(ctx, demoDeadLetters, mq.PeekOptions{})
	if err != nil {
		return err
	}
	if len(dead) != 1 {
		return fmt.Errorf("queue-demo: the dead-letter queue holds %d messages, want the poison message alone", len(dead))
	}
	fmt.Fprintf(out, "%s's %q failed %d times and was moved to the dead-letter queue %q (from queue %q, last error: %q); %s's other events went on.\n",
		dead[0].RoutingKey, d.poison.Step, dead[0].Attempt, demoDeadLetters, dead[0].OriginQueue, dead[0].LastError, d.poison.Customer)

	d.mu.Lock()
	d.fixed = true
	d.mu.Unlock()
	n, err := q.Redrive(ctx, demoDeadLetters, mq.RedriveOptions{})
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("queue-demo: the redrive moved %d messages, want the poison message", n)
	}
	fmt.Fprintf(out, "\nAfter fixing the handler (it now uses the address on file), the dead-letter queue was redriven: %d message back to %q.\n", n, demoQueue)
	if err := d.run(ctx, consumer, n); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s's %q was handled after the redrive.\n", d.poison.Customer, d.poison.Step)

	for _, name := range []string{demoQueue, demoDeadLetters} {
		if st, err := q.Stats(ctx, name); err != nil || st != (mq.Stats{}) {
			return fmt.Errorf("queue-demo: queue %q still holds %+v (%v)", name, st, err)
		}
	}
	if err := d.check(names, want, want); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nEach customer's events were handled in order, each exactly once, and the dead-letter queue was redriven and is empty.\n")
	return nil
}

// queueDemoRun is the state the demo's handler keeps.
type queueDemoRun struct {
	flaky, poison orderEvent // the event that fails once, the one that fails until fixed

	mu        sync.Mutex
	handled   map[string][]string // customer -> the steps handled, in order
	failedAt  time.Time           // when flaky failed
	retryGap  time.Duration       // from flaky's failure to its success
	fixed     bool                // the handler no longer rejects poison
	remaining int                 // events the current run still waits for
	done      context.CancelFunc  // ends the current run
}

// run runs consumer until n more events are handled or dead-lettered.
func (d *queueDemoRun) run(ctx context.Context, consumer *mq.Consumer, n int) error {
	runCtx, done := context.WithCancel(ctx)
	defer done()
	d.mu.Lock()
	d.remaining, d.done = n, done
	d.mu.Unlock()
	if err := consumer.Run(runCtx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errors.New("queue-demo: interrupted")
	}
	return nil
}

// check verifies that each customer's events were handled exactly in the order
// want (poisoned for the poison message's customer).
func (d *queueDemoRun) check(names, want, poisoned []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range names {
		w := want
		if name == d.poison.Customer {
			w = poisoned
		}
		if got := d.handled[name]; !slices.Equal(got, w) {
			return fmt.Errorf("queue-demo: %s's events were handled as %v, want %v", name, got, w)
		}
	}
	return nil
}

// finished counts an event dead-lettered.
func (d *queueDemoRun) finished() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.finishedLocked()
}

// finishedLocked counts an event handled or dead-lettered; d.mu is held.
func (d *queueDemoRun) finishedLocked() {
	if d.remaining--; d.remaining == 0 {
		d.done()
	}
}

// handle is the demo's business logic.
func (d *queueDemoRun) handle(e orderEvent, attempt int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := orderEvent{Customer: e.Customer, Step: e.Step}
	switch {
	case key == d.flaky && attempt == 1:
		d.failedAt = time.Now()
		return errors.New("payment service timed out")
	case e.Address == "" && !d.fixed:
		return errors.New("no delivery address on the event")
	case key == d.flaky:
		d.retryGap = time.Since(d.failedAt)
	}
	d.handled[e.Customer] = append(d.handled[e.Customer], e.Step)
	d.finishedLocked()
	return nil
}
