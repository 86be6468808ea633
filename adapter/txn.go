package adapter

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/memtx"
	"github.com/duroq/duroq/internal/pgdb"
	"github.com/duroq/duroq/internal/sqlitedb"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/mq"
	"github.com/jmoiron/sqlx"
)

// ErrNotComposable: the queue and the store cannot commit in one transaction.
var ErrNotComposable = errors.New("adapter: the queue and the event store do not share a transaction")

// txn is what one atomic commit may do across the queue and the store. Both
// implementations run every call inside the same underlying transaction.
type txn interface {
	lock(token string) (mq.LockInfo, error)
	dequeueMany(queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error)
	enqueue(msgs ...mq.Message) error
	ack(token string) error
	// ackMany acks tokens and says what each held (its lock, as lock says it).
	ackMany(tokens []string) ([]mq.LockInfo, error)
	remove(queue string, keys ...string) (int, error)
	removePrefix(queue, prefix string) (int, error)
	purgeKey(queue, routingKey string) (int, error)
	// setKeyAttrs sets the attribute of each of keys to attrs at the same index.
	setKeyAttrs(queue string, keys []string, attrs []*int64) error

	latestPartition(stream string) (int64, error)
	stream(stream string) (eventstore.StreamInfo, error)
	read(stream string, partition int64) ([]eventstore.Event, error)
	kvSnapshot(stream string) (map[string]eventstore.KVEntry, error)
	// readStates reads what stream, read (of the current partition) and kvSnapshot
	// say of each existing stream.
	readStates(streams []string) (map[string]*eventstore.StreamState, error)
	appendEvents(stream string, partition int64, events []eventstore.Event) error
	update(stream string, u eventstore.StreamUpdate) error
	// commitMany appends and updates each commit's stream, as appendEvents then
	// update would.
	commitMany(commits []eventstore.StreamCommit) error
	setCustomStatus(stream string, value *string) (int64, error)
	applyKV(stream string, partition int64, muts []eventstore.KVMutation) error
	listStreams(f eventstore.StreamFilter) ([]string, error)
	delete(streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error)
	deleteWhere(f eventstore.StreamFilter) (eventstore.DeleteResult, error)
	prune(stream string, o eventstore.PruneOptions) (eventstore.PruneResult, error)
	pruneWhere(f eventstore.StreamFilter, o eventstore.PruneOptions) (eventstore.PruneResult, error)
}

// binding runs functions in one transaction spanning the queue and the store.
type binding interface {
	run(ctx context.Context, fn func(tx txn) error) error
}

// bind finds how q and s commit together, or refuses the pair.
func bind(q mq.MessageQueue, s eventstore.EventStore) (binding, error) {
	switch q := q.(type) {
	case *mq.Memory:
		if s, ok := s.(*eventstore.Memory); ok && q.Domain() == s.Domain() {
			return memBinding{q: q, s: s}, nil
		}
	case sqlQueue:
		if s, ok := s.(sqlStore); ok && q.DB() == s.DB() {
			return sqlBinding{q: q, s: s, db: q.DB()}, nil
		}
	}
	return nil, ErrNotComposable
}

// memBinding: an in-memory queue and store sharing one memtx domain.
type memBinding struct {
	q *mq.Memory
	s *eventstore.Memory
}

func (b memBinding) run(ctx context.Context, fn func(tx txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.q.Domain().Run(func(tx *memtx.Tx) error { return fn(memTxn{b: b, ctx: ctx, tx: tx}) })
}

type memTxn struct {
	b   memBinding
	ctx context.Context
	tx  *memtx.Tx
}

func (t memTxn) lock(token string) (mq.LockInfo, error) { return t.b.q.LockTx(t.tx, token) }
func (t memTxn) dequeueMany(queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	return dequeueEach(max, func() (*mq.Batch, error) {
		b, _, err := t.b.q.DequeueTx(t.tx, queue, opts)
		return b, err
	})
}

// dequeueEach collects up to max batches from one-at-a-time dequeues.
func dequeueEach(max int, dequeue func() (*mq.Batch, error)) ([]*mq.Batch, error) {
	var batches []*mq.Batch
	for len(batches) < max {
		b, err := dequeue()
		if err != nil || b == nil {
			return batches, err
		}
		batches = append(batches, b)
	}
	return batches, nil
}
func (t memTxn) enqueue(msgs ...mq.Message) error { return t.b.q.EnqueueTx(t.tx, msgs...) }
func (t memTxn) ack(token string) error           { return t.b.q.AckTx(t.tx, token) }
func (t memTxn) ackMany(tokens []string) ([]mq.LockInfo, error) {
	return ackEach(t, tokens)
}

// ackEach acks tokens one at a time, each after reading its lock.
func ackEach(t txn, tokens []string) ([]mq.LockInfo, error) {
	infos := make([]mq.LockInfo, len(tokens))
	for i, token := range tokens {
		info, err := t.lock(token)
		if err != nil {
			return nil, err
		}
		if err := t.ack(token); err != nil {
			return nil, err
		}
		infos[i] = info
	}
	return infos, nil
}
func (t memTxn) remove(queue string, keys ...string) (int, error) {
	return t.b.q.RemoveTx(t.tx, queue, keys...)
}
func (t memTxn) removePrefix(queue, prefix string) (int, error) {
	return t.b.q.RemovePrefixTx(t.tx, queue, prefix)
}
func (t memTxn) purgeKey(queue, routingKey string) (int, error) {
	return t.b.q.PurgeKeyTx(t.tx, queue, routingKey)
}
func (t memTxn) setKeyAttrs(queue string, keys []string, attrs []*int64) error {
	return setEachKeyAttr(keys, attrs, func(key string, attr *int64) error { return t.b.q.SetKeyAttrTx(t.tx, queue, key, attr) })
}

// setEachKeyAttr sets the attributes of keys one at a time.
func setEachKeyAttr(keys []string, attrs []*int64, set func(key string, attr *int64) error) error {
	for i, key := range keys {
		if err := set(key, attrs[i]); err != nil {
			return err
		}
	}
	return nil
}
func (t memTxn) latestPartition(stream string) (int64, error) {
	return t.b.s.LatestPartitionTx(t.ctx, t.tx, stream)
}
func (t memTxn) stream(stream string) (eventstore.StreamInfo, error) {
	return t.b.s.StreamTx(t.ctx, t.tx, stream)
}
func (t memTxn) read(stream string, partition int64) ([]eventstore.Event, error) {
	return t.b.s.ReadTx(t.ctx, t.tx, stream, partition)
}
func (t memTxn) kvSnapshot(stream string) (map[string]eventstore.KVEntry, error) {
	return t.b.s.KVSnapshotTx(t.ctx, t.tx, stream)
}
func (t memTxn) readStates(streams []string) (map[string]*eventstore.StreamState, error) {
	return readStatesEach(t, streams)
}
func (t memTxn) appendEvents(stream string, partition int64, events []eventstore.Event) error {
	return t.b.s.AppendTx(t.ctx, t.tx, stream, partition, events)
}
func (t memTxn) commitMany(commits []eventstore.StreamCommit) error { return commitEach(t, commits) }

// commitEach commits stream by stream.
func commitEach(t txn, commits []eventstore.StreamCommit) error {
	for _, c := range commits {
		if err := t.appendEvents(c.Stream, c.Update.Partition, c.Events); err != nil {
			return err
		}
		if err := t.update(c.Stream, c.Update); err != nil {
			return err
		}
	}
	return nil
}
func (t memTxn) update(stream string, u eventstore.StreamUpdate) error {
	return t.b.s.UpdateTx(t.ctx, t.tx, stream, u)
}
func (t memTxn) setCustomStatus(stream string, value *string) (int64, error) {
	return t.b.s.SetCustomStatusTx(t.ctx, t.tx, stream, value)
}
func (t memTxn) applyKV(stream string, partition int64, muts []eventstore.KVMutation) error {
	return t.b.s.ApplyKVTx(t.ctx, t.tx, stream, partition, muts)
}
func (t memTxn) listStreams(f eventstore.StreamFilter) ([]string, error) {
	return t.b.s.ListStreamsTx(t.ctx, t.tx, f)
}
func (t memTxn) delete(streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error) {
	return t.b.s.DeleteTx(t.ctx, t.tx, streams, o)
}
func (t memTxn) deleteWhere(f eventstore.StreamFilter) (eventstore.DeleteResult, error) {
	return t.b.s.DeleteWhereTx(t.ctx, t.tx, f)
}
func (t memTxn) prune(stream string, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	return t.b.s.PruneTx(t.ctx, t.tx, stream, o)
}
func (t memTxn) pruneWhere(f eventstore.StreamFilter, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	return t.b.s.PruneWhereTx(t.ctx, t.tx, f, o)
}

// sqlQueue is a SQL queue backend with transactional twins (mq/sqlite, mq/postgres).
type sqlQueue interface {
	DB() *sqlx.DB
	Notify(queue string)
	LockTx(ctx context.Context, tx *sqlx.Tx, token string) (mq.LockInfo, error)
	DequeueTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions) (*mq.Batch, time.Time, error)
	EnqueueTx(ctx context.Context, tx *sqlx.Tx, msgs ...mq.Message) error
	AckTx(ctx context.Context, tx *sqlx.Tx, token string, then ...mq.Message) error
	RemoveTx(ctx context.Context, tx *sqlx.Tx, queue string, keys ...string) (int, error)
	RemovePrefixTx(ctx context.Context, tx *sqlx.Tx, queue, prefix string) (int, error)
	PurgeKeyTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string) (int, error)
	SetKeyAttrTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string, attr *int64) error
}

// sqlStore is a SQL event store backend with transactional twins
// (eventstore/sqlite, eventstore/postgres).
type sqlStore interface {
	DB() *sqlx.DB
	LatestPartitionTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, error)
	StreamTx(ctx context.Context, q sqlx.QueryerContext, stream string) (eventstore.StreamInfo, error)
	ReadTx(ctx context.Context, q sqlx.QueryerContext, stream string, partition int64) ([]eventstore.Event, error)
	KVSnapshotTx(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error)
	ReadStatesTx(ctx context.Context, q sqlx.QueryerContext, streams []string) (map[string]*eventstore.StreamState, error)
	AppendTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error
	UpdateTx(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate) error
	SetCustomStatusTx(ctx context.Context, tx *sqlx.Tx, stream string, value *string) (int64, error)
	ApplyKVTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, muts []eventstore.KVMutation) error
	ListStreamsTx(ctx context.Context, q sqlx.QueryerContext, f eventstore.StreamFilter) ([]string, error)
	DeleteTx(ctx context.Context, tx *sqlx.Tx, streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error)
	DeleteWhereTx(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter) (eventstore.DeleteResult, error)
	PruneTx(ctx context.Context, tx *sqlx.Tx, stream string, o eventstore.PruneOptions) (eventstore.PruneResult, error)
	PruneWhereTx(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter, o eventstore.PruneOptions) (eventstore.PruneResult, error)
}

// sqlBinding: a SQL queue and store on one database.
type sqlBinding struct {
	q  sqlQueue
	s  sqlStore
	db *sqlx.DB
}

// maxTxAttempts bounds the retries of a transaction that failed with a transient
// conflict (a PostgreSQL serialization failure or deadlock).
const maxTxAttempts = 5

func (b sqlBinding) run(ctx context.Context, fn func(tx txn) error) error {
	var t *sqlTxn
	attempt := func(tx *sqlx.Tx) error {
		t = &sqlTxn{b: b, ctx: ctx, tx: tx}
		return fn(t)
	}
	var err error
	if sqlitedb.IsSQLite(b.db) {
		// SQLite has one writer: queue on the process's write lock.
		err = sqlitedb.WriterOf(b.db).Run(ctx, attempt)
	} else {
		for i := 1; ; i++ {
			err = sqltx.Run(ctx, b.db, attempt)
			if err == nil || i == maxTxAttempts || !pgdb.IsRetryable(err) || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
		}
	}
	if err == nil {
		for _, queue := range t.touched {
			b.q.Notify(queue)
		}
	}
	return err
}

type sqlTxn struct {
	b       sqlBinding
	ctx     context.Context
	tx      *sqlx.Tx
	touched []string // queues to wake after commit
}

func (t *sqlTxn) touch(queue string) { t.touched = append(t.touched, queue) }

// lock also marks the lock's queue for a wake-up: the caller is about to release it.
func (t *sqlTxn) lock(token string) (mq.LockInfo, error) {
	li, err := t.b.q.LockTx(t.ctx, t.tx, token)
	if err == nil {
		t.touch(li.Queue)
	}
	return li, err
}
func (t *sqlTxn) enqueue(msgs ...mq.Message) error {
	for _, m := range msgs {
		t.touch(m.Queue)
	}
	return t.b.q.EnqueueTx(t.ctx, t.tx, msgs...)
}
func (t *sqlTxn) ack(token string) error { return t.b.q.AckTx(t.ctx, t.tx, token) }

// ackMany also marks the locks' queues for a wake-up: the acks released them.
func (t *sqlTxn) ackMany(tokens []string) ([]mq.LockInfo, error) {
	q, ok := t.b.q.(manyAcker)
	if !ok {
		return ackEach(t, tokens)
	}
	infos, err := q.AckManyTx(t.ctx, t.tx, tokens)
	for _, info := range infos {
		if !slices.Contains(t.touched, info.Queue) {
			t.touch(info.Queue)
		}
	}
	return infos, err
}

// manyAcker is a SQL queue that acks many tokens in a few set-based statements and
// says what each held (mq/sqlite, mq/postgres).
type manyAcker interface {
	AckManyTx(ctx context.Context, tx *sqlx.Tx, tokens []string) ([]mq.LockInfo, error)
}

func (t *sqlTxn) dequeueMany(queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	if q, ok := t.b.q.(manyDequeuer); ok {
		return q.DequeueManyTx(t.ctx, t.tx, queue, opts, max)
	}
	return dequeueEach(max, func() (*mq.Batch, error) {
		b, _, err := t.b.q.DequeueTx(t.ctx, t.tx, queue, opts)
		return b, err
	})
}

// manyDequeuer is a SQL queue that locks many batches in a few set-based statements
// (mq/sqlite, mq/postgres).
type manyDequeuer interface {
	DequeueManyTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error)
}

func (t *sqlTxn) remove(queue string, keys ...string) (int, error) {
	t.touch(queue)
	return t.b.q.RemoveTx(t.ctx, t.tx, queue, keys...)
}
func (t *sqlTxn) removePrefix(queue, prefix string) (int, error) {
	t.touch(queue)
	return t.b.q.RemovePrefixTx(t.ctx, t.tx, queue, prefix)
}
func (t *sqlTxn) purgeKey(queue, routingKey string) (int, error) {
	return t.b.q.PurgeKeyTx(t.ctx, t.tx, queue, routingKey)
}
func (t *sqlTxn) setKeyAttrs(queue string, keys []string, attrs []*int64) error {
	if q, ok := t.b.q.(keyAttrsSetter); ok {
		return q.SetKeyAttrsTx(t.ctx, t.tx, queue, keys, attrs)
	}
	return setEachKeyAttr(keys, attrs, func(key string, attr *int64) error { return t.b.q.SetKeyAttrTx(t.ctx, t.tx, queue, key, attr) })
}

// keyAttrsSetter is a SQL queue that sets many keys' attributes in one statement
// (mq/postgres).
type keyAttrsSetter interface {
	SetKeyAttrsTx(ctx context.Context, tx *sqlx.Tx, queue string, keys []string, attrs []*int64) error
}

func (t *sqlTxn) latestPartition(stream string) (int64, error) {
	return t.b.s.LatestPartitionTx(t.ctx, t.tx, stream)
}
func (t *sqlTxn) stream(stream string) (eventstore.StreamInfo, error) {
	return t.b.s.StreamTx(t.ctx, t.tx, stream)
}
func (t *sqlTxn) read(stream string, partition int64) ([]eventstore.Event, error) {
	return t.b.s.ReadTx(t.ctx, t.tx, stream, partition)
}
func (t *sqlTxn) kvSnapshot(stream string) (map[string]eventstore.KVEntry, error) {
	return t.b.s.KVSnapshotTx(t.ctx, t.tx, stream)
}
func (t *sqlTxn) readStates(streams []string) (map[string]*eventstore.StreamState, error) {
	return t.b.s.ReadStatesTx(t.ctx, t.tx, streams)
}
func (t *sqlTxn) appendEvents(stream string, partition int64, events []eventstore.Event) error {
	return t.b.s.AppendTx(t.ctx, t.tx, stream, partition, events)
}
func (t *sqlTxn) commitMany(commits []eventstore.StreamCommit) error {
	if s, ok := t.b.s.(manyCommitter); ok {
		return s.CommitManyTx(t.ctx, t.tx, commits)
	}
	return commitEach(t, commits)
}

// manyCommitter is a SQL store that commits many streams in a few set-based
// statements (eventstore/sqlite, eventstore/postgres).
type manyCommitter interface {
	CommitManyTx(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit) error
}

func (t *sqlTxn) update(stream string, u eventstore.StreamUpdate) error {
	return t.b.s.UpdateTx(t.ctx, t.tx, stream, u)
}
func (t *sqlTxn) setCustomStatus(stream string, value *string) (int64, error) {
	return t.b.s.SetCustomStatusTx(t.ctx, t.tx, stream, value)
}
func (t *sqlTxn) applyKV(stream string, partition int64, muts []eventstore.KVMutation) error {
	return t.b.s.ApplyKVTx(t.ctx, t.tx, stream, partition, muts)
}
func (t *sqlTxn) listStreams(f eventstore.StreamFilter) ([]string, error) {
	return t.b.s.ListStreamsTx(t.ctx, t.tx, f)
}
func (t *sqlTxn) delete(streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error) {
	return t.b.s.DeleteTx(t.ctx, t.tx, streams, o)
}
func (t *sqlTxn) deleteWhere(f eventstore.StreamFilter) (eventstore.DeleteResult, error) {
	return t.b.s.DeleteWhereTx(t.ctx, t.tx, f)
}
func (t *sqlTxn) prune(stream string, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	return t.b.s.PruneTx(t.ctx, t.tx, stream, o)
}
func (t *sqlTxn) pruneWhere(f eventstore.StreamFilter, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	return t.b.s.PruneWhereTx(t.ctx, t.tx, f, o)
}
