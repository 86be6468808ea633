package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/duroq/duroq/internal/tracectx"
	"github.com/duroq/duroq/runtime/provider"
)

// State is the coarse state of an orchestration instance.
type State string

// Instance states as clients see them (a continued-as-new instance is Running).
const (
	StateNotFound State = "NotFound"
	// StatePending: the instance was started (its start is queued) but its first
	// turn has not committed yet. Only providers that implement PendingStartReader
	// report it; with others such an instance reads NotFound.
	StatePending   State = "Pending"
	StateRunning   State = "Running"
	StateCompleted State = "Completed"
	StateFailed    State = "Failed"
)

// OrchestrationStatus is what a client sees of an instance.
type OrchestrationStatus struct {
	// State is where the instance is in its life; a continued-as-new instance is
	// Running.
	State State
	// Name is the orchestration's name (while Pending, the one the start asked for).
	Name string
	// Version is the orchestration version the current execution runs (while
	// Pending, the one the start asked for: "" = the registry's policy picks).
	Version string
	// ExecutionID is the current execution (0 while Pending).
	ExecutionID uint64
	// Output is the result of a Completed instance.
	Output string
	// Failure describes why a Failed instance failed.
	Failure *provider.ErrorDetails
	// CustomStatus is the last status the orchestration published (nil: none).
	CustomStatus *string
	// CustomStatusVersion counts the changes of CustomStatus (0: never set); pass it
	// to WaitForStatusChange to wait for the next one.
	CustomStatusVersion uint64
	// PendingReason says why a Pending instance has not run when a runtime gave its
	// start back saying why, with how many times it was offered, e.g.
	// `orchestration "Checkout" version "" is not registered on runtime work-ab12
	// (offered 3 times)`. Empty otherwise.
	PendingReason string
}

// Terminal reports whether the instance has ended.
func (s OrchestrationStatus) Terminal() bool {
	return s.State == StateCompleted || s.State == StateFailed
}

// ErrManagementUnavailable is returned by Client.Admin for providers without the
// management API.
var ErrManagementUnavailable = errors.New("runtime: provider has no management API")

// Client starts, signals, inspects and manages orchestrations through a Provider.
// It is safe for concurrent use and needs no running Runtime in its process.
type Client struct {
	p      provider.Provider
	notify *completions // set for a runtime's own client: wakes waiters without polling
}

// NewClient returns a client over p.
func NewClient(p provider.Provider) *Client { return &Client{p: p} }

func checkInstance(op, instance string) error {
	if instance == "" {
		return fmt.Errorf("%s: %w: empty instance id", op, provider.ErrInvalid)
	}
	return nil
}

// StartOrchestration starts instance running orchestration name with input, at the
// version the registry's policy picks. Starting an instance that exists changes
// nothing, so a retried start is safe.
func (c *Client) StartOrchestration(ctx context.Context, instance, name, input string) error {
	return c.StartOrchestrationWith(ctx, instance, name, input, StartOptions{})
}

// StartOrchestrationVersioned is StartOrchestration at an explicit version.
func (c *Client) StartOrchestrationVersioned(ctx context.Context, instance, name, version, input string) error {
	return c.StartOrchestrationWith(ctx, instance, name, input, StartOptions{Version: version})
}

// The start policies of StartOptions.IfExists (see provider.StartPolicy).
const (
	StartReturnExisting = provider.StartReturnExisting // the default: the start changes nothing
	StartRejectExisting = provider.StartRejectExisting // ErrInstanceExists
	StartAfterEnded     = provider.StartAfterEnded     // an ended instance starts afresh
)

// ErrInstanceExists is the error of a start its policy refused.
var ErrInstanceExists = provider.ErrInstanceExists

// ErrStartPolicyUnsupported is the error of a start whose policy the provider
// cannot apply atomically (it does not implement provider.InstanceStarter).
var ErrStartPolicyUnsupported = errors.New("runtime: the provider cannot apply this start policy")

// Limit bounds activities of one name, or orchestration starts, across every
// process sharing the provider's storage (see Client.SetActivityLimit).
type Limit = provider.Limit

// ErrLimitsUnsupported is the error of a limit the provider cannot enforce (it
// does not implement provider.Limiter).
var ErrLimitsUnsupported = errors.New("runtime: the provider cannot enforce limits")

// SetActivityLimit bounds the activities named name, in every process that shares
// the provider's storage: at most l.MaxInFlight execute at once and at most l.Rate
// begin per l.Per; the zero Limit removes the limit. The activities held back wait
// in the worker queue without holding a worker, so other activities run
// meanwhile. The limit is stored with the provider: it holds across restarts
// until it is changed.
func (c *Client) SetActivityLimit(ctx context.Context, name string, l Limit) error {
	const op = "set activity limit"
	if name == "" {
		return fmt.Errorf("%s: %w: empty activity name", op, provider.ErrInvalid)
	}
	lim, ok := c.p.(provider.Limiter)
	if !ok {
		return fmt.Errorf("%s %s: %w (%T)", op, clip(name, 256), ErrLimitsUnsupported, c.p)
	}
	if err := lim.SetActivityLimit(ctx, name, l); err != nil {
		return fmt.Errorf("%s %s: %w", op, clip(name, 256), err)
	}
	return nil
}

// SetStartLimit bounds orchestration starts (sub-orchestrations included), in every
// process that shares the provider's storage: at most l.MaxInFlight first turns run
// at once and at most l.Rate starts are taken per l.Per; the zero Limit removes the
// limit. Starts held back wait, in order, in the orchestrator queue; the turns of
// running instances are not limited.
func (c *Client) SetStartLimit(ctx context.Context, l Limit) error {
	const op = "set start limit"
	lim, ok := c.p.(provider.Limiter)
	if !ok {
		return fmt.Errorf("%s: %w (%T)", op, ErrLimitsUnsupported, c.p)
	}
	if err := lim.SetStartLimit(ctx, l); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// StartOptions tune StartOrchestrationWith. The zero value starts at the version
// the registry's policy picks, and a start of an instance that exists changes
// nothing.
type StartOptions struct {
	// Version is the orchestration version to run ("" = the registry's policy).
	Version string
	// IfExists says what happens when the instance exists, or its start is pending:
	// StartReturnExisting (default), StartRejectExisting (ErrInstanceExists), or
	// StartAfterEnded (an instance that completed or failed is deleted, with its
	// descendants, and started afresh; one that runs is ErrInstanceExists), as
	// Temporal's workflow-id reuse policies. The policy holds however starts race,
	// also from several processes.
	IfExists provider.StartPolicy
}

// StartOrchestrationWith starts instance running orchestration name with input, as
// o says.
func (c *Client) StartOrchestrationWith(ctx context.Context, instance, name, input string, o StartOptions) error {
	const op = "start orchestration"
	if err := checkInstance(op, instance); err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%s %s: %w: empty orchestration name", op, instance, provider.ErrInvalid)
	}
	item := provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: instance, ExecutionID: provider.InitialExecutionID,
		Name: name, Version: o.Version, Input: input, TraceParent: tracectx.Parent(ctx)}
	starter, ok := c.p.(provider.InstanceStarter)
	switch {
	case ok:
		if err := starter.StartInstance(ctx, item, o.IfExists); err != nil {
			return fmt.Errorf("%s %s: %w", op, instance, err)
		}
		return nil
	case o.IfExists != StartReturnExisting:
		return fmt.Errorf("%s %s: %w (%T)", op, instance, ErrStartPolicyUnsupported, c.p)
	}
	return c.enqueue(ctx, op, item)
}

// RaiseEvent delivers an external event to a WaitForEvent(name) of the instance that
// is waiting when the event arrives (the Nth live wait for name gets the Nth event).
// An event that arrives while nobody waits for it (before the orchestration reaches
// its wait, as right after StartOrchestration, or after its wait lost a Select) is
// dropped without an error. Raise it once the orchestration says it waits (a custom
// status set just before the wait, seen with WaitForStatusChange), or use
// EnqueueEvent, which keeps the message until the orchestration takes it.
func (c *Client) RaiseEvent(ctx context.Context, instance, name, data string) error {
	const op = "raise event"
	if err := checkInstance(op, instance); err != nil {
		return err
	}
	return c.enqueue(ctx, op, provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: instance, Name: name, Data: data})
}

// EnqueueEvent appends data to the instance's persistent FIFO queue called queue:
// Context.DequeueEvent(queue) takes the oldest message whenever it was sent, so a
// message queued before the orchestration waits is kept until it does (and carried
// into the next execution by ContinueAsNew). Messages for an instance that does not
// exist are dropped; one sent after StartOrchestration returned is not (the start is
// processed first).
func (c *Client) EnqueueEvent(ctx context.Context, instance, queue, data string) error {
	const op = "enqueue event"
	if err := checkInstance(op, instance); err != nil {
		return err
	}
	return c.enqueue(ctx, op, provider.WorkItem{Kind: provider.WorkQueueMessage, Instance: instance, Name: queue, Data: data})
}

// CancelInstance asks the instance to end: it fails with a Cancelled error, cancels
// its activities and cancels its sub-orchestrations. Cancelling an ended instance
// changes nothing.
func (c *Client) CancelInstance(ctx context.Context, instance, reason string) error {
	const op = "cancel instance"
	if err := checkInstance(op, instance); err != nil {
		return err
	}
	return c.enqueue(ctx, op, provider.WorkItem{Kind: provider.WorkCancelInstance, Instance: instance, Reason: reason})
}

func (c *Client) enqueue(ctx context.Context, op string, item provider.WorkItem) error {
	if err := c.p.EnqueueForOrchestrator(ctx, item, 0); err != nil {
		return fmt.Errorf("%s %s: %w", op, item.Instance, err)
	}
	return nil
}

// Status returns the instance's current status. An instance started but not run
// yet is Pending (see StatePending), NotFound on providers that cannot tell.
func (c *Client) Status(ctx context.Context, instance string) (OrchestrationStatus, error) {
	const op = "orchestration status"
	if err := checkInstance(op, instance); err != nil {
		return OrchestrationStatus{}, err
	}
	events, err := c.p.Read(ctx, instance)
	if err != nil {
		return OrchestrationStatus{}, fmt.Errorf("%s %s: %w", op, instance, err)
	}
	if len(events) == 0 {
		var st OrchestrationStatus
		if st, events, err = unstartedStatus(ctx, c.p, instance); err != nil {
			return OrchestrationStatus{}, fmt.Errorf("%s %s: %w", op, instance, err)
		}
		if len(events) == 0 {
			return st, nil
		}
	}
	st := OrchestrationStatus{State: StateRunning, ExecutionID: events[0].ExecutionID}
	if s := events[0]; s.Kind == provider.EventOrchestrationStarted {
		st.Name, st.Version = s.Name, s.Version
	}
	switch last := events[len(events)-1]; last.Kind {
	case provider.EventOrchestrationCompleted:
		st.State, st.Output = StateCompleted, last.Output
	case provider.EventOrchestrationFailed:
		st.State, st.Failure = StateFailed, last.Details
	}
	status, version, _, err := c.p.GetCustomStatus(ctx, instance, 0)
	if err != nil {
		return OrchestrationStatus{}, fmt.Errorf("%s %s: custom status: %w", op, instance, err)
	}
	st.CustomStatus, st.CustomStatusVersion = status, version
	return st, nil
}

// WaitForOrchestration waits until the instance completes or fails (or ctx ends)
// and returns its final status. Retryable provider errors are retried (see poll).
func (c *Client) WaitForOrchestration(ctx context.Context, instance string) (OrchestrationStatus, error) {
	return c.waitUntil(ctx, instance, "wait for orchestration", func(st OrchestrationStatus) (bool, error) {
		return st.Terminal(), nil
	})
}

// WaitForStatusChange waits until the instance's custom status version moves past
// lastSeen or the instance ends, and returns its status. Retryable provider errors
// are retried (see poll).
func (c *Client) WaitForStatusChange(ctx context.Context, instance string, lastSeen uint64) (OrchestrationStatus, error) {
	return c.waitUntil(ctx, instance, "wait for status change", func(OrchestrationStatus) (bool, error) {
		_, _, changed, err := c.p.GetCustomStatus(ctx, instance, lastSeen)
		return changed, err
	})
}

// waitUntil polls the status (or at once when this process's runtime ends an
// execution) until the instance ends or ready says so, and returns the last status
// it read.
func (c *Client) waitUntil(ctx context.Context, instance, op string, ready func(OrchestrationStatus) (bool, error)) (OrchestrationStatus, error) {
	if err := checkInstance(op, instance); err != nil {
		return OrchestrationStatus{}, err
	}
	var wake <-chan struct{}
	if c.notify != nil {
		var release func()
		wake, release = c.notify.watch(instance)
		defer release()
	}
	var last OrchestrationStatus
	err := c.poll(ctx, instance, wake, func() (bool, error) {
		st, err := c.Status(ctx, instance)
		if err != nil {
			return false, err
		}
		last = st
		if st.Terminal() {
			return true, nil
		}
		if done, err := ready(st); err != nil || !done {
			return false, err
		}
		// The status that made it ready, not the one before.
		if st, err = c.Status(ctx, instance); err != nil {
			return false, err
		}
		last = st
		return true, nil
	})
	if err != nil {
		return last, fmt.Errorf("%s %s: %w", op, instance, err)
	}
	return last, nil
}

// poll calls check until it reports done, waiting 5 ms doubling to 100 ms between
// calls, or less when wake fires or the provider reports a change of the instance
// (InstanceWatcher) or, without a watch, of its storage (ChangeNotifier: another
// process's commit). With a watch the wait doubles up to a second instead: the
// instance's own changes wake it, and the reads only catch a lost signal. A
// retryable provider error (IsRetryable) is retried like a check that is not done
// yet, so a wait rides out a provider's transient faults; any other error is
// returned at once. When ctx ends first, its error is returned, naming the last
// provider error seen.
func (c *Client) poll(ctx context.Context, instance string, wake <-chan struct{}, check func() (bool, error)) error {
	var lastErr error
	ended := func() error {
		if lastErr != nil {
			return fmt.Errorf("%w (last provider error: %s)", ctx.Err(), clip(lastErr.Error(), maxReasonBytes))
		}
		return ctx.Err()
	}
	notifier, _ := c.p.(provider.ChangeNotifier)
	watcher, _ := c.p.(provider.InstanceWatcher)
	stopWatch := func() {}
	defer func() { stopWatch() }()
	delay := 5 * time.Millisecond
	for {
		stopWatch() // the previous round's
		// Taken before the check: a change in between is not missed. A watch of the
		// instance makes a notice of every change of the storage needless.
		var changed, watched <-chan struct{}
		if watcher != nil {
			watched, stopWatch = watcher.WatchInstance(ctx, instance)
		}
		if notifier != nil && watched == nil {
			changed = notifier.Changed()
		}
		done, err := check()
		switch {
		case err == nil && done:
			return nil
		case err != nil && ctx.Err() != nil:
			if provider.IsRetryable(err) {
				lastErr = err
			}
			return ended() // a permanent error now is most likely ctx's own
		case err != nil && !provider.IsRetryable(err):
			return err
		case err != nil:
			lastErr = err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ended()
		case <-wake:
		case <-changed:
		case <-watched:
		case <-t.C:
		}
		t.Stop()
		maxDelay := 100 * time.Millisecond
		if watched != nil {
			maxDelay = time.Second
		}
		delay = min(delay*2, maxDelay)
	}
}

// KV returns key of the instance's KV state (ok is false when unset).
func (c *Client) KV(ctx context.Context, instance, key string) (string, bool, error) {
	v, ok, err := c.p.GetKVValue(ctx, instance, key)
	if err != nil {
		return "", false, fmt.Errorf("kv get %s/%s: %w", instance, key, err)
	}
	return v, ok, nil
}

// KVAll returns the instance's whole KV state.
func (c *Client) KVAll(ctx context.Context, instance string) (map[string]string, error) {
	m, err := c.p.GetKVAllValues(ctx, instance)
	if err != nil {
		return nil, fmt.Errorf("kv get all %s: %w", instance, err)
	}
	return m, nil
}

// WaitForKV waits until key is set in the instance's KV state and returns it.
// Retryable provider errors are retried (see poll).
func (c *Client) WaitForKV(ctx context.Context, instance, key string) (string, error) {
	var v string
	err := c.poll(ctx, instance, nil, func() (ok bool, err error) {
		v, ok, err = c.KV(ctx, instance, key)
		return ok, err
	})
	if err != nil {
		return "", fmt.Errorf("wait for kv %s/%s: %w", instance, key, err)
	}
	return v, nil
}

// Stats describes the instance's size (nil for an unknown instance).
func (c *Client) Stats(ctx context.Context, instance string) (*provider.SystemStats, error) {
	s, err := c.p.GetInstanceStats(ctx, instance)
	if err != nil {
		return nil, fmt.Errorf("instance stats %s: %w", instance, err)
	}
	return s, nil
}

// Admin returns the provider's management API: listing, inspection, deletion and
// pruning of instances.
func (c *Client) Admin() (provider.ProviderAdmin, error) {
	if m, ok := c.p.(provider.ManagedProvider); ok {
		return m.Management(), nil
	}
	return nil, ErrManagementUnavailable
}

// completions wakes waiters of instances whose executions this process ended.
type completions struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

func newCompletions() *completions { return &completions{waiters: map[string][]chan struct{}{}} }

func (c *completions) watch(instance string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.waiters[instance] = append(c.waiters[instance], ch)
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		ws := c.waiters[instance]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(c.waiters, instance)
		} else {
			c.waiters[instance] = ws
		}
	}
}

func (c *completions) done(instance string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.waiters[instance] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
