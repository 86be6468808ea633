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
	"github.com/duroq/duroq/runtime"
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

// Provider implements runtime.Provider and runtime.ProviderAdmin over a queue and an
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
}

var (
	_ runtime.Provider        = (*Provider)(nil)
	_ runtime.ManagedProvider = (*Provider)(nil)
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
	return &Provider{q: q, s: s, b: b, orchQ: o.OrchestratorQueue, workQ: o.WorkerQueue, now: o.Now,
		orphan: o.OrphanRetry, orphanTTL: o.OrphanTTL, log: o.Logger}, nil
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
	err := errors.Join(p.q.Close(), p.s.Close())
	if p.db != nil {
		err = errors.Join(err, p.db.Close())
	}
	return err
}

var _ runtime.ChangeNotifier = (*Provider)(nil)

// Changed implements runtime.ChangeNotifier with the queue's notice of other
// processes' commits (mq/sqlite watches the database file); nil, that is no notice,
// for queues without it.
func (p *Provider) Changed() <-chan struct{} {
	if c, ok := p.q.(interface{ Changed() <-chan struct{} }); ok {
		return c.Changed()
	}
	return nil
}

// Management implements runtime.ManagedProvider.
func (p *Provider) Management() runtime.ProviderAdmin { return p }

// ---- encoding between the runtime's types and the primitives' ----

// workKey is the message key of an activity: unique per scheduled activity, and
// prefixed by the instance (see instancePrefix) so deleting an instance finds all its
// worker items. The length prefix keeps "a/1" and "a" + "/1..." apart.
func workKey(instance string, execution, id uint64) string {
	return fmt.Sprintf("%s%d/%d", instancePrefix(instance), execution, id)
}

func instancePrefix(instance string) string { return fmt.Sprintf("%d:%s/", len(instance), instance) }

func (p *Provider) orchMessage(item *runtime.WorkItem, delay time.Duration) (mq.Message, error) {
	payload, err := runtime.MarshalWorkItem(item)
	if err != nil {
		return mq.Message{}, err
	}
	target := item.TargetInstance()
	if target == "" {
		return mq.Message{}, fmt.Errorf("%w: %s work item names no instance", runtime.ErrInvalid, item.Kind)
	}
	return mq.Message{Queue: p.orchQ, RoutingKey: target, Payload: payload, Delay: max(delay, 0)}, nil
}

func (p *Provider) workMessage(item *runtime.WorkItem) (mq.Message, error) {
	if item.Kind != runtime.WorkActivityExecute {
		return mq.Message{}, fmt.Errorf("%w: the worker queue takes ActivityExecute items, not %s", runtime.ErrInvalid, item.Kind)
	}
	payload, err := runtime.MarshalWorkItem(item)
	if err != nil {
		return mq.Message{}, err
	}
	return mq.Message{Queue: p.workQ, Payload: payload, Tag: item.Tag, Session: item.SessionID,
		Key: workKey(item.Instance, item.ExecutionID, item.ID)}, nil
}

func toStored(events []runtime.Event) ([]eventstore.Event, error) {
	out := make([]eventstore.Event, len(events))
	for i := range events {
		data, err := runtime.MarshalEvent(&events[i])
		if err != nil {
			return nil, err
		}
		out[i] = eventstore.Event{Seq: int64(events[i].EventID), Type: string(events[i].Kind), Data: data}
	}
	return out, nil
}

func fromStored(events []eventstore.Event) ([]runtime.Event, error) {
	out := make([]runtime.Event, len(events))
	for i, e := range events {
		ev, err := runtime.UnmarshalEvent(e.Data)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", e.Seq, err)
		}
		out[i] = ev
	}
	return out, nil
}

func attrRanges(f *runtime.CapabilityFilter) *mq.AttrFilter {
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

func tagFilter(f runtime.TagFilter) mq.TagFilter {
	switch f.Mode {
	case runtime.TagOnly:
		return mq.Tags(f.Tags...)
	case runtime.TagDefaultAnd:
		return mq.DefaultAnd(f.Tags...)
	case runtime.TagAny:
		return mq.AnyTag()
	case runtime.TagNone:
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
	var pe *runtime.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	for _, m := range []struct{ from, to error }{
		{mq.ErrLockLost, runtime.ErrLockLost},
		{mq.ErrClosed, runtime.ErrClosed},
		{eventstore.ErrClosed, runtime.ErrClosed},
		{eventstore.ErrConflict, runtime.ErrDuplicateEvent},
		{eventstore.ErrNotFound, runtime.ErrNotFound},
		{eventstore.ErrCorrupt, runtime.ErrCorruptHistory},
		{mq.ErrInvalid, runtime.ErrInvalid},
		{mq.ErrPayloadTooLarge, runtime.ErrInvalid},
		{mq.ErrDuplicateKey, runtime.ErrInvalid},
		{eventstore.ErrInvalid, runtime.ErrInvalid},
		{eventstore.ErrTooLarge, runtime.ErrInvalid},
		{eventstore.ErrRunning, runtime.ErrInvalid},
		{eventstore.ErrNotRoot, runtime.ErrInvalid},
	} {
		if errors.Is(err, m.from) {
			if errors.Is(err, m.to) {
				return runtime.Permanent(op, err)
			}
			return runtime.Permanent(op, fmt.Errorf("%w: %w", m.to, err))
		}
	}
	if sqltx.DBClosed(err) {
		return runtime.Permanent(op, fmt.Errorf("%w: %w", runtime.ErrClosed, err))
	}
	for _, permanent := range []error{runtime.ErrLockLost, runtime.ErrInvalid, runtime.ErrNotFound, runtime.ErrDuplicateEvent,
		runtime.ErrCorruptHistory, runtime.ErrClosed, mq.ErrCorrupt, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, permanent) {
			return runtime.Permanent(op, err)
		}
	}
	return runtime.Retryable(op, err)
}

// WriteTransactions counts the queue and store transactions that changed state
// (fetches that returned work, acks, abandons, renewals, enqueues), for load reports.
func (p *Provider) WriteTransactions() uint64 { return p.writes.Load() }

// wrote classifies err from op and counts the transaction when it committed.
func (p *Provider) wrote(op string, err error) error {
	if err == nil {
		p.writes.Add(1)
	}
	return classify(op, err)
}
