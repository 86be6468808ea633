package runtimetest_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/runtime/runtimetest"
)

func newEnv(t *testing.T, reg *runtime.Registry, o runtimetest.Options) *runtimetest.Env {
	t.Helper()
	env, err := runtimetest.New(reg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return env
}

func start(t *testing.T, env *runtimetest.Env, instance, name, input string) {
	t.Helper()
	if err := env.Client().StartOrchestration(t.Context(), instance, name, input); err != nil {
		t.Fatal(err)
	}
}

func wait(t *testing.T, env *runtimetest.Env, instance string) runtime.OrchestrationStatus {
	t.Helper()
	st, err := env.Wait(t.Context(), instance)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestDayLongTimerTakesMilliseconds: an orchestration that waits 24 hours between
// two stubbed activities completes in well under a second of real time, its timer
// recorded a day after the start on the virtual clock.
func TestDayLongTimerTakesMilliseconds(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Remind", func(ctx *runtime.Context, in string) (string, error) {
		first, _ := ctx.ScheduleActivity("Mail", "hello "+in).Get()
		if _, err := ctx.CreateTimer(24 * time.Hour).Get(); err != nil {
			return "", err
		}
		second, err := ctx.ScheduleActivity("Mail", "reminder "+in).Get()
		return first + "; " + second, err
	})
	var calls atomic.Int32
	env := newEnv(t, reg, runtimetest.Options{Activities: map[string]runtime.Activity{
		"Mail": func(_ *runtime.ActivityContext, in string) (string, error) { calls.Add(1); return "sent " + in, nil },
	}})
	began, virtualStart := time.Now(), env.Now()
	start(t, env, "r1", "Remind", "ann")
	st := wait(t, env, "r1")
	real := time.Since(began)
	if st.State != runtime.StateCompleted || st.Output != "sent hello ann; sent reminder ann" || calls.Load() != 2 {
		t.Fatalf("status %+v after %d calls of the stub; want completed with both mails", st, calls.Load())
	}
	if got := env.Now().Sub(virtualStart); got != 24*time.Hour {
		t.Errorf("virtual time went on %v; want exactly the timer's 24h", got)
	}
	if real > time.Second {
		t.Errorf("a 24-hour timer took %v of real time; want well under a second", real)
	}
	t.Logf("24-hour timer orchestration: %v real time", real)
	history, err := env.History(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range history {
		kinds = append(kinds, string(ev.Kind))
		if ev.Kind == provider.EventTimerCreated && ev.FireAtMs != virtualStart.Add(24*time.Hour).UnixMilli() {
			t.Errorf("timer fires at %v; want a day after the virtual start", time.UnixMilli(ev.FireAtMs))
		}
	}
	want := []string{"OrchestrationStarted", "ActivityScheduled", "ActivityCompleted", "TimerCreated", "TimerFired",
		"ActivityScheduled", "ActivityCompleted", "OrchestrationCompleted"}
	if !slices.Equal(kinds, want) {
		t.Errorf("history %v; want %v", kinds, want)
	}
}

// TestEventsAtVirtualTimesRaceTimers: an event raised before a timeout wins, one
// raised after it loses, whatever the real timing.
func TestEventsAtVirtualTimesRaceTimers(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Approve", func(ctx *runtime.Context, in string) (string, error) {
		if ctx.Select(ctx.WaitForEvent("approve"), ctx.CreateTimer(time.Hour)) == 0 {
			return "approved at " + ctx.Now().Format("15:04"), nil
		}
		return "timed out at " + ctx.Now().Format("15:04"), nil
	})
	env := newEnv(t, reg, runtimetest.Options{})
	t0 := env.Now()
	start(t, env, "early", "Approve", "")
	start(t, env, "late", "Approve", "")
	env.RaiseEventAt(t0.Add(59*time.Minute), "early", "approve", "")
	env.RaiseEventAt(t0.Add(61*time.Minute), "late", "approve", "")
	if got := wait(t, env, "early").Output; got != "approved at 00:59" {
		t.Errorf("early: %q; want approved at 00:59", got)
	}
	if got := wait(t, env, "late").Output; got != "timed out at 01:00" {
		t.Errorf("late: %q; want timed out at 01:00", got)
	}
}

// TestRetryBackoffRunsOnTheVirtualClock: an activity retried with ten-minute
// backoffs succeeds on its third attempt twenty minutes later, at once.
func TestRetryBackoffRunsOnTheVirtualClock(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Flaky", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivityWithRetry("Call", in, runtime.RetryPolicy{MaxAttempts: 3,
			Backoff: runtime.FixedBackoff{Interval: 10 * time.Minute}}).Get()
	})
	var attempts atomic.Int32
	env := newEnv(t, reg, runtimetest.Options{Activities: map[string]runtime.Activity{
		"Call": func(_ *runtime.ActivityContext, in string) (string, error) {
			if attempts.Add(1) < 3 {
				return "", errors.New("unavailable")
			}
			return "ok", nil
		},
	}})
	t0 := env.Now()
	start(t, env, "f", "Flaky", "")
	if st := wait(t, env, "f"); st.Output != "ok" || attempts.Load() != 3 {
		t.Fatalf("status %+v after %d attempts; want ok on the third", st, attempts.Load())
	}
	if got := env.Now().Sub(t0); got != 20*time.Minute {
		t.Errorf("virtual time went on %v; want two backoffs of 10m", got)
	}
}

// TestRunUntilShowsTheStateAtATime: RunUntil stops the clock at the time asked, with
// what was due by then done and what comes later not.
func TestRunUntilShowsTheStateAtATime(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Steps", func(ctx *runtime.Context, in string) (string, error) {
		for i, step := range []string{"one", "two", "three"} {
			if i > 0 {
				ctx.CreateTimer(time.Hour).Get()
			}
			ctx.SetCustomStatus(step)
		}
		return "done", nil
	})
	env := newEnv(t, reg, runtimetest.Options{})
	t0 := env.Now()
	start(t, env, "s", "Steps", "")
	for _, c := range []struct {
		after time.Duration
		want  string
	}{{30 * time.Minute, "one"}, {time.Hour, "two"}, {90 * time.Minute, "two"}} {
		if err := env.RunUntil(t.Context(), t0.Add(c.after)); err != nil {
			t.Fatal(err)
		}
		st, err := env.Client().Status(t.Context(), "s")
		if err != nil {
			t.Fatal(err)
		}
		if st.CustomStatus == nil || *st.CustomStatus != c.want || env.Now() != t0.Add(c.after) {
			t.Fatalf("at +%v: custom status %v, clock +%v; want %q at +%v", c.after, st.CustomStatus, env.Now().Sub(t0), c.want, c.after)
		}
	}
	if st := wait(t, env, "s"); st.Output != "done" || env.Now() != t0.Add(2*time.Hour) {
		t.Fatalf("status %+v at +%v; want done at +2h", st, env.Now().Sub(t0))
	}
}

// TestWaitForWhatNeverComesStalls: Wait reports ErrStalled, naming the instance,
// instead of hanging when nothing can move the instance on.
func TestWaitForWhatNeverComesStalls(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterOrchestration("Forever", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.WaitForEvent("never").Get()
	})
	env := newEnv(t, reg, runtimetest.Options{})
	start(t, env, "stuck", "Forever", "")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := env.Wait(ctx, "stuck")
	if !errors.Is(err, runtimetest.ErrStalled) || !strings.Contains(err.Error(), `"stuck"`) {
		t.Fatalf("Wait = %v; want ErrStalled naming the instance", err)
	}
}

// TestStubsLeaveTheRegistryAlone: a stub replaces its activity in the Env only.
func TestStubsLeaveTheRegistryAlone(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Real", func(*runtime.ActivityContext, string) (string, error) { return "real", nil })
	_ = reg.RegisterOrchestration("Call", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Real", in).Get()
	})
	stubbed := newEnv(t, reg, runtimetest.Options{Activities: map[string]runtime.Activity{
		"Real": func(*runtime.ActivityContext, string) (string, error) { return "stub", nil },
	}})
	plain := newEnv(t, reg, runtimetest.Options{})
	start(t, stubbed, "a", "Call", "")
	start(t, plain, "a", "Call", "")
	if got := wait(t, stubbed, "a").Output; got != "stub" {
		t.Errorf("stubbed env ran %q; want the stub", got)
	}
	if got := wait(t, plain, "a").Output; got != "real" {
		t.Errorf("the registry's own activity ran %q after another env stubbed it; want real", got)
	}
	if _, err := runtimetest.New(reg, runtimetest.Options{Activities: map[string]runtime.Activity{"Real": nil}}); err == nil {
		t.Error("New accepted a nil stub")
	}
}

// TestExportedHistoriesRoundTripAndReplay: histories exported from a provider
// survive WriteHistories and ReadHistories exactly, replay cleanly against the code
// that recorded them (a continue-as-new chain and a sub-orchestration included) and
// flag a change.
func TestExportedHistoriesRoundTripAndReplay(t *testing.T) {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Add", func(_ *runtime.ActivityContext, in string) (string, error) { return in + "+", nil })
	_ = reg.RegisterOrchestration("Child", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Add", in).Get()
	})
	_ = reg.RegisterOrchestration("Loop", func(ctx *runtime.Context, in string) (string, error) {
		out, err := ctx.ScheduleSubOrchestration("Child", in).Get()
		if err != nil {
			return "", err
		}
		if len(out) < 3 {
			return "", ctx.ContinueAsNew(out)
		}
		return out, nil
	})
	env := newEnv(t, reg, runtimetest.Options{})
	start(t, env, "loop", "Loop", "")
	if st := wait(t, env, "loop"); st.Output != "+++" {
		t.Fatalf("status %+v; want +++", st)
	}
	admin, err := env.Client().Admin()
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := runtimetest.Export(t.Context(), admin, runtimetest.ExportFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != 6 { // Loop's 3 executions and its 3 children
		t.Fatalf("exported %d executions; want 6", len(recorded))
	}
	loops, err := runtimetest.Export(t.Context(), admin, runtimetest.ExportFilter{Orchestrations: []string{"Loop"}})
	if err != nil || len(loops) != 3 {
		t.Fatalf("Export of Loop = %d executions, %v; want 3", len(loops), err)
	}
	if _, err := runtimetest.Export(t.Context(), admin, runtimetest.ExportFilter{Instances: []string{"nobody"}}); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Export of an unknown instance = %v; want ErrNotFound", err)
	}
	var buf bytes.Buffer
	if err := runtimetest.WriteHistories(&buf, recorded); err != nil {
		t.Fatal(err)
	}
	read, err := runtimetest.ReadHistories(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(read, recorded, func(a, b runtimetest.Execution) bool {
		return a.Instance == b.Instance && a.ExecutionID == b.ExecutionID && slices.EqualFunc(a.Events, b.Events, sameEvent)
	}) {
		t.Fatalf("histories changed through JSON:\n%+v\nwant\n%+v", read, recorded)
	}
	if err := runtimetest.ReplayExecutions(t.Context(), reg, read); err != nil {
		t.Fatalf("replay against the recording code: %v", err)
	}
	changed := runtime.NewRegistry()
	_ = changed.RegisterOrchestration("Child", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Add", in+"x").Get()
	})
	_ = changed.RegisterOrchestration("Loop", func(ctx *runtime.Context, in string) (string, error) { return "", nil })
	err = runtimetest.ReplayExecutions(t.Context(), changed, read)
	if !errors.Is(err, runtime.ErrNondeterminism) || strings.Count(err.Error(), "nondeterminism") != 6 {
		t.Fatalf("replay against changed code = %v; want all 6 executions flagged", err)
	}
}

func sameEvent(a, b provider.Event) bool {
	ja, _ := provider.MarshalEvent(&a)
	jb, _ := provider.MarshalEvent(&b)
	return bytes.Equal(ja, jb)
}

// TestReadHistoriesRejectsOtherDocuments: a file that is not an export is refused
// with ErrInvalid and a bounded message.
func TestReadHistoriesRejectsOtherDocuments(t *testing.T) {
	for _, doc := range []string{`{"format":"` + strings.Repeat("x", 1<<20) + `","executions":[]}`, `{"executions":[]}`, `[1,2]`, `{`} {
		_, err := runtimetest.ReadHistories(strings.NewReader(doc))
		if !errors.Is(err, provider.ErrInvalid) || len(err.Error()) > 300 {
			t.Errorf("ReadHistories(%.30q) = %.300v; want a short ErrInvalid", doc, err)
		}
	}
}
