package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/duroq/duroq/mq"
	"github.com/jmoiron/sqlx"
)

// Remove implements mq.MessageQueue: one transaction.
func (q *Queue) Remove(ctx context.Context, queue string, keys ...string) (n int, err error) {
	const op = "remove"
	if err := q.checkRemove(op, queue, keys); err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	var released bool
	err = q.inTx(ctx, op, func(tx *sqlx.Tx) (err error) {
		n, released, err = q.remove(ctx, tx, queue, `message_key = ANY($2::text[])`, keys)
		return err
	})
	if released {
		q.wakeLocal(queue)
	}
	return n, err
}

// RemoveTx is Remove inside tx. Waiters in every process are notified when tx
// commits.
func (q *Queue) RemoveTx(ctx context.Context, tx *sqlx.Tx, queue string, keys ...string) (int, error) {
	const op = "remove"
	if err := q.checkRemove(op, queue, keys); err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	n, _, err := q.remove(ctx, tx, queue, `message_key = ANY($2::text[])`, keys)
	return n, wrap(op, err)
}

func (q *Queue) checkRemove(op, queue string, keys []string) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := checkQueue(op, queue); err != nil {
		return err
	}
	for i, k := range keys {
		if err := checkText(op, fmt.Sprintf("key %d", i), k); err != nil {
			return err
		}
	}
	return nil
}

// RemovePrefix implements mq.MessageQueue: one transaction.
func (q *Queue) RemovePrefix(ctx context.Context, queue, prefix string) (n int, err error) {
	const op = "remove prefix"
	if err := q.checkRemovePrefix(op, queue, prefix); err != nil {
		return 0, err
	}
	match, args := prefixMatch(prefix)
	var released bool
	err = q.inTx(ctx, op, func(tx *sqlx.Tx) (err error) {
		n, released, err = q.remove(ctx, tx, queue, match, args...)
		return err
	})
	if released {
		q.wakeLocal(queue)
	}
	return n, err
}

// RemovePrefixTx is RemovePrefix inside tx. Waiters in every process are notified
// when tx commits.
func (q *Queue) RemovePrefixTx(ctx context.Context, tx *sqlx.Tx, queue, prefix string) (int, error) {
	const op = "remove prefix"
	if err := q.checkRemovePrefix(op, queue, prefix); err != nil {
		return 0, err
	}
	match, args := prefixMatch(prefix)
	n, _, err := q.remove(ctx, tx, queue, match, args...)
	return n, wrap(op, err)
}

func (q *Queue) checkRemovePrefix(op, queue, prefix string) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := errors.Join(checkQueue(op, queue), nonEmpty(op, "prefix", prefix)); err != nil {
		return err
	}
	return checkText(op, "prefix", prefix)
}

// prefixMatch is the condition (arguments from $2) selecting the message keys that
// start with prefix: a range of the message-key index, which compares bytewise
// ("C" collation), so the range is exact.
func prefixMatch(prefix string) (string, []any) {
	if end, ok := prefixEnd(prefix); ok {
		return `message_key >= $2 AND message_key < $3`, []any{prefix, end}
	}
	return `message_key >= $2`, []any{prefix}
}

// prefixEnd is the smallest valid UTF-8 string greater than every string starting
// with p (UTF-8 orders bytewise as it orders code points).
func prefixEnd(p string) (string, bool) {
	for len(p) > 0 {
		r, size := utf8.DecodeLastRuneInString(p)
		p = p[:len(p)-size]
		if r == utf8.MaxRune {
			continue
		}
		r++
		if r >= 0xD800 && r <= 0xDFFF { // surrogates are not characters
			r = 0xE000
		}
		return p + string(r), true
	}
	return "", false
}

// remove deletes the messages of queue matching match (a condition on
// mq_messages whose arguments start at $2). It first takes, in ascending lock-id
// order, the advisory locks of the routing keys of the matching messages; a
// removed message whose batch was live invalidates the batch: the batch's other
// messages become eligible now and its key lock ends. released reports that.
func (q *Queue) remove(ctx context.Context, tx sqlx.ExtContext, queue, match string, matchArgs ...any) (n int, released bool, err error) {
	args := append([]any{queue}, matchArgs...)
	var routing []string
	if err := sqlx.SelectContext(ctx, tx, &routing, `SELECT r.routing_key FROM (
			SELECT DISTINCT routing_key, `+keyLockID("$1", "routing_key")+` AS lock_id
			FROM mq_messages WHERE queue = $1 AND routing_key IS NOT NULL AND `+match+`
			ORDER BY lock_id
		) r, pg_advisory_xact_lock(r.lock_id)`, args...); err != nil {
		return 0, false, err
	}
	// Messages of other routing keys enqueued since are left alone: they arrived after
	// this Remove. Rows are locked in id order, so concurrent removals cannot deadlock.
	var rows []struct {
		RoutingKey  sql.NullString `db:"routing_key"`
		Token       sql.NullString `db:"lock_token"`
		LockedUntil sql.NullInt64  `db:"locked_until"`
	}
	p := len(args) + 1
	if err := sqlx.SelectContext(ctx, tx, &rows, fmt.Sprintf(`DELETE FROM mq_messages WHERE id IN (
			SELECT id FROM mq_messages
			WHERE queue = $1 AND %s AND (routing_key IS NULL OR routing_key = ANY($%d::text[]))
			ORDER BY id FOR UPDATE
		) RETURNING routing_key, lock_token::text AS lock_token, locked_until`, match, p),
		append(args, routing)...); err != nil {
		return 0, false, err
	}
	now := micros(q.now())
	var tokens, lostKeys []string
	for _, r := range rows {
		if r.Token.Valid && r.LockedUntil.Int64 > now {
			tokens = append(tokens, r.Token.String)
			if r.RoutingKey.Valid {
				lostKeys = append(lostKeys, r.RoutingKey.String)
			}
		}
	}
	if len(tokens) > 0 {
		if _, err := tx.ExecContext(ctx, `WITH
			free AS (UPDATE mq_messages SET lock_token = NULL, locked_until = NULL, visible_at = $2 WHERE lock_token = ANY($1::uuid[])),
			kdel AS (DELETE FROM mq_keys WHERE queue = $3 AND routing_key = ANY($4::text[]) AND lock_token = ANY($1::uuid[]) AND attr IS NULL),
			kupd AS (UPDATE mq_keys SET lock_token = NULL, locked_until = NULL
				WHERE queue = $3 AND routing_key = ANY($4::text[]) AND lock_token = ANY($1::uuid[]) AND attr IS NOT NULL)
			SELECT pg_notify(`+channelExpr+`, $3)`, tokens, now, queue, lostKeys); err != nil {
			return 0, false, err
		}
	}
	return len(rows), len(tokens) > 0, nil
}

// lockKeySQL takes the advisory lock of routing key $2 of queue $1, waiting for it.
var lockKeySQL = `SELECT count(*) FROM pg_advisory_xact_lock(` + keyLockID("$1::text", "$2::text") + `)`

// PurgeKey implements mq.MessageQueue: one transaction.
func (q *Queue) PurgeKey(ctx context.Context, queue, routingKey string) (n int, err error) {
	const op = "purge key"
	if err := q.checkKeyOp(op, queue, routingKey); err != nil {
		return 0, err
	}
	if routingKey == "" { // un-keyed messages have no routing key to purge by
		return 0, nil
	}
	err = q.inTx(ctx, op, func(tx *sqlx.Tx) (err error) { n, err = q.purgeKey(ctx, tx, queue, routingKey); return err })
	return n, err
}

// PurgeKeyTx is PurgeKey inside tx.
func (q *Queue) PurgeKeyTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string) (int, error) {
	const op = "purge key"
	if err := q.checkKeyOp(op, queue, routingKey); err != nil {
		return 0, err
	}
	if routingKey == "" {
		return 0, nil
	}
	n, err := q.purgeKey(ctx, tx, queue, routingKey)
	return n, wrap(op, err)
}

func (q *Queue) checkKeyOp(op, queue, routingKey string) error {
	if q.closed.Load() {
		return mq.Closed(op)
	}
	if err := checkQueue(op, queue); err != nil {
		return err
	}
	return checkText(op, "routing key", routingKey)
}

func (q *Queue) purgeKey(ctx context.Context, tx *sqlx.Tx, queue, routingKey string) (int, error) {
	if _, err := tx.ExecContext(ctx, lockKeySQL, queue, routingKey); err != nil {
		return 0, err
	}
	var n int
	err := tx.GetContext(ctx, &n, `WITH
		d AS (DELETE FROM mq_messages WHERE queue = $1 AND routing_key = $2 RETURNING 1),
		k AS (DELETE FROM mq_keys WHERE queue = $1 AND routing_key = $2)
		SELECT count(*) FROM d`, queue, routingKey)
	return n, err
}

// SetKeyAttr implements mq.MessageQueue: one transaction.
func (q *Queue) SetKeyAttr(ctx context.Context, queue, routingKey string, attr *int64) error {
	const op = "set key attribute"
	if err := q.checkSetKeyAttr(op, queue, routingKey); err != nil {
		return err
	}
	return q.inTx(ctx, op, func(tx *sqlx.Tx) error { return q.setKeyAttr(ctx, tx, queue, routingKey, attr) })
}

// SetKeyAttrTx is SetKeyAttr inside tx.
func (q *Queue) SetKeyAttrTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string, attr *int64) error {
	const op = "set key attribute"
	if err := q.checkSetKeyAttr(op, queue, routingKey); err != nil {
		return err
	}
	return wrap(op, q.setKeyAttr(ctx, tx, queue, routingKey, attr))
}

func (q *Queue) checkSetKeyAttr(op, queue, routingKey string) error {
	if err := q.checkKeyOp(op, queue, routingKey); err != nil {
		return err
	}
	return nonEmpty(op, "routing key", routingKey)
}

func (q *Queue) setKeyAttr(ctx context.Context, tx *sqlx.Tx, queue, routingKey string, attr *int64) error {
	if _, err := tx.ExecContext(ctx, lockKeySQL, queue, routingKey); err != nil {
		return err
	}
	if attr != nil {
		_, err := tx.ExecContext(ctx, `INSERT INTO mq_keys (queue, routing_key, attr) VALUES ($1, $2, $3)
			ON CONFLICT (queue, routing_key) DO UPDATE SET attr = excluded.attr`, queue, routingKey, *attr)
		return err
	}
	// A row with neither lock nor attribute has no reason to exist.
	_, err := tx.ExecContext(ctx, `WITH d AS (
			DELETE FROM mq_keys WHERE queue = $1 AND routing_key = $2 AND (locked_until IS NULL OR locked_until <= $3) RETURNING 1
		)
		UPDATE mq_keys SET attr = NULL WHERE queue = $1 AND routing_key = $2 AND NOT EXISTS (SELECT 1 FROM d)`,
		queue, routingKey, micros(q.now()))
	return err
}

// RenewSessions implements mq.MessageQueue: one statement.
func (q *Queue) RenewSessions(ctx context.Context, queue string, owners []string, extend, idle time.Duration) (n int, err error) {
	const op = "renew sessions"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := errors.Join(checkQueue(op, queue), mq.CheckDuration(op, "extend", extend), mq.CheckDuration(op, "idle", idle)); err != nil {
		return 0, err
	}
	for i, o := range owners {
		if err := checkText(op, fmt.Sprintf("owner %d", i), o); err != nil {
			return 0, err
		}
	}
	if len(owners) == 0 {
		return 0, nil
	}
	now := q.now()
	// Rows are locked in session order, as by CleanupSessions: no deadlock between them.
	return q.execCount(ctx, op, `UPDATE mq_sessions SET locked_until = $1 WHERE (queue, session) IN (
			SELECT queue, session FROM mq_sessions
			WHERE queue = $2 AND owner = ANY($3::text[]) AND locked_until > $4 AND last_activity_at > $5
			ORDER BY session FOR UPDATE
		)`, micros(now.Add(extend)), queue, owners, micros(now), micros(now.Add(-idle)))
}

// CleanupSessions implements mq.MessageQueue: one statement.
func (q *Queue) CleanupSessions(ctx context.Context, queue string) (int, error) {
	const op = "cleanup sessions"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := checkQueue(op, queue); err != nil {
		return 0, err
	}
	return q.execCount(ctx, op, `DELETE FROM mq_sessions s WHERE (s.queue, s.session) IN (
			SELECT queue, session FROM mq_sessions WHERE queue = $1 AND locked_until <= $2
			ORDER BY session FOR UPDATE
		) AND NOT EXISTS (SELECT 1 FROM mq_messages m WHERE m.queue = s.queue AND m.session = s.session)`,
		queue, micros(q.now()))
}

// execCount runs one write statement on its own and returns the rows it changed.
func (q *Queue) execCount(ctx context.Context, op, query string, args ...any) (n int, err error) {
	err = q.exec(ctx, op, func() error {
		res, err := q.db.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		affected, err := res.RowsAffected()
		n = int(affected)
		return err
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

func (q *Queue) stats(ctx context.Context, op, queue string, routingKey *string) (st mq.Stats, err error) {
	if q.closed.Load() {
		return mq.Stats{}, mq.Closed(op)
	}
	if err := checkQueue(op, queue); err != nil {
		return mq.Stats{}, err
	}
	args := []any{queue, micros(q.now())}
	where := `queue = $1`
	if routingKey != nil {
		if err := checkText(op, "routing key", *routingKey); err != nil {
			return mq.Stats{}, err
		}
		where, args = where+` AND routing_key = $3`, append(args, *routingKey)
	}
	var row struct {
		Ready   int `db:"ready"`
		Locked  int `db:"locked"`
		Delayed int `db:"delayed"`
		Max     int `db:"max_attempt"`
	}
	err = q.exec(ctx, op, func() error {
		return q.db.GetContext(ctx, &row, `SELECT
			count(*) FILTER (WHERE visible_at <= $2) AS ready,
			count(*) FILTER (WHERE visible_at > $2 AND lock_token IS NOT NULL) AS locked,
			count(*) FILTER (WHERE visible_at > $2 AND lock_token IS NULL) AS delayed,
			coalesce(max(attempts), 0) AS max_attempt
			FROM mq_messages WHERE `+where, args...)
	})
	return mq.Stats{Ready: row.Ready, Locked: row.Locked, Delayed: row.Delayed, MaxAttempt: row.Max}, err
}

// Close implements mq.MessageQueue: waiting long polls end with ErrClosed, the LISTEN
// connection is dropped, and the database is closed if Open created it.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.stopListening()
	q.hub.NotifyAll()
	if q.owned {
		return q.db.Close()
	}
	return nil
}
