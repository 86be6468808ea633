package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/duroq/duroq/runtime/provider"
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
	kind      provider.EventKind // the scheduling event's kind
	id        uint64             // the scheduling event's id
	name      string             // activity name, event name or queue name
	child     string             // sub-orchestration instance
	done      bool
	cancelled bool
	result    string
	err       error
	// step advances a composite future (retries, decoded results) from the state of
	// the futures it is made of; cancel gives them up. Both are nil for a future
	// that an event resolves directly.
	step   func()
	cancel func()
}

func (f *Future) resolve(result string, err error) {
	f.done, f.result, f.err = true, result, err
}

// Done reports whether the result is available (without waiting).
func (f *Future) Done() bool {
	if !f.done && !f.cancelled && f.step != nil {
		f.step()
	}
	return f.done
}

// Get waits for the result.
func (f *Future) Get() (string, error) {
	for !f.Done() {
		f.e.wait()
	}
	return f.result, f.err
}

// giveUp cancels a future the code no longer waits for.
func (f *Future) giveUp(reason string) {
	if f.done || f.cancelled {
		return
	}
	if f.cancel != nil {
		f.cancelled = true
		f.cancel()
		return
	}
	f.e.cancelFuture(f, reason, true)
}

// wait suspends the orchestration until the engine has delivered another event; it
// unwinds the code when the turn ends instead.
func (e *engine) wait() {
	if e.failure != nil || !e.yield(struct{}{}) {
		panic(errAbort)
	}
}

// InstanceID is the id of the running orchestration instance.
func (c *Context) InstanceID() string { return c.e.t.Instance }

// ExecutionID is the running execution of the instance: 1 for the first, one more
// after each ContinueAsNew.
func (c *Context) ExecutionID() uint64 { return c.e.t.ExecutionID }

// Name is the orchestration's registered name.
func (c *Context) Name() string { return c.e.res.Name }

// Version is the orchestration version the execution runs, chosen when it started
// and recorded in its history, so every replay runs the same code.
func (c *Context) Version() string { return c.e.res.Version }

// IsReplaying reports whether the code is re-running decisions already recorded in
// history (use it to keep side effects such as logging to the first run).
func (c *Context) IsReplaying() bool { return c.e.replaying || c.e.cursor < len(c.e.decisions) }

// Logger returns a logger that is silent while the code replays, so each record is
// written once; records carry the instance, execution, orchestration and version.
func (c *Context) Logger() *slog.Logger {
	return slog.New(replayHandler{h: c.e.log.Handler(), c: c})
}

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
type ActivityOption func(*provider.Event)

// OnSession runs the activity on the worker that owns session (affinity).
func OnSession(session string) ActivityOption {
	return func(e *provider.Event) { e.SessionID = session }
}

// WithTag routes the activity to workers whose tag filter accepts tag.
func WithTag(tag string) ActivityOption { return func(e *provider.Event) { e.Tag = tag } }

// ScheduleActivity schedules activity name with input and returns its future.
func (c *Context) ScheduleActivity(name, input string, opts ...ActivityOption) *Future {
	ev := provider.Event{Kind: provider.EventActivityScheduled, Name: name, Input: input}
	if len(opts) > 0 {
		ev = withOptions(ev, opts)
	}
	if len(ev.Tag) > MaxTagBytes {
		panic(&configError{kind: provider.ConfigLimitExceeded, msg: fmt.Sprintf("activity %s: tag of %d bytes exceeds %d", name, len(ev.Tag), MaxTagBytes)})
	}
	f := c.schedule(c.e.decide(ev))
	f.name = name
	return f
}

// withOptions returns ev with opts applied. It is a function of its own so that
// ScheduleActivity's event escapes to the heap only when the call has options.
func withOptions(ev provider.Event, opts []ActivityOption) provider.Event {
	for _, o := range opts {
		o(&ev)
	}
	return ev
}

// CreateTimer returns a future that resolves after d (a durable timer).
func (c *Context) CreateTimer(d time.Duration) *Future {
	fire := c.e.now.Add(d)
	if c.e.cursor >= len(c.e.decisions) {
		fire = c.e.t.Now.Add(d) // a new timer counts from the turn's wall clock
	}
	return c.schedule(c.e.decide(provider.Event{Kind: provider.EventTimerCreated, FireAtMs: fire.UnixMilli()}))
}

// WaitForEvent returns a future resolved by the next external event called name raised
// after this call (positional: the Nth live wait for a name gets the Nth event). An
// event raised while nobody waits for it is dropped; use DequeueEvent for a mailbox.
func (c *Context) WaitForEvent(name string) *Future {
	f := c.schedule(c.e.decide(provider.Event{Kind: provider.EventExternalSubscribed, Name: name}))
	f.name = name
	c.e.subs = append(c.e.subs, f)
	return f
}

// DequeueEvent returns a future resolved by the oldest message of the instance's
// persistent FIFO queue called queue (Client.EnqueueEvent). Messages wait in the queue
// until consumed, survive a lost select, and unconsumed ones are carried into the
// next execution by ContinueAsNew (at most MaxCarryForward).
func (c *Context) DequeueEvent(queue string) *Future {
	f := c.schedule(c.e.decide(provider.Event{Kind: provider.EventQueueSubscribed, Name: queue}))
	f.name = queue
	c.e.queueSubs = append(c.e.queueSubs, f)
	c.e.matchQueue(queue)
	return f
}

// SubOrchestrationOption tunes ScheduleSubOrchestration and StartOrchestration.
type SubOrchestrationOption func(*provider.Event)

// WithInstanceID gives the child an explicit instance id (the default derives one
// from the parent's id, execution and the scheduling event).
func WithInstanceID(id string) SubOrchestrationOption {
	return func(e *provider.Event) { e.Instance = id }
}

// WithVersion runs a specific version of the child (the default is the registry's
// policy for its name).
func WithVersion(version string) SubOrchestrationOption {
	return func(e *provider.Event) { e.Version = version }
}

// ScheduleSubOrchestration starts orchestration name as a child of this one and
// returns a future of its output. Giving the future up (a lost select, the parent
// ending) cancels the child.
func (c *Context) ScheduleSubOrchestration(name, input string, opts ...SubOrchestrationOption) *Future {
	ev := provider.Event{Kind: provider.EventSubOrchestrationScheduled, Name: name, Input: input}
	for _, o := range opts {
		o(&ev)
	}
	if ev.Instance == "" {
		// Event ids restart in every execution: the execution keeps later children
		// from colliding with those of the first.
		id := c.e.peekDecisionID()
		if x := c.e.t.ExecutionID; x > 1 {
			ev.Instance = fmt.Sprintf("%s::sub::x%d::%d", c.e.t.Instance, x, id)
		} else {
			ev.Instance = fmt.Sprintf("%s::sub::%d", c.e.t.Instance, id)
		}
	}
	f := c.schedule(c.e.decide(ev))
	f.name, f.child = name, ev.Instance
	return f
}

// StartOrchestration starts instance as an independent (detached) orchestration: no
// parent link, no result. It is started even when this orchestration ends in the
// same turn.
func (c *Context) StartOrchestration(name, instance, input string, opts ...SubOrchestrationOption) {
	ev := provider.Event{Kind: provider.EventOrchestrationChained, Name: name, Input: input}
	for _, o := range opts {
		o(&ev)
	}
	ev.Instance = instance
	c.e.decide(ev)
}

func (c *Context) schedule(ev *provider.Event) *Future {
	f := &Future{e: c.e, kind: ev.Kind, id: ev.EventID}
	c.e.futures[ev.EventID] = f
	return f
}

// SetCustomStatus publishes a status for clients; it is carried into the next
// execution by ContinueAsNew.
func (c *Context) SetCustomStatus(status string) {
	if len(status) > MaxCustomStatusBytes {
		panic(&configError{kind: provider.ConfigLimitExceeded, msg: fmt.Sprintf("custom status of %d bytes exceeds %d", len(status), MaxCustomStatusBytes)})
	}
	c.setCustomStatus(&status)
}

// ResetCustomStatus clears the custom status.
func (c *Context) ResetCustomStatus() { c.setCustomStatus(nil) }

func (c *Context) setCustomStatus(status *string) {
	ev := c.e.decide(provider.Event{Kind: provider.EventCustomStatusUpdated, Status: status})
	c.e.custom = ev.Status
}

// CustomStatus returns the current custom status (ok is false when none is set).
func (c *Context) CustomStatus() (status string, ok bool) {
	if c.e.custom == nil {
		return "", false
	}
	return *c.e.custom, true
}

// SetKV sets key to value in the instance's durable key-value state, which clients
// can read while the instance runs and which survives ContinueAsNew.
func (c *Context) SetKV(key, value string) {
	if len(value) > MaxKVValueBytes {
		panic(&configError{kind: provider.ConfigLimitExceeded, msg: fmt.Sprintf("KV value of %q has %d bytes, more than %d", key, len(value), MaxKVValueBytes)})
	}
	if _, ok := c.e.kv[key]; !ok && len(c.e.kv) >= MaxKVKeys {
		panic(&configError{kind: provider.ConfigLimitExceeded, msg: fmt.Sprintf("KV key %q would exceed %d keys", key, MaxKVKeys)})
	}
	ev := c.e.decide(provider.Event{Kind: provider.EventKeyValueSet, Key: key, Value: value, LastUpdatedAtMs: c.e.t.Now.UnixMilli()})
	c.e.kv[key] = provider.KVValue{Value: ev.Value, LastUpdatedAtMs: ev.LastUpdatedAtMs}
}

// KV returns the value of key (ok is false when it is not set).
func (c *Context) KV(key string) (value string, ok bool) {
	v, ok := c.e.kv[key]
	return v.Value, ok
}

// ClearKV removes key.
func (c *Context) ClearKV(key string) {
	c.e.decide(provider.Event{Kind: provider.EventKeyValueCleared, Key: key})
	delete(c.e.kv, key)
}

// ClearAllKV removes every key.
func (c *Context) ClearAllKV() {
	c.e.decide(provider.Event{Kind: provider.EventKeyValuesCleared})
	clear(c.e.kv)
}

// KVAll returns a copy of the whole KV state.
func (c *Context) KVAll() map[string]string {
	out := make(map[string]string, len(c.e.kv))
	for k, v := range c.e.kv {
		out[k] = v.Value
	}
	return out
}

// KVKeys returns the keys, sorted.
func (c *Context) KVKeys() []string {
	keys := make([]string, 0, len(c.e.kv))
	for k := range c.e.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// PruneKVUpdatedBefore clears the keys last written before cutoff (never those this
// turn wrote) and returns how many it cleared.
func (c *Context) PruneKVUpdatedBefore(cutoff time.Time) int {
	// A key this turn wrote carries the turn's clock, which is Now: bounding the
	// cutoff by Now spares it, and replays the same decisions later.
	limit := min(cutoff.UnixMilli(), c.e.now.UnixMilli())
	n := 0
	for _, k := range c.KVKeys() {
		if c.e.kv[k].LastUpdatedAtMs < limit {
			c.ClearKV(k)
			n++
		}
	}
	return n
}

// KVFromInstance reads key from another instance's KV state, through a built-in
// activity (recorded, so replay gives the same answer). The future fails with
// ErrKVNotFound when the key is not set.
func (c *Context) KVFromInstance(instance, key string) *Future {
	inner := c.ScheduleActivity(SysKVGet, encodeKVGet(instance, key))
	f := &Future{e: c.e}
	f.step = func() {
		if !inner.Done() {
			return
		}
		v, err := inner.Get()
		if err == nil {
			if value, found := strings.CutPrefix(v, "1"); found {
				f.resolve(value, nil)
				return
			}
			err = fmt.Errorf("%w: %s of instance %s", ErrKVNotFound, key, instance)
		}
		f.resolve("", err)
	}
	f.cancel = func() { inner.giveUp("not awaited") }
	return f
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
// a pending activity is cancelled, a sub-orchestration is cancelled, a wait or queue
// subscription is withdrawn (a queue message it did not take stays queued). When
// several are done, the lowest index wins.
func (c *Context) Select(fs ...*Future) int {
	if len(fs) == 0 {
		panic("runtime: Select of no futures")
	}
	for {
		for i, f := range fs {
			if f.Done() {
				for j, loser := range fs {
					if j != i {
						loser.giveUp("lost a select")
					}
				}
				return i
			}
		}
		c.e.wait()
	}
}

// ContinueAsNew ends this execution and starts the next with input; return its result
// from the orchestration. The next execution runs the version the registry's policy
// picks (use ContinueAsNewVersioned for a specific one), keeps the custom status and
// KV state, and receives the queue messages nobody consumed.
func (c *Context) ContinueAsNew(input string) error {
	return &errContinueAsNew{input: input}
}

// ContinueAsNewVersioned is ContinueAsNew into a specific version.
func (c *Context) ContinueAsNewVersioned(version, input string) error {
	return &errContinueAsNew{input: input, version: version}
}

// replayHandler drops records while the orchestration replays.
type replayHandler struct {
	h slog.Handler
	c *Context
}

func (r replayHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return !r.c.IsReplaying() && r.h.Enabled(ctx, l)
}
func (r replayHandler) Handle(ctx context.Context, rec slog.Record) error {
	return r.h.Handle(ctx, rec)
}
func (r replayHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return replayHandler{h: r.h.WithAttrs(as), c: r.c}
}
func (r replayHandler) WithGroup(g string) slog.Handler {
	return replayHandler{h: r.h.WithGroup(g), c: r.c}
}
