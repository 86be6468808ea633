package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/duroq/duroq/internal/wake"
	"github.com/duroq/duroq/mq"
	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// A dequeue attempt loses when another consumer holds the key (or session) of its
// candidate. The attempt is then undone and the next one skips that key. After
// maxLosses lost attempts DequeueBatch reports nothing for now, with a hint to look
// again after contendedRetry.
const (
	maxLosses      = 32
	contendedRetry = 5 * time.Millisecond
	// busyRetry is the pause before retrying a session whose older message another
	// attempt is claiming right now.
	busyRetry = time.Millisecond
)

// errLost rolls back a lost attempt's transaction.
var errLost = errors.New("mq/postgres: dequeue candidate taken by another consumer")

// exclusions are the keys and sessions this DequeueBatch call lost to other consumers.
type exclusions struct{ keys, sessions []string }

// loss says why an attempt was undone; the zero value is no loss.
type loss struct {
	key     string // the routing key is held by another consumer
	session string // the session is held by another owner, or busy
	// busy: another attempt is claiming the session with an older message right now.
	// The session is not excluded: if that attempt was by the same owner, the session
	// is ours to share once it commits.
	busy bool
}

func (l loss) lost() bool { return l.key != "" || l.session != "" }

// add excludes what l lost and reports whether it did (a busy session is retried).
func (e *exclusions) add(l loss) bool {
	switch {
	case l.key != "":
		if !slices.Contains(e.keys, l.key) {
			e.keys = append(e.keys, l.key)
		}
	case l.busy:
		return false
	case l.session != "":
		if !slices.Contains(e.sessions, l.session) {
			e.sessions = append(e.sessions, l.session)
		}
	}
	return true
}

// sleep pauses for d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (q *Queue) normalize(queue string, opts mq.DequeueOptions) (mq.DequeueOptions, error) {
	const op = "dequeue"
	opts, err := mq.NormalizeDequeue(queue, opts)
	if err != nil {
		return opts, err
	}
	if err := checkText(op, "queue", queue); err != nil {
		return opts, err
	}
	for i, t := range opts.Tags.Tags {
		if err := checkText(op, fmt.Sprintf("Tags %d", i), t); err != nil {
			return opts, err
		}
	}
	if opts.Session != nil {
		if err := checkText(op, "Session.Owner", opts.Session.Owner); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// DequeueBatch implements mq.MessageQueue. Each attempt is one short READ COMMITTED
// transaction; while waiting it holds no connection. A long poll is woken by this
// process's writes and, through LISTEN/NOTIFY, by every other process's.
func (q *Queue) DequeueBatch(ctx context.Context, queue string, opts mq.DequeueOptions) (*mq.Batch, error) {
	bs, err := q.poll(ctx, queue, opts, 1)
	if len(bs) == 0 {
		return nil, err
	}
	return bs[0], err
}

// DequeueBatches implements mq.MessageQueue: DequeueBatch's attempts, in one
// transaction, until it holds max batches (see take).
func (q *Queue) DequeueBatches(ctx context.Context, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	return q.poll(ctx, queue, opts, max)
}

// poll takes up to max batches in one transaction, waiting up to opts.Wait for one.
func (q *Queue) poll(ctx context.Context, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	const op = "dequeue"
	opts, err := q.normalize(queue, opts)
	if err != nil {
		return nil, err
	}
	if err := mq.CheckDequeueMax(op, max); err != nil {
		return nil, err
	}
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mq/postgres: %s %q: %w", op, mq.Clip(queue), err)
	}
	if opts.Wait > 0 {
		q.startListening()
	}
	bs, err := wake.Poll(ctx, &q.hub, queue, opts.Wait, q.now, func() ([]*mq.Batch, bool, time.Time, error) {
		bs, next, err := q.dequeue(ctx, queue, opts, max)
		return bs, len(bs) > 0, next, err
	})
	if err != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("mq/postgres: %s %q: %w", op, mq.Clip(queue), err)
	}
	return bs, err
}

// dequeue makes transactions of attempts until one wins up to max batches or finds
// nothing eligible. A transaction whose first attempt loses is rolled back (which
// frees its candidate row and key lock) and the next one skips what it lost.
func (q *Queue) dequeue(ctx context.Context, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, time.Time, error) {
	var ex exclusions
	for range maxLosses {
		var (
			bs   []*mq.Batch
			next time.Time
			l    loss
		)
		err := q.inTx(ctx, "dequeue", func(tx *sqlx.Tx) (err error) {
			bs, next, l, err = q.take(ctx, tx, queue, opts, &ex, max)
			if err == nil && l.lost() {
				return errLost
			}
			return err
		})
		if errors.Is(err, errLost) {
			q.losses.Add(1)
			if !ex.add(l) {
				if err := sleep(ctx, busyRetry); err != nil {
					return nil, time.Time{}, err
				}
			}
			continue
		}
		return bs, next, err
	}
	return nil, q.now().Add(contendedRetry), nil
}

// take makes attempts in tx until it holds max batches or finds nothing eligible
// (then next is when a message becomes visible, if it holds none). It reports the
// loss of a first attempt, which the caller undoes. A later lost attempt ends the
// transaction's work instead: it wrote nothing, and the locks it may hold (its
// candidate row, the key's advisory lock) end with the commit that follows at once,
// so it waits for nothing while holding them (the deadlock argument of doc.go).
// Likewise, batches after the first take no session message: a transaction that
// claims or touches at most one session row cannot wait for sessions in an order
// of its own.
func (q *Queue) take(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, max int) ([]*mq.Batch, time.Time, loss, error) {
	var bs []*mq.Batch
	for len(bs) < max {
		b, next, l, err := q.attempt(ctx, tx, queue, opts, ex, true)
		switch {
		case err != nil:
			return nil, time.Time{}, loss{}, err
		case l.lost() && len(bs) == 0:
			return nil, time.Time{}, l, nil
		case l.lost():
			return bs, time.Time{}, loss{}, nil
		case b == nil && len(bs) == 0:
			return nil, next, loss{}, nil
		case b == nil:
			return bs, time.Time{}, loss{}, nil
		}
		bs = append(bs, b)
		opts.Session = nil
	}
	return bs, time.Time{}, loss{}, nil
}

// DequeueTx is one non-blocking DequeueBatch inside tx (opts.Wait is ignored). When
// nothing is eligible it returns a nil batch and the next time a message of the
// queue becomes visible (zero if none is pending). Attempts lost to other consumers
// are rolled back to a savepoint, so they leave no lock behind in tx.
func (q *Queue) DequeueTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions) (*mq.Batch, time.Time, error) {
	const op = "dequeue"
	opts, err := q.normalize(queue, opts)
	if err != nil {
		return nil, time.Time{}, err
	}
	if q.closed.Load() {
		return nil, time.Time{}, mq.Closed(op)
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT mq_dequeue`); err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	var ex exclusions
	for range maxLosses {
		b, next, l, err := q.attempt(ctx, tx, queue, opts, &ex, false)
		if err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
		if l.lost() {
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT mq_dequeue`); err != nil {
				return nil, time.Time{}, wrap(op, err)
			}
			q.losses.Add(1)
			if !ex.add(l) {
				if err := sleep(ctx, busyRetry); err != nil {
					return nil, time.Time{}, wrap(op, err)
				}
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT mq_dequeue`); err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
		return b, next, nil
	}
	if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT mq_dequeue`); err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	return nil, q.now().Add(contendedRetry), nil
}

// candidate is the row of the candidate statement: the oldest eligible message (if
// any), whether it was claimed already (un-keyed), whether its key's advisory lock
// was won (keyed), and otherwise when the next message becomes visible.
type candidate struct {
	ID         sql.NullInt64  `db:"id"`
	RoutingKey sql.NullString `db:"routing_key"`
	Session    sql.NullString `db:"session"`
	KeyLocked  sql.NullBool   `db:"key_locked"`
	Claimed    bool           `db:"claimed"`
	Payload    []byte         `db:"payload"`
	Attempts   sql.NullInt64  `db:"attempts"`
	EnqueuedAt sql.NullInt64  `db:"enqueued_at"`
	Tag        sql.NullString `db:"tag"`
	Key        sql.NullString `db:"message_key"`
	Next       sql.NullInt64  `db:"next_visible"`
	Async      sql.NullString `db:"async_commit"`
	// For a session message: the owner holds the session (in the candidate's
	// snapshot), and the session has an older eligible message.
	SessionMine  sql.NullBool `db:"session_mine"`
	SessionOlder sql.NullBool `db:"session_older"`
}

type lockedRow struct {
	ID         int64          `db:"id"`
	Payload    []byte         `db:"payload"`
	Attempts   int            `db:"attempts"`
	EnqueuedAt int64          `db:"enqueued_at"`
	Tag        sql.NullString `db:"tag"`
	Session    sql.NullString `db:"session"`
	Key        sql.NullString `db:"message_key"`
}

// attempt is one dequeue attempt in tx:
//
//  1. the candidate statement picks the oldest eligible message with FOR UPDATE SKIP
//     LOCKED (rows other consumers are taking are skipped, never waited for). An
//     un-keyed message is claimed by the same statement (for a session message,
//     together with its session, unless another owner claimed the session first); a
//     keyed one gets pg_try_advisory_xact_lock on its routing key, which never waits;
//  2. for a keyed candidate whose key lock was won, the key statement upserts the
//     key's row, guarded by "not locked by anyone else", and locks every eligible
//     message of the key. Its snapshot is taken after the advisory lock, so it sees
//     every change by the key's previous lock holders.
//
// A lost key or session is reported as a loss; the caller undoes the attempt. With
// async, the transaction commits without waiting for its WAL to be flushed (see
// doc.go: a lost dequeue only makes its messages eligible again).
func (q *Queue) attempt(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, async bool) (*mq.Batch, time.Time, loss, error) {
	now := q.now()
	token := uuid.NewString()
	until := micros(now.Add(opts.LockTimeout))
	query, args := candidateQuery(queue, opts, ex, now, token, until, async)
	var c candidate
	if err := tx.QueryRowxContext(ctx, query, args...).StructScan(&c); err != nil {
		return nil, time.Time{}, loss{}, err
	}
	switch {
	case !c.ID.Valid:
		var next time.Time
		if c.Next.Valid {
			next = fromMicros(c.Next.Int64)
		}
		return nil, next, loss{}, nil
	case c.RoutingKey.Valid:
		key := c.RoutingKey.String
		if !c.KeyLocked.Bool {
			return nil, time.Time{}, loss{key: key}, nil
		}
		// Read the clock again: the key's advisory lock is ours now, so whatever its
		// previous holders did (an Abandon making messages visible again) committed
		// with times no later than this.
		now = q.now()
		until = micros(now.Add(opts.LockTimeout))
		query, args := keyQuery(queue, key, opts, micros(now), token, until)
		var rows []lockedRow
		if err := sqlx.SelectContext(ctx, tx, &rows, query, args...); err != nil {
			return nil, time.Time{}, loss{}, err
		}
		if len(rows) == 0 { // locked by a consumer that committed after our candidate's snapshot
			return nil, time.Time{}, loss{key: key}, nil
		}
		// RETURNING gives no order guarantee: the batch is in enqueue order.
		slices.SortFunc(rows, func(a, b lockedRow) int { return cmp.Compare(a.ID, b.ID) })
		b := &mq.Batch{Queue: queue, RoutingKey: key, Token: token, LockedUntil: fromMicros(until)}
		for _, r := range rows {
			b.Messages = append(b.Messages, delivery(r))
		}
		return b, time.Time{}, loss{}, nil
	case !c.Claimed:
		if !c.Session.Valid {
			return nil, time.Time{}, loss{}, fmt.Errorf("candidate message %d was neither claimed nor contended", c.ID.Int64)
		}
		busy := c.SessionOlder.Bool && !c.SessionMine.Bool
		return nil, time.Time{}, loss{session: c.Session.String, busy: busy}, nil
	default:
		b := &mq.Batch{Queue: queue, Token: token, LockedUntil: fromMicros(until)}
		b.Messages = []mq.Delivery{delivery(lockedRow{ID: c.ID.Int64, Payload: c.Payload, Attempts: int(c.Attempts.Int64),
			EnqueuedAt: c.EnqueuedAt.Int64, Tag: c.Tag, Session: c.Session, Key: c.Key})}
		return b, time.Time{}, loss{}, nil
	}
}

func delivery(r lockedRow) mq.Delivery {
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	return mq.Delivery{ID: r.ID, Payload: r.Payload, Attempt: r.Attempts, EnqueuedAt: fromMicros(r.EnqueuedAt),
		Tag: r.Tag.String, Session: r.Session.String, Key: r.Key.String}
}

// candidateQuery renders the candidate statement of attempt.
func candidateQuery(queue string, opts mq.DequeueOptions, ex *exclusions, now time.Time, token string, until int64, async bool) (string, []any) {
	asyncCommit := ""
	if async {
		asyncCommit = ",\n\tset_config('synchronous_commit', 'off', true) AS async_commit"
	}
	var a sqlArgs
	pq, pnow := a.p(queue), a.p(micros(now))
	var powner string
	if opts.Session != nil {
		powner = a.p(opts.Session.Owner)
	}
	var sb strings.Builder
	sb.WriteString(`WITH c AS MATERIALIZED (
	SELECT m.id, m.routing_key, m.session, m.visible_at FROM mq_messages m
	LEFT JOIN mq_keys k ON k.queue = m.queue AND k.routing_key = m.routing_key`)
	if opts.Session != nil {
		sb.WriteString(`
	LEFT JOIN mq_sessions s ON s.queue = m.queue AND s.session = m.session`)
	}
	fmt.Fprintf(&sb, `
	WHERE m.queue = %s AND m.visible_at <= %s
		AND (m.routing_key IS NULL OR k.locked_until IS NULL OR k.locked_until <= %s)`, pq, pnow, pnow)
	for _, cond := range filters(opts, &a, pnow, powner) {
		sb.WriteString("\n\t\tAND " + cond)
	}
	if len(ex.keys) > 0 {
		fmt.Fprintf(&sb, "\n\t\tAND (m.routing_key IS NULL OR m.routing_key <> ALL(%s::text[]))", a.p(ex.keys))
	}
	if len(ex.sessions) > 0 {
		fmt.Fprintf(&sb, "\n\t\tAND (m.session IS NULL OR m.session <> ALL(%s::text[]))", a.p(ex.sessions))
	}
	sb.WriteString(`
	ORDER BY m.visible_at, m.id
	LIMIT 1
	FOR UPDATE OF m SKIP LOCKED
)`)
	claim := "c.routing_key IS NULL"
	sessionCols, sessionJoin := "", ""
	if opts.Session != nil {
		// A session the owner does not hold yet is claimed only with its oldest
		// eligible message, so when owners race for a session, the one that picked
		// its first message wins (the others skip rows being taken). The upsert then
		// claims the session unless another owner holds a live lease on it (the
		// candidate's snapshot may be older than that owner's claim).
		older := fmt.Sprintf("p.queue = %s AND p.session = c.session AND p.visible_at <= %s AND (p.visible_at, p.id) < (c.visible_at, c.id)", pq, pnow)
		if tags := tagCondition(opts.Tags, "p.tag", &a); tags != "" {
			older += " AND " + tags
		}
		fmt.Fprintf(&sb, `,
o AS MATERIALIZED (
	SELECT EXISTS (SELECT 1 FROM mq_sessions s
			WHERE s.queue = %[1]s AND s.session = c.session AND s.owner = %[2]s AND s.locked_until > %[4]s) AS mine,
		EXISTS (SELECT 1 FROM mq_messages p WHERE %[5]s) AS older
	FROM c WHERE c.session IS NOT NULL
),
sc AS (
	INSERT INTO mq_sessions AS s (queue, session, owner, locked_until, last_activity_at)
	SELECT %[1]s::text, c.session, %[2]s::text, %[3]s::bigint, %[4]s::bigint FROM c, o WHERE o.mine OR NOT o.older
	ON CONFLICT (queue, session) DO UPDATE
		SET owner = excluded.owner, locked_until = excluded.locked_until, last_activity_at = excluded.last_activity_at
		WHERE s.owner = excluded.owner OR s.locked_until <= %[4]s::bigint
	RETURNING 1
)`, pq, powner, a.p(micros(now.Add(opts.Session.LeaseTimeout))), pnow, older)
		claim += " AND (c.session IS NULL OR EXISTS (SELECT 1 FROM sc))"
		sessionCols, sessionJoin = ",\n\to.mine AS session_mine, o.older AS session_older", " LEFT JOIN o ON true"
	}
	ptoken, puntil := a.p(token), a.p(until)
	fmt.Fprintf(&sb, `,
u AS (
	UPDATE mq_messages m SET lock_token = %[1]s::uuid, locked_until = %[2]s::bigint, visible_at = %[2]s::bigint, attempts = m.attempts + 1
	FROM c WHERE m.id = c.id AND %[3]s
	RETURNING m.id, m.payload, m.attempts, m.enqueued_at, m.tag, m.message_key
)
SELECT c.id, c.routing_key, c.session,
	CASE WHEN c.routing_key IS NOT NULL THEN pg_try_advisory_xact_lock(%[4]s) END AS key_locked,
	u.id IS NOT NULL AS claimed, u.payload, u.attempts, u.enqueued_at, u.tag, u.message_key,
	CASE WHEN c.id IS NULL THEN (SELECT min(visible_at) FROM mq_messages WHERE queue = %[5]s AND visible_at > %[6]s) END AS next_visible%[7]s%[8]s
FROM (SELECT 1) AS one LEFT JOIN c ON true LEFT JOIN u ON true%[9]s`,
		ptoken, puntil, claim, keyLockID(pq, "c.routing_key"), pq, pnow, asyncCommit, sessionCols, sessionJoin)
	return sb.String(), a
}

// keyQuery renders the key statement of attempt: take routing key key of queue for
// token until until unless someone else holds it at now (or, with a KeyAttr filter,
// its attribute no longer passes), and lock the key's oldest eligible messages in id
// order within opts.MaxMessages and opts.MaxBytes (the first always). The messages
// are chosen in the statement's snapshot, taken after the key's advisory lock: every
// other writer of the key's rows needs that lock, so nobody changes them before the
// UPDATE (it may only wait for another consumer's candidate statement to let go of
// one, unchanged).
func keyQuery(queue, key string, opts mq.DequeueOptions, now int64, token string, until int64) (string, []any) {
	var a sqlArgs
	pq, pkey, ptoken, puntil, pnow := a.p(queue), a.p(key), a.p(token), a.p(until), a.p(now)
	attr := ""
	if f := opts.KeyAttr; f != nil {
		attr = " AND (k.attr IS NULL OR " + attrMatch("k.attr", f, &a) + ")"
	}
	tags := tagCondition(opts.Tags, "m.tag", &a)
	if tags != "" {
		tags = " AND " + tags
	}
	pmax, pbytes := a.p(int64(opts.MaxMessages)), a.p(int64(opts.MaxBytes))
	return fmt.Sprintf(`WITH kl AS (
	INSERT INTO mq_keys AS k (queue, routing_key, lock_token, locked_until) VALUES (%[1]s, %[2]s, %[3]s, %[4]s)
	ON CONFLICT (queue, routing_key) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until
	WHERE (k.locked_until IS NULL OR k.locked_until <= %[5]s::bigint)%[6]s
	RETURNING 1
),
pick AS (
	SELECT c.id FROM (
		SELECT m.id, row_number() OVER w AS n, sum(octet_length(m.payload)) OVER w AS bytes
		FROM mq_messages m
		WHERE m.queue = %[1]s AND m.routing_key = %[2]s AND m.visible_at <= %[5]s%[7]s AND EXISTS (SELECT 1 FROM kl)
		WINDOW w AS (ORDER BY m.id ROWS UNBOUNDED PRECEDING)
		ORDER BY m.id
		LIMIT %[8]s::bigint
	) c
	WHERE c.n = 1 OR c.bytes <= %[9]s::bigint
)
UPDATE mq_messages m SET lock_token = %[3]s, locked_until = %[4]s, visible_at = %[4]s, attempts = m.attempts + 1
FROM pick WHERE m.id = pick.id
RETURNING m.id, m.payload, m.attempts, m.enqueued_at, m.tag, m.session, m.message_key`,
		pq, pkey, ptoken, puntil, pnow, attr, tags, pmax, pbytes), a
}

// filters renders the eligibility conditions of opts on the message alias m, the key
// alias k and the session alias s.
func filters(opts mq.DequeueOptions, a *sqlArgs, pnow, powner string) []string {
	var conds []string
	if tags := tagCondition(opts.Tags, "m.tag", a); tags != "" {
		conds = append(conds, tags)
	}
	if opts.Session == nil {
		conds = append(conds, "m.session IS NULL")
	} else {
		conds = append(conds, fmt.Sprintf("(m.session IS NULL OR s.session IS NULL OR s.locked_until <= %s OR s.owner = %s)", pnow, powner))
	}
	if f := opts.KeyAttr; f != nil {
		if len(f.Ranges) == 0 {
			conds = append(conds, "m.routing_key IS NULL")
		} else {
			conds = append(conds, "(m.routing_key IS NULL OR k.attr IS NULL OR "+attrMatch("k.attr", f, a)+")")
		}
	}
	return conds
}

// attrMatch is true when col lies in one of f's ranges; the ranges are two array
// arguments, so the statement text does not depend on how many there are.
func attrMatch(col string, f *mq.AttrFilter, a *sqlArgs) string {
	lo, hi := make([]int64, len(f.Ranges)), make([]int64, len(f.Ranges))
	for i, r := range f.Ranges {
		lo[i], hi[i] = r.Min, r.Max
	}
	return fmt.Sprintf("EXISTS (SELECT 1 FROM unnest(%s::bigint[], %s::bigint[]) AS r(lo, hi) WHERE %s BETWEEN r.lo AND r.hi)",
		a.p(lo), a.p(hi), col)
}

// tagCondition renders f on the tag column col.
func tagCondition(f mq.TagFilter, col string, a *sqlArgs) string {
	in := func() string {
		if len(f.Tags) == 0 {
			return "false"
		}
		return col + " = ANY(" + a.p(f.Tags) + "::text[])"
	}
	switch f.Mode {
	case mq.TagDefaultOnly:
		return col + " IS NULL"
	case mq.TagOnly:
		return in()
	case mq.TagDefaultAnd:
		return "(" + col + " IS NULL OR " + in() + ")"
	case mq.TagNone:
		return "false"
	default:
		return ""
	}
}
