package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// ErrStalled reports that an Env has nothing left to run: no message is ready, no
// activity or turn runs, and no timer, delayed message or scheduled action is due,
// while what the caller waits for has not happened (an orchestration waiting for an
// event nobody raises, say).
var ErrStalled = errors.New("runtimetest: stalled")

// DefaultStart is where an Env's virtual clock starts unless Options.Start says.
var DefaultStart = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Options configure an Env. Zero values take the documented defaults.
type Options struct {
	// Start is the virtual clock's first reading (default DefaultStart).
	Start time.Time
	// Activities stub activities by name: each replaces the registered activity of
	// its name, or adds one (the registry passed to New is not changed).
	Activities map[string]runtime.Activity
	// Runtime configures the runtime under test. Its Now, PollTimeout and
	// MinPollInterval are the Env's own (the virtual clock and millisecond polls).
	Runtime runtime.Options
}

// Env runs orchestrations on the real runtime over an in-memory provider whose
// clock is virtual: time stands still while anything runs and, once everything
// waits, jumps to the next moment something is due (a timer, a delayed retry, an
// action scheduled with At), so a 24-hour timer fires at once. Time moves only inside
// Wait and RunUntil. An Env is safe for concurrent use; Close it when done.
type Env struct {
	clock   *virtualClock
	p       *adapter.Provider
	rt      *runtime.Runtime
	client  *runtime.Client
	stop    context.CancelFunc
	stopped chan error

	mu      sync.Mutex
	actions []action // by time, then scheduling order
}

// An action is something the test asked to happen at a virtual time.
type action struct {
	at time.Time
	fn func(context.Context, *runtime.Client) error
}

// Queue names of the Env's provider (adapter's defaults).
const (
	orchestratorQueue = "orchestrator"
	workerQueue       = "worker"
)

// New starts the runtime with reg's code (and o.Activities' stubs) on a fresh
// in-memory provider.
func New(reg *runtime.Registry, o Options) (*Env, error) {
	if reg == nil {
		return nil, errors.New("runtimetest: New: nil registry")
	}
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	if len(o.Activities) > 0 {
		reg = reg.Clone()
		for name, fn := range o.Activities {
			if fn == nil {
				return nil, fmt.Errorf("runtimetest: New: the stub of activity %q is nil", name)
			}
			if err := reg.ReplaceActivity(name, fn); err != nil {
				return nil, fmt.Errorf("runtimetest: New: stub of activity %q: %w", name, err)
			}
		}
	}
	clock := &virtualClock{t: o.Start}
	p := adapter.NewMemory(adapter.Options{Now: clock.Now, OrchestratorQueue: orchestratorQueue, WorkerQueue: workerQueue})
	ro := o.Runtime
	ro.Now = clock.Now
	// The clock jumps without waking the dispatchers' long polls: short polls see
	// what a jump made visible within a few milliseconds.
	ro.PollTimeout, ro.MinPollInterval = 2*time.Millisecond, time.Millisecond
	rt, err := runtime.New(p, reg, ro)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("runtimetest: New: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	e := &Env{clock: clock, p: p, rt: rt, client: rt.Client(), stop: stop, stopped: make(chan error, 1)}
	go func() { e.stopped <- rt.Run(ctx) }()
	return e, nil
}

// Client is the runtime's client: start instances, raise events, read statuses.
func (e *Env) Client() *runtime.Client { return e.client }

// Now is the virtual clock's reading.
func (e *Env) Now() time.Time { return e.clock.Now() }

// At schedules fn to run when the virtual clock reaches at (at once, on the next
// Wait or RunUntil, if it already has). An error fn returns ends that Wait or
// RunUntil with it.
func (e *Env) At(at time.Time, fn func(ctx context.Context, c *runtime.Client) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := sort.Search(len(e.actions), func(i int) bool { return e.actions[i].at.After(at) })
	e.actions = slices.Insert(e.actions, i, action{at: at, fn: fn})
}

// RaiseEventAt raises event name with data on instance when the virtual clock
// reaches at.
func (e *Env) RaiseEventAt(at time.Time, instance, name, data string) {
	e.At(at, func(ctx context.Context, c *runtime.Client) error { return c.RaiseEvent(ctx, instance, name, data) })
}

// Wait runs the instance until it completes or fails and returns its final status,
// moving the virtual clock as needed. It fails with ErrStalled when the instance
// still runs but nothing is left that could move it on.
func (e *Env) Wait(ctx context.Context, instance string) (runtime.OrchestrationStatus, error) {
	var st runtime.OrchestrationStatus
	err := e.drive(ctx, time.Time{}, func() (bool, error) {
		var err error
		st, err = e.client.Status(ctx, instance)
		return st.Terminal(), err
	})
	if errors.Is(err, ErrStalled) {
		err = fmt.Errorf("runtimetest: Wait(%q): %w: the instance is %s at %s and nothing is due to move it on (does it wait for an event nobody raises?)",
			instance, ErrStalled, st.State, e.Now().Format(time.RFC3339))
	}
	return st, err
}

// RunUntil runs everything due up to at, the effects of what is due at at
// included, and leaves the virtual clock there.
func (e *Env) RunUntil(ctx context.Context, at time.Time) error {
	return e.drive(ctx, at, func() (bool, error) { return false, nil })
}

// History returns the events of the instance's current execution.
func (e *Env) History(ctx context.Context, instance string) ([]provider.Event, error) {
	return e.p.ReadHistory(ctx, instance)
}

// Close stops the runtime and drops the provider.
func (e *Env) Close() error {
	e.stop()
	err := <-e.stopped
	e.stopped <- err // a second Close returns the same
	if cerr := e.p.Close(); cerr != nil && !errors.Is(cerr, provider.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}

// drive lets the runtime work until done says so; whenever everything waits, it
// moves the clock to the next thing due and runs the actions due by then. With a
// non-zero until it stops there instead of stalling.
func (e *Env) drive(ctx context.Context, until time.Time, done func() (bool, error)) error {
	for {
		if ok, err := done(); ok || err != nil {
			return err
		}
		if err := e.runDueActions(ctx); err != nil {
			return err
		}
		idle, next, err := e.idle(ctx)
		if err != nil {
			return err
		}
		if !idle {
			if err := pause(ctx); err != nil {
				return err
			}
			continue
		}
		// What finished while the queues were being looked at must not see the
		// clock move.
		if ok, err := done(); ok || err != nil {
			return err
		}
		next = earliest(next, e.nextAction())
		switch {
		case !until.IsZero() && (next.IsZero() || next.After(until)):
			if !e.Now().Before(until) {
				return nil
			}
			e.clock.advance(until) // and run what is due then
			continue
		case next.IsZero():
			return ErrStalled
		}
		e.clock.advance(next)
	}
}

// idle reports whether nothing is ready or running, and when the next delayed
// message becomes visible. Two looks with no write between them make sure no commit
// moved work from one queue to the other while they were counted.
func (e *Env) idle(ctx context.Context) (bool, time.Time, error) {
	var next time.Time
	for look := 0; look < 2; look++ {
		writes := e.p.WriteTransactions()
		next = time.Time{}
		for _, q := range []string{orchestratorQueue, workerQueue} {
			st, err := e.p.Queue().Stats(ctx, q)
			if err != nil {
				return false, time.Time{}, fmt.Errorf("runtimetest: %w", err)
			}
			if st.Ready > 0 || st.Locked > 0 {
				return false, time.Time{}, nil
			}
			next = earliest(next, st.NextVisible)
		}
		if e.p.WriteTransactions() != writes {
			return false, time.Time{}, nil
		}
	}
	return true, next, nil
}

// runDueActions runs, in order, the actions whose time has come.
func (e *Env) runDueActions(ctx context.Context) error {
	for {
		e.mu.Lock()
		if len(e.actions) == 0 || e.actions[0].at.After(e.Now()) {
			e.mu.Unlock()
			return nil
		}
		a := e.actions[0]
		e.actions = e.actions[1:]
		e.mu.Unlock()
		if err := a.fn(ctx, e.client); err != nil {
			return fmt.Errorf("runtimetest: action at %s: %w", a.at.Format(time.RFC3339), err)
		}
	}
}

func (e *Env) nextAction() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.actions) == 0 {
		return time.Time{}
	}
	return e.actions[0].at
}

// pause waits a moment of real time for the runtime to make progress.
func pause(ctx context.Context) error {
	t := time.NewTimer(200 * time.Microsecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// virtualClock is a clock that moves only when told, and never backwards.
type virtualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *virtualClock) advance(to time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if to.After(c.t) {
		c.t = to
	}
}
