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

	"github.com/duroq/duroq/internal/limits"
	"github.com/duroq/duroq/internal/mqsql"
	"github.com/duroq/duroq/internal/pgsql"
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
	// claimTimeout bounds a dequeue transaction, which the caller's context does
	// not cut short (see dequeue).
	claimTimeout   = 30 * time.Second
	maxLosses      = 32
	contendedRetry = 5 * time.Millisecond
	// busyRetry is the pause before retrying a session whose older message another
	// attempt is claiming right now.
	busyRetry = time.Millisecond
)

// errLost rolls back a lost attempt's transaction.
var errLost = errors.New("mq/postgres: dequeue candidate taken by another consumer")

// exclusions are the keys and sessions this DequeueBatch call lost to other
// consumers, and the limit groups whose limits admit no batch now. phased says
// the call met visible messages of non-zero priority: its scans read every
// priority phase (see phasedScan).
type exclusions struct {
	keys, sessions, groups []string
	phased                 bool
	// limited says the call reads its queue's limits itself (see takeUnderLimits);
	// until then its scans take nothing from a queue with limits.
	limited bool
}

// loss says why an attempt was undone; the zero value is no loss.
type loss struct {
	keys    []string // routing keys held by other consumers
	session string   // the session is held by another owner, or busy
	// busy: another attempt is claiming the session with an older message right now.
	// The session is not excluded: if that attempt was by the same owner, the session
	// is ours to share once it commits.
	busy bool
}

func (l loss) lost() bool { return len(l.keys) > 0 || l.session != "" }

// add excludes what l lost and reports whether it did (a busy session is retried).
func (e *exclusions) add(l loss) bool {
	switch {
	case len(l.keys) > 0:
		for _, k := range l.keys {
			if !slices.Contains(e.keys, k) {
				e.keys = append(e.keys, k)
			}
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
	// NormalizeDequeue's name checks already reject what text cannot hold in the
	// queue and the session owner; the tags are left to this package.
	opts, err := mq.NormalizeDequeue(queue, opts)
	if err != nil {
		return opts, err
	}
	for i, t := range opts.Tags.Tags {
		if err := checkText(op, fmt.Sprintf("Tags %d", i), t); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// DequeueBatch implements mq.MessageQueue. Each attempt is one short READ COMMITTED
// transaction; while waiting it holds no connection. A long poll is woken by this
// process's writes and, through LISTEN/NOTIFY, by every other process's (see
// Notify).
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
	q.planStats.Ensure()
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
// nothing eligible. A lost session attempt rolls its whole transaction back (which
// frees its candidate rows and key locks) and the next one skips what it lost; the
// other attempts lose only back to their savepoint (see take).
func (q *Queue) dequeue(ctx context.Context, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, time.Time, error) {
	var ex exclusions
	for range maxLosses {
		if err := ctx.Err(); err != nil {
			return nil, time.Time{}, err
		}
		var (
			bs   []*mq.Batch
			next time.Time
			l    loss
		)
		// A claim runs to its end even if ctx ends meanwhile: cut short in its
		// COMMIT, it could commit unreported and hold its messages until their locks
		// lapse. The caller gets what it claimed (a Consumer or the runtime releases
		// what it will not handle).
		claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		err := q.inTx(claimCtx, "dequeue", func(tx *sqlx.Tx) (err error) {
			bs, next, l, err = q.takeLimited(claimCtx, tx, queue, opts, &ex, max, true)
			if err == nil && l.lost() {
				return errLost
			}
			return err
		})
		cancel()
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
// (then next is when a message becomes visible, if it holds none). A session
// message can only be the first batch, taken alone by attempt, whose loss take
// reports for the caller to undo: a transaction that claims or touches at most one
// session row cannot wait for sessions in an order of its own. The others are taken
// many at a time by attemptMany, each attempt after a savepoint: an attempt that
// lost a key is rolled back to it, which frees its candidate rows at once (it must
// not wait while holding rows of a key another consumer may be waiting for, see
// doc.go), and the next attempt skips the keys it lost.
func (q *Queue) take(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, max int, async bool) ([]*mq.Batch, time.Time, loss, error) {
	var bs []*mq.Batch
	if opts.Session != nil {
		b, next, l, err := q.attempt(ctx, tx, queue, opts, ex, async)
		if err != nil || l.lost() || b == nil {
			return nil, next, l, err
		}
		bs = append(bs, b)
		opts.Session = nil
	}
	savepoint := `SAVEPOINT mq_attempt`
	for losses := 0; len(bs) < max; {
		if _, err := tx.ExecContext(ctx, savepoint); err != nil {
			return nil, time.Time{}, loss{}, err
		}
		savepoint = `RELEASE SAVEPOINT mq_attempt; SAVEPOINT mq_attempt` // one round trip
		got, next, lost, missed, err := q.attemptMany(ctx, tx, queue, opts, ex, max-len(bs), async)
		if errors.Is(err, errLimited) && len(bs) > 0 {
			break // limits set since the session's batch was taken: it stands
		}
		if err != nil {
			return nil, time.Time{}, loss{}, err
		}
		ex.add(loss{keys: missed})
		if len(lost) > 0 {
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT mq_attempt`); err != nil {
				return nil, time.Time{}, loss{}, err
			}
			q.losses.Add(1)
			ex.add(loss{keys: lost})
			if losses++; losses < maxLosses {
				continue
			}
			if len(bs) == 0 {
				return nil, q.now().Add(contendedRetry), loss{}, nil
			}
			break
		}
		bs = append(bs, got...)
		if len(got) == 0 && len(missed) == 0 {
			if len(bs) == 0 {
				return nil, next, loss{}, nil
			}
			break
		}
	}
	return bs, time.Time{}, loss{}, nil
}

// errLimited ends a take whose scan found that its queue has limits (see
// eligibleFrom): takeLimited then reads them.
var errLimited = errors.New("mq/postgres: the queue has limits")

// takeLimited is take, and when the queue turns out to have limits (see mq.Limit),
// takeUnderLimits in the same transaction: a queue without limits pays no
// statement for them.
// Once a call found limits, each of its transactions reads them first.
func (q *Queue) takeLimited(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, max int, async bool) ([]*mq.Batch, time.Time, loss, error) {
	if !ex.limited {
		bs, next, l, err := q.take(ctx, tx, queue, opts, ex, max, async)
		if !errors.Is(err, errLimited) {
			return bs, next, l, err
		}
	}
	return q.takeUnderLimits(ctx, tx, queue, opts, ex, max, async)
}

// takeUnderLimits is take under the limits of queue, if it has any. It reads them
// first, locking their rows: the limited dequeues of a queue take turns (in every
// process), so each counts the batches those before it took. Then it takes batch
// by batch, each after a savepoint: a batch's first message is of a group the
// limits admit, and a keyed batch that holds more messages than the rates leave is
// rolled back and taken again within them. The buckets it drew from are stored
// back.
func (q *Queue) takeUnderLimits(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, max int, async bool) ([]*mq.Batch, time.Time, loss, error) {
	ex.limited = true // the scans need not look for limits any more
	var rules []mqsql.LimitRow
	if err := sqlx.SelectContext(ctx, tx, &rules, `SELECT `+mqsql.LimitColumns+` FROM mq_limits WHERE queue = $1 ORDER BY grp FOR UPDATE`, queue); err != nil {
		return nil, time.Time{}, loss{}, err
	}
	if len(rules) == 0 {
		return q.take(ctx, tx, queue, opts, ex, max, async)
	}
	now := q.now()
	var held []mqsql.HeldRow
	if err := sqlx.SelectContext(ctx, tx, &held, liveLocksSQL, queue, micros(now)); err != nil {
		return nil, time.Time{}, loss{}, err
	}
	budget := limits.New(now, mqsql.Rules(rules), mqsql.Held(held))
	var (
		bs   []*mq.Batch
		next time.Time
	)
	for len(bs) < max && !budget.Closed() {
		ex.groups = budget.Blocked()
		o := opts
		o.MaxMessages = min(o.MaxMessages, budget.MaxMessages(""))
		b, n, l, err := q.takeWithin(ctx, tx, queue, o, ex, budget, async)
		if err != nil || l.lost() {
			return nil, time.Time{}, l, err
		}
		if b == nil {
			next = n
			break
		}
		budget.Took(mq.LimitGroups(b))
		bs = append(bs, b)
	}
	for _, r := range budget.Spent() {
		if _, err := tx.ExecContext(ctx, `UPDATE mq_limits SET tokens = $1, refilled_at = $2 WHERE queue = $3 AND grp = $4`,
			r.Tokens, micros(r.Refilled), queue, r.Group); err != nil {
			return nil, time.Time{}, loss{}, err
		}
	}
	if len(bs) > 0 {
		return bs, time.Time{}, loss{}, nil
	}
	return nil, limits.Earliest(next, budget.Refill()), loss{}, nil
}

// takeWithin takes one batch whose messages the rates of budget leave room for,
// after a savepoint it rolls back to when the batch took too many.
func (q *Queue) takeWithin(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, budget *limits.Budget, async bool) (*mq.Batch, time.Time, loss, error) {
	for range maxLosses {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT mq_limited`); err != nil {
			return nil, time.Time{}, loss{}, err
		}
		got, next, l, err := q.take(ctx, tx, queue, opts, ex, 1, async)
		if err != nil || l.lost() || len(got) == 0 {
			return nil, next, l, err
		}
		b := got[0]
		room := budget.MaxMessages(b.Messages[0].LimitGroup)
		if len(b.Messages) <= room {
			_, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT mq_limited`)
			return b, time.Time{}, loss{}, err
		}
		if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT mq_limited`); err != nil {
			return nil, time.Time{}, loss{}, err
		}
		opts.MaxMessages = room
	}
	return nil, q.now().Add(contendedRetry), loss{}, nil
}

// limitedSQL renders whether queue pq has limits: one probe of mq_limits' key,
// which PostgreSQL evaluates once per statement (an InitPlan).
func limitedSQL(pq string) string {
	return `EXISTS (SELECT 1 FROM mq_limits l WHERE l.queue = ` + pq + `)`
}

// guardsCTE renders the CTE g of a dequeue statement: its guards, each probed
// once per statement, however many times the statement reads it (PostgreSQL
// would evaluate each copy of an uncorrelated EXISTS on its own). prioritized:
// queue pq has visible messages of non-zero priority at pnow, unless ex scans
// phased (see phasedScan); limited: pq has limits, unless ex applies them (see
// eligibleFrom). A guard ex does not need is false.
func guardsCTE(ex *exclusions, pq, pnow string) string {
	prioritized, limited := "false", "false"
	if !ex.phased {
		prioritized = prioritizedSQL(pq, pnow)
	}
	if !ex.limited {
		limited = limitedSQL(pq)
	}
	return `g AS MATERIALIZED (SELECT ` + prioritized + ` AS prioritized, ` + limited + ` AS limited)`
}

// liveLocksSQL reads the messages of a queue ($1) under a live lock at $2 (the
// limits' batches in flight) through the token index: the locked messages of
// every queue, few compared with the pending ones.
const liveLocksSQL = `SELECT lock_token::text AS lock_token, coalesce(limit_group, '') AS grp FROM mq_messages
	WHERE lock_token IS NOT NULL AND queue = $1 AND locked_until > $2`

// DequeueTx is one non-blocking DequeueBatch inside tx (opts.Wait is ignored). When
// nothing is eligible it returns a nil batch and the next time a message of the
// queue becomes visible (zero if none is pending). Attempts lost to other consumers
// are rolled back to a savepoint, so they leave no lock behind in tx.
func (q *Queue) DequeueTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions) (*mq.Batch, time.Time, error) {
	bs, next, err := q.dequeueTx(ctx, tx, queue, opts, 1)
	if len(bs) == 0 {
		return nil, next, err
	}
	return bs[0], time.Time{}, err
}

// DequeueManyTx is DequeueBatches without waiting, inside tx: up to max batches in
// a constant number of statements (see attemptMany).
func (q *Queue) DequeueManyTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	bs, _, err := q.dequeueTx(ctx, tx, queue, opts, max)
	return bs, err
}

func (q *Queue) dequeueTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, time.Time, error) {
	const op = "dequeue"
	opts, err := q.normalize(queue, opts)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := mq.CheckDequeueMax(op, max); err != nil {
		return nil, time.Time{}, err
	}
	if q.closed.Load() {
		return nil, time.Time{}, mq.Closed(op)
	}
	q.planStats.Ensure()
	if _, err := tx.ExecContext(ctx, `SAVEPOINT mq_dequeue`); err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	var ex exclusions
	for range maxLosses {
		bs, next, l, err := q.takeLimited(ctx, tx, queue, opts, &ex, max, false)
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
		return bs, next, nil
	}
	if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT mq_dequeue`); err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	return nil, q.now().Add(contendedRetry), nil
}

// claimed is what a statement returns of an un-keyed message it claimed; its
// columns are NULL in rows that describe no message.
type claimed struct {
	Payload    []byte         `db:"payload"`
	Attempts   sql.NullInt64  `db:"attempts"`
	EnqueuedAt sql.NullInt64  `db:"enqueued_at"`
	Tag        sql.NullString `db:"tag"`
	Key        sql.NullString `db:"message_key"`
	Trace      sql.NullString `db:"trace_parent"`
	Group      sql.NullString `db:"limit_group"`
	Priority   sql.NullInt64  `db:"priority"`
}

// delivery is message id as claimed, with session (if any).
func (c claimed) delivery(id int64, session sql.NullString) mq.Delivery {
	return delivery(lockedRow{ID: id, Payload: c.Payload, Attempts: int(c.Attempts.Int64),
		EnqueuedAt: c.EnqueuedAt.Int64, Tag: c.Tag, Session: session, Key: c.Key, Trace: c.Trace, Group: c.Group,
		Priority: int(c.Priority.Int64)})
}

// candidate is the row of the candidate statement: the first eligible message (if
// any), whether it was claimed already (un-keyed), whether its key's advisory lock
// was won (keyed), and otherwise when the next message becomes visible.
type candidate struct {
	ID         sql.NullInt64  `db:"id"`
	RoutingKey sql.NullString `db:"routing_key"`
	Session    sql.NullString `db:"session"`
	KeyLocked  sql.NullBool   `db:"key_locked"`
	Claimed    bool           `db:"claimed"`
	claimed
	Next  sql.NullInt64  `db:"next_visible"`
	Async sql.NullString `db:"async_commit"`
	// Prioritized: the scan locked nothing, as the queue has visible messages of
	// non-zero priority (see phasedScan).
	Prioritized bool `db:"prioritized"`
	// Limited: the scan took nothing, as the queue has limits (see eligibleFrom).
	Limited bool `db:"limited"`
	// For a session message: the owner holds the session (in the candidate's
	// snapshot), and the session has an older eligible message.
	SessionMine  sql.NullBool `db:"session_mine"`
	SessionOlder sql.NullBool `db:"session_older"`
}

type lockedRow struct {
	ID         int64
	Token      string
	Payload    []byte
	Attempts   int
	EnqueuedAt int64
	Tag        sql.NullString
	Session    sql.NullString
	Key        sql.NullString
	Trace      sql.NullString
	Group      sql.NullString
	Priority   int
}

// fields are r's fields in the order of the columns of lockKeys' statement.
func (r *lockedRow) fields() []any {
	return []any{&r.ID, &r.Token, &r.Payload, &r.Attempts, &r.EnqueuedAt, &r.Tag, &r.Session, &r.Key, &r.Trace, &r.Group, &r.Priority}
}

// attempt is one dequeue attempt in tx for one batch, which may be a session
// message (attemptMany takes the others):
//
//  1. the candidate statement picks the first eligible message with FOR UPDATE SKIP
//     LOCKED (rows other consumers are taking are skipped, never waited for). An
//     un-keyed message is claimed by the same statement (for a session message,
//     together with its session, unless another owner claimed the session first); a
//     keyed one gets pg_try_advisory_xact_lock on its routing key, which never waits;
//  2. for a keyed candidate whose key lock was won, lockKeys takes the key and
//     locks its messages.
//
// A lost key or session is reported as a loss; the caller undoes the attempt. With
// async, the transaction commits without waiting for its WAL to be flushed (see
// doc.go: a lost dequeue only makes its messages eligible again).
func (q *Queue) attempt(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, async bool) (*mq.Batch, time.Time, loss, error) {
	now := q.now()
	token := mqsql.NewToken()
	until := micros(now.Add(opts.LockTimeout))
	query, args := candidateQuery(queue, opts, ex, now, token, until, async)
	var c candidate
	if err := tx.QueryRowxContext(ctx, query, args...).StructScan(&c); err != nil {
		return nil, time.Time{}, loss{}, err
	}
	switch {
	case c.Limited:
		return nil, time.Time{}, loss{}, errLimited
	case c.Prioritized:
		ex.phased = true
		return q.attempt(ctx, tx, queue, opts, ex, async)
	case !c.ID.Valid:
		var next time.Time
		if c.Next.Valid {
			next = fromMicros(c.Next.Int64)
		}
		return nil, next, loss{}, nil
	case c.RoutingKey.Valid:
		key := c.RoutingKey.String
		if !c.KeyLocked.Bool {
			return nil, time.Time{}, loss{keys: []string{key}}, nil
		}
		bs, _, err := q.lockKeys(ctx, tx, queue, []string{key}, opts)
		if err != nil || len(bs) == 0 { // locked by a consumer that committed after our candidate's snapshot
			return nil, time.Time{}, loss{keys: []string{key}}, err
		}
		return bs[0], time.Time{}, loss{}, nil
	case !c.Claimed:
		if !c.Session.Valid {
			return nil, time.Time{}, loss{}, fmt.Errorf("candidate message %d was neither claimed nor contended", c.ID.Int64)
		}
		busy := c.SessionOlder.Bool && !c.SessionMine.Bool
		return nil, time.Time{}, loss{session: c.Session.String, busy: busy}, nil
	default:
		b := &mq.Batch{Queue: queue, Token: token, LockedUntil: fromMicros(until)}
		b.Messages = []mq.Delivery{c.delivery(c.ID.Int64, c.Session)}
		return b, time.Time{}, loss{}, nil
	}
}

func delivery(r lockedRow) mq.Delivery {
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	return mq.Delivery{ID: r.ID, Payload: r.Payload, Attempt: r.Attempts, EnqueuedAt: fromMicros(r.EnqueuedAt),
		Tag: r.Tag.String, Session: r.Session.String, Key: r.Key.String, TraceParent: r.Trace.String, LimitGroup: r.Group.String,
		Priority: r.Priority}
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
	eligible := eligibleFrom(opts, ex, &a, pq, pnow, powner)
	var sb strings.Builder
	sb.WriteString(`WITH ` + guardsCTE(ex, pq, pnow) + `,
c AS MATERIALIZED (
	` + phasedScan("m.id, m.routing_key, m.session, m.visible_at, m.priority", eligible, "1", ex.phased) + `
)`)
	claim := "c.routing_key IS NULL"
	sessionCols, sessionJoin := "", ""
	if opts.Session != nil {
		// A session the owner does not hold yet is claimed only with its oldest
		// eligible message, so when owners race for a session, the one that picked
		// its first message wins (the others skip rows being taken). The upsert then
		// claims the session unless another owner holds a live lease on it (the
		// candidate's snapshot may be older than that owner's claim).
		older := fmt.Sprintf("p.queue = %s AND p.session = c.session AND p.visible_at <= %s AND (-p.priority, p.visible_at, p.id) < (-c.priority, c.visible_at, c.id)", pq, pnow)
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
	RETURNING m.id, m.payload, m.attempts, m.enqueued_at, m.tag, m.message_key, m.trace_parent, m.limit_group, m.priority
)
SELECT c.id, c.routing_key, c.session,
	CASE WHEN c.routing_key IS NOT NULL THEN pg_try_advisory_xact_lock(%[4]s) END AS key_locked,
	u.id IS NOT NULL AS claimed, u.payload, u.attempts, u.enqueued_at, u.tag, u.message_key, u.trace_parent, u.limit_group, u.priority,
	CASE WHEN c.id IS NULL THEN %[10]s END AS next_visible, g.prioritized, g.limited%[7]s%[8]s
FROM g LEFT JOIN c ON true LEFT JOIN u ON true%[9]s`,
		ptoken, puntil, claim, keyLockID(pq, "c.routing_key"), pq, pnow, asyncCommit, sessionCols, sessionJoin,
		nextVisible(eligible, pq, pnow, &a))
	return sb.String(), a
}

// eligibleFrom renders the FROM and WHERE clauses of the messages a scan may take
// for opts, but those of the keys, sessions and limit groups ex excludes, and none
// while the queue is paused, or has limits that ex does not apply yet (see
// takeLimited). The pause and limit checks do not depend on the message:
// PostgreSQL evaluates each once per statement (an InitPlan, one probe of a
// primary key) and skips the scan when it fails.
func eligibleFrom(opts mq.DequeueOptions, ex *exclusions, a *sqlArgs, pq, pnow, powner string) string {
	limitGuard := ""
	if !ex.limited {
		limitGuard = " AND NOT (SELECT g.limited FROM g)"
	}
	// The key and session rows are looked up for each message the scan reads
	// (LATERAL, OFFSET 0: no join the planner may turn around). A join planned
	// while mq_keys held a few rows read every key of the queue for each message
	// instead (40 ms per scan with 3,000 orchestrations in flight), and duroq's
	// transactions keep their plans (pgsql.Begin).
	var sb strings.Builder
	sb.WriteString(`FROM mq_messages m
	LEFT JOIN LATERAL (SELECT k.locked_until, k.attr FROM mq_keys k
		WHERE k.queue = m.queue AND k.routing_key = m.routing_key OFFSET 0) k ON true`)
	if opts.Session != nil {
		sb.WriteString(`
	LEFT JOIN LATERAL (SELECT s.session, s.owner, s.locked_until FROM mq_sessions s
		WHERE s.queue = m.queue AND s.session = m.session OFFSET 0) s ON true`)
	}
	fmt.Fprintf(&sb, `
	WHERE m.queue = %[1]s AND m.visible_at <= %[2]s
		AND NOT EXISTS (SELECT 1 FROM mq_paused p WHERE p.queue = %[1]s)%[3]s
		AND (m.routing_key IS NULL OR k.locked_until IS NULL OR k.locked_until <= %[2]s)`, pq, pnow, limitGuard)
	for _, cond := range filters(opts, a, pnow, powner) {
		sb.WriteString("\n\t\tAND " + cond)
	}
	if len(ex.keys) > 0 {
		fmt.Fprintf(&sb, "\n\t\tAND (m.routing_key IS NULL OR m.routing_key <> ALL(%s::text[]))", a.p(ex.keys))
	}
	if len(ex.sessions) > 0 {
		fmt.Fprintf(&sb, "\n\t\tAND (m.session IS NULL OR m.session <> ALL(%s::text[]))", a.p(ex.sessions))
	}
	if len(ex.groups) > 0 {
		fmt.Fprintf(&sb, "\n\t\tAND (m.limit_group IS NULL OR m.limit_group <> ALL(%s::text[]))", a.p(ex.groups))
	}
	return sb.String()
}

// priorityPhases split a scan by the sign of the priority, in eligibility order:
// positive priorities from the partial index mq_messages_urgent, zero from
// mq_messages_ready, negative ones from mq_messages_deferred. cond is the condition
// of the phase (which implies its index's), order the order it is read in.
var priorityPhases = []struct{ cond, order string }{
	{"m.priority > 0", "m.priority DESC, m.visible_at, m.id"},
	{"m.priority = 0", "m.visible_at, m.id"},
	{"m.priority < 0", "m.priority DESC, m.visible_at, m.id"},
}

// phasedScan renders a scan that locks (FOR UPDATE SKIP LOCKED) up to limit rows
// (an SQL expression) of eligible, eligibleFrom's FROM and WHERE, in eligibility
// order, returning cols.
//
// Unless phased, it is the scan as it was before priorities, of priority 0 only
// (mq_messages_ready), guarded by g.prioritized (see guardsCTE): while the
// queue has visible messages of another priority it locks nothing, and the caller,
// told so by the statement, scans again phased. Phased, it reads the priority
// phases, each an ordered and limited branch of a UNION ALL under the same limit
// (PostgreSQL runs the branches of an Append in turn and stops pulling rows once
// the limit is reached). The plain scan keeps a queue without priorities at the
// plan, and the planning time, it had before them: the UNION ALL doubles the
// planning time of the statement.
func phasedScan(cols, eligible, limit string, phased bool) string {
	if !phased {
		return fmt.Sprintf(`SELECT %s %s
		AND m.priority = 0 AND NOT (SELECT g.prioritized FROM g)
		ORDER BY m.visible_at, m.id
		LIMIT %s
		FOR UPDATE OF m SKIP LOCKED`, cols, eligible, limit)
	}
	branches := make([]string, len(priorityPhases))
	for i, ph := range priorityPhases {
		branches[i] = fmt.Sprintf(`SELECT * FROM (SELECT %s %s
		AND %s
		ORDER BY %s
		LIMIT %s
		FOR UPDATE OF m SKIP LOCKED) AS p%d`, cols, eligible, ph.cond, ph.order, limit, i)
	}
	return `SELECT * FROM (` + strings.Join(branches, "\n\tUNION ALL ") + `) AS p LIMIT ` + limit
}

// unknown renders the parameter expression p so that the planner does not know
// its value, in the plans it makes for a run's arguments as in the plan it makes
// once for any arguments (a subquery's value is known only when the statement
// runs). In a caller's own transaction, under the server's plan_cache_mode=auto
// (duroq's own force plans made once, see pgsql.Begin), PostgreSQL otherwise plans
// again at every run a statement whose plan for the run's arguments looks cheaper:
// the scan's LIMIT (the plan for any arguments assumes a LIMIT keeps a tenth of the
// rows: 0.6 ms of planning for 0.1 ms of scan, more with a longer backlog) and
// lockKeys' arrays of keys (a plan for the run's arguments counts them). Both
// plans read the same indexes anyway.
func unknown(p string) string { return "(SELECT " + p + ")" }

// prioritizedSQL renders whether queue pq has messages of non-zero priority
// visible at pnow: one probe of each partial index, which PostgreSQL evaluates
// once per statement (an InitPlan).
func prioritizedSQL(pq, pnow string) string {
	return fmt.Sprintf(`(EXISTS (SELECT 1 FROM mq_messages u WHERE u.queue = %[1]s AND u.priority > 0 AND u.visible_at <= %[2]s)
		OR EXISTS (SELECT 1 FROM mq_messages u WHERE u.queue = %[1]s AND u.priority < 0 AND u.visible_at <= %[2]s))`, pq, pnow)
}

// nextVisible renders when a scan that found nothing should look again: after
// contendedRetry if eligible messages, eligibleFrom's FROM and WHERE, exist in its
// snapshot (the scan skipped them: other transactions had them locked, claiming
// them; if a claim rolls back, its consumer stopped mid-fetch, nothing would
// notify the waiters that they are ready again), else when the earliest invisible
// message becomes visible (NULL: none).
func nextVisible(eligibleFrom, pq, pnow string, a *sqlArgs) string {
	return fmt.Sprintf(`CASE WHEN EXISTS (SELECT 1 %s) THEN %s::bigint + %s
		ELSE (SELECT min(visible_at) FROM mq_messages WHERE queue = %s AND visible_at > %s) END`,
		eligibleFrom, pnow, a.p(contendedRetry.Microseconds()), pq, pnow)
}

// scanned is a row of the scan statement of attemptMany: an un-keyed message it
// claimed (ID), a routing key it met and whether its advisory lock was won
// (RoutingKey), or its last row, saying when the next message becomes visible if it
// found none.
type scanned struct {
	ID    sql.NullInt64
	Token sql.NullString
	claimed
	// Batch is the rank of the message's (or key's) batch in eligibility order.
	Batch      sql.NullInt64
	RoutingKey sql.NullString
	Won        sql.NullBool
	Next       sql.NullInt64
	Scanned    sql.NullInt64
	// Prioritized (last row): the scan locked nothing, as the queue has visible
	// messages of non-zero priority (see phasedScan).
	Prioritized sql.NullBool
	// Limited (last row): the scan took nothing, as the queue has limits (see
	// eligibleFrom).
	Limited sql.NullBool
	Async   sql.NullString
}

// fields are s's fields in the order of the columns of scanQuery's statement.
func (s *scanned) fields() []any {
	return []any{&s.ID, &s.Token, &s.Payload, &s.Attempts, &s.EnqueuedAt, &s.Tag, &s.Key, &s.Trace, &s.Group, &s.Priority,
		&s.Batch, &s.RoutingKey, &s.Won, &s.Next, &s.Scanned, &s.Async, &s.Prioritized, &s.Limited}
}

// attemptMany is one dequeue attempt in tx for up to max batches of messages
// without a session, in two statements whatever max is:
//
//  1. the scan statement locks the first eligible messages with FOR UPDATE SKIP
//     LOCKED (rows other consumers are taking are skipped, never waited for), keeps
//     those of the first max batches (an un-keyed message is a batch, a routing
//     key's messages are one) and tries the advisory lock of each of their routing
//     keys, which never waits. If it won every key, it also claims each un-keyed
//     message (its token one of newTokens, by its batch's rank);
//  2. if it won keys, lockKeys takes them and locks their messages.
//
// If a key was lost (its advisory lock is held) the attempt claims nothing and
// returns the lost keys: the caller must undo it before anything else. missed are
// the won keys lockKeys could not take (claimed by a consumer that committed since
// the scan's snapshot); the batches it took stand.
//
// The plain scan reads one row per batch (see keyHead), so max rows. A phased scan
// reads every eligible row of a key: max rows times the rows per batch the
// previous phased scan saw (q.scanRatio), about a key's backlog for keyed traffic,
// so that one attempt usually finds max batches.
func (q *Queue) attemptMany(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, ex *exclusions, max int, async bool) (bs []*mq.Batch, next time.Time, lost, missed []string, err error) {
	now := q.now()
	until := micros(now.Add(opts.LockTimeout))
	scan := min(max, maxScanRows)
	if ratio := int(q.scanRatio.Load()); ex.phased && ratio > 1 {
		scan = min(max*ratio, maxScanRows)
	}
	query, args := scanQuery(queue, opts, ex, now, until, max, scan, async)
	var (
		won  []string
		read int64
		// The ranks of the batches in eligibility order: by token (un-keyed) and by key.
		tokenRank, keyRank = map[string]int64{}, map[string]int64{}
		// The scan locked nothing: the queue has limits, or visible messages of
		// non-zero priority (scan every phase).
		limited, prioritized bool
	)
	err = queryRows(ctx, tx, (*scanned).fields, func(r scanned) {
		switch {
		case r.ID.Valid:
			bs = append(bs, &mq.Batch{Queue: queue, Token: r.Token.String, LockedUntil: fromMicros(until),
				Messages: []mq.Delivery{r.delivery(r.ID.Int64, sql.NullString{})}})
			tokenRank[r.Token.String] = r.Batch.Int64
		case r.RoutingKey.Valid && r.Won.Bool:
			won = append(won, r.RoutingKey.String)
			keyRank[r.RoutingKey.String] = r.Batch.Int64
		case r.RoutingKey.Valid:
			lost = append(lost, r.RoutingKey.String)
		case r.Limited.Bool:
			limited = true
		case r.Prioritized.Bool:
			prioritized = true
		default:
			read = r.Scanned.Int64
			if r.Next.Valid {
				next = fromMicros(r.Next.Int64)
			}
		}
	}, query, args...)
	switch {
	case err != nil:
		return nil, time.Time{}, nil, nil, err
	case limited:
		return nil, time.Time{}, nil, nil, errLimited
	case prioritized:
		ex.phased = true
		return q.attemptMany(ctx, tx, queue, opts, ex, max, async)
	}
	if batches := int64(len(bs) + len(won) + len(lost)); batches > 0 && ex.phased {
		q.scanRatio.Store((read + batches - 1) / batches)
	}
	if len(lost) > 0 {
		return nil, time.Time{}, lost, nil, nil
	}
	if len(won) > 0 {
		keyed, notTaken, err := q.lockKeys(ctx, tx, queue, won, opts)
		if pgsql.IsLockNotAvailable(err) {
			// Another consumer's scan held rows of these keys for keyRowsWait, maybe
			// waiting for ours: lost, like a key whose advisory lock another holds;
			// the caller rolls the attempt back, freeing what it holds.
			return nil, time.Time{}, won, nil, nil
		}
		if err != nil {
			return nil, time.Time{}, nil, nil, err
		}
		bs, missed = append(bs, keyed...), notTaken
	}
	// Batches in eligibility order, as one at a time would have taken them.
	rankOf := func(b *mq.Batch) int64 {
		if b.RoutingKey != "" {
			return keyRank[b.RoutingKey]
		}
		return tokenRank[b.Token]
	}
	slices.SortFunc(bs, func(a, b *mq.Batch) int { return cmp.Compare(rankOf(a), rankOf(b)) })
	return bs, next, nil, missed, nil
}

// newTokens returns n new tokens (mqsql.NewToken): the scan statement gives the
// un-keyed message of batch rank i the i-th. Each token is drawn whole: one random
// prefix per statement completed with the rank left two statements of one
// millisecond only 42 random bits apart, and a token two batches shared would let
// one's Ack delete the other's messages.
func newTokens(n int) []string {
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = mqsql.NewToken()
	}
	return tokens
}

// tokenBytes is tokens as a uuid[] parameter. pgx encodes a []string for one only
// after failing the binary format, which builds an error that formats the whole
// slice on every statement; 16-byte arrays it encodes at once. A token that is not
// a UUID (checkToken turns callers' away first) becomes the nil UUID, which no
// batch holds.
func tokenBytes(tokens []string) [][16]byte {
	b := make([][16]byte, len(tokens))
	for i, t := range tokens {
		if u, err := uuid.Parse(t); err == nil {
			b[i] = u
		}
	}
	return b
}

// keyRowsWait bounds lockKeys' wait for rows another consumer's scan holds.
const keyRowsWait = 200 * time.Millisecond

// maxScanRows bounds the rows one scan locks.
const maxScanRows = 1024

// scanQuery renders the scan statement of attemptMany: scan rows, of which those of
// the first max batches are kept.
func scanQuery(queue string, opts mq.DequeueOptions, ex *exclusions, now time.Time, until int64, max, scan int, async bool) (string, []any) {
	var a sqlArgs
	pq, pnow := a.p(queue), a.p(micros(now))
	eligible := eligibleFrom(opts, ex, &a, pq, pnow, "")
	scanned := eligible
	if !ex.phased {
		scanned += "\n\t\tAND " + keyHead(opts, &a, pnow)
	}
	asyncCommit := "NULL::text"
	if async {
		asyncCommit = "set_config('synchronous_commit', 'off', true)"
	}
	// r numbers the batches in eligibility order by their first message, a key's
	// most urgent one: a key competes with it.
	return fmt.Sprintf(`WITH %[7]s,
c AS MATERIALIZED (
	%[1]s
),
r AS MATERIALIZED (
	SELECT g.id, g.routing_key, g.batch FROM (
		SELECT f.id, f.routing_key, dense_rank() OVER (ORDER BY f.first_priority DESC, f.first_at, f.first_id) AS batch FROM (
			SELECT c.id, c.routing_key, first_value(c.priority) OVER w AS first_priority,
				first_value(c.visible_at) OVER w AS first_at, first_value(c.id) OVER w AS first_id
			FROM c WINDOW w AS (PARTITION BY c.routing_key, CASE WHEN c.routing_key IS NULL THEN c.id END ORDER BY c.priority DESC, c.visible_at, c.id)
		) f
	) g WHERE g.batch <= %[2]s
),
kl AS MATERIALIZED (
	SELECT d.routing_key, d.batch, pg_try_advisory_xact_lock(%[3]s) AS won
	FROM (SELECT DISTINCT r.routing_key, r.batch FROM r WHERE r.routing_key IS NOT NULL) d
),
u AS (
	UPDATE mq_messages m SET lock_token = (%[8]s::uuid[])[r.batch], locked_until = %[4]s, visible_at = %[4]s, attempts = m.attempts + 1
	FROM r WHERE m.id = r.id AND r.routing_key IS NULL AND NOT EXISTS (SELECT 1 FROM kl WHERE NOT kl.won)
	RETURNING m.id, m.lock_token, m.payload, m.attempts, m.enqueued_at, m.tag, m.message_key, m.trace_parent, m.limit_group, m.priority, r.batch
)
SELECT u.id, u.lock_token::text AS token, u.payload, u.attempts, u.enqueued_at, u.tag, u.message_key, u.trace_parent, u.limit_group, u.priority, u.batch,
	NULL::text AS routing_key, NULL::boolean AS won, NULL::bigint AS next_visible, NULL::bigint AS scanned, NULL::text AS async_commit,
	NULL::boolean AS prioritized, NULL::boolean AS limited FROM u
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, kl.batch, kl.routing_key, kl.won, NULL, NULL, NULL, NULL, NULL FROM kl
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	CASE WHEN NOT EXISTS (SELECT 1 FROM c) THEN %[5]s END,
	(SELECT count(*) FROM c), %[6]s, g.prioritized, g.limited FROM g`,
		phasedScan("m.id, m.routing_key, m.visible_at, m.priority", scanned, unknown(a.p(int64(scan))+"::bigint"), ex.phased),
		a.p(int64(max)), keyLockID(pq, "d.routing_key"), a.p(until), nextVisible(eligible, pq, pnow, &a), asyncCommit,
		guardsCTE(ex, pq, pnow), a.p(tokenBytes(newTokens(min(max, scan))))), a // a rank is at most the rows scanned
}

// keyHead renders that the message m is un-keyed or its key's first in the plain
// scan's order: no message of its key visible at pnow that passes opts' tag filter
// comes before it by (visible_at, id). A key competes with that message, so a
// scan needs no other row of it (lockKeys locks the key's messages). A scan that
// locks one row per key meets another consumer's scan on a key only when both
// reach that row, which the second skips (SKIP LOCKED); otherwise both would try
// the key and one would lose it, which undoes its whole attempt. With 16
// consumers on keyed traffic that made most attempts fail.
//
// The probe reads the key's messages through the routing index: visible_at + 0 is
// no column the ready index (queue, visible_at, id) could range over. Otherwise a
// plan made while the table held a few rows could walk the queue's ready messages
// for every message the scan reads: 2 s per scan at 5,000 messages.
func keyHead(opts mq.DequeueOptions, a *sqlArgs, pnow string) string {
	before := "o.queue = m.queue AND o.routing_key = m.routing_key AND o.visible_at + 0 <= " + pnow +
		" AND (o.visible_at + 0, o.id) < (m.visible_at, m.id)"
	if tags := tagCondition(opts.Tags, "o.tag", a); tags != "" {
		before += " AND " + tags
	}
	return "(m.routing_key IS NULL OR NOT EXISTS (SELECT 1 FROM mq_messages o WHERE " + before + "))"
}

// lockKeys takes keys of queue, whose advisory locks tx holds, each for a new token
// unless someone else holds it (or, with a KeyAttr filter, its attribute no longer
// passes), and locks each taken key's oldest eligible messages in id order within
// opts.MaxMessages and opts.MaxBytes (the first always): one statement for any
// number of keys. It returns the batches of the keys it took and the keys it did
// not. The messages are chosen in the statement's snapshot, taken after the keys'
// advisory locks: every other writer of the keys' rows needs those locks, so nobody
// changes them before the UPDATE. It may wait for another consumer's scan to let
// go of some: one that lost the key and is being undone (a few milliseconds), or
// one that locked them beyond the batches it keeps and waits for its own keys'
// rows, maybe for ours (a deadlock). So the statement waits at most keyRowsWait
// (lock_timeout for the rest of the transaction), then fails with lock not
// available, which attemptMany reports as lost keys.
func (q *Queue) lockKeys(ctx context.Context, tx *sqlx.Tx, queue string, keys []string, opts mq.DequeueOptions) (bs []*mq.Batch, missed []string, err error) {
	// Read the clock now: the keys' advisory locks are ours, so whatever their
	// previous holders did (an Abandon making messages visible again) committed with
	// times no later than this.
	now := q.now()
	until := micros(now.Add(opts.LockTimeout))
	tokens := newTokens(len(keys))
	var a sqlArgs
	pq, pkeys, ptokens, puntil, pnow := a.p(queue), a.p(keys), a.p(tokenBytes(tokens)), a.p(until), a.p(micros(now))
	attr := ""
	if f := opts.KeyAttr; f != nil {
		attr = " AND (k.attr IS NULL OR " + attrMatch("k.attr", f, &a) + ")"
	}
	tags := tagCondition(opts.Tags, "m.tag", &a)
	if tags != "" {
		tags = " AND " + tags
	}
	pmax, pbytes := a.p(int64(opts.MaxMessages)), a.p(int64(opts.MaxBytes))
	query := fmt.Sprintf(`WITH kl AS (
	INSERT INTO mq_keys AS k (queue, routing_key, lock_token, locked_until)
	SELECT %[1]s, w.routing_key, w.token, %[4]s FROM unnest(%[2]s, %[3]s) AS w(routing_key, token)
	WHERE set_config('lock_timeout', '%[10]d', true) IS NOT NULL
	ON CONFLICT (queue, routing_key) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until
	WHERE (k.locked_until IS NULL OR k.locked_until <= %[5]s::bigint)%[6]s
	RETURNING k.routing_key, k.lock_token
),
lk AS MATERIALIZED (
	SELECT c.id, c.size, kl.routing_key, kl.lock_token FROM kl CROSS JOIN LATERAL (
		SELECT m.id, octet_length(m.payload) AS size
		FROM mq_messages m
		WHERE m.queue = %[1]s AND m.routing_key = kl.routing_key AND m.routing_key IS NOT NULL AND m.visible_at <= %[5]s%[7]s
		ORDER BY m.id
		LIMIT %[8]s::bigint
		FOR UPDATE OF m
	) c
),
pick AS (
	SELECT p.id, p.lock_token FROM (
		SELECT lk.id, lk.lock_token, row_number() OVER w AS n, sum(lk.size) OVER w AS bytes
		FROM lk WINDOW w AS (PARTITION BY lk.routing_key ORDER BY lk.id ROWS UNBOUNDED PRECEDING)
	) p
	WHERE p.n = 1 OR p.bytes <= %[9]s::bigint
)
UPDATE mq_messages m SET lock_token = pick.lock_token, locked_until = %[4]s, visible_at = %[4]s, attempts = m.attempts + 1
FROM pick WHERE m.id = pick.id
RETURNING m.id, m.lock_token::text AS token, m.payload, m.attempts, m.enqueued_at, m.tag, m.session, m.message_key, m.trace_parent,
	m.limit_group, m.priority`,
		pq, unknown(pkeys+"::text[]"), unknown(ptokens+"::uuid[]"), puntil, pnow, attr, tags, pmax, pbytes, keyRowsWait.Milliseconds())
	var rows []lockedRow
	if err := queryRows(ctx, tx, (*lockedRow).fields, func(r lockedRow) { rows = append(rows, r) }, query, a...); err != nil {
		return nil, nil, err
	}
	// RETURNING gives no order guarantee: each batch is in enqueue order.
	slices.SortFunc(rows, func(a, b lockedRow) int { return cmp.Compare(a.ID, b.ID) })
	byToken := make(map[string]*mq.Batch, len(keys))
	for i, key := range keys {
		byToken[tokens[i]] = &mq.Batch{Queue: queue, RoutingKey: key, Token: tokens[i], LockedUntil: fromMicros(until)}
	}
	for _, r := range rows {
		b := byToken[r.Token]
		if len(b.Messages) == 0 {
			bs = append(bs, b)
		}
		b.Messages = append(b.Messages, delivery(r))
	}
	for i, key := range keys {
		if len(byToken[tokens[i]].Messages) == 0 {
			missed = append(missed, key)
		}
	}
	return bs, missed, nil
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
