package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// instance plays the provider for the engine: it keeps the history of one execution
// and feeds turns.
type instance struct {
	t       *testing.T
	fn      Orchestration
	history []provider.Event
	now     time.Time
}

func newInstance(t *testing.T, fn Orchestration) *instance {
	return &instance{t: t, fn: fn, now: time.UnixMilli(1_700_000_000_000)}
}

// turn runs one turn with msgs, appends its events to the history and returns it.
func (in *instance) turn(msgs ...provider.WorkItem) TurnResult {
	in.t.Helper()
	in.now = in.now.Add(time.Second)
	res := RunTurn(Turn{Instance: "i", ExecutionID: 1, History: in.history, Messages: msgs, Now: in.now}, in.fn)
	for i, ev := range res.NewEvents {
		if want := uint64(len(in.history) + i + 1); ev.EventID != want {
			in.t.Fatalf("new event %d (%s) has id %d, want %d (contiguous)", i, ev.Kind, ev.EventID, want)
		}
	}
	in.history = append(in.history, res.NewEvents...)
	// Replaying the whole history afterwards must decide nothing new.
	if res.Status == provider.StatusRunning {
		again := RunTurn(Turn{Instance: "i", ExecutionID: 1, History: in.history, Now: in.now}, in.fn)
		if len(again.NewEvents) != 0 || len(again.WorkerItems) != 0 || again.Status != provider.StatusRunning {
			in.t.Fatalf("replaying the recorded history decided again: %+v", again)
		}
	}
	return res
}

func start(input string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: "i", Name: "Orch", Version: "1.0.0", Input: input, ExecutionID: 1}
}

func done(id uint64, result string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: "i", ExecutionID: 1, ID: id, Result: result}
}

func kinds(evs []provider.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, string(e.Kind))
	}
	return strings.Join(s, ",")
}

func TestSequentialActivitiesCompleteAcrossTurns(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		a, err := ctx.ScheduleActivity("A", input).Get()
		if err != nil {
			return "", err
		}
		b, err := ctx.ScheduleActivity("B", a).Get()
		return "out:" + b, err
	})
	r := in.turn(start("x"))
	if len(r.WorkerItems) != 1 || r.WorkerItems[0].Name != "A" || r.WorkerItems[0].Input != "x" || r.WorkerItems[0].ID != 2 {
		t.Fatalf("turn 1 scheduled %+v; want activity A(x) with id 2", r.WorkerItems)
	}
	if got := kinds(r.NewEvents); got != "OrchestrationStarted,ActivityScheduled" {
		t.Fatalf("turn 1 events %s", got)
	}
	r = in.turn(done(2, "a-out"))
	if len(r.WorkerItems) != 1 || r.WorkerItems[0].Name != "B" || r.WorkerItems[0].Input != "a-out" {
		t.Fatalf("turn 2 scheduled %+v; want B(a-out)", r.WorkerItems)
	}
	r = in.turn(done(4, "b-out"))
	if r.Status != provider.StatusCompleted || r.Output != "out:b-out" {
		t.Fatalf("turn 3: status %s output %q; want Completed out:b-out", r.Status, r.Output)
	}
	if got := kinds(in.history); got != "OrchestrationStarted,ActivityScheduled,ActivityCompleted,ActivityScheduled,ActivityCompleted,OrchestrationCompleted" {
		t.Fatalf("history %s", got)
	}
}

func TestDuplicateAndStaleCompletionsAreDropped(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivity("A", "").Get()
	})
	in.turn(start(""))
	stale := done(2, "other execution")
	stale.ExecutionID = 7
	r := in.turn(stale, done(99, "never scheduled"))
	if len(r.NewEvents) != 0 {
		t.Fatalf("stale completions made events %s", kinds(r.NewEvents))
	}
	r = in.turn(done(2, "first"), done(2, "duplicate"))
	if r.Status != provider.StatusCompleted || r.Output != "first" {
		t.Fatalf("status %s output %q; want the first completion", r.Status, r.Output)
	}
}

func TestFanOutJoinIsLinear(t *testing.T) {
	const n = 2000
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		fs := make([]*Future, n)
		for i := range fs {
			fs[i] = ctx.ScheduleActivity("Work", fmt.Sprint(i))
		}
		for _, err := range ctx.Join(fs...) {
			if err != nil {
				return "", err
			}
		}
		sum := 0
		for _, f := range fs {
			r, _ := f.Get()
			sum += len(r)
		}
		return fmt.Sprint(sum), nil
	})
	r := in.turn(start(""))
	if len(r.WorkerItems) != n {
		t.Fatalf("scheduled %d activities, want %d", len(r.WorkerItems), n)
	}
	var msgs []provider.WorkItem
	for _, w := range r.WorkerItems {
		msgs = append(msgs, done(w.ID, "ok"))
	}
	begin := time.Now()
	r = in.turn(msgs...)
	if r.Status != provider.StatusCompleted || r.Output != fmt.Sprint(2*n) {
		t.Fatalf("status %s output %q", r.Status, r.Output)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("a %d-way join took %v: replay is not linear", n, d)
	}
}

func TestSelectTimerBeatsActivityAndCancelsIt(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		act := ctx.ScheduleActivity("Slow", "")
		timer := ctx.CreateTimer(time.Minute)
		if ctx.Select(act, timer) == 1 {
			return "timeout", nil
		}
		return act.Get()
	})
	r := in.turn(start(""))
	if len(r.OrchestratorItems) != 1 || r.OrchestratorItems[0].Kind != provider.WorkTimerFired || r.OrchestratorItems[0].FireAtMs != in.now.Add(time.Minute).UnixMilli() {
		t.Fatalf("timer items %+v; want a TimerFired at now+1m", r.OrchestratorItems)
	}
	r = in.turn(provider.WorkItem{Kind: provider.WorkTimerFired, Instance: "i", ExecutionID: 1, ID: 3})
	if r.Status != provider.StatusCompleted || r.Output != "timeout" {
		t.Fatalf("status %s output %q; want timeout", r.Status, r.Output)
	}
	if len(r.CancelledActivities) != 1 || r.CancelledActivities[0].ActivityID != 2 {
		t.Fatalf("cancelled %+v; want the losing activity 2", r.CancelledActivities)
	}
	if !strings.Contains(kinds(r.NewEvents), "ActivityCancelRequested") {
		t.Fatalf("events %s lack the cancellation breadcrumb", kinds(r.NewEvents))
	}
	// A late completion of the cancelled activity changes nothing.
	if r := RunTurn(Turn{Instance: "i", ExecutionID: 1, History: in.history, Messages: []provider.WorkItem{done(2, "late")}}, in.fn); len(r.NewEvents) != 0 {
		t.Fatalf("late completion after the end made events %s", kinds(r.NewEvents))
	}
}

func TestExternalEventsArePositional(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		a, _ := ctx.WaitForEvent("approve").Get()
		b, _ := ctx.WaitForEvent("approve").Get()
		return a + "+" + b, nil
	})
	in.turn(start(""), provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: "i", Name: "other", Data: "ignored"})
	r := in.turn(provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: "i", Name: "approve", Data: "first"})
	if r.Status != provider.StatusRunning {
		t.Fatalf("status %s after one of two events", r.Status)
	}
	r = in.turn(provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: "i", Name: "approve", Data: "second"})
	if r.Output != "first+second" {
		t.Fatalf("output %q; want first+second", r.Output)
	}
}

func TestChangedCodeFailsWithNondeterminism(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivity("A", "").Get()
	})
	in.turn(start(""))
	in.fn = func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivity("B", "").Get() // deployed code now schedules B
	}
	r := RunTurn(Turn{Instance: "i", ExecutionID: 1, History: in.history, Messages: []provider.WorkItem{done(2, "x")}}, in.fn)
	if r.Status != provider.StatusFailed || r.Failure.Kind != provider.ErrorConfiguration || r.Failure.ConfigKind != provider.ConfigNondeterminism {
		t.Fatalf("status %s failure %+v; want a nondeterminism failure", r.Status, r.Failure)
	}
	if !strings.Contains(r.Failure.Message, `"B"`) || !strings.Contains(r.Failure.Message, `"A"`) {
		t.Fatalf("failure %q does not name the mismatch", r.Failure.Message)
	}
}

// TestCodeThatNowEndsEarlyFailsWithNondeterminism: changed code that returns where
// history recorded a further decision fails its execution; the mismatch surfaced
// outside the coroutine once and crashed the process.
func TestCodeThatNowEndsEarlyFailsWithNondeterminism(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		a, _ := ctx.ScheduleActivity("A", "").Get()
		return ctx.ScheduleActivity("B", a).Get()
	})
	in.turn(start(""))
	in.turn(done(2, "a"))
	in.fn = func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivity("A", "").Get() // deployed code now ends after A
	}
	r := RunTurn(Turn{Instance: "i", ExecutionID: 1, History: in.history, Messages: []provider.WorkItem{done(4, "b")}}, in.fn)
	if r.Status != provider.StatusFailed || r.Failure.ConfigKind != provider.ConfigNondeterminism ||
		!strings.Contains(r.Failure.Message, "OrchestrationCompleted where history recorded ActivityScheduled") {
		t.Fatalf("status %s failure %+v; want a nondeterminism failure naming the early end", r.Status, r.Failure)
	}
}

func TestPanicsAndErrorsFailTheOrchestration(t *testing.T) {
	r := newInstance(t, func(ctx *Context, input string) (string, error) { panic("boom") }).turn(start(""))
	if r.Status != provider.StatusFailed || r.Failure.AppKind != provider.AppPanicked || !strings.Contains(r.Output, "boom") {
		t.Fatalf("panic: status %s failure %+v", r.Status, r.Failure)
	}
	r = newInstance(t, func(ctx *Context, input string) (string, error) { return "", errors.New("bad input") }).turn(start(""))
	if r.Status != provider.StatusFailed || r.Failure.AppKind != provider.AppOrchestrationFailed || r.Output != "bad input" {
		t.Fatalf("error: status %s output %q", r.Status, r.Output)
	}
}

func TestCancelInstanceFailsAndCancelsPendingActivities(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleActivity("Long", "").Get()
	})
	in.turn(start(""))
	r := in.turn(provider.WorkItem{Kind: provider.WorkCancelInstance, Instance: "i", Reason: "user request"})
	if r.Status != provider.StatusFailed || r.Failure.AppKind != provider.AppCancelled || r.Failure.Reason != "user request" {
		t.Fatalf("status %s failure %+v; want Cancelled(user request)", r.Status, r.Failure)
	}
	if len(r.CancelledActivities) != 1 || r.CancelledActivities[0].ActivityID != 2 {
		t.Fatalf("cancelled %+v; want activity 2", r.CancelledActivities)
	}
}

func TestContinueAsNewEndsTheExecutionWithASuccessorItem(t *testing.T) {
	r := newInstance(t, func(ctx *Context, input string) (string, error) {
		if ctx.Now().IsZero() {
			t.Error("Now is zero")
		}
		return "", ctx.ContinueAsNew(input + "+1")
	}).turn(start("0"))
	if r.Status != provider.StatusContinuedAsNew || len(r.OrchestratorItems) != 1 {
		t.Fatalf("status %s items %+v", r.Status, r.OrchestratorItems)
	}
	next := r.OrchestratorItems[0]
	if next.Kind != provider.WorkContinueAsNew || next.Input != "0+1" || next.Name != "Orch" || next.Version != "" {
		// No version: the registry's policy picks the successor's (upgrades via CAN).
		t.Fatalf("successor %+v", next)
	}
}

func TestDeterministicHelpersAreStableAcrossReplays(t *testing.T) {
	var guids []string
	fn := func(ctx *Context, input string) (string, error) {
		g := ctx.NewGUID()
		guids = append(guids, g)
		_, err := ctx.ScheduleActivity("A", g).Get()
		return g + "@" + fmt.Sprint(ctx.Now().UnixMilli()), err
	}
	in := newInstance(t, fn)
	in.turn(start(""))
	r := in.turn(done(2, ""))
	if len(guids) < 3 || guids[0] != guids[len(guids)-1] {
		t.Fatalf("NewGUID differed between replays: %v", guids)
	}
	if !strings.HasPrefix(r.Output, guids[0]) {
		t.Fatalf("output %q", r.Output)
	}
}

func TestSubOrchestrationRoundTrip(t *testing.T) {
	parent := newInstance(t, func(ctx *Context, input string) (string, error) {
		return ctx.ScheduleSubOrchestration("Child", input).Get()
	})
	r := parent.turn(start("x"))
	if len(r.OrchestratorItems) != 1 {
		t.Fatalf("items %+v", r.OrchestratorItems)
	}
	child := r.OrchestratorItems[0]
	if child.Kind != provider.WorkStartOrchestration || child.Instance != "i::sub::2" || child.ParentInstance != "i" ||
		child.ParentID != 2 || child.ParentExecutionID != 1 || child.Name != "Child" {
		t.Fatalf("child start %+v", child)
	}
	// The child's final turn answers its parent.
	res := RunTurn(Turn{Instance: child.Instance, ExecutionID: 1, Messages: []provider.WorkItem{child}, Now: parent.now},
		func(ctx *Context, in string) (string, error) { return "child:" + in, nil })
	if res.Status != provider.StatusCompleted || len(res.OrchestratorItems) != 1 {
		t.Fatalf("child turn %+v", res)
	}
	reply := res.OrchestratorItems[0]
	if reply.Kind != provider.WorkSubOrchCompleted || reply.TargetInstance() != "i" || reply.ParentID != 2 || reply.Result != "child:x" {
		t.Fatalf("reply %+v", reply)
	}
	// A reply for another execution of the parent is stale.
	stale := reply
	stale.ParentExecutionID = 7
	if r := parent.turn(stale); len(r.NewEvents) != 0 {
		t.Fatalf("stale reply appended %s", kinds(r.NewEvents))
	}
	if r := parent.turn(reply); r.Status != provider.StatusCompleted || r.Output != "child:x" {
		t.Fatalf("parent after reply: %s %q", r.Status, r.Output)
	}
}

func TestStartCollidingWithAnotherParentIsAnswered(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) { return ctx.WaitForEvent("go").Get() })
	in.turn(start(""))
	foreign := provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: "i", Name: "Orch", ParentInstance: "p", ParentID: 4, ParentExecutionID: 1}
	r := in.turn(foreign, start("again"))
	if len(r.NewEvents) != 0 || len(r.OrchestratorItems) != 1 {
		t.Fatalf("collision turn: events %s items %+v", kinds(r.NewEvents), r.OrchestratorItems)
	}
	if a := r.OrchestratorItems[0]; a.Kind != provider.WorkSubOrchFailed || a.ParentInstance != "p" || a.ParentID != 4 ||
		!strings.Contains(a.Details.Message, "already exists") {
		t.Fatalf("answer %+v", a)
	}
}

func TestQueueMessagesBufferAndCarryForward(t *testing.T) {
	queued := func(data string) provider.WorkItem {
		return provider.WorkItem{Kind: provider.WorkQueueMessage, Instance: "i", Name: "q", Data: data}
	}
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		first, _ := ctx.DequeueEvent("q").Get()
		if ctx.Select(ctx.DequeueEvent("q"), ctx.CreateTimer(time.Hour)) == 1 {
			return "", ctx.ContinueAsNew(first)
		}
		return "", ctx.ContinueAsNew("late")
	})
	// Three messages arrive with the start: the first is consumed, the second wins the
	// select, the third is carried into the next execution.
	r := in.turn(start(""), queued("a"), queued("b"), queued("c"))
	if r.Status != provider.StatusContinuedAsNew {
		t.Fatalf("status %s", r.Status)
	}
	var can provider.WorkItem
	for _, item := range r.OrchestratorItems {
		if item.Kind == provider.WorkContinueAsNew {
			can = item
		}
	}
	if can.Kind != provider.WorkContinueAsNew || can.Input != "late" || len(can.CarryForward) != 1 || can.CarryForward[0] != (provider.NameData{Name: "q", Data: "c"}) {
		t.Fatalf("successor %+v", can)
	}
	// The next execution receives the carried message first.
	next := RunTurn(Turn{Instance: "i", ExecutionID: 2, Messages: []provider.WorkItem{can}, Now: in.now},
		func(ctx *Context, input string) (string, error) { return ctx.DequeueEvent("q").Get() })
	if next.Status != provider.StatusCompleted || next.Output != "c" {
		t.Fatalf("next execution %s %q", next.Status, next.Output)
	}
}

func TestKVSnapshotAndReplay(t *testing.T) {
	snapshot := map[string]provider.KVValue{"count": {Value: "41", LastUpdatedAtMs: 1}}
	fn := func(ctx *Context, input string) (string, error) {
		v, _ := ctx.KV("count")
		ctx.SetKV("count", v+"+1")
		if _, err := ctx.ScheduleActivity("A", "").Get(); err != nil {
			return "", err
		}
		v, _ = ctx.KV("count")
		return v, nil
	}
	first := RunTurn(Turn{Instance: "i", ExecutionID: 2, Messages: []provider.WorkItem{start("")}, KVSnapshot: snapshot, Now: time.UnixMilli(5000)}, fn)
	if kinds(first.NewEvents) != "OrchestrationStarted,KeyValueSet,ActivityScheduled" || first.NewEvents[1].Value != "41+1" {
		t.Fatalf("first turn %s %+v", kinds(first.NewEvents), first.NewEvents)
	}
	// Replay reads the snapshot of the previous execution, not the live state: the
	// recorded decision matches and the code sees its own write.
	second := RunTurn(Turn{Instance: "i", ExecutionID: 2, History: first.NewEvents, KVSnapshot: snapshot, Now: time.UnixMilli(6000),
		Messages: []provider.WorkItem{{Kind: provider.WorkActivityCompleted, Instance: "i", ExecutionID: 2, ID: 3}}}, fn)
	if second.Status != provider.StatusCompleted || second.Output != "41+1" {
		t.Fatalf("second turn %s %q %v", second.Status, second.Output, second.Failure)
	}
}

func TestLimitsFailTheOrchestration(t *testing.T) {
	r := newInstance(t, func(ctx *Context, input string) (string, error) {
		ctx.SetCustomStatus(strings.Repeat("x", MaxCustomStatusBytes+1))
		return "", nil
	}).turn(start(""))
	if r.Status != provider.StatusFailed || r.Failure.ConfigKind != provider.ConfigLimitExceeded {
		t.Fatalf("status %s failure %+v", r.Status, r.Failure)
	}
}

func TestReplaySafeLogging(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	fn := func(ctx *Context, input string) (string, error) {
		ctx.Logger().Info("before")
		if _, err := ctx.ScheduleActivity("A", "").Get(); err != nil {
			return "", err
		}
		ctx.Logger().Info("after")
		return "", nil
	}
	first := RunTurn(Turn{Instance: "i", ExecutionID: 1, Messages: []provider.WorkItem{start("")}, Now: time.UnixMilli(1000), Logger: logger}, fn)
	RunTurn(Turn{Instance: "i", ExecutionID: 1, History: first.NewEvents, Now: time.UnixMilli(2000), Logger: logger,
		Messages: []provider.WorkItem{done(2, "")}}, fn)
	out := buf.String()
	if strings.Count(out, "msg=before") != 1 || strings.Count(out, "msg=after") != 1 {
		t.Fatalf("each record must be written once, replays silent:\n%s", out)
	}
	if !strings.Contains(out, "instance=i") || !strings.Contains(out, "orchestration=Orch") {
		t.Fatalf("records lack the orchestration's identity:\n%s", out)
	}
}

// More unconsumed queue messages than MaxCarryForward: the oldest are dropped,
// whichever queues they are in, and the rest keep their arrival order.
func TestCarryForwardDropsTheOldestAcrossQueues(t *testing.T) {
	in := newInstance(t, func(ctx *Context, input string) (string, error) {
		if _, err := ctx.DequeueEvent("z").Get(); err != nil { // takes z's first message
			return "", err
		}
		return "", ctx.ContinueAsNew("next")
	})
	msgs := []provider.WorkItem{start("")}
	var arrived []provider.NameData // what remains after the consumed first "z", in arrival order
	for i := range 70 {             // "z" (sorted last by name) arrives first: the oldest
		msgs = append(msgs, provider.WorkItem{Kind: provider.WorkQueueMessage, Instance: "i", Name: "z", Data: fmt.Sprint("z", i)})
		if i > 0 {
			arrived = append(arrived, provider.NameData{Name: "z", Data: fmt.Sprint("z", i)})
		}
	}
	for i := range 60 {
		msgs = append(msgs, provider.WorkItem{Kind: provider.WorkQueueMessage, Instance: "i", Name: "a", Data: fmt.Sprint("a", i)})
		arrived = append(arrived, provider.NameData{Name: "a", Data: fmt.Sprint("a", i)})
	}
	r := in.turn(msgs...)
	var can provider.WorkItem
	for _, item := range r.OrchestratorItems {
		if item.Kind == provider.WorkContinueAsNew {
			can = item
		}
	}
	want := arrived[len(arrived)-MaxCarryForward:]
	if !slices.Equal(can.CarryForward, want) {
		t.Fatalf("carried %d messages %v...; want the newest %d, from %v", len(can.CarryForward), can.CarryForward[:3], MaxCarryForward, want[:3])
	}
}
