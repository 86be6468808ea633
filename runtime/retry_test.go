package runtime

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// Unit tests of the retry policies (ports of duroxide's
// tests/schedule_with_retry_tests.rs backoff and policy tests) and of
// ScheduleActivityWithRetry driven through RunTurn with hand-fed completions.

// delayWithin runs b.Delay(attempt) and fails the test when it does not return
// within a second (a backoff must be O(1)-ish, whatever the attempt number).
func delayWithin(t *testing.T, b Backoff, attempt int) time.Duration {
	t.Helper()
	out := make(chan time.Duration, 1)
	go func() { out <- b.Delay(attempt) }()
	select {
	case d := <-out:
		return d
	case <-time.After(time.Second):
		t.Fatalf("%#v.Delay(%d) did not return within 1s", b, attempt)
		return 0
	}
}

func checkDelays(t *testing.T, b Backoff, want map[int]time.Duration) {
	t.Helper()
	for attempt, w := range want {
		if got := delayWithin(t, b, attempt); got != w {
			t.Errorf("%#v.Delay(%d) = %v, want %v", b, attempt, got, w)
		}
	}
}

// test_backoff_none_always_zero, test_backoff_fixed_same_delay, test_backoff_fixed_zero_delay
func TestBackoffNoneAndFixed(t *testing.T) {
	checkDelays(t, NoBackoff{}, map[int]time.Duration{1: 0, 2: 0, 10: 0, math.MaxInt: 0})
	checkDelays(t, FixedBackoff{Interval: 250 * time.Millisecond}, map[int]time.Duration{
		1: 250 * time.Millisecond, 2: 250 * time.Millisecond, 7: 250 * time.Millisecond, math.MaxInt: 250 * time.Millisecond})
	checkDelays(t, FixedBackoff{}, map[int]time.Duration{1: 0, 5: 0})
}

// test_backoff_linear_multiplies_by_attempt, test_backoff_linear_respects_max, test_backoff_linear_zero_base
func TestBackoffLinear(t *testing.T) {
	ms := time.Millisecond
	checkDelays(t, LinearBackoff{Base: 100 * ms}, map[int]time.Duration{1: 100 * ms, 2: 200 * ms, 3: 300 * ms, 10: time.Second})
	checkDelays(t, LinearBackoff{Base: 100 * ms, Max: 350 * ms}, map[int]time.Duration{
		1: 100 * ms, 3: 300 * ms, 4: 350 * ms, 5: 350 * ms, 1000: 350 * ms})
	checkDelays(t, LinearBackoff{Max: time.Second}, map[int]time.Duration{1: 0, 100: 0, math.MaxInt: 0})
}

// Overflow safety: Base×attempt must not wrap around for huge attempt numbers.
func TestBackoffLinearHugeAttemptDoesNotOverflow(t *testing.T) {
	capped := LinearBackoff{Base: time.Hour, Max: 10 * time.Minute}
	for _, attempt := range []int{1 << 20, 1 << 40, math.MaxInt / 2, math.MaxInt} {
		if got := delayWithin(t, capped, attempt); got != 10*time.Minute {
			t.Errorf("capped linear Delay(%d) = %v, want the cap 10m", attempt, got)
		}
	}
	uncapped := LinearBackoff{Base: time.Second}
	prev := time.Duration(0)
	for _, attempt := range []int{1, 1000, 1 << 30, 1 << 40, math.MaxInt} {
		got := delayWithin(t, uncapped, attempt)
		if got <= 0 || got > maxDelay || got < prev {
			t.Errorf("uncapped linear Delay(%d) = %v (previous %v): want positive, non-decreasing, at most %v", attempt, got, prev, maxDelay)
		}
		prev = got
	}
	if got := delayWithin(t, uncapped, math.MaxInt); got != maxDelay {
		t.Errorf("uncapped linear Delay(MaxInt) = %v, want the bound %v", got, maxDelay)
	}
}

// test_backoff_exponential_doubles, test_backoff_exponential_respects_max,
// test_backoff_exponential_different_multiplier, test_backoff_exponential_zero_base
func TestBackoffExponential(t *testing.T) {
	ms := time.Millisecond
	checkDelays(t, ExponentialBackoff{Base: 100 * ms, Multiplier: 2}, map[int]time.Duration{
		1: 100 * ms, 2: 200 * ms, 3: 400 * ms, 4: 800 * ms, 5: 1600 * ms})
	checkDelays(t, ExponentialBackoff{Base: 100 * ms, Multiplier: 2, Max: time.Second}, map[int]time.Duration{
		1: 100 * ms, 4: 800 * ms, 5: time.Second, 6: time.Second, 60: time.Second})
	checkDelays(t, ExponentialBackoff{Base: 10 * ms, Multiplier: 3}, map[int]time.Duration{
		1: 10 * ms, 2: 30 * ms, 3: 90 * ms, 4: 270 * ms})
	checkDelays(t, ExponentialBackoff{Multiplier: 2, Max: time.Second}, map[int]time.Duration{1: 0, 2: 0, 30: 0})
}

// test_backoff_exponential_large_attempt_no_overflow
func TestBackoffExponentialHugeAttemptDoesNotOverflow(t *testing.T) {
	capped := ExponentialBackoff{Base: 100 * time.Millisecond, Multiplier: 2, Max: 30 * time.Second}
	uncapped := ExponentialBackoff{Base: 100 * time.Millisecond, Multiplier: 2}
	for _, attempt := range []int{64, 100, 1000, 1 << 40, math.MaxInt} {
		if got := delayWithin(t, capped, attempt); got != 30*time.Second {
			t.Errorf("capped exponential Delay(%d) = %v, want the cap 30s", attempt, got)
		}
		if got := delayWithin(t, uncapped, attempt); got != maxDelay {
			t.Errorf("uncapped exponential Delay(%d) = %v, want the bound %v", attempt, got, maxDelay)
		}
	}
	huge := ExponentialBackoff{Base: time.Duration(math.MaxInt64), Multiplier: 1e300}
	if got := delayWithin(t, huge, 5); got <= 0 || got > maxDelay {
		t.Errorf("exponential of a huge base and multiplier = %v, want within (0, %v]", got, maxDelay)
	}
}

// test_backoff_exponential_multiplier_one, with a huge attempt number: a multiplier
// that never grows the delay must not make Delay loop attempt times.
func TestBackoffExponentialMultiplierOneHugeAttempt(t *testing.T) {
	b := ExponentialBackoff{Base: 50 * time.Millisecond, Multiplier: 1, Max: time.Second}
	checkDelays(t, b, map[int]time.Duration{1: 50 * time.Millisecond, 2: 50 * time.Millisecond, 10: 50 * time.Millisecond})
	if got := delayWithin(t, b, math.MaxInt); got != 50*time.Millisecond {
		t.Errorf("multiplier 1 Delay(MaxInt) = %v, want 50ms", got)
	}
	// A multiplier below 1 never grows the delay either; it must not loop or go negative.
	for _, m := range []float64{0, 0.5} {
		shrink := ExponentialBackoff{Base: 50 * time.Millisecond, Multiplier: m}
		if got := delayWithin(t, shrink, math.MaxInt); got < 0 || got > 50*time.Millisecond {
			t.Errorf("multiplier %v Delay(MaxInt) = %v, want within [0, 50ms]", m, got)
		}
	}
}

// test_retry_policy_default
func TestDefaultRetryPolicy(t *testing.T) {
	p := DefaultRetryPolicy()
	if p.MaxAttempts != 3 || p.Timeout != 0 {
		t.Fatalf("default policy %+v: want 3 attempts and no timeout", p)
	}
	checkDelays(t, p.Backoff, map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		3: 400 * time.Millisecond, 20: 30 * time.Second})
}

// --- ScheduleActivityWithRetry through RunTurn ---

func retryFailed(id uint64, msg string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkActivityFailed, Instance: "i", ExecutionID: 1, ID: id,
		Details: &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppActivityFailed, Message: msg}}
}

func retryFired(id uint64) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkTimerFired, Instance: "i", ExecutionID: 1, ID: id}
}

// oneNew returns the only new event of kind k of a turn.
func oneNew(t *testing.T, r TurnResult, k provider.EventKind) provider.Event {
	t.Helper()
	var found []provider.Event
	for _, ev := range r.NewEvents {
		if ev.Kind == k {
			found = append(found, ev)
		}
	}
	if len(found) != 1 {
		t.Fatalf("turn made %d %s events, want 1 (events %s)", len(found), k, kinds(r.NewEvents))
	}
	return found[0]
}

// test_activity_fails_then_succeeds, test_history_contains_all_activity_scheduled_events,
// test_retry_with_fixed_backoff: every attempt is its own ActivityScheduled and every
// backoff a durable timer between attempts.
func TestRetrySucceedsAfterFailuresWithBackoffTimers(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivityWithRetry("Flaky", input, RetryPolicy{MaxAttempts: 5,
			Backoff: LinearBackoff{Base: 10 * time.Second}}).Get()
	})
	r := in.turn(start("payload"))
	if len(r.WorkerItems) != 1 || r.WorkerItems[0].Name != "Flaky" || r.WorkerItems[0].Input != "payload" {
		t.Fatalf("turn 1 scheduled %+v; want one Flaky(payload)", r.WorkerItems)
	}
	act := r.WorkerItems[0].ID
	for attempt := 1; attempt <= 2; attempt++ {
		r = in.turn(retryFailed(act, "transient"))
		if len(r.WorkerItems) != 0 || r.Status != provider.StatusRunning {
			t.Fatalf("attempt %d failed: scheduled %+v status %s; want only a backoff timer", attempt, r.WorkerItems, r.Status)
		}
		timer := oneNew(t, r, provider.EventTimerCreated)
		if want := time.Duration(attempt) * 10 * time.Second; time.Duration(timer.FireAtMs-timer.TimestampMs)*time.Millisecond != want {
			t.Fatalf("backoff timer after attempt %d fires %dms after its turn, want %v", attempt, timer.FireAtMs-timer.TimestampMs, want)
		}
		if len(r.OrchestratorItems) != 1 || r.OrchestratorItems[0].Kind != provider.WorkTimerFired || r.OrchestratorItems[0].ID != timer.EventID ||
			r.OrchestratorItems[0].FireAtMs != timer.FireAtMs {
			t.Fatalf("backoff timer items %+v, want a TimerFired for event %d at %d", r.OrchestratorItems, timer.EventID, timer.FireAtMs)
		}
		r = in.turn(retryFired(timer.EventID))
		if len(r.WorkerItems) != 1 || r.WorkerItems[0].Name != "Flaky" || r.WorkerItems[0].Input != "payload" {
			t.Fatalf("after backoff %d scheduled %+v; want the next attempt", attempt, r.WorkerItems)
		}
		act = r.WorkerItems[0].ID
	}
	r = in.turn(done(act, "ok on 3"))
	if r.Status != provider.StatusCompleted || r.Output != "ok on 3" {
		t.Fatalf("status %s output %q; want Completed with the third attempt's result", r.Status, r.Output)
	}
	want := "OrchestrationStarted,ActivityScheduled,ActivityFailed,TimerCreated,TimerFired,ActivityScheduled,ActivityFailed," +
		"TimerCreated,TimerFired,ActivityScheduled,ActivityCompleted,OrchestrationCompleted"
	if got := kinds(in.history); got != want {
		t.Fatalf("history %s\nwant    %s", got, want)
	}
}

// test_activity_exhausts_all_attempts, test_retry_with_no_backoff: without a backoff
// the next attempt is scheduled in the failure's turn; the last error is returned.
func TestRetryExhaustionReturnsLastError(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		_, err := ctx.ScheduleActivityWithRetry("Bad", "", RetryPolicy{MaxAttempts: 3, Backoff: NoBackoff{}}).Get()
		var ae *ActivityError
		if !errors.As(err, &ae) || ae.Name != "Bad" || ae.Details == nil {
			return "", errors.New("unexpected error shape")
		}
		return "last:" + ae.Details.Message, nil
	})
	r := in.turn(start(""))
	for attempt := 1; attempt <= 3; attempt++ {
		if len(r.WorkerItems) != 1 {
			t.Fatalf("attempt %d: scheduled %+v, want one activity", attempt, r.WorkerItems)
		}
		r = in.turn(retryFailed(r.WorkerItems[0].ID, "failure "+string(rune('0'+attempt))))
		if attempt < 3 && countKindsIn(r.NewEvents, provider.EventTimerCreated) != 0 {
			t.Fatalf("NoBackoff created a timer: %s", kinds(r.NewEvents))
		}
	}
	if r.Status != provider.StatusCompleted || r.Output != "last:failure 3" {
		t.Fatalf("status %s output %q; want the third failure", r.Status, r.Output)
	}
	if n := countKindsIn(in.history, provider.EventActivityScheduled); n != 3 {
		t.Fatalf("%d ActivityScheduled events, want 3", n)
	}
}

// test_timeout_exits_immediately_without_retry, test_timeout_history_replays_correctly
func TestRetryTimeoutIsNotRetried(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		_, err := ctx.ScheduleActivityWithRetry("Hang", "", RetryPolicy{MaxAttempts: 5, Timeout: 5 * time.Second,
			Backoff: FixedBackoff{Interval: time.Second}}).Get()
		if errors.Is(err, ErrActivityTimeout) {
			return "timed out", nil
		}
		return "", err
	})
	r := in.turn(start(""))
	if len(r.WorkerItems) != 1 {
		t.Fatalf("scheduled %+v", r.WorkerItems)
	}
	act := r.WorkerItems[0].ID
	timer := oneNew(t, r, provider.EventTimerCreated)
	if timer.FireAtMs-timer.TimestampMs != 5000 {
		t.Fatalf("timeout timer fires %dms after the attempt, want 5000", timer.FireAtMs-timer.TimestampMs)
	}
	r = in.turn(retryFired(timer.EventID))
	if r.Status != provider.StatusCompleted || r.Output != "timed out" {
		t.Fatalf("status %s output %q; want the timeout error", r.Status, r.Output)
	}
	if len(r.WorkerItems) != 0 || countKindsIn(in.history, provider.EventActivityScheduled) != 1 {
		t.Fatalf("a timed-out attempt was retried: %s", kinds(in.history))
	}
	if len(r.CancelledActivities) != 1 || r.CancelledActivities[0].ActivityID != act {
		t.Fatalf("cancelled %+v; want the timed-out attempt %d", r.CancelledActivities, act)
	}
	if c := oneNew(t, r, provider.EventActivityCancelRequested); c.SourceEventID != act {
		t.Fatalf("cancel breadcrumb for %d, want %d", c.SourceEventID, act)
	}
}

// test_success_before_timeout: the timeout timer of a successful attempt firing later
// changes nothing.
func TestRetryTimeoutTimerAfterSuccessIsIgnored(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		a, err := ctx.ScheduleActivityWithRetry("Quick", "", RetryPolicy{MaxAttempts: 2, Timeout: time.Minute}).Get()
		if err != nil {
			return "", err
		}
		b, err := ctx.ScheduleActivity("Next", a).Get()
		return a + "+" + b, err
	})
	r := in.turn(start(""))
	timer := oneNew(t, r, provider.EventTimerCreated)
	r = in.turn(done(r.WorkerItems[0].ID, "a"))
	if len(r.WorkerItems) != 1 || r.WorkerItems[0].Name != "Next" {
		t.Fatalf("scheduled %+v, want Next", r.WorkerItems)
	}
	next := r.WorkerItems[0].ID
	r = in.turn(retryFired(timer.EventID))
	if r.Status != provider.StatusRunning || len(r.WorkerItems) != 0 || len(r.CancelledActivities) != 0 {
		t.Fatalf("the stale timeout changed the orchestration: status %s events %s", r.Status, kinds(r.NewEvents))
	}
	r = in.turn(done(next, "b"))
	if r.Status != provider.StatusCompleted || r.Output != "a+b" {
		t.Fatalf("status %s output %q", r.Status, r.Output)
	}
}

// retry_on_session_all_attempts_fail: session and tag apply to every attempt.
func TestRetryOptionsApplyToEveryAttempt(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivityWithRetry("S", "x", RetryPolicy{MaxAttempts: 3, Backoff: NoBackoff{}},
			OnSession("sess-1"), WithTag("gpu")).Get()
	})
	r := in.turn(start(""))
	for attempt := 1; attempt <= 3; attempt++ {
		if len(r.WorkerItems) != 1 || r.WorkerItems[0].SessionID != "sess-1" || r.WorkerItems[0].Tag != "gpu" {
			t.Fatalf("attempt %d scheduled %+v; want session sess-1 tag gpu", attempt, r.WorkerItems)
		}
		r = in.turn(retryFailed(r.WorkerItems[0].ID, "no"))
	}
	if r.Status != provider.StatusFailed || !strings.Contains(r.Output, "no") {
		t.Fatalf("status %s output %q; want Failed with the last error", r.Status, r.Output)
	}
	for _, ev := range in.history {
		if ev.Kind == provider.EventActivityScheduled && (ev.SessionID != "sess-1" || ev.Tag != "gpu") {
			t.Fatalf("history attempt %+v lost its session or tag", ev)
		}
	}
}

// test_retry_policy_new_zero / defaults: a zero policy retries 3 times with the
// default exponential backoff.
func TestRetryZeroPolicyUsesDefaults(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivityWithRetry("D", "", RetryPolicy{}).Get()
	})
	r := in.turn(start(""))
	for attempt, backoff := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		r = in.turn(retryFailed(r.WorkerItems[0].ID, "e"))
		timer := oneNew(t, r, provider.EventTimerCreated)
		if got := time.Duration(timer.FireAtMs-timer.TimestampMs) * time.Millisecond; got != backoff {
			t.Fatalf("default backoff after attempt %d is %v, want %v", attempt+1, got, backoff)
		}
		r = in.turn(retryFired(timer.EventID))
	}
	r = in.turn(retryFailed(r.WorkerItems[0].ID, "e3"))
	if r.Status != provider.StatusFailed || countKindsIn(in.history, provider.EventActivityScheduled) != 3 {
		t.Fatalf("status %s after %d attempts; want Failed after 3", r.Status, countKindsIn(in.history, provider.EventActivityScheduled))
	}
}

// A retry that loses a select is given up: its pending attempt is cancelled.
func TestRetryLosingSelectCancelsPendingAttempt(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		retry := ctx.ScheduleActivityWithRetry("Slow", "", RetryPolicy{MaxAttempts: 3, Backoff: NoBackoff{}})
		deadline := ctx.CreateTimer(time.Hour)
		if ctx.Select(retry, deadline) == 1 {
			return "deadline", nil
		}
		return retry.Get()
	})
	r := in.turn(start(""))
	act := r.WorkerItems[0].ID
	r = in.turn(retryFailed(act, "first"))
	if len(r.WorkerItems) != 1 {
		t.Fatalf("second attempt not scheduled: %+v", r.WorkerItems)
	}
	second := r.WorkerItems[0].ID
	var deadline uint64
	for _, ev := range in.history {
		if ev.Kind == provider.EventTimerCreated {
			deadline = ev.EventID
		}
	}
	r = in.turn(retryFired(deadline))
	if r.Status != provider.StatusCompleted || r.Output != "deadline" {
		t.Fatalf("status %s output %q", r.Status, r.Output)
	}
	if len(r.CancelledActivities) != 1 || r.CancelledActivities[0].ActivityID != second {
		t.Fatalf("cancelled %+v; want the pending attempt %d", r.CancelledActivities, second)
	}
}

func countKindsIn(evs []provider.Event, k provider.EventKind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}
