package runtime

import (
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"reflect"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// Orchestration is an orchestration's code: a plain Go function of a Context, replayed
// from its history on every turn the runtime cannot resume from its state cache
// (Options.StateCacheSize). It MUST be deterministic: every decision it takes
// (what to schedule, in which order) must depend only on its input and on the results
// the Context hands it, never on wall clocks, randomness, map order or I/O — those go
// into activities. Return ctx.ContinueAsNew(...) to continue as new.
type Orchestration func(ctx *Context, input string) (string, error)

// Limits enforced by the engine; a decision that breaks one fails the orchestration
// with a Configuration error of kind LimitExceeded (retrying cannot help).
const (
	MaxCustomStatusBytes = 256 << 10 // a custom status
	MaxKVKeys            = 150       // keys of one instance's KV state
	MaxKVValueBytes      = 64 << 10  // one KV value
	MaxTagBytes          = 256       // an activity tag
	MaxCarryForward      = 100       // unconsumed queue messages carried into the next execution (oldest dropped)
)

// Turn is the input of one orchestration turn: the current execution's history and
// the messages the provider fetched for it.
type Turn struct {
	Instance    string              // the instance the turn runs
	ExecutionID uint64              // its current execution (1 for a new instance)
	History     []provider.Event    // that execution's stored history, ordered by EventID (empty for a new execution)
	Messages    []provider.WorkItem // the fetched messages, applied in order
	// KVSnapshot is the instance's KV state at the end of the previous execution.
	KVSnapshot map[string]provider.KVValue
	// Now stamps the events the turn creates and schedules timers from.
	Now time.Time
	// RuntimeVersion stamps the events the turn creates.
	RuntimeVersion string
	// Logger receives ctx.Logger() records outside replay (nil: discarded).
	Logger *slog.Logger
	// Poison, when set, fails the execution with these details without running the
	// code (a message that keeps failing its turns).
	Poison *provider.ErrorDetails
}

// TurnResult is what a turn decided: the events to append, the work to enqueue and the
// execution's state afterwards.
type TurnResult struct {
	NewEvents           []provider.Event                       // the events to append to the execution's history
	WorkerItems         []provider.WorkItem                    // the activities to run (ActivityExecute items)
	OrchestratorItems   []provider.WorkItem                    // timers, starts of children, replies to a parent, a ContinueAsNew
	CancelledActivities []provider.ScheduledActivityIdentifier // scheduled activities the turn gave up
	// Status is StatusRunning unless the turn ended the execution.
	Status string
	// Output is the result of a Completed execution, the failure message of a
	// Failed one, or the next execution's input after ContinuedAsNew ("" while
	// Running).
	Output  string
	Failure *provider.ErrorDetails // set when Status is StatusFailed
	// Name and Version of the orchestration, from its OrchestrationStarted event.
	Name, Version string
	// ParentInstance is the parent of a sub-orchestration ("" for a root).
	ParentInstance string
	// ParentID is the parent's SubOrchestrationScheduled event id.
	ParentID uint64
	// ParentExecutionID is the parent's execution that scheduled this one.
	ParentExecutionID uint64
}

// errAbort unwinds an orchestration's coroutine when its turn ends.
var errAbort = errors.New("runtime: turn ended")

// errContinueAsNew is what ctx.ContinueAsNew returns for the orchestration to return.
type errContinueAsNew struct{ input, version string }

func (e *errContinueAsNew) Error() string { return "runtime: continue as new" }

// configError reports code that breaks the rules (nondeterminism, a limit); it
// unwinds the coroutine as a panic and fails the orchestration.
type configError struct{ kind, msg string }

// RunTurn replays fn over t's history, applies t's messages in order and returns the
// turn's decisions. It is pure: no goroutines (fn runs as a coroutine of the caller),
// clocks or I/O of its own, so the same input always gives the same result.
func RunTurn(t Turn, fn Orchestration) TurnResult {
	e := newEngine(t)
	defer e.close()
	return e.run(fn)
}

type engine struct {
	t      Turn
	events []provider.Event // history, then the turn's new events
	nHist  int              // len(t.History)
	res    TurnResult

	// replay state
	decisions []int              // indexes into events of recorded decision events, in order
	cursor    int                // next recorded decision to match
	futures   map[uint64]*Future // by scheduling event id
	subs      []*Future          // external-event subscriptions, in subscription order
	queueSubs []*Future          // event-queue subscriptions, in subscription order
	queued    map[string][]string
	kv        map[string]provider.KVValue
	custom    *string
	replaying bool
	now       time.Time
	guidSeq   uint64
	yield     func(struct{}) bool
	failure   *provider.ErrorDetails
	log       *slog.Logger
	// unreplayable is set when a completion of this turn found no future: the code
	// lags behind its history, which a replay of the next turn reports as
	// nondeterminism, so this state must not be resumed.
	unreplayable bool

	// The code's coroutine: next runs it to its next wait, stop unwinds it.
	next     func() (struct{}, bool)
	stop     func()
	finished bool // the code returned or panicked
	output   string
	fnErr    error
}

func newEngine(t Turn) *engine {
	// Room for the turn's usual new events (one per message, and the code's next
	// decision or two), so that appending the first does not copy the history again.
	events := make([]provider.Event, len(t.History), len(t.History)+len(t.Messages)+2)
	copy(events, t.History)
	e := &engine{t: t, events: events, nHist: len(t.History), futures: map[uint64]*Future{},
		queued: map[string][]string{}, kv: map[string]provider.KVValue{}}
	for k, v := range t.KVSnapshot {
		e.kv[k] = v
	}
	e.res.Status = provider.StatusRunning
	for i, ev := range e.events {
		if isDecision(ev.Kind) {
			e.decisions = append(e.decisions, i)
		}
		if ev.Kind == provider.EventOrchestrationStarted {
			e.started(&ev)
		}
	}
	return e
}

// started takes the execution's identity from its OrchestrationStarted event.
func (e *engine) started(ev *provider.Event) {
	e.res.Name, e.res.Version = ev.Name, ev.Version
	e.res.ParentInstance, e.res.ParentID, e.res.ParentExecutionID = ev.ParentInstance, ev.ParentID, ev.ParentExecutionID
}

// isDecision reports whether an event records a decision of the orchestration code
// (matched positionally on replay), as opposed to something that happened to it.
func isDecision(k provider.EventKind) bool {
	switch k {
	case provider.EventActivityScheduled, provider.EventTimerCreated, provider.EventExternalSubscribed, provider.EventCustomStatusUpdated,
		provider.EventActivityCancelRequested, provider.EventExternalSubscribedCancelled,
		provider.EventSubOrchestrationScheduled, provider.EventSubOrchestrationCancelRequested, provider.EventOrchestrationChained,
		provider.EventQueueSubscribed, provider.EventQueueSubscriptionCancelled,
		provider.EventKeyValueSet, provider.EventKeyValueCleared, provider.EventKeyValuesCleared,
		provider.EventOrchestrationCompleted, provider.EventOrchestrationFailed, provider.EventOrchestrationContinuedAsNew:
		return true
	}
	return false
}

// appendEvent adds a new event of this turn with the next id.
func (e *engine) appendEvent(ev provider.Event) *provider.Event {
	ev.EventID = uint64(len(e.events)) + 1
	ev.InstanceID, ev.ExecutionID = e.t.Instance, e.t.ExecutionID
	ev.TimestampMs = e.t.Now.UnixMilli()
	ev.RuntimeVersion = e.t.RuntimeVersion
	e.events = append(e.events, ev)
	return &e.events[len(e.events)-1]
}

func (e *engine) run(fn Orchestration) TurnResult {
	ended := e.nHist > 0 && e.events[e.nHist-1].IsTerminal()
	e.acceptMessages(ended)
	if ended || len(e.events) == 0 {
		return e.finish() // ended executions only answer colliding starts; nothing started otherwise
	}
	started := e.events[0]
	if started.Kind != provider.EventOrchestrationStarted {
		e.fail(&provider.ErrorDetails{Kind: provider.ErrorConfiguration, ConfigKind: provider.ConfigNondeterminism,
			Message: fmt.Sprintf("history starts with %s, not OrchestrationStarted", started.Kind)})
		return e.finish()
	}
	if e.t.Poison != nil {
		e.fail(e.t.Poison)
		return e.finish()
	}
	e.now = time.UnixMilli(started.TimestampMs)
	e.custom = started.InitialCustomStatus
	for _, cf := range started.CarryForward {
		e.queued[cf.Name] = append(e.queued[cf.Name], cf.Data)
	}
	e.log = e.logger()
	e.startCode(fn, started.Input)
	// Deliver the completions of history and of this turn, one at a time, in order.
	e.drive(0, e.step())
	return e.conclude()
}

// resume runs turn t on an engine whose state is current for it (see current):
// the code is suspended where a replay of t's history would leave it, so only t's
// messages are delivered, giving the result RunTurn would.
func (e *engine) resume(t Turn) TurnResult {
	e.t, e.nHist = t, len(e.events)
	e.res = TurnResult{Status: provider.StatusRunning}
	e.started(&e.events[0])
	e.acceptMessages(false)
	e.log = e.logger()
	e.drive(e.nHist, false)
	return e.conclude()
}

// logger is the code's logger for this turn, naming the execution.
func (e *engine) logger() *slog.Logger {
	if e.t.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	if discards(e.t.Logger) {
		return e.t.Logger
	}
	s := &e.events[0]
	return e.t.Logger.With("instance", e.t.Instance, "execution", e.t.ExecutionID, "orchestration", s.Name, "version", s.Version)
}

// discards reports whether l drops every record, so that its attributes need not be
// built: they cost a few percent of a worker's CPU, per turn and per activity.
func discards(l *slog.Logger) bool { return l.Handler() == slog.DiscardHandler }

// startCode makes fn a coroutine of the engine; it first runs at the first step.
func (e *engine) startCode(fn Orchestration, input string) {
	ctx := &Context{e: e}
	e.next, e.stop = iter.Pull(func(yield func(struct{}) bool) {
		e.yield = yield
		out, err := callUser(fn, ctx, input)
		if p, ok := err.(*userPanic); ok {
			switch v := p.value.(type) {
			case *configError:
				e.fail(&provider.ErrorDetails{Kind: provider.ErrorConfiguration, ConfigKind: v.kind, Message: v.msg})
			default:
				if v == errAbort {
					return
				}
				// The stack is recorded once, in the OrchestrationFailed event of
				// this turn; an ended execution is never replayed, so it is never
				// compared.
				e.fail(p.details())
			}
			e.finished = true
			return
		}
		e.output, e.fnErr = out, err
		e.finished = true
	})
}

// userPanic is a panic of orchestration or activity code, recovered by callUser.
type userPanic struct {
	value any
	stack string // see panicStack; "" for the engine's own unwinding panics
}

func (p *userPanic) Error() string { return fmt.Sprint("panic: ", p.value) }

// details describes the panic as an application failure.
func (p *userPanic) details() *provider.ErrorDetails {
	return &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppPanicked, Message: clip(fmt.Sprint(p.value), maxReasonBytes), Stack: p.stack}
}

// callUser calls user code fn(c, in); a panic is returned as a *userPanic error
// with the stack of the code that panicked.
func callUser[C any](fn func(C, string) (string, error), c C, in string) (out string, err error) {
	defer func() {
		if v := recover(); v != nil {
			p := &userPanic{value: v}
			if _, internal := v.(*configError); !internal && v != errAbort {
				p.stack = panicStack()
			}
			err = p
		}
	}()
	return fn(c, in)
}

// ownFrame prefixes the function names of this package in a stack; callUserFrame
// those of callUser's frames.
var (
	ownFrame      = reflect.TypeFor[userPanic]().PkgPath() + "."
	callUserFrame = ownFrame + "callUser["
)

// maxStackBytes bounds a recorded stack.
const maxStackBytes = 4 << 10

// panicStack returns, for the deferred function of callUser recovering a panic,
// the stack of the code that panicked (see formatStack): the frames between the
// panic and callUser, without the Go runtime's frames that raise and run the panic.
func panicStack() string {
	pcs := make([]uintptr, 128)
	frames := goruntime.CallersFrames(pcs[:goruntime.Callers(2, pcs)])
	var code []goruntime.Frame
	raised, whole := false, false // past runtime.gopanic; up to callUser
	for f, more := frames.Next(); ; f, more = frames.Next() {
		switch {
		case !raised:
			raised = f.Function == "runtime.gopanic"
		case strings.HasPrefix(f.Function, callUserFrame):
			whole = true
		case len(code) == 0 && strings.HasPrefix(f.Function, "runtime."):
			// What raised the panic (runtime.panicmem, runtime.mapassign, ...).
		default:
			code = append(code, f)
		}
		if whole || !more {
			break
		}
	}
	return formatStack(code, whole)
}

// formatStack renders frames, innermost first, as lines "function" and
// "\tfile:line" each, in at most maxStackBytes. With whole (frames reach the caller of the code), the
// outermost frames of this package are dropped, but the innermost frame: they are
// the runtime's wrappers of user code (typedCode), not where it failed. Without
// whole, or when they do not fit, the stack says that frames were elided.
func formatStack(frames []goruntime.Frame, whole bool) string {
	const elided = "...more frames elided"
	for whole && len(frames) > 1 && strings.HasPrefix(frames[len(frames)-1].Function, ownFrame) {
		frames = frames[:len(frames)-1]
	}
	lines := make([]string, 0, len(frames)+1)
	size := 0
	for _, f := range frames {
		frame := fmt.Sprintf("%s\n\t%s:%d", f.Function, f.File, f.Line)
		if size += len(frame) + 1; size > maxStackBytes-len(elided) {
			whole = false
			break
		}
		lines = append(lines, frame)
	}
	if !whole {
		lines = append(lines, elided)
	}
	return strings.Join(lines, "\n")
}

// step runs the code to its next wait; it reports whether the code is done with.
func (e *engine) step() bool {
	e.next()
	return e.finished || e.failure != nil
}

// drive delivers events from index from on, including those the code appends
// meanwhile, running the code after each one it was waiting for.
func (e *engine) drive(from int, done bool) {
	for i := from; !done && i < len(e.events); i++ {
		if e.deliver(&e.events[i]) {
			done = e.step()
		}
	}
}

// conclude records how the code ended, if it did, and returns the turn's result.
func (e *engine) conclude() TurnResult {
	if e.failure == nil && e.finished {
		// A cancel accepted with the message that let the code finish still wins:
		// the code returned before it was delivered.
		for i := range e.events {
			if e.events[i].Kind == provider.EventOrchestrationCancelRequested {
				e.deliver(&e.events[i])
				break
			}
		}
	}
	if e.failure == nil && e.finished {
		e.complete(e.output, e.fnErr)
	}
	return e.finish()
}

// resumable reports whether the execution still runs with its code suspended in a
// state a replay of its history would rebuild.
func (e *engine) resumable() bool {
	return e.next != nil && !e.finished && e.failure == nil && !e.unreplayable
}

// close unwinds the code's coroutine, if any (nil: nothing to close).
func (e *engine) close() {
	if e != nil && e.stop != nil {
		e.stop()
	}
}

// acceptMessages turns the fetched messages into events of this turn, dropping
// duplicates and stale completions. When the execution has ended, only starts that
// collide with it are answered.
func (e *engine) acceptMessages(ended bool) {
	scheduled := map[uint64]provider.EventKind{}
	closed := map[uint64]bool{}
	cancelRequested := false
	for _, ev := range e.events {
		switch ev.Kind {
		case provider.EventActivityScheduled, provider.EventTimerCreated, provider.EventSubOrchestrationScheduled:
			scheduled[ev.EventID] = ev.Kind
		case provider.EventActivityCompleted, provider.EventActivityFailed, provider.EventTimerFired, provider.EventActivityCancelRequested,
			provider.EventSubOrchestrationCompleted, provider.EventSubOrchestrationFailed, provider.EventSubOrchestrationCancelRequested:
			closed[ev.SourceEventID] = true
		case provider.EventOrchestrationCancelRequested:
			cancelRequested = true
		}
	}
	for _, m := range e.t.Messages {
		if ended && m.Kind != provider.WorkStartOrchestration {
			continue
		}
		switch m.Kind {
		case provider.WorkStartOrchestration, provider.WorkContinueAsNew:
			if len(e.events) == 0 {
				ev := e.appendEvent(provider.Event{Kind: provider.EventOrchestrationStarted, Name: m.Name, Version: m.Version, Input: m.Input,
					ParentInstance: m.ParentInstance, ParentID: m.ParentID, ParentExecutionID: m.ParentExecutionID,
					CarryForward: m.CarryForward, InitialCustomStatus: m.InitialCustomStatus, TraceParent: m.TraceParent})
				e.started(ev)
			} else if m.Kind == provider.WorkStartOrchestration {
				e.answerCollision(m)
			}
		case provider.WorkActivityCompleted, provider.WorkActivityFailed, provider.WorkTimerFired:
			want := provider.EventActivityScheduled
			if m.Kind == provider.WorkTimerFired {
				want = provider.EventTimerCreated
			}
			if m.ExecutionID != e.t.ExecutionID || scheduled[m.ID] != want || closed[m.ID] {
				continue // stale (another execution), unknown or already answered
			}
			closed[m.ID] = true
			switch m.Kind {
			case provider.WorkActivityCompleted:
				e.appendEvent(provider.Event{Kind: provider.EventActivityCompleted, SourceEventID: m.ID, Result: m.Result})
			case provider.WorkActivityFailed:
				e.appendEvent(provider.Event{Kind: provider.EventActivityFailed, SourceEventID: m.ID, Details: m.Details})
			default:
				e.appendEvent(provider.Event{Kind: provider.EventTimerFired, SourceEventID: m.ID, FireAtMs: m.FireAtMs})
			}
		case provider.WorkSubOrchCompleted, provider.WorkSubOrchFailed:
			if m.ParentExecutionID != e.t.ExecutionID || scheduled[m.ParentID] != provider.EventSubOrchestrationScheduled || closed[m.ParentID] {
				continue
			}
			closed[m.ParentID] = true
			if m.Kind == provider.WorkSubOrchCompleted {
				e.appendEvent(provider.Event{Kind: provider.EventSubOrchestrationCompleted, SourceEventID: m.ParentID, Result: m.Result})
			} else {
				e.appendEvent(provider.Event{Kind: provider.EventSubOrchestrationFailed, SourceEventID: m.ParentID, Details: m.Details})
			}
		case provider.WorkExternalRaised:
			if len(e.events) > 0 {
				e.appendEvent(provider.Event{Kind: provider.EventExternalEvent, Name: m.Name, Data: m.Data})
			}
		case provider.WorkQueueMessage:
			if len(e.events) > 0 {
				e.appendEvent(provider.Event{Kind: provider.EventQueueEventDelivered, Name: m.Name, Data: m.Data})
			}
		case provider.WorkCancelInstance:
			if len(e.events) > 0 && !cancelRequested {
				cancelRequested = true
				e.appendEvent(provider.Event{Kind: provider.EventOrchestrationCancelRequested, Reason: m.Reason})
			}
		}
	}
}

// answerCollision handles a start for an instance that already exists: a repeated
// start (same parent link) is ignored, so starts are idempotent; a parent asking for
// a child id that another instance already uses is told at once instead of waiting
// forever.
func (e *engine) answerCollision(m provider.WorkItem) {
	if m.ParentInstance == "" {
		return
	}
	s := &e.events[0]
	if s.ParentInstance == m.ParentInstance && s.ParentID == m.ParentID && s.ParentExecutionID == m.ParentExecutionID {
		return
	}
	e.res.OrchestratorItems = append(e.res.OrchestratorItems, provider.WorkItem{Kind: provider.WorkSubOrchFailed, Instance: m.Instance,
		ParentInstance: m.ParentInstance, ParentID: m.ParentID, ParentExecutionID: m.ParentExecutionID,
		Details: &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppOrchestrationFailed,
			Message: fmt.Sprintf("sub-orchestration instance %q already exists (orchestration %s)", m.Instance, s.Name)}})
}

// deliver applies one event to the futures; it reports whether the code should run.
func (e *engine) deliver(ev *provider.Event) bool {
	e.replaying = int(ev.EventID) <= e.nHist
	switch ev.Kind {
	case provider.EventActivityCompleted, provider.EventActivityFailed, provider.EventTimerFired, provider.EventSubOrchestrationCompleted, provider.EventSubOrchestrationFailed:
		f := e.futures[ev.SourceEventID]
		if f == nil {
			if int(ev.EventID) <= e.nHist {
				nondeterministic(e, fmt.Sprintf("history completes event %d, which the code did not schedule", ev.SourceEventID))
			}
			e.unreplayable = true
			return false
		}
		if f.done || f.cancelled {
			return false
		}
		e.now = time.UnixMilli(ev.TimestampMs)
		if d := ev.Details; d != nil && d.Kind != provider.ErrorApplication {
			// Only application errors reach the code: a poisoned or misconfigured
			// activity or child fails this orchestration with the same details.
			e.fail(d)
			return true
		}
		switch ev.Kind {
		case provider.EventActivityCompleted, provider.EventSubOrchestrationCompleted:
			f.resolve(ev.Result, nil)
		case provider.EventActivityFailed:
			f.resolve("", &ActivityError{Name: f.name, Details: ev.Details})
		case provider.EventSubOrchestrationFailed:
			f.resolve("", &SubOrchestrationError{Instance: f.child, Details: ev.Details})
		default:
			f.resolve("", nil)
		}
		return true
	case provider.EventExternalEvent:
		for _, f := range e.subs {
			if !f.done && !f.cancelled && f.name == ev.Name {
				e.now = time.UnixMilli(ev.TimestampMs)
				f.resolve(ev.Data, nil)
				return true
			}
		}
		return false // raised with nobody waiting: dropped
	case provider.EventQueueEventDelivered:
		e.queued[ev.Name] = append(e.queued[ev.Name], ev.Data)
		if e.matchQueue(ev.Name) {
			e.now = time.UnixMilli(ev.TimestampMs)
			return true
		}
		return false // buffered until a subscription takes it
	case provider.EventOrchestrationCancelRequested:
		e.cancelAll()
		e.fail(&provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppCancelled, Reason: ev.Reason})
		return true
	}
	return false
}

// matchQueue hands the oldest buffered message of queue to the oldest live
// subscription of it; it reports whether one was resolved.
func (e *engine) matchQueue(queue string) bool {
	if len(e.queued[queue]) == 0 {
		return false
	}
	for _, f := range e.queueSubs {
		if !f.done && !f.cancelled && f.name == queue {
			f.resolve(e.queued[queue][0], nil)
			e.queued[queue] = e.queued[queue][1:]
			return true
		}
	}
	return false
}

// nondeterministic fails the turn from the engine side (outside the coroutine).
func nondeterministic(e *engine, msg string) {
	if e.failure == nil {
		e.fail(&provider.ErrorDetails{Kind: provider.ErrorConfiguration, ConfigKind: provider.ConfigNondeterminism, Message: msg})
	}
}

// peekDecisionID is the event id the next decision will have.
func (e *engine) peekDecisionID() uint64 {
	if e.cursor < len(e.decisions) {
		return e.events[e.decisions[e.cursor]].EventID
	}
	return uint64(len(e.events)) + 1
}

// decide records a decision of the code: on replay it must match the next recorded
// decision; past the history it is a new event.
func (e *engine) decide(ev provider.Event) *provider.Event {
	if e.cursor < len(e.decisions) {
		rec := &e.events[e.decisions[e.cursor]]
		e.cursor++
		if msg := mismatch(rec, &ev); msg != "" {
			panic(&configError{kind: provider.ConfigNondeterminism, msg: fmt.Sprintf("decision %d (event %d): %s", e.cursor, rec.EventID, msg)})
		}
		return rec
	}
	e.replaying = false
	out := e.appendEvent(ev)
	e.decisions = append(e.decisions, len(e.events)-1)
	e.cursor = len(e.decisions)
	return out
}

// isNew reports whether ev was decided by this turn (not replayed from history).
func (e *engine) isNew(ev *provider.Event) bool { return int(ev.EventID) > e.nHist }

// mismatch describes how a replayed decision differs from the recorded one ("" if it
// does not). Timer fire times, KV timestamps and custom status values are not compared.
func mismatch(rec, now *provider.Event) string {
	if rec.Kind != now.Kind {
		return fmt.Sprintf("the code now decides %s where history recorded %s", now.Kind, rec.Kind)
	}
	switch now.Kind {
	case provider.EventActivityScheduled:
		if rec.Name != now.Name || rec.Input != now.Input || rec.SessionID != now.SessionID || rec.Tag != now.Tag {
			return fmt.Sprintf("activity %q(%q) session %q tag %q, history has %q(%q) session %q tag %q",
				now.Name, now.Input, now.SessionID, now.Tag, rec.Name, rec.Input, rec.SessionID, rec.Tag)
		}
	case provider.EventSubOrchestrationScheduled, provider.EventOrchestrationChained:
		if rec.Name != now.Name || rec.Instance != now.Instance || rec.Input != now.Input || rec.Version != now.Version {
			return fmt.Sprintf("%s %q instance %q version %q input %q, history has %q instance %q version %q input %q",
				now.Kind, now.Name, now.Instance, now.Version, now.Input, rec.Name, rec.Instance, rec.Version, rec.Input)
		}
	case provider.EventExternalSubscribed, provider.EventQueueSubscribed:
		if rec.Name != now.Name {
			return fmt.Sprintf("%s %q, history has %q", now.Kind, now.Name, rec.Name)
		}
	case provider.EventKeyValueSet, provider.EventKeyValueCleared:
		if rec.Key != now.Key || rec.Value != now.Value {
			return fmt.Sprintf("%s %q=%q, history has %q=%q", now.Kind, now.Key, now.Value, rec.Key, rec.Value)
		}
	case provider.EventActivityCancelRequested, provider.EventExternalSubscribedCancelled, provider.EventSubOrchestrationCancelRequested, provider.EventQueueSubscriptionCancelled:
		if rec.SourceEventID != now.SourceEventID {
			return fmt.Sprintf("cancel of event %d, history cancels %d", now.SourceEventID, rec.SourceEventID)
		}
	}
	return ""
}

// cancelAll cancels every outstanding activity, sub-orchestration and subscription
// (the execution ends).
func (e *engine) cancelAll() {
	ids := make([]uint64, 0, len(e.futures))
	for id, f := range e.futures {
		if !f.done && !f.cancelled {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] }) // deterministic order of the side effects
	for _, id := range ids {
		e.cancelFuture(e.futures[id], "orchestration ended", false)
	}
}

// cancelFuture records that the code gave up on f. decide is false when the engine
// itself cancels (the execution ends): then nothing is matched against history.
func (e *engine) cancelFuture(f *Future, reason string, decide bool) {
	f.cancelled = true
	var kind provider.EventKind
	switch f.kind {
	case provider.EventActivityScheduled:
		kind = provider.EventActivityCancelRequested
	case provider.EventExternalSubscribed:
		kind = provider.EventExternalSubscribedCancelled
	case provider.EventQueueSubscribed:
		kind = provider.EventQueueSubscriptionCancelled
	case provider.EventSubOrchestrationScheduled:
		kind = provider.EventSubOrchestrationCancelRequested
	default:
		return // timers need no cancellation
	}
	if decide {
		if ev := e.decide(provider.Event{Kind: kind, SourceEventID: f.id, Reason: reason}); !e.isNew(ev) {
			return // decided in an earlier turn: the side effect was issued then
		}
	}
	switch kind {
	case provider.EventActivityCancelRequested:
		e.res.CancelledActivities = append(e.res.CancelledActivities,
			provider.ScheduledActivityIdentifier{Instance: e.t.Instance, ExecutionID: e.t.ExecutionID, ActivityID: f.id})
	case provider.EventSubOrchestrationCancelRequested:
		e.res.OrchestratorItems = append(e.res.OrchestratorItems,
			provider.WorkItem{Kind: provider.WorkCancelInstance, Instance: f.child, Reason: "parent canceled"})
	}
}

func (e *engine) fail(d *provider.ErrorDetails) {
	if e.failure == nil {
		e.failure = d
	}
}

// complete records how the orchestration function returned.
func (e *engine) complete(output string, err error) {
	// The end is a decision too: code that now ends where history recorded another
	// decision is nondeterministic. decide reports that by panicking, which the
	// coroutine turns into a failure; here, outside it, the panic is caught.
	defer func() {
		if p := recover(); p != nil {
			ce, ok := p.(*configError)
			if !ok {
				panic(p)
			}
			e.fail(&provider.ErrorDetails{Kind: provider.ErrorConfiguration, ConfigKind: ce.kind, Message: ce.msg})
		}
	}()
	var can *errContinueAsNew
	switch {
	case err == nil:
		e.decide(provider.Event{Kind: provider.EventOrchestrationCompleted, Output: output})
		e.res.Status, e.res.Output = provider.StatusCompleted, output
	case errors.As(err, &can):
		e.decide(provider.Event{Kind: provider.EventOrchestrationContinuedAsNew, Input: can.input})
		e.res.Status, e.res.Output = provider.StatusContinuedAsNew, can.input
		e.res.OrchestratorItems = append(e.res.OrchestratorItems, provider.WorkItem{Kind: provider.WorkContinueAsNew, Instance: e.t.Instance,
			Name: e.res.Name, Version: can.version, Input: can.input,
			ParentInstance: e.res.ParentInstance, ParentID: e.res.ParentID, ParentExecutionID: e.res.ParentExecutionID,
			CarryForward: e.carryForward(), InitialCustomStatus: e.custom})
	default:
		e.fail(&provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: provider.AppOrchestrationFailed, Message: err.Error()})
	}
	if e.res.Status != provider.StatusRunning {
		e.cancelAll()
	}
}

// carryForward lists the queue messages nobody consumed (queues are FIFO, so those
// after the first k of a queue with k consumers) in arrival order — those carried
// into this execution first, then those delivered during it — keeping the newest
// MaxCarryForward whatever their queues.
func (e *engine) carryForward() []provider.NameData {
	arrived := slices.Clone(e.events[0].CarryForward)
	for i := range e.events {
		if ev := &e.events[i]; ev.Kind == provider.EventQueueEventDelivered {
			arrived = append(arrived, provider.NameData{Name: ev.Name, Data: ev.Data})
		}
	}
	consumed := map[string]int{}
	for _, f := range e.queueSubs {
		if f.done {
			consumed[f.name]++
		}
	}
	var out []provider.NameData
	for _, m := range arrived {
		if consumed[m.Name] > 0 {
			consumed[m.Name]--
			continue
		}
		out = append(out, m)
	}
	if len(out) > MaxCarryForward {
		e.log.Warn("dropping the oldest queue messages carried into the next execution", "dropped", len(out)-MaxCarryForward)
		out = out[len(out)-MaxCarryForward:]
	}
	return out
}

// finish turns the turn's new events into work items and fills in the result.
func (e *engine) finish() TurnResult {
	if e.failure != nil && e.res.Status == provider.StatusRunning && len(e.events) > 0 {
		e.cancelAll()
		e.appendEvent(provider.Event{Kind: provider.EventOrchestrationFailed, Details: e.failure})
		e.res.Status, e.res.Failure, e.res.Output = provider.StatusFailed, e.failure, e.failure.DisplayMessage()
	}
	if len(e.events) > e.nHist {
		e.res.NewEvents = slices.Clone(e.events[e.nHist:])
	}
	for i := e.nHist; i < len(e.events); i++ {
		ev := &e.events[i]
		switch ev.Kind {
		case provider.EventActivityScheduled:
			e.res.WorkerItems = append(e.res.WorkerItems, provider.WorkItem{Kind: provider.WorkActivityExecute, Instance: e.t.Instance,
				ExecutionID: e.t.ExecutionID, ID: ev.EventID, Name: ev.Name, Input: ev.Input, SessionID: ev.SessionID, Tag: ev.Tag})
		case provider.EventTimerCreated:
			if e.res.Status != provider.StatusRunning {
				continue // the execution ended: nobody can consume the timer
			}
			e.res.OrchestratorItems = append(e.res.OrchestratorItems, provider.WorkItem{Kind: provider.WorkTimerFired, Instance: e.t.Instance,
				ExecutionID: e.t.ExecutionID, ID: ev.EventID, FireAtMs: ev.FireAtMs})
		case provider.EventSubOrchestrationScheduled:
			e.res.OrchestratorItems = append(e.res.OrchestratorItems, provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: ev.Instance,
				ExecutionID: provider.InitialExecutionID, Name: ev.Name, Version: ev.Version, Input: ev.Input,
				ParentInstance: e.t.Instance, ParentID: ev.EventID, ParentExecutionID: e.t.ExecutionID})
		case provider.EventOrchestrationChained:
			e.res.OrchestratorItems = append(e.res.OrchestratorItems, provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: ev.Instance,
				ExecutionID: provider.InitialExecutionID, Name: ev.Name, Version: ev.Version, Input: ev.Input})
		}
	}
	if e.res.ParentInstance != "" && (e.res.Status == provider.StatusCompleted || e.res.Status == provider.StatusFailed) {
		reply := provider.WorkItem{Kind: provider.WorkSubOrchCompleted, Instance: e.t.Instance, ParentInstance: e.res.ParentInstance,
			ParentID: e.res.ParentID, ParentExecutionID: e.res.ParentExecutionID, Result: e.res.Output}
		if e.res.Status == provider.StatusFailed {
			reply.Kind, reply.Result, reply.Details = provider.WorkSubOrchFailed, "", e.res.Failure
		}
		e.res.OrchestratorItems = append(e.res.OrchestratorItems, reply)
	}
	return e.res
}

// ActivityError is the error a failed activity's future returns.
type ActivityError struct {
	Name    string                 // the activity's name
	Details *provider.ErrorDetails // the recorded failure (Application, or Poison after too many attempts)
}

// Error names the activity and renders the failure (DisplayMessage).
func (e *ActivityError) Error() string {
	if e.Details == nil {
		return "activity failed"
	}
	return "activity " + e.Name + " failed: " + e.Details.DisplayMessage()
}

// SubOrchestrationError is the error a failed sub-orchestration's future returns.
type SubOrchestrationError struct {
	Instance string                 // the child instance
	Details  *provider.ErrorDetails // why it failed, as its OrchestrationFailed event says
}

// Error names the child instance and renders the failure (DisplayMessage).
func (e *SubOrchestrationError) Error() string {
	return "sub-orchestration " + e.Instance + " failed: " + e.Details.DisplayMessage()
}
