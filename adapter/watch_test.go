package adapter_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqliteprovider"
)

// readCounter counts the history reads of the clients built on it.
type readCounter struct {
	*adapter.Provider
	reads atomic.Int64
}

func (c *readCounter) Read(ctx context.Context, instance string) ([]provider.Event, error) {
	c.reads.Add(1)
	return c.Provider.Read(ctx, instance)
}

// TestWaitingClientsReadOnlyWhenTheirInstanceChanges: clients waiting for
// instances of a SQLite file while a runtime commits other instances' turns
// hundreds of times a second read their own instance when it changes (and at
// most once a second besides), not at every commit to the file: a process's
// waiters share one read of their instances' state per change (the adapter's
// instance feed). Before it, 50 such waiters read their instances about 200 times
// each in 2 s.
func TestWaitingClientsReadOnlyWhenTheirInstanceChanges(t *testing.T) {
	p, err := sqliteprovider.Open(filepath.Join(t.TempDir(), "duroq.db"), sqliteprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	reg := runtime.NewRegistry()
	must(t, reg.RegisterActivity("Echo", func(_ *runtime.ActivityContext, in string) (string, error) { return in, nil }))
	must(t, reg.RegisterOrchestration("Nap", func(ctx *runtime.Context, in string) (string, error) {
		_, err := ctx.CreateTimer(2 * time.Second).Get()
		return in, err
	}))
	must(t, reg.RegisterOrchestration("Busy", func(ctx *runtime.Context, in string) (string, error) {
		for range 2 {
			if _, err := ctx.ScheduleActivity("Echo", in).Get(); err != nil {
				return "", err
			}
		}
		return in, nil
	}))
	rt, err := runtime.New(p, reg, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()

	counter := &readCounter{Provider: p}
	waiting := runtime.NewClient(counter) // not the runtime's own client, which learns of its ends directly
	const waiters = 50
	for i := range waiters {
		must(t, waiting.StartOrchestration(ctx, fmt.Sprintf("nap-%d", i), "Nap", ""))
	}
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			st, err := waiting.WaitForOrchestration(ctx, fmt.Sprintf("nap-%d", i))
			if err != nil || st.State != runtime.StateCompleted {
				t.Errorf("nap-%d: %+v, %v", i, st, err)
			}
		})
	}
	for i := range 1000 { // commits to the file while the clients wait
		must(t, rt.Client().StartOrchestration(ctx, fmt.Sprintf("busy-%d", i), "Busy", ""))
	}
	wg.Wait()
	for i := range 1000 {
		if _, err := rt.Client().WaitForOrchestration(ctx, fmt.Sprintf("busy-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	<-ran
	reads := counter.reads.Load()
	t.Logf("%d waiting clients read their instances %d times", waiters, reads)
	if reads > waiters*20 {
		t.Fatalf("%d waiting clients read their instances %d times (%.0f each) while 1,000 other instances ran, want at most 20 each",
			waiters, reads, float64(reads)/waiters)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestInstanceWatchEndsAtClose: Close wakes the clients watching instances of a
// SQLite file, and a watch taken after Close is closed already, so that no wait
// outlives its provider.
func TestInstanceWatchEndsAtClose(t *testing.T) {
	p, err := sqliteprovider.Open(filepath.Join(t.TempDir(), "duroq.db"), sqliteprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ch, release := p.WatchInstance(t.Context(), "i")
	defer release()
	if ch == nil {
		t.Fatal("no watch of an instance of a SQLite file")
	}
	must(t, p.Close())
	after, releaseAfter := p.WatchInstance(t.Context(), "j") // never watched: no state of it is known
	defer releaseAfter()
	for _, c := range []<-chan struct{}{ch, after} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("a watch still open 10 s after Close")
		}
	}
}
