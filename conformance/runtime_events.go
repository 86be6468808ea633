package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// Durable timers, positional external events, persistent event queues and custom
// status, end to end. Ported from duroxide's tests/timer_tests.rs,
// tests/cancellation_tests.rs, tests/errors_tests.rs, tests/e2e_samples.rs,
// tests/queue_event_tests.rs and tests/custom_status_tests.rs.
func init() {
	registerRuntimeGroup(runtimeGroup{name: "TimersEvents", cases: []runtimeCase{
		// Durable timers.
		{"SingleTimerFires", teSingleTimerFires},
		{"TimerFiresAtCorrectTimeAfterPreviousTimer", teTimerAfterPreviousTimer},
		{"ZeroDurationTimer", teZeroDurationTimer},
		{"TimerRaceCancelsLosingActivity", teTimerRaceCancelsActivity},
		// Positional external events.
		{"PositionalMatchingFIFO", tePositionalMatchingFIFO},
		{"EventBeforeSubscriptionIsDropped", teEventBeforeSubscriptionDropped},
		{"CancelledSubscriptionDoesNotStealFutureEvent", teCancelledSubscriptionDoesNotSteal},
		{"DuplicateExternalEventsNotDeduplicated", teDuplicateEventsNotDeduplicated},
		{"SelectActivityVsEvent", teSelectActivityVsEvent},
		// Persistent event queues.
		{"QueueFIFOOrdering", teQueueFIFO},
		{"QueueBuffersBeforeSubscription", teQueueBuffersBeforeSubscription},
		{"QueueMessageSurvivesSelectCancellation", teQueueSurvivesSelectCancellation},
		{"QueuesAreIsolated", teQueuesIsolated},
		{"QueueMessagesBeforeStartAreDropped", teQueueBeforeStartDropped},
		// Custom status.
		{"CustomStatusVisibleWhileRunningAndAfterCompletion", teCustomStatusVisible},
		{"CustomStatusLastWriteWins", teCustomStatusLastWriteWins},
		{"CustomStatusResetClears", teCustomStatusReset},
		{"WaitForStatusChange", teWaitForStatusChange},
		{"CustomStatusVisibleOnFailure", teCustomStatusOnFailure},
		{"CustomStatusSizeLimit", teCustomStatusSizeLimit},
	}})
}

// ---- helpers (this file only) ----

// teCount counts the events of kind k whose Name is name ("" matches any name).
func teCount(evs []provider.Event, k provider.EventKind, name string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k && (name == "" || e.Name == name) {
			n++
		}
	}
	return n
}

// teOf returns the events of kind k, in history order.
func teOf(evs []provider.Event, k provider.EventKind) []provider.Event {
	var out []provider.Event
	for _, e := range evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// teWaitHistory waits until cond holds on instance's history and returns it.
func teWaitHistory(t *testing.T, r *rig, instance, what string, cond func([]provider.Event) bool) []provider.Event {
	t.Helper()
	var h []provider.Event
	eventually(t, instance+": "+what, func() bool {
		h = r.history(instance)
		return cond(h)
	})
	return h
}

// teAwait waits for ch to be closed.
func teAwait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// teRaise and teEnqueue signal an instance, failing the test on error.
func teRaise(t *testing.T, r *rig, instance, name, data string) {
	t.Helper()
	if err := r.C.RaiseEvent(context.Background(), instance, name, data); err != nil {
		t.Fatalf("raise %s on %s: %v", name, instance, err)
	}
}

func teEnqueue(t *testing.T, r *rig, instance, queue, data string) {
	t.Helper()
	if err := r.C.EnqueueEvent(context.Background(), instance, queue, data); err != nil {
		t.Fatalf("enqueue %s on %s: %v", queue, instance, err)
	}
}

// teStatusChange waits for instance's custom status version to move past lastSeen.
func teStatusChange(t *testing.T, r *rig, instance string, lastSeen uint64) runtime.OrchestrationStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := r.C.WaitForStatusChange(ctx, instance, lastSeen)
	if err != nil {
		t.Fatalf("wait for status change of %s past %d: %v (last status %+v)", instance, lastSeen, err, st)
	}
	return st
}

// teCustom renders a custom status for messages.
func teCustom(s *string) string {
	if s == nil {
		return "<nil>"
	}
	if len(*s) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", (*s)[:40], len(*s))
	}
	return strconv.Quote(*s)
}

// teGate is an activity that blocks until the test opens the gate or its context
// is cancelled; it records that it started and whether it saw the cancellation.
type teGate struct {
	started, release, cancelled        chan struct{}
	startOnce, releaseOnce, cancelOnce sync.Once
}

func newTeGate(t *testing.T) *teGate {
	g := &teGate{started: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *teGate) open() { g.releaseOnce.Do(func() { close(g.release) }) }

func (g *teGate) activity(a *runtime.ActivityContext, in string) (string, error) {
	g.startOnce.Do(func() { close(g.started) })
	select {
	case <-g.release:
		return "released:" + in, nil
	case <-a.Done():
		g.cancelOnce.Do(func() { close(g.cancelled) })
		return "", a.Err()
	}
}

// teShortWorkerLock makes a cancelled activity notice its cancellation quickly: the
// worker learns of it when renewing the item's lock (every half timeout).
func teShortWorkerLock(o *runtime.Options) { o.WorkerLockTimeout = time.Second }

// ---- durable timers ----

// Port of timer_tests.rs single_timer_fires: a durable timer holds the
// orchestration at least its duration, on the orchestration clock, the wall clock
// and in the recorded fire time.
func teSingleTimerFires(t *testing.T, e renv) {
	r := e.rig(t)
	const delay = 300 * time.Millisecond
	reg := newRegistry(t).orch("SingleTimer", func(ctx *runtime.Context, in string) (string, error) {
		before := ctx.Now()
		if _, err := ctx.CreateTimer(delay).Get(); err != nil {
			return "", err
		}
		return strconv.FormatInt(ctx.Now().Sub(before).Milliseconds(), 10), nil
	})
	r.startFast(reg.Registry)
	began := time.Now()
	st := r.run("timer-1", "SingleTimer", "")
	if elapsed := time.Since(began); elapsed < delay {
		t.Fatalf("orchestration with a %s timer completed after %s", delay, elapsed)
	}
	if st.State != runtime.StateCompleted {
		t.Fatalf("status %s failure %s", st.State, st.Failure.DisplayMessage())
	}
	if ms, err := strconv.ParseInt(st.Output, 10, 64); err != nil || ms < delay.Milliseconds() {
		t.Fatalf("ctx.Now moved %q ms across a %s timer, want at least %d", st.Output, delay, delay.Milliseconds())
	}
	h := r.history("timer-1")
	created, fired := teOf(h, provider.EventTimerCreated), teOf(h, provider.EventTimerFired)
	if len(created) != 1 || len(fired) != 1 {
		t.Fatalf("history has %d TimerCreated and %d TimerFired, want 1 each: %+v", len(created), len(fired), h)
	}
	c, f := created[0], fired[0]
	if c.FireAtMs-c.TimestampMs != delay.Milliseconds() {
		t.Fatalf("TimerCreated at %d fires at %d, want %d later", c.TimestampMs, c.FireAtMs, delay.Milliseconds())
	}
	if f.SourceEventID != c.EventID || f.FireAtMs != c.FireAtMs {
		t.Fatalf("TimerFired %+v does not answer TimerCreated %+v", f, c)
	}
	if f.TimestampMs < c.FireAtMs {
		t.Fatalf("timer fired at %d, before its fire time %d", f.TimestampMs, c.FireAtMs)
	}
}

// Port of timer_tests.rs timer_fires_at_correct_time_after_previous_timer (also
// scenarios/toygres.rs): a timer scheduled after an earlier timer fired and real
// time passed counts from the time it is scheduled, not from the earlier fire.
func teTimerAfterPreviousTimer(t *testing.T, e renv) {
	r := e.rig(t)
	const raceTimer = 3 * time.Second
	reg := newRegistry(t).
		act("Slow", func(a *runtime.ActivityContext, in string) (string, error) {
			ms, _ := strconv.Atoi(in)
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond): // real time has to pass here
			case <-a.Done():
				return "", a.Err()
			}
			return "activity_done", nil
		}).
		orch("TimerFireTime", func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.CreateTimer(50 * time.Millisecond).Get(); err != nil {
				return "", err
			}
			if _, err := ctx.ScheduleActivity("Slow", "400").Get(); err != nil {
				return "", err
			}
			timer := ctx.CreateTimer(raceTimer)
			fast := ctx.ScheduleActivity("Slow", "0")
			if ctx.Select(timer, fast) == 0 {
				return "timer_won", nil
			}
			return fast.Get()
		})
	r.startFast(reg.Registry)
	completed(t, r.run("timer-fire-time", "TimerFireTime", ""), "activity_done")
	h := r.history("timer-fire-time")
	timers, acts := teOf(h, provider.EventTimerCreated), teOf(h, provider.EventActivityCompleted)
	if len(timers) != 2 || len(acts) < 1 {
		t.Fatalf("history has %d timers and %d activity completions: %+v", len(timers), len(acts), h)
	}
	second, slowDone := timers[1], acts[0]
	if second.FireAtMs-second.TimestampMs != raceTimer.Milliseconds() {
		t.Fatalf("second timer created at %d fires at %d, want %d later", second.TimestampMs, second.FireAtMs, raceTimer.Milliseconds())
	}
	if second.FireAtMs < slowDone.TimestampMs+raceTimer.Milliseconds() {
		t.Fatalf("second timer fires at %d, earlier than %d (slow activity completed at %d + %s): it counted from the first timer's fire",
			second.FireAtMs, slowDone.TimestampMs+raceTimer.Milliseconds(), slowDone.TimestampMs, raceTimer)
	}
	if n := countKind(h, provider.EventTimerFired); n != 1 {
		t.Fatalf("%d timers fired, want only the first", n)
	}
}

// Port of timer_tests.rs zero_duration_timer.
func teZeroDurationTimer(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("ZeroTimer", func(ctx *runtime.Context, in string) (string, error) {
		if _, err := ctx.CreateTimer(0).Get(); err != nil {
			return "", err
		}
		return "zero-timer-fired", nil
	})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-zero", "ZeroTimer", ""), "zero-timer-fired")
	h := r.history("inst-zero")
	created, fired := teOf(h, provider.EventTimerCreated), teOf(h, provider.EventTimerFired)
	if len(created) != 1 || len(fired) != 1 || fired[0].SourceEventID != created[0].EventID {
		t.Fatalf("history %+v, want one TimerCreated answered by one TimerFired", h)
	}
	if created[0].FireAtMs != created[0].TimestampMs {
		t.Fatalf("zero timer created at %d fires at %d", created[0].TimestampMs, created[0].FireAtMs)
	}
}

// Port of cancellation_tests.rs select2_loser_activity_receives_cancellation_signal
// and e2e_samples.rs sample_timeout_with_timer_race_fs: a short timer beats a
// blocked activity; the activity is cancelled (its context ends) and history
// records the cancellation of exactly that schedule.
func teTimerRaceCancelsActivity(t *testing.T, e renv) {
	r := e.rig(t)
	g := newTeGate(t)
	reg := newRegistry(t).
		act("LongActivity", func(a *runtime.ActivityContext, in string) (string, error) {
			// Tell the orchestration it runs, so the race starts only once it does.
			if err := a.Client().RaiseEvent(a, a.InstanceID(), "ActivityStarted", ""); err != nil {
				return "", err
			}
			return g.activity(a, in)
		}).
		orch("TimerRace", func(ctx *runtime.Context, in string) (string, error) {
			act := ctx.ScheduleActivity("LongActivity", "input")
			if _, err := ctx.WaitForEvent("ActivityStarted").Get(); err != nil {
				return "", err
			}
			if ctx.Select(act, ctx.CreateTimer(100*time.Millisecond)) == 0 {
				return "", errors.New("the blocked activity won the race")
			}
			// Keep going to prove the orchestration did not end with the race.
			if _, err := ctx.CreateTimer(20 * time.Millisecond).Get(); err != nil {
				return "", err
			}
			return "timeout", nil
		})
	r.startFast(reg.Registry, teShortWorkerLock)
	completed(t, r.run("timer-race", "TimerRace", ""), "timeout")
	teAwait(t, g.started, "the activity to start")
	teAwait(t, g.cancelled, "the losing activity's context to be cancelled")
	h := r.history("timer-race")
	scheduled := teOf(h, provider.EventActivityScheduled)
	cancels := teOf(h, provider.EventActivityCancelRequested)
	if len(scheduled) != 1 || len(cancels) != 1 || cancels[0].SourceEventID != scheduled[0].EventID {
		t.Fatalf("history %+v, want one ActivityCancelRequested for the one ActivityScheduled", h)
	}
	if n := countKind(h, provider.EventActivityCompleted) + countKind(h, provider.EventActivityFailed); n != 0 {
		t.Fatalf("the cancelled activity has %d completions in history", n)
	}
	if countKind(h, provider.EventTimerFired) != 2 {
		t.Fatalf("history %+v, want both timers fired", h)
	}
}

// ---- positional external events ----

// Port of cancellation_tests.rs positional_matching_fifo_without_cancellation:
// the Nth live wait for a name gets the Nth event raised for it, including two
// waits outstanding at once.
func tePositionalMatchingFIFO(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("Positional", func(ctx *runtime.Context, in string) (string, error) {
		w1, w2 := ctx.WaitForEvent("Data"), ctx.WaitForEvent("Data")
		if err := errors.Join(ctx.Join(w1, w2)...); err != nil {
			return "", err
		}
		d1, _ := w1.Get()
		d2, _ := w2.Get()
		d3, err := ctx.WaitForEvent("Data").Get()
		return d1 + "," + d2 + "," + d3, err
	})
	r.startFast(reg.Registry)
	r.startOrch("inst-fifo", "Positional", "")
	teWaitHistory(t, r, "inst-fifo", "two Data subscriptions", func(h []provider.Event) bool {
		return teCount(h, provider.EventExternalSubscribed, "Data") >= 2
	})
	teRaise(t, r, "inst-fifo", "Data", "first")
	teRaise(t, r, "inst-fifo", "Data", "second")
	teWaitHistory(t, r, "inst-fifo", "the third Data subscription", func(h []provider.Event) bool {
		return teCount(h, provider.EventExternalSubscribed, "Data") >= 3
	})
	teRaise(t, r, "inst-fifo", "Data", "third")
	completed(t, r.wait("inst-fifo"), "first,second,third")
}

// Port of errors_tests.rs event_before_subscription_after_start_is_ignored and
// cancellation_tests.rs positional_arrival_before_sub_outstanding: an event raised
// while nobody waits for it is dropped; a later wait does not get it (it loses to
// a timer) and the next raised event goes to the next wait.
func teEventBeforeSubscriptionDropped(t *testing.T, e renv) {
	r := e.rig(t)
	g := newTeGate(t)
	reg := newRegistry(t).
		act("Gate", g.activity).
		orch("PreSubscription", func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.ScheduleActivity("Gate", "").Get(); err != nil {
				return "", err
			}
			w := ctx.WaitForEvent("Evt")
			if ctx.Select(w, ctx.CreateTimer(400*time.Millisecond)) == 0 {
				d, _ := w.Get()
				return "unexpected:" + d, nil
			}
			d, err := ctx.WaitForEvent("Evt").Get()
			return "timeout," + d, err
		})
	r.startFast(reg.Registry)
	r.startOrch("inst-pre-sub", "PreSubscription", "")
	teAwait(t, g.started, "the gate activity to start")
	teRaise(t, r, "inst-pre-sub", "Evt", "early")
	// The event reaches history while the orchestration waits only for the activity.
	teWaitHistory(t, r, "inst-pre-sub", "the early event in history", func(h []provider.Event) bool {
		return teCount(h, provider.EventExternalEvent, "Evt") == 1
	})
	g.open()
	h := teWaitHistory(t, r, "inst-pre-sub", "the first wait to lose to the timer", func(h []provider.Event) bool {
		return teCount(h, provider.EventExternalSubscribedCancelled, "") == 1 && teCount(h, provider.EventExternalSubscribed, "Evt") == 2
	})
	if countKind(h, provider.EventTimerFired) != 1 {
		t.Fatalf("history %+v, want the timer fired", h)
	}
	teRaise(t, r, "inst-pre-sub", "Evt", "late")
	completed(t, r.wait("inst-pre-sub"), "timeout,late")
}

// Port of cancellation_tests.rs cancelled_subscription_does_not_steal_future_event
// (duroxide affandar#57): a wait that lost a select leaves no orphaned slot that
// swallows the next event of the same name.
func teCancelledSubscriptionDoesNotSteal(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("NoSteal", func(ctx *runtime.Context, in string) (string, error) {
		w1 := ctx.WaitForEvent("Signal")
		if ctx.Select(w1, ctx.CreateTimer(50*time.Millisecond)) == 0 {
			return "unexpected_phase1", nil
		}
		d, err := ctx.WaitForEvent("Signal").Get()
		return "got:" + d, err
	})
	r.startFast(reg.Registry)
	r.startOrch("inst-no-steal", "NoSteal", "")
	h := teWaitHistory(t, r, "inst-no-steal", "the first wait cancelled and the second subscribed", func(h []provider.Event) bool {
		return teCount(h, provider.EventExternalSubscribedCancelled, "") == 1 && teCount(h, provider.EventExternalSubscribed, "Signal") == 2
	})
	subs, cancels := teOf(h, provider.EventExternalSubscribed), teOf(h, provider.EventExternalSubscribedCancelled)
	if cancels[0].SourceEventID != subs[0].EventID {
		t.Fatalf("cancellation breadcrumb %+v does not name the first subscription %+v", cancels[0], subs[0])
	}
	teRaise(t, r, "inst-no-steal", "Signal", "hello")
	completed(t, r.wait("inst-no-steal"), "got:hello")
}

// Port of cancellation_tests.rs duplicate_external_events_not_deduplicated: two
// identical raises satisfy two waits.
func teDuplicateEventsNotDeduplicated(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("NoDup", func(ctx *runtime.Context, in string) (string, error) {
		d1, err := ctx.WaitForEvent("Dup").Get()
		if err != nil {
			return "", err
		}
		d2, err := ctx.WaitForEvent("Dup").Get()
		return d1 + "," + d2, err
	})
	r.startFast(reg.Registry)
	r.startOrch("inst-nodup", "NoDup", "")
	for n := 1; n <= 2; n++ {
		teWaitHistory(t, r, "inst-nodup", fmt.Sprintf("subscription %d", n), func(h []provider.Event) bool {
			return teCount(h, provider.EventExternalSubscribed, "Dup") >= n
		})
		teRaise(t, r, "inst-nodup", "Dup", "same_payload")
	}
	completed(t, r.wait("inst-nodup"), "same_payload,same_payload")
	if n := teCount(r.history("inst-nodup"), provider.EventExternalEvent, "Dup"); n != 2 {
		t.Fatalf("%d Dup events in history, want 2", n)
	}
}

// Port of e2e_samples.rs sample_select2_activity_vs_external_fs, both ways: the
// event beats a blocked activity (which is then cancelled), and a finished
// activity beats a wait (which is then withdrawn).
func teSelectActivityVsEvent(t *testing.T, e renv) {
	r := e.rig(t)
	gates := map[string]*teGate{"evt-wins": newTeGate(t), "act-wins": newTeGate(t)}
	reg := newRegistry(t).
		act("Hold", func(a *runtime.ActivityContext, in string) (string, error) { return gates[in].activity(a, in) }).
		orch("ActVsEvt", func(ctx *runtime.Context, in string) (string, error) {
			act := ctx.ScheduleActivity("Hold", in)
			evt := ctx.WaitForEvent("Go")
			if ctx.Select(act, evt) == 0 {
				v, err := act.Get()
				return "activity:" + v, err
			}
			v, err := evt.Get()
			return "event:" + v, err
		})
	r.startFast(reg.Registry, teShortWorkerLock)

	r.startOrch("evt-wins", "ActVsEvt", "evt-wins")
	teWaitHistory(t, r, "evt-wins", "the Go subscription", func(h []provider.Event) bool {
		return teCount(h, provider.EventExternalSubscribed, "Go") == 1
	})
	teRaise(t, r, "evt-wins", "Go", "ok")
	completed(t, r.wait("evt-wins"), "event:ok")
	h := r.history("evt-wins")
	scheduled, cancels := teOf(h, provider.EventActivityScheduled), teOf(h, provider.EventActivityCancelRequested)
	if len(scheduled) != 1 || len(cancels) != 1 || cancels[0].SourceEventID != scheduled[0].EventID {
		t.Fatalf("history %+v, want the losing activity cancelled", h)
	}

	r.startOrch("act-wins", "ActVsEvt", "act-wins")
	teAwait(t, gates["act-wins"].started, "the activity to start")
	gates["act-wins"].open()
	completed(t, r.wait("act-wins"), "activity:released:act-wins")
	h = r.history("act-wins")
	subs, withdrawn := teOf(h, provider.EventExternalSubscribed), teOf(h, provider.EventExternalSubscribedCancelled)
	if len(subs) != 1 || len(withdrawn) != 1 || withdrawn[0].SourceEventID != subs[0].EventID {
		t.Fatalf("history %+v, want the losing wait withdrawn", h)
	}
}

// ---- persistent event queues ----

// Port of queue_event_tests.rs persistent_event_fifo_ordering: outstanding
// dequeues of one queue receive its messages in enqueue order.
func teQueueFIFO(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("QueueFIFO", func(ctx *runtime.Context, in string) (string, error) {
		fs := []*runtime.Future{ctx.DequeueEvent("Data"), ctx.DequeueEvent("Data"), ctx.DequeueEvent("Data")}
		if err := errors.Join(ctx.Join(fs...)...); err != nil {
			return "", err
		}
		out := make([]string, len(fs))
		for i, f := range fs {
			out[i], _ = f.Get()
		}
		last, err := ctx.DequeueEvent("Data").Get()
		return strings.Join(out, ",") + "|" + last, err
	})
	r.startFast(reg.Registry)
	r.startOrch("inst-q-fifo", "QueueFIFO", "")
	teWaitHistory(t, r, "inst-q-fifo", "three Data subscriptions", func(h []provider.Event) bool {
		return teCount(h, provider.EventQueueSubscribed, "Data") >= 3
	})
	for _, m := range []string{"first", "second", "third", "fourth"} {
		teEnqueue(t, r, "inst-q-fifo", "Data", m)
	}
	completed(t, r.wait("inst-q-fifo"), "first,second,third|fourth")
}

// Port of queue_event_tests.rs persistent_event_arrives_before_subscription and
// multi_queue_staggered_delivery: messages that arrive while nobody dequeues are
// kept, in order, for the dequeues that come later.
func teQueueBuffersBeforeSubscription(t *testing.T, e renv) {
	r := e.rig(t)
	g := newTeGate(t)
	reg := newRegistry(t).
		act("Gate", g.activity).
		orch("QueueBuffer", func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.ScheduleActivity("Gate", "").Get(); err != nil {
				return "", err
			}
			var got []string
			for range 3 {
				d, err := ctx.DequeueEvent("Signal").Get()
				if err != nil {
					return "", err
				}
				got = append(got, d)
			}
			return strings.Join(got, ","), nil
		})
	r.startFast(reg.Registry)
	r.startOrch("inst-q-before", "QueueBuffer", "")
	teAwait(t, g.started, "the gate activity to start")
	for _, m := range []string{"m1", "m2", "m3"} {
		teEnqueue(t, r, "inst-q-before", "Signal", m)
	}
	teWaitHistory(t, r, "inst-q-before", "three messages delivered before any dequeue", func(h []provider.Event) bool {
		return teCount(h, provider.EventQueueEventDelivered, "Signal") == 3
	})
	if h := r.history("inst-q-before"); teCount(h, provider.EventQueueSubscribed, "") != 0 {
		t.Fatalf("history %+v: a dequeue ran before the gate opened", h)
	}
	g.open()
	completed(t, r.wait("inst-q-before"), "m1,m2,m3")
}

// Port of queue_event_tests.rs persistent_event_survives_select_cancellation_same_batch:
// a dequeue that lost a select does not consume the next message; the next dequeue
// of the queue gets it. Both messages land in one batch (no runtime runs while they
// are enqueued).
func teQueueSurvivesSelectCancellation(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("QueueSurvives", func(ctx *runtime.Context, in string) (string, error) {
		w1 := ctx.DequeueEvent("Signal")
		if ctx.Select(w1, ctx.CreateTimer(50*time.Millisecond)) == 0 {
			v, _ := w1.Get()
			return "unexpected_phase1:" + v, nil
		}
		d, err := ctx.DequeueEvent("Signal").Get()
		return "got:" + d, err
	})
	rt := r.startFast(reg.Registry)
	r.startOrch("inst-q-survive", "QueueSurvives", "")
	teWaitHistory(t, r, "inst-q-survive", "the first dequeue cancelled and the second subscribed", func(h []provider.Event) bool {
		return teCount(h, provider.EventQueueSubscriptionCancelled, "") == 1 && teCount(h, provider.EventQueueSubscribed, "Signal") == 2
	})
	rt.stop()
	teEnqueue(t, r, "inst-q-survive", "Signal", "survived")
	teEnqueue(t, r, "inst-q-survive", "Signal", "extra")
	r.startFast(reg.Registry)
	completed(t, r.wait("inst-q-survive"), "got:survived")
	h := r.history("inst-q-survive")
	subs, cancels := teOf(h, provider.EventQueueSubscribed), teOf(h, provider.EventQueueSubscriptionCancelled)
	if len(subs) != 2 || len(cancels) != 1 || cancels[0].SourceEventID != subs[0].EventID {
		t.Fatalf("history %+v, want two subscriptions, the first cancelled", h)
	}
	if n := teCount(h, provider.EventQueueEventDelivered, "Signal"); n != 2 {
		t.Fatalf("%d Signal messages in history, want both (one batch)", n)
	}
}

// Port of queue_event_tests.rs multi_queue_isolation_and_independent_fifo and
// persistent_and_positional_are_independent: each queue keeps its own messages
// and order; a positional event of the same name never feeds a queue.
func teQueuesIsolated(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("MultiQueue", func(ctx *runtime.Context, in string) (string, error) {
		var parts []string
		for _, q := range []struct {
			name string
			n    int
		}{{"orders", 2}, {"payments", 2}, {"notifications", 1}} {
			var got []string
			for range q.n {
				d, err := ctx.DequeueEvent(q.name).Get()
				if err != nil {
					return "", err
				}
				got = append(got, d)
			}
			parts = append(parts, strings.Join(got, ","))
		}
		return strings.Join(parts, "|"), nil
	})
	r.startFast(reg.Registry)
	r.startOrch("inst-multi-q", "MultiQueue", "")
	// Queue messages for an instance that does not exist yet are dropped: wait for it.
	teWaitHistory(t, r, "inst-multi-q", "the instance to start", func(h []provider.Event) bool { return len(h) > 0 })
	teRaise(t, r, "inst-multi-q", "orders", "positional")
	for _, m := range [][2]string{{"payments", "pay_first"}, {"orders", "order_first"}, {"notifications", "alert_1"},
		{"orders", "order_second"}, {"payments", "pay_second"}} {
		teEnqueue(t, r, "inst-multi-q", m[0], m[1])
	}
	completed(t, r.wait("inst-multi-q"), "order_first,order_second|pay_first,pay_second|alert_1")
}

// Port of queue_event_tests.rs events_enqueued_before_start_orchestration_are_dropped:
// messages enqueued before the instance exists are never delivered to it, whether
// the runtime sees them alone (the provider drops them) or in the same batch as the
// start; messages enqueued afterwards are.
func teQueueBeforeStartDropped(t *testing.T, e renv) {
	orch := func(ctx *runtime.Context, in string) (string, error) {
		w := ctx.DequeueEvent("pre-start-q")
		if ctx.Select(w, ctx.CreateTimer(400*time.Millisecond)) == 0 {
			d, _ := w.Get()
			return "unexpected:" + d, nil
		}
		d, err := ctx.DequeueEvent("pre-start-q").Get()
		return "timeout_as_expected," + d, err
	}
	finish := func(r *rig, instance string) {
		t.Helper()
		teWaitHistory(t, r, instance, "the first dequeue to time out", func(h []provider.Event) bool {
			return teCount(h, provider.EventQueueSubscriptionCancelled, "") == 1 && teCount(h, provider.EventQueueSubscribed, "pre-start-q") == 2
		})
		teEnqueue(t, r, instance, "pre-start-q", "late")
		completed(t, r.wait(instance), "timeout_as_expected,late")
	}

	// A runtime is running: the orphan message is fetched and dropped on its own.
	r := e.rig(t)
	r.startFast(newRegistry(t).orch("OrphanTest", orch).Registry)
	if admin, err := r.C.Admin(); err == nil {
		teEnqueue(t, r, "inst-orphan", "pre-start-q", "should-be-dropped")
		eventually(t, "the orphan queue message to be dropped", func() bool {
			d, err := admin.GetQueueDepths(context.Background())
			if err != nil {
				t.Fatalf("queue depths: %v", err)
			}
			return d.OrchestratorQueue == 0
		})
		r.startOrch("inst-orphan", "OrphanTest", "")
		finish(r, "inst-orphan")
	} else {
		t.Logf("no management API (%v): the running-runtime half is skipped", err)
	}

	// No runtime yet: the orphan message and the start are fetched together.
	r2 := e.rig(t)
	teEnqueue(t, r2, "inst-orphan-batch", "pre-start-q", "should-be-dropped")
	r2.startOrch("inst-orphan-batch", "OrphanTest", "")
	r2.startFast(newRegistry(t).orch("OrphanTest", orch).Registry)
	finish(r2, "inst-orphan-batch")
}

// ---- custom status ----

// Port of custom_status_tests.rs custom_status_persists_across_turns and
// custom_status_set_visible_on_completion (and e2e_samples.rs
// sample_status_polling_fs): a status is visible to clients while the
// orchestration waits, and after it completes.
func teCustomStatusVisible(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Echo", echo).
		orch("StatusHold", func(ctx *runtime.Context, in string) (string, error) {
			ctx.SetCustomStatus("waiting-for-approval")
			if _, err := ctx.WaitForEvent("go").Get(); err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Echo", "done").Get()
		}).
		orch("NoStatus", func(ctx *runtime.Context, in string) (string, error) { return "plain", nil })
	r.startFast(reg.Registry)
	r.startOrch("cs-visible", "StatusHold", "")
	st := teStatusChange(t, r, "cs-visible", 0)
	if st.State != runtime.StateRunning || st.CustomStatus == nil || *st.CustomStatus != "waiting-for-approval" || st.CustomStatusVersion == 0 {
		t.Fatalf("while waiting: state %s status %s version %d", st.State, teCustom(st.CustomStatus), st.CustomStatusVersion)
	}
	if st2, err := r.C.Status(context.Background(), "cs-visible"); err != nil || st2.CustomStatus == nil || *st2.CustomStatus != "waiting-for-approval" {
		t.Fatalf("Status while waiting: %+v, %v", st2, err)
	}
	teRaise(t, r, "cs-visible", "go", "")
	st = r.wait("cs-visible")
	completed(t, st, "done")
	if st.CustomStatus == nil || *st.CustomStatus != "waiting-for-approval" {
		t.Fatalf("after completion the status is %s, want the one set in the first turn", teCustom(st.CustomStatus))
	}
	// custom_status_none_when_not_set
	st = r.run("cs-none", "NoStatus", "")
	completed(t, st, "plain")
	if st.CustomStatus != nil || st.CustomStatusVersion != 0 {
		t.Fatalf("orchestration that never set a status has %s version %d", teCustom(st.CustomStatus), st.CustomStatusVersion)
	}
}

// Port of custom_status_tests.rs custom_status_last_write_wins,
// custom_status_updated_in_later_turn and custom_status_version_increments; also
// ctx.CustomStatus reads the status back, across replay.
func teCustomStatusLastWriteWins(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Echo", echo).
		orch("LastWrite", func(ctx *runtime.Context, in string) (string, error) {
			for _, s := range []string{"a", "b", "c"} {
				ctx.SetCustomStatus(s)
			}
			if s, ok := ctx.CustomStatus(); !ok || s != "c" {
				return "", fmt.Errorf("read back %q, %v after three writes", s, ok)
			}
			if _, err := ctx.WaitForEvent("next").Get(); err != nil {
				return "", err
			}
			ctx.SetCustomStatus("d")
			if _, err := ctx.ScheduleActivity("Echo", "x").Get(); err != nil { // one more turn, replaying the writes
				return "", err
			}
			s, ok := ctx.CustomStatus()
			if !ok {
				return "", errors.New("no custom status after replay")
			}
			return s, nil
		})
	r.startFast(reg.Registry)
	r.startOrch("cs-lww", "LastWrite", "")
	st := teStatusChange(t, r, "cs-lww", 0)
	if st.State != runtime.StateRunning || st.CustomStatus == nil || *st.CustomStatus != "c" {
		t.Fatalf("after the first turn: state %s status %s, want \"c\"", st.State, teCustom(st.CustomStatus))
	}
	v1 := st.CustomStatusVersion
	teRaise(t, r, "cs-lww", "next", "")
	st = r.wait("cs-lww")
	completed(t, st, "d")
	if st.CustomStatus == nil || *st.CustomStatus != "d" || st.CustomStatusVersion <= v1 {
		t.Fatalf("final status %s version %d, want \"d\" above version %d", teCustom(st.CustomStatus), st.CustomStatusVersion, v1)
	}
	if n := countKind(r.history("cs-lww"), provider.EventCustomStatusUpdated); n != 4 {
		t.Fatalf("%d CustomStatusUpdated events, want 4", n)
	}
}

// Port of custom_status_tests.rs custom_status_reset_clears_to_none:
// ResetCustomStatus clears the status for clients (while running and after
// completion) and for ctx.CustomStatus.
func teCustomStatusReset(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("ResetStatus", func(ctx *runtime.Context, in string) (string, error) {
		if s, ok := ctx.CustomStatus(); ok {
			return "", fmt.Errorf("status %q before any was set", s)
		}
		ctx.SetCustomStatus("temp")
		if _, err := ctx.WaitForEvent("a").Get(); err != nil {
			return "", err
		}
		ctx.ResetCustomStatus()
		if s, ok := ctx.CustomStatus(); ok {
			return "", fmt.Errorf("status %q after reset", s)
		}
		if _, err := ctx.WaitForEvent("b").Get(); err != nil {
			return "", err
		}
		if s, ok := ctx.CustomStatus(); ok {
			return "", fmt.Errorf("status %q after reset, on replay", s)
		}
		return "done", nil
	})
	r.startFast(reg.Registry)
	r.startOrch("cs-reset", "ResetStatus", "")
	st := teStatusChange(t, r, "cs-reset", 0)
	if st.CustomStatus == nil || *st.CustomStatus != "temp" {
		t.Fatalf("status %s, want \"temp\"", teCustom(st.CustomStatus))
	}
	teRaise(t, r, "cs-reset", "a", "")
	st = teStatusChange(t, r, "cs-reset", st.CustomStatusVersion)
	if st.State != runtime.StateRunning || st.CustomStatus != nil {
		t.Fatalf("after reset: state %s status %s, want Running with none", st.State, teCustom(st.CustomStatus))
	}
	teRaise(t, r, "cs-reset", "b", "")
	st = r.wait("cs-reset")
	completed(t, st, "done")
	if st.CustomStatus != nil {
		t.Fatalf("final status %s, want none", teCustom(st.CustomStatus))
	}
}

// Port of custom_status_tests.rs custom_status_version_increments and
// e2e_samples.rs sample_status_polling_fs: WaitForStatusChange returns each new
// status as its version moves, blocks while it does not, and returns when the
// instance ends.
func teWaitForStatusChange(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("Steps", func(ctx *runtime.Context, in string) (string, error) {
		for i := 1; i <= 3; i++ {
			ctx.SetCustomStatus(fmt.Sprintf("step-%d", i))
			if _, err := ctx.WaitForEvent("next").Get(); err != nil {
				return "", err
			}
		}
		return "done", nil
	})
	r.startFast(reg.Registry)
	r.startOrch("cs-steps", "Steps", "")
	var last uint64
	for i := 1; i <= 3; i++ {
		st := teStatusChange(t, r, "cs-steps", last)
		want := fmt.Sprintf("step-%d", i)
		if st.State != runtime.StateRunning || st.CustomStatus == nil || *st.CustomStatus != want || st.CustomStatusVersion <= last {
			t.Fatalf("change %d: state %s status %s version %d (last seen %d), want Running %q", i, st.State,
				teCustom(st.CustomStatus), st.CustomStatusVersion, last, want)
		}
		last = st.CustomStatusVersion
		if i == 1 {
			// Nothing changes until the event: the wait must not return early.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			st, err := r.C.WaitForStatusChange(ctx, "cs-steps", last)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait past the current version returned %+v, %v; want a deadline error", st, err)
			}
		}
		teRaise(t, r, "cs-steps", "next", "")
	}
	st := teStatusChange(t, r, "cs-steps", last)
	completed(t, st, "done")
	if st.CustomStatus == nil || *st.CustomStatus != "step-3" || st.CustomStatusVersion != last {
		t.Fatalf("after the end: status %s version %d, want \"step-3\" at version %d", teCustom(st.CustomStatus), st.CustomStatusVersion, last)
	}
}

// Port of custom_status_tests.rs custom_status_visible_on_failure.
func teCustomStatusOnFailure(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("FailWithStatus", func(ctx *runtime.Context, in string) (string, error) {
		ctx.SetCustomStatus("about-to-fail")
		return "", errBoom
	})
	r.startFast(reg.Registry)
	st := r.run("cs-fail", "FailWithStatus", "")
	if d := failed(t, st); d.Kind != provider.ErrorApplication || !strings.Contains(d.Message, "boom") {
		t.Fatalf("failure %+v", d)
	}
	if st.CustomStatus == nil || *st.CustomStatus != "about-to-fail" {
		t.Fatalf("status of the failed instance %s, want \"about-to-fail\"", teCustom(st.CustomStatus))
	}
}

// Port of custom_status_tests.rs custom_status_exceeding_size_limit_fails_orchestration
// and custom_status_at_size_limit_succeeds: MaxCustomStatusBytes is accepted, one
// byte more fails the orchestration with a Configuration LimitExceeded error.
func teCustomStatusSizeLimit(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).orch("SizedStatus", func(ctx *runtime.Context, in string) (string, error) {
		n, err := strconv.Atoi(in)
		if err != nil {
			return "", err
		}
		ctx.SetCustomStatus(strings.Repeat("x", n))
		return "done", nil
	})
	r.startFast(reg.Registry)
	r.startOrch("cs-oversize", "SizedStatus", strconv.Itoa(runtime.MaxCustomStatusBytes+1))
	r.startOrch("cs-exact", "SizedStatus", strconv.Itoa(runtime.MaxCustomStatusBytes))

	st := r.wait("cs-oversize")
	d := failed(t, st)
	if d.Kind != provider.ErrorConfiguration || d.ConfigKind != provider.ConfigLimitExceeded {
		t.Fatalf("oversized status failed with %+v, want Configuration/LimitExceeded", d)
	}
	if st.CustomStatus != nil {
		t.Fatalf("the oversized status was published: %s", teCustom(st.CustomStatus))
	}

	st = r.wait("cs-exact")
	completed(t, st, "done")
	if st.CustomStatus == nil || len(*st.CustomStatus) != runtime.MaxCustomStatusBytes {
		t.Fatalf("status at the limit: %s, want %d bytes", teCustom(st.CustomStatus), runtime.MaxCustomStatusBytes)
	}
}
