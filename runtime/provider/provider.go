package provider

import (
	"context"
	"time"
)

// Duration is time.Duration, named here so the contract reads as its own.
type Duration = time.Duration

// FetchOptions tune FetchOrchestrationItem.
type FetchOptions struct {
	LockTimeout Duration // how long the instance stays locked without a renewal
	PollTimeout Duration // how long a long-polling provider may wait for work; 0 = return at once
	// Filter, when set, skips instances whose current execution is pinned to a version
	// outside its ranges, before locking them or reading their history.
	Filter *CapabilityFilter
}

// WorkFetchOptions tune FetchWorkItem.
type WorkFetchOptions struct {
	LockTimeout Duration // how long the item stays locked without a renewal
	PollTimeout Duration // how long a long-polling provider may wait for work; 0 = return at once
	// Session, when nil, fetches only items without a session; when set, also items of
	// sessions the owner holds or can claim.
	Session *SessionFetchConfig
	// Tags selects the items by their tag; the zero value fetches untagged items
	// only.
	Tags TagFilter
}

// Provider is the storage contract the runtime runs on: two peek-lock queues
// (orchestrator, worker) and an append-only history per execution. The runtime
// computes every event, id and status; a provider stores what it is given.
//
// Implementations MUST be safe for concurrent use. Errors SHOULD be *ProviderError so
// the runtime can tell retryable from permanent failures (see IsRetryable).
type Provider interface {
	// FetchOrchestrationItem locks the oldest visible instance that is not locked
	// (passing opts.Filter) with all its visible messages, and returns them with the
	// current execution's history. It returns (nil, nil) when there is no work.
	FetchOrchestrationItem(ctx context.Context, opts FetchOptions) (*OrchestrationItem, error)
	// AckOrchestrationItem commits a turn atomically: history delta, metadata, custom
	// status and KV (from the delta's events), worker and orchestrator enqueues,
	// cancellation of activities (after the inserts), deletion of exactly the fetched
	// messages and release of the lock. On any failure nothing is applied and the lock
	// stays held.
	AckOrchestrationItem(ctx context.Context, token string, ack OrchestrationAck) error
	// AbandonOrchestrationItem releases the lock; the messages become visible after
	// delay. ignoreAttempt undoes the fetch's attempt count.
	AbandonOrchestrationItem(ctx context.Context, token string, delay Duration, ignoreAttempt bool) error
	// RenewOrchestrationItemLock extends a live lock; it fails on a lost one.
	RenewOrchestrationItemLock(ctx context.Context, token string, extend Duration) error

	// FetchWorkItem locks the oldest visible worker item that passes opts.
	FetchWorkItem(ctx context.Context, opts WorkFetchOptions) (*WorkItemLease, error)
	// AckWorkItem deletes the item and enqueues completion (if any) for its
	// orchestration atomically. It fails when the lock lapsed or the item was
	// cancelled (removed), and then changes nothing.
	AckWorkItem(ctx context.Context, token string, completion *WorkItem) error
	// AbandonWorkItem releases the item's lock; it becomes visible again after delay.
	// ignoreAttempt undoes the fetch's attempt count (never below zero). A lost lock
	// fails it.
	AbandonWorkItem(ctx context.Context, token string, delay Duration, ignoreAttempt bool) error
	// RenewWorkItemLock extends a live lock to extend from now; it fails on a lost
	// one (lapsed, or the item was cancelled). A renewal counts as activity of the
	// item's session.
	RenewWorkItemLock(ctx context.Context, token string, extend Duration) error
	// RenewSessionLock extends the live, non-idle sessions of owners; returns how many.
	RenewSessionLock(ctx context.Context, owners []string, extend, idleTimeout Duration) (int, error)
	// CleanupOrphanedSessions forgets lapsed sessions without pending items.
	CleanupOrphanedSessions(ctx context.Context, idleTimeout Duration) (int, error)

	// EnqueueForOrchestrator adds item to the orchestrator queue of its target
	// instance, visible after delay. It MUST NOT create the instance.
	EnqueueForOrchestrator(ctx context.Context, item WorkItem, delay Duration) error
	// EnqueueForWorker adds an ActivityExecute item to the worker queue.
	EnqueueForWorker(ctx context.Context, item WorkItem) error

	// Read returns the latest execution's history (empty for an unknown instance).
	Read(ctx context.Context, instance string) ([]Event, error)
	// ReadWithExecution returns one execution's history.
	ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]Event, error)
	// AppendWithExecution appends events to an execution (tests and fault injection);
	// it never overwrites.
	AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []Event) error

	// GetCustomStatus returns the custom status when its version is above lastSeen.
	GetCustomStatus(ctx context.Context, instance string, lastSeen uint64) (status *string, version uint64, changed bool, err error)
	// GetKVValue reads a key of the live KV view (the current execution's writes over
	// the stored state); ok is false when the key or the instance does not exist.
	GetKVValue(ctx context.Context, instance, key string) (value string, ok bool, err error)
	// GetKVAllValues reads the whole live KV view, as GetKVValue reads one key
	// (empty for an unknown instance).
	GetKVAllValues(ctx context.Context, instance string) (map[string]string, error)
	// GetInstanceStats describes the instance (nil for an unknown instance).
	GetInstanceStats(ctx context.Context, instance string) (*SystemStats, error)

	// Close releases the provider's resources; every later call fails with
	// ErrClosed. Stored state stays (for durable providers).
	Close() error
}

// ManagedProvider is implemented by providers that offer the management API.
type ManagedProvider interface {
	Provider
	// Management returns the provider's management API (Client.Admin returns it).
	Management() ProviderAdmin
}

// ProviderAdmin lists, inspects, deletes and prunes instances.
type ProviderAdmin interface {
	// ListInstances returns the ids of every stored instance.
	ListInstances(ctx context.Context) ([]string, error)
	// ListInstancesByStatus returns the ids of the instances whose current
	// execution has status (StatusRunning, StatusCompleted, ...).
	ListInstancesByStatus(ctx context.Context, status string) ([]string, error)
	// ListInstancePage returns one page of the instances q selects, in ascending id
	// order, described as GetInstanceInfo would: a page costs the same however many
	// instances are stored. Pass the page's Next as the next query's After to go on;
	// an instance created or deleted meanwhile appears or disappears, none is listed
	// twice. A bad query (a negative Limit, an oversized field) is ErrInvalid.
	ListInstancePage(ctx context.Context, q InstanceQuery) (InstancePage, error)
	// ListExecutions returns the instance's execution ids in ascending order (empty
	// for an unknown instance).
	ListExecutions(ctx context.Context, instance string) ([]uint64, error)
	// ReadHistoryWithExecutionID returns one execution's history, as
	// Provider.ReadWithExecution.
	ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]Event, error)
	// ReadHistory returns the latest execution's history, as Provider.Read.
	ReadHistory(ctx context.Context, instance string) ([]Event, error)
	// LatestExecutionID returns the instance's current execution; an unknown
	// instance is an error (ErrNotFound).
	LatestExecutionID(ctx context.Context, instance string) (uint64, error)
	// GetInstanceInfo describes an instance; an unknown instance is an error
	// (ErrNotFound).
	GetInstanceInfo(ctx context.Context, instance string) (InstanceInfo, error)
	// GetExecutionInfo describes one execution of an instance; an unknown instance
	// or execution is an error (ErrNotFound).
	GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (ExecutionInfo, error)
	// GetSystemMetrics counts what the provider stores.
	GetSystemMetrics(ctx context.Context) (SystemMetrics, error)
	// GetQueueDepths counts the messages pending in each queue.
	GetQueueDepths(ctx context.Context) (QueueDepths, error)
	// ListChildren returns the ids of the instance's sub-orchestrations (empty for
	// an unknown instance or one without children).
	ListChildren(ctx context.Context, instance string) ([]string, error)
	// GetParentID returns "" for a root; an unknown instance is an error.
	GetParentID(ctx context.Context, instance string) (string, error)
	// GetInstanceTree returns the instance and all its descendants, breadth first.
	GetInstanceTree(ctx context.Context, instance string) (InstanceTree, error)
	// DeleteInstance deletes a root instance and its descendants with their queue
	// messages. It refuses a running tree unless force, and a sub-orchestration.
	DeleteInstance(ctx context.Context, instance string, force bool) (DeleteInstanceResult, error)
	// DeleteInstancesAtomic deletes exactly ids (all or nothing), refusing to orphan a
	// child not in ids.
	DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error)
	// DeleteInstanceBulk deletes terminal root instances matching filter, with their
	// descendants; running ones are skipped.
	DeleteInstanceBulk(ctx context.Context, filter InstanceFilter) (DeleteInstanceResult, error)
	// PruneExecutions deletes old executions of an instance (history and
	// metadata) as opts selects; the current execution and running ones stay, KV
	// state is untouched, and running instances are pruned too.
	PruneExecutions(ctx context.Context, instance string, opts PruneOptions) (PruneResult, error)
	// PruneExecutionsBulk is PruneExecutions for every instance filter selects,
	// running ones included, atomically.
	PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, opts PruneOptions) (PruneResult, error)
}

// InstanceInfo describes an instance.
type InstanceInfo struct {
	InstanceID           string    // the instance's id
	OrchestrationName    string    // the orchestration's name, recorded by each execution's first turn
	OrchestrationVersion string    // the version the current execution runs
	CurrentExecutionID   uint64    // the latest execution (1 for the first)
	Status               string    // the current execution's status (StatusRunning, StatusCompleted, ...)
	Output               *string   // the current execution's output; nil while it runs
	ParentInstanceID     string    // "" for a root instance
	CreatedAt, UpdatedAt time.Time // when the instance was first stored, and last written to
}

// Page sizes of ListInstancePage.
const (
	DefaultPageSize = 100  // InstanceQuery.Limit 0
	MaxPageSize     = 1000 // a larger Limit is lowered to it
)

// InstanceQuery selects instances for ListInstancePage; every condition set must
// hold.
type InstanceQuery struct {
	Status        string    // the current execution's status (StatusRunning, StatusCompleted, ...); "" any
	Orchestration string    // the orchestration's name; "" any
	IDPrefix      string    // ids that start with this; "" any
	Parent        string    // sub-orchestrations of this instance; "" any
	RootsOnly     bool      // only instances without a parent
	CreatedAfter  time.Time // created at or after this; zero: any
	CreatedBefore time.Time // created before this; zero: any
	UpdatedAfter  time.Time // last written at or after this; zero: any
	UpdatedBefore time.Time // last written before this; zero: any
	After         string    // the paging cursor: the Next of the previous page; "" from the start
	Limit         int       // at most this many (0: DefaultPageSize; at most MaxPageSize)
}

// InstancePage is one page of ListInstancePage.
type InstancePage struct {
	Instances []InstanceInfo // in ascending id order
	Next      string         // the After of the next page; "" when no instance follows
}

// ExecutionInfo describes one execution.
type ExecutionInfo struct {
	ExecutionID uint64    // the execution's id (1 for the first)
	Status      string    // StatusRunning until the execution ends
	Output      *string   // its result, failure message or next input; nil while running
	StartedAt   time.Time // when its first turn was stored
	CompletedAt time.Time // zero while running
	EventCount  uint64    // events in its history
}

// SystemMetrics counts what the provider stores.
type SystemMetrics struct {
	TotalInstances, TotalExecutions                       uint64 // stored instances, and their stored executions
	RunningInstances, CompletedInstances, FailedInstances uint64 // instances by the status of their current execution
	TotalEvents                                           uint64 // stored events, of every execution
}

// QueueDepths counts pending (unacked) messages per queue.
type QueueDepths struct {
	// OrchestratorQueue and WorkerQueue count each queue's messages, locked and
	// delayed ones included; TimerQueue counts the orchestrator messages not visible
	// yet (timers, delayed retries), which OrchestratorQueue includes.
	OrchestratorQueue, WorkerQueue, TimerQueue uint64
	// OrchestratorOldestReady and WorkerOldestReady are when the ready message of
	// each queue that has waited longest became visible (zero when none is ready,
	// or the provider does not know): the time since is how far the dispatchers are
	// behind.
	OrchestratorOldestReady, WorkerOldestReady time.Time
}

// InstanceTree is an instance and all its descendants.
type InstanceTree struct {
	RootID string   // the instance the tree was asked for
	AllIDs []string // the root first
}

// DeleteInstanceResult counts what a deletion removed.
type DeleteInstanceResult struct {
	// InstancesDeleted counts descendants too; QueueMessagesDeleted counts the
	// deleted instances' orchestrator and worker messages.
	InstancesDeleted, ExecutionsDeleted, EventsDeleted, QueueMessagesDeleted uint64
}

// InstanceFilter selects instances for bulk operations; criteria are ANDed.
type InstanceFilter struct {
	InstanceIDs     []string  // nil: any
	CompletedBefore time.Time // zero: any
	Limit           int       // 0: no limit
}

// PruneOptions select executions to prune; the current execution and running ones
// are never pruned.
type PruneOptions struct {
	KeepLast        int       // 0 and 1 both keep only the current execution
	CompletedBefore time.Time // zero: any
}

// PruneResult counts what a prune removed.
type PruneResult struct {
	// InstancesProcessed counts the instances examined, pruned or not.
	InstancesProcessed, ExecutionsDeleted, EventsDeleted uint64
}

// BatchProvider is implemented by providers that fetch and commit several items in
// one transaction. The runtime uses it when present: a turn or an activity then costs
// a share of a transaction instead of one each.
type BatchProvider interface {
	Provider
	// FetchOrchestrationItems locks up to max instances, each as
	// FetchOrchestrationItem locks one; when none is ready it waits like
	// FetchOrchestrationItem and may return fewer.
	FetchOrchestrationItems(ctx context.Context, opts FetchOptions, max int) ([]*OrchestrationItem, error)
	// AckOrchestrationItems commits several turns atomically: all of them or, on any
	// failure, none (the caller then commits them one by one to learn which failed).
	AckOrchestrationItems(ctx context.Context, acks []TurnAck) error
	// FetchWorkItems locks up to max worker items, each as FetchWorkItem locks one.
	FetchWorkItems(ctx context.Context, opts WorkFetchOptions, max int) ([]*WorkItemLease, error)
	// AckWorkItems acks several work items with their completions atomically: all or
	// none.
	AckWorkItems(ctx context.Context, acks []WorkAck) error
}

// StartPolicy says what a start of an instance that exists does (Temporal's
// workflow-id reuse policies, for duroq's instance ids).
type StartPolicy uint8

// The start policies. An instance exists once a start of it is pending (enqueued,
// its first turn not yet committed) and until it is deleted.
const (
	// StartReturnExisting: the start changes nothing and succeeds, so a retried
	// start is safe (the default, and what EnqueueForOrchestrator does).
	StartReturnExisting StartPolicy = iota
	// StartRejectExisting: the start fails with ErrInstanceExists.
	StartRejectExisting
	// StartAfterEnded: an instance whose current execution ended (completed,
	// failed) is deleted with its descendants, its queued messages and its KV, and
	// started afresh, atomically; while it runs or its start is pending the start
	// fails with ErrInstanceExists.
	StartAfterEnded
)

// InstanceStarter is implemented by providers that apply a StartPolicy atomically:
// no two starts with policies can both succeed for one new instance, however they
// race. Client.StartOrchestrationWith needs it for the policies other than
// StartReturnExisting.
type InstanceStarter interface {
	// StartInstance enqueues item, a StartOrchestration for the orchestrator queue,
	// as policy allows.
	StartInstance(ctx context.Context, item WorkItem, policy StartPolicy) error
}

// TurnAck is one turn of a batched AckOrchestrationItems.
type TurnAck struct {
	Token string           // the lock token of the fetched OrchestrationItem
	Ack   OrchestrationAck // what the turn commits, as AckOrchestrationItem takes it
}

// WorkAck is one item of a batched AckWorkItems.
type WorkAck struct {
	Token      string    // the lock token of the fetched WorkItemLease
	Completion *WorkItem // the reply for the orchestration, as AckWorkItem takes it (nil: none)
}

// ChangeNotifier is implemented by providers that can tell a waiting client that
// their storage changed, whoever changed it (another process included), so that
// Client waits see an instance end within milliseconds instead of at their next
// poll (up to 100 ms later).
type ChangeNotifier interface {
	// Changed returns a channel closed at the next change (nil: none will be
	// reported). Callers take it before reading the state they wait for.
	Changed() <-chan struct{}
}

// InstanceWatcher is implemented by providers that can tell a waiting client that
// one instance changed, whichever process committed the change: at least when its
// execution ended (or continued as new) or its custom status or KV state changed.
// A client waiting for one instance is then woken for that instance, instead of
// reading its state again at every poll or at every change of the whole storage
// (ChangeNotifier). Client waits still read now and then (at most every second),
// since a notice can be lost (a process that dies between its commit and its
// signal).
type InstanceWatcher interface {
	// WatchInstance returns a channel closed at the next such change of instance
	// (nil: none will be reported) and a function that ends the watch, to call once
	// the caller stops waiting. Callers take it before reading the state they
	// wait for.
	WatchInstance(ctx context.Context, instance string) (<-chan struct{}, func())
}

// PendingStartReader is implemented by providers that can show a start queued for
// an instance whose first turn has not committed yet. Client.Status uses it, only
// for an instance without history, to report StatePending instead of
// StateNotFound; without it such an instance reads NotFound until its first turn
// commits.
type PendingStartReader interface {
	// PendingStart describes the oldest start message queued for instance (ready,
	// delayed or locked by a runtime), without locking or changing anything. It
	// returns (nil, nil) when none is queued.
	PendingStart(ctx context.Context, instance string) (*PendingStart, error)
}

// PendingStart is a queued start of an instance that has not run yet.
type PendingStart struct {
	// Name and Version are what the start asked for (Version "" = whatever the
	// registry's policy picks).
	Name, Version string
	// Attempts is how many times a runtime took the start without committing it
	// (a live lock counts: a runtime is holding it now).
	Attempts int
	// LastError is why a runtime last gave it back, as recorded by
	// ReasonAbandoner ("" when none was given).
	LastError string
	// EnqueuedAt is when the start was queued.
	EnqueuedAt time.Time
}

// ReasonAbandoner is implemented by providers that can record why an orchestration
// item was given back. The runtime uses it when present to say why a turn was
// postponed (for example, an orchestration this node does not have), which
// PendingStartReader then reports.
type ReasonAbandoner interface {
	// AbandonOrchestrationItemWithReason is AbandonOrchestrationItem that also
	// records reason on the item's messages as their last failure. With
	// ignoreAttempt the release is not a failure and nothing is recorded. A provider
	// may truncate a long reason.
	AbandonOrchestrationItemWithReason(ctx context.Context, token string, delay Duration, ignoreAttempt bool, reason string) error
}

// Limit bounds a kind of work across every process that shares a provider's
// storage (see Limiter). The zero Limit means no limit.
type Limit struct {
	// MaxInFlight is the most items running at once (activities executing, first
	// turns of orchestrations). Zero means no bound.
	MaxInFlight int
	// Rate is how many items may begin per Per, as a token bucket holding at most
	// Rate tokens (a burst of Rate). Zero means no bound.
	Rate int
	// Per is the interval of Rate: required with a Rate.
	Per time.Duration
}

// Limiter is implemented by providers that enforce limits in their storage, so
// that every process sharing it counts against the same limit.
type Limiter interface {
	// SetActivityLimit sets the limit of the activities named name (the zero Limit
	// removes it): at most MaxInFlight execute at once, at most Rate begin per
	// Per. The others wait in the worker queue, in order, without holding a worker.
	SetActivityLimit(ctx context.Context, name string, l Limit) error
	// SetStartLimit sets the limit of orchestration starts (sub-orchestrations
	// included): at most MaxInFlight first turns at once, at most Rate per Per.
	SetStartLimit(ctx context.Context, l Limit) error
}
