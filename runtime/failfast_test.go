package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"

	"github.com/duroq/duroq/runtime/provider"
)

// ackFake acks work items in memory. Like the adapter, it rejects, permanently with
// ErrInvalid, a completion whose result or message exceeds limit, and a batch
// holding one;
// with perm set every ack fails permanently with it. The embedded BatchProvider is
// nil: the tests call nothing else.
type ackFake struct {
	provider.BatchProvider
	limit     int
	perm      error
	mu        sync.Mutex
	acked     map[string]*provider.WorkItem // token → completion
	abandoned []string                      // tokens
	batches   int                           // AckWorkItems calls
}

func newAckFake(limit int) *ackFake {
	return &ackFake{limit: limit, acked: map[string]*provider.WorkItem{}}
}

func (f *ackFake) check(op string, c *provider.WorkItem) error {
	if f.perm != nil {
		return provider.Permanent(op, f.perm)
	}
	size := len(c.Result)
	if c.Details != nil {
		size += len(c.Details.Message)
	}
	if size > f.limit {
		return provider.Permanent(op, fmt.Errorf("%w: payload of %d bytes exceeds the limit of %d bytes", provider.ErrInvalid, size, f.limit))
	}
	return nil
}

func (f *ackFake) AckWorkItem(_ context.Context, token string, c *provider.WorkItem) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("ack_work_item", c); err != nil {
		return err
	}
	f.acked[token] = c
	return nil
}

func (f *ackFake) AckWorkItems(_ context.Context, acks []provider.WorkAck) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches++
	for _, a := range acks {
		if err := f.check("ack_work_items", a.Completion); err != nil {
			return err
		}
	}
	for _, a := range acks {
		f.acked[a.Token] = a.Completion
	}
	return nil
}

func (f *ackFake) AbandonWorkItem(_ context.Context, token string, _ provider.Duration, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abandoned = append(f.abandoned, token)
	return nil
}

func settledWith(token string, id uint64, result string) settledActivity {
	lease := &provider.WorkItemLease{LockToken: token, AttemptCount: 1,
		Item: provider.WorkItem{Kind: provider.WorkActivityExecute, Instance: "i", ExecutionID: 1, ID: id, Name: "Act"}}
	return settledActivity{lease: lease, log: slog.New(slog.DiscardHandler),
		completion: &provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: "i", ExecutionID: 1, ID: id, Result: result}}
}

// A group commit holding a result the provider can never store falls back to one
// by one: the others complete, and that one is acked once with a failure saying
// why (bounded), instead of being abandoned to run again.
func TestUnstorableResultFailsTheActivityInGroupCommit(t *testing.T) {
	f := newAckFake(1000)
	r := &Runtime{p: f, log: slog.New(slog.DiscardHandler)}
	settled := make(chan settledActivity, 3)
	settled <- settledWith("a", 2, "small")
	settled <- settledWith("b", 3, strings.Repeat("x", 1<<20))
	settled <- settledWith("c", 4, "small too")
	close(settled)
	last := &lastErrors{m: map[activityKey]string{}}
	r.ackCommitter(context.Background(), f, true, settled, last)

	if f.batches != 1 || len(f.abandoned) != 0 || len(f.acked) != 3 {
		t.Fatalf("%d batches, abandoned %v, acked %d items; want the group tried once, then 3 acks, no abandon", f.batches, f.abandoned, len(f.acked))
	}
	if a, c := f.acked["a"], f.acked["c"]; a.Kind != provider.WorkActivityCompleted || a.Result != "small" || c.Result != "small too" {
		t.Fatalf("the storable results were acked as %+v and %+v", a, c)
	}
	b := f.acked["b"]
	if b.Kind != provider.WorkActivityFailed || b.ID != 3 || b.Instance != "i" || b.ExecutionID != 1 || b.Details == nil {
		t.Fatalf("the unstorable result was acked as %+v, want an ActivityFailed completion of activity 3", b)
	}
	d := b.Details
	if d.Kind != provider.ErrorApplication || d.AppKind != provider.AppActivityFailed || !strings.Contains(d.Message, "result cannot be stored") ||
		!strings.Contains(d.Message, "exceeds the limit of 1000 bytes") || len(d.Message) > maxReasonBytes+100 {
		t.Fatalf("failure details %+v do not give the reason, bounded", d)
	}
}

// A failure completion that cannot be stored (an activity error of megabytes) is
// replaced the same way.
func TestUnstorableFailureFailsTheActivityWithTheReason(t *testing.T) {
	f := newAckFake(1000)
	r := &Runtime{p: f, log: slog.New(slog.DiscardHandler)}
	s := settledWith("a", 2, "")
	s.completion = failedItem(&s.lease.Item, &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppActivityFailed, Message: strings.Repeat("x", 1<<20)})
	r.complete(context.Background(), s.lease, s.completion, s.log, &lastErrors{m: map[activityKey]string{}})
	if a := f.acked["a"]; a == nil || a.Details == nil || !strings.Contains(a.Details.Message, "failure cannot be stored") || len(f.abandoned) != 0 {
		t.Fatalf("acked %+v, want a failure saying the activity's failure cannot be stored", a)
	}
}

// Other permanent ack failures keep their meaning: the item is abandoned to run
// again, and the error is remembered for its poison failure.
func TestFailedAckIsRememberedForThePoisonFailure(t *testing.T) {
	f := newAckFake(1 << 20)
	f.perm = errors.New("disk on fire")
	reg := NewRegistry()
	if err := reg.RegisterActivity("Act", func(*ActivityContext, string) (string, error) { return "ok", nil }); err != nil {
		t.Fatal(err)
	}
	r, err := New(f, reg, Options{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	last := &lastErrors{m: map[activityKey]string{}}
	s := settledWith("a", 2, "ok")
	r.complete(context.Background(), s.lease, s.completion, s.log, last)
	if len(f.abandoned) != 1 || len(f.acked) != 0 {
		t.Fatalf("abandoned %v, acked %d; want the item abandoned", f.abandoned, len(f.acked))
	}

	f.perm = nil
	s.lease.AttemptCount = 3 // past MaxAttempts: poison
	var got []settledActivity
	r.runActivity(context.Background(), s.lease, func(s settledActivity) { got = append(got, s) }, last)
	if len(got) != 1 || got[0].completion.Details == nil {
		t.Fatalf("settled %+v, want one poison failure", got)
	}
	d := got[0].completion.Details
	if d.Kind != provider.ErrorPoison || !strings.Contains(d.DisplayMessage(), "disk on fire") {
		t.Fatalf("poison failure %q does not carry the last error", d.DisplayMessage())
	}
	r.complete(context.Background(), got[0].lease, got[0].completion, got[0].log, last)
	if len(last.m) != 0 {
		t.Fatalf("the acked item's last error is still remembered: %v", last.m)
	}
}

// failFastOrch panics from a helper: the stack starts at the helper (and, since
// both are of this package, ends there: see formatStack).
func failFastOrch(ctx *Context, in string) (string, error) {
	failFastHelper(in)
	return "", nil
}

func failFastHelper(in string) { panic("bad input " + in) }

// failFastNilMap panics in the Go runtime (assignment to a nil map).
func failFastNilMap(ctx *Context, in string) (string, error) {
	var m map[string]int
	m[in]++
	return "", nil
}

// failFastDeep panics below a deep recursion.
func failFastDeep(ctx *Context, in string) (string, error) {
	var rec func(n int)
	rec = func(n int) {
		if n == 0 {
			panic("deep")
		}
		rec(n - 1)
	}
	rec(500)
	return "", nil
}

func panicTurn(fn Orchestration) TurnResult {
	return RunTurn(Turn{Instance: "i", ExecutionID: 1, Messages: []provider.WorkItem{start("x")}}, fn)
}

// A panic's details carry the value and the stack of the code, innermost first,
// without the runtime's frames, identically on every run of the same turn.
func TestOrchestrationPanicRecordsTheStack(t *testing.T) {
	res := panicTurn(failFastOrch)
	d := res.Failure
	if res.Status != provider.StatusFailed || d == nil || d.AppKind != provider.AppPanicked || d.Message != "bad input x" {
		t.Fatalf("status %s failure %+v", res.Status, d)
	}
	if lines := strings.Split(d.Stack, "\n"); lines[0] != ownFrame+"failFastHelper" || !strings.Contains(lines[1], "failfast_test.go:") {
		t.Fatalf("stack does not start at the panicking code:\n%s", d.Stack)
	}
	for _, internal := range []string{"gopanic", "callUser", "startCode", "iter.", "panicStack"} {
		if strings.Contains(d.Stack, internal) {
			t.Fatalf("stack shows %s:\n%s", internal, d.Stack)
		}
	}
	if want := "panic: bad input x\n" + d.Stack; res.Output != want || d.DisplayMessage() != want {
		t.Fatalf("output %q, want %q", res.Output, want)
	}
	if last := res.NewEvents[len(res.NewEvents)-1]; last.Kind != provider.EventOrchestrationFailed || last.Details.Stack != d.Stack {
		t.Fatalf("the failure event %+v does not record the stack", last)
	}
	if again := panicTurn(failFastOrch); again.Failure.DisplayMessage() != d.DisplayMessage() {
		t.Fatalf("the same turn recorded another failure:\n%s\nthen\n%s", d.DisplayMessage(), again.Failure.DisplayMessage())
	}
	// The ended execution is not run again: nothing to compare the stack with.
	history := res.NewEvents
	after := RunTurn(Turn{Instance: "i", ExecutionID: 1, History: history, Messages: []provider.WorkItem{done(1, "late")}},
		func(*Context, string) (string, error) { panic("the code of an ended execution ran") })
	if len(after.NewEvents) != 0 || after.Failure != nil {
		t.Fatalf("a turn of the ended execution decided %s, failure %+v", kinds(after.NewEvents), after.Failure)
	}
}

// A panic raised by the Go runtime starts at the user's frame, not the runtime's.
func TestRuntimePanicStackStartsAtTheUserFrame(t *testing.T) {
	d := panicTurn(failFastNilMap).Failure
	if d == nil || !strings.Contains(d.Message, "nil map") || !strings.HasPrefix(d.Stack, ownFrame+"failFastNilMap\n") {
		t.Fatalf("failure %+v", d)
	}
}

// A deep stack is cut to maxStackBytes, saying so.
func TestPanicStackIsBounded(t *testing.T) {
	d := panicTurn(failFastDeep).Failure
	if d == nil || len(d.Stack) > maxStackBytes || !strings.HasSuffix(d.Stack, "more frames elided") ||
		!strings.Contains(d.Stack, "failFastDeep") {
		t.Fatalf("stack of %d bytes:\n%s", len(d.Stack), d.Stack)
	}
}

// An activity's panic becomes a Panicked failure with its stack.
func TestActivityPanicRecordsTheStack(t *testing.T) {
	fn := Activity(func(*ActivityContext, string) (string, error) { failFastHelper("y"); return "", nil })
	_, err := callUser(fn, &ActivityContext{}, "")
	p, ok := err.(*userPanic)
	if !ok {
		t.Fatalf("callUser returned %v, want a *userPanic", err)
	}
	d := p.details()
	if d.AppKind != provider.AppPanicked || d.Message != "bad input y" || !strings.HasPrefix(d.Stack, ownFrame+"failFastHelper\n") {
		t.Fatalf("details %+v", d)
	}
}

// formatStack keeps the user's frames, innermost first, drops the runtime's
// wrappers around them, and says when frames are missing.
func TestFormatStack(t *testing.T) {
	frame := func(fn string, line int) goruntime.Frame {
		return goruntime.Frame{Function: fn, File: "/src/x.go", Line: line}
	}
	user := []goruntime.Frame{
		frame("example.com/app.check", 1),
		frame("example.com/app.Order.func1", 2),    // the body of a range over ctx.Join
		frame(ownFrame+"(*Context).Join.func1", 3), // kept: user code is below it
		frame("example.com/app.Order", 4),          // the registered code
		frame(ownFrame+"typedCode[...].func1", 5),  // dropped: a wrapper of the code
	}
	want := "example.com/app.check\n\t/src/x.go:1\nexample.com/app.Order.func1\n\t/src/x.go:2\n" +
		ownFrame + "(*Context).Join.func1\n\t/src/x.go:3\nexample.com/app.Order\n\t/src/x.go:4"
	if got := formatStack(user, true); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	own := []goruntime.Frame{frame(ownFrame+"failFastHelper", 1), frame(ownFrame+"failFastOrch", 2)}
	if got := formatStack(own, true); got != ownFrame+"failFastHelper\n\t/src/x.go:1" {
		t.Fatalf("a panic of this package's code: got\n%s", got)
	}
	if got := formatStack(own, false); !strings.Contains(got, "failFastOrch") || !strings.HasSuffix(got, "more frames elided") {
		t.Fatalf("frames cut before the caller: got\n%s", got)
	}
	many := make([]goruntime.Frame, 1000)
	for i := range many {
		many[i] = frame("example.com/app.recurse", i)
	}
	if got := formatStack(many, true); len(got) > maxStackBytes || !strings.HasPrefix(got, "example.com/app.recurse\n") ||
		!strings.HasSuffix(got, "more frames elided") {
		t.Fatalf("%d frames gave %d bytes:\n%s", len(many), len(got), got)
	}
}
