package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/duroq/duroq/internal/sqltext"
	"github.com/duroq/duroq/mq"
	"github.com/jmoiron/sqlx"
)

// Ack implements mq.MessageQueue.
func (q *Queue) Ack(ctx context.Context, token string, then ...mq.Message) error {
	return q.runOne(ctx, "ack", settlement{Settlement: mq.Settlement{Token: token, Then: mq.Traced(ctx, then)}, all: true})
}

// AckTx is Ack inside tx. Call Notify after commit for the batch's queue and the
// queues of then.
func (q *Queue) AckTx(ctx context.Context, tx *sqlx.Tx, token string, then ...mq.Message) error {
	_, err := q.settleOne(ctx, tx, "ack", settlement{Settlement: mq.Settlement{Token: token, Then: mq.Traced(ctx, then)}, all: true})
	return err
}

// AckManyTx acks many tokens in tx, in a constant number of statements, and says
// what each held (in the order of tokens). If any lock is lost it fails with
// ErrLockLost naming the first such token (roll the transaction back: others were
// acked).
func (q *Queue) AckManyTx(ctx context.Context, tx *sqlx.Tx, tokens []string) ([]mq.LockInfo, error) {
	const op = "ack"
	ss := make([]settlement, len(tokens))
	for i, t := range tokens {
		ss[i] = settlement{Settlement: mq.Settlement{Token: t}, all: true}
	}
	res, err := q.settle(ctx, tx, op, ss)
	if err != nil {
		return nil, wrap(op, err)
	}
	for i := range tokens {
		if err := res.lost[i]; err != nil {
			return nil, err
		}
	}
	return res.infos, nil
}

// Abandon implements mq.MessageQueue.
func (q *Queue) Abandon(ctx context.Context, token string, opts mq.AbandonOptions) error {
	const op = "abandon"
	if err := mq.CheckDuration(op, "Delay", opts.Delay); err != nil {
		return err
	}
	return q.runOne(ctx, op, settlement{Settlement: mq.AbandonSettlement(token, opts)})
}

// AbandonTx is Abandon inside tx. Call Notify after commit.
func (q *Queue) AbandonTx(ctx context.Context, tx *sqlx.Tx, token string, opts mq.AbandonOptions) error {
	const op = "abandon"
	if err := mq.CheckDuration(op, "Delay", opts.Delay); err != nil {
		return err
	}
	_, err := q.settleOne(ctx, tx, op, settlement{Settlement: mq.AbandonSettlement(token, opts)})
	return err
}

// Settle implements mq.MessageQueue.
func (q *Queue) Settle(ctx context.Context, settlements ...mq.Settlement) error {
	res, err := q.runSettle(ctx, "settle", plain(mq.TracedSettlements(ctx, settlements)))
	if err != nil {
		return err
	}
	return res.lostError()
}

// SettleTx is Settle inside tx. A *mq.SettleError leaves tx usable: the settlements
// whose lock was held are applied in it. Call Notify after commit for the batches'
// queues, the dead-letter queues and the queues of the Then messages.
func (q *Queue) SettleTx(ctx context.Context, tx *sqlx.Tx, settlements ...mq.Settlement) error {
	const op = "settle"
	res, err := q.settle(ctx, tx, op, plain(mq.TracedSettlements(ctx, settlements)))
	if err != nil {
		return wrap(op, err)
	}
	return res.lostError()
}

func plain(ss []mq.Settlement) []settlement {
	out := make([]settlement, len(ss))
	for i, s := range ss {
		out[i] = settlement{Settlement: s}
	}
	return out
}

// runSettle settles ss in a transaction of its own and wakes the queues it touched.
func (q *Queue) runSettle(ctx context.Context, op string, ss []settlement) (res settled, err error) {
	err = q.run(ctx, op, func(tx runner) ([]string, error) {
		res, err = q.settle(ctx, tx, op, ss)
		return res.wake, err
	})
	return res, err
}

// runOne settles s in a transaction of its own; a lost lock is the plain LockLost
// of op.
func (q *Queue) runOne(ctx context.Context, op string, s settlement) error {
	res, err := q.runSettle(ctx, op, []settlement{s})
	if err != nil {
		return err
	}
	return res.lost[0]
}

// settleOne settles s in tx; a lost lock is the plain LockLost of op.
func (q *Queue) settleOne(ctx context.Context, tx runner, op string, s settlement) (settled, error) {
	res, err := q.settle(ctx, tx, op, []settlement{s})
	if err != nil {
		return res, wrap(op, err)
	}
	return res, res.lost[0]
}

// settlement is one settlement of a call; all marks an Ack, which settles every
// message its token holds (Acked is then ignored).
type settlement struct {
	mq.Settlement
	all bool
}

// settled is the outcome of a settle call.
type settled struct {
	infos []mq.LockInfo // what each settlement's token held (zero when lost)
	lost  map[int]error // the settlements whose lock was lost, by index
	wake  []string      // the queues whose waiters may find messages after commit
}

func (s settled) lostError() error {
	if len(s.lost) == 0 {
		return nil
	}
	return &mq.SettleError{Lost: s.lost}
}

// held is what a live token holds: its batch's messages are the token's rows, in
// id order.
type held struct {
	n           int
	first, last int64 // the first and last ids
	queue       string
	routingKey  sql.NullString
	session     sql.NullString // a batch with a session is one un-keyed message
	lockedUntil int64
	ids         []int64 // read only for a batch settled in parts
}

// heldSQL reads, one row per token, what n live tokens hold.
func heldSQL(n int) string {
	return `SELECT lock_token, count(*), min(id), max(id), queue, routing_key, max(session), locked_until
		FROM mq_messages WHERE lock_token IN (` + sqltext.Params(n) + `) AND locked_until > ? GROUP BY lock_token`
}

// heldIDsSQL reads the ids that n tokens hold.
func heldIDsSQL(n int) string {
	return `SELECT lock_token, id FROM mq_messages WHERE lock_token IN (` + sqltext.Params(n) + `) ORDER BY lock_token, id`
}

// settle applies the settlements whose lock is held and names the others in
// settled.lost, in a constant number of statements whatever the number of
// settlements: one read of what the tokens hold (one row per token, and the ids of
// the batches settled in parts), then one statement per kind of change (acked,
// dead-lettered, released; a call of whole acks deletes as it reads), the key
// locks, the sessions' activity and one insert of the Then messages. A batch's messages are the token's rows, so each kind of
// change takes one (token, first id, last id) span per batch. An error means
// nothing may be applied: roll tx back.
func (q *Queue) settle(ctx context.Context, tx runner, op string, ss []settlement) (settled, error) {
	if q.closed.Load() {
		return settled{}, mq.Closed(op)
	}
	checked := make([]mq.Settlement, len(ss))
	for i, s := range ss {
		checked[i] = s.Settlement
	}
	if err := mq.CheckSettlements(op, checked); err != nil {
		return settled{}, err
	}
	if len(ss) == 0 {
		return settled{}, nil
	}
	now := q.now()
	nowUs := micros(now)
	tokens := make([]any, len(ss))
	for i, s := range ss {
		tokens[i] = s.Token
	}
	// Whole acks (Ack, AckManyTx) delete their messages as they read what the
	// tokens held: one statement instead of a read and a delete.
	whole := !slices.ContainsFunc(ss, func(s settlement) bool { return !s.all })
	read := q.held
	if whole {
		read = q.deleteHeld
	}
	holds, err := read(ctx, tx, tokens, nowUs)
	if err != nil {
		return settled{}, err
	}

	res := settled{infos: make([]mq.LockInfo, len(ss)), lost: map[int]error{}}
	var parted []any // the tokens of batches settled in parts
	for i := range ss {
		s := &ss[i]
		h := holds[s.Token]
		if h == nil {
			res.lost[i] = mq.LockLost(op, s.Token)
			continue
		}
		if s.all {
			s.Acked = h.n
		} else if err := mq.CheckSettlementSize(op, i, s.Settlement, h.queue, h.n); err != nil {
			return settled{}, err
		}
		res.infos[i] = mq.LockInfo{Queue: h.queue, RoutingKey: h.routingKey.String, LockedUntil: fromMicros(h.lockedUntil), Messages: h.n}
		if parts(s.Settlement, h.n) {
			parted = append(parted, s.Token)
		}
	}
	if len(parted) > 0 {
		rows, err := q.stmts.Query(ctx, tx, heldIDsSQL(len(parted)), parted...)
		if err != nil {
			return settled{}, err
		}
		for rows.Next() {
			var token string
			var id int64
			if err := rows.Scan(&token, &id); err != nil {
				rows.Close()
				return settled{}, err
			}
			holds[token].ids = append(holds[token].ids, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return settled{}, err
		}
	}

	var (
		acked, dead, released []any
		keys                  []keyEnd
		sessions              []any
		then                  []mq.Message
	)
	wakeQueue := func(name string) {
		if !slices.Contains(res.wake, name) {
			res.wake = append(res.wake, name)
		}
	}
	for i, s := range ss {
		h := holds[s.Token]
		if h == nil {
			continue
		}
		n := h.n
		a, d, t := s.Split(n)
		span := func(from, to int) (any, any) { // ids of messages [from, to)
			if h.ids == nil {
				return h.first, h.last // the whole batch
			}
			return h.ids[from], h.ids[to-1]
		}
		if a > 0 && !whole {
			lo, hi := span(0, a)
			acked = append(acked, s.Token, lo, hi)
		}
		reason := nullable(s.ClippedReason())
		if d > a {
			lo, hi := span(a, d)
			dead = append(dead, i, s.Token, lo, hi, s.DeadLetterQueue, reason)
			wakeQueue(s.DeadLetterQueue)
		}
		visible := micros(now.Add(s.Delay))
		if t > d {
			lo, hi := span(d, t)
			released = append(released, s.Token, lo, hi, visible, true, reason)
		}
		if n > t {
			lo, hi := span(t, n)
			released = append(released, s.Token, lo, hi, visible, false, nil)
		}
		if h.routingKey.Valid {
			e := keyEnd{queue: h.queue, key: h.routingKey.String, token: s.Token}
			if s.HoldsKey(n) {
				e.until = visible // the order rule: held until the released messages are visible
			}
			keys = append(keys, e)
		}
		if h.session.Valid {
			sessions = append(sessions, h.queue, h.session.String)
		}
		wakeQueue(h.queue)
		then = append(then, s.Then...)
	}
	for _, m := range then {
		wakeQueue(m.Queue)
	}

	if n := len(acked) / 3; n > 0 {
		if _, err := q.stmts.Exec(ctx, tx, ackSQL(n), acked...); err != nil {
			return settled{}, err
		}
	}
	if n := len(dead) / 6; n > 0 {
		if _, err := q.stmts.Exec(ctx, tx, deadSQL(n), append(dead, nowUs, nowUs, nowUs, nowUs)...); err != nil {
			return settled{}, err
		}
	}
	if n := len(released) / 6; n > 0 {
		if _, err := q.stmts.Exec(ctx, tx, releaseSQL(n), append(released, nowUs, nowUs)...); err != nil {
			return settled{}, err
		}
	}
	if err := q.endKeyLocks(ctx, tx, keys); err != nil {
		return settled{}, err
	}
	if err := q.touchSessions(ctx, tx, sessions, nowUs); err != nil {
		return settled{}, err
	}
	return res, q.insert(ctx, tx, op, then)
}

// held reads what the live tokens among tokens hold, by token.
func (q *Queue) held(ctx context.Context, tx runner, tokens []any, now int64) (map[string]*held, error) {
	rows, err := q.stmts.Query(ctx, tx, heldSQL(len(tokens)), append(tokens, now)...)
	if err != nil {
		return nil, err
	}
	holds := make(map[string]*held, len(tokens))
	for rows.Next() {
		var token string
		h := &held{}
		if err := rows.Scan(&token, &h.n, &h.first, &h.last, &h.queue, &h.routingKey, &h.session, &h.lockedUntil); err != nil {
			rows.Close()
			return nil, err
		}
		holds[token] = h
	}
	return holds, errors.Join(rows.Err(), rows.Close())
}

// deleteHeld deletes the messages of the live tokens among tokens and says what
// each held, by token, as held does.
func (q *Queue) deleteHeld(ctx context.Context, tx runner, tokens []any, now int64) (map[string]*held, error) {
	rows, err := q.stmts.Query(ctx, tx, `DELETE FROM mq_messages WHERE lock_token IN (`+sqltext.Params(len(tokens))+`) AND locked_until > ?
		RETURNING lock_token, id, queue, routing_key, session, locked_until`, append(tokens, now)...)
	if err != nil {
		return nil, err
	}
	holds := make(map[string]*held, len(tokens))
	for rows.Next() {
		var token string
		var id int64
		var m held
		if err := rows.Scan(&token, &id, &m.queue, &m.routingKey, &m.session, &m.lockedUntil); err != nil {
			rows.Close()
			return nil, err
		}
		h := holds[token]
		if h == nil {
			h = &m
			h.first, h.last = id, id
			holds[token] = h
		}
		h.n++
		h.first, h.last = min(h.first, id), max(h.last, id)
		if m.session.Valid {
			h.session = m.session
		}
	}
	return holds, errors.Join(rows.Err(), rows.Close())
}

// parts reports whether s settles its batch of n messages in more than one way,
// so that the spans need the batch's ids.
func parts(s mq.Settlement, n int) bool {
	acked, dead, tried := s.Split(n)
	kinds := 0
	for _, size := range []int{acked, dead - acked, tried - dead, n - tried} {
		if size > 0 {
			kinds++
		}
	}
	return kinds > 1
}

// The statements below take one (token, first id, last id) span per batch and find
// its messages through the token index (the CROSS JOIN makes the spans the outer
// loop; a rowid range alone would walk every message enqueued in between).

// ackSQL deletes n spans.
func ackSQL(n int) string {
	return `WITH t(tok, lo, hi) AS (VALUES ` + sqltext.Rows(n, 3) + `)
		DELETE FROM mq_messages WHERE id IN (SELECT m.id FROM t CROSS JOIN mq_messages AS m INDEXED BY mq_messages_token
			ON m.lock_token = t.tok AND m.id BETWEEN t.lo AND t.hi)`
}

// deadSQL moves n spans, given as (index of the settlement, token, first id, last
// id, dead-letter queue, reason), to their dead-letter queues. A dead letter keeps
// its message key unless the dead-letter queue holds it already or an earlier dead
// letter of the call takes it there (the unique index allows one).
func deadSQL(n int) string {
	return `WITH t(i, tok, lo, hi, dlq, reason) AS (VALUES ` + sqltext.Rows(n, 6) + `),
		d AS MATERIALIZED (SELECT m.id, t.dlq, t.reason, m.message_key IS NOT NULL AND (
				row_number() OVER (PARTITION BY t.dlq, m.message_key ORDER BY t.i, m.id) > 1
				OR EXISTS (SELECT 1 FROM mq_messages x WHERE x.queue = t.dlq AND x.message_key = m.message_key)) AS drop_key
			FROM t CROSS JOIN mq_messages AS m INDEXED BY mq_messages_token ON m.lock_token = t.tok AND m.id BETWEEN t.lo AND t.hi)
		UPDATE mq_messages AS m SET queue = d.dlq, origin_queue = m.queue, dead_lettered_at = ?, visible_at = ?,
			lock_token = NULL, locked_until = NULL, last_error = d.reason,
			first_failed_at = coalesce(m.first_failed_at, ?), last_failed_at = ?,
			message_key = CASE WHEN d.drop_key THEN NULL ELSE m.message_key END
		FROM d WHERE m.id = d.id`
}

// releaseSQL releases n spans, given as (token, first id, last id, visible at,
// tried, reason): tried messages keep the fetch's attempt and record the failure,
// the fetch of the others is undone.
func releaseSQL(n int) string {
	return `WITH t(tok, lo, hi, visible, tried, reason) AS (VALUES ` + sqltext.Rows(n, 6) + `)
		UPDATE mq_messages AS m INDEXED BY mq_messages_token SET lock_token = NULL, locked_until = NULL, visible_at = t.visible,
			attempts = CASE WHEN t.tried THEN m.attempts ELSE max(m.attempts - 1, 0) END,
			last_error = CASE WHEN t.tried THEN t.reason ELSE m.last_error END,
			first_failed_at = CASE WHEN t.tried THEN coalesce(m.first_failed_at, ?) ELSE m.first_failed_at END,
			last_failed_at = CASE WHEN t.tried THEN ? ELSE m.last_failed_at END
		FROM t WHERE m.lock_token = t.tok AND m.id BETWEEN t.lo AND t.hi`
}

// keyEnd is how a settled keyed batch leaves its key: released (until 0), or held
// by its dead token until then (the order rule).
type keyEnd struct {
	queue, key, token string
	until             int64
}

// endKeyLocks ends the key locks of settled batches. A key row without an attribute
// exists only for its lock, so a released key's row is deleted; the rows left
// (keys with an attribute, held keys) are updated. A call whose keys have no
// attribute (mq.Consumer's) takes one statement, one whose keys have one (the
// runtime's pinned instances) two.
func (q *Queue) endKeyLocks(ctx context.Context, tx runner, ends []keyEnd) error {
	var released, all []any
	for _, e := range ends {
		var until any // NULL releases
		if e.until != 0 {
			until = e.until
		} else {
			released = append(released, e.queue, e.key, e.token)
		}
		all = append(all, e.queue, e.key, e.token, until)
	}
	if n := len(released) / 3; n > 0 {
		res, err := q.stmts.Exec(ctx, tx, `DELETE FROM mq_keys WHERE (queue, routing_key, lock_token) IN (VALUES `+sqltext.Rows(n, 3)+`)
			AND attr IS NULL`, released...)
		if err != nil {
			return err
		}
		if deleted, err := res.RowsAffected(); err != nil || int(deleted) == len(ends) {
			return err
		}
	}
	if n := len(all) / 4; n > 0 {
		_, err := q.stmts.Exec(ctx, tx, `WITH t(q, k, tok, until) AS (VALUES `+sqltext.Rows(n, 4)+`)
			UPDATE mq_keys SET lock_token = CASE WHEN t.until IS NULL THEN NULL ELSE mq_keys.lock_token END, locked_until = t.until FROM t
			WHERE mq_keys.queue = t.q AND mq_keys.routing_key = t.k AND mq_keys.lock_token = t.tok`, all...)
		return err
	}
	return nil
}

// touchSessions records activity at now on the live leases of the sessions given as
// (queue, session) pairs.
func (q *Queue) touchSessions(ctx context.Context, tx runner, sessions []any, now int64) error {
	n := len(sessions) / 2
	if n == 0 {
		return nil
	}
	_, err := q.stmts.Exec(ctx, tx, `UPDATE mq_sessions SET last_activity_at = ?
		WHERE locked_until > ? AND (queue, session) IN (VALUES `+sqltext.Rows(n, 2)+`)`,
		append([]any{now, now}, sessions...)...)
	return err
}
