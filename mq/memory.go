package mq

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/duroq/duroq/internal/limits"
	"github.com/duroq/duroq/internal/wake"
	"github.com/duroq/duroq/txn"
	"github.com/google/uuid"
)

// MemoryOptions tune NewMemory. The zero value is usable.
type MemoryOptions struct {
	// Now is the clock (default time.Now). Inject a fake one to test timing without
	// sleeping.
	Now func() time.Time
	// Database, when set, is shared with other in-memory backends (eventstore.Memory)
	// so that one transaction can span them (see In and the *Tx methods). Default: a
	// private one.
	Database *txn.MemoryDatabase
}

// Memory is the in-memory reference backend of MessageQueue: every rule of the
// contract, nothing durable. It is meant for tests and for composing with other
// in-memory stores; it does not survive the process.
type Memory struct {
	domain *txn.MemoryDatabase
	now    func() time.Time
	hub    wake.Hub

	// Guarded by domain.
	closed bool
	nextID int64
	queues map[string]*memQueue
	locks  map[string]*memLock // by token
	paused map[string]bool     // the paused queues (Pause)
	limits map[limitID]limits.Rule
}

// limitID names a limit: a queue's own (group "") or one of its groups'.
type limitID struct{ queue, group string }

type memQueue struct {
	msgs     map[int64]*memMsg
	ready    readyHeap                    // (visibleAt, id) index; entries go stale lazily
	byRoute  map[string]map[int64]*memMsg // messages by routing key
	byKey    map[string]*memMsg           // pending messages by message key
	keys     map[string]*memKey           // routing-key state: lock and attribute
	sessions map[string]*memSession
	dedup    map[string]time.Time // remembered DedupIDs: until when
	swept    int                  // len(dedup) after its last sweep of expired ids
	// prioritized counts the messages with a non-zero priority: while there are
	// none, scan stops at the first eligible message of the ready index.
	prioritized int
}

type memMsg struct {
	id          int64
	m           Message // Payload, Delay unused after enqueue
	payload     []byte
	enqueuedAt  time.Time
	visibleAt   time.Time // while locked: the lock's expiry
	attempts    int
	token       string
	lockedUntil time.Time
	// Failure history and dead-letter origin (see MessageInfo).
	lastError     string
	firstFailedAt time.Time
	lastFailedAt  time.Time
	originQueue   string
	deadAt        time.Time
}

// memKey is a routing key's state. While released messages of the key wait for
// their retry delay, token is the dead token of their batch and lockedUntil the
// time they become visible: the key stays held (the order rule of Settle).
type memKey struct {
	token       string
	lockedUntil time.Time
	attr        *int64
}

type memSession struct {
	owner        string
	lockedUntil  time.Time
	lastActivity time.Time
}

type memLock struct {
	queue       string
	routingKey  string
	ids         []int64
	lockedUntil time.Time
}

var (
	_ MessageQueue = (*Memory)(nil)
	_ Admin        = (*Memory)(nil)
)

// NewMemory returns an empty in-memory queue.
func NewMemory(o MemoryOptions) *Memory {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Database == nil {
		o.Database = txn.NewMemoryDatabase()
	}
	return &Memory{domain: o.Database, now: o.Now, queues: map[string]*memQueue{}, locks: map[string]*memLock{}, paused: map[string]bool{},
		limits: map[limitID]limits.Rule{}}
}

// run runs fn in a transaction of the queue's own; fn's writes roll back if it fails.
func (s *Memory) run(ctx context.Context, op string, fn func(tx *txn.MemoryTx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mq: %s: %w", op, err)
	}
	return s.domain.Do(fn)
}

func (s *Memory) open(op string) error {
	if s.closed {
		return Closed(op)
	}
	return nil
}

func (s *Memory) queue(tx *txn.MemoryTx, name string) *memQueue {
	q := s.queues[name]
	if q == nil {
		q = &memQueue{msgs: map[int64]*memMsg{}, byRoute: map[string]map[int64]*memMsg{}, byKey: map[string]*memMsg{}, keys: map[string]*memKey{}, sessions: map[string]*memSession{},
			dedup: map[string]time.Time{}}
		put(tx, s.queues, name, q)
	}
	return q
}

// Enqueue implements MessageQueue.
func (s *Memory) Enqueue(ctx context.Context, msgs ...Message) error {
	msgs = Traced(ctx, msgs)
	return s.run(ctx, "enqueue", func(tx *txn.MemoryTx) error { return s.EnqueueTx(tx, msgs...) })
}

// EnqueueTx is Enqueue inside tx, a transaction of the queue's database.
func (s *Memory) EnqueueTx(tx *txn.MemoryTx, msgs ...Message) error {
	return s.enqueue(tx, "enqueue", msgs)
}

// enqueue stores msgs for op (enqueue, or ack with follow-ups).
func (s *Memory) enqueue(tx *txn.MemoryTx, op string, msgs []Message) error {
	if err := s.open(op); err != nil {
		return err
	}
	if err := CheckMessages(op, msgs); err != nil {
		return err
	}
	now := s.now()
	msgs = s.remember(tx, Deduplicated(msgs), now)
	for _, m := range msgs {
		q := s.queue(tx, m.Queue)
		if m.Key != "" && q.byKey[m.Key] != nil {
			return &DuplicateKeyError{Op: op, Queue: m.Queue, Key: m.Key}
		}
	}
	for _, m := range msgs {
		q := s.queue(tx, m.Queue)
		s.nextID++
		msg := &memMsg{id: s.nextID, m: m, payload: append([]byte{}, m.Payload...), enqueuedAt: now, visibleAt: now.Add(m.Delay)}
		msg.m.Payload = nil
		q.insertMsg(tx, msg)
		heap.Push(&q.ready, readyEntry{msg.visibleAt, msg.id})
		queue := m.Queue
		tx.AfterCommit(func() { s.hub.Notify(queue) })
	}
	return nil
}

// remember records the DedupIDs of msgs in tx and returns the messages to store:
// those without a DedupID, or whose DedupID no queue remembers at now.
func (s *Memory) remember(tx *txn.MemoryTx, msgs []Message, now time.Time) []Message {
	return keep(msgs, func(m *Message) bool {
		if m.DedupID == "" {
			return true
		}
		q := s.queue(tx, m.Queue)
		if until, ok := q.dedup[m.DedupID]; ok && until.After(now) {
			return false // a duplicate: accepted, not stored
		}
		put(tx, q.dedup, m.DedupID, m.DedupUntil(now))
		q.sweep(tx, now)
		return true
	})
}

// sweep forgets q's expired DedupIDs each time their number doubled since the last
// sweep: amortised, the ids cost O(1) each.
func (q *memQueue) sweep(tx *txn.MemoryTx, now time.Time) {
	if len(q.dedup) < 2*max(q.swept, 64) {
		return
	}
	for id, until := range q.dedup {
		if !until.After(now) {
			del(tx, q.dedup, id)
		}
	}
	mutate(tx, &q.swept)
	q.swept = len(q.dedup)
}

// DequeueBatch implements MessageQueue.
func (s *Memory) DequeueBatch(ctx context.Context, queue string, opts DequeueOptions) (*Batch, error) {
	opts, err := NormalizeDequeue(queue, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mq: dequeue %q: %w", queue, err)
	}
	batches, err := s.poll(ctx, queue, opts, 1)
	if len(batches) == 0 {
		return nil, err
	}
	return batches[0], err
}

// DequeueBatches implements MessageQueue.
func (s *Memory) DequeueBatches(ctx context.Context, queue string, opts DequeueOptions, max int) ([]*Batch, error) {
	opts, err := NormalizeDequeue(queue, opts)
	if err != nil {
		return nil, err
	}
	if err := CheckDequeueMax("dequeue", max); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mq: dequeue %q: %w", queue, err)
	}
	return s.poll(ctx, queue, opts, max)
}

// poll takes up to max batches in one transaction, waiting up to opts.Wait for one.
func (s *Memory) poll(ctx context.Context, queue string, opts DequeueOptions, max int) ([]*Batch, error) {
	batches, err := wake.Poll(ctx, &s.hub, queue, opts.Wait, s.now, func() (bs []*Batch, ok bool, next time.Time, err error) {
		err = s.domain.Do(func(tx *txn.MemoryTx) error {
			for len(bs) < max {
				b, n, err := s.DequeueTx(tx, queue, opts)
				if err != nil || b == nil {
					if len(bs) == 0 {
						next = n
					}
					return err
				}
				bs = append(bs, b)
			}
			return nil
		})
		return bs, len(bs) > 0, next, err
	})
	if err != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("mq: dequeue %q: %w", queue, err)
	}
	return batches, err
}

// DequeueTx is one non-blocking DequeueBatch attempt inside tx (opts.Wait is ignored).
// When nothing is eligible it returns a nil batch and the next time a message of the
// queue becomes visible (zero if none is pending).
func (s *Memory) DequeueTx(tx *txn.MemoryTx, queue string, opts DequeueOptions) (*Batch, time.Time, error) {
	opts, err := NormalizeDequeue(queue, opts)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := s.open("dequeue"); err != nil {
		return nil, time.Time{}, err
	}
	q := s.queues[queue]
	if q == nil || s.paused[queue] {
		return nil, time.Time{}, nil // a paused queue's poll waits for Resume's wake-up
	}
	now := s.now()
	budget := s.budget(queue, now)
	if budget != nil && budget.Closed() {
		return nil, budget.Refill(), nil
	}
	var blocked []string
	if budget != nil {
		blocked = budget.Blocked()
	}
	first, next := q.scan(now, opts, blocked)
	if first == nil {
		if budget != nil {
			next = limits.Earliest(next, budget.Refill())
		}
		return nil, next, nil
	}
	if budget != nil {
		opts.MaxMessages = min(opts.MaxMessages, budget.MaxMessages(first.m.LimitGroup))
	}
	batch := []*memMsg{first}
	if rk := first.m.RoutingKey; rk != "" {
		batch = batch[:0]
		for _, m := range q.byRoute[rk] {
			if !m.visibleAt.After(now) && q.eligible(m, now, opts) {
				batch = append(batch, m)
			}
		}
		slices.SortFunc(batch, func(a, b *memMsg) int { return cmp.Compare(a.id, b.id) })
		batch = batch[:opts.BatchSize(len(batch), func(i int) int { return len(batch[i].payload) })]
	}
	token := uuid.NewString()
	until := now.Add(opts.LockTimeout)
	lk := &memLock{queue: queue, routingKey: first.m.RoutingKey, lockedUntil: until}
	out := &Batch{Queue: queue, RoutingKey: first.m.RoutingKey, Token: token, LockedUntil: until}
	for _, m := range batch {
		if m.token != "" {
			del(tx, s.locks, m.token) // the lapsed lock of an earlier fetch
		}
		q.setVisible(tx, m, until)
		mutate(tx, m)
		m.token, m.lockedUntil = token, until
		m.attempts++
		lk.ids = append(lk.ids, m.id)
		out.Messages = append(out.Messages, Delivery{ID: m.id, Payload: append([]byte{}, m.payload...), Attempt: m.attempts,
			EnqueuedAt: m.enqueuedAt, Tag: m.m.Tag, Session: m.m.Session, Key: m.m.Key, TraceParent: m.m.TraceParent, LimitGroup: m.m.LimitGroup,
			Priority: m.m.Priority})
	}
	if rk := first.m.RoutingKey; rk != "" {
		k := q.key(tx, rk)
		mutate(tx, k)
		k.token, k.lockedUntil = token, until
	}
	if sid := first.m.Session; sid != "" {
		sess := q.sessions[sid]
		if sess == nil {
			sess = &memSession{}
			put(tx, q.sessions, sid, sess)
		}
		mutate(tx, sess)
		sess.owner, sess.lockedUntil, sess.lastActivity = opts.Session.Owner, now.Add(opts.Session.LeaseTimeout), now
	}
	put(tx, s.locks, token, lk)
	if budget != nil {
		budget.Took(LimitGroups(out))
		for _, r := range budget.Spent() {
			put(tx, s.limits, limitID{queue, r.Group}, r)
		}
	}
	return out, time.Time{}, nil
}

// budget returns what a dequeue of queue may take at now under its limits (nil if
// it has none).
func (s *Memory) budget(queue string, now time.Time) *limits.Budget {
	var rules []limits.Rule
	for id, r := range s.limits {
		if id.queue == queue {
			rules = append(rules, r)
		}
	}
	if len(rules) == 0 {
		return nil
	}
	return limits.New(now, rules, s.held(queue, now))
}

// held lists the messages of queue under a live lock.
func (s *Memory) held(queue string, now time.Time) []limits.Held {
	q := s.queues[queue]
	var held []limits.Held
	for token, lk := range s.locks {
		if lk.queue != queue || !lk.lockedUntil.After(now) || q == nil {
			continue
		}
		for _, id := range lk.ids {
			if m := q.msgs[id]; m != nil {
				held = append(held, limits.Held{Token: token, Group: m.m.LimitGroup})
			}
		}
	}
	return held
}

// eligible reports whether the visible message m may be handed out under opts.
func (q *memQueue) eligible(m *memMsg, now time.Time, opts DequeueOptions) bool {
	if !opts.Tags.Accepts(m.m.Tag) {
		return false
	}
	if sid := m.m.Session; sid != "" {
		if opts.Session == nil {
			return false
		}
		if sess := q.sessions[sid]; sess != nil && sess.lockedUntil.After(now) && sess.owner != opts.Session.Owner {
			return false
		}
	}
	if rk := m.m.RoutingKey; rk != "" {
		k := q.keys[rk]
		if k == nil {
			return opts.KeyAttr.Accepts(nil)
		}
		return !(k.token != "" && k.lockedUntil.After(now)) && opts.KeyAttr.Accepts(k.attr)
	}
	return true
}

func (q *memQueue) key(tx *txn.MemoryTx, rk string) *memKey {
	k := q.keys[rk]
	if k == nil {
		k = &memKey{}
		put(tx, q.keys, rk, k)
	}
	return k
}

// releaseKey drops the lock of token on routing key rk, and the key's state when
// nothing is left in it.
func (q *memQueue) releaseKey(tx *txn.MemoryTx, rk, token string) {
	k := q.keys[rk]
	if k == nil || k.token != token {
		return
	}
	if k.attr == nil {
		del(tx, q.keys, rk)
		return
	}
	mutate(tx, k)
	k.token, k.lockedUntil = "", time.Time{}
}

// live returns the lock of token if it is still held.
func (s *Memory) live(op, token string) (*memLock, *memQueue, error) {
	if err := s.open(op); err != nil {
		return nil, nil, err
	}
	lk := s.locks[token]
	if lk == nil || !lk.lockedUntil.After(s.now()) {
		return nil, nil, LockLost(op, token)
	}
	return lk, s.queues[lk.queue], nil
}

// Database implements TxQueue: the in-memory database the queue lives in.
func (s *Memory) Database() txn.Database { return s.domain }

// Lock implements MessageQueue.
func (s *Memory) Lock(ctx context.Context, token string) (li LockInfo, err error) {
	err = s.run(ctx, "lock", func(tx *txn.MemoryTx) error {
		li, err = s.LockTx(tx, token)
		return err
	})
	return li, err
}

// LockTx is Lock inside tx.
func (s *Memory) LockTx(tx *txn.MemoryTx, token string) (LockInfo, error) {
	lk, _, err := s.live("lock", token)
	if err != nil {
		return LockInfo{}, err
	}
	return LockInfo{Queue: lk.queue, RoutingKey: lk.routingKey, LockedUntil: lk.lockedUntil, Messages: len(lk.ids)}, nil
}

// Ack implements MessageQueue.
func (s *Memory) Ack(ctx context.Context, token string, then ...Message) error {
	then = Traced(ctx, then)
	return s.run(ctx, "ack", func(tx *txn.MemoryTx) error { return s.AckTx(tx, token, then...) })
}

// AckTx is Ack inside tx.
func (s *Memory) AckTx(tx *txn.MemoryTx, token string, then ...Message) error {
	const op = "ack"
	if err := CheckMessages(op, then); err != nil {
		return err
	}
	lk, q, err := s.live(op, token)
	if err != nil {
		return err
	}
	return s.apply(tx, op, q, lk, Settlement{Token: token, Acked: len(lk.ids), Then: then})
}

// Settle implements MessageQueue.
func (s *Memory) Settle(ctx context.Context, settlements ...Settlement) error {
	settlements = TracedSettlements(ctx, settlements)
	var lost error
	err := s.run(ctx, "settle", func(tx *txn.MemoryTx) (err error) {
		lost, err = s.settle(tx, settlements)
		return err
	})
	if err != nil {
		return err
	}
	return lost
}

// SettleTx is Settle inside tx. A *SettleError leaves tx usable: the settlements
// whose lock was held are applied in it.
func (s *Memory) SettleTx(tx *txn.MemoryTx, settlements ...Settlement) error {
	lost, err := s.settle(tx, settlements)
	if err != nil {
		return err
	}
	return lost
}

// settle applies the settlements whose lock is held and returns a *SettleError
// naming the others (nil if none), or err when nothing may be applied.
func (s *Memory) settle(tx *txn.MemoryTx, ss []Settlement) (lost, err error) {
	const op = "settle"
	if err := s.open(op); err != nil {
		return nil, err
	}
	if err := CheckSettlements(op, ss); err != nil {
		return nil, err
	}
	type held struct {
		lk *memLock
		q  *memQueue
	}
	work := make([]held, len(ss))
	lostLocks := map[int]error{}
	for i, st := range ss {
		lk, q, err := s.live(op, st.Token)
		if err != nil {
			lostLocks[i] = err
			continue
		}
		if err := CheckSettlementSize(op, i, st, lk.queue, len(lk.ids)); err != nil {
			return nil, err
		}
		work[i] = held{lk, q}
	}
	for i, w := range work {
		if w.lk != nil {
			if err := s.apply(tx, op, w.q, w.lk, ss[i]); err != nil {
				return nil, err
			}
		}
	}
	if len(lostLocks) > 0 {
		return &SettleError{Lost: lostLocks}, nil
	}
	return nil, nil
}

// apply settles the live lock lk of queue q as st says (st is valid for it).
func (s *Memory) apply(tx *txn.MemoryTx, op string, q *memQueue, lk *memLock, st Settlement) error {
	now := s.now()
	n := len(lk.ids)
	acked, dead, tried := st.Split(n)
	s.touchSessions(tx, q, lk)
	reason := st.ClippedReason()
	for _, id := range lk.ids[:acked] {
		q.deleteMsg(tx, id)
	}
	if dead > acked {
		dlq := s.queue(tx, st.DeadLetterQueue)
		for _, id := range lk.ids[acked:dead] {
			m := q.msgs[id]
			s.failed(tx, m, reason, now)
			m.originQueue, m.deadAt = lk.queue, now
			s.move(tx, q, dlq, st.DeadLetterQueue, m, now)
		}
		name := st.DeadLetterQueue
		tx.AfterCommit(func() { s.hub.Notify(name) })
	}
	visible := now.Add(st.Delay)
	for i, id := range lk.ids[dead:] {
		m := q.msgs[id]
		q.setVisible(tx, m, visible)
		mutate(tx, m)
		m.token, m.lockedUntil = "", time.Time{}
		switch {
		case dead+i < tried:
			s.failed(tx, m, reason, now)
		case m.attempts > 0:
			m.attempts--
		}
	}
	if rk := lk.routingKey; rk != "" && st.HoldsKey(n) {
		k := q.keys[rk]
		mutate(tx, k)
		k.lockedUntil = visible // the dead token keeps the key until then
		del(tx, s.locks, st.Token)
	} else {
		s.dropLock(tx, q, lk, st.Token)
	}
	queue := lk.queue
	tx.AfterCommit(func() { s.hub.Notify(queue) })
	return s.enqueue(tx, op, st.Then)
}

// failed records a failed attempt of m at now.
func (s *Memory) failed(tx *txn.MemoryTx, m *memMsg, reason string, now time.Time) {
	mutate(tx, m)
	m.lastError, m.lastFailedAt = reason, now
	if m.firstFailedAt.IsZero() {
		m.firstFailedAt = now
	}
}

// move takes the unlocked (or lapsed) message m from queue from to queue to, named
// name, visible at now; it keeps its id and drops its message key if to holds it.
func (s *Memory) move(tx *txn.MemoryTx, from, to *memQueue, name string, m *memMsg, now time.Time) {
	from.deleteMsg(tx, m.id)
	mutate(tx, m)
	m.m.Queue = name
	m.token, m.lockedUntil = "", time.Time{}
	if m.m.Key != "" && to.byKey[m.m.Key] != nil {
		m.m.Key = ""
	}
	to.insertMsg(tx, m)
	to.setVisible(tx, m, now)
}

// touchSessions records activity on the sessions of lk's messages whose lease is live.
func (s *Memory) touchSessions(tx *txn.MemoryTx, q *memQueue, lk *memLock) {
	now := s.now()
	for _, id := range lk.ids {
		if m := q.msgs[id]; m != nil && m.m.Session != "" {
			if sess := q.sessions[m.m.Session]; sess != nil && sess.lockedUntil.After(now) {
				mutate(tx, sess)
				sess.lastActivity = now
			}
		}
	}
}

// insertMsg indexes m in q (the ready index aside).
func (q *memQueue) insertMsg(tx *txn.MemoryTx, m *memMsg) {
	put(tx, q.msgs, m.id, m)
	if m.m.Priority != 0 {
		mutate(tx, &q.prioritized)
		q.prioritized++
	}
	if m.m.Key != "" {
		put(tx, q.byKey, m.m.Key, m)
	}
	if rk := m.m.RoutingKey; rk != "" {
		if q.byRoute[rk] == nil {
			put(tx, q.byRoute, rk, map[int64]*memMsg{})
		}
		put(tx, q.byRoute[rk], m.id, m)
	}
}

func (q *memQueue) deleteMsg(tx *txn.MemoryTx, id int64) {
	m := q.msgs[id]
	if m == nil {
		return
	}
	del(tx, q.msgs, id)
	if m.m.Priority != 0 {
		mutate(tx, &q.prioritized)
		q.prioritized--
	}
	if m.m.Key != "" {
		del(tx, q.byKey, m.m.Key)
	}
	if rk := m.m.RoutingKey; rk != "" {
		del(tx, q.byRoute[rk], id)
		if len(q.byRoute[rk]) == 0 {
			del(tx, q.byRoute, rk)
		}
	}
}

func (s *Memory) dropLock(tx *txn.MemoryTx, q *memQueue, lk *memLock, token string) {
	if lk.routingKey != "" {
		q.releaseKey(tx, lk.routingKey, token)
	}
	del(tx, s.locks, token)
}

// Abandon implements MessageQueue.
func (s *Memory) Abandon(ctx context.Context, token string, opts AbandonOptions) error {
	return s.run(ctx, "abandon", func(tx *txn.MemoryTx) error { return s.AbandonTx(tx, token, opts) })
}

// AbandonTx is Abandon inside tx.
func (s *Memory) AbandonTx(tx *txn.MemoryTx, token string, opts AbandonOptions) error {
	const op = "abandon"
	if err := CheckDuration(op, "Delay", opts.Delay); err != nil {
		return err
	}
	lk, q, err := s.live(op, token)
	if err != nil {
		return err
	}
	return s.apply(tx, op, q, lk, AbandonSettlement(token, opts))
}

// unlock makes the messages of lk that are still there eligible now, attempts as
// they are, and drops the lock: a batch that lost a message to Remove or Purge.
func (s *Memory) unlock(tx *txn.MemoryTx, q *memQueue, lk *memLock, token string) {
	now := s.now()
	for _, id := range lk.ids {
		m := q.msgs[id]
		if m == nil || m.token != token {
			continue
		}
		q.setVisible(tx, m, now)
		mutate(tx, m)
		m.token, m.lockedUntil = "", time.Time{}
	}
	s.dropLock(tx, q, lk, token)
	queue := lk.queue
	tx.AfterCommit(func() { s.hub.Notify(queue) })
}

// Renew implements MessageQueue.
func (s *Memory) Renew(ctx context.Context, token string, extend time.Duration) (until time.Time, err error) {
	err = s.run(ctx, "renew", func(tx *txn.MemoryTx) error {
		until, err = s.RenewTx(tx, token, extend)
		return err
	})
	return until, err
}

// RenewTx is Renew inside tx.
func (s *Memory) RenewTx(tx *txn.MemoryTx, token string, extend time.Duration) (time.Time, error) {
	const op = "renew"
	if err := CheckDuration(op, "extend", extend); err != nil {
		return time.Time{}, err
	}
	lk, q, err := s.live(op, token)
	if err != nil {
		return time.Time{}, err
	}
	until := s.now().Add(extend)
	mutate(tx, lk)
	lk.lockedUntil = until
	for _, id := range lk.ids {
		if m := q.msgs[id]; m != nil {
			q.setVisible(tx, m, until)
			mutate(tx, m)
			m.lockedUntil = until
		}
	}
	if lk.routingKey != "" {
		k := q.keys[lk.routingKey]
		mutate(tx, k)
		k.lockedUntil = until
	}
	s.touchSessions(tx, q, lk)
	return until, nil
}

// Remove implements MessageQueue.
func (s *Memory) Remove(ctx context.Context, queue string, keys ...string) (n int, err error) {
	err = s.run(ctx, "remove", func(tx *txn.MemoryTx) error {
		n, err = s.RemoveTx(tx, queue, keys...)
		return err
	})
	return n, err
}

// RemoveTx is Remove inside tx.
func (s *Memory) RemoveTx(tx *txn.MemoryTx, queue string, keys ...string) (int, error) {
	const op = "remove"
	q, err := s.existing(op, queue)
	if err != nil {
		return 0, err
	}
	if q == nil {
		return 0, nil
	}
	n := 0
	for _, key := range keys {
		if m := q.byKey[key]; m != nil {
			s.removeMsg(tx, q, m)
			n++
		}
	}
	return n, nil
}

// existing returns the state of queue for op; nil if the queue never held anything.
func (s *Memory) existing(op, queue string) (*memQueue, error) {
	if err := CheckQueue(op, queue); err != nil {
		return nil, err
	}
	if err := s.open(op); err != nil {
		return nil, err
	}
	return s.queues[queue], nil
}

// RemovePrefix implements MessageQueue.
func (s *Memory) RemovePrefix(ctx context.Context, queue, prefix string) (n int, err error) {
	err = s.run(ctx, "remove prefix", func(tx *txn.MemoryTx) error {
		n, err = s.RemovePrefixTx(tx, queue, prefix)
		return err
	})
	return n, err
}

// RemovePrefixTx is RemovePrefix inside tx.
func (s *Memory) RemovePrefixTx(tx *txn.MemoryTx, queue, prefix string) (int, error) {
	const op = "remove prefix"
	if err := checkName(op, "prefix", prefix, true); err != nil {
		return 0, err
	}
	q, err := s.existing(op, queue)
	if q == nil || err != nil {
		return 0, err
	}
	n := 0
	for key, m := range q.byKey {
		if strings.HasPrefix(key, prefix) {
			s.removeMsg(tx, q, m)
			n++
		}
	}
	return n, nil
}

// removeMsg deletes m; if m was locked, the rest of its batch is released.
func (s *Memory) removeMsg(tx *txn.MemoryTx, q *memQueue, m *memMsg) {
	if m.token != "" {
		if lk := s.locks[m.token]; lk != nil {
			s.unlock(tx, q, lk, m.token)
		}
	}
	q.deleteMsg(tx, m.id)
}

// PurgeKey implements MessageQueue.
func (s *Memory) PurgeKey(ctx context.Context, queue, routingKey string) (n int, err error) {
	err = s.run(ctx, "purge key", func(tx *txn.MemoryTx) error {
		n, err = s.PurgeKeyTx(tx, queue, routingKey)
		return err
	})
	return n, err
}

// PurgeKeyTx is PurgeKey inside tx.
func (s *Memory) PurgeKeyTx(tx *txn.MemoryTx, queue, routingKey string) (int, error) {
	const op = "purge key"
	q, err := s.existing(op, queue)
	if err != nil {
		return 0, err
	}
	if q == nil || routingKey == "" {
		return 0, nil
	}
	n := 0
	for _, m := range q.byRoute[routingKey] {
		s.removeMsg(tx, q, m)
		n++
	}
	del(tx, q.keys, routingKey)
	return n, nil
}

// SetKeyAttr implements MessageQueue.
func (s *Memory) SetKeyAttr(ctx context.Context, queue, routingKey string, attr *int64) error {
	return s.run(ctx, "set key attribute", func(tx *txn.MemoryTx) error { return s.SetKeyAttrTx(tx, queue, routingKey, attr) })
}

// SetKeyAttrTx is SetKeyAttr inside tx.
func (s *Memory) SetKeyAttrTx(tx *txn.MemoryTx, queue, routingKey string, attr *int64) error {
	const op = "set key attribute"
	if err := CheckQueue(op, queue); err != nil {
		return err
	}
	if err := checkName(op, "routing key", routingKey, true); err != nil {
		return err
	}
	if err := s.open(op); err != nil {
		return err
	}
	q := s.queue(tx, queue)
	if attr == nil && q.keys[routingKey] == nil {
		return nil
	}
	k := q.key(tx, routingKey)
	mutate(tx, k)
	if attr != nil {
		v := *attr
		attr = &v
	}
	k.attr = attr
	if k.attr == nil && k.token == "" {
		del(tx, q.keys, routingKey)
	}
	return nil
}

// RenewSessions implements MessageQueue.
func (s *Memory) RenewSessions(ctx context.Context, queue string, owners []string, extend, idle time.Duration) (n int, err error) {
	const op = "renew sessions"
	if err := errors.Join(CheckDuration(op, "extend", extend), CheckDuration(op, "idle", idle)); err != nil {
		return 0, err
	}
	err = s.run(ctx, op, func(tx *txn.MemoryTx) error {
		q, err := s.existing(op, queue)
		if q == nil || err != nil {
			return err
		}
		now := s.now()
		for _, sess := range q.sessions {
			if slices.Contains(owners, sess.owner) && sess.lockedUntil.After(now) && sess.lastActivity.Add(idle).After(now) {
				mutate(tx, sess)
				sess.lockedUntil = now.Add(extend)
				n++
			}
		}
		return nil
	})
	return n, err
}

// CleanupSessions implements MessageQueue.
func (s *Memory) CleanupSessions(ctx context.Context, queue string) (n int, err error) {
	const op = "cleanup sessions"
	err = s.run(ctx, op, func(tx *txn.MemoryTx) error {
		q, err := s.existing(op, queue)
		if q == nil || err != nil {
			return err
		}
		pending := map[string]bool{}
		for _, m := range q.msgs {
			pending[m.m.Session] = true
		}
		now := s.now()
		for sid, sess := range q.sessions {
			if !sess.lockedUntil.After(now) && !pending[sid] {
				del(tx, q.sessions, sid)
				n++
			}
		}
		return nil
	})
	return n, err
}

// Stats implements MessageQueue.
func (s *Memory) Stats(ctx context.Context, queue string) (st Stats, err error) {
	const op = "stats"
	err = s.run(ctx, op, func(*txn.MemoryTx) error {
		q, err := s.existing(op, queue)
		if err != nil {
			return err
		}
		if q != nil {
			st = count(q.msgs, s.now())
		}
		st.Paused = s.paused[queue]
		return nil
	})
	return st, err
}

// KeyStats implements MessageQueue.
func (s *Memory) KeyStats(ctx context.Context, queue, routingKey string) (st Stats, err error) {
	const op = "key stats"
	err = s.run(ctx, op, func(*txn.MemoryTx) error {
		q, err := s.existing(op, queue)
		if err != nil {
			return err
		}
		if q != nil {
			st = count(q.byRoute[routingKey], s.now())
		}
		st.Paused = s.paused[queue]
		return nil
	})
	return st, err
}

// Queues implements Admin.
func (s *Memory) Queues(ctx context.Context) (out []QueueStats, err error) {
	err = s.run(ctx, "queues", func(*txn.MemoryTx) error {
		now := s.now()
		out = []QueueStats{}
		for name, q := range s.queues {
			if len(q.msgs) > 0 || s.paused[name] {
				st := count(q.msgs, now)
				st.Paused = s.paused[name]
				out = append(out, QueueStats{Queue: name, Stats: st})
			}
		}
		for name := range s.paused {
			if s.queues[name] == nil {
				out = append(out, QueueStats{Queue: name, Stats: Stats{Paused: true}})
			}
		}
		slices.SortFunc(out, func(a, b QueueStats) int { return strings.Compare(a.Queue, b.Queue) })
		return nil
	})
	return out, err
}

// Pause implements Admin.
func (s *Memory) Pause(ctx context.Context, queue string) error {
	const op = "pause"
	return s.run(ctx, op, func(tx *txn.MemoryTx) error {
		if _, err := s.existing(op, queue); err != nil {
			return err
		}
		put(tx, s.paused, queue, true)
		return nil
	})
}

// Resume implements Admin.
func (s *Memory) Resume(ctx context.Context, queue string) error {
	const op = "resume"
	return s.run(ctx, op, func(tx *txn.MemoryTx) error {
		if _, err := s.existing(op, queue); err != nil {
			return err
		}
		del(tx, s.paused, queue)
		tx.AfterCommit(func() { s.hub.Notify(queue) })
		return nil
	})
}

// SetLimit implements Admin.
func (s *Memory) SetLimit(ctx context.Context, queue, group string, l Limit) error {
	const op = "set limit"
	if err := CheckLimit(op, queue, group, l); err != nil {
		return err
	}
	return s.run(ctx, op, func(tx *txn.MemoryTx) error {
		if err := s.open(op); err != nil {
			return err
		}
		id := limitID{queue, group}
		if l == (Limit{}) {
			del(tx, s.limits, id)
		} else {
			put(tx, s.limits, id, limits.Rule{Group: group, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Per: l.Per,
				Tokens: float64(l.Rate), Refilled: s.now()})
		}
		tx.AfterCommit(func() { s.hub.Notify(queue) }) // a raised limit may admit waiting messages
		return nil
	})
}

// Limits implements Admin.
func (s *Memory) Limits(ctx context.Context, queue string) (out []LimitInfo, err error) {
	const op = "list limits"
	if err := CheckQueue(op, queue); err != nil {
		return nil, err
	}
	err = s.run(ctx, op, func(tx *txn.MemoryTx) error {
		if err := s.open(op); err != nil {
			return err
		}
		now := s.now()
		b := s.budget(queue, now)
		for id, r := range s.limits {
			if id.queue == queue {
				out = append(out, LimitInfo{Group: r.Group, Limit: Limit{MaxInFlight: r.MaxInFlight, Rate: r.Rate, Per: r.Per},
					InFlight: b.InFlight(r.Group)})
			}
		}
		slices.SortFunc(out, func(a, b LimitInfo) int { return strings.Compare(a.Group, b.Group) })
		return nil
	})
	return out, err
}

func count(msgs map[int64]*memMsg, now time.Time) (st Stats) {
	for _, m := range msgs {
		st.MaxAttempt = max(st.MaxAttempt, m.attempts)
		switch m.state(now) {
		case StateReady:
			st.Ready++
			if st.OldestReady.IsZero() || m.visibleAt.Before(st.OldestReady) {
				st.OldestReady = m.visibleAt
			}
		case StateLocked:
			st.Locked++
		default:
			st.Delayed++
			if st.NextVisible.IsZero() || m.visibleAt.Before(st.NextVisible) {
				st.NextVisible = m.visibleAt
			}
		}
	}
	return st
}

// Close implements MessageQueue.
func (s *Memory) Close() error {
	tx := s.domain.Begin()
	s.closed = true
	tx.Commit()
	s.hub.NotifyAll() // long polls in progress end with ErrClosed
	return nil
}

// put sets m[k] = v in tx.
func put[K comparable, V any](tx *txn.MemoryTx, m map[K]V, k K, v V) {
	old, had := m[k]
	m[k] = v
	tx.Undo(func() {
		if had {
			m[k] = old
		} else {
			delete(m, k)
		}
	})
}

// del deletes m[k] in tx.
func del[K comparable, V any](tx *txn.MemoryTx, m map[K]V, k K) {
	old, had := m[k]
	if !had {
		return
	}
	delete(m, k)
	tx.Undo(func() { m[k] = old })
}

// mutate saves *p so that tx can restore it; call it before changing *p.
func mutate[T any](tx *txn.MemoryTx, p *T) {
	old := *p
	tx.Undo(func() { *p = old })
}

// scan finds the first eligible message in eligibility order (priority, then
// visibleAt, then id). When there is none it returns the next time a message
// becomes visible (zero if none will). A message of a blocked limit group is
// passed over.
func (q *memQueue) scan(now time.Time, opts DequeueOptions, blocked []string) (first *memMsg, next time.Time) {
	first, next = q.scanReady(now, opts, blocked)
	if first == nil || q.prioritized == 0 {
		return first, next
	}
	// first is the oldest eligible message, the first of its priority: only one of
	// a higher priority comes before it. The ready index is not in that order, so
	// every visible entry is looked at (the reference backend favours simplicity
	// over the cost of a second index).
	for _, e := range q.ready {
		m := q.msgs[e.id]
		if m == nil || !m.visibleAt.Equal(e.at) || e.at.After(now) || !m.before(first) || !q.pickable(m, now, opts, blocked) {
			continue
		}
		first = m
	}
	return first, next
}

// pickable reports whether the visible message m may be the first of a batch: it
// is eligible and not of a blocked limit group.
func (q *memQueue) pickable(m *memMsg, now time.Time, opts DequeueOptions, blocked []string) bool {
	return q.eligible(m, now, opts) && !slices.Contains(blocked, m.m.LimitGroup)
}

// before reports whether m comes before o in eligibility order: higher priority
// first, then earlier visibility, then enqueue order.
func (m *memMsg) before(o *memMsg) bool {
	if m.m.Priority != o.m.Priority {
		return m.m.Priority > o.m.Priority
	}
	if c := m.visibleAt.Compare(o.visibleAt); c != 0 {
		return c < 0
	}
	return m.id < o.id
}

// scanReady finds the first eligible message in (visibleAt, id) order, or else
// the next time a message becomes visible, as scan does.
func (q *memQueue) scanReady(now time.Time, opts DequeueOptions, blocked []string) (first *memMsg, next time.Time) {
	var passed []readyEntry
	seen := map[int64]bool{}
	for q.ready.Len() > 0 {
		e := q.ready[0]
		m := q.msgs[e.id]
		if m == nil || !m.visibleAt.Equal(e.at) || seen[e.id] {
			heap.Pop(&q.ready) // stale: the message is gone or moved
			continue
		}
		if e.at.After(now) {
			next = e.at
			break
		}
		heap.Pop(&q.ready)
		passed = append(passed, e)
		seen[e.id] = true
		if q.pickable(m, now, opts, blocked) {
			first = m
			break
		}
	}
	// Entries stay valid until their message moves; a rolled-back move needs them.
	for _, e := range passed {
		heap.Push(&q.ready, e)
	}
	return first, next
}

// setVisible moves m to visibility t, keeping the ready index current also when tx
// rolls back.
func (q *memQueue) setVisible(tx *txn.MemoryTx, m *memMsg, t time.Time) {
	old := m.visibleAt
	m.visibleAt = t
	heap.Push(&q.ready, readyEntry{t, m.id})
	tx.Undo(func() {
		m.visibleAt = old
		heap.Push(&q.ready, readyEntry{old, m.id})
	})
}

type readyEntry struct {
	at time.Time
	id int64
}

// readyHeap orders entries by visibility, then enqueue order (container/heap).
type readyHeap []readyEntry

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].id < h[j].id
}
func (h readyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)   { *h = append(*h, x.(readyEntry)) }
func (h *readyHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Peek implements Admin.
func (s *Memory) Peek(ctx context.Context, queue string, opts PeekOptions) (out []MessageInfo, err error) {
	const op = "peek"
	opts, err = CheckPeek(op, queue, opts)
	if err != nil {
		return nil, err
	}
	err = s.run(ctx, op, func(*txn.MemoryTx) error {
		q, err := s.existing(op, queue)
		if q == nil || err != nil {
			return err
		}
		now := s.now()
		for _, m := range q.sorted(opts.RoutingKey, nil) {
			if m.id <= opts.AfterID {
				continue
			}
			if opts.State != "" && m.state(now) != opts.State {
				continue
			}
			if len(out) == opts.Limit {
				break
			}
			out = append(out, m.info(now))
		}
		return nil
	})
	return out, err
}

// sorted returns the messages of q in id order: those of routingKey if it is not
// empty, and only those in ids if it is not empty.
func (q *memQueue) sorted(routingKey string, ids []int64) []*memMsg {
	msgs := q.msgs
	if routingKey != "" {
		msgs = q.byRoute[routingKey]
	}
	out := make([]*memMsg, 0, len(msgs))
	for _, m := range msgs {
		if len(ids) == 0 || slices.Contains(ids, m.id) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *memMsg) int { return cmp.Compare(a.id, b.id) })
	return out
}

// state is the message's state as Stats counts it.
func (m *memMsg) state(now time.Time) MessageState {
	switch {
	case !m.visibleAt.After(now):
		return StateReady
	case m.token != "":
		return StateLocked
	}
	return StateDelayed
}

func (m *memMsg) locked(now time.Time) bool { return m.token != "" && m.lockedUntil.After(now) }

func (m *memMsg) info(now time.Time) MessageInfo {
	return MessageInfo{ID: m.id, Queue: m.m.Queue, RoutingKey: m.m.RoutingKey, Payload: append([]byte{}, m.payload...),
		Attempt: m.attempts, EnqueuedAt: m.enqueuedAt, VisibleAt: m.visibleAt, Locked: m.locked(now),
		Tag: m.m.Tag, Session: m.m.Session, Key: m.m.Key, TraceParent: m.m.TraceParent, LimitGroup: m.m.LimitGroup,
		Priority: m.m.Priority, LastError: m.lastError,
		FirstFailedAt: m.firstFailedAt, LastFailedAt: m.lastFailedAt, OriginQueue: m.originQueue, DeadLetteredAt: m.deadAt}
}

// Redrive implements Admin.
func (s *Memory) Redrive(ctx context.Context, deadLetterQueue string, opts RedriveOptions) (n int, err error) {
	const op = "redrive"
	if err := CheckRedrive(op, deadLetterQueue, opts); err != nil {
		return 0, err
	}
	err = s.run(ctx, op, func(tx *txn.MemoryTx) error {
		q, err := s.existing(op, deadLetterQueue)
		if q == nil || err != nil {
			return err
		}
		now := s.now()
		for _, m := range q.sorted(opts.RoutingKey, opts.IDs) {
			to := cmp.Or(opts.To, m.originQueue)
			if m.locked(now) || to == "" {
				continue
			}
			if m.token != "" {
				del(tx, s.locks, m.token) // the lapsed lock of an earlier fetch
			}
			mutate(tx, m)
			m.attempts, m.originQueue, m.deadAt = 0, "", time.Time{}
			s.move(tx, q, s.queue(tx, to), to, m, now)
			tx.AfterCommit(func() { s.hub.Notify(to) })
			n++
		}
		return nil
	})
	return n, err
}

// Purge implements Admin.
func (s *Memory) Purge(ctx context.Context, queue string, opts PurgeOptions) (n int, err error) {
	const op = "purge"
	if err := CheckPurge(op, queue, opts); err != nil {
		return 0, err
	}
	err = s.run(ctx, op, func(tx *txn.MemoryTx) error {
		q, err := s.existing(op, queue)
		if q == nil || err != nil {
			return err
		}
		for _, m := range q.sorted(opts.RoutingKey, opts.IDs) {
			s.removeMsg(tx, q, m)
			n++
		}
		return nil
	})
	return n, err
}
