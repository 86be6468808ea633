package runtime

import (
	"errors"
	"fmt"
	"iter"
	"time"
)

// Orchestration is an orchestration's code: a plain Go function of a Context, replayed
// from its history on every turn. It MUST be deterministic: every decision it takes
// (what to schedule, in which order) must depend only on its input and on the results
// the Context hands it, never on wall clocks, randomness, map order or I/O — those go
// into activities. Return ctx.ContinueAsNew(...) to continue as new.
type Orchestration func(ctx *Context, input string) (string, error)

// Turn is the input of one orchestration turn: the current execution's history and
// the messages the provider fetched for it.
type Turn struct {
	Instance    string
	ExecutionID uint64
	History     []Event
	Messages    []WorkItem
	// Now stamps the events the turn creates and schedules timers from.
	Now time.Time
	// RuntimeVersion stamps the events the turn creates.
	RuntimeVersion string
}

// TurnResult is what a turn decided: the events to append, the work to enqueue and the
// execution's state afterwards.
type TurnResult struct {
	NewEvents           []Event
	WorkerItems         []WorkItem
	OrchestratorItems   []WorkItem
	CancelledActivities []ScheduledActivityIdentifier
	// Status is StatusRunning unless the turn ended the execution.
	Status  string
	Output  string
	Failure *ErrorDetails // set when Status is StatusFailed
	// Name and Version of the orchestration, from its OrchestrationStarted event.
	Name, Version string
	// ParentInstance and ParentID identify the parent of a sub-orchestration.
	ParentInstance string
	ParentID       uint64
	// CustomStatus is the last custom-status decision of the turn (nil: unchanged).
	CustomStatus **string
}

// errAbort unwinds an orchestration's coroutine when its turn ends.
var errAbort = errors.New("runtime: turn ended")

// errContinueAsNew is what ctx.ContinueAsNew returns for the orchestration to return.
type errContinueAsNew struct{ input, version string }

func (e *errContinueAsNew) Error() string { return "runtime: continue as new" }

// nondeterminism reports code whose decisions differ from its recorded history.
type nondeterminism struct{ msg string }

// RunTurn replays fn over t's history, applies t's messages in order and returns the
// turn's decisions. It is pure: no goroutines (fn runs as a coroutine of the caller),
// clocks or I/O of its own, so the same input always gives the same result.
func RunTurn(t Turn, fn Orchestration) TurnResult {
	e := newEngine(t)
	return e.run(fn)
}

type engine struct {
	t      Turn
	events []Event // history, then the turn's new events
	nHist  int     // len(t.History)
	res    TurnResult

	// replay state
	decisions []int              // indexes into events of recorded decision events, in order
	cursor    int                // next recorded decision to match
	futures   map[uint64]*Future // by scheduling event id
	subs      []*Future          // external-event subscriptions, in subscription order
	replaying bool
	now       time.Time
	guidSeq   uint64
	yield     func(struct{}) bool
	failure   *ErrorDetails
}

func newEngine(t Turn) *engine {
	e := &engine{t: t, events: append([]Event(nil), t.History...), nHist: len(t.History), futures: map[uint64]*Future{}}
	e.res.Status = StatusRunning
	for i, ev := range e.events {
		if isDecision(ev.Kind) {
			e.decisions = append(e.decisions, i)
		}
		if ev.Kind == EventOrchestrationStarted {
			e.res.Name, e.res.Version, e.res.ParentInstance, e.res.ParentID = ev.Name, ev.Version, ev.ParentInstance, ev.ParentID
		}
	}
	return e
}

// isDecision reports whether an event records a decision of the orchestration code
// (matched positionally on replay), as opposed to something that happened to it.
func isDecision(k EventKind) bool {
	switch k {
	case EventActivityScheduled, EventTimerCreated, EventExternalSubscribed, EventCustomStatusUpdated,
		EventActivityCancelRequested, EventExternalSubscribedCancelled,
		EventOrchestrationCompleted, EventOrchestrationFailed, EventOrchestrationContinuedAsNew:
		return true
	}
	return false
}

// appendEvent adds a new event of this turn with the next id.
func (e *engine) appendEvent(ev Event) *Event {
	ev.EventID = uint64(len(e.events)) + 1
	ev.InstanceID, ev.ExecutionID = e.t.Instance, e.t.ExecutionID
	ev.TimestampMs = e.t.Now.UnixMilli()
	ev.RuntimeVersion = e.t.RuntimeVersion
	e.events = append(e.events, ev)
	return &e.events[len(e.events)-1]
}

func (e *engine) run(fn Orchestration) TurnResult {
	if e.nHist > 0 && e.events[e.nHist-1].IsTerminal() {
		return e.res // the execution already ended: late messages change nothing
	}
	e.acceptMessages()
	if len(e.events) == 0 {
		return e.res // nothing started this instance
	}
	started := e.events[0]
	if started.Kind != EventOrchestrationStarted {
		e.fail(&ErrorDetails{Kind: ErrorConfiguration, ConfigKind: ConfigNondeterminism,
			Message: fmt.Sprintf("history starts with %s, not OrchestrationStarted", started.Kind)})
		return e.finish()
	}
	e.now = time.UnixMilli(started.TimestampMs)

	ctx := &Context{e: e}
	var output string
	var fnErr error
	finished := false
	next, stop := iter.Pull(func(yield func(struct{}) bool) {
		e.yield = yield
		defer func() {
			if p := recover(); p != nil {
				switch p := p.(type) {
				case *nondeterminism:
					e.fail(&ErrorDetails{Kind: ErrorConfiguration, ConfigKind: ConfigNondeterminism, Message: p.msg})
				default:
					if p == errAbort {
						return
					}
					e.fail(&ErrorDetails{Kind: ErrorApplication, AppKind: AppPanicked, Message: fmt.Sprint(p)})
				}
				finished = true
			}
		}()
		output, fnErr = fn(ctx, started.Input)
		finished = true
	})
	defer stop()

	resume := func() bool { next(); return finished || e.failure != nil }
	done := resume()
	// Deliver the completions of history and of this turn, one at a time, in order.
	for i := 0; !done && i < len(e.events); i++ {
		if e.deliver(&e.events[i]) {
			done = resume()
		}
	}
	if e.failure == nil && finished {
		e.complete(output, fnErr)
	}
	return e.finish()
}

// acceptMessages turns the fetched messages into events of this turn, dropping
// duplicates and stale completions.
func (e *engine) acceptMessages() {
	scheduled := map[uint64]EventKind{}
	closed := map[uint64]bool{}
	cancelRequested := false
	for _, ev := range e.events {
		switch ev.Kind {
		case EventActivityScheduled, EventTimerCreated:
			scheduled[ev.EventID] = ev.Kind
		case EventActivityCompleted, EventActivityFailed, EventTimerFired, EventActivityCancelRequested:
			closed[ev.SourceEventID] = true
		case EventOrchestrationCancelRequested:
			cancelRequested = true
		}
	}
	for _, m := range e.t.Messages {
		switch m.Kind {
		case WorkStartOrchestration:
			if len(e.events) == 0 {
				e.appendEvent(Event{Kind: EventOrchestrationStarted, Name: m.Name, Version: m.Version, Input: m.Input,
					ParentInstance: m.ParentInstance, ParentID: m.ParentID, ParentExecutionID: m.ParentExecutionID})
				e.res.Name, e.res.Version, e.res.ParentInstance, e.res.ParentID = m.Name, m.Version, m.ParentInstance, m.ParentID
			}
		case WorkContinueAsNew:
			if len(e.events) == 0 {
				e.appendEvent(Event{Kind: EventOrchestrationStarted, Name: m.Name, Version: m.Version, Input: m.Input,
					ParentInstance: m.ParentInstance, ParentID: m.ParentID, ParentExecutionID: m.ParentExecutionID,
					CarryForward: m.CarryForward, InitialCustomStatus: m.InitialCustomStatus})
				e.res.Name, e.res.Version, e.res.ParentInstance, e.res.ParentID = m.Name, m.Version, m.ParentInstance, m.ParentID
			}
		case WorkActivityCompleted, WorkActivityFailed, WorkTimerFired:
			want := EventActivityScheduled
			if m.Kind == WorkTimerFired {
				want = EventTimerCreated
			}
			if m.ExecutionID != e.t.ExecutionID || scheduled[m.ID] != want || closed[m.ID] {
				continue // stale (another execution), unknown or already answered
			}
			closed[m.ID] = true
			switch m.Kind {
			case WorkActivityCompleted:
				e.appendEvent(Event{Kind: EventActivityCompleted, SourceEventID: m.ID, Result: m.Result})
			case WorkActivityFailed:
				e.appendEvent(Event{Kind: EventActivityFailed, SourceEventID: m.ID, Details: m.Details})
			default:
				e.appendEvent(Event{Kind: EventTimerFired, SourceEventID: m.ID, FireAtMs: m.FireAtMs})
			}
		case WorkExternalRaised:
			if len(e.events) > 0 {
				e.appendEvent(Event{Kind: EventExternalEvent, Name: m.Name, Data: m.Data})
			}
		case WorkQueueMessage:
			if len(e.events) > 0 {
				e.appendEvent(Event{Kind: EventQueueEventDelivered, Name: m.Name, Data: m.Data})
			}
		case WorkCancelInstance:
			if len(e.events) > 0 && !cancelRequested {
				cancelRequested = true
				e.appendEvent(Event{Kind: EventOrchestrationCancelRequested, Reason: m.Reason})
			}
		}
	}
}

// deliver applies one event to the futures; it reports whether the code should run.
func (e *engine) deliver(ev *Event) bool {
	e.replaying = int(ev.EventID) <= e.nHist
	switch ev.Kind {
	case EventActivityCompleted, EventActivityFailed, EventTimerFired:
		f := e.futures[ev.SourceEventID]
		if f == nil {
			if int(ev.EventID) <= e.nHist {
				nondeterministic(e, fmt.Sprintf("history completes event %d, which the code did not schedule", ev.SourceEventID))
			}
			return false
		}
		if f.done || f.cancelled {
			return false
		}
		e.now = time.UnixMilli(ev.TimestampMs)
		switch ev.Kind {
		case EventActivityCompleted:
			f.resolve(ev.Result, nil)
		case EventActivityFailed:
			f.resolve("", &ActivityError{Details: ev.Details})
		default:
			f.resolve("", nil)
		}
		return true
	case EventExternalEvent:
		for _, f := range e.subs {
			if !f.done && !f.cancelled && f.name == ev.Name {
				e.now = time.UnixMilli(ev.TimestampMs)
				f.resolve(ev.Data, nil)
				return true
			}
		}
		return false // raised with nobody waiting: dropped
	case EventOrchestrationCancelRequested:
		e.cancelAll()
		e.fail(&ErrorDetails{Kind: ErrorApplication, AppKind: AppCancelled, Reason: ev.Reason})
		return true
	}
	return false
}

// nondeterministic fails the turn from the engine side (outside the coroutine).
func nondeterministic(e *engine, msg string) {
	if e.failure == nil {
		e.fail(&ErrorDetails{Kind: ErrorConfiguration, ConfigKind: ConfigNondeterminism, Message: msg})
	}
}

// decide records a decision of the code: on replay it must match the next recorded
// decision; past the history it is a new event.
func (e *engine) decide(ev Event) *Event {
	if e.cursor < len(e.decisions) {
		rec := &e.events[e.decisions[e.cursor]]
		e.cursor++
		if msg := mismatch(rec, &ev); msg != "" {
			panic(&nondeterminism{msg: fmt.Sprintf("decision %d (event %d): %s", e.cursor, rec.EventID, msg)})
		}
		return rec
	}
	e.replaying = false
	out := e.appendEvent(ev)
	e.decisions = append(e.decisions, len(e.events)-1)
	e.cursor = len(e.decisions)
	return out
}

// mismatch describes how a replayed decision differs from the recorded one ("" if it
// does not). Timer fire times and custom status values are not compared.
func mismatch(rec, now *Event) string {
	if rec.Kind != now.Kind {
		return fmt.Sprintf("the code now decides %s where history recorded %s", now.Kind, rec.Kind)
	}
	switch now.Kind {
	case EventActivityScheduled:
		if rec.Name != now.Name || rec.Input != now.Input || rec.SessionID != now.SessionID || rec.Tag != now.Tag {
			return fmt.Sprintf("activity %q(%q) session %q tag %q, history has %q(%q) session %q tag %q",
				now.Name, now.Input, now.SessionID, now.Tag, rec.Name, rec.Input, rec.SessionID, rec.Tag)
		}
	case EventExternalSubscribed:
		if rec.Name != now.Name {
			return fmt.Sprintf("wait for event %q, history has %q", now.Name, rec.Name)
		}
	case EventActivityCancelRequested, EventExternalSubscribedCancelled:
		if rec.SourceEventID != now.SourceEventID {
			return fmt.Sprintf("cancel of event %d, history cancels %d", now.SourceEventID, rec.SourceEventID)
		}
	}
	return ""
}

// cancelAll cancels every outstanding activity and subscription (the instance ends).
func (e *engine) cancelAll() {
	for _, f := range e.futures {
		if !f.done && !f.cancelled {
			e.cancelFuture(f, "orchestration ended", false)
		}
	}
}

// cancelFuture records that the code gave up on f. decide is false when the engine
// itself cancels (the instance ends): then nothing is matched against history.
func (e *engine) cancelFuture(f *Future, reason string, decide bool) {
	f.cancelled = true
	var kind EventKind
	switch f.kind {
	case EventActivityScheduled:
		kind = EventActivityCancelRequested
	case EventExternalSubscribed:
		kind = EventExternalSubscribedCancelled
	default:
		return // timers need no cancellation
	}
	if decide {
		ev := e.decide(Event{Kind: kind, SourceEventID: f.id, Reason: reason})
		if int(ev.EventID) <= e.nHist {
			return // decided in an earlier turn: the side effect was issued then
		}
	}
	if kind == EventActivityCancelRequested {
		e.res.CancelledActivities = append(e.res.CancelledActivities,
			ScheduledActivityIdentifier{Instance: e.t.Instance, ExecutionID: e.t.ExecutionID, ActivityID: f.id})
	}
}

func (e *engine) fail(d *ErrorDetails) {
	if e.failure == nil {
		e.failure = d
	}
}

// complete records how the orchestration function returned.
func (e *engine) complete(output string, err error) {
	var can *errContinueAsNew
	switch {
	case err == nil:
		e.decide(Event{Kind: EventOrchestrationCompleted, Output: output})
		e.res.Status, e.res.Output = StatusCompleted, output
	case errors.As(err, &can):
		e.decide(Event{Kind: EventOrchestrationContinuedAsNew, Input: can.input})
		e.res.Status, e.res.Output = StatusContinuedAsNew, can.input
		version := can.version
		if version == "" {
			version = e.res.Version
		}
		e.res.OrchestratorItems = append(e.res.OrchestratorItems, WorkItem{Kind: WorkContinueAsNew, Instance: e.t.Instance,
			Name: e.res.Name, Version: version, Input: can.input, ParentInstance: e.res.ParentInstance, ParentID: e.res.ParentID})
	default:
		e.fail(&ErrorDetails{Kind: ErrorApplication, AppKind: AppOrchestrationFailed, Message: err.Error()})
	}
	if e.res.Status != StatusRunning {
		e.cancelAll()
	}
}

// finish turns the turn's new events into work items and fills in the result.
func (e *engine) finish() TurnResult {
	if e.failure != nil && e.res.Status == StatusRunning {
		e.cancelAll()
		e.appendEvent(Event{Kind: EventOrchestrationFailed, Details: e.failure})
		e.res.Status, e.res.Failure, e.res.Output = StatusFailed, e.failure, e.failure.DisplayMessage()
	}
	for i := e.nHist; i < len(e.events); i++ {
		ev := &e.events[i]
		e.res.NewEvents = append(e.res.NewEvents, *ev)
		switch ev.Kind {
		case EventActivityScheduled:
			e.res.WorkerItems = append(e.res.WorkerItems, WorkItem{Kind: WorkActivityExecute, Instance: e.t.Instance,
				ExecutionID: e.t.ExecutionID, ID: ev.EventID, Name: ev.Name, Input: ev.Input, SessionID: ev.SessionID, Tag: ev.Tag})
		case EventTimerCreated:
			e.res.OrchestratorItems = append(e.res.OrchestratorItems, WorkItem{Kind: WorkTimerFired, Instance: e.t.Instance,
				ExecutionID: e.t.ExecutionID, ID: ev.EventID, FireAtMs: ev.FireAtMs})
		case EventCustomStatusUpdated:
			status := ev.Status
			e.res.CustomStatus = &status
		}
	}
	return e.res
}

// ActivityError is the error a failed activity's future returns.
type ActivityError struct {
	Details *ErrorDetails
}

func (e *ActivityError) Error() string {
	if e.Details == nil {
		return "activity failed"
	}
	return "activity failed: " + e.Details.DisplayMessage()
}
