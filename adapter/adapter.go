package adapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/txn"
)

// Options tune New. The zero value gives the documented defaults.
type Options struct {
	// OrchestratorQueue and WorkerQueue name the two queues (defaults "orchestrator"
	// and "worker"); several runtimes can share a database under different names.
	OrchestratorQueue, WorkerQueue string
	// Now is the clock of timer visibility (default time.Now).
	Now func() time.Time
	// OrphanRetry is how long a batch of messages for an instance that does not exist
	// (and that no message in the batch would create) waits before it is offered
	// again. Default 1s.
	OrphanRetry time.Duration
	// OrphanTTL is how long such messages (an event raised or a cancellation sent
	// for an instance that was never started, a completion racing ahead of a start)
	// wait for their instance to exist: when the newest of them is older, they are
	// dropped with a warning instead of being offered again forever. Default 1 h.
	OrphanTTL time.Duration
	// Logger receives warnings (dropped orphan messages); nil is silent.
	Logger *slog.Logger
}

// Provider implements provider.Provider and provider.ProviderAdmin over a queue and an
// event store that commit together.
type Provider struct {
	q         mq.MessageQueue
	s         eventstore.EventStore
	b         binding
	orchQ     string
	workQ     string
	now       func() time.Time
	orphan    time.Duration
	orphanTTL time.Duration
	log       *slog.Logger
	db        io.Closer // the database Open was given, closed last by Close
	writes    atomic.Uint64
	// rounds is q when its concurrent Enqueue calls share transactions that it
	// counts (see WriteTransactions); nil otherwise.
	rounds enqueueRounder
	// signals is q when it carries signals between processes (see WatchInstance);
	// nil otherwise.
	signals signaller
	// changes is q when it reports changes of its storage (see Changed); nil
	// otherwise.
	changes changeReporter
	// feed watches instances for clients when q reports changes of the storage
	// but carries no signals (see WatchInstance); nil otherwise.
	feed *instanceFeed
}

var (
	_ provider.Provider        = (*Provider)(nil)
	_ provider.ManagedProvider = (*Provider)(nil)
)

// New returns the provider over q and s. They must be able to commit in one
// transaction — an mq.TxQueue and an eventstore.TxStore whose Database methods
// return equal values, such as an mq.Memory and an eventstore.Memory given one
// txn.MemoryDatabase, or the mq/sqlite queue and eventstore/sqlite store on one
// database — otherwise New fails with ErrNotComposable: a turn's history append and
// its queue writes must never be applied apart. Close closes q and s.
func New(q mq.MessageQueue, s eventstore.EventStore, o Options) (*Provider, error) {
	b, err := bind(q, s)
	if err != nil {
		return nil, fmt.Errorf("adapter: new (%T + %T): %w", q, s, err)
	}
	if o.OrchestratorQueue == "" {
		o.OrchestratorQueue = "orchestrator"
	}
	if o.WorkerQueue == "" {
		o.WorkerQueue = "worker"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OrphanRetry <= 0 {
		o.OrphanRetry = time.Second
	}
	if o.OrphanTTL <= 0 {
		o.OrphanTTL = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	rounds, _ := q.(enqueueRounder)
	signals, _ := q.(signaller)
	changes, _ := q.(changeReporter)
	p := &Provider{q: q, s: s, b: b, orchQ: o.OrchestratorQueue, workQ: o.WorkerQueue, now: o.Now,
		orphan: o.OrphanRetry, orphanTTL: o.OrphanTTL, log: o.Logger, rounds: rounds, signals: signals, changes: changes}
	if changes != nil && signals == nil {
		p.feed = newInstanceFeed(s, changes.Changed)
	}
	return p, nil
}

// Migrator is a queue or a store whose tables must be created or upgraded before
// use.
type Migrator interface {
	// Migrate creates or upgrades the tables; it is idempotent and safe when several
	// processes call it at once.
	Migrate(ctx context.Context) error
}

// Open is New for a pair on a database the provider owns, such as one SQLite file
// or one PostgreSQL pool opened for it (sqliteprovider, pgprovider): it migrates q
// and s (those that are Migrators), and Close closes db after them. On failure it
// closes q, s and db.
func Open(ctx context.Context, db io.Closer, q mq.MessageQueue, s eventstore.EventStore, o Options) (*Provider, error) {
	var err error
	for _, m := range []any{q, s} {
		if m, ok := m.(Migrator); ok {
			err = errors.Join(err, m.Migrate(ctx))
		}
	}
	var p *Provider
	if err == nil {
		p, err = New(q, s, o)
	}
	if err != nil {
		_ = errors.Join(q.Close(), s.Close(), db.Close()) // the open error matters more
		return nil, fmt.Errorf("adapter: open: %w", err)
	}
	p.db = db
	return p, nil
}

// NewMemory returns a provider over a fresh in-memory queue and store sharing one
// database: for tests and for running without persistence.
func NewMemory(o Options) *Provider {
	d := txn.NewMemoryDatabase()
	p, err := New(mq.NewMemory(mq.MemoryOptions{Database: d, Now: o.Now}),
		eventstore.NewMemory(eventstore.MemoryOptions{Database: d, Now: o.Now}), o)
	if err != nil {
		panic(err) // unreachable: the pair shares its database by construction
	}
	return p
}

// Queue exposes the message queue the provider is built on (both its queues live
// there).
func (p *Provider) Queue() mq.MessageQueue { return p.q }

// Store exposes the event store the provider keeps histories, metadata and KV
// state in.
func (p *Provider) Store() eventstore.EventStore { return p.s }

// Close closes the queue and the store, then the database Open was given.
func (p *Provider) Close() error {
	if p.feed != nil {
		p.feed.close()
	}
	err := errors.Join(p.q.Close(), p.s.Close())
	if p.db != nil {
		err = errors.Join(err, p.db.Close())
	}
	return err
}

var _ provider.ChangeNotifier = (*Provider)(nil)

// Changed implements provider.ChangeNotifier with the queue's notice of other
// processes' commits (mq/sqlite watches the database file); nil, that is no notice,
// for queues without it.
func (p *Provider) Changed() <-chan struct{} {
	if p.changes != nil {
		return p.changes.Changed()
	}
	return nil
}

// changeReporter is a queue that reports changes of its storage, whoever made them
// (mq/sqlite: a watcher of the database file).
type changeReporter interface {
	Changed() <-chan struct{}
}

var _ provider.InstanceWatcher = (*Provider)(nil)

// signaller is a queue that carries named signals between the processes sharing
// its database (mq/postgres: a NOTIFY channel of the schema).
type signaller interface {
	Signal(names ...string)
	Watch(name string) (<-chan struct{}, func())
}

// WatchInstance implements provider.InstanceWatcher with the queue's signals, which
// every commit of a turn that ends an execution or changes its custom status or KV
// state sends, in whichever process it ran (mq/postgres). Over a queue that only
// reports changes of the whole storage (mq/sqlite), one read of the watched
// instances' state per change wakes the watchers of those that changed (see
// instanceFeed). Otherwise the channel is nil: no notice.
func (p *Provider) WatchInstance(ctx context.Context, instance string) (<-chan struct{}, func()) {
	if p.signals != nil {
		return p.signals.Watch(p.signalName(instance))
	}
	if p.feed != nil {
		return p.feed.watch(ctx, instance)
	}
	return nil, func() {}
}

// signalName is the signal of instance: named in the provider's orchestrator queue,
// so that runtimes sharing a database under other queue names do not wake each
// other's clients.
func (p *Provider) signalName(instance string) string { return p.orchQ + "/" + instance }

// Management implements provider.ManagedProvider.
func (p *Provider) Management() provider.ProviderAdmin { return p }

// ---- encoding between the runtime's types and the primitives' ----

// workKey is the message key of an activity: unique per scheduled activity, and
// prefixed by the instance (see instancePrefix) so deleting an instance finds all its
// worker items. The length prefix keeps "a/1" and "a" + "/1..." apart.
func workKey(instance string, execution, id uint64) string {
	return fmt.Sprintf("%s%d/%d", instancePrefix(instance), execution, id)
}

func instancePrefix(instance string) string { return fmt.Sprintf("%d:%s/", len(instance), instance) }

func (p *Provider) orchMessage(item *provider.WorkItem, delay time.Duration) (mq.Message, error) {
	payload, err := provider.MarshalWorkItem(item)
	if err != nil {
		return mq.Message{}, err
	}
	target := item.TargetInstance()
	if target == "" {
		return mq.Message{}, fmt.Errorf("%w: %s work item names no instance", provider.ErrInvalid, item.Kind)
	}
	m := mq.Message{Queue: p.orchQ, RoutingKey: target, Payload: payload, Delay: max(delay, 0)}
	if item.Kind == provider.WorkStartOrchestration {
		m.LimitGroup = startGroup
	}
	return m, nil
}

func (p *Provider) workMessage(item *provider.WorkItem) (mq.Message, error) {
	if item.Kind != provider.WorkActivityExecute {
		return mq.Message{}, fmt.Errorf("%w: the worker queue takes ActivityExecute items, not %s", provider.ErrInvalid, item.Kind)
	}
	payload, err := provider.MarshalWorkItem(item)
	if err != nil {
		return mq.Message{}, err
	}
	return mq.Message{Queue: p.workQ, Payload: payload, Tag: item.Tag, Session: item.SessionID,
		Key: workKey(item.Instance, item.ExecutionID, item.ID), LimitGroup: activityGroup(item.Name)}, nil
}

func toStored(events []provider.Event) ([]eventstore.Event, error) {
	out := make([]eventstore.Event, len(events))
	for i := range events {
		data, err := provider.MarshalEvent(&events[i])
		if err != nil {
			return nil, err
		}
		out[i] = eventstore.Event{Seq: int64(events[i].EventID), Type: string(events[i].Kind), Data: data}
	}
	return out, nil
}

func fromStored(events []eventstore.Event) ([]provider.Event, error) {
	out := make([]provider.Event, len(events))
	for i, e := range events {
		ev, err := provider.UnmarshalEvent(e.Data)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", e.Seq, err)
		}
		out[i] = ev
	}
	return out, nil
}

func attrRanges(f *provider.CapabilityFilter) *mq.AttrFilter {
	if f == nil {
		return nil
	}
	af := &mq.AttrFilter{}
	// Only the first range is honoured, as the contract allows ("phase 1").
	if len(f.SupportedVersions) > 0 {
		r := f.SupportedVersions[0]
		af.Ranges = []mq.AttrRange{{Min: r.Min.Ordinal(), Max: r.Max.Ordinal()}}
	}
	return af
}

func tagFilter(f provider.TagFilter) mq.TagFilter {
	switch f.Mode {
	case provider.TagOnly:
		return mq.Tags(f.Tags...)
	case provider.TagDefaultAnd:
		return mq.DefaultAnd(f.Tags...)
	case provider.TagAny:
		return mq.AnyTag()
	case provider.TagNone:
		return mq.NoTags()
	default:
		return mq.DefaultOnly()
	}
}

// classify turns a primitive's error into a provider error of op: contract
// violations are permanent, anything else (storage trouble) retryable.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *provider.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	for _, m := range []struct{ from, to error }{
		{mq.ErrLockLost, provider.ErrLockLost},
		{mq.ErrClosed, provider.ErrClosed},
		{eventstore.ErrClosed, provider.ErrClosed},
		{eventstore.ErrConflict, provider.ErrDuplicateEvent},
		{eventstore.ErrNotFound, provider.ErrNotFound},
		{eventstore.ErrCorrupt, provider.ErrCorruptHistory},
		{mq.ErrInvalid, provider.ErrInvalid},
		{mq.ErrPayloadTooLarge, provider.ErrInvalid},
		{mq.ErrDuplicateKey, provider.ErrInvalid},
		{eventstore.ErrInvalid, provider.ErrInvalid},
		{eventstore.ErrTooLarge, provider.ErrInvalid},
		{eventstore.ErrRunning, provider.ErrInvalid},
		{eventstore.ErrNotRoot, provider.ErrInvalid},
	} {
		if errors.Is(err, m.from) {
			if errors.Is(err, m.to) {
				return provider.Permanent(op, err)
			}
			return provider.Permanent(op, fmt.Errorf("%w: %w", m.to, err))
		}
	}
	if sqltx.DBClosed(err) {
		return provider.Permanent(op, fmt.Errorf("%w: %w", provider.ErrClosed, err))
	}
	for _, permanent := range []error{provider.ErrLockLost, provider.ErrInvalid, provider.ErrNotFound, provider.ErrDuplicateEvent,
		provider.ErrCorruptHistory, provider.ErrClosed, provider.ErrInstanceExists, mq.ErrCorrupt, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, permanent) {
			return provider.Permanent(op, err)
		}
	}
	return provider.Retryable(op, err)
}

// WriteTransactions counts the queue and store transactions that changed state
// (fetches that returned work, acks, abandons, renewals, enqueues), for load reports.
// Concurrent enqueues (starts, events) that share a commit count once when the
// queue says how many transactions its Enqueue calls made (enqueueRounder).
func (p *Provider) WriteTransactions() uint64 {
	if p.rounds != nil {
		return p.writes.Load() + uint64(p.rounds.EnqueueRounds())
	}
	return p.writes.Load()
}

// enqueueRounder is a queue whose concurrent Enqueue calls share transactions
// (mq/sqlite, mq/postgres).
type enqueueRounder interface {
	// EnqueueRounds reports how many transactions the queue's Enqueue calls made.
	EnqueueRounds() int64
}

// wrote classifies err from op and counts the transaction when it committed.
func (p *Provider) wrote(op string, err error) error {
	if err == nil {
		p.writes.Add(1)
	}
	return classify(op, err)
}

// enqueued is wrote for a MessageQueue.Enqueue call: a queue that counts its
// commits counts it (see WriteTransactions).
func (p *Provider) enqueued(op string, err error) error {
	if p.rounds != nil {
		return classify(op, err)
	}
	return p.wrote(op, err)
}
