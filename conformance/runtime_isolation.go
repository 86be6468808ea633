package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerRuntimeGroup(runtimeGroup{name: "Isolation", cases: []runtimeCase{
		{"BlockingTurnDoesNotStallOthers", rtBlockingTurnDoesNotStallOthers},
		{"BlockingCodeFailsAfterMaxAttempts", rtBlockingCodeFailsAfterMaxAttempts},
		{"UnstorableOutputFailsAtOnce", rtUnstorableOutputFailsAtOnce},
		{"UnregisteredFailsWithItsReason", rtUnregisteredFailsWithItsReason},
		{"ClosedProviderStopsRun", rtClosedProviderStopsRun},
		{"ActivityIgnoringCancellationDoesNotHoldRun", rtActivityIgnoringCancellationDoesNotHoldRun},
	}})
}

// blocker returns an orchestration whose code blocks until the test ends (as code
// that waits on a channel, a lock or the network by mistake would), counting its
// runs.
func blocker(t *testing.T, runs *atomic.Int32) runtime.Orchestration {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the runtime stops: see rig.start
	return func(*runtime.Context, string) (string, error) {
		runs.Add(1)
		<-release
		return "", nil
	}
}

// One instance whose code never yields is fetched with 99 others: they complete
// without waiting for its turn timeout, and Run returns within DrainTimeout and a
// small bound although the blocked code never returns.
func rtBlockingTurnDoesNotStallOthers(t *testing.T, e renv) {
	r := e.rig(t)
	var runs atomic.Int32
	reg := newRegistry(t).
		orch("Blocker", blocker(t, &runs)).
		orch("Quick", func(_ *runtime.Context, in string) (string, error) { return in, nil })
	r.startOrch("blocked", "Blocker", "")
	for i := range 99 {
		r.startOrch(fmt.Sprintf("quick-%d", i), "Quick", "ok")
	}
	const turnTimeout = 60 * time.Second // far beyond the wait below: nobody may wait for it
	h := r.startFast(reg.Registry, func(o *runtime.Options) { o.TurnTimeout = turnTimeout; o.OrchestrationConcurrency = 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 99 {
		st, err := r.C.WaitForOrchestration(ctx, fmt.Sprintf("quick-%d", i))
		if err != nil {
			t.Fatalf("quick-%d did not complete while another instance's code blocked: %v (status %s)", i, err, st.State)
		}
		completed(t, st, "ok")
	}
	if runs.Load() == 0 {
		t.Fatal("the blocking orchestration never ran: the case proves nothing")
	}

	began := time.Now()
	h.stop()
	// DrainTimeout (2 s in fastOptions) plus the runtime's one-second bound, with a
	// margin for a loaded machine.
	if took := time.Since(began); took > fastOptions().DrainTimeout+4*time.Second {
		t.Fatalf("Run returned %v after its context ended, with blocked code running", took)
	}
}

// Code that blocks on every attempt is given up after each TurnTimeout and, after
// MaxAttempts, its instance fails saying its code blocked.
func rtBlockingCodeFailsAfterMaxAttempts(t *testing.T, e renv) {
	r := e.rig(t)
	var runs atomic.Int32
	reg := newRegistry(t).orch("Blocker", blocker(t, &runs))
	r.startFast(reg.Registry, func(o *runtime.Options) { o.TurnTimeout = 200 * time.Millisecond; o.MaxAttempts = 2 })
	d := failed(t, r.run("blocked", "Blocker", ""))
	if msg := d.DisplayMessage(); !strings.Contains(msg, "blocked") || !strings.Contains(msg, "turn timeout") {
		t.Fatalf("failure %q does not say that the code blocked", msg)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the blocking code ran %d times, want MaxAttempts = 2", n)
	}
}

// An orchestration whose output can never be stored (over the event size limit)
// fails after one attempt, with the reason in its status.
func rtUnstorableOutputFailsAtOnce(t *testing.T, e renv) {
	r := e.rig(t)
	var runs atomic.Int32
	reg := newRegistry(t).orch("Huge", func(*runtime.Context, string) (string, error) {
		runs.Add(1)
		return strings.Repeat("x", 5<<20), nil
	})
	r.startFast(reg.Registry)
	d := failed(t, r.run("huge", "Huge", ""))
	if msg := d.DisplayMessage(); !strings.Contains(msg, "cannot be stored") || len(msg) > 4096 {
		t.Fatalf("failure %.300q (%d bytes) does not give the reason, bounded", msg, len(msg))
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the orchestration ran %d times, want 1", n)
	}
}

// An orchestration no runtime has registered fails past MaxAttempts with a reason
// naming it, not a bare attempt count.
func rtUnregisteredFailsWithItsReason(t *testing.T, e renv) {
	r := e.rig(t)
	r.startFast(newRegistry(t).Registry, func(o *runtime.Options) { o.MaxAttempts = 2 })
	d := failed(t, r.run("ghost", "NeverRegistered", ""))
	if msg := d.DisplayMessage(); !strings.Contains(msg, "NeverRegistered") || !strings.Contains(msg, "not registered") {
		t.Fatalf("failure %q does not say the orchestration is not registered", msg)
	}
}

// A runtime whose provider is closed stops, and Run returns the error.
func rtClosedProviderStopsRun(t *testing.T, e renv) {
	r := e.rig(t)
	h := r.startFast(newRegistry(t).Registry)
	if err := r.P.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.done:
		h.closed = true
		if !errors.Is(err, provider.ErrClosed) {
			t.Fatalf("Run returned %v, want an error matching provider.ErrClosed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its provider was closed")
	}
}

// An activity that ignores its context does not keep Run from returning: Run
// returns within DrainTimeout and a small bound.
func rtActivityIgnoringCancellationDoesNotHoldRun(t *testing.T, e renv) {
	r := e.rig(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	reg := newRegistry(t).
		act("Stuck", func(*runtime.ActivityContext, string) (string, error) {
			started <- struct{}{}
			<-release // ignores its context
			return "", nil
		}).
		orch("CallsStuck", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Stuck", in).Get()
		})
	var logs strings.Builder
	var logsMu sync.Mutex
	h := r.startFast(reg.Registry, func(o *runtime.Options) {
		o.ActivityCancellationGrace = time.Minute
		o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logsMu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	r.startOrch("stuck", "CallsStuck", "")
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatal("the activity never started")
	}
	began := time.Now()
	h.stop()
	if took := time.Since(began); took > fastOptions().DrainTimeout+4*time.Second {
		t.Fatalf("Run returned %v after its context ended, with an activity ignoring cancellation", took)
	}
	logsMu.Lock()
	logged := logs.String()
	logsMu.Unlock()
	if !strings.Contains(logged, "activity still running as the runtime stops") || !strings.Contains(logged, "instance=stuck") {
		t.Errorf("the activity left running is not logged with its instance; warnings:\n%s", logged)
	}
	// The runtime's worker still waits for the activity: release it and let the
	// worker settle it before the provider is closed.
	close(release)
	m, ok := r.P.(provider.ManagedProvider)
	if !ok {
		return
	}
	eventually(t, "the released activity to be settled", func() bool {
		d, err := m.Management().GetQueueDepths(context.Background())
		return err == nil && d.WorkerQueue == 0
	})
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
