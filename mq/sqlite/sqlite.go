package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3"

	"github.com/duroq/duroq/internal/groupcommit"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/mqsql"
	"github.com/duroq/duroq/internal/sqliteconn"
	"github.com/duroq/duroq/internal/sqltext"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/internal/stmtcache"
	"github.com/duroq/duroq/internal/wake"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/sqlitedb"
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
	DB sqlitedb.Options
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
	writer *sqliteconn.Writer
	stmts  *stmtcache.Cache
	hub    wake.Hub
	closed atomic.Bool
	// unwatch ends the subscription that wakes this process's long polls when
	// another process commits (sqliteconn.Watcher).
	unwatch func()
	// enqueues groups concurrent Enqueue calls into shared transactions.
	enqueues *groupcommit.Group[[]mq.Message]
	// enqueueCommits counts the transactions of their own enqueues committed.
	enqueueCommits atomic.Int64
	// dedupSweep paces the deletion of expired deduplication ids.
	dedupSweep mqsql.Sweeper
}

var _ mq.TxQueue = (*Queue)(nil)

// Open opens (creating if needed) the database at path, applies this package's
// migrations and returns a queue that owns the database: Close closes it.
func Open(path string, o Options) (*Queue, error) {
	db, err := sqlitedb.Open(path, o.DB)
	if err != nil {
		return nil, openError(err)
	}
	q := New(db, o)
	q.owned = true
	if err := q.Migrate(context.Background()); err != nil {
		q.Close()
		return nil, openError(err)
	}
	return q, nil
}

// openError marks err ErrCorrupt when the file is damaged or not a database.
func openError(err error) error {
	if corrupt(err) {
		return mq.Corrupt("open", err)
	}
	return err
}

// New returns a queue over db, a database the caller owns (Close leaves it open) and
// may share with other stores. Call Migrate before use. Until Close, the queue
// watches db for other processes' commits on one connection of db's pool (one per
// database, however many queues).
func New(db *sqlx.DB, o Options) *Queue {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	q := &Queue{db: db, now: o.Now, log: o.Logger, writer: sqliteconn.WriterOf(db), stmts: stmtcache.New(db)}
	q.enqueues = groupcommit.New(q.enqueueRound)
	// SQLite signals nothing across processes: a watcher polling the database wakes
	// the long polls within milliseconds of another process's commit.
	q.unwatch = sqliteconn.WatcherOf(db).Subscribe(q.hub.NotifyAll)
	return q
}

// changedKey names the hub channel of Changed: no queue has an empty name.
const changedKey = ""

// Changed returns a channel closed at the next change of the database seen by this
// process: a commit of another process (noticed within about 10 ms) or Close. Take
// it before reading the state it waits for, so a change in between is not missed.
func (q *Queue) Changed() <-chan struct{} { return q.hub.Chan(changedKey) }

// Migrate creates or upgrades the queue's tables. It is idempotent and safe when
// several processes call it at once.
func (q *Queue) Migrate(ctx context.Context) error {
	return migrate.Run(ctx, q.db.DB, migrate.SQLite, migrations, MigrationLine)
}

// DB returns the underlying database, for transactions spanning this queue and other
// stores (see the *Tx methods).
func (q *Queue) DB() *sqlx.DB { return q.db }

// Database implements mq.TxQueue: the SQLite database the queue lives in.
func (q *Queue) Database() txn.Database { return sqliteconn.Database(q.db) }

// In implements mq.TxQueue: the queue's operations inside tx, a transaction its
// Database runs; consumers are woken once tx commits.
func (q *Queue) In(tx txn.Tx) (mq.QueueTx, error) { return mqsql.In(q, tx) }

// Notify wakes this process's DequeueBatch calls waiting on queue. The *Tx methods
// cannot know when their transaction commits: call Notify after committing one that
// enqueued or released messages, or waiters see them only at their next poll.
func (q *Queue) Notify(queue string) { q.hub.Notify(queue) }

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

// runner is what a queue operation's statements run on: the caller's *sqlx.Tx (the
// *Tx methods) or the writer's transaction (run, enqueueRound).
type runner = sqliteconn.Runner

// run runs fn in one write transaction and wakes the queues it names afterwards.
func (q *Queue) run(ctx context.Context, op string, fn func(tx runner) ([]string, error)) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	var wakeQueues []string
	err := q.writer.RunConn(ctx, func(tx *sqliteconn.ConnTx) (err error) {
		wakeQueues, err = fn(tx)
		return err
	})
	if err != nil {
		return wrap(op, err)
	}
	q.wake(wakeQueues)
	return nil
}

// wake wakes this process's long polls on queues, after a commit that made messages
// ready there.
func (q *Queue) wake(queues []string) {
	for _, name := range queues {
		q.hub.Notify(name)
	}
}

// wrap names op in errors that do not already come from the mq package or a
// wrap. A damaged database is ErrCorrupt: retrying cannot help.
func wrap(op string, err error) error {
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
	if sqltx.DBClosed(err) { // an operation under way when Close ran
		return fmt.Errorf("%w: %w", mq.Closed(op), err)
	}
	return &opError{op, err}
}

// opError is a failure of operation op of this package.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return "mq/sqlite: " + e.op + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// corrupt reports whether err says the database file is damaged or is not a
// database at all.
func corrupt(err error) bool {
	se, ok := errors.AsType[sqlite3.Error](err)
	return ok && (se.Code == sqlite3.ErrCorrupt || se.Code == sqlite3.ErrNotADB)
}

// EnqueueRounds reports how many transactions of their own this Queue's Enqueue
// calls have committed: concurrent calls share one (group commit), and a round
// that rides along in another transaction of the process (see enqueueRound) makes
// none, so this is at most the number of calls. Load reports count commits with it.
func (q *Queue) EnqueueRounds() int64 { return q.enqueueCommits.Load() }

// Enqueue implements mq.MessageQueue: all messages in one transaction.
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
// they share a commit (with synchronous=FULL, its fsync): that of the transaction
// holding the writer if there is one (the runtime's batches, consumers' claims and
// settlements), or else one of their own that goes ahead of the waiting writers (see
// sqliteconn.Writer.RunAlong). A producer waits on its Enqueue (a client starting
// an orchestration), and the batches it passes grow by what arrived meanwhile.
func (q *Queue) enqueueRound(ctx context.Context, calls [][]mq.Message) error {
	const op = "enqueue"
	if q.closed.Load() {
		return mq.Closed(op)
	}
	msgs := slices.Concat(calls...)
	alone, err := q.writer.RunAlong(ctx, func(ctx context.Context, tx sqliteconn.Runner) error {
		return q.insert(ctx, tx, op, msgs)
	})
	if err != nil {
		return wrap(op, err)
	}
	if alone {
		q.enqueueCommits.Add(1)
	}
	q.wake(queueNames(msgs))
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
	msgs = mq.Traced(ctx, msgs)
	if err := q.checkEnqueue(msgs); err != nil {
		return err
	}
	return q.insert(ctx, tx, "enqueue", msgs)
}

// checkEnqueue refuses an enqueue of msgs on a closed queue or of invalid messages.
func (q *Queue) checkEnqueue(msgs []mq.Message) error {
	const op = "enqueue"
	if q.closed.Load() {
		return mq.Closed(op)
	}
	return mq.CheckMessages(op, msgs)
}

// insert stores msgs, which are valid, for op (enqueue, or the follow-ups of a
// settlement).
func (q *Queue) insert(ctx context.Context, tx runner, op string, msgs []mq.Message) error {
	now := q.now()
	msgs, err := q.remember(ctx, tx, mq.Deduplicated(msgs), now)
	if err != nil {
		return wrap(op, err)
	}
	for chunk := range slices.Chunk(msgs, insertChunk) {
		var sb strings.Builder
		sb.WriteString(`INSERT INTO mq_messages (queue, routing_key, message_key, session, tag, payload, enqueued_at, visible_at, attempts, lock_token, trace_parent, limit_group, priority) VALUES `)
		args := make([]any, 0, len(chunk)*11)
		for i, m := range chunk {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?,?,?,?,?,?,?,?,0,NULL,?,?,?)")
			payload := m.Payload
			if payload == nil {
				payload = []byte{}
			}
			args = append(args, m.Queue, nullable(m.RoutingKey), nullable(m.Key), nullable(m.Session), nullable(m.Tag),
				payload, micros(now), micros(now.Add(m.Delay)), nullable(m.TraceParent), nullable(m.LimitGroup), m.Priority)
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

// dedupChunk bounds the ids of one statement of remember (3 parameters each).
const dedupChunk = 2048

// remember records the DedupIDs of msgs in tx and returns the messages to store:
// those without a DedupID, or whose DedupID their queue does not remember at now (a
// forgotten, expired one is renewed). Once a second, it also deletes expired ids.
func (q *Queue) remember(ctx context.Context, tx runner, msgs []mq.Message, now time.Time) ([]mq.Message, error) {
	var args []any
	for _, m := range msgs {
		if m.DedupID != "" {
			args = append(args, m.Queue, m.DedupID, micros(m.DedupUntil(now)))
		}
	}
	if args == nil {
		return msgs, nil
	}
	type qd struct{ queue, id string }
	fresh := map[qd]bool{}
	for chunk := range slices.Chunk(args, 3*dedupChunk) {
		rows, err := q.stmts.Query(ctx, tx, `INSERT INTO mq_dedup (queue, dedup_id, expires_at) VALUES `+sqltext.Rows(len(chunk)/3, 3)+`
			ON CONFLICT (queue, dedup_id) DO UPDATE SET expires_at = excluded.expires_at WHERE mq_dedup.expires_at <= ?
			RETURNING queue, dedup_id`, append(chunk, micros(now))...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k qd
			if err := rows.Scan(&k.queue, &k.id); err != nil {
				rows.Close()
				return nil, err
			}
			fresh[k] = true
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	if q.dedupSweep.Due(now, mqsql.SweepEvery) {
		if _, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_dedup WHERE (queue, dedup_id) IN (
			SELECT queue, dedup_id FROM mq_dedup WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`, micros(now), mqsql.SweepLimit); err != nil {
			return nil, err
		}
	}
	return slices.DeleteFunc(slices.Clone(msgs), func(m mq.Message) bool { return m.DedupID != "" && !fresh[qd{m.Queue, m.DedupID}] }), nil
}

// duplicateKey names the pending message key that made an insert of msgs fail. The
// unique index, not a lookup per message, guards the keys: only a failed insert
// pays for finding which key it was (SQLite undid just the failed statement).
func (q *Queue) duplicateKey(ctx context.Context, tx runner, op string, msgs []mq.Message, cause error) error {
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

// Lock implements mq.MessageQueue.
func (q *Queue) Lock(ctx context.Context, token string) (li mq.LockInfo, err error) {
	err = q.run(ctx, "lock", func(tx runner) ([]string, error) {
		li, err = q.lock(ctx, tx, token)
		return nil, err
	})
	return li, err
}

// LockTx is Lock inside tx.
func (q *Queue) LockTx(ctx context.Context, tx *sqlx.Tx, token string) (mq.LockInfo, error) {
	return q.lock(ctx, tx, token)
}

func (q *Queue) lock(ctx context.Context, tx runner, token string) (mq.LockInfo, error) {
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
	err = q.run(ctx, "renew", func(tx runner) ([]string, error) {
		until, err = q.renew(ctx, tx, token, extend)
		return nil, err
	})
	return until, err
}

// RenewTx is Renew inside tx.
func (q *Queue) RenewTx(ctx context.Context, tx *sqlx.Tx, token string, extend time.Duration) (time.Time, error) {
	return q.renew(ctx, tx, token, extend)
}

func (q *Queue) renew(ctx context.Context, tx runner, token string, extend time.Duration) (time.Time, error) {
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
	var rows []struct {
		Queue      string         `db:"queue"`
		RoutingKey sql.NullString `db:"routing_key"`
		Session    sql.NullString `db:"session"`
	}
	if err := q.stmts.Select(ctx, tx, &rows, `UPDATE mq_messages SET locked_until = ?, visible_at = ? WHERE lock_token = ? AND locked_until > ?
		RETURNING queue, routing_key, session`, until, until, token, micros(now)); err != nil {
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
	var sessions []any // (queue, session) pairs; a batch has one queue
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Session.Valid && !seen[r.Session.String] {
			seen[r.Session.String] = true
			sessions = append(sessions, r.Queue, r.Session.String)
		}
	}
	if err := q.touchSessions(ctx, tx, sessions, micros(now)); err != nil {
		return time.Time{}, wrap(op, err)
	}
	return fromMicros(until), nil
}

// Remove implements mq.MessageQueue.
func (q *Queue) Remove(ctx context.Context, queue string, keys ...string) (n int, err error) {
	err = q.run(ctx, "remove", func(tx runner) ([]string, error) {
		n, err = q.remove(ctx, tx, queue, keys...)
		return []string{queue}, err
	})
	return n, err
}

// RemoveTx is Remove inside tx. Call Notify after commit.
func (q *Queue) RemoveTx(ctx context.Context, tx *sqlx.Tx, queue string, keys ...string) (int, error) {
	return q.remove(ctx, tx, queue, keys...)
}

func (q *Queue) remove(ctx context.Context, tx runner, queue string, keys ...string) (int, error) {
	const op = "remove"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := mq.CheckQueue(op, queue); err != nil {
		return 0, err
	}
	var deleted []lockState
	for _, key := range keys {
		var row lockState
		err := q.stmts.Get(ctx, tx, &row, `DELETE FROM mq_messages WHERE queue = ? AND message_key = ? RETURNING lock_token, locked_until`, queue, key)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, wrap(op, err)
		}
		deleted = append(deleted, row)
	}
	if err := q.releaseLost(ctx, tx, deleted); err != nil {
		return 0, wrap(op, err)
	}
	return len(deleted), nil
}

// RemovePrefix implements mq.MessageQueue.
func (q *Queue) RemovePrefix(ctx context.Context, queue, prefix string) (n int, err error) {
	err = q.run(ctx, "remove prefix", func(tx runner) ([]string, error) {
		n, err = q.removePrefix(ctx, tx, queue, prefix)
		return []string{queue}, err
	})
	return n, err
}

// RemovePrefixTx is RemovePrefix inside tx. Call Notify after commit.
func (q *Queue) RemovePrefixTx(ctx context.Context, tx *sqlx.Tx, queue, prefix string) (int, error) {
	return q.removePrefix(ctx, tx, queue, prefix)
}

func (q *Queue) removePrefix(ctx context.Context, tx runner, queue, prefix string) (int, error) {
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
	var deleted []lockState
	if err := q.stmts.Select(ctx, tx, &deleted, query+` RETURNING lock_token, locked_until`, args...); err != nil {
		return 0, wrap(op, err)
	}
	if err := q.releaseLost(ctx, tx, deleted); err != nil {
		return 0, wrap(op, err)
	}
	return len(deleted), nil
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

// lockState is the lock of a deleted message.
type lockState struct {
	Token       sql.NullString `db:"lock_token"`
	LockedUntil sql.NullInt64  `db:"locked_until"`
}

// releaseLost frees what remains of the live batches that lost a message (deleted
// are the lock states of the deleted messages): their other messages become
// eligible now and their key locks end. The tokens travel as one JSON array, so the
// statements are the same whatever their number.
func (q *Queue) releaseLost(ctx context.Context, tx runner, deleted []lockState) error {
	now := micros(q.now())
	var tokens []string
	seen := map[string]bool{}
	for _, d := range deleted {
		if t := d.Token.String; d.Token.Valid && d.LockedUntil.Int64 > now && !seen[t] {
			seen[t] = true
			tokens = append(tokens, t)
		}
	}
	if len(tokens) == 0 {
		return nil
	}
	list, err := jsonArray(tokens)
	if err != nil {
		return err
	}
	const in = ` lock_token IN (SELECT value FROM json_each(?))`
	if _, err := q.stmts.Exec(ctx, tx, `UPDATE mq_messages SET lock_token = NULL, locked_until = NULL, visible_at = ? WHERE`+in, now, list); err != nil {
		return err
	}
	if _, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_keys WHERE attr IS NULL AND`+in, list); err != nil {
		return err
	}
	_, err = q.stmts.Exec(ctx, tx, `UPDATE mq_keys SET lock_token = NULL, locked_until = NULL WHERE`+in, list)
	return err
}

// jsonArray encodes v as JSON text for json_each (a BLOB would be read as JSONB).
func jsonArray[T any](v []T) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// PurgeKey implements mq.MessageQueue.
func (q *Queue) PurgeKey(ctx context.Context, queue, routingKey string) (n int, err error) {
	err = q.run(ctx, "purge key", func(tx runner) ([]string, error) {
		n, err = q.purgeKey(ctx, tx, queue, routingKey)
		return nil, err
	})
	return n, err
}

// PurgeKeyTx is PurgeKey inside tx.
func (q *Queue) PurgeKeyTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string) (int, error) {
	return q.purgeKey(ctx, tx, queue, routingKey)
}

func (q *Queue) purgeKey(ctx context.Context, tx runner, queue, routingKey string) (int, error) {
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
	return q.run(ctx, "set key attribute", func(tx runner) ([]string, error) {
		return nil, q.setKeyAttr(ctx, tx, queue, routingKey, attr)
	})
}

// SetKeyAttrTx is SetKeyAttr inside tx.
func (q *Queue) SetKeyAttrTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string, attr *int64) error {
	return q.setKeyAttr(ctx, tx, queue, routingKey, attr)
}

func (q *Queue) setKeyAttr(ctx context.Context, tx runner, queue, routingKey string, attr *int64) error {
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
			ON CONFLICT (queue, routing_key) DO UPDATE SET attr = excluded.attr WHERE attr IS NOT excluded.attr`, queue, routingKey, *attr)
	} else {
		_, err = q.stmts.Exec(ctx, tx, `DELETE FROM mq_keys WHERE queue = ? AND routing_key = ? AND (locked_until IS NULL OR locked_until <= ?)`,
			queue, routingKey, micros(q.now()))
		if err == nil {
			// A row whose attribute is already clear is not written: the runtime
			// clears the pin of every execution it starts, nearly always unset.
			_, err = q.stmts.Exec(ctx, tx, `UPDATE mq_keys SET attr = NULL WHERE queue = ? AND routing_key = ? AND attr IS NOT NULL`, queue, routingKey)
		}
	}
	return wrapNil(op, err)
}

// SetKeyAttrsTx sets the attribute of each routing key of keys in queue to the
// attribute of the same index in attrs (nil clears it), inside tx.
func (q *Queue) SetKeyAttrsTx(ctx context.Context, tx *sqlx.Tx, queue string, keys []string, attrs []*int64) error {
	if len(keys) != len(attrs) {
		return &mq.InvalidError{Op: "set key attribute", Field: "attrs", Reason: fmt.Sprintf("%d attributes for %d keys", len(attrs), len(keys))}
	}
	for i, key := range keys {
		if err := q.setKeyAttr(ctx, tx, queue, key, attrs[i]); err != nil {
			return err
		}
	}
	return nil
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
	err = q.run(ctx, op, func(tx runner) ([]string, error) {
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
	var row statsRow
	if err := q.stmts.Get(ctx, q.db, &row, `SELECT `+statsColumns+`, EXISTS (SELECT 1 FROM mq_paused WHERE queue = ?) AS paused FROM mq_messages`+where,
		append([]any{now, now, now, now, now, queue}, args...)...); err != nil {
		return mq.Stats{}, wrap(op, err)
	}
	return row.stats(), nil
}

// statsColumns count messages by state as mq.Stats does; its five parameters are now.
const statsColumns = `SUM(visible_at <= ?) AS ready,
	SUM(visible_at > ? AND lock_token IS NOT NULL) AS locked,
	SUM(visible_at > ? AND lock_token IS NULL) AS delayed,
	MAX(attempts) AS max_attempt,
	MIN(CASE WHEN visible_at > ? AND lock_token IS NULL THEN visible_at END) AS next_visible,
	MIN(CASE WHEN visible_at <= ? THEN visible_at END) AS oldest_ready`

// statsRow is a row of statsColumns and of whether the queue is paused (and of the
// queue's name, for Queues).
type statsRow struct {
	Queue   string        `db:"queue"`
	Ready   sql.NullInt64 `db:"ready"`
	Locked  sql.NullInt64 `db:"locked"`
	Delayed sql.NullInt64 `db:"delayed"`
	Max     sql.NullInt64 `db:"max_attempt"`
	Next    sql.NullInt64 `db:"next_visible"`
	Oldest  sql.NullInt64 `db:"oldest_ready"`
	Paused  bool          `db:"paused"`
}

func (r statsRow) stats() mq.Stats {
	s := mq.Stats{Ready: int(r.Ready.Int64), Locked: int(r.Locked.Int64), Delayed: int(r.Delayed.Int64), MaxAttempt: int(r.Max.Int64), Paused: r.Paused}
	if r.Next.Valid {
		s.NextVisible = fromMicros(r.Next.Int64)
	}
	if r.Oldest.Valid {
		s.OldestReady = fromMicros(r.Oldest.Int64)
	}
	return s
}

// Queues implements mq.Admin: one grouped read of every message, joined with the
// paused queues.
func (q *Queue) Queues(ctx context.Context) ([]mq.QueueStats, error) {
	const op = "queues"
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	now := micros(q.now())
	var rows []statsRow
	if err := q.db.SelectContext(ctx, &rows, `SELECT coalesce(s.queue, p.queue) AS queue, s.ready, s.locked, s.delayed, s.max_attempt,
			s.next_visible, s.oldest_ready, p.queue IS NOT NULL AS paused
		FROM (SELECT queue, `+statsColumns+` FROM mq_messages GROUP BY queue) s FULL JOIN mq_paused p ON p.queue = s.queue
		ORDER BY 1`, now, now, now, now, now); err != nil {
		return nil, wrap(op, err)
	}
	out := make([]mq.QueueStats, len(rows))
	for i, r := range rows {
		out[i] = mq.QueueStats{Queue: r.Queue, Stats: r.stats()}
	}
	return out, nil
}

// Pause implements mq.Admin.
func (q *Queue) Pause(ctx context.Context, queue string) error {
	return q.pause(ctx, "pause", queue, `INSERT INTO mq_paused (queue) VALUES (?) ON CONFLICT DO NOTHING`, nil)
}

// Resume implements mq.Admin: the waiting long polls of this process are woken
// after the commit, those of the others by their watcher (see New).
func (q *Queue) Resume(ctx context.Context, queue string) error {
	return q.pause(ctx, "resume", queue, `DELETE FROM mq_paused WHERE queue = ?`, []string{queue})
}

// pause runs stmt, which pauses or resumes queue, for op, then wakes the long polls
// of the queues in wake.
func (q *Queue) pause(ctx context.Context, op, queue, stmt string, wake []string) error {
	if err := mq.CheckQueue(op, queue); err != nil {
		return err
	}
	return q.run(ctx, op, func(tx runner) ([]string, error) {
		_, err := q.stmts.Exec(ctx, tx, stmt, queue)
		return wake, err
	})
}

// Close implements mq.MessageQueue. It closes the database only if Open created it,
// and then returns once the database is closed: when no other process has the file
// open, its WAL is checkpointed and the -wal and -shm files are removed.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.unwatch()
	q.hub.NotifyAll() // long polls in progress end with ErrClosed
	err := q.stmts.Close()
	if q.owned {
		err = errors.Join(err, q.db.Close())
	}
	return err
}
