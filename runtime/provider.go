package runtime

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
	LockTimeout Duration
	PollTimeout Duration
	// Session, when nil, fetches only items without a session; when set, also items of
	// sessions the owner holds or can claim.
	Session *SessionFetchConfig
	Tags    TagFilter
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
	AbandonWorkItem(ctx context.Context, token string, delay Duration, ignoreAttempt bool) error
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
	// GetKVValue and GetKVAllValues read the live KV view (current execution's writes
	// over the stored state).
	GetKVValue(ctx context.Context, instance, key string) (value string, ok bool, err error)
	GetKVAllValues(ctx context.Context, instance string) (map[string]string, error)
	// GetInstanceStats describes the instance (nil for an unknown instance).
	GetInstanceStats(ctx context.Context, instance string) (*SystemStats, error)

	Close() error
}

// ManagedProvider is implemented by providers that offer the management API.
type ManagedProvider interface {
	Provider
	Management() ProviderAdmin
}

// ProviderAdmin lists, inspects, deletes and prunes instances.
type ProviderAdmin interface {
	ListInstances(ctx context.Context) ([]string, error)
	ListInstancesByStatus(ctx context.Context, status string) ([]string, error)
	ListExecutions(ctx context.Context, instance string) ([]uint64, error)
	ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]Event, error)
	ReadHistory(ctx context.Context, instance string) ([]Event, error)
	LatestExecutionID(ctx context.Context, instance string) (uint64, error)
	GetInstanceInfo(ctx context.Context, instance string) (InstanceInfo, error)
	GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (ExecutionInfo, error)
	GetSystemMetrics(ctx context.Context) (SystemMetrics, error)
	GetQueueDepths(ctx context.Context) (QueueDepths, error)
	ListChildren(ctx context.Context, instance string) ([]string, error)
	// GetParentID returns "" for a root; an unknown instance is an error.
	GetParentID(ctx context.Context, instance string) (string, error)
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
	PruneExecutions(ctx context.Context, instance string, opts PruneOptions) (PruneResult, error)
	PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, opts PruneOptions) (PruneResult, error)
}

// InstanceInfo describes an instance.
type InstanceInfo struct {
	InstanceID           string
	OrchestrationName    string
	OrchestrationVersion string
	CurrentExecutionID   uint64
	Status               string
	Output               *string
	ParentInstanceID     string
	CreatedAt, UpdatedAt time.Time
}

// ExecutionInfo describes one execution.
type ExecutionInfo struct {
	ExecutionID uint64
	Status      string
	Output      *string
	StartedAt   time.Time
	CompletedAt time.Time // zero while running
	EventCount  uint64
}

// SystemMetrics counts what the provider stores.
type SystemMetrics struct {
	TotalInstances, TotalExecutions                       uint64
	RunningInstances, CompletedInstances, FailedInstances uint64
	TotalEvents                                           uint64
}

// QueueDepths counts pending (unacked) messages per queue.
type QueueDepths struct {
	OrchestratorQueue, WorkerQueue, TimerQueue uint64
}

// InstanceTree is an instance and all its descendants.
type InstanceTree struct {
	RootID string
	AllIDs []string // the root first
}

// DeleteInstanceResult counts what a deletion removed.
type DeleteInstanceResult struct {
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

// TurnAck is one turn of a batched AckOrchestrationItems.
type TurnAck struct {
	Token string
	Ack   OrchestrationAck
}

// WorkAck is one item of a batched AckWorkItems.
type WorkAck struct {
	Token      string
	Completion *WorkItem
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
