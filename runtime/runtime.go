package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/runtime/provider"
)

// Version is this runtime's version. New executions are pinned to the version of the
// runtime that starts them, and a runtime only runs executions whose pin its
// capability filter accepts (by default 0.0.0 up to its own version).
const Version = "0.2.0"

// Options configure a Runtime. Zero values take the documented defaults, which are
// duroxide's unless noted.
type Options struct {
	// OrchestrationConcurrency is the number of orchestration dispatchers, each
	// running the turns of the instances it fetched (default 2). 4 moved more on a
	// large backlog in one process, but less with two worker processes sharing the
	// instances (duroq bench seq -processes 2 on PostgreSQL: 283-292 orch/s against
	// 350-383), whose fetches then contend for the same instances.
	OrchestrationConcurrency int
	// OrchestrationBatch is how many instances a dispatcher fetches, and commits, per
	// transaction when the provider is a BatchProvider (default 64; 1 turns batching
	// off). A batch holds what is ready, up to this many: a light load still runs
	// turn by turn.
	OrchestrationBatch int
	// WorkerConcurrency is the number of activities run at once (default 128: an
	// activity is a goroutine, and free slots let one transaction fetch, and one
	// commit ack, many activities; duroxide's default is 2, Temporal's 1,000). On
	// duroq bench seq, 32 slots moved ~30% more than 16, and 64 slots with batches
	// of 64 instances moved 11% more than 32 and 32 on SQLite, 25-35% more on
	// PostgreSQL, where a statement's fixed cost is higher; 128 slots moved 5-25%
	// more than 64 on PostgreSQL, in one process and in two.
	WorkerConcurrency int

	// OrchestratorLockTimeout is how long a turn holds its instance without renewal
	// (default 5 s); it is renewed while the turn runs.
	OrchestratorLockTimeout time.Duration
	// WorkerLockTimeout is how long an activity holds its item without renewal
	// (default 30 s); it is renewed while the activity runs.
	WorkerLockTimeout time.Duration
	// LockRenewalBuffer is how long before expiry a lock of 15 s or more is renewed
	// (default 5 s); shorter locks are renewed at half their timeout.
	LockRenewalBuffer time.Duration

	// PollTimeout is how long a fetch may wait for work in the provider (default
	// 30 s); providers that wake on new work answer at once when it arrives.
	PollTimeout time.Duration
	// MinPollInterval is the shortest cycle of a dispatcher that found no work
	// (default 100 ms), so providers that return at once are not spun on.
	MinPollInterval time.Duration

	// MaxAttempts is the poison threshold: a message fetched more often fails its
	// orchestration or activity with a Poison error (default 10).
	MaxAttempts uint32
	// UnregisteredBackoff is the first delay before a message naming code this
	// runtime does not have is offered again (default 1 s, doubling per attempt up
	// to 60 s), so a newer node of a rolling deployment can take it.
	UnregisteredBackoff time.Duration
	// ActivityCancellationGrace is how long a cancelled activity may keep running
	// before the worker gives up on it (default 10 s).
	ActivityCancellationGrace time.Duration
	// DrainTimeout is how long Run lets in-flight turns and activities finish after
	// shutdown is requested before cancelling them (default 10 s). Run returns at most
	// about a second later, whatever user code does.
	DrainTimeout time.Duration
	// TurnTimeout bounds one turn of orchestration code, the time from delivering
	// its messages to the code's next wait (default 10 s, Temporal's workflow task
	// timeout). Orchestration code must not block: a turn that overruns is given up
	// without holding up the other instances fetched with it, and its instance is
	// offered again with backoff; after MaxAttempts the instance fails with an error
	// saying its code blocked. The goroutine of the blocked code cannot be stopped:
	// it is left behind and logged.
	TurnTimeout time.Duration

	// RuntimeVersion is the version this runtime pins new executions to (default
	// Version); it must be a "MAJOR.MINOR.PATCH" semantic version.
	RuntimeVersion string
	// SupportedVersions is the range of pins this runtime runs (default 0.0.0 up to
	// RuntimeVersion); executions pinned outside it are left to other runtimes.
	// Providers may honour only its first range.
	SupportedVersions *provider.CapabilityFilter

	// WorkerTags selects the activities this runtime's workers run (default: untagged
	// ones only).
	WorkerTags provider.TagFilter
	// WorkerNodeID is the stable identity this runtime claims sessions with; set it
	// to keep sessions across restarts (default: random per runtime).
	WorkerNodeID string
	// MaxSessionsPerRuntime caps the sessions this runtime serves at once (default 10).
	MaxSessionsPerRuntime int
	// SessionLockTimeout is the lease of a session (default 30 s), renewed while the
	// session is active.
	SessionLockTimeout time.Duration
	// SessionIdleTimeout ends an inactive session (default 5 min): a session none
	// of whose activities was fetched, renewed or acked for this long is no longer
	// renewed, so its lease lapses and another runtime may claim it. It must exceed
	// the worker lock renewal interval, or New fails.
	SessionIdleTimeout time.Duration
	// SessionCleanupInterval is how often lapsed sessions without pending
	// activities are swept from the provider (default 5 min).
	SessionCleanupInterval time.Duration

	// StateCacheSize is how many running executions keep their replayed state (the
	// suspended orchestration code) between turns, so that a turn whose fetched
	// history is exactly what the previous one left runs only its new messages
	// instead of replaying the whole history (default 1024; the least recently used
	// is evicted; negative disables the cache). Each entry holds its execution's
	// history and a parked goroutine.
	StateCacheSize int

	// OnExecutionEnded, when set, is called after this runtime commits a turn that
	// ends an execution (status Completed, Failed or ContinuedAsNew), for metrics and
	// load drivers. It runs on the dispatcher: it must be quick and must not block.
	OnExecutionEnded func(instance string, executionID uint64, status string)

	// Logger receives the runtime's and the orchestrations' logs (default: none).
	Logger *slog.Logger
	// TracerProvider receives a span for every orchestration turn and activity
	// execution, each a child of the span that caused it: the turn that scheduled the
	// activity or started the execution, and for a new instance the span in the
	// context given to Client.StartOrchestration. Trace context travels in work
	// items and history, so a trace follows an orchestration across processes.
	// Default: none (no span is made, nothing is stamped: no cost).
	TracerProvider trace.TracerProvider
	// MeterProvider receives the runtime's metrics (default: none, no cost):
	// duroq.turn.duration (s; by duroq.orchestration.name,
	// duroq.orchestration.status after the turn, duroq.turn.resumed: whether the
	// turn resumed cached state instead of replaying), duroq.activity.duration (s;
	// by duroq.activity.name, duroq.activity.outcome), duroq.execution.duration (s,
	// from an execution's first turn to the turn that ended it; by name and final
	// status), duroq.poison (work given up after MaxAttempts; by duroq.poison.type),
	// duroq.lock.lost (by duroq.work: orchestration, activity) and, when the
	// provider has a management API, the gauges duroq.queue.depth (by duroq.queue:
	// orchestrator, worker, timer) and duroq.queue.oldest_ready.age (s since the
	// longest-waiting ready message of the orchestrator or worker queue became
	// visible; 0 when none is ready).
	MeterProvider metric.MeterProvider
	// Now is the clock that stamps events and schedules timers (default time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.OrchestrationConcurrency <= 0 {
		o.OrchestrationConcurrency = 2
	}
	if o.WorkerConcurrency <= 0 {
		o.WorkerConcurrency = 128
	}
	if o.OrchestrationBatch <= 0 {
		o.OrchestrationBatch = 64
	}
	def(&o.OrchestratorLockTimeout, 5*time.Second)
	def(&o.WorkerLockTimeout, 30*time.Second)
	def(&o.LockRenewalBuffer, 5*time.Second)
	def(&o.PollTimeout, 30*time.Second)
	def(&o.MinPollInterval, 100*time.Millisecond)
	def(&o.UnregisteredBackoff, time.Second)
	def(&o.ActivityCancellationGrace, 10*time.Second)
	def(&o.DrainTimeout, 10*time.Second)
	def(&o.TurnTimeout, 10*time.Second)
	def(&o.SessionLockTimeout, 30*time.Second)
	def(&o.SessionIdleTimeout, 5*time.Minute)
	def(&o.SessionCleanupInterval, 5*time.Minute)
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 10
	}
	if o.MaxSessionsPerRuntime <= 0 {
		o.MaxSessionsPerRuntime = 10
	}
	if o.StateCacheSize == 0 {
		o.StateCacheSize = defaultStateCacheSize
	}
	if o.RuntimeVersion == "" {
		o.RuntimeVersion = Version
	}
	v, err := provider.ParseSemVer(o.RuntimeVersion)
	if err != nil {
		return o, fmt.Errorf("%w: runtime version: %v", provider.ErrInvalid, err)
	}
	if o.SupportedVersions == nil {
		o.SupportedVersions = &provider.CapabilityFilter{SupportedVersions: []provider.SemVerRange{{Max: v}}}
	}
	if o.WorkerNodeID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.WorkerNodeID = "work-" + hex.EncodeToString(b[:])
	}
	if o.SessionIdleTimeout <= renewEvery(o.WorkerLockTimeout, o.LockRenewalBuffer) {
		return o, fmt.Errorf("%w: session idle timeout %s must exceed the worker lock renewal interval %s",
			provider.ErrInvalid, o.SessionIdleTimeout, renewEvery(o.WorkerLockTimeout, o.LockRenewalBuffer))
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// renewEvery is the renewal interval of a lock of timeout: buffer before expiry for
// long locks, half the timeout for short ones.
func renewEvery(timeout, buffer time.Duration) time.Duration {
	if timeout >= 15*time.Second && buffer < timeout {
		return timeout - buffer
	}
	return max(timeout/2, time.Millisecond)
}

// Runtime runs orchestrations and activities from a Provider: orchestration
// dispatchers replay turns, worker dispatchers run activities, and a session manager
// keeps this node's sessions. Several runtimes (processes) may share one provider.
type Runtime struct {
	p       provider.Provider
	reg     *Registry
	opts    Options
	log     *slog.Logger
	tracer  trace.Tracer // nil without Options.TracerProvider
	metrics *metrics     // nil without Options.MeterProvider

	mu         sync.Mutex
	running    bool
	stop       context.CancelFunc // stops fetching (drain)
	fatal      error              // why the runtime stopped itself (Run returns it)
	finished   chan struct{}
	turns      sync.WaitGroup // batches whose slow turns are awaited apart from their dispatcher
	activities sync.Map       // *WorkItemLease → *slog.Logger: the activities running

	sessions sessionTracker
	notify   *completions
	states   *stateCache // nil when disabled
}

// New returns a runtime over p running reg's code. Start it with Run.
func New(p provider.Provider, reg *Registry, opts Options) (*Runtime, error) {
	if p == nil || reg == nil {
		return nil, fmt.Errorf("%w: runtime.New needs a provider and a registry", provider.ErrInvalid)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Runtime{p: p, reg: reg, opts: o, log: o.Logger, tracer: newTracer(o.TracerProvider), metrics: newMetrics(o.MeterProvider), finished: make(chan struct{}),
		sessions: sessionTracker{inFlight: map[string]int{}}, notify: newCompletions(), states: newStateCache(o.StateCacheSize)}, nil
}

// ErrRunning is returned by Run when the runtime already ran.
var ErrRunning = errors.New("runtime: already started")

// Run dispatches work until ctx is cancelled or Shutdown is called, then stops
// fetching, lets in-flight turns and activities finish for up to DrainTimeout,
// cancels what is left and returns within about a second more (user code that
// ignores cancellation is left running and logged). A provider that is closed or
// fails permanently stops the runtime: Run then returns that error. A runtime runs
// once.
func (r *Runtime) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running || r.stop != nil {
		r.mu.Unlock()
		return ErrRunning
	}
	r.running = true
	fetchCtx, stop := context.WithCancel(ctx)
	r.stop = stop
	r.mu.Unlock()
	defer close(r.finished)
	defer stop()
	defer r.metrics.observeDepths(r.p, r.log)()

	// Work runs on its own context so that shutdown drains it instead of killing it.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	var wg sync.WaitGroup
	for i := 0; i < r.opts.OrchestrationConcurrency; i++ {
		wg.Go(func() { r.orchestrationLoop(fetchCtx, workCtx) })
	}
	if r.opts.WorkerTags.Mode != provider.TagNone {
		wg.Go(func() { r.workers(fetchCtx, workCtx) })
		wg.Go(func() { r.sessionManager(fetchCtx) })
	}
	r.log.Info("duroq runtime started", "version", r.opts.RuntimeVersion, "orchestrations", r.opts.OrchestrationConcurrency,
		"workers", r.opts.WorkerConcurrency, "node", r.opts.WorkerNodeID)

	<-fetchCtx.Done()
	drained := make(chan struct{})
	go func() { wg.Wait(); r.turns.Wait(); close(drained) }() // no dispatcher adds turns once wg is done
	select {
	case <-drained:
		r.states.close() // no dispatcher runs any more
	case <-time.After(r.opts.DrainTimeout):
		r.log.Warn("drain timeout: cancelling in-flight work", "timeout", r.opts.DrainTimeout)
		cancelWork()
		select {
		case <-drained:
			r.states.close()
		case <-time.After(stopBound):
			// Only user code that ignores its context holds a dispatcher this long
			// (a turn given up is logged with its instance when it is).
			r.activities.Range(func(_, log any) bool {
				log.(*slog.Logger).Warn("activity still running as the runtime stops: it ignores its context; its goroutine is left running")
				return true
			})
			r.log.Warn("runtime stopped with work still running", "waited", stopBound)
		}
	}
	r.mu.Lock()
	err := r.fatal
	r.mu.Unlock()
	if err != nil {
		r.log.Error("duroq runtime stopped", "err", err)
		return err
	}
	r.log.Info("duroq runtime stopped")
	return nil
}

// stopBound is how long Run waits for cancelled work before it returns anyway.
const stopBound = time.Second

// stopWith stops the runtime because of err, which Run then returns.
func (r *Runtime) stopWith(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	stop := r.stop
	r.mu.Unlock()
	stop()
}

// fetchFailed handles a failed fetch of a dispatcher, its failures-th in a row: a
// closed provider, or one failing permanently maxPermanentFetchFailures times in a
// row, stops the runtime; otherwise the dispatcher pauses (fetchBackoff). It
// reports whether the dispatcher goes on.
func (r *Runtime) fetchFailed(ctx context.Context, what string, err error, failures int) bool {
	if errors.Is(err, provider.ErrClosed) || !provider.IsRetryable(err) && failures >= maxPermanentFetchFailures {
		r.stopWith(fmt.Errorf("runtime: %s: %w", what, err))
		return false
	}
	r.log.Warn(what, "err", err, "failures", failures)
	return sleep(ctx, fetchBackoff(err, failures))
}

// maxPermanentFetchFailures is how many fetches in a row may fail with a permanent
// error before the runtime stops.
const maxPermanentFetchFailures = 5

// Shutdown asks Run to stop and waits until it returned or ctx is done.
func (r *Runtime) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	stop, running := r.stop, r.running
	r.mu.Unlock()
	if !running {
		return nil
	}
	stop()
	select {
	case <-r.finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("runtime shutdown: %w", ctx.Err())
	}
}

// Client returns a client over the same provider that learns of completions this
// runtime commits without polling for them.
func (r *Runtime) Client() *Client {
	c := NewClient(r.p)
	c.notify = r.notify
	return c
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fetchBackoff is the pause after the failures-th failed fetch in a row: 5 ms
// doubling to 2 s for retryable errors (a transient fault costs little), 500 ms for
// others.
func fetchBackoff(err error, failures int) time.Duration {
	if !provider.IsRetryable(err) {
		return 500 * time.Millisecond
	}
	return min(5*time.Millisecond<<min(max(failures-1, 0), 9), 2*time.Second)
}

// retryDelay is how long a message that could not be processed here (its code is
// not registered, or it blocked) waits before it is offered again:
// UnregisteredBackoff doubling per attempt (exponent capped at 6), at most 60 s.
func (r *Runtime) retryDelay(attempt uint32) time.Duration {
	exp := min(max(int(attempt)-1, 0), 6)
	return min(r.opts.UnregisteredBackoff<<exp, 60*time.Second)
}

// renewLock renews a lock every interval until stop is closed; lost is called once
// if the lock is lost for good.
func renewLock(ctx context.Context, every time.Duration, renew func(context.Context) error, lost func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := renew(ctx); err != nil && ctx.Err() == nil && !provider.IsRetryable(err) {
					lost(err)
					return
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// pollPause keeps a dispatcher that found no work from cycling faster than
// MinPollInterval.
func (r *Runtime) pollPause(ctx context.Context, started time.Time) {
	sleep(ctx, r.opts.MinPollInterval-time.Since(started))
}
