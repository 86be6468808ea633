package readme_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/sqliteprovider"
)

// The runtime in 30 seconds (README): a checkout charges, waits for an approval
// queued by the client (or gives up after a day), and ships in a
// sub-orchestration, on a SQLite file.
func Example_checkout() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	reg := runtime.NewRegistry()
	err = errors.Join(
		reg.RegisterActivity("Charge", func(ctx *runtime.ActivityContext, order string) (string, error) {
			return "receipt-" + order, nil // runs on a worker, at least once; ctx is cancelled if the orchestration gives up
		}),
		reg.RegisterOrchestration("Checkout", func(ctx *runtime.Context, order string) (string, error) {
			receipt, err := ctx.ScheduleActivity("Charge", order).Get()
			if err != nil {
				return "", err
			}
			// The approval waits in the instance's "approvals" queue until taken here,
			// however early it was sent (an event raised with RaiseEvent before
			// WaitForEvent runs would be dropped).
			approval := ctx.DequeueEvent("approvals")
			if ctx.Select(approval, ctx.CreateTimer(24*time.Hour)) == 1 { // durable timer; the loser is cancelled
				return "", errors.New("not approved in time")
			}
			return ctx.ScheduleSubOrchestration("Ship", receipt).Get()
		}),
		reg.RegisterOrchestration("Ship", func(ctx *runtime.Context, receipt string) (string, error) {
			return "shipped against " + receipt, nil
		}))
	if err != nil {
		panic(err)
	}

	p, err := sqliteprovider.Open(filepath.Join(dir, "app.db"), sqliteprovider.Options{}) // or pgprovider.Open / adapter.NewMemory
	if err != nil {
		panic(err)
	}
	defer p.Close() // returns once the file is closed, its WAL checkpointed into app.db
	rt, err := runtime.New(p, reg, runtime.Options{})
	if err != nil {
		panic(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }() // orchestration dispatchers + workers; cancel ctx to drain and stop

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "order-42", "Checkout", "42"); err != nil { // idempotent per instance id
		panic(err)
	}
	if err := client.EnqueueEvent(ctx, "order-42", "approvals", "ok"); err != nil { // kept until dequeued
		panic(err)
	}
	status, err := client.WaitForOrchestration(ctx, "order-42") // Completed / Failed, output, custom status
	fmt.Println(status.State, status.Output, err)
	stop()
	fmt.Println("runtime stopped:", <-ran)
	// Output:
	// Completed shipped against receipt-42 <nil>
	// runtime stopped: <nil>
}
