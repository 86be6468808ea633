package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/duroq/duroq/internal/limits"
	"github.com/duroq/duroq/internal/mqsql"
	"github.com/duroq/duroq/internal/sqltext"
	"github.com/duroq/duroq/internal/wake"
	"github.com/duroq/duroq/mq"
	"github.com/jmoiron/sqlx"
)

// DequeueBatch implements mq.MessageQueue. Each attempt is one short transaction;
// while waiting it holds no connection.
func (q *Queue) DequeueBatch(ctx context.Context, queue string, opts mq.DequeueOptions) (*mq.Batch, error) {
	batches, err := q.poll(ctx, queue, opts, 1)
	if len(batches) == 0 {
		return nil, err
	}
	return batches[0], err
}

// DequeueBatches implements mq.MessageQueue: each attempt is one transaction of a
// constant number of statements (see DequeueManyTx).
func (q *Queue) DequeueBatches(ctx context.Context, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	if err := mq.CheckDequeueMax("dequeue", max); err != nil {
		return nil, err
	}
	return q.poll(ctx, queue, opts, max)
}

// poll takes up to max batches of queue, waiting up to opts.Wait for one.
func (q *Queue) poll(ctx context.Context, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	const op = "dequeue"
	opts, err := mq.NormalizeDequeue(queue, opts)
	if err != nil {
		return nil, err
	}
	if q.closed.Load() {
		return nil, mq.Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mq/sqlite: %s %q: %w", op, mq.Clip(queue), err)
	}
	batches, err := wake.Poll(ctx, &q.hub, queue, opts.Wait, q.now, func() (bs []*mq.Batch, ok bool, next time.Time, err error) {
		err = q.run(ctx, op, func(tx runner) ([]string, error) {
			bs, next, err = q.dequeue(ctx, tx, queue, opts, max)
			return nil, err
		})
		return bs, len(bs) > 0, next, err
	})
	if err != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("mq/sqlite: %s %q: %w", op, mq.Clip(queue), err)
	}
	return batches, err
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
// would, in a constant number of statements: the candidate scan, a check that the
// scan saw every visible message of its keys, the upsert of the key locks, one
// update locking the batches the scan saw whole, one locking the other keys' and
// the upsert of the session leases. Batches come in eligibility order, each with its
// own token.
func (q *Queue) DequeueManyTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	batches, _, err := q.dequeue(ctx, tx, queue, opts, max)
	return batches, err
}

func (q *Queue) dequeue(ctx context.Context, tx runner, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, time.Time, error) {
	const op = "dequeue"
	opts, err := mq.NormalizeDequeue(queue, opts)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := mq.CheckDequeueMax(op, max); err != nil {
		return nil, time.Time{}, err
	}
	if q.closed.Load() {
		return nil, time.Time{}, mq.Closed(op)
	}
	at := q.now()
	now := micros(at)
	var (
		batches []*mq.Batch
		refill  time.Time // when a rate that held messages back has a token again
	)
	candidates, limited, err := q.candidates(ctx, tx, queue, opts, max, now, nil)
	if err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	var rules []mqsql.LimitRow
	if limited {
		if err := q.stmts.Select(ctx, tx, &rules, `SELECT `+mqsql.LimitColumns+` FROM mq_limits WHERE queue = ?`, queue); err != nil {
			return nil, time.Time{}, wrap(op, err)
		}
	}
	switch {
	case len(rules) > 0: // the limits choose among the candidates
		batches, refill, err = q.dequeueLimited(ctx, tx, queue, opts, max, at, rules)
	case len(candidates) > 0:
		batches, err = q.lockBatches(ctx, tx, queue, opts, candidates, now)
	}
	if err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	if len(batches) > 0 {
		return batches, time.Time{}, nil
	}
	var next sql.NullInt64
	if err := q.stmts.Get(ctx, tx, &next, `SELECT MIN(visible_at) FROM mq_messages WHERE queue = +? AND visible_at > +?`, queue, now); err != nil {
		return nil, time.Time{}, wrap(op, err)
	}
	if !next.Valid {
		return nil, refill, nil
	}
	return nil, limits.Earliest(fromMicros(next.Int64), refill), nil
}

// dequeueLimited takes up to max batches of queue at now under the limits of rules
// (see mq.Limit), batch by batch: each batch's first message is of a group the
// limits admit, and a keyed batch takes no more messages than the rates leave.
// The buckets it drew from are stored back. When it takes nothing, it returns when
// a rate that held messages back has a token again.
func (q *Queue) dequeueLimited(ctx context.Context, tx runner, queue string, opts mq.DequeueOptions, max int, at time.Time, rules []mqsql.LimitRow) ([]*mq.Batch, time.Time, error) {
	now := micros(at)
	var held []mqsql.HeldRow
	if err := q.stmts.Select(ctx, tx, &held, liveLocksSQL, queue, now); err != nil {
		return nil, time.Time{}, err
	}
	budget := limits.New(at, mqsql.Rules(rules), mqsql.Held(held))
	var batches []*mq.Batch
	for len(batches) < max && !budget.Closed() {
		candidates, _, err := q.candidates(ctx, tx, queue, opts, 1, now, budget.Blocked())
		if err != nil || len(candidates) == 0 {
			if err != nil {
				return nil, time.Time{}, err
			}
			break
		}
		o := opts
		o.MaxMessages = min(o.MaxMessages, budget.MaxMessages(candidates[0].group.String))
		bs, err := q.lockBatches(ctx, tx, queue, o, candidates, now)
		if err != nil {
			return nil, time.Time{}, err
		}
		budget.Took(mq.LimitGroups(bs[0]))
		batches = append(batches, bs...)
	}
	for _, r := range budget.Spent() {
		if _, err := q.stmts.Exec(ctx, tx, `UPDATE mq_limits SET tokens = ?, refilled_at = ? WHERE queue = ? AND grp = ?`,
			r.Tokens, micros(r.Refilled), queue, r.Group); err != nil {
			return nil, time.Time{}, err
		}
	}
	if len(batches) > 0 {
		return batches, time.Time{}, nil
	}
	return nil, budget.Refill(), nil
}

// liveLocksSQL reads the messages of a queue under a live lock (the limits' batches in
// flight) through the token index: the locked messages of every queue, few
// compared with the pending ones.
const liveLocksSQL = `SELECT lock_token, coalesce(limit_group, '') AS grp FROM mq_messages INDEXED BY mq_messages_token
	WHERE lock_token IS NOT NULL AND queue = ? AND locked_until > ?`

// lockedRow is a message a dequeue locks, as the candidate scan reads it or a
// locking statement returns it.
type lockedRow struct {
	id         int64
	token      string // rows returned by a locking statement
	payload    []byte // nil when the scan left it out (size > scanPayload)
	size       int    // of the payload
	attempts   int    // before the fetch, as read; after it, as returned
	enqueuedAt int64
	tag, key   sql.NullString
	session    sql.NullString
	trace      sql.NullString // the producer's traceparent
	group      sql.NullString // the limit group
	priority   int
}

func (r *lockedRow) delivery() mq.Delivery {
	if r.payload == nil {
		r.payload = []byte{}
	}
	return mq.Delivery{ID: r.id, Payload: r.payload, Attempt: r.attempts, EnqueuedAt: fromMicros(r.enqueuedAt),
		Tag: r.tag.String, Session: r.session.String, Key: r.key.String, TraceParent: r.trace.String, LimitGroup: r.group.String,
		Priority: r.priority}
}

// candidate is the first message the scan found of a batch.
type candidate struct {
	lockedRow
	routingKey sql.NullString
	// whole (keyed) says that rows, the key's messages the scan read, may be all its
	// visible messages: the batch is then locked from them.
	whole bool
	rows  []lockedRow
}

// The candidate scan reads the messages themselves, so that locking the batches it
// saw whole needs to return nothing; it leaves out payloads larger than
// scanPayload, as it may read past many messages of its keys, and reads at most
// scanRows rows (or max) looking for the batches' keys.
const (
	scanPayload = 1 << 10
	scanRows    = 4096
)

// probes are what the plain phase of the candidate scan reports of its queue: it
// has visible messages of positive (urgent) or negative (deferred) priority, or
// limits (one probe of each partial index and of mq_limits' key).
type probes struct{ urgent, deferred, limited bool }

// probesSQL makes the probes of a queue at a time (their parameters: queue, now,
// queue, now, queue).
const probesSQL = `EXISTS (SELECT 1 FROM mq_messages u WHERE u.queue = +? AND u.priority > 0 AND u.visible_at <= +?),
	EXISTS (SELECT 1 FROM mq_messages u WHERE u.queue = +? AND u.priority < 0 AND u.visible_at <= +?),
	EXISTS (SELECT 1 FROM mq_limits l WHERE l.queue = +?)`

// A priority phase is the part of the candidate scan that reads the messages of one
// sign of priority, in eligibility order, from an index of its own: positive ones
// from mq_messages_urgent, zero from mq_messages_ready, negative ones from
// mq_messages_deferred. SQLite uses a partial index only for a condition that
// repeats the index's literally: cond does.
type phase struct{ cond, order string }

var (
	urgentPhase   = phase{"m.priority > 0", "m.priority DESC, m.visible_at, m.id"}
	plainPhase    = phase{"m.priority = 0", "m.visible_at, m.id"}
	deferredPhase = phase{"m.priority < 0", "m.priority DESC, m.visible_at, m.id"}
)

// phaseSQL scans the eligible messages of ph in eligibility order, none while the
// queue is paused; cond adds the conditions of the options (see filters), which
// need the session leases if sessions is set. The pause check does not depend on
// the message: SQLite evaluates it once, one probe of mq_paused's key.
//
// Its first three columns are probes (see probes), which the plain phase makes
// (once per statement, their first five parameters) so that a queue without
// priorities and limits needs no other statement; the other phases return false.
// Each statement costs as much again as its index work on SQLite, which is why
// the phases are not one UNION ALL: its branches cost even when not reached. Its
// parameters, as those of every statement a dequeue or a peek runs, are +? so that
// SQLite does not recompile it at every run (see internal/sqliteconn).
func phaseSQL(ph phase, cond string, sessions bool) string {
	probes := "0, 0, 0"
	if ph == plainPhase {
		probes = probesSQL
	}
	join := ""
	if sessions {
		join = `LEFT JOIN mq_sessions s ON s.queue = m.queue AND s.session = m.session`
	}
	return `SELECT ` + probes + `, m.id, m.routing_key, m.session, m.attempts, m.enqueued_at, m.tag, m.message_key, m.trace_parent, m.limit_group, m.priority,
			length(m.payload), CASE WHEN length(m.payload) <= ` + strconv.Itoa(scanPayload) + ` THEN m.payload END
		FROM mq_messages m
		LEFT JOIN mq_keys k ON k.queue = m.queue AND k.routing_key = m.routing_key
		` + join + `
		WHERE m.queue = +? AND ` + ph.cond + ` AND m.visible_at <= +?
		  AND NOT EXISTS (SELECT 1 FROM mq_paused p WHERE p.queue = +?)
		  AND (m.routing_key IS NULL OR k.locked_until IS NULL OR k.locked_until <= +?)` + cond + `
		ORDER BY ` + ph.order + ` LIMIT +?`
}

// candidates streams the scan in eligibility order and stops at want batches: a
// key's first message (its most urgent) stands for the key's batch, its others join
// the key's rows, which bounded puts back in id order. Then one statement checks
// which keys have no other visible message. The messages of blocked limit groups
// are left out of the scan.
//
// The scan starts with the plain phase, whose probes say whether the other phases
// may find anything: a queue without priorities reads mq_messages_ready as it did
// before priorities, in one statement (two when it finds nothing: the probes then
// come alone). When the queue has visible messages of
// positive priority, the scan starts again with them. limited says the queue may
// have limits (see mq.Limit), which the candidates ignored: the caller must then
// read them.
func (q *Queue) candidates(ctx context.Context, tx runner, queue string, opts mq.DequeueOptions, want int, now int64, blocked []string) (_ []candidate, limited bool, _ error) {
	cond, condArgs := filters(opts, now)
	if cond != "" {
		cond = " AND " + cond
	}
	if len(blocked) > 0 {
		cond += " AND (m.limit_group IS NULL OR m.limit_group NOT IN (" + sqltext.Params(len(blocked)) + "))"
		for _, g := range blocked {
			condArgs = append(condArgs, g)
		}
	}
	limit := want
	if want < scanRows {
		limit = scanRows
		if opts.MaxMessages <= scanRows/want {
			limit = want * opts.MaxMessages // as many as the batches could take
		}
	}
	var (
		candidates []candidate
		seen       = map[string]int{} // key → index in candidates
	)
	// read scans ph until the candidates reach want; found says it read a row,
	// whose probes (the plain phase's) it returns.
	probeArgs := []any{queue, now, queue, now, queue}
	read := func(ph phase) (found bool, p probes, err error) {
		args := append(append([]any{queue, now, queue, now}, condArgs...), limit)
		if ph == plainPhase {
			args = slices.Concat(probeArgs, args)
		}
		scan, err := q.stmts.Query(ctx, tx, phaseSQL(ph, cond, opts.Session != nil), args...)
		if err != nil {
			return false, p, err
		}
		for len(candidates) < want && scan.Next() {
			found = true
			if err := q.scanCandidate(scan, &candidates, seen, &p); err != nil {
				scan.Close()
				return false, p, err
			}
		}
		return found, p, errors.Join(scan.Err(), scan.Close())
	}
	found, p, err := read(plainPhase)
	if err != nil {
		return nil, false, err
	}
	if !found { // no row brought the probes: make them alone
		rows, err := q.stmts.Query(ctx, tx, `SELECT `+probesSQL, probeArgs...)
		if err != nil {
			return nil, false, err
		}
		for rows.Next() {
			err = rows.Scan(&p.urgent, &p.deferred, &p.limited)
		}
		if err := errors.Join(err, rows.Err(), rows.Close()); err != nil {
			return nil, false, err
		}
	}
	if p.urgent {
		candidates, seen = nil, map[string]int{}
		if _, _, err := read(urgentPhase); err != nil {
			return nil, false, err
		}
		if found && len(candidates) < want {
			if _, _, err := read(plainPhase); err != nil {
				return nil, false, err
			}
		}
	}
	if p.deferred && len(candidates) < want {
		if _, _, err := read(deferredPhase); err != nil {
			return nil, false, err
		}
	}
	candidates, err = q.checkWhole(ctx, tx, queue, now, candidates, seen)
	return candidates, p.limited && len(candidates) > 0, err
}

// scanCandidate reads a row of a phase into candidates (seen: key → index in
// candidates): a new batch, or a row of a key's batch. urgent and deferred receive
// the row's probes.
func (q *Queue) scanCandidate(scan *sql.Rows, candidates *[]candidate, seen map[string]int, p *probes) error {
	var r lockedRow
	var routingKey sql.NullString
	if err := scan.Scan(&p.urgent, &p.deferred, &p.limited, &r.id, &routingKey, &r.session, &r.attempts, &r.enqueuedAt, &r.tag, &r.key, &r.trace, &r.group, &r.priority,
		&r.size, &r.payload); err != nil {
		return err
	}
	switch i, ok := seen[routingKey.String]; {
	case !routingKey.Valid:
		*candidates = append(*candidates, candidate{lockedRow: r})
	case !ok:
		seen[routingKey.String] = len(*candidates)
		*candidates = append(*candidates, candidate{lockedRow: r, routingKey: routingKey, whole: r.size <= scanPayload, rows: []lockedRow{r}})
	default:
		// A message without its payload leaves the key's batch to lockKeysSQL.
		c := &(*candidates)[i]
		if c.whole = c.whole && r.size <= scanPayload; c.whole {
			c.rows = append(c.rows, r)
		} else {
			c.rows = nil
		}
	}
	return nil
}

// checkWhole clears the whole flag of the keyed candidates whose key has more
// visible messages than the scan read.
func (q *Queue) checkWhole(ctx context.Context, tx runner, queue string, now int64, candidates []candidate, seen map[string]int) ([]candidate, error) {
	var counts []any // (key, rows) pairs
	most := 0
	for _, c := range candidates {
		if c.whole {
			counts = append(counts, c.routingKey.String, len(c.rows))
			most = max(most, len(c.rows))
		}
	}
	if len(counts) == 0 {
		return candidates, nil
	}
	rows, err := q.stmts.Query(ctx, tx, moreVisibleSQL(len(counts)/2), append(counts, queue, now, most+1)...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, err
		}
		candidates[seen[k]].whole = false
	}
	return candidates, errors.Join(rows.Err(), rows.Close())
}

// moreVisibleSQL finds which of n (key, count) pairs name a key with more visible
// messages than count; it counts up to a given number (more than every count).
func moreVisibleSQL(n int) string {
	return `WITH t(k, n) AS (VALUES ` + sqltext.Rows(n, 2) + `)
		SELECT t.k FROM t WHERE (SELECT count(*) FROM (SELECT 1 FROM mq_messages AS m INDEXED BY mq_messages_routing
			WHERE m.queue = +? AND m.routing_key = t.k AND m.visible_at <= +? LIMIT +?)) > t.n`
}

// lockBatches locks a batch for each candidate, in a constant number of statements.
func (q *Queue) lockBatches(ctx context.Context, tx runner, queue string, opts mq.DequeueOptions, candidates []candidate, now int64) ([]*mq.Batch, error) {
	until := micros(q.now().Add(opts.LockTimeout))
	var (
		batches  = make([]*mq.Batch, 0, len(candidates))
		byToken  = map[string]*mq.Batch{}
		keyArgs  []any // (key, token) pairs of every keyed batch
		lockKeys []any // (key, token) pairs of the batches lockKeysSQL takes
		lockIDs  []any // (id, token) pairs of the messages of the other batches
		partial  bool  // a message in lockIDs misses its payload
		sessions []string
	)
	for _, c := range candidates {
		b := &mq.Batch{Queue: queue, RoutingKey: c.routingKey.String, Token: mqsql.NewToken(), LockedUntil: fromMicros(until)}
		batches = append(batches, b)
		byToken[b.Token] = b
		if c.session.Valid && !slices.Contains(sessions, c.session.String) {
			sessions = append(sessions, c.session.String)
		}
		rows := []lockedRow{c.lockedRow}
		if c.routingKey.Valid {
			keyArgs = append(keyArgs, c.routingKey.String, b.Token)
			if !c.whole {
				lockKeys = append(lockKeys, c.routingKey.String, b.Token)
				continue
			}
			rows = bounded(c.rows, opts)
		}
		for _, r := range rows {
			lockIDs = append(lockIDs, r.id, b.Token)
			partial = partial || r.payload == nil && r.size > 0
			r.attempts++ // this fetch
			b.Messages = append(b.Messages, r.delivery())
		}
	}

	if n := len(keyArgs) / 2; n > 0 {
		if _, err := q.stmts.Exec(ctx, tx, `INSERT INTO mq_keys (queue, routing_key, lock_token, locked_until)
			SELECT ?, column1, column2, ? FROM (VALUES `+sqltext.Rows(n, 2)+`) WHERE true
			ON CONFLICT (queue, routing_key) DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until`,
			append([]any{queue, until}, keyArgs...)...); err != nil {
			return nil, err
		}
	}
	var locked []lockedRow // returned by the locking statements
	if n := len(lockKeys) / 2; n > 0 {
		var tagArgs []any
		tags := tagCondition(opts.Tags, &tagArgs)
		if tags != "" {
			tags = " AND " + tags
		}
		args := append(append(append(lockKeys, queue, now), tagArgs...), until, until, opts.MaxMessages, opts.MaxBytes)
		rows, err := scanLocked(q.stmts.Query(ctx, tx, lockKeysSQL(n, tags), args...))
		if err != nil {
			return nil, err
		}
		locked = append(locked, rows...)
	}
	for pairs := range slices.Chunk(lockIDs, 2*lockIDsChunk) {
		args := append(pairs, until, until)
		if !partial {
			if _, err := q.stmts.Exec(ctx, tx, lockIDsSQL(len(pairs)/2, false), args...); err != nil {
				return nil, err
			}
			continue
		}
		// A payload the scan left out comes back with the lock: the batches'
		// deliveries are replaced by the returned ones.
		rows, err := scanLocked(q.stmts.Query(ctx, tx, lockIDsSQL(len(pairs)/2, true), args...))
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			byToken[r.token].Messages = nil
		}
		locked = append(locked, rows...)
	}
	// RETURNING gives no order guarantee: each batch is in enqueue order.
	slices.SortFunc(locked, func(a, b lockedRow) int { return cmp.Compare(a.id, b.id) })
	for i := range locked {
		b := byToken[locked[i].token]
		b.Messages = append(b.Messages, locked[i].delivery())
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
			return nil, err
		}
	}
	return batches, nil
}

// bounded returns the batch of a key whose visible messages are rows: the oldest
// in id order while they fit opts.MaxMessages and opts.MaxBytes (the first always
// joins).
func bounded(rows []lockedRow, opts mq.DequeueOptions) []lockedRow {
	slices.SortFunc(rows, func(a, b lockedRow) int { return cmp.Compare(a.id, b.id) })
	return rows[:opts.BatchSize(len(rows), func(i int) int { return rows[i].size })]
}

// lockKeysSQL locks the batches of n (key, token) pairs: each key's oldest eligible
// messages in id order while they fit the count and byte bounds (the first always
// joins). tags adds the tag condition. The CROSS JOIN makes the keys the outer loop,
// so each key costs one search of the routing index. A keyed message has no
// session.
func lockKeysSQL(n int, tags string) string {
	return `WITH t(k, tok) AS (VALUES ` + sqltext.Rows(n, 2) + `),
		c AS (SELECT m.id, t.tok, row_number() OVER w AS n, sum(length(m.payload)) OVER w AS size
			FROM t CROSS JOIN mq_messages AS m INDEXED BY mq_messages_routing ON m.queue = +? AND m.routing_key = t.k
			WHERE m.visible_at <= +?` + tags + `
			WINDOW w AS (PARTITION BY m.routing_key ORDER BY m.id))
		UPDATE mq_messages AS m SET lock_token = c.tok, locked_until = ?, visible_at = ?, attempts = attempts + 1 FROM c
		WHERE m.id = c.id AND (c.n = 1 OR (c.n <= +? AND c.size <= +?))` + lockReturning
}

// lockIDsSQL locks the messages of n (id, token) pairs; returning, it returns them.
func lockIDsSQL(n int, returning bool) string {
	query := `WITH t(tid, tok) AS (VALUES ` + sqltext.Rows(n, 2) + `)
		UPDATE mq_messages AS m SET lock_token = t.tok, locked_until = ?, visible_at = ?, attempts = attempts + 1 FROM t
		WHERE m.id = t.tid`
	if returning {
		query += lockReturning
	}
	return query
}

// lockIDsChunk bounds the pairs of one lockIDsSQL well below SQLite's parameter
// limit.
const lockIDsChunk = 8192

const lockReturning = ` RETURNING id, lock_token, payload, attempts, enqueued_at, tag, message_key, trace_parent, limit_group, priority`

// scanLocked reads the rows a locking statement returns.
func scanLocked(rows *sql.Rows, err error) ([]lockedRow, error) {
	if err != nil {
		return nil, err
	}
	var locked []lockedRow
	for rows.Next() {
		var r lockedRow
		if err := rows.Scan(&r.id, &r.token, &r.payload, &r.attempts, &r.enqueuedAt, &r.tag, &r.key, &r.trace, &r.group, &r.priority); err != nil {
			rows.Close()
			return nil, err
		}
		locked = append(locked, r)
	}
	return locked, errors.Join(rows.Err(), rows.Close())
}
