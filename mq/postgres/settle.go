package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/jmoiron/sqlx"
)

// The statements that end or extend a lock (Ack, Abandon, Renew) are single
// statements, so outside a caller's transaction they cost one round trip. Each
// starts with lockBatch: it finds the batch of token $1 and, if the batch is keyed,
// waits for the key's advisory lock before any row is touched (the lock order of
// doc.go). The rows of the batch are then found by token; a row that changed while
// the statement waited for the lock is re-checked by PostgreSQL against its newest
// version (READ COMMITTED), so a batch taken over in the meantime is not touched.

// lockBatch: $1 is the token.
var lockBatch = `b AS MATERIALIZED (
	SELECT m.queue, m.routing_key,
		(SELECT count(*) FROM pg_advisory_xact_lock(` + keyLockID("m.queue", "m.routing_key") + `) WHERE m.routing_key IS NOT NULL) AS locked
	FROM mq_messages m WHERE m.lock_token = $1 LIMIT 1
)`

// batchKey is the routing key of the batch rows in done (no row for an un-keyed
// batch). A batch has one key and at most one session, so the statements below
// compare with scalar subqueries: primary-key lookups whatever the planner knows.
const batchKey = `bk AS MATERIALIZED (SELECT queue, routing_key FROM done WHERE routing_key IS NOT NULL LIMIT 1)`

const keyMatch = `k.queue = (SELECT queue FROM bk) AND k.routing_key = (SELECT routing_key FROM bk) AND k.lock_token = $1`

// releaseKey ends the key lock of token $1: the key's row goes if it holds no
// attribute, else only its lock is cleared. kupd runs only when kdel deleted
// nothing, so a concurrent change of the attribute never leaves the key locked.
const releaseKey = batchKey + `,
kdel AS (DELETE FROM mq_keys k WHERE ` + keyMatch + ` AND k.attr IS NULL RETURNING 1),
kupd AS (UPDATE mq_keys k SET lock_token = NULL, locked_until = NULL WHERE ` + keyMatch + ` AND NOT EXISTS (SELECT 1 FROM kdel))`

// touchSessions records activity ($2, now) on the live session of the rows in done.
const touchSessions = `sess AS (
	UPDATE mq_sessions s SET last_activity_at = $2
	WHERE s.queue = (SELECT queue FROM done WHERE session IS NOT NULL LIMIT 1)
		AND s.session = (SELECT session FROM done WHERE session IS NOT NULL LIMIT 1)
		AND s.locked_until > $2
)`

// ackSQL deletes the batch of token $1 if its lock is live at $2, releases its key and
// notifies the queue when a key was released (its waiting messages are eligible now).
var ackSQL = `WITH ` + lockBatch + `,
done AS (
	DELETE FROM mq_messages m USING b
	WHERE m.lock_token = $1 AND m.locked_until > $2 AND b.locked >= 0
	RETURNING m.queue, m.routing_key, m.session
),
` + releaseKey + `,
` + touchSessions + `
SELECT count(*) AS n, coalesce(min(queue), '') AS queue, bool_or(routing_key IS NOT NULL) IS TRUE AS keyed,
	(SELECT count(*) FROM bk, pg_notify(` + channelExpr + `, bk.queue)) AS notified
FROM done`

// abandonSQL releases the batch of token $1 (live at $2): visible again at $3, the
// fetch's attempt undone when $4. The queue is notified.
var abandonSQL = `WITH ` + lockBatch + `,
done AS (
	UPDATE mq_messages m SET lock_token = NULL, locked_until = NULL, visible_at = $3,
		attempts = CASE WHEN $4::boolean AND m.attempts > 0 THEN m.attempts - 1 ELSE m.attempts END
	FROM b
	WHERE m.lock_token = $1 AND m.locked_until > $2 AND b.locked >= 0
	RETURNING m.queue, m.routing_key, m.session
),
` + releaseKey + `,
` + touchSessions + `
SELECT count(*) AS n, coalesce(min(queue), '') AS queue, bool_or(routing_key IS NOT NULL) IS TRUE AS keyed,
	(SELECT count(*) FROM (SELECT DISTINCT queue FROM done) d, pg_notify(` + channelExpr + `, d.queue)) AS notified
FROM done`

// renewSQL extends the live lock of token $1 (live at $2) to $3.
var renewSQL = `WITH ` + lockBatch + `,
done AS (
	UPDATE mq_messages m SET locked_until = $3, visible_at = $3
	FROM b
	WHERE m.lock_token = $1 AND m.locked_until > $2 AND b.locked >= 0
	RETURNING m.queue, m.routing_key, m.session
),
` + batchKey + `,
krenew AS (UPDATE mq_keys k SET locked_until = $3 WHERE ` + keyMatch + `),
` + touchSessions + `
SELECT count(*) AS n, coalesce(min(queue), '') AS queue, bool_or(routing_key IS NOT NULL) IS TRUE AS keyed, 0 AS notified
FROM done`

// settled is what a settling statement reports.
type settled struct {
	N        int    `db:"n"`
	Queue    string `db:"queue"`
	Keyed    bool   `db:"keyed"`
	Notified int    `db:"notified"`
}

// settle runs one of the settling statements for token and fails with ErrLockLost
// when the token held nothing.
func settle(ctx context.Context, ex sqlx.QueryerContext, op, query, token string, args ...any) (settled, error) {
	var s settled
	if err := sqlx.GetContext(ctx, ex, &s, query, append([]any{token}, args...)...); err != nil {
		return s, err
	}
	if s.N == 0 {
		return s, mq.LockLost(op, token)
	}
	return s, nil
}

// Ack implements mq.MessageQueue. Without follow-up messages it is one statement.
func (q *Queue) Ack(ctx context.Context, token string, then ...mq.Message) error {
	const op = "ack"
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := checkToken(op, token); err != nil {
		return err
	}
	if err := checkMessages(op, then); err != nil {
		return err
	}
	var s settled
	var err error
	if len(then) == 0 {
		err = q.exec(ctx, op, func() (err error) { s, err = q.ack(ctx, q.db, token, nil); return err })
	} else {
		err = q.inTx(ctx, op, func(tx *sqlx.Tx) (err error) { s, err = q.ack(ctx, tx, token, then); return err })
	}
	if err != nil {
		return q.duplicate(ctx, op, then, err)
	}
	if s.Keyed {
		q.wakeLocal(s.Queue) // the key's messages that waited for its lock are eligible now
	}
	q.wakeLocal(queueNames(then)...)
	return nil
}

// AckTx is Ack inside tx. Waiters in every process are notified when tx commits.
func (q *Queue) AckTx(ctx context.Context, tx *sqlx.Tx, token string, then ...mq.Message) error {
	const op = "ack"
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := checkToken(op, token); err != nil {
		return err
	}
	if err := checkMessages(op, then); err != nil {
		return err
	}
	if _, err := q.ack(ctx, tx, token, then); err != nil {
		return q.duplicate(ctx, op, then, wrap(op, err))
	}
	return nil
}

func (q *Queue) ack(ctx context.Context, ex sqlx.ExtContext, token string, then []mq.Message) (settled, error) {
	s, err := settle(ctx, ex, "ack", ackSQL, token, micros(q.now()))
	if err != nil || len(then) == 0 {
		return s, err
	}
	return s, q.insert(ctx, ex, then)
}

// Abandon implements mq.MessageQueue: one statement.
func (q *Queue) Abandon(ctx context.Context, token string, opts mq.AbandonOptions) error {
	const op = "abandon"
	if err := q.checkAbandon(op, token, opts); err != nil {
		return err
	}
	var s settled
	if err := q.exec(ctx, op, func() (err error) { s, err = q.abandon(ctx, q.db, token, opts); return err }); err != nil {
		return err
	}
	q.wakeLocal(s.Queue)
	return nil
}

// AbandonTx is Abandon inside tx. Waiters in every process are notified when tx
// commits.
func (q *Queue) AbandonTx(ctx context.Context, tx *sqlx.Tx, token string, opts mq.AbandonOptions) error {
	const op = "abandon"
	if err := q.checkAbandon(op, token, opts); err != nil {
		return err
	}
	_, err := q.abandon(ctx, tx, token, opts)
	return wrap(op, err)
}

func (q *Queue) checkAbandon(op, token string, opts mq.AbandonOptions) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := mq.CheckDuration(op, "Delay", opts.Delay); err != nil {
		return err
	}
	return checkToken(op, token)
}

func (q *Queue) abandon(ctx context.Context, ex sqlx.QueryerContext, token string, opts mq.AbandonOptions) (settled, error) {
	now := q.now()
	return settle(ctx, ex, "abandon", abandonSQL, token, micros(now), micros(now.Add(opts.Delay)), opts.IgnoreAttempt)
}

// Renew implements mq.MessageQueue: one statement.
func (q *Queue) Renew(ctx context.Context, token string, extend time.Duration) (until time.Time, err error) {
	const op = "renew"
	if err := q.checkRenew(op, token, extend); err != nil {
		return time.Time{}, err
	}
	err = q.exec(ctx, op, func() (err error) { until, err = q.renew(ctx, q.db, token, extend); return err })
	return until, err
}

// RenewTx is Renew inside tx.
func (q *Queue) RenewTx(ctx context.Context, tx *sqlx.Tx, token string, extend time.Duration) (time.Time, error) {
	const op = "renew"
	if err := q.checkRenew(op, token, extend); err != nil {
		return time.Time{}, err
	}
	until, err := q.renew(ctx, tx, token, extend)
	return until, wrap(op, err)
}

func (q *Queue) checkRenew(op, token string, extend time.Duration) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := mq.CheckDuration(op, "extend", extend); err != nil {
		return err
	}
	return checkToken(op, token)
}

func (q *Queue) renew(ctx context.Context, ex sqlx.QueryerContext, token string, extend time.Duration) (time.Time, error) {
	now := q.now()
	until := micros(now.Add(extend))
	if _, err := settle(ctx, ex, "renew", renewSQL, token, micros(now), until); err != nil {
		return time.Time{}, err
	}
	return fromMicros(until), nil
}

// Lock implements mq.MessageQueue: one read.
func (q *Queue) Lock(ctx context.Context, token string) (li mq.LockInfo, err error) {
	const op = "lock"
	if q.closed.Load() {
		return mq.LockInfo{}, mq.Closed(op)
	}
	err = q.exec(ctx, op, func() (err error) { li, err = q.lock(ctx, q.db, token); return err })
	return li, err
}

// LockTx is Lock inside tx.
func (q *Queue) LockTx(ctx context.Context, tx *sqlx.Tx, token string) (mq.LockInfo, error) {
	const op = "lock"
	if q.closed.Load() {
		return mq.LockInfo{}, mq.Closed(op)
	}
	li, err := q.lock(ctx, tx, token)
	return li, wrap(op, err)
}

func (q *Queue) lock(ctx context.Context, ex sqlx.QueryerContext, token string) (mq.LockInfo, error) {
	const op = "lock"
	if err := checkToken(op, token); err != nil {
		return mq.LockInfo{}, err
	}
	var row struct {
		Queue       string         `db:"queue"`
		RoutingKey  sql.NullString `db:"routing_key"`
		LockedUntil int64          `db:"locked_until"`
		N           int            `db:"n"`
	}
	err := sqlx.GetContext(ctx, ex, &row, `SELECT queue, routing_key, max(locked_until) AS locked_until, count(*) AS n
		FROM mq_messages WHERE lock_token = $1 AND locked_until > $2 GROUP BY queue, routing_key`, token, micros(q.now()))
	if errors.Is(err, sql.ErrNoRows) {
		return mq.LockInfo{}, mq.LockLost(op, token)
	}
	if err != nil {
		return mq.LockInfo{}, err
	}
	return mq.LockInfo{Queue: row.Queue, RoutingKey: row.RoutingKey.String, LockedUntil: fromMicros(row.LockedUntil), Messages: row.N}, nil
}
