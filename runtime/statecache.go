package runtime

import (
	"container/list"
	"maps"
	"slices"
	"sync"

	"github.com/duroq/duroq/runtime/provider"
)

// defaultStateCacheSize is Options.StateCacheSize's default.
const defaultStateCacheSize = 1024

// stateCache keeps the engines of running executions between turns, their code
// suspended, so that a turn whose fetched history is exactly what the engine left
// runs only its new messages instead of replaying the whole history. An engine is
// either in the cache or owned by the one turn that took it, never both; the least
// recently used one is evicted beyond the size. A nil cache keeps nothing.
type stateCache struct {
	mu     sync.Mutex
	size   int
	order  *list.List // of *engine, most recently stored first
	byInst map[string]*list.Element
}

// newStateCache returns a cache of size engines, or nil when size is negative.
func newStateCache(size int) *stateCache {
	if size < 0 {
		return nil
	}
	return &stateCache{size: size, order: list.New(), byInst: map[string]*list.Element{}}
}

// run runs turn t like RunTurn, resuming t's instance's cached engine when its state
// is current and replaying otherwise. It returns the engine to put back once the
// turn is committed, or nil when the execution ended or its state cannot be reused;
// the caller owns it until then (close it if the commit fails).
func (c *stateCache) run(t Turn, fn Orchestration) (res TurnResult, e *engine, resumed bool) {
	if c == nil {
		return RunTurn(t, fn), nil, false
	}
	e = c.take(t.Instance)
	if e != nil && !e.current(t) {
		e.close()
		e = nil
	}
	if resumed = e != nil; resumed {
		res = e.resume(t)
	} else {
		e = newEngine(t)
		res = e.run(fn)
	}
	if !e.resumable() {
		e.close()
		return res, nil, resumed
	}
	// Keep only what the next turn resumes from: the engine has its own copy of the
	// history, and the messages and the result are the caller's.
	e.t.History, e.t.Messages, e.res = nil, nil, TurnResult{}
	return res, e, resumed
}

// current reports whether the engine's state is the one a replay of t's history
// would rebuild: same execution, same KV snapshot, and every event of t's history
// equal to the engine's (another process may have run turns since, or the instance
// may have been deleted and created again).
func (e *engine) current(t Turn) bool {
	return t.Poison == nil && t.Instance == e.t.Instance && t.ExecutionID == e.t.ExecutionID &&
		maps.Equal(t.KVSnapshot, e.t.KVSnapshot) && historyEqual(t.History, e.events)
}

func historyEqual(a, b []provider.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !eventEqual(&a[i], &b[i]) {
			return false
		}
	}
	return true
}

// eventEqual compares every field of two events (TestEventEqualComparesEveryField
// keeps it complete).
func eventEqual(a, b *provider.Event) bool {
	return a.Kind == b.Kind && a.EventID == b.EventID && a.SourceEventID == b.SourceEventID &&
		a.InstanceID == b.InstanceID && a.ExecutionID == b.ExecutionID && a.TimestampMs == b.TimestampMs &&
		a.RuntimeVersion == b.RuntimeVersion && a.Name == b.Name && a.Version == b.Version &&
		a.Input == b.Input && a.Output == b.Output && a.Result == b.Result && a.Data == b.Data &&
		a.Reason == b.Reason && a.Instance == b.Instance && a.ParentInstance == b.ParentInstance &&
		a.ParentID == b.ParentID && a.ParentExecutionID == b.ParentExecutionID && a.SessionID == b.SessionID &&
		a.Tag == b.Tag && a.FireAtMs == b.FireAtMs && a.Key == b.Key && a.Value == b.Value &&
		a.LastUpdatedAtMs == b.LastUpdatedAtMs && pointeeEqual(a.Details, b.Details) &&
		pointeeEqual(a.Status, b.Status) && pointeeEqual(a.InitialCustomStatus, b.InitialCustomStatus) &&
		slices.Equal(a.CarryForward, b.CarryForward) && a.TraceParent == b.TraceParent
}

func pointeeEqual[T comparable](a, b *T) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// drop stops and forgets instance's engine, if any.
func (c *stateCache) drop(instance string) {
	if c != nil {
		c.take(instance).close()
	}
}

// take removes and returns instance's engine, or nil.
func (c *stateCache) take(instance string) *engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byInst[instance]; ok {
		return c.remove(el)
	}
	return nil
}

// put stores e (nil: nothing to store) after its turn was committed, replacing any
// engine of the same instance and evicting the least recently stored beyond the size.
func (c *stateCache) put(e *engine) {
	if e == nil {
		return
	}
	var out []*engine
	c.mu.Lock()
	if el, ok := c.byInst[e.t.Instance]; ok {
		out = append(out, c.remove(el))
	}
	c.byInst[e.t.Instance] = c.order.PushFront(e)
	for c.order.Len() > c.size {
		out = append(out, c.remove(c.order.Back()))
	}
	c.mu.Unlock()
	closeAll(out) // outside the lock: unwinding runs the code's deferred calls
}

func (c *stateCache) remove(el *list.Element) *engine {
	e := c.order.Remove(el).(*engine)
	delete(c.byInst, e.t.Instance)
	return e
}

// close stops every cached engine's code; it is called once no turn runs any more.
func (c *stateCache) close() {
	if c == nil {
		return
	}
	var out []*engine
	c.mu.Lock()
	for c.order.Len() > 0 {
		out = append(out, c.remove(c.order.Back()))
	}
	c.mu.Unlock()
	closeAll(out)
}

func closeAll(es []*engine) {
	for _, e := range es {
		e.close()
	}
}
