package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// TestLimits: Client.SetActivityLimit and SetStartLimit on every backend, with two
// runtimes over one database (two processes, as far as the database can tell).
func TestLimits(t *testing.T) {
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) {
			a, b := pair.open(t)
			t.Run("activities", func(t *testing.T) { testActivityLimit(t, a, b) })
			t.Run("starts", func(t *testing.T) { testStartLimit(t, a, b) })
		})
	}
}

// testActivityLimit: 12 Slow activities, limited to 2 at once, and 4 Fast ones,
// not limited, run by two runtimes of 8 workers each: never more than 2 Slow at
// once, and every activity completes.
func testActivityLimit(t *testing.T, pa, pb *adapter.Provider) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const slow, fast, limit = 12, 4, 2
	var running, most, fastDone atomic.Int64
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Slow", func(ctx *runtime.ActivityContext, in string) (string, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		return in, nil
	})
	_ = reg.RegisterActivity("Fast", func(ctx *runtime.ActivityContext, in string) (string, error) {
		fastDone.Add(1)
		return in, nil
	})
	_ = reg.RegisterOrchestration("FanOut", func(ctx *runtime.Context, in string) (string, error) {
		var fs []*runtime.Future
		for i := range slow {
			fs = append(fs, ctx.ScheduleActivity("Slow", fmt.Sprint(i)))
		}
		for i := range fast {
			fs = append(fs, ctx.ScheduleActivity("Fast", fmt.Sprint(i)))
		}
		for _, f := range fs {
			if _, err := f.Get(); err != nil {
				return "", err
			}
		}
		return "done", nil
	})
	c := runtime.NewClient(pa)
	if err := c.SetActivityLimit(ctx, "Slow", runtime.Limit{MaxInFlight: limit}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.SetActivityLimit(context.Background(), "Slow", runtime.Limit{}); err != nil {
			t.Error(err)
		}
	}()
	runOn(t, pa, reg, runtime.Options{WorkerConcurrency: 8})
	runOn(t, pb, reg, runtime.Options{WorkerConcurrency: 8})
	if err := c.StartOrchestration(ctx, "fan", "FanOut", ""); err != nil {
		t.Fatal(err)
	}
	st, err := c.WaitForOrchestration(ctx, "fan")
	if err != nil || st.Output != "done" {
		t.Fatalf("FanOut = %+v, %v; want done", st, err)
	}
	if m := most.Load(); m > limit {
		t.Fatalf("%d Slow activities ran at once; SetActivityLimit allows %d", m, limit)
	}
	if fastDone.Load() != fast {
		t.Fatalf("%d Fast activities ran, want %d", fastDone.Load(), fast)
	}
	t.Logf("at most %d Slow activities at once (limit %d)", most.Load(), limit)

	if err := c.SetActivityLimit(ctx, "", runtime.Limit{MaxInFlight: 1}); !errors.Is(err, provider.ErrInvalid) {
		t.Fatalf("SetActivityLimit without a name = %v, want ErrInvalid", err)
	}
	if err := c.SetActivityLimit(ctx, "Slow", runtime.Limit{Rate: 1}); !errors.Is(err, provider.ErrInvalid) {
		t.Fatalf("SetActivityLimit with a Rate but no Per = %v, want ErrInvalid", err)
	}
}

// testStartLimit: under a rate of 2 starts an hour (a full bucket: 2 at once),
// 2 of 3 orchestrations start and the third waits, pending, until the limit is
// removed.
func testStartLimit(t *testing.T, pa, pb *adapter.Provider) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Echo", func(ctx *runtime.Context, in string) (string, error) { return in, nil })
	c := runtime.NewClient(pa)
	if err := c.SetStartLimit(ctx, runtime.Limit{Rate: 2, Per: time.Hour}); err != nil {
		t.Fatal(err)
	}
	runOn(t, pa, reg, runtime.Options{})
	runOn(t, pb, reg, runtime.Options{})
	ids := []string{"s1", "s2", "s3"}
	for _, id := range ids {
		if err := c.StartOrchestration(ctx, id, "Echo", id); err != nil {
			t.Fatal(err)
		}
	}
	completed := func() (n int) {
		for _, id := range ids {
			st, err := c.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == runtime.StateCompleted {
				n++
			}
		}
		return n
	}
	for completed() < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of 3 orchestrations completed; the start limit admits 2", completed())
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The third start stays held: the two runtimes poll meanwhile.
	time.Sleep(300 * time.Millisecond)
	if n := completed(); n != 2 {
		t.Fatalf("%d of 3 orchestrations completed under a rate of 2 starts an hour, want 2", n)
	}
	if err := c.SetStartLimit(ctx, runtime.Limit{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if st, err := c.WaitForOrchestration(ctx, id); err != nil || st.Output != id {
			t.Fatalf("%s after the limit was removed = %+v, %v", id, st, err)
		}
	}
}
