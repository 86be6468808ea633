package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/duroq/duroq/internal/mqsql"
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
		q.wake(queue)
	}
	return n, err
}

// RemoveTx is Remove inside tx. Call Notify(queue) after commit.
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
	if err := mq.CheckQueue(op, queue); err != nil {
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
		q.wake(queue)
	}
	return n, err
}

// RemovePrefixTx is RemovePrefix inside tx. Call Notify(queue) after commit.
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
	if err := errors.Join(mq.CheckQueue(op, queue), nonEmpty(op, "prefix", prefix)); err != nil {
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
// mq_messages whose arguments start at $2), after taking the advisory locks of their
// routing keys (see lockKeysOf). A removed message whose batch was live invalidates
// the batch: the batch's other messages become eligible now and its key lock ends.
// released reports that.
func (q *Queue) remove(ctx context.Context, tx sqlx.ExtContext, queue, match string, matchArgs ...any) (n int, released bool, err error) {
	args := append([]any{queue}, matchArgs...)
	routing, err := lockKeysOf(ctx, tx, match, args)
	if err != nil {
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
			SELECT 1`, tokenBytes(tokens), now, queue, lostKeys); err != nil {
			return 0, false, err
		}
	}
	return len(rows), len(tokens) > 0, nil
}

// lockKeysOf takes, in ascending lock-id order and waiting for them, the advisory
// locks of the routing keys of the messages of queue args[0] matching match (a
// condition on mq_messages whose further arguments are args[1:]), and returns those
// keys. The caller then locks rows (in id order) of these keys or of none: messages
// of other keys enqueued since arrived after the operation began.
func lockKeysOf(ctx context.Context, tx sqlx.QueryerContext, match string, args []any) ([]string, error) {
	var keys []string
	err := sqlx.SelectContext(ctx, tx, &keys, `SELECT r.routing_key FROM (
			SELECT DISTINCT routing_key, `+keyLockID("$1", "routing_key")+` AS lock_id
			FROM mq_messages WHERE queue = $1 AND routing_key IS NOT NULL AND `+match+`
			ORDER BY lock_id
		) r, pg_advisory_xact_lock(r.lock_id)`, args...)
	return keys, err
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
	if err := mq.CheckQueue(op, queue); err != nil {
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

// SetKeyAttrsTx sets the attribute of each routing key of keys in queue to the
// attribute of the same index in attrs (nil clears it), inside tx: one statement for
// any number of keys, which takes their advisory locks in ascending order first.
// A key given twice gets its last attribute.
func (q *Queue) SetKeyAttrsTx(ctx context.Context, tx *sqlx.Tx, queue string, keys []string, attrs []*int64) error {
	const op = "set key attribute"
	if len(keys) != len(attrs) {
		return &mq.InvalidError{Op: op, Field: "attrs", Reason: fmt.Sprintf("%d attributes for %d keys", len(attrs), len(keys))}
	}
	for _, key := range keys {
		if err := q.checkSetKeyAttr(op, queue, key); err != nil {
			return err
		}
	}
	return wrap(op, q.setKeyAttrs(ctx, tx, queue, keys, attrs))
}

func (q *Queue) setKeyAttr(ctx context.Context, tx *sqlx.Tx, queue, routingKey string, attr *int64) error {
	return q.setKeyAttrs(ctx, tx, queue, []string{routingKey}, []*int64{attr})
}

// setKeyAttrsSQL sets the attributes $3 of the keys $2 of queue $1, after taking the
// keys' advisory locks in ascending order. A key whose attribute is cleared loses
// its row unless it is locked at $4: a row with neither lock nor attribute has no
// reason to exist. A row whose attribute does not change is not written: the
// runtime clears the pin of every execution it starts, nearly always unset.
var setKeyAttrsSQL = `WITH w AS MATERIALIZED (
	SELECT * FROM unnest($2::text[], $3::bigint[]) AS w(routing_key, attr)
),
lk AS MATERIALIZED (
	SELECT count(*) AS n FROM (
		SELECT DISTINCT ` + keyLockID("$1::text", "w.routing_key") + ` AS lock_id FROM w ORDER BY lock_id
	) r, pg_advisory_xact_lock(r.lock_id)
),
-- The keys whose attribute is cleared, as an array: the statements below find their
-- rows by primary key whatever the planner guesses about w.
clr AS MATERIALIZED (
	SELECT coalesce(array_agg(w.routing_key), '{}') AS keys FROM w, lk WHERE w.attr IS NULL AND lk.n >= 0
),
up AS (
	INSERT INTO mq_keys (queue, routing_key, attr)
	SELECT $1, w.routing_key, w.attr FROM w, lk WHERE w.attr IS NOT NULL AND lk.n >= 0
	ON CONFLICT (queue, routing_key) DO UPDATE SET attr = excluded.attr WHERE mq_keys.attr IS DISTINCT FROM excluded.attr
),
d AS (
	DELETE FROM mq_keys k
	WHERE k.queue = $1 AND k.routing_key = ANY((SELECT keys FROM clr)::text[]) AND (k.locked_until IS NULL OR k.locked_until <= $4)
	RETURNING k.routing_key
)
UPDATE mq_keys k SET attr = NULL
WHERE k.queue = $1 AND k.routing_key = ANY((SELECT keys FROM clr)::text[]) AND k.attr IS NOT NULL
	AND k.routing_key <> ALL(ARRAY(SELECT routing_key FROM d))`

func (q *Queue) setKeyAttrs(ctx context.Context, tx *sqlx.Tx, queue string, keys []string, attrs []*int64) error {
	// One row per key, its last attribute: an upsert may not touch a row twice.
	last := make(map[string]int, len(keys))
	for i, k := range keys {
		last[k] = i
	}
	if len(last) < len(keys) {
		var ks []string
		var as []*int64
		for i, k := range keys {
			if last[k] == i {
				ks, as = append(ks, k), append(as, attrs[i])
			}
		}
		keys, attrs = ks, as
	}
	_, err := tx.ExecContext(ctx, setKeyAttrsSQL, queue, keys, attrs, micros(q.now()))
	return err
}

// RenewSessions implements mq.MessageQueue: one statement.
func (q *Queue) RenewSessions(ctx context.Context, queue string, owners []string, extend, idle time.Duration) (n int, err error) {
	const op = "renew sessions"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := errors.Join(mq.CheckQueue(op, queue), mq.CheckDuration(op, "extend", extend), mq.CheckDuration(op, "idle", idle)); err != nil {
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
	if err := mq.CheckQueue(op, queue); err != nil {
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
	if err := mq.CheckQueue(op, queue); err != nil {
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
	var row statsRow
	err = q.exec(ctx, op, func() error {
		return q.db.GetContext(ctx, &row, `SELECT `+statsColumns("$2")+`, EXISTS (SELECT 1 FROM mq_paused WHERE queue = $1) AS paused
			FROM mq_messages WHERE `+where, args...)
	})
	return row.stats(), err
}

// statsColumns counts messages by state as mq.Stats does; now is the parameter
// that holds the time.
func statsColumns(now string) string {
	return strings.NewReplacer("$now", now).Replace(`count(*) FILTER (WHERE visible_at <= $now) AS ready,
	count(*) FILTER (WHERE visible_at > $now AND lock_token IS NOT NULL) AS locked,
	count(*) FILTER (WHERE visible_at > $now AND lock_token IS NULL) AS delayed,
	coalesce(max(attempts), 0) AS max_attempt,
	min(visible_at) FILTER (WHERE visible_at > $now AND lock_token IS NULL) AS next_visible,
	min(visible_at) FILTER (WHERE visible_at <= $now) AS oldest_ready`)
}

// stateConditions select the messages in each state as statsColumns counts them,
// $4 being now.
var stateConditions = map[mq.MessageState]string{
	mq.StateReady:   `visible_at <= $4`,
	mq.StateLocked:  `visible_at > $4 AND lock_token IS NOT NULL`,
	mq.StateDelayed: `visible_at > $4 AND lock_token IS NULL`,
}

// statsRow is a row of statsColumns and of whether the queue is paused (and of the
// queue's name, for Queues).
type statsRow struct {
	Queue   string        `db:"queue"`
	Ready   int           `db:"ready"`
	Locked  int           `db:"locked"`
	Delayed int           `db:"delayed"`
	Max     int           `db:"max_attempt"`
	Next    sql.NullInt64 `db:"next_visible"`
	Oldest  sql.NullInt64 `db:"oldest_ready"`
	Paused  bool          `db:"paused"`
}

func (r statsRow) stats() mq.Stats {
	st := mq.Stats{Ready: r.Ready, Locked: r.Locked, Delayed: r.Delayed, MaxAttempt: r.Max, Paused: r.Paused}
	if r.Next.Valid {
		st.NextVisible = fromMicros(r.Next.Int64)
	}
	if r.Oldest.Valid {
		st.OldestReady = fromMicros(r.Oldest.Int64)
	}
	return st
}

// Queues implements mq.Admin: one grouped read of every message, joined with the
// paused queues.
func (q *Queue) Queues(ctx context.Context) ([]mq.QueueStats, error) {
	const op = "queues"
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	var rows []statsRow
	err := q.exec(ctx, op, func() error {
		rows = nil
		return q.db.SelectContext(ctx, &rows, `SELECT coalesce(s.queue, p.queue) AS queue, coalesce(s.ready, 0) AS ready,
				coalesce(s.locked, 0) AS locked, coalesce(s.delayed, 0) AS delayed, coalesce(s.max_attempt, 0) AS max_attempt,
				s.next_visible, s.oldest_ready, p.queue IS NOT NULL AS paused
			FROM (SELECT queue, `+statsColumns("$1")+` FROM mq_messages GROUP BY queue) s FULL JOIN mq_paused p ON p.queue = s.queue
			ORDER BY 1`, micros(q.now()))
	})
	if err != nil {
		return nil, err
	}
	out := make([]mq.QueueStats, len(rows))
	for i, r := range rows {
		out[i] = mq.QueueStats{Queue: r.Queue, Stats: r.stats()}
	}
	return out, nil
}

// Pause implements mq.Admin.
func (q *Queue) Pause(ctx context.Context, queue string) error {
	const op = "pause"
	if err := mq.CheckQueue(op, queue); err != nil {
		return err
	}
	return q.exec(ctx, op, func() error {
		_, err := q.db.ExecContext(ctx, `INSERT INTO mq_paused (queue) VALUES ($1) ON CONFLICT DO NOTHING`, queue)
		return err
	})
}

// Resume implements mq.Admin: the waiting long polls are woken after the commit,
// in this process at once and in the others through NOTIFY (see Notify).
func (q *Queue) Resume(ctx context.Context, queue string) error {
	const op = "resume"
	if err := mq.CheckQueue(op, queue); err != nil {
		return err
	}
	err := q.exec(ctx, op, func() error {
		_, err := q.db.ExecContext(ctx, `DELETE FROM mq_paused WHERE queue = $1`, queue)
		return err
	})
	if err == nil {
		q.wake(queue)
	}
	return err
}

// Close implements mq.MessageQueue: waiting long polls end with ErrClosed, the LISTEN
// connection is dropped, and the database is closed if Open created it.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.stopListening()
	q.lane.close()
	q.planStats.Close()
	q.hub.NotifyAll()
	q.watchers.Close()
	q.notes.drain() // the wake-ups of writes that committed
	if q.owned {
		return q.db.Close()
	}
	return nil
}

// Peek implements mq.Admin: one read, which locks nothing.
func (q *Queue) Peek(ctx context.Context, queue string, opts mq.PeekOptions) ([]mq.MessageInfo, error) {
	const op = "peek"
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	opts, err := mq.CheckPeek(op, queue, opts)
	if err != nil {
		return nil, err
	}
	now := micros(q.now())
	args := []any{queue, opts.AfterID, opts.Limit, now}
	where := `queue = $1 AND id > $2`
	if opts.RoutingKey != "" {
		where, args = where+` AND routing_key = $5`, append(args, opts.RoutingKey)
	}
	if opts.State != "" {
		where += ` AND ` + stateConditions[opts.State]
	}
	var rows []struct {
		ID             int64          `db:"id"`
		RoutingKey     sql.NullString `db:"routing_key"`
		Payload        []byte         `db:"payload"`
		Attempts       int            `db:"attempts"`
		EnqueuedAt     int64          `db:"enqueued_at"`
		VisibleAt      int64          `db:"visible_at"`
		Locked         bool           `db:"locked"`
		Tag            sql.NullString `db:"tag"`
		Session        sql.NullString `db:"session"`
		Key            sql.NullString `db:"message_key"`
		TraceParent    sql.NullString `db:"trace_parent"`
		LimitGroup     sql.NullString `db:"limit_group"`
		Priority       int            `db:"priority"`
		LastError      sql.NullString `db:"last_error"`
		FirstFailedAt  sql.NullInt64  `db:"first_failed_at"`
		LastFailedAt   sql.NullInt64  `db:"last_failed_at"`
		OriginQueue    sql.NullString `db:"origin_queue"`
		DeadLetteredAt sql.NullInt64  `db:"dead_lettered_at"`
	}
	err = q.exec(ctx, op, func() error {
		rows = rows[:0]
		return sqlx.SelectContext(ctx, q.db, &rows, `SELECT id, routing_key, payload, attempts, enqueued_at, visible_at,
				lock_token IS NOT NULL AND locked_until > $4 AS locked, tag, session, message_key, trace_parent, limit_group, priority,
				last_error, first_failed_at, last_failed_at, origin_queue, dead_lettered_at
			FROM mq_messages WHERE `+where+` ORDER BY id LIMIT $3`, args...)
	})
	if err != nil {
		return nil, err
	}
	infos := make([]mq.MessageInfo, len(rows))
	for i, r := range rows {
		if r.Payload == nil {
			r.Payload = []byte{}
		}
		infos[i] = mq.MessageInfo{ID: r.ID, Queue: queue, RoutingKey: r.RoutingKey.String, Payload: r.Payload,
			Attempt: r.Attempts, EnqueuedAt: fromMicros(r.EnqueuedAt), VisibleAt: fromMicros(r.VisibleAt), Locked: r.Locked,
			Tag: r.Tag.String, Session: r.Session.String, Key: r.Key.String, TraceParent: r.TraceParent.String, LimitGroup: r.LimitGroup.String,
			Priority: r.Priority, LastError: r.LastError.String,
			FirstFailedAt: optMicros(r.FirstFailedAt), LastFailedAt: optMicros(r.LastFailedAt),
			OriginQueue: r.OriginQueue.String, DeadLetteredAt: optMicros(r.DeadLetteredAt)}
	}
	return infos, nil
}

// optMicros is the time of a nullable column: zero when NULL.
func optMicros(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return fromMicros(us.Int64)
}

// selection is the condition on mq_messages (arguments from $2) selecting the
// messages of routingKey and ids; empty means all.
func selection(routingKey string, ids []int64) (string, []any) {
	conds, args := []string{"true"}, []any{}
	if routingKey != "" {
		args = append(args, routingKey)
		conds = append(conds, fmt.Sprintf("routing_key = $%d", len(args)+1))
	}
	if len(ids) > 0 {
		args = append(args, ids)
		conds = append(conds, fmt.Sprintf("id = ANY($%d::bigint[])", len(args)+1))
	}
	return strings.Join(conds, " AND "), args
}

// keyChunk bounds the routing keys whose advisory locks one transaction of Purge or
// Redrive takes: PostgreSQL's shared lock table holds about max_locks_per_transaction
// × max_connections locks (6,400 by default) for all sessions together.
const keyChunk = 1000

// inKeyChunks runs fn on the messages of queue matching match (a condition on
// mq_messages whose arguments, args, start at $2): in one transaction when they have
// at most keyChunk routing keys, else in one transaction per keyChunk keys, the
// un-keyed messages with the first. Each call of fn gets match narrowed to its keys
// (one more argument). It returns the sum of fn's counts, also of the transactions
// that committed before one failed.
func (q *Queue) inKeyChunks(ctx context.Context, op, queue, match string, args []any,
	fn func(tx *sqlx.Tx, match string, args []any) (int, error)) (total int, err error) {
	var keys []string
	err = q.exec(ctx, op, func() error {
		keys = keys[:0]
		return sqlx.SelectContext(ctx, q.db, &keys, `SELECT DISTINCT routing_key FROM mq_messages
			WHERE queue = $1 AND routing_key IS NOT NULL AND `+match+` ORDER BY routing_key`, append([]any{queue}, args...)...)
	})
	if err != nil {
		return 0, err
	}
	pkeys := fmt.Sprintf("$%d::text[]", len(args)+2)
	chunks := slices.Collect(slices.Chunk(keys, keyChunk))
	if len(chunks) == 0 {
		chunks = [][]string{{}}
	}
	for i, chunk := range chunks {
		narrowed := match + " AND routing_key = ANY(" + pkeys + ")"
		if i == 0 {
			narrowed = match + " AND (routing_key IS NULL OR routing_key = ANY(" + pkeys + "))"
		}
		var n int
		err := q.inTx(ctx, op, func(tx *sqlx.Tx) (err error) {
			n, err = fn(tx, narrowed, append(slices.Clip(args), chunk))
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// Purge implements mq.Admin: Remove's transaction for the selected messages, or one
// per thousand routing keys when they have more (see inKeyChunks).
func (q *Queue) Purge(ctx context.Context, queue string, opts mq.PurgeOptions) (int, error) {
	const op = "purge"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := mq.CheckPurge(op, queue, opts); err != nil {
		return 0, err
	}
	match, args := selection(opts.RoutingKey, opts.IDs)
	var released bool
	n, err := q.inKeyChunks(ctx, op, queue, match, args, func(tx *sqlx.Tx, match string, args []any) (int, error) {
		n, r, err := q.remove(ctx, tx, queue, match, args...)
		released = released || r
		return n, err
	})
	if released {
		q.wake(queue)
	}
	return n, err
}

// Redrive implements mq.Admin: two statements in one transaction, or in one per
// thousand routing keys when the dead letters have more (see inKeyChunks).
func (q *Queue) Redrive(ctx context.Context, deadLetterQueue string, opts mq.RedriveOptions) (int, error) {
	const op = "redrive"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := mq.CheckRedrive(op, deadLetterQueue, opts); err != nil {
		return 0, err
	}
	match, args := selection(opts.RoutingKey, opts.IDs)
	woken := map[string]bool{}
	n, err := q.inKeyChunks(ctx, op, deadLetterQueue, match, args, func(tx *sqlx.Tx, match string, args []any) (int, error) {
		moved, err := q.redrive(ctx, tx, deadLetterQueue, opts.To, match, args)
		n := 0
		for _, m := range moved {
			woken[m.Queue] = true
			n += m.N
		}
		return n, err
	})
	for queue := range woken {
		q.wake(queue)
	}
	return n, err
}

// movedRow counts the messages redrive moved to one queue.
type movedRow struct {
	Queue string `db:"queue"`
	N     int    `db:"n"`
}

// redrive moves the dead letters of dlq matching match (arguments args from $2) to
// to, or to their origin queue, and says how many went to each queue. It
// locks like remove: the routing keys' advisory locks (in dlq), then the rows in id
// order. Live locks are skipped; a lapsed one is dropped.
func (q *Queue) redrive(ctx context.Context, tx *sqlx.Tx, dlq, to, match string, args []any) ([]movedRow, error) {
	args = append([]any{dlq}, args...)
	routing, err := lockKeysOf(ctx, tx, match, args)
	if err != nil {
		return nil, err
	}
	p := len(args)
	var moved []movedRow
	err = sqlx.SelectContext(ctx, tx, &moved, fmt.Sprintf(`WITH moved AS (
			UPDATE mq_messages m SET queue = coalesce($%[3]d::text, m.origin_queue), visible_at = $%[4]d, attempts = 0,
				origin_queue = NULL, dead_lettered_at = NULL, lock_token = NULL, locked_until = NULL,
				message_key = CASE WHEN EXISTS (
						SELECT 1 FROM mq_messages d WHERE d.queue = coalesce($%[3]d::text, m.origin_queue) AND d.message_key = m.message_key
					) THEN NULL ELSE m.message_key END
			WHERE m.id IN (
				SELECT id FROM mq_messages
				WHERE queue = $1 AND %[1]s AND (routing_key IS NULL OR routing_key = ANY($%[2]d::text[]))
					AND (lock_token IS NULL OR locked_until <= $%[4]d) AND ($%[3]d::text IS NOT NULL OR origin_queue IS NOT NULL)
				ORDER BY id FOR UPDATE
			)
			RETURNING m.queue
		)
		SELECT queue, count(*) AS n FROM moved GROUP BY queue`,
		match, p+1, p+2, p+3), append(args, routing, nullable(to), micros(q.now()))...)
	return moved, moveRace(err)
}

// SetLimit implements mq.Admin. The waiting long polls of queue are woken after the
// commit, in every process: a raised limit may admit their messages.
func (q *Queue) SetLimit(ctx context.Context, queue, group string, l mq.Limit) error {
	const op = "set limit"
	if err := mq.CheckLimit(op, queue, group, l); err != nil {
		return err
	}
	err := q.exec(ctx, op, func() error {
		if l == (mq.Limit{}) {
			_, err := q.db.ExecContext(ctx, `DELETE FROM mq_limits WHERE queue = $1 AND grp = $2`, queue, group)
			return err
		}
		args := append([]any{queue}, mqsql.NewLimitRow(group, l, q.now()).Args()...)
		_, err := q.db.ExecContext(ctx, `INSERT INTO mq_limits (queue, `+mqsql.LimitColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (queue, grp) DO UPDATE SET max_in_flight = excluded.max_in_flight, rate = excluded.rate, per = excluded.per,
				tokens = excluded.tokens, refilled_at = excluded.refilled_at`, args...)
		return err
	})
	if err == nil {
		q.wake(queue)
	}
	return err
}

// Limits implements mq.Admin.
func (q *Queue) Limits(ctx context.Context, queue string) ([]mq.LimitInfo, error) {
	const op = "list limits"
	if err := mq.CheckQueue(op, queue); err != nil {
		return nil, err
	}
	now := q.now()
	var (
		rows []mqsql.LimitRow
		held []mqsql.HeldRow
	)
	err := q.exec(ctx, op, func() error {
		rows, held = rows[:0], held[:0]
		if err := sqlx.SelectContext(ctx, q.db, &rows, `SELECT `+mqsql.LimitColumns+` FROM mq_limits WHERE queue = $1 ORDER BY grp`, queue); err != nil {
			return err
		}
		return sqlx.SelectContext(ctx, q.db, &held, liveLocksSQL, queue, micros(now))
	})
	if err != nil {
		return nil, err
	}
	return mqsql.LimitInfos(rows, held, now), nil
}
