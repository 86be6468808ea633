package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqlitedb"
	"github.com/duroq/duroq/internal/sqltext"
	"github.com/duroq/duroq/internal/stmtcache"
	"github.com/duroq/duroq/internal/wake"
	"github.com/duroq/duroq/mq"
	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationLine names this package's migrations in the shared duroq_migrations table.
const MigrationLine = "mq"

// DBOptions tune OpenDB; see the field docs for the defaults.
type DBOptions = sqlitedb.Options

// OpenDB opens the SQLite database at path with the settings this package is built
// for: WAL, synchronous=NORMAL (FULL on request), a 10 s busy timeout, transactions
// that take the write lock when they begin (BEGIN IMMEDIATE) and a pool of 8
// connections. Use it to share one database between this queue and other duroq
// SQLite stores (pass the result to New); a database opened otherwise MUST use
// _txlock=immediate.
func OpenDB(path string, o DBOptions) (*sqlx.DB, error) { return sqlitedb.Open(path, o) }

// Options tune Open and New. The zero value is usable.
type Options struct {
	// DB tunes the database Open creates (ignored by New).
	DB DBOptions
	// Now is the clock every timestamp is computed from (default time.Now).
	Now func() time.Time
	// Logger receives debug records; nil is silent.
	Logger *slog.Logger
}

// Queue is a MessageQueue stored in SQLite. It is safe for concurrent use, also by
// several processes sharing the database file.
type Queue struct {
	db     *sqlx.DB
	owned  bool
	now    func() time.Time
	log    *slog.Logger
	writer *sqlitedb.Writer
	stmts  *stmtcache.Cache
	hub    wake.Hub
	closed atomic.Bool
}

var _ mq.MessageQueue = (*Queue)(nil)

// Open opens (creating if needed) the database at path, applies this package's
// migrations and returns a queue that owns the database: Close closes it.
func Open(path string, o Options) (*Queue, error) {
	db, err := sqlitedb.Open(path, o.DB)
	if err != nil {
		return nil, err
	}
	q := New(db, o)
	q.owned = true
	if err := q.Migrate(context.Background()); err != nil {
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
	return &Queue{db: db, now: o.Now, log: o.Logger, writer: sqlitedb.WriterOf(db), stmts: stmtcache.New(db)}
}

// Migrate creates or upgrades the queue's tables. It is idempotent and safe when
// several processes call it at once.
func (q *Queue) Migrate(ctx context.Context) error {
	migs, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	return migrate.Apply(ctx, q.db.DB, migrate.SQLite, MigrationLine, migs)
}

// DB returns the underlying database, for transactions spanning this queue and other
// stores (see the *Tx methods).
func (q *Queue) DB() *sqlx.DB { return q.db }

// Notify wakes this process's DequeueBatch calls waiting on queue. The *Tx methods
// cannot know when their transaction commits: call Notify after committing one that
// enqueued or released messages, or waiters see them only at their next poll.
func (q *Queue) Notify(queue string) { q.hub.Notify(queue) }

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

// write runs fn in one write transaction and wakes the queues it names afterwards.
func (q *Queue) run(ctx context.Context, op string, fn func(tx *sqlx.Tx) ([]string, error)) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	var wakeQueues []string
	err := q.writer.Run(ctx, func(tx *sqlx.Tx) (err error) {
		wakeQueues, err = fn(tx)
		return err
	})
	if err != nil {
		return wrap(op, err)
	}
	for _, name := range wakeQueues {
		q.hub.Notify(name)
	}
	return nil
}

// wrap names op in errors that do not already come from the mq package.
func wrap(op string, err error) error {
	var inv *mq.InvalidError
	var dup *mq.DuplicateKeyError
	if errors.As(err, &inv) || errors.As(err, &dup) || errors.Is(err, mq.ErrLockLost) || errors.Is(err, mq.ErrClosed) {
		return err
	}
	return fmt.Errorf("mq/sqlite: %s: %w", op, err)
}

// Enqueue implements mq.MessageQueue: all messages in one transaction.
func (q *Queue) Enqueue(ctx context.Context, msgs ...mq.Message) error {
	return q.run(ctx, "enqueue", func(tx *sqlx.Tx) ([]string, error) {
		return queueNames(msgs), q.EnqueueTx(ctx, tx, msgs...)
	})
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

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// insertChunk bounds the rows of one INSERT (10 parameters each) well below
// SQLite's parameter limit.
const insertChunk = 256

// EnqueueTx is Enqueue inside tx (a transaction of q.DB()). Call Notify after commit.
func (q *Queue) EnqueueTx(ctx context.Context, tx *sqlx.Tx, msgs ...mq.Message) error {
	return q.enqueue(ctx, tx, "enqueue", msgs)
}

// enqueue stores msgs for op (enqueue, or ack with follow-ups).
func (q *Queue) enqueue(ctx context.Context, tx *sqlx.Tx, op string, msgs []mq.Message) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := mq.CheckMessages(op, msgs); err != nil {
		return err
	}
	now := q.now()
	for chunk := range slices.Chunk(msgs, insertChunk) {
		var sb strings.Builder
		sb.WriteString(`INSERT INTO mq_messages (queue, routing_key, message_key, session, tag, payload, enqueued_at, visible_at, attempts, lock_token) VALUES `)
		args := make([]any, 0, len(chunk)*9)
		for i, m := range chunk {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?,?,?,?,?,?,?,?,0,NULL)")
			payload := m.Payload
			if payload == nil {
				payload = []byte{}
			}
			args = append(args, m.Queue, nullable(m.RoutingKey), nullable(m.Key), nullable(m.Session), nullable(m.Tag),
				payload, micros(now), micros(now.Add(m.Delay)))
		}
		if _, err := q.stmts.Exec(ctx, tx, sb.String(), args...); err != nil {
			if se, ok := errors.AsType[sqlite3.Error](err); ok && se.ExtendedCode == sqlite3.ErrConstraintUnique {
				return q.duplicateKey(ctx, tx, op, chunk, err)
			}
			return wrap(op, err)
		}
	}
	return nil
}

// duplicateKey names the pending message key that made an insert of msgs fail. The
// unique index, not a lookup per message, guards the keys: only a failed insert
// pays for finding which key it was (SQLite undid just the failed statement).
func (q *Queue) duplicateKey(ctx context.Context, tx *sqlx.Tx, op string, msgs []mq.Message, cause error) error {
	for _, m := range msgs {
		if m.Key == "" {
			continue
		}
		var one int
		err := q.stmts.Get(ctx, tx, &one, `SELECT 1 FROM mq_messages WHERE queue = ? AND message_key = ?`, m.Queue, m.Key)
		if err == nil {
			return &mq.DuplicateKeyError{Op: op, Queue: m.Queue, Key: m.Key}
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return wrap(op, err)
		}
	}
	return fmt.Errorf("mq/sqlite: %s: %w (%v)", op, mq.ErrDuplicateKey, cause)
}

// DequeueBatch implements mq.MessageQueue. Each attempt is one short transaction;
// while waiting it holds no connection.
func (q *Queue) DequeueBatch(ctx context.Context, queue string, opts mq.DequeueOptions) (*mq.Batch, error) {
	const op = "dequeue"
	opts, err := mq.NormalizeDequeue(queue, opts)
	if err != nil {
		return nil, err
	}
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mq/sqlite: %s %q: %w", op, queue, err)
	}
	b, err := wake.Poll(ctx, &q.hub, queue, opts.Wait, q.now, func() (b *mq.Batch, ok bool, next time.Time, err error) {
		err = q.run(ctx, op, func(tx *sqlx.Tx) ([]string, error) {
			b, next, err = q.DequeueTx(ctx, tx, queue, opts)
			return nil, err
		})
		return b, b != nil, next, err
	})
	if err != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("mq/sqlite: %s %q: %w", op, queue, err)
	}
	return b, err
}

// filters renders the eligibility conditions of opts on the message alias m, the key
// alias k and the session alias s, with their arguments.
func filters(opts mq.DequeueOptions, now int64) (string, []any) {
	var conds []string
	var args []any
	if tags := tagCondition(opts.Tags, &args); tags != "" {
		conds = append(conds, tags)
	}
	if opts.Session == nil {
		conds = append(conds, "m.session IS NULL")
	} else {
		conds = append(conds, "(m.session IS NULL OR s.session IS NULL OR s.locked_until <= ? OR s.owner = ?)")
		args = append(args, now, opts.Session.Owner)
	}
	if f := opts.KeyAttr; f != nil {
		var ranges []string
		for _, r := range f.Ranges {
			ranges = append(ranges, "k.attr BETWEEN ? AND ?")
			args = append(args, r.Min, r.Max)
		}
		if len(ranges) == 0 {
			conds = append(conds, "m.routing_key IS NULL")
		} else {
			conds = append(conds, "(m.routing_key IS NULL OR k.attr IS NULL OR "+strings.Join(ranges, " OR ")+")")
		}
	}
	return strings.Join(conds, " AND "), args
}

func tagCondition(f mq.TagFilter, args *[]any) string {
	in := func() string {
		if len(f.Tags) == 0 {
			return "0"
		}
		for _, t := range f.Tags {
			*args = append(*args, t)
		}
		return "m.tag IN (" + sqltext.Params(len(f.Tags)) + ")"
	}
	switch f.Mode {
	case mq.TagDefaultOnly:
		return "m.tag IS NULL"
	case mq.TagOnly:
		return in()
	case mq.TagDefaultAnd:
		return "(m.tag IS NULL OR " + in() + ")"
	case mq.TagNone:
		return "0"
	default:
		return ""
	}
}

type lockedRow struct {
	ID         int64          `db:"id"`
	RoutingKey sql.NullString `db:"routing_key"`
	Token      string         `db:"lock_token"`
	Payload    []byte         `db:"payload"`
	Attempts   int            `db:"attempts"`
	EnqueuedAt int64          `db:"enqueued_at"`
	Tag        sql.NullString `db:"tag"`
	Session    sql.NullString `db:"session"`
	Key        sql.NullString `db:"message_key"`
}

const lockReturning = ` RETURNING id, routing_key, lock_token, payload, attempts, enqueued_at, tag, session, message_key`

// DequeueTx is one non-blocking DequeueBatch attempt inside tx (opts.Wait is
// ignored). When nothing is eligible it returns a nil batch and the next time a
// message of the queue becomes visible (zero if none is pending).
func (q *Queue) DequeueTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions) (*mq.Batch, time.Time, error) {
	batches, next, err := q.dequeue(ctx, tx, queue, opts, 1)
	if len(batches) == 0 {
		return nil, next, err
	}
	return batches[0], time.Time{}, err
}

// DequeueManyTx locks up to max batches of queue inside tx, as max DequeueTx calls
// would, in a constant number of statements: one candidate scan, one upsert of the
// key locks, one update per kind of batch (keyed, un-keyed) and one upsert of the
// session leases. Batches come in eligibility order, each with its own token.
func (q *Queue) DequeueManyTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	batches, _, err := q.dequeue(ctx, tx, queue, opts, max)
	return batches, err
}

func (q *Queue) dequeue(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, time.Time, error) {
	const op = "dequeue"
	opts, err := mq.NormalizeDequeue(queue, opts)
	if err != nil {
		return nil, time.Time{}, err
	}
	if max < 1 {
		return nil, time.Time{}, &mq.InvalidError{Op: op, Field: "max", Reason: fmt.Sprintf("%d batches (want at least 1)", max)}
	}
	if q.closed.Load() {
		return nil, time.Time{}, mq.Closed(op)
	}
	now := micros(q.now())
	cond, condArgs := filters(opts, now)
	if cond != "" {
		cond = " AND " + cond
	}
	var candidates []struct {
		ID         int64          `db:"id"`
		RoutingKey sql.NullString `db:"routing_key"`
		Session    sql.NullString `db:"session"`
	}
	err = q.stmts.Select(ctx, tx, &candidates, `SELECT m.id, m.routing_key, m.session FROM mq_messages m
		LEFT JOIN mq_keys k ON k.queue = m.queue AND k.routing_key = m.routing_key
		LEFT JOIN mq_sessions s ON s.queue = m.queue AND s.session = m.session
		WHERE m.queue = ? AND m.visible_at <= ?
		  AND (m.routing_key IS NULL OR k.locked_until IS NULL OR k.locked_until <= ?)`+cond+`
		ORDER BY m.visible_at, m.id LIMIT ?`, append(append([]any{queue, now, now}, condArgs...), max)...)
	if err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	if len(candidates) == 0 {
		var next sql.NullInt64
		if err := q.stmts.Get(ctx, tx, &next, `SELECT MIN(visible_at) FROM mq_messages WHERE queue = ? AND visible_at > ?`, queue, now); err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
		if !next.Valid {
			return nil, time.Time{}, nil
		}
		return nil, fromMicros(next.Int64), nil
	}

	// Choose the batches: a key's first candidate stands for all its messages. The
	// scan reads max rows, so repeats of a key make this call return fewer batches,
	// never more work per batch.
	until := micros(q.now().Add(opts.LockTimeout))
	var (
		batches  []*mq.Batch
		byToken  = map[string]*mq.Batch{}
		keyArgs  []any // (key, token) pairs
		idArgs   []any // (id, token) pairs
		sessions []string
		seen     = map[string]bool{}
	)
	for _, c := range candidates {
		if len(batches) == max {
			break
		}
		if c.RoutingKey.Valid {
			if seen[c.RoutingKey.String] {
				continue
			}
			seen[c.RoutingKey.String] = true
		}
		b := &mq.Batch{Queue: queue, RoutingKey: c.RoutingKey.String, Token: uuid.NewString(), LockedUntil: fromMicros(until)}
		batches = append(batches, b)
		byToken[b.Token] = b
		if c.RoutingKey.Valid {
			keyArgs = append(keyArgs, c.RoutingKey.String, b.Token)
		} else {
			idArgs = append(idArgs, c.ID, b.Token)
		}
		if c.Session.Valid && !slices.Contains(sessions, c.Session.String) {
			sessions = append(sessions, c.Session.String)
		}
	}

	var rows []lockedRow
	if n := len(keyArgs) / 2; n > 0 {
		if _, err := q.stmts.Exec(ctx, tx, `INSERT INTO mq_keys (queue, routing_key, lock_token, locked_until)
			SELECT ?, column1, column2, ? FROM (VALUES `+sqltext.Rows(n, 2)+`) WHERE true
			ON CONFLICT (queue, routing_key) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until`,
			append([]any{queue, until}, keyArgs...)...); err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
		var tagArgs []any
		tags := tagCondition(opts.Tags, &tagArgs)
		if tags != "" {
			tags = " AND " + tags
		}
		args := append(append(keyArgs, until, until, queue, now), tagArgs...)
		if err := q.stmts.Select(ctx, tx, &rows, `WITH t(k, tok) AS (VALUES `+sqltext.Rows(n, 2)+`)
			UPDATE mq_messages AS m INDEXED BY mq_messages_routing
			SET lock_token = t.tok, locked_until = ?, visible_at = ?, attempts = attempts + 1 FROM t
			WHERE m.queue = ? AND m.routing_key = t.k AND m.visible_at <= ?`+tags+lockReturning,
			args...); err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
	}
	if n := len(idArgs) / 2; n > 0 {
		var more []lockedRow
		if err := q.stmts.Select(ctx, tx, &more, `WITH t(tid, tok) AS (VALUES `+sqltext.Rows(n, 2)+`)
			UPDATE mq_messages AS m SET lock_token = t.tok, locked_until = ?, visible_at = ?, attempts = attempts + 1 FROM t
			WHERE m.id = t.tid`+lockReturning, append(idArgs, until, until)...); err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
		rows = append(rows, more...)
	}
	if n := len(sessions); n > 0 {
		args := []any{queue, opts.Session.Owner, micros(q.now().Add(opts.Session.LeaseTimeout)), now}
		for _, s := range sessions {
			args = append(args, s)
		}
		if _, err := q.stmts.Exec(ctx, tx, `INSERT INTO mq_sessions (queue, session, owner, locked_until, last_activity_at)
			SELECT ?, column1, ?, ?, ? FROM (VALUES `+sqltext.Rows(n, 1)+`) WHERE true
			ON CONFLICT (queue, session) DO UPDATE SET owner = excluded.owner, locked_until = excluded.locked_until, last_activity_at = excluded.last_activity_at`,
			args...); err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
	}
	// RETURNING gives no order guarantee: each batch is in enqueue order.
	slices.SortFunc(rows, func(a, b lockedRow) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range rows {
		b := byToken[r.Token]
		if r.Payload == nil {
			r.Payload = []byte{}
		}
		b.Messages = append(b.Messages, mq.Delivery{ID: r.ID, Payload: r.Payload, Attempt: r.Attempts,
			EnqueuedAt: fromMicros(r.EnqueuedAt), Tag: r.Tag.String, Session: r.Session.String, Key: r.Key.String})
	}
	return batches, time.Time{}, nil
}

// batchRow identifies what a lock token held, as returned by the statements that
// end or extend a lock.
type batchRow struct {
	Queue       string         `db:"queue"`
	LockedUntil sql.NullInt64  `db:"locked_until"` // NULL after an abandon
	RoutingKey  sql.NullString `db:"routing_key"`
	Session     sql.NullString `db:"session"`
}

const batchReturning = ` RETURNING queue, routing_key, session, locked_until`

// afterLock releases the routing-key lock of token (if the batch was keyed) and
// records activity on the batch's live sessions.
func (q *Queue) afterLock(ctx context.Context, tx *sqlx.Tx, token string, rows []batchRow, release bool, now int64) error {
	return q.afterLocks(ctx, tx, []heldLock{{token, rows}}, release, now)
}

// heldLock is a lock token with the rows it held.
type heldLock struct {
	token string
	rows  []batchRow
}

// afterLocks is afterLock for many tokens, in a constant number of statements.
func (q *Queue) afterLocks(ctx context.Context, tx *sqlx.Tx, locks []heldLock, release bool, now int64) error {
	var keys, sessions []any
	seen := map[[2]string]bool{}
	for _, l := range locks {
		if r := l.rows[0]; release && r.RoutingKey.Valid {
			keys = append(keys, r.Queue, r.RoutingKey.String, l.token)
		}
		for _, r := range l.rows {
			if s := [2]string{r.Queue, r.Session.String}; r.Session.Valid && !seen[s] {
				seen[s] = true
				sessions = append(sessions, r.Queue, r.Session.String)
			}
		}
	}
	if n := len(keys) / 3; n > 0 {
		// A key row without an attribute exists only for its lock: drop it. Keys with
		// an attribute (most, e.g. pinned instances) take one statement.
		var released []struct {
			Queue      string        `db:"queue"`
			RoutingKey string        `db:"routing_key"`
			Attr       sql.NullInt64 `db:"attr"`
		}
		if err := q.stmts.Select(ctx, tx, &released, `WITH t(q, k, tok) AS (VALUES `+sqltext.Rows(n, 3)+`)
			UPDATE mq_keys SET lock_token = NULL, locked_until = NULL FROM t
			WHERE mq_keys.queue = t.q AND mq_keys.routing_key = t.k AND mq_keys.lock_token = t.tok
			RETURNING queue, routing_key, attr`, keys...); err != nil {
			return err
		}
		var drop []any
		for _, r := range released {
			if !r.Attr.Valid {
				drop = append(drop, r.Queue, r.RoutingKey)
			}
		}
		if n := len(drop) / 2; n > 0 {
			if _, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_keys WHERE (queue, routing_key) IN (VALUES `+sqltext.Rows(n, 2)+`)
				AND lock_token IS NULL AND attr IS NULL`, drop...); err != nil {
				return err
			}
		}
	}
	if n := len(sessions) / 2; n > 0 {
		if _, err := q.stmts.Exec(ctx, tx, `UPDATE mq_sessions SET last_activity_at = ?
			WHERE locked_until > ? AND (queue, session) IN (VALUES `+sqltext.Rows(n, 2)+`)`,
			append([]any{now, now}, sessions...)...); err != nil {
			return err
		}
	}
	return nil
}

// Ack implements mq.MessageQueue.
func (q *Queue) Ack(ctx context.Context, token string, then ...mq.Message) error {
	return q.run(ctx, "ack", func(tx *sqlx.Tx) ([]string, error) {
		info, err := q.ack(ctx, tx, token, then)
		// The key's messages that waited for its lock are eligible now.
		return append(queueNames(then), info.Queue), err
	})
}

// AckTx is Ack inside tx. Call Notify after commit for the queues of then.
func (q *Queue) AckTx(ctx context.Context, tx *sqlx.Tx, token string, then ...mq.Message) error {
	_, err := q.ack(ctx, tx, token, then)
	return err
}

// AckManyTx acks many tokens in tx, in a constant number of statements, and says
// what each held (in the order of tokens). If any lock is lost it fails with
// ErrLockLost naming that token (roll the transaction back: others were acked).
func (q *Queue) AckManyTx(ctx context.Context, tx *sqlx.Tx, tokens []string) ([]mq.LockInfo, error) {
	infos, err := q.ackMany(ctx, tx, "ack", tokens)
	if err != nil {
		return nil, wrap("ack", err)
	}
	return infos, nil
}

// ack acks token in tx and returns what it held.
func (q *Queue) ack(ctx context.Context, tx *sqlx.Tx, token string, then []mq.Message) (mq.LockInfo, error) {
	const op = "ack"
	if err := mq.CheckMessages(op, then); err != nil {
		return mq.LockInfo{}, err
	}
	infos, err := q.ackMany(ctx, tx, op, []string{token})
	if err != nil {
		return mq.LockInfo{}, wrap(op, err)
	}
	return infos[0], q.enqueue(ctx, tx, op, then)
}

func (q *Queue) ackMany(ctx context.Context, tx *sqlx.Tx, op string, tokens []string) ([]mq.LockInfo, error) {
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	args := make([]any, 0, len(tokens)+1)
	for _, t := range tokens {
		if err := mq.CheckToken(op, t); err != nil {
			return nil, err
		}
		args = append(args, t)
	}
	now := micros(q.now())
	var rows []struct {
		Token string `db:"lock_token"`
		batchRow
	}
	if err := q.stmts.Select(ctx, tx, &rows, `DELETE FROM mq_messages WHERE lock_token IN (`+sqltext.Params(len(tokens))+`) AND locked_until > ?`+
		batchReturning+`, lock_token`, append(args, now)...); err != nil {
		return nil, err
	}
	held := map[string][]batchRow{}
	for _, r := range rows {
		held[r.Token] = append(held[r.Token], r.batchRow)
	}
	locks := make([]heldLock, len(tokens))
	infos := make([]mq.LockInfo, len(tokens))
	for i, t := range tokens {
		rs := held[t]
		if len(rs) == 0 {
			return nil, mq.LockLost(op, t)
		}
		locks[i] = heldLock{t, rs}
		r := rs[0]
		infos[i] = mq.LockInfo{Queue: r.Queue, RoutingKey: r.RoutingKey.String, LockedUntil: fromMicros(r.LockedUntil.Int64), Messages: len(rs)}
	}
	return infos, q.afterLocks(ctx, tx, locks, true, now)
}

// Abandon implements mq.MessageQueue.
func (q *Queue) Abandon(ctx context.Context, token string, opts mq.AbandonOptions) error {
	var queue []string
	return q.run(ctx, "abandon", func(tx *sqlx.Tx) ([]string, error) {
		name, err := q.abandon(ctx, tx, token, opts)
		if name != "" {
			queue = []string{name}
		}
		return queue, err
	})
}

// AbandonTx is Abandon inside tx. Call Notify after commit.
func (q *Queue) AbandonTx(ctx context.Context, tx *sqlx.Tx, token string, opts mq.AbandonOptions) error {
	_, err := q.abandon(ctx, tx, token, opts)
	return err
}

func (q *Queue) abandon(ctx context.Context, tx *sqlx.Tx, token string, opts mq.AbandonOptions) (string, error) {
	const op = "abandon"
	if q.closed.Load() {
		return "", mq.Closed(op)
	}
	if err := mq.CheckDuration(op, "Delay", opts.Delay); err != nil {
		return "", err
	}
	if err := mq.CheckToken(op, token); err != nil {
		return "", err
	}
	now := q.now()
	var rows []batchRow
	if err := q.stmts.Select(ctx, tx, &rows, `UPDATE mq_messages SET lock_token = NULL, locked_until = NULL, visible_at = ?,
		attempts = CASE WHEN ? AND attempts > 0 THEN attempts - 1 ELSE attempts END
		WHERE lock_token = ? AND locked_until > ?`+batchReturning,
		micros(now.Add(opts.Delay)), opts.IgnoreAttempt, token, micros(now)); err != nil {
		return "", wrap(op, err)
	}
	if len(rows) == 0 {
		return "", mq.LockLost(op, token)
	}
	if err := q.afterLock(ctx, tx, token, rows, true, micros(now)); err != nil {
		return "", wrap(op, err)
	}
	return rows[0].Queue, nil
}

// Lock implements mq.MessageQueue.
func (q *Queue) Lock(ctx context.Context, token string) (li mq.LockInfo, err error) {
	err = q.run(ctx, "lock", func(tx *sqlx.Tx) ([]string, error) {
		li, err = q.LockTx(ctx, tx, token)
		return nil, err
	})
	return li, err
}

// LockTx is Lock inside tx.
func (q *Queue) LockTx(ctx context.Context, tx *sqlx.Tx, token string) (mq.LockInfo, error) {
	const op = "lock"
	if q.closed.Load() {
		return mq.LockInfo{}, mq.Closed(op)
	}
	if err := mq.CheckToken(op, token); err != nil {
		return mq.LockInfo{}, err
	}
	var rows []struct {
		Queue       string         `db:"queue"`
		RoutingKey  sql.NullString `db:"routing_key"`
		LockedUntil sql.NullInt64  `db:"locked_until"` // NULL after an abandon
	}
	if err := q.stmts.Select(ctx, tx, &rows, `SELECT queue, routing_key, locked_until FROM mq_messages WHERE lock_token = ? AND locked_until > ?`,
		token, micros(q.now())); err != nil {
		return mq.LockInfo{}, wrap(op, err)
	}
	if len(rows) == 0 {
		return mq.LockInfo{}, mq.LockLost(op, token)
	}
	r := rows[0]
	return mq.LockInfo{Queue: r.Queue, RoutingKey: r.RoutingKey.String, LockedUntil: fromMicros(r.LockedUntil.Int64), Messages: len(rows)}, nil
}

// Renew implements mq.MessageQueue.
func (q *Queue) Renew(ctx context.Context, token string, extend time.Duration) (until time.Time, err error) {
	err = q.run(ctx, "renew", func(tx *sqlx.Tx) ([]string, error) {
		until, err = q.RenewTx(ctx, tx, token, extend)
		return nil, err
	})
	return until, err
}

// RenewTx is Renew inside tx.
func (q *Queue) RenewTx(ctx context.Context, tx *sqlx.Tx, token string, extend time.Duration) (time.Time, error) {
	const op = "renew"
	if q.closed.Load() {
		return time.Time{}, mq.Closed(op)
	}
	if err := mq.CheckDuration(op, "extend", extend); err != nil {
		return time.Time{}, err
	}
	if err := mq.CheckToken(op, token); err != nil {
		return time.Time{}, err
	}
	now := q.now()
	until := micros(now.Add(extend))
	var rows []batchRow
	if err := q.stmts.Select(ctx, tx, &rows, `UPDATE mq_messages SET locked_until = ?, visible_at = ? WHERE lock_token = ? AND locked_until > ?`+batchReturning,
		until, until, token, micros(now)); err != nil {
		return time.Time{}, wrap(op, err)
	}
	if len(rows) == 0 {
		return time.Time{}, mq.LockLost(op, token)
	}
	if r := rows[0]; r.RoutingKey.Valid {
		if _, err := q.stmts.Exec(ctx, tx, `UPDATE mq_keys SET locked_until = ? WHERE queue = ? AND routing_key = ? AND lock_token = ?`,
			until, r.Queue, r.RoutingKey.String, token); err != nil {
			return time.Time{}, wrap(op, err)
		}
	}
	if err := q.afterLock(ctx, tx, token, rows, false, micros(now)); err != nil {
		return time.Time{}, wrap(op, err)
	}
	return fromMicros(until), nil
}

// Remove implements mq.MessageQueue.
func (q *Queue) Remove(ctx context.Context, queue string, keys ...string) (n int, err error) {
	err = q.run(ctx, "remove", func(tx *sqlx.Tx) ([]string, error) {
		n, err = q.RemoveTx(ctx, tx, queue, keys...)
		return []string{queue}, err
	})
	return n, err
}

// RemoveTx is Remove inside tx. Call Notify after commit.
func (q *Queue) RemoveTx(ctx context.Context, tx *sqlx.Tx, queue string, keys ...string) (int, error) {
	const op = "remove"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := mq.CheckQueue(op, queue); err != nil {
		return 0, err
	}
	now := micros(q.now())
	n := 0
	for _, key := range keys {
		var row struct {
			ID          int64          `db:"id"`
			Token       sql.NullString `db:"lock_token"`
			LockedUntil sql.NullInt64  `db:"locked_until"`
		}
		err := q.stmts.Get(ctx, tx, &row, `DELETE FROM mq_messages WHERE queue = ? AND message_key = ? RETURNING id, lock_token, locked_until`, queue, key)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, wrap(op, err)
		}
		n++
		if row.Token.Valid && row.LockedUntil.Int64 > now {
			if err := q.releaseLost(ctx, tx, row.Token.String, now); err != nil {
				return 0, wrap(op, err)
			}
		}
	}
	return n, nil
}

// RemovePrefix implements mq.MessageQueue.
func (q *Queue) RemovePrefix(ctx context.Context, queue, prefix string) (n int, err error) {
	err = q.run(ctx, "remove prefix", func(tx *sqlx.Tx) ([]string, error) {
		n, err = q.RemovePrefixTx(ctx, tx, queue, prefix)
		return []string{queue}, err
	})
	return n, err
}

// RemovePrefixTx is RemovePrefix inside tx. Call Notify after commit.
func (q *Queue) RemovePrefixTx(ctx context.Context, tx *sqlx.Tx, queue, prefix string) (int, error) {
	const op = "remove prefix"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := errors.Join(mq.CheckQueue(op, queue), nonEmpty(op, "prefix", prefix)); err != nil {
		return 0, err
	}
	// The key range [prefix, end) uses the message-key index; keys are compared
	// bytewise (BINARY collation).
	query, args := `DELETE FROM mq_messages WHERE queue = ? AND message_key >= ?`, []any{queue, prefix}
	if end, ok := prefixEnd(prefix); ok {
		query, args = query+` AND message_key < ?`, append(args, end)
	}
	var rows []struct {
		Token       sql.NullString `db:"lock_token"`
		LockedUntil sql.NullInt64  `db:"locked_until"`
	}
	if err := q.stmts.Select(ctx, tx, &rows, query+` RETURNING lock_token, locked_until`, args...); err != nil {
		return 0, wrap(op, err)
	}
	now := micros(q.now())
	for _, r := range rows {
		if r.Token.Valid && r.LockedUntil.Int64 > now {
			if err := q.releaseLost(ctx, tx, r.Token.String, now); err != nil {
				return 0, wrap(op, err)
			}
		}
	}
	return len(rows), nil
}

// prefixEnd is the smallest string greater than every string starting with p.
func prefixEnd(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

func nonEmpty(op, field, v string) error {
	if v == "" {
		return &mq.InvalidError{Op: op, Field: field, Reason: "must not be empty"}
	}
	return nil
}

// releaseLost frees what remains of a live batch that lost a message: its other
// messages become eligible now and its key lock ends.
func (q *Queue) releaseLost(ctx context.Context, tx *sqlx.Tx, token string, now int64) error {
	if _, err := q.stmts.Exec(ctx, tx, `UPDATE mq_messages SET lock_token = NULL, locked_until = NULL, visible_at = ? WHERE lock_token = ?`, now, token); err != nil {
		return err
	}
	if _, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_keys WHERE lock_token = ? AND attr IS NULL`, token); err != nil {
		return err
	}
	_, err := q.stmts.Exec(ctx, tx, `UPDATE mq_keys SET lock_token = NULL, locked_until = NULL WHERE lock_token = ?`, token)
	return err
}

// PurgeKey implements mq.MessageQueue.
func (q *Queue) PurgeKey(ctx context.Context, queue, routingKey string) (n int, err error) {
	err = q.run(ctx, "purge key", func(tx *sqlx.Tx) ([]string, error) {
		n, err = q.PurgeKeyTx(ctx, tx, queue, routingKey)
		return nil, err
	})
	return n, err
}

// PurgeKeyTx is PurgeKey inside tx.
func (q *Queue) PurgeKeyTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string) (int, error) {
	const op = "purge key"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := mq.CheckQueue(op, queue); err != nil {
		return 0, err
	}
	res, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_messages WHERE queue = ? AND routing_key = ?`, queue, routingKey)
	if err != nil {
		return 0, wrap(op, err)
	}
	if _, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_keys WHERE queue = ? AND routing_key = ?`, queue, routingKey); err != nil {
		return 0, wrap(op, err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// SetKeyAttr implements mq.MessageQueue.
func (q *Queue) SetKeyAttr(ctx context.Context, queue, routingKey string, attr *int64) error {
	return q.run(ctx, "set key attribute", func(tx *sqlx.Tx) ([]string, error) {
		return nil, q.SetKeyAttrTx(ctx, tx, queue, routingKey, attr)
	})
}

// SetKeyAttrTx is SetKeyAttr inside tx.
func (q *Queue) SetKeyAttrTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string, attr *int64) error {
	const op = "set key attribute"
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := mq.CheckQueue(op, queue); err != nil {
		return err
	}
	if err := nonEmpty(op, "routing key", routingKey); err != nil {
		return err
	}
	var err error
	if attr != nil {
		_, err = q.stmts.Exec(ctx, tx, `INSERT INTO mq_keys (queue, routing_key, attr) VALUES (?, ?, ?)
			ON CONFLICT (queue, routing_key) DO UPDATE SET attr = excluded.attr`, queue, routingKey, *attr)
	} else {
		_, err = q.stmts.Exec(ctx, tx, `DELETE FROM mq_keys WHERE queue = ? AND routing_key = ? AND (locked_until IS NULL OR locked_until <= ?)`,
			queue, routingKey, micros(q.now()))
		if err == nil {
			_, err = q.stmts.Exec(ctx, tx, `UPDATE mq_keys SET attr = NULL WHERE queue = ? AND routing_key = ?`, queue, routingKey)
		}
	}
	return wrapNil(op, err)
}

func wrapNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return wrap(op, err)
}

// RenewSessions implements mq.MessageQueue.
func (q *Queue) RenewSessions(ctx context.Context, queue string, owners []string, extend, idle time.Duration) (int, error) {
	const op = "renew sessions"
	if err := errors.Join(mq.CheckQueue(op, queue), mq.CheckDuration(op, "extend", extend), mq.CheckDuration(op, "idle", idle)); err != nil {
		return 0, err
	}
	if len(owners) == 0 {
		return 0, nil
	}
	now := q.now()
	query, args, err := sqlx.In(`UPDATE mq_sessions SET locked_until = ?
		WHERE queue = ? AND owner IN (?) AND locked_until > ? AND last_activity_at > ?`,
		micros(now.Add(extend)), queue, owners, micros(now), micros(now.Add(-idle)))
	if err != nil {
		return 0, wrap(op, err)
	}
	return q.execCount(ctx, op, query, args...)
}

// CleanupSessions implements mq.MessageQueue.
func (q *Queue) CleanupSessions(ctx context.Context, queue string) (int, error) {
	const op = "cleanup sessions"
	if err := mq.CheckQueue(op, queue); err != nil {
		return 0, err
	}
	return q.execCount(ctx, op, `DELETE FROM mq_sessions WHERE queue = ? AND locked_until <= ?
		AND NOT EXISTS (SELECT 1 FROM mq_messages m WHERE m.queue = mq_sessions.queue AND m.session = mq_sessions.session)`,
		queue, micros(q.now()))
}

// execCount runs one write statement in its own transaction and returns the number
// of rows it changed.
func (q *Queue) execCount(ctx context.Context, op, query string, args ...any) (n int, err error) {
	err = q.run(ctx, op, func(tx *sqlx.Tx) ([]string, error) {
		res, err := q.stmts.Exec(ctx, tx, query, args...)
		if err != nil {
			return nil, err
		}
		affected, err := res.RowsAffected()
		n = int(affected)
		return nil, err
	})
	return n, err
}

// Stats implements mq.MessageQueue.
func (q *Queue) Stats(ctx context.Context, queue string) (mq.Stats, error) {
	return q.stats(ctx, "stats", queue, nil)
}

// KeyStats implements mq.MessageQueue.
func (q *Queue) KeyStats(ctx context.Context, queue, routingKey string) (mq.Stats, error) {
	return q.stats(ctx, "key stats", queue, &routingKey)
}

func (q *Queue) stats(ctx context.Context, op, queue string, routingKey *string) (mq.Stats, error) {
	if q.closed.Load() {
		return mq.Stats{}, mq.Closed(op)
	}
	if err := mq.CheckQueue(op, queue); err != nil {
		return mq.Stats{}, err
	}
	where, args := ` WHERE queue = ?`, []any{queue}
	if routingKey != nil {
		where, args = where+` AND routing_key = ?`, append(args, *routingKey)
	}
	now := micros(q.now())
	var st struct {
		Ready   sql.NullInt64 `db:"ready"`
		Locked  sql.NullInt64 `db:"locked"`
		Delayed sql.NullInt64 `db:"delayed"`
		Max     sql.NullInt64 `db:"max_attempt"`
	}
	err := q.stmts.Get(ctx, q.db, &st, `SELECT
		SUM(visible_at <= ?) AS ready,
		SUM(visible_at > ? AND lock_token IS NOT NULL) AS locked,
		SUM(visible_at > ? AND lock_token IS NULL) AS delayed,
		MAX(attempts) AS max_attempt
		FROM mq_messages`+where, append([]any{now, now, now}, args...)...)
	if err != nil {
		return mq.Stats{}, wrap(op, err)
	}
	return mq.Stats{Ready: int(st.Ready.Int64), Locked: int(st.Locked.Int64), Delayed: int(st.Delayed.Int64), MaxAttempt: int(st.Max.Int64)}, nil
}

// Close implements mq.MessageQueue. It closes the database only if Open created it.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.hub.NotifyAll() // long polls in progress end with ErrClosed
	err := q.stmts.Close()
	if q.owned {
		err = errors.Join(err, q.db.Close())
	}
	return err
}
