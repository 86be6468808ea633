package sqlite

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/duroq/duroq/internal/mqsql"
	"github.com/duroq/duroq/mq"
	"github.com/jmoiron/sqlx"
)

var _ mq.Admin = (*Queue)(nil)

type infoRow struct {
	ID             int64          `db:"id"`
	Queue          string         `db:"queue"`
	RoutingKey     sql.NullString `db:"routing_key"`
	Payload        []byte         `db:"payload"`
	Attempts       int            `db:"attempts"`
	EnqueuedAt     int64          `db:"enqueued_at"`
	VisibleAt      int64          `db:"visible_at"`
	Token          sql.NullString `db:"lock_token"`
	LockedUntil    sql.NullInt64  `db:"locked_until"`
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

const infoColumns = `id, queue, routing_key, payload, attempts, enqueued_at, visible_at, lock_token, locked_until,
	tag, session, message_key, trace_parent, limit_group, priority, last_error, first_failed_at, last_failed_at, origin_queue,
	dead_lettered_at`

func optMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

func (r infoRow) info(now int64) mq.MessageInfo {
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	return mq.MessageInfo{ID: r.ID, Queue: r.Queue, RoutingKey: r.RoutingKey.String, Payload: payload, Attempt: r.Attempts,
		EnqueuedAt: fromMicros(r.EnqueuedAt), VisibleAt: fromMicros(r.VisibleAt), Locked: r.Token.Valid && r.LockedUntil.Int64 > now,
		Tag: r.Tag.String, Session: r.Session.String, Key: r.Key.String, TraceParent: r.TraceParent.String, LimitGroup: r.LimitGroup.String,
		Priority: r.Priority, LastError: r.LastError.String,
		FirstFailedAt: optMicros(r.FirstFailedAt), LastFailedAt: optMicros(r.LastFailedAt),
		OriginQueue: r.OriginQueue.String, DeadLetteredAt: optMicros(r.DeadLetteredAt)}
}

// peekSQL reads a page of a queue, or of one key of it (a range of the (queue, id)
// or (queue, routing_key, id) index), of the messages in state if it is not empty
// (its condition takes now).
func peekSQL(byKey bool, state mq.MessageState) string {
	query := `SELECT ` + infoColumns + ` FROM mq_messages WHERE queue = +? AND id > +?`
	if byKey {
		query += ` AND routing_key = +?`
	}
	if state != "" {
		query += ` AND ` + stateConditions[state]
	}
	return query + ` ORDER BY id LIMIT +?`
}

// stateConditions select the messages in each state as statsColumns counts them;
// each takes now.
var stateConditions = map[mq.MessageState]string{
	mq.StateReady:   `visible_at <= +?`,
	mq.StateLocked:  `visible_at > +? AND lock_token IS NOT NULL`,
	mq.StateDelayed: `visible_at > +? AND lock_token IS NULL`,
}

// Peek implements mq.Admin. It reads outside any write transaction.
func (q *Queue) Peek(ctx context.Context, queue string, opts mq.PeekOptions) ([]mq.MessageInfo, error) {
	return q.PeekTx(ctx, q.db, queue, opts)
}

// PeekTx is Peek through r: q.DB() or one of its transactions.
func (q *Queue) PeekTx(ctx context.Context, r sqlx.QueryerContext, queue string, opts mq.PeekOptions) ([]mq.MessageInfo, error) {
	const op = "peek"
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	opts, err := mq.CheckPeek(op, queue, opts)
	if err != nil {
		return nil, err
	}
	now := micros(q.now())
	args := []any{queue, opts.AfterID}
	if opts.RoutingKey != "" {
		args = append(args, opts.RoutingKey)
	}
	if opts.State != "" {
		args = append(args, now)
	}
	var rows []infoRow
	if err := q.stmts.Select(ctx, r, &rows, peekSQL(opts.RoutingKey != "", opts.State), append(args, opts.Limit)...); err != nil {
		return nil, wrap(op, err)
	}
	out := make([]mq.MessageInfo, len(rows))
	for i, row := range rows {
		out[i] = row.info(now)
	}
	return out, nil
}

// Redrive implements mq.Admin.
func (q *Queue) Redrive(ctx context.Context, deadLetterQueue string, opts mq.RedriveOptions) (n int, err error) {
	err = q.run(ctx, "redrive", func(tx runner) (wake []string, err error) {
		n, wake, err = q.redrive(ctx, tx, deadLetterQueue, opts)
		return wake, err
	})
	return n, err
}

// RedriveTx is Redrive inside tx. Call Notify after commit for the destination
// queues.
func (q *Queue) RedriveTx(ctx context.Context, tx *sqlx.Tx, deadLetterQueue string, opts mq.RedriveOptions) (int, error) {
	n, _, err := q.redrive(ctx, tx, deadLetterQueue, opts)
	return n, err
}

// redrive moves the selected dead letters in one statement and returns how many and
// the queues they went to.
func (q *Queue) redrive(ctx context.Context, tx runner, deadLetterQueue string, opts mq.RedriveOptions) (int, []string, error) {
	const op = "redrive"
	if q.closed.Load() {
		return 0, nil, mq.Closed(op)
	}
	if err := mq.CheckRedrive(op, deadLetterQueue, opts); err != nil {
		return 0, nil, err
	}
	now := micros(q.now())
	to := nullable(opts.To)
	// The dead-letter queue holds each message key once, so only a message already
	// in the destination can take a moved message's key.
	where, args := selection(`WHERE queue = ? AND (lock_token IS NULL OR locked_until <= ?) AND coalesce(?, origin_queue) IS NOT NULL`,
		[]any{to, now, to, deadLetterQueue, now, to}, opts.RoutingKey, opts.IDs)
	var moved []string
	if err := q.stmts.Select(ctx, tx, &moved, `UPDATE mq_messages SET queue = coalesce(?, origin_queue), visible_at = ?, attempts = 0,
		origin_queue = NULL, dead_lettered_at = NULL, lock_token = NULL, locked_until = NULL,
		message_key = CASE WHEN message_key IS NOT NULL AND EXISTS (SELECT 1 FROM mq_messages x
			WHERE x.queue = coalesce(?, mq_messages.origin_queue) AND x.message_key = mq_messages.message_key) THEN NULL ELSE message_key END
		`+where+` RETURNING queue`, args...); err != nil {
		return 0, nil, wrap(op, err)
	}
	var wake []string
	for _, name := range moved {
		if !slices.Contains(wake, name) {
			wake = append(wake, name)
		}
	}
	return len(moved), wake, nil
}

// selection completes where (with its args) with the RoutingKey and IDs filters of
// Redrive and Purge; the ids travel as one JSON array.
func selection(where string, args []any, routingKey string, ids []int64) (string, []any) {
	if routingKey != "" {
		where, args = where+` AND routing_key = ?`, append(args, routingKey)
	}
	if len(ids) > 0 {
		list, _ := jsonArray(ids) // int64s always encode
		where, args = where+` AND id IN (SELECT value FROM json_each(?))`, append(args, list)
	}
	return where, args
}

// Purge implements mq.Admin.
func (q *Queue) Purge(ctx context.Context, queue string, opts mq.PurgeOptions) (n int, err error) {
	err = q.run(ctx, "purge", func(tx runner) ([]string, error) {
		n, err = q.purge(ctx, tx, queue, opts)
		return []string{queue}, err
	})
	return n, err
}

// PurgeTx is Purge inside tx. Call Notify after commit: batches that lost a message
// released the others.
func (q *Queue) PurgeTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.PurgeOptions) (int, error) {
	return q.purge(ctx, tx, queue, opts)
}

func (q *Queue) purge(ctx context.Context, tx runner, queue string, opts mq.PurgeOptions) (int, error) {
	const op = "purge"
	if q.closed.Load() {
		return 0, mq.Closed(op)
	}
	if err := mq.CheckPurge(op, queue, opts); err != nil {
		return 0, err
	}
	where, args := selection(`WHERE queue = ?`, []any{queue}, opts.RoutingKey, opts.IDs)
	var deleted []lockState
	if err := q.stmts.Select(ctx, tx, &deleted, `DELETE FROM mq_messages `+where+` RETURNING lock_token, locked_until`, args...); err != nil {
		return 0, wrap(op, err)
	}
	if err := q.releaseLost(ctx, tx, deleted); err != nil {
		return 0, wrap(op, err)
	}
	return len(deleted), nil
}

// SetLimit implements mq.Admin. The waiting long polls of queue are woken after the
// commit: a raised limit may admit their messages.
func (q *Queue) SetLimit(ctx context.Context, queue, group string, l mq.Limit) error {
	const op = "set limit"
	if err := mq.CheckLimit(op, queue, group, l); err != nil {
		return err
	}
	return q.run(ctx, op, func(tx runner) ([]string, error) {
		if l == (mq.Limit{}) {
			_, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_limits WHERE queue = ? AND grp = ?`, queue, group)
			return nil, err
		}
		args := append([]any{queue}, mqsql.NewLimitRow(group, l, q.now()).Args()...)
		_, err := q.stmts.Exec(ctx, tx, `INSERT INTO mq_limits (queue, `+mqsql.LimitColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (queue, grp) DO UPDATE SET max_in_flight = excluded.max_in_flight, rate = excluded.rate, per = excluded.per,
				tokens = excluded.tokens, refilled_at = excluded.refilled_at`, args...)
		return []string{queue}, err
	})
}

// Limits implements mq.Admin.
func (q *Queue) Limits(ctx context.Context, queue string) ([]mq.LimitInfo, error) {
	const op = "list limits"
	if err := mq.CheckQueue(op, queue); err != nil {
		return nil, err
	}
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	now := q.now()
	var (
		rows []mqsql.LimitRow
		held []mqsql.HeldRow
	)
	if err := q.stmts.Select(ctx, q.db, &rows, `SELECT `+mqsql.LimitColumns+` FROM mq_limits WHERE queue = ? ORDER BY grp`, queue); err != nil {
		return nil, wrap(op, err)
	}
	if err := q.stmts.Select(ctx, q.db, &held, liveLocksSQL, queue, micros(now)); err != nil {
		return nil, wrap(op, err)
	}
	return mqsql.LimitInfos(rows, held, now), nil
}
