package runtime

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
)

// Context is an orchestration's handle on the runtime during a turn. Its methods are
// the only way orchestration code may schedule work, wait or read time. A Context is
// used by the orchestration's own code only, never from another goroutine.
type Context struct {
	e *engine
}

// Future is the pending result of something the orchestration scheduled.
type Future struct {
	e         *engine
	kind      EventKind // the scheduling event's kind
	id        uint64    // the scheduling event's id
	name      string    // event name of a subscription
	done      bool
	cancelled bool
	result    string
	err       error
}

func (f *Future) resolve(result string, err error) {
	f.done, f.result, f.err = true, result, err
}

// Done reports whether the result is available (without waiting).
func (f *Future) Done() bool { return f.done }

// Get waits for the result.
func (f *Future) Get() (string, error) {
	for !f.done {
		f.e.wait()
	}
	return f.result, f.err
}

// wait suspends the orchestration until the engine has delivered another event; it
// unwinds the code when the turn ends instead.
func (e *engine) wait() {
	if e.failure != nil || !e.yield(struct{}{}) {
		panic(errAbort)
	}
}

// InstanceID, ExecutionID, Name and Version describe the running orchestration.
func (c *Context) InstanceID() string  { return c.e.t.Instance }
func (c *Context) ExecutionID() uint64 { return c.e.t.ExecutionID }
func (c *Context) Name() string        { return c.e.res.Name }
func (c *Context) Version() string     { return c.e.res.Version }

// IsReplaying reports whether the code is re-running decisions already recorded in
// history (use it to keep side effects such as logging to the first run).
func (c *Context) IsReplaying() bool { return c.e.replaying || c.e.cursor < len(c.e.decisions) }

// Now is the orchestration's deterministic clock: the time of the last event the code
// has seen, the same on every replay.
func (c *Context) Now() time.Time { return c.e.now }

// NewGUID returns a deterministic, unique id: the same on every replay of this point.
func (c *Context) NewGUID() string {
	c.e.guidSeq++
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00", c.e.t.Instance, c.e.t.ExecutionID)
	binary.Write(h, binary.BigEndian, c.e.guidSeq)
	b := h.Sum(nil)[:16]
	b[6] = b[6]&0x0f | 0x50 // version 5 style
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ActivityOption tunes ScheduleActivity.
type ActivityOption func(*Event)

// OnSession runs the activity on the worker that owns session (affinity).
func OnSession(session string) ActivityOption { return func(e *Event) { e.SessionID = session } }

// WithTag routes the activity to workers whose tag filter accepts tag.
func WithTag(tag string) ActivityOption { return func(e *Event) { e.Tag = tag } }

// ScheduleActivity schedules activity name with input and returns its future.
func (c *Context) ScheduleActivity(name, input string, opts ...ActivityOption) *Future {
	ev := Event{Kind: EventActivityScheduled, Name: name, Input: input}
	for _, o := range opts {
		o(&ev)
	}
	return c.schedule(c.e.decide(ev))
}

// CreateTimer returns a future that resolves after d (a durable timer).
func (c *Context) CreateTimer(d time.Duration) *Future {
	fire := c.e.now.Add(d)
	if c.e.cursor >= len(c.e.decisions) {
		fire = c.e.t.Now.Add(d) // a new timer counts from the turn's wall clock
	}
	return c.schedule(c.e.decide(Event{Kind: EventTimerCreated, FireAtMs: fire.UnixMilli()}))
}

// WaitForEvent returns a future resolved by the next external event called name raised
// after this call (positional: the Nth live wait for a name gets the Nth event).
func (c *Context) WaitForEvent(name string) *Future {
	f := c.schedule(c.e.decide(Event{Kind: EventExternalSubscribed, Name: name}))
	f.name = name
	c.e.subs = append(c.e.subs, f)
	return f
}

func (c *Context) schedule(ev *Event) *Future {
	f := &Future{e: c.e, kind: ev.Kind, id: ev.EventID}
	c.e.futures[ev.EventID] = f
	return f
}

// SetCustomStatus publishes a status for clients (nil clears it).
func (c *Context) SetCustomStatus(status *string) {
	c.e.decide(Event{Kind: EventCustomStatusUpdated, Status: status})
}

// Join waits for every future and returns their errors in order (nil where each
// succeeded); read the results with Get.
func (c *Context) Join(fs ...*Future) []error {
	errs := make([]error, len(fs))
	for i, f := range fs {
		_, errs[i] = f.Get()
	}
	return errs
}

// Select waits until one of fs is done and returns its index; the others are given up:
// an activity still pending is cancelled, a wait unsubscribed. When several are done,
// the one completed first in history wins (the lowest index among those already done
// before the call).
func (c *Context) Select(fs ...*Future) int {
	if len(fs) == 0 {
		panic("runtime: Select of no futures")
	}
	for {
		for i, f := range fs {
			if f.done {
				for j, loser := range fs {
					if j != i && !loser.done && !loser.cancelled {
						c.e.cancelFuture(loser, "lost a select", true)
					}
				}
				return i
			}
		}
		c.e.wait()
	}
}

// ContinueAsNew ends this execution and starts the next with input; return its result
// from the orchestration. An empty version keeps the current one.
func (c *Context) ContinueAsNew(input string) error {
	return &errContinueAsNew{input: input}
}

// ContinueAsNewVersioned is ContinueAsNew into another version of the orchestration.
func (c *Context) ContinueAsNewVersioned(version, input string) error {
	return &errContinueAsNew{input: input, version: version}
}
