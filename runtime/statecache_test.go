package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// twin plays the provider for one instance and runs every turn twice: with RunTurn (a
// full replay) and through a state cache, committing the cached path's result. Each
// turn must give identical results and identical replay-safe logs.
type twin struct {
	t       *testing.T
	fn      Orchestration
	cache   *stateCache
	exec    uint64
	history []provider.Event // as a provider returns it: decoded from its stored form
	kv      map[string]provider.KVValue
	now     time.Time
	n       int // turns run

	starts   int // times the cached path started the code
	unwound  int // times code it started returned or was unwound
	resumed  int // turns the cached path resumed a cached engine
	replayed int // turns the cached path replayed although it held an engine (stale)

	wantLog, gotLog strings.Builder
}

func newTwin(t *testing.T, fn Orchestration) *twin {
	c := newStateCache(8)
	t.Cleanup(c.close)
	return &twin{t: t, fn: fn, cache: c, exec: 1, kv: map[string]provider.KVValue{}, now: time.UnixMilli(1_700_000_000_000)}
}

func (tw *twin) turnOf(msgs []provider.WorkItem, log *strings.Builder) Turn {
	return Turn{Instance: "i", ExecutionID: tw.exec, History: tw.history, Messages: msgs, KVSnapshot: tw.kv,
		Now: tw.now, RuntimeVersion: "1.2.3", Logger: plainLogger(log)}
}

// plainLogger writes text records without their time, so two runs can be compared.
func plainLogger(w *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}}))
}

// turn runs one turn both ways, checks they agree, commits it and returns it.
func (tw *twin) turn(msgs ...provider.WorkItem) TurnResult {
	tw.t.Helper()
	got, e := tw.run(msgs...)
	tw.cache.put(e)
	if live := tw.starts - tw.unwound; live != tw.cache.order.Len() {
		tw.t.Fatalf("turn %d: %d coroutines live, %d cached: every other one must be stopped", tw.n, live, tw.cache.order.Len())
	}
	tw.commit(got)
	return got
}

// run runs one turn both ways and checks they agree, without committing it; the
// caller owns the returned engine.
func (tw *twin) run(msgs ...provider.WorkItem) (TurnResult, *engine) {
	tw.t.Helper()
	tw.n++
	tw.now = tw.now.Add(time.Second)
	want := RunTurn(tw.turnOf(msgs, &tw.wantLog), tw.fn)
	_, held := tw.cache.byInst["i"]
	starts := tw.starts
	got, e, _ := tw.cache.run(tw.turnOf(msgs, &tw.gotLog), func(ctx *Context, in string) (string, error) {
		tw.starts++
		defer func() { tw.unwound++ }()
		return tw.fn(ctx, in)
	})
	switch {
	case held && tw.starts == starts:
		tw.resumed++
	case held:
		tw.replayed++
	}
	if !reflect.DeepEqual(got, want) {
		tw.t.Fatalf("turn %d: the cached path's result differs from a replay's\n got %+v\nwant %+v", tw.n, got, want)
	}
	if g, w := tw.gotLog.String(), tw.wantLog.String(); g != w {
		tw.t.Fatalf("turn %d: the cached path logged\n%s\na replay logged\n%s", tw.n, g, w)
	}
	if e != nil && got.Status != provider.StatusRunning {
		tw.t.Fatalf("turn %d: an engine of an ended execution (%s) is kept", tw.n, got.Status)
	}
	return got, e
}

// commit stores the turn's events as a provider would; an execution that continued
// as new leaves its KV state in the snapshot of the next.
func (tw *twin) commit(res TurnResult) {
	tw.t.Helper()
	for i := range res.NewEvents {
		b, err := provider.MarshalEvent(&res.NewEvents[i])
		if err != nil {
			tw.t.Fatal(err)
		}
		ev, err := provider.UnmarshalEvent(b)
		if err != nil {
			tw.t.Fatal(err)
		}
		tw.history = append(tw.history, ev)
	}
	if res.Status == provider.StatusContinuedAsNew {
		tw.kv = maps.Clone(tw.kv)
		for _, ev := range tw.history {
			switch ev.Kind {
			case provider.EventKeyValueSet:
				tw.kv[ev.Key] = provider.KVValue{Value: ev.Value, LastUpdatedAtMs: ev.LastUpdatedAtMs}
			case provider.EventKeyValueCleared:
				delete(tw.kv, ev.Key)
			case provider.EventKeyValuesCleared:
				clear(tw.kv)
			}
		}
		tw.exec++
		tw.history = nil
	}
}

// expectResumed asserts how many turns resumed a cached engine.
func (tw *twin) expectResumed(n int) {
	tw.t.Helper()
	if tw.resumed != n || tw.replayed != 0 {
		tw.t.Fatalf("%d turns resumed and %d replayed a held engine, want %d resumed and none replayed", tw.resumed, tw.replayed, n)
	}
}

func (tw *twin) start(input string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: "i", Name: "Orch", Version: "1.0.0", Input: input, ExecutionID: tw.exec}
}

func (tw *twin) done(id uint64, result string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: "i", ExecutionID: tw.exec, ID: id, Result: result}
}

func (tw *twin) failed(id uint64, msg string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkActivityFailed, Instance: "i", ExecutionID: tw.exec, ID: id,
		Details: &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppActivityFailed, Message: msg}}
}

func (tw *twin) raise(name, data string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: "i", Name: name, Data: data}
}

func (tw *twin) enqueue(queue, data string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkQueueMessage, Instance: "i", Name: queue, Data: data}
}

// completeAll answers every activity res scheduled with its input.
func (tw *twin) completeAll(res TurnResult) []provider.WorkItem {
	var out []provider.WorkItem
	for _, w := range res.WorkerItems {
		out = append(out, tw.done(w.ID, w.Input+"!"))
	}
	return out
}

// timers are the timer items res scheduled, fired.
func timers(res TurnResult) []provider.WorkItem {
	var out []provider.WorkItem
	for _, w := range res.OrchestratorItems {
		if w.Kind == provider.WorkTimerFired {
			out = append(out, w)
		}
	}
	return out
}

func item(res TurnResult, k provider.WorkItemKind) provider.WorkItem {
	for _, w := range res.OrchestratorItems {
		if w.Kind == k {
			return w
		}
	}
	return provider.WorkItem{}
}

func TestStateCacheSequentialActivities(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		v := in
		for i := range 4 {
			ctx.Logger().Info("step", "i", i, "now", ctx.Now().UnixMilli(), "guid", ctx.NewGUID())
			r, err := ctx.ScheduleActivity("Step", v).Get()
			if err != nil {
				return "", err
			}
			v = r
		}
		ctx.Logger().Info("done")
		return v + "@" + strconv.FormatInt(ctx.Now().UnixMilli(), 10) + ctx.NewGUID(), nil
	})
	res := tw.turn(tw.start("x"))
	for res.Status == provider.StatusRunning {
		w := res.WorkerItems[0]
		// A duplicate, a stale completion and one nobody scheduled come along.
		stale := tw.done(w.ID, "stale")
		stale.ExecutionID = 9
		tw.turn(stale, tw.done(99, "unknown"))
		res = tw.turn(tw.done(w.ID, w.Input+"!"), tw.done(w.ID, "duplicate"))
	}
	if res.Status != provider.StatusCompleted || !strings.HasPrefix(res.Output, "x!!!!@") {
		t.Fatalf("status %s output %q", res.Status, res.Output)
	}
	if strings.Count(tw.gotLog.String(), "msg=step") != 4 || !strings.Contains(tw.gotLog.String(), "orchestration=Orch") {
		t.Fatalf("each record must be written once:\n%s", tw.gotLog.String())
	}
	tw.expectResumed(8)
}

func TestStateCacheFanOutJoinSelect(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		fs := []*Future{ctx.ScheduleActivity("A", "1"), ctx.ScheduleActivity("A", "2"), ctx.ScheduleActivity("A", "3")}
		var out []string
		for i, err := range ctx.Join(fs...) {
			r, _ := fs[i].Get()
			out = append(out, fmt.Sprintf("%s/%v", r, err))
		}
		slow := ctx.ScheduleActivity("Slow", "")
		if ctx.Select(slow, ctx.CreateTimer(time.Minute)) == 1 {
			out = append(out, "timeout")
		}
		ev, q := ctx.WaitForEvent("go"), ctx.DequeueEvent("q")
		switch ctx.Select(ev, q, ctx.ScheduleSubOrchestration("Child", "")) {
		case 0:
			out = append(out, "event")
		case 1:
			out = append(out, "queue")
		}
		return strings.Join(out, ","), nil
	})
	res := tw.turn(tw.start(""))
	acts := tw.completeAll(res)
	tw.turn(acts[1])
	tw.turn(tw.failed(acts[0].ID, "boom"))
	res = tw.turn(acts[2])
	if len(res.WorkerItems) != 1 || len(timers(res)) != 1 {
		t.Fatalf("after the join: %+v", res)
	}
	res = tw.turn(timers(res)...)
	if len(res.CancelledActivities) != 1 {
		t.Fatalf("the select loser was not cancelled: %+v", res)
	}
	tw.turn(tw.done(res.CancelledActivities[0].ActivityID, "late"))
	res = tw.turn(tw.enqueue("q", "m"), tw.raise("go", "now"))
	if res.Status != provider.StatusCompleted || res.Output != "/activity A failed: boom,2!/<nil>,3!/<nil>,timeout,queue" {
		t.Fatalf("status %s output %q", res.Status, res.Output)
	}
	tw.expectResumed(6)
}

func TestStateCacheTimers(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		var at []string
		for i := range 3 {
			if _, err := ctx.CreateTimer(time.Duration(i+1) * time.Minute).Get(); err != nil {
				return "", err
			}
			at = append(at, strconv.FormatInt(ctx.Now().UnixMilli(), 10))
		}
		return strings.Join(at, ","), nil
	})
	res := tw.turn(tw.start(""))
	for res.Status == provider.StatusRunning {
		fired := timers(res)
		tw.turn() // nothing due yet
		res = tw.turn(fired...)
	}
	if res.Status != provider.StatusCompleted {
		t.Fatalf("status %s", res.Status)
	}
	tw.expectResumed(6)
}

func TestStateCacheExternalEventsAndQueues(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		a, _ := ctx.WaitForEvent("approve").Get()
		b, _ := ctx.WaitForEvent("approve").Get()
		q1, _ := ctx.DequeueEvent("q").Get()
		if ctx.Select(ctx.DequeueEvent("q"), ctx.CreateTimer(time.Hour)) == 1 {
			return a + b + q1 + "timeout", nil
		}
		q2, _ := ctx.DequeueEvent("q").Get()
		return a + "+" + b + "+" + q1 + "+" + q2, nil
	})
	tw.turn(tw.start(""), tw.raise("other", "dropped"), tw.enqueue("q", "early"))
	tw.turn(tw.raise("approve", "first"), tw.raise("nobody", "dropped"))
	tw.turn(tw.enqueue("q", "second"))
	res := tw.turn(tw.raise("approve", "late"))
	if res.Status != provider.StatusRunning {
		t.Fatalf("status %s output %q", res.Status, res.Output)
	}
	res = tw.turn(tw.enqueue("q", "third"))
	if res.Status != provider.StatusCompleted || res.Output != "first+late+early+third" {
		t.Fatalf("status %s output %q", res.Status, res.Output)
	}
	tw.expectResumed(4)
}

func TestStateCacheSubOrchestrations(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		a := ctx.ScheduleSubOrchestration("Child", "a")
		b := ctx.ScheduleSubOrchestration("Child", "b", WithInstanceID("child-b"), WithVersion("2.0.0"))
		ctx.StartOrchestration("Detached", "det-1", "x")
		ra, errA := a.Get()
		_, errB := b.Get()
		var se *SubOrchestrationError
		if !errors.As(errB, &se) {
			return "", fmt.Errorf("b: %v", errB)
		}
		return ra + "|" + fmt.Sprint(errA) + "|" + se.Instance, nil
	})
	res := tw.turn(tw.start(""))
	var starts []provider.WorkItem
	for _, w := range res.OrchestratorItems {
		if w.Kind == provider.WorkStartOrchestration && w.ParentInstance == "i" {
			starts = append(starts, w)
		}
	}
	if len(starts) != 2 {
		t.Fatalf("children %+v", res.OrchestratorItems)
	}
	reply := func(child provider.WorkItem, kind provider.WorkItemKind) provider.WorkItem {
		w := provider.WorkItem{Kind: kind, Instance: child.Instance, ParentInstance: "i", ParentID: child.ParentID, ParentExecutionID: child.ParentExecutionID}
		if kind == provider.WorkSubOrchFailed {
			w.Details = &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppOrchestrationFailed, Message: "child failed"}
		} else {
			w.Result = "ok:" + child.Input
		}
		return w
	}
	stale := reply(starts[0], provider.WorkSubOrchCompleted)
	stale.ParentExecutionID = 5
	// A start of this instance by another parent is answered, a repeated one ignored.
	foreign := provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: "i", Name: "Orch", ParentInstance: "p", ParentID: 3, ParentExecutionID: 1}
	res = tw.turn(stale, foreign, tw.start("again"))
	if len(res.OrchestratorItems) != 1 || res.OrchestratorItems[0].Kind != provider.WorkSubOrchFailed {
		t.Fatalf("collision answer %+v", res.OrchestratorItems)
	}
	tw.turn(reply(starts[1], provider.WorkSubOrchFailed))
	res = tw.turn(reply(starts[0], provider.WorkSubOrchCompleted))
	if res.Status != provider.StatusCompleted || res.Output != "ok:a|<nil>|child-b" {
		t.Fatalf("status %s output %q failure %v", res.Status, res.Output, res.Failure)
	}
	tw.expectResumed(3)
}

func TestStateCacheCustomStatusAndKV(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		v, _ := ctx.KV("count")
		ctx.SetKV("count", v+"+1")
		ctx.SetKV("tmp", "x")
		ctx.SetCustomStatus("started")
		if _, err := ctx.ScheduleActivity("A", "").Get(); err != nil {
			return "", err
		}
		ctx.ClearKV("tmp")
		pruned := ctx.PruneKVUpdatedBefore(ctx.Now())
		s, _ := ctx.CustomStatus()
		ctx.SetCustomStatus(s + "+step")
		remote, err := ctx.KVFromInstance("other", "k").Get()
		if err != nil {
			return "", err
		}
		ctx.ResetCustomStatus()
		_, err = ctx.KVFromInstance("other", "missing").Get()
		if _, err := ctx.ScheduleActivity("B", "").Get(); err != nil {
			return "", err
		}
		ctx.SetCustomStatus("done")
		ctx.ClearAllKV()
		ctx.SetKV("final", strings.Join(ctx.KVKeys(), ","))
		return fmt.Sprintf("%d %s %t %v", pruned, remote, errors.Is(err, ErrKVNotFound), ctx.KVAll()), nil
	})
	tw.kv = map[string]provider.KVValue{"count": {Value: "41", LastUpdatedAtMs: 1}, "old": {Value: "o", LastUpdatedAtMs: 2}}
	res := tw.turn(tw.start(""))
	res = tw.turn(tw.completeAll(res)...)
	res = tw.turn(tw.done(res.WorkerItems[0].ID, "1remote"))
	res = tw.turn(tw.done(res.WorkerItems[0].ID, "0"))
	res = tw.turn(tw.completeAll(res)...)
	if res.Status != provider.StatusCompleted || res.Output != "2 remote true map[final:]" {
		t.Fatalf("status %s output %q failure %v", res.Status, res.Output, res.Failure)
	}
	tw.expectResumed(4)
}

func TestStateCacheContinueAsNew(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		n, _ := strconv.Atoi(in)
		v, _ := ctx.KV("total")
		ctx.SetKV("total", v+in)
		s, _ := ctx.CustomStatus()
		ctx.SetCustomStatus(s + in)
		if _, err := ctx.ScheduleActivity("A", in).Get(); err != nil {
			return "", err
		}
		m, _ := ctx.DequeueEvent("q").Get()
		if n == 2 {
			return m + "|" + v + in + "|" + s + in, nil
		}
		return "", ctx.ContinueAsNew(strconv.Itoa(n + 1))
	})
	res := tw.turn(tw.start("0"))
	for res.Status != provider.StatusCompleted {
		if res.Status == provider.StatusContinuedAsNew {
			res = tw.turn(item(res, provider.WorkContinueAsNew))
			continue
		}
		res = tw.turn(append(tw.completeAll(res), tw.enqueue("q", fmt.Sprint("m", tw.exec)), tw.enqueue("q", "extra"))...)
		if res.Status == provider.StatusFailed {
			t.Fatalf("failed: %v", res.Failure)
		}
	}
	if tw.exec != 3 || res.Output != "m2|012|012" {
		t.Fatalf("execution %d output %q", tw.exec, res.Output)
	}
	tw.expectResumed(3)
}

func TestStateCacheCancellation(t *testing.T) {
	orch := func(ctx *Context, in string) (string, error) {
		a := ctx.ScheduleActivity("Long", "")
		c := ctx.ScheduleSubOrchestration("Child", "")
		if _, err := ctx.CreateTimer(time.Minute).Get(); err != nil {
			return "", err
		}
		ctx.Join(a, c)
		return "done", nil
	}
	cancel := provider.WorkItem{Kind: provider.WorkCancelInstance, Instance: "i", Reason: "user request"}

	tw := newTwin(t, orch)
	res := tw.turn(tw.start(""))
	tw.turn(tw.done(res.WorkerItems[0].ID, "r"))
	res = tw.turn(cancel, cancel)
	if res.Status != provider.StatusFailed || res.Failure.AppKind != provider.AppCancelled || len(res.OrchestratorItems) != 1 {
		t.Fatalf("status %s failure %+v items %+v", res.Status, res.Failure, res.OrchestratorItems)
	}
	tw.expectResumed(2)
	if tw.cache.order.Len() != 0 {
		t.Fatal("the engine of a cancelled execution is kept")
	}

	// A cancel that comes with the message letting the code finish still wins.
	tw = newTwin(t, orch)
	res = tw.turn(tw.start(""))
	child := res.OrchestratorItems[0]
	tw.turn(append(timers(res), tw.done(res.WorkerItems[0].ID, "r"))...)
	res = tw.turn(provider.WorkItem{Kind: provider.WorkSubOrchCompleted, Instance: child.Instance, ParentInstance: "i", ParentID: child.ParentID,
		ParentExecutionID: 1}, cancel)
	if res.Status != provider.StatusFailed || res.Failure.AppKind != provider.AppCancelled {
		t.Fatalf("status %s failure %+v", res.Status, res.Failure)
	}
	tw.expectResumed(2)
}

// A deployment changes the code: the new process replays (its cache is empty) and
// either fails at once or, when the new code waits before reaching a recorded
// decision, only once a replay meets the completion it could not take.
func TestStateCacheNondeterministicChange(t *testing.T) {
	v1 := func(ctx *Context, in string) (string, error) {
		a := ctx.ScheduleActivity("A", "")
		b := ctx.ScheduleActivity("B", "")
		ctx.Join(a, b)
		return "v1", nil
	}
	v2 := func(ctx *Context, in string) (string, error) {
		if _, err := ctx.ScheduleActivity("A", "").Get(); err != nil {
			return "", err
		}
		if _, err := ctx.ScheduleActivity("B", "").Get(); err != nil {
			return "", err
		}
		return "v2", nil
	}
	tw := newTwin(t, v1)
	tw.turn(tw.start(""))
	tw.fn = v2
	tw.cache.close()                // the new process starts with an empty cache
	res := tw.turn(tw.done(3, "b")) // v2 has not reached B yet: the completion goes nowhere
	if res.Status != provider.StatusRunning || tw.cache.order.Len() != 0 {
		t.Fatalf("status %s, %d cached: a state a replay cannot rebuild is kept", res.Status, tw.cache.order.Len())
	}
	res = tw.turn(tw.done(2, "a"))
	if res.Status != provider.StatusFailed || res.Failure.ConfigKind != provider.ConfigNondeterminism {
		t.Fatalf("status %s failure %+v; want nondeterminism", res.Status, res.Failure)
	}

	tw = newTwin(t, v1)
	tw.turn(tw.start(""))
	tw.fn = func(ctx *Context, in string) (string, error) { return ctx.ScheduleActivity("C", "").Get() }
	tw.cache.close()
	res = tw.turn(tw.done(2, "a"))
	if res.Status != provider.StatusFailed || res.Failure.ConfigKind != provider.ConfigNondeterminism {
		t.Fatalf("status %s failure %+v; want nondeterminism", res.Status, res.Failure)
	}
}

func TestStateCachePanicAndErrorEndTheExecution(t *testing.T) {
	tw := newTwin(t, func(ctx *Context, in string) (string, error) {
		r, _ := ctx.ScheduleActivity("A", "").Get()
		if r == "panic" {
			panic("boom")
		}
		r, _ = ctx.ScheduleActivity("A", "").Get()
		return "", errors.New(r)
	})
	res := tw.turn(tw.start(""))
	res = tw.turn(tw.done(res.WorkerItems[0].ID, "ok"))
	res = tw.turn(tw.done(res.WorkerItems[0].ID, "bad"))
	if res.Status != provider.StatusFailed || res.Output != "bad" {
		t.Fatalf("status %s output %q", res.Status, res.Output)
	}
	tw = newTwin(t, tw.fn)
	res = tw.turn(tw.start(""))
	res = tw.turn(tw.done(res.WorkerItems[0].ID, "panic"))
	if res.Status != provider.StatusFailed || res.Failure.AppKind != provider.AppPanicked {
		t.Fatalf("status %s failure %+v", res.Status, res.Failure)
	}
	tw.expectResumed(1)
}

// stepper is an orchestration of sequential activities whose turns the stale-entry
// tests drive.
func stepper(ctx *Context, in string) (string, error) {
	v := in
	for range 5 {
		r, err := ctx.ScheduleActivity("Step", v).Get()
		if err != nil {
			return "", err
		}
		v = r
	}
	return v, nil
}

// next completes the activity res scheduled.
func (tw *twin) next(res TurnResult) TurnResult { return tw.turn(tw.completeAll(res)...) }

func TestStateCacheStaleEntryFallsBackToReplay(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(tw *twin, res TurnResult) TurnResult // returns the last result
	}{
		{"AnotherProcessRanATurn", func(tw *twin, res TurnResult) TurnResult {
			other := RunTurn(tw.turnOf(tw.completeAll(res), &strings.Builder{}), tw.fn)
			tw.commit(other)
			return other
		}},
		{"HistoryChangedInPlace", func(tw *twin, res TurnResult) TurnResult {
			tw.history[len(tw.history)-2].TimestampMs++ // same length, other content
			return res
		}},
		{"InstanceRecreated", func(tw *twin, res TurnResult) TurnResult {
			h := tw.history
			tw.history = nil
			tw.now = tw.now.Add(time.Hour)
			fresh := RunTurn(tw.turnOf([]provider.WorkItem{tw.start("x")}, &strings.Builder{}), tw.fn)
			tw.commit(fresh)
			if len(tw.history) != 2 || len(h) != 2 {
				tw.t.Fatalf("histories of %d and %d events", len(h), len(tw.history))
			}
			return fresh
		}},
		{"KVSnapshotChanged", func(tw *twin, res TurnResult) TurnResult {
			tw.kv = map[string]provider.KVValue{"k": {Value: "v"}}
			return res
		}},
		{"ExecutionChanged", func(tw *twin, res TurnResult) TurnResult {
			tw.exec = 2
			return res
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tw := newTwin(t, stepper)
			res := tw.turn(tw.start("x"))
			if c.name != "InstanceRecreated" {
				res = tw.next(res)
			}
			res = c.change(tw, res)
			res = tw.next(res)
			if tw.replayed != 1 {
				t.Fatalf("%d turns replayed a held engine, want the stale one", tw.replayed)
			}
			tw.replayed = 0
			resumed := tw.resumed
			tw.next(res) // the replayed turn's engine is current again
			tw.expectResumed(resumed + 1)
		})
	}
}

func TestStateCachePoisonAndFailedCommitDropTheEntry(t *testing.T) {
	tw := newTwin(t, stepper)
	res := tw.turn(tw.start("x"))
	res = tw.next(res)

	// The commit fails: the turn's engine is dropped, and the turn runs again from
	// history; the one after resumes.
	_, e := tw.run(tw.completeAll(res)...)
	if e == nil || tw.cache.order.Len() != 0 {
		t.Fatalf("engine %v, %d cached: a turn in flight must own its engine", e, tw.cache.order.Len())
	}
	e.close()
	res = tw.next(res)
	tw.expectResumed(2)
	res = tw.next(res)
	tw.expectResumed(3)

	// A poisoned turn fails the execution without resuming the code.
	tw.now = tw.now.Add(time.Second)
	turn := tw.turnOf(tw.completeAll(res), &strings.Builder{})
	turn.Poison = &provider.ErrorDetails{Kind: provider.ErrorPoison, PoisonType: provider.PoisonOrchestration, Instance: "i", AttemptCount: 11, MaxAttempts: 10}
	want := RunTurn(turn, tw.fn)
	got, kept, _ := tw.cache.run(turn, tw.fn)
	if kept != nil || !reflect.DeepEqual(got, want) || got.Status != provider.StatusFailed || tw.cache.order.Len() != 0 {
		t.Fatalf("poisoned turn: kept %v, got %+v, want %+v", kept, got, want)
	}
}

// unwinding is code that waits forever and counts in unwinds how often it was
// unwound (its deferred call ran).
func unwinding(unwinds *int) Orchestration {
	return func(ctx *Context, in string) (string, error) {
		defer func() { *unwinds++ }()
		return ctx.WaitForEvent("never").Get()
	}
}

func TestStateCacheEvictsLeastRecentlyUsedAndStopsCode(t *testing.T) {
	unwinds := 0
	c := newStateCache(2)
	fn := unwinding(&unwinds)
	turn := func(instance string, history []provider.Event, msgs ...provider.WorkItem) []provider.Event {
		res, e, _ := c.run(Turn{Instance: instance, ExecutionID: 1, History: history, Messages: msgs, Now: time.UnixMilli(1000)}, fn)
		c.put(e)
		return append(history, res.NewEvents...)
	}
	startOf := func(instance string) provider.WorkItem {
		return provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: instance, Name: "Orch", ExecutionID: 1}
	}
	ha := turn("a", nil, startOf("a"))
	turn("b", nil, startOf("b"))
	turn("a", ha) // a is now the most recently used
	if unwinds != 0 || c.order.Len() != 2 {
		t.Fatalf("%d unwinds, %d cached", unwinds, c.order.Len())
	}
	hc := turn("c", nil, startOf("c"))
	if _, ok := c.byInst["b"]; ok || unwinds != 1 || c.order.Len() != 2 {
		t.Fatalf("b should be evicted and its code stopped: %d unwinds, %d cached", unwinds, c.order.Len())
	}
	// A put of an instance already cached replaces (and stops) the older engine.
	e := newEngine(Turn{Instance: "c", ExecutionID: 1, History: hc})
	e.run(fn)
	c.put(e)
	if unwinds != 2 || c.order.Len() != 2 || c.byInst["c"].Value != e {
		t.Fatalf("replacing: %d unwinds, %d cached", unwinds, c.order.Len())
	}
	c.close()
	if unwinds != 4 || c.order.Len() != 0 {
		t.Fatalf("close: %d unwinds, %d cached; want every code stopped", unwinds, c.order.Len())
	}
}

func TestStateCacheDisabled(t *testing.T) {
	unwinds := 0
	c := newStateCache(-1)
	res, e, _ := c.run(Turn{Instance: "a", ExecutionID: 1, Messages: []provider.WorkItem{{Kind: provider.WorkStartOrchestration, Instance: "a", Name: "O"}}}, unwinding(&unwinds))
	if c != nil || e != nil || res.Status != provider.StatusRunning || unwinds != 1 {
		t.Fatalf("a disabled cache kept %v (%d unwinds)", e, unwinds)
	}
	c.put(e)
	c.close()
}

func TestEventEqualComparesEveryField(t *testing.T) {
	typ := reflect.TypeFor[provider.Event]()
	for i := range typ.NumField() {
		var a, b provider.Event
		setNonZero(reflect.ValueOf(&b).Elem().Field(i))
		if eventEqual(&a, &b) || eventEqual(&b, &a) {
			t.Errorf("eventEqual ignores field %s", typ.Field(i).Name)
		}
		if k := typ.Field(i).Type.Kind(); k == reflect.Pointer || k == reflect.Slice {
			// Equal contents behind different pointers are equal; different ones not.
			setNonZero(reflect.ValueOf(&a).Elem().Field(i))
			if !eventEqual(&a, &b) {
				t.Errorf("eventEqual compares field %s by address", typ.Field(i).Name)
			}
			b = provider.Event{}
			f := reflect.ValueOf(&b).Elem().Field(i)
			if k == reflect.Pointer {
				f.Set(reflect.New(f.Type().Elem()))
			} else {
				f.Set(reflect.ValueOf([]provider.NameData{{Name: "other"}}))
			}
			if eventEqual(&a, &b) {
				t.Errorf("eventEqual ignores the contents of field %s", typ.Field(i).Name)
			}
		}
	}
}

// setNonZero gives v a fresh non-zero value.
func setNonZero(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		setNonZero(p.Elem())
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			setNonZero(v.Field(i))
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		setNonZero(s.Index(0))
		v.Set(s)
	default:
		panic("setNonZero: unhandled kind " + v.Kind().String())
	}
}
