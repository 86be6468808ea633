package readme_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/runtimetest"
)

// trial charges a card after a 24-hour trial, unless the customer cancels first.
func trial(ctx *runtime.Context, customer string) (string, error) {
	timer := ctx.CreateTimer(24 * time.Hour)
	cancel := ctx.WaitForEvent("cancel")
	if ctx.Select(timer, cancel) == 1 {
		return "cancelled", nil
	}
	return ctx.ScheduleActivity("Charge", customer).Get()
}

func registry() *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Trial", trial)
	_ = reg.RegisterActivity("Charge", func(*runtime.ActivityContext, string) (string, error) {
		return "", errors.New("the real payment service is not reachable from tests")
	})
	return reg
}

// A 24-hour timer fires at once on the virtual clock, and the payment activity is
// stubbed; a second customer cancels after three hours of virtual time.
func Example_runtimetest() {
	env, err := runtimetest.New(registry(), runtimetest.Options{
		Activities: map[string]runtime.Activity{
			"Charge": func(_ *runtime.ActivityContext, customer string) (string, error) { return "charged " + customer, nil },
		},
	})
	if err != nil {
		panic(err)
	}
	defer env.Close()
	ctx := context.Background()
	start := env.Now()

	_ = env.Client().StartOrchestration(ctx, "ann", "Trial", "ann")
	_ = env.Client().StartOrchestration(ctx, "bob", "Trial", "bob")
	env.RaiseEventAt(start.Add(3*time.Hour), "bob", "cancel", "")

	bob, _ := env.Wait(ctx, "bob")
	fmt.Println("bob:", bob.Output, "after", env.Now().Sub(start))
	ann, _ := env.Wait(ctx, "ann")
	fmt.Println("ann:", ann.Output, "after", env.Now().Sub(start))
	// Output:
	// bob: cancelled after 3h0m0s
	// ann: charged ann after 24h0m0s
}

// A replay test: histories recorded with one version of the code (here recorded by
// an Env; in production exported with `duroq export`) are replayed against changed
// code, which would break the instances that run them.
func Example_replayExecutions() {
	ctx := context.Background()
	env, _ := runtimetest.New(registry(), runtimetest.Options{Activities: map[string]runtime.Activity{
		"Charge": func(*runtime.ActivityContext, string) (string, error) { return "ok", nil },
	}})
	_ = env.Client().StartOrchestration(ctx, "ann", "Trial", "ann")
	_ = env.RunUntil(ctx, env.Now().Add(time.Hour)) // ann's trial is running
	admin, _ := env.Client().Admin()
	recorded, _ := runtimetest.Export(ctx, admin, runtimetest.ExportFilter{})
	env.Close()

	fmt.Println("same code:", runtimetest.ReplayExecutions(ctx, registry(), recorded))

	changed := runtime.NewRegistry()
	_ = changed.RegisterOrchestration("Trial", func(ctx *runtime.Context, customer string) (string, error) {
		// The trial now lasts a week and starts with a welcome mail.
		if _, err := ctx.ScheduleActivity("Welcome", customer).Get(); err != nil {
			return "", err
		}
		return trial(ctx, customer)
	})
	err := runtimetest.ReplayExecutions(ctx, changed, recorded)
	fmt.Println("changed code breaks running instances:", errors.Is(err, runtime.ErrNondeterminism))
	fmt.Println(err)
	// Output:
	// same code: <nil>
	// changed code breaks running instances: true
	// replay of instance "ann" execution 1 (Trial 1.0.0): runtime: nondeterminism: decision 1 (event 2): the code now decides ActivityScheduled where history recorded TimerCreated
}
