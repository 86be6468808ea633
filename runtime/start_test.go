package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

// TestStartPolicies: StartOrchestrationWith's IfExists policies on every backend,
// with racing starts from two providers over one database (two processes, as far
// as the database can tell).
func TestStartPolicies(t *testing.T) {
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) {
			a, b := pair.open(t)
			testStartPolicies(t, a, b)
		})
	}
}

func testStartPolicies(t *testing.T, pa, pb *adapter.Provider) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Echo", func(ctx *runtime.Context, in string) (string, error) { return "echo " + in, nil })
	_ = reg.RegisterOrchestration("Waiter", func(ctx *runtime.Context, in string) (string, error) {
		ctx.SetCustomStatus("waiting")
		return ctx.WaitForEvent("go").Get()
	})
	ca, cb := runtime.NewClient(pa), runtime.NewClient(pb)
	reject := runtime.StartOptions{IfExists: runtime.StartRejectExisting}
	again := runtime.StartOptions{IfExists: runtime.StartAfterEnded}

	// No runtime runs yet: the starts stay pending.
	if err := ca.StartOrchestrationWith(ctx, "one", "Echo", "1", reject); err != nil {
		t.Fatalf("the first start, rejecting existing: %v", err)
	}
	if err := cb.StartOrchestrationWith(ctx, "one", "Echo", "2", reject); !errors.Is(err, runtime.ErrInstanceExists) {
		t.Fatalf("a start rejecting existing while a start is pending = %v, want ErrInstanceExists", err)
	}
	if err := cb.StartOrchestrationWith(ctx, "one", "Echo", "3", again); !errors.Is(err, runtime.ErrInstanceExists) {
		t.Fatalf("a start after ended while a start is pending = %v, want ErrInstanceExists", err)
	}
	if err := cb.StartOrchestration(ctx, "one", "Echo", "4"); err != nil {
		t.Fatalf("a plain start while a start is pending = %v, want nil (it returns the existing)", err)
	}
	// Racing starts of a new instance: exactly one wins, from either provider.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		wg.Go(func() { errs <- c.StartOrchestrationWith(ctx, "raced", "Echo", fmt.Sprint(i), reject) })
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, runtime.ErrInstanceExists):
			t.Fatalf("a racing start failed with %v, want nil or ErrInstanceExists", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of 8 racing starts rejecting existing succeeded, want 1", won)
	}

	rt := runOn(t, pa, reg, runtime.Options{})
	c := rt.Client()
	for _, id := range []string{"one", "raced"} {
		if st, err := c.WaitForOrchestration(ctx, id); err != nil || st.State != runtime.StateCompleted {
			t.Fatalf("%s: %+v, %v", id, st, err)
		}
	}
	if st, _ := c.Status(ctx, "one"); st.Output != "echo 1" {
		t.Fatalf("one's output is %q, want the first start's, echo 1", st.Output)
	}
	if err := c.StartOrchestrationWith(ctx, "one", "Echo", "5", reject); !errors.Is(err, runtime.ErrInstanceExists) {
		t.Fatalf("a start rejecting existing of a completed instance = %v, want ErrInstanceExists", err)
	}
	if err := c.StartOrchestrationWith(ctx, "one", "Echo", "6", again); err != nil {
		t.Fatalf("a start after ended of a completed instance: %v", err)
	}
	waitOutput(t, ctx, c, "one", "echo 6")

	// A running instance is not started again.
	if err := c.StartOrchestration(ctx, "waiter", "Waiter", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForStatusChange(ctx, "waiter", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.StartOrchestrationWith(ctx, "waiter", "Waiter", "", again); !errors.Is(err, runtime.ErrInstanceExists) {
		t.Fatalf("a start after ended of a running instance = %v, want ErrInstanceExists", err)
	}
	if err := c.RaiseEvent(ctx, "waiter", "go", "went"); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, ctx, c, "waiter", "went")
}

// waitOutput waits until instance completed with output want.
func waitOutput(t *testing.T, ctx context.Context, c *runtime.Client, instance, want string) {
	t.Helper()
	for {
		st, err := c.WaitForOrchestration(ctx, instance)
		if err != nil {
			t.Fatalf("%s: %v", instance, err)
		}
		if st.State == runtime.StateCompleted && st.Output == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %+v, want completed with %q", instance, st, want)
		}
		time.Sleep(time.Millisecond) // the restarted execution has not completed yet
	}
}
