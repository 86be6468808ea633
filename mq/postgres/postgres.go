package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/internal/groupcommit"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/mqsql"
	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/internal/wake"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/txn"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns this package's migration files, under "migrations/" and named
// NNNN_description.sql, for tools that show or apply them (duroq migrate).
func Migrations() fs.FS { return migrations }

// MigrationLine names this package's migrations in the shared duroq_migrations table.
const MigrationLine = "mq"

// Options tune Open and New. The zero value is usable.
type Options struct {
	// DB tunes the database Open creates (ignored by New).
	DB pgdb.Options
	// Now is the clock every timestamp is computed from (default time.Now). Processes
	// sharing a schema should have clocks in sync: lock expiry compares times written
	// by one process with the clock of another.
	Now func() time.Time
	// Logger receives debug records (retried transient failures) and warnings (the
	// LISTEN connection failing); nil is silent.
	Logger *slog.Logger
}

// Queue is a MessageQueue stored in PostgreSQL. It is safe for concurrent use, also by
// many processes sharing the schema.
type Queue struct {
	db      *sqlx.DB
	owned   bool
	now     func() time.Time
	log     *slog.Logger
	hub     wake.Hub
	closed  atomic.Bool
	retries atomic.Int64 // transient failures retried, for tests and debugging
	losses  atomic.Int64 // dequeue attempts lost to another consumer, likewise

	scanRatio atomic.Int64                     // rows per batch the last phased dequeue scan saw (see attemptMany)
	planStats pgsql.StatsGuard                 // keeps mq_messages and mq_keys planner statistics current (doc.go)
	enqueues  *groupcommit.Group[[]mq.Message] // groups concurrent Enqueue calls into shared transactions
	lane      *lane                            // the connection enqueue rounds run on
	// dedupSweep paces the deletion of expired deduplication ids.
	dedupSweep mqsql.Sweeper
	notes      notifier      // sends wake-ups to other processes after commits
	watchers   wake.Watchers // the watches of signals (see Watch), by signal key

	mu           sync.Mutex // guards the listener's start and stop
	stopListener context.CancelFunc
	listenerDone chan struct{}
	deaf         atomic.Bool // no listener can run (see startListening): Watch reports no signals
}

var (
	_ mq.TxQueue = (*Queue)(nil)
	_ mq.Admin   = (*Queue)(nil)
)

// Open connects to the database at dsn, applies this package's migrations and returns
// a queue that owns the database: Close closes it.
func Open(ctx context.Context, dsn string, o Options) (*Queue, error) {
	db, err := pgdb.Open(ctx, dsn, o.DB)
	if err != nil {
		return nil, err
	}
	q := New(db, o)
	q.owned = true
	if err := q.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return q, nil
}

// New returns a queue over db, a database the caller owns (Close leaves it open) and
// may share with other stores. Call Migrate before use.
func New(db *sqlx.DB, o Options) *Queue {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	q := &Queue{db: db, now: o.Now, log: o.Logger, planStats: pgsql.StatsGuard{DB: db, Tables: []string{"mq_messages", "mq_keys"}, Log: o.Logger}}
	q.enqueues = groupcommit.New(q.enqueueRound)
	q.lane = newLane(db)
	return q
}

// Migrate creates or upgrades the queue's tables in the schema of the database's
// search_path. It is idempotent and safe when several processes call it at once (they
// serialise on an advisory lock).
func (q *Queue) Migrate(ctx context.Context) error {
	return migrate.Run(ctx, q.db.DB, pgsql.Dialect, migrations, MigrationLine)
}

// DB returns the underlying database, for transactions spanning this queue and other
// stores (see the *Tx methods).
func (q *Queue) DB() *sqlx.DB { return q.db }

// Database implements mq.TxQueue: the PostgreSQL database the queue lives in.
func (q *Queue) Database() txn.Database { return pgsql.Database(q.db) }

// In implements mq.TxQueue: the queue's operations inside tx, a transaction its
// Database runs; consumers are woken once tx commits.
func (q *Queue) In(tx txn.Tx) (mq.QueueTx, error) { return mqsql.In(q, tx) }

// Notify wakes the DequeueBatch calls waiting on queue, in this process at once and
// in every other process through a PostgreSQL NOTIFY sent right after: call it once
// a transaction that used the *Tx methods has committed, for the queues it wrote to
// (as on the SQLite backend). Several calls in a row share one NOTIFY statement.
func (q *Queue) Notify(queue string) { q.wake(queue) }

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

// channelExpr is the NOTIFY channel of the schema: one per schema, so deployments
// sharing a database do not wake each other. The payload is the queue name.
const channelExpr = `'duroq_mq_' || to_hex(hashtextextended(current_schema(), 0))`

// keyLockID is the SQL expression of the advisory lock id of routing key key in queue
// queue (both SQL expressions), scoped by the schema. A collision only makes two keys
// share a lock for the duration of short transactions.
func keyLockID(queue, key string) string {
	return "hashtextextended(" + key + ", hashtextextended(" + queue + ", hashtextextended(current_schema(), 7235)))"
}

// retry runs fn under the PostgreSQL retry policy (pgsql.Retry): transient failures
// and a lost race of moving a message run it again after a short, jittered pause.
func (q *Queue) retry(ctx context.Context, op string, fn func() error) error {
	return pgsql.Retry(ctx,
		func(err error) bool { return pgsql.IsRetryable(err) || errors.Is(err, errMoveRace) },
		func(try int, pause time.Duration, err error) {
			q.retries.Add(1)
			q.log.Debug("mq/postgres: retrying after a transient failure", "op", op, "try", try, "backoff", pause, "err", err)
		}, fn)
}

// inTx runs fn in one transaction (pgsql.Run), retried as a whole on transient
// failures, and names op in its error.
func (q *Queue) inTx(ctx context.Context, op string, fn func(tx *sqlx.Tx) error) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	return wrap(op, q.retry(ctx, op, func() error { return pgsql.Run(ctx, q.db, fn) }))
}

// exec runs fn, which issues a single statement on q.db (its own implicit
// transaction), retried on transient failures, and names op in its error.
func (q *Queue) exec(ctx context.Context, op string, fn func() error) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	return wrap(op, q.retry(ctx, op, fn))
}

// opError names the operation that failed.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return "mq/postgres: " + e.op + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// wrap names op in errors that do not already come from the mq package or name an
// operation, and reports damaged storage as mq.ErrCorrupt.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var inv *mq.InvalidError
	var dup *mq.DuplicateKeyError
	var named *opError
	if errors.As(err, &inv) || errors.As(err, &dup) || errors.As(err, &named) ||
		errors.Is(err, mq.ErrLockLost) || errors.Is(err, mq.ErrClosed) || errors.Is(err, mq.ErrCorrupt) {
		return err
	}
	if corrupt(err) {
		return mq.Corrupt(op, err)
	}
	if sqltx.DBClosed(err) { // the caller closed the database under the queue
		return fmt.Errorf("%w: %w", mq.Closed(op), err)
	}
	return &opError{op: op, err: err}
}

// corrupt reports PostgreSQL's data corruption errors: data_corrupted (XX001, a
// damaged page or tuple) and index_corrupted (XX002). Retrying cannot repair them.
func corrupt(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "XX001" || pe.Code == "XX002")
}

// sqlArgs collects the arguments of a statement being built.
type sqlArgs []any

// p appends v and returns its placeholder.
func (a *sqlArgs) p(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// checkText rejects what PostgreSQL's text type cannot store: invalid UTF-8 and NUL.
func checkText(op, field, v string) error {
	switch {
	case !utf8.ValidString(v):
		return &mq.InvalidError{Op: op, Field: field, Reason: "not valid UTF-8 (PostgreSQL stores names as text)"}
	case strings.IndexByte(v, 0) >= 0:
		return &mq.InvalidError{Op: op, Field: field, Reason: "contains a NUL byte, which PostgreSQL text cannot hold"}
	}
	return nil
}

// checkToken returns token if it can be one this package issued (a UUID in canonical
// form); anything else is a lock that is not held.
func checkToken(op, token string) error {
	if err := mq.CheckToken(op, token); err != nil {
		return err
	}
	if u, err := uuid.Parse(token); err != nil || u.String() != token {
		return mq.LockLost(op, token)
	}
	return nil
}

func nonEmpty(op, field, v string) error {
	if v == "" {
		return &mq.InvalidError{Op: op, Field: field, Reason: "must not be empty"}
	}
	return nil
}

func queueNames(msgs []mq.Message) []string {
	var names []string
	for _, m := range msgs {
		if !slices.Contains(names, m.Queue) {
			names = append(names, m.Queue)
		}
	}
	return names
}

// insertChunk bounds the rows of one INSERT, so a huge Enqueue does not become one
// enormous protocol message.
const insertChunk = 1000

// insertSQL stores messages given as parallel arrays, in array order (ids follow
// it).
const insertSQL = `INSERT INTO mq_messages (queue, routing_key, message_key, session, tag, payload, enqueued_at, visible_at, trace_parent, limit_group, priority)
	SELECT m.queue, m.routing_key, m.message_key, m.session, m.tag, m.payload, $7::bigint, m.visible_at, m.trace_parent, m.limit_group, m.priority
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $8::bigint[], $9::text[], $10::text[], $11::integer[])
		WITH ORDINALITY AS m(queue, routing_key, message_key, session, tag, payload, visible_at, trace_parent, limit_group, priority, ord)
	ORDER BY m.ord`

// insertDedupSQL is insertSQL for messages of which some have a DedupID ($12, with
// its expiry $13): the ids their queue does not remember (or has let expire) are
// remembered, and only their messages and those without an id are stored; the
// others are duplicates. One statement: the ids and the messages commit together.
const insertDedupSQL = `WITH d AS (
	INSERT INTO mq_dedup AS x (queue, dedup_id, expires_at)
	SELECT u.queue, u.dedup_id, u.expires_at FROM unnest($1::text[], $12::text[], $13::bigint[]) AS u(queue, dedup_id, expires_at)
	WHERE u.dedup_id IS NOT NULL
	ON CONFLICT (queue, dedup_id) DO UPDATE SET expires_at = excluded.expires_at WHERE x.expires_at <= $7::bigint
	RETURNING x.queue, x.dedup_id
)
INSERT INTO mq_messages (queue, routing_key, message_key, session, tag, payload, enqueued_at, visible_at, trace_parent, limit_group, priority)
	SELECT m.queue, m.routing_key, m.message_key, m.session, m.tag, m.payload, $7::bigint, m.visible_at, m.trace_parent, m.limit_group, m.priority
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $8::bigint[], $9::text[], $10::text[], $11::integer[], $12::text[])
		WITH ORDINALITY AS m(queue, routing_key, message_key, session, tag, payload, visible_at, trace_parent, limit_group, priority, dedup_id, ord)
	WHERE m.dedup_id IS NULL OR EXISTS (SELECT 1 FROM d WHERE d.queue = m.queue AND d.dedup_id = m.dedup_id)
	ORDER BY m.ord`

// sweepDedupSQL deletes up to $2 ids expired at $1, skipping rows that writers
// hold (it runs beside them, on a connection of its own).
const sweepDedupSQL = `DELETE FROM mq_dedup WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM mq_dedup WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED))`

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// EnqueueRounds reports how many transactions this Queue's Enqueue calls have run
// in: concurrent calls share one (group commit), so this is at most the number of
// calls. Load reports count commits with it.
func (q *Queue) EnqueueRounds() int64 { return q.enqueues.Rounds() }

// Enqueue implements mq.MessageQueue. Concurrent calls share a transaction (see
// groupcommit): one statement (one implicit transaction) for up to 1000 messages,
// one transaction for more.
func (q *Queue) Enqueue(ctx context.Context, msgs ...mq.Message) error {
	msgs = mq.Traced(ctx, msgs)
	if err := q.checkEnqueue(msgs); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	return q.enqueues.Do(ctx, msgs)
}

// enqueueRound stores the messages of concurrent Enqueue calls together, so that
// they share one commit and its WAL flush, on the connection the rounds keep (see
// lane).
func (q *Queue) enqueueRound(ctx context.Context, calls [][]mq.Message) error {
	const op = "enqueue"
	msgs := slices.Concat(calls...)
	var err error
	if len(msgs) <= insertChunk {
		err = q.exec(ctx, op, func() error {
			c, err := q.lane.take(ctx)
			if err != nil {
				return err
			}
			err = q.insert(ctx, c, msgs)
			q.lane.give(c, err != nil)
			return err
		})
	} else {
		err = q.inTx(ctx, op, func(tx *sqlx.Tx) error { return q.insert(ctx, tx, msgs) })
	}
	if err != nil {
		return q.duplicate(ctx, op, msgs, err)
	}
	q.wake(queueNames(msgs)...)
	return nil
}

// EnqueueTx is Enqueue inside tx (a transaction of q.DB()). Call Notify after commit
// for the messages' queues. A rejected duplicate message key aborts tx, as any
// failed statement does in PostgreSQL: roll it back.
func (q *Queue) EnqueueTx(ctx context.Context, tx *sqlx.Tx, msgs ...mq.Message) error {
	const op = "enqueue"
	msgs = mq.Traced(ctx, msgs)
	if err := q.checkEnqueue(msgs); err != nil {
		return err
	}
	if err := q.insert(ctx, tx, msgs); err != nil {
		return clash(op, wrap(op, err))
	}
	return nil
}

// checkEnqueue refuses an enqueue of msgs on a closed queue or of messages it
// cannot store.
func (q *Queue) checkEnqueue(msgs []mq.Message) error {
	const op = "enqueue"
	if q.closed.Load() {
		return mq.Closed(op)
	}
	return mq.CheckMessages(op, msgs)
}

// insert stores msgs (already validated) through ex.
func (q *Queue) insert(ctx context.Context, ex sqlx.ExecerContext, msgs []mq.Message) error {
	now := q.now()
	msgs = mq.Deduplicated(msgs)
	for chunk := range slices.Chunk(msgs, insertChunk) {
		n := len(chunk)
		var (
			queues   = make([]string, n)
			routing  = make([]*string, n)
			keys     = make([]*string, n)
			sessions = make([]*string, n)
			tags     = make([]*string, n)
			payloads = make([][]byte, n)
			visible  = make([]int64, n)
			traces   = make([]*string, n)
			groups   = make([]*string, n)
			prios    = make([]int32, n)
		)
		for i, m := range chunk {
			queues[i], routing[i], keys[i], sessions[i], tags[i] = m.Queue, nullable(m.RoutingKey), nullable(m.Key), nullable(m.Session), nullable(m.Tag)
			payloads[i] = m.Payload
			if payloads[i] == nil {
				payloads[i] = []byte{}
			}
			visible[i] = micros(now.Add(m.Delay))
			traces[i], groups[i] = nullable(m.TraceParent), nullable(m.LimitGroup)
			prios[i] = int32(m.Priority) // within [mq.MinPriority, mq.MaxPriority]
		}
		args := []any{queues, routing, keys, sessions, tags, payloads, micros(now), visible, traces, groups, prios}
		query := insertSQL
		if slices.ContainsFunc(chunk, func(m mq.Message) bool { return m.DedupID != "" }) {
			ids, until := make([]*string, n), make([]int64, n)
			for i, m := range chunk {
				ids[i], until[i] = nullable(m.DedupID), micros(m.DedupUntil(now))
			}
			query, args = insertDedupSQL, append(args, ids, until)
			if q.dedupSweep.Due(now, mqsql.SweepEvery) {
				go q.sweepDedup(now)
			}
		}
		if _, err := ex.ExecContext(ctx, query, args...); err != nil {
			return err
		}
	}
	return nil
}

// sweepDedup deletes deduplication ids that expired by now, in the background: a
// write that remembers ids may hold some of the expired rows (it renews them), so
// the sweep neither runs in its transaction nor waits for it.
func (q *Queue) sweepDedup(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := q.db.ExecContext(ctx, sweepDedupSQL, micros(now), mqsql.SweepLimit); err != nil && !q.closed.Load() {
		q.log.Debug("sweeping expired deduplication ids failed; the next write with a DedupID tries again", "err", err)
	}
}

// duplicate turns a unique violation of the message-key index into a
// DuplicateKeyError naming the pending key; other errors pass unchanged.
func (q *Queue) duplicate(ctx context.Context, op string, msgs []mq.Message, err error) error {
	pe := keyViolation(err)
	if pe == nil {
		return err
	}
	// The failed statement aborted its transaction: ask on another connection which
	// of the keys is pending (it was committed by the transaction we waited for).
	var queues, keys []string
	for _, m := range msgs {
		if m.Key != "" {
			queues, keys = append(queues, m.Queue), append(keys, m.Key)
		}
	}
	var found struct {
		Queue string `db:"queue"`
		Key   string `db:"message_key"`
	}
	if q.db.GetContext(ctx, &found, `SELECT queue, message_key FROM mq_messages
		WHERE (queue, message_key) IN (SELECT * FROM unnest($1::text[], $2::text[])) LIMIT 1`, queues, keys) == nil {
		return &mq.DuplicateKeyError{Op: op, Queue: found.Queue, Key: found.Key}
	}
	// The pending key was written earlier in the caller's own transaction, or is gone
	// already: PostgreSQL's detail names it.
	return clashError(op, pe)
}

// keyViolation is err's unique violation of the message-key index (nil if it is
// none).
func keyViolation(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" || pe.ConstraintName != "mq_messages_key" {
		return nil
	}
	return pe
}

// clashError is the error of a unique violation of the message-key index, naming
// the key as PostgreSQL's detail does.
func clashError(op string, pe *pgconn.PgError) error {
	return &opError{op: op, err: fmt.Errorf("%w: %s", mq.ErrDuplicateKey, pe.Detail)}
}

// clash is duplicate for a write in the caller's transaction: that transaction
// holds a connection until the caller ends it, so no other is asked (with the pool
// exhausted by such callers, the question would wait for ever); PostgreSQL's detail
// names the key.
func clash(op string, err error) error {
	if pe := keyViolation(err); pe != nil {
		return clashError(op, pe)
	}
	return err
}

// queryRows runs query and calls each with every row it returns, scanned in column
// order into the fields that fields gives of one T. The hot statements' rows are
// scanned so rather than by sqlx's reflection, which matched the columns to fields
// by name at every statement and made each row twice: an eighth of what a worker
// allocated under duroq bench seq.
func queryRows[T any](ctx context.Context, q sqlx.QueryerContext, fields func(*T) []any, each func(T), query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var r T
	dest := fields(&r)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		each(r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}
