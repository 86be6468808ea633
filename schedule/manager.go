package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/txn"
)

// pausedDelay keeps a paused schedule's message out of every Scheduler's reach.
const pausedDelay = 100 * 365 * 24 * time.Hour

// managedQueue is what the Manager needs of the schedules' queue: its
// transactions (to replace a schedule's message atomically) and its admin view (to
// read schedules). Every backend of this module has both.
type managedQueue interface {
	mq.TxQueue
	mq.Admin
}

// ManagerOptions tune NewManager. The zero value gives the documented defaults.
type ManagerOptions struct {
	// Queue is the queue that holds the schedules, one message each; the Schedulers
	// that fire them consume it. Default DefaultQueue.
	Queue string
	// Now is the clock (default time.Now). It must be the queue's clock, as a
	// schedule's first firing is a delay from it.
	Now func() time.Time
}

// Manager creates, reads, updates, pauses, resumes and deletes the schedules of a queue. It
// is safe for concurrent use, by any number of processes at once.
type Manager struct {
	q     managedQueue
	queue string
	now   func() time.Time
}

// NewManager returns the manager of the schedules that o.Queue of q holds. q must
// also implement mq.TxQueue and mq.Admin, as every backend of this module does.
func NewManager(q mq.MessageQueue, o ManagerOptions) (*Manager, error) {
	const op = "new manager"
	qq, ok := q.(managedQueue)
	if !ok {
		return nil, invalid(op, "", "queue", fmt.Sprintf("%T does not implement mq.TxQueue and mq.Admin", q))
	}
	o.Queue = cmp.Or(o.Queue, DefaultQueue)
	if err := mq.CheckQueue(op, o.Queue); err != nil {
		return nil, invalid(op, "", "Queue", err.Error())
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Manager{q: qq, queue: o.Queue, now: o.Now}, nil
}

// Info is a schedule as stored.
type Info struct {
	// Schedule is the definition, with its defaults filled in (TimeZone "UTC" for
	// a Cron schedule without one, the Unix epoch as Anchor, the policies...).
	Schedule
	// Next is the next slot to fire (zero while paused).
	Next time.Time
	// FiresAt is when the next firing becomes due: Next plus its jitter (zero while
	// paused or firing).
	FiresAt time.Time
	// Paused: the schedule fires nothing until resumed.
	Paused bool
	// Firing: a Scheduler holds the schedule's firing now.
	Firing bool
	// LastInstance is the instance the last started slot of an Orchestration
	// target started ("" before the first).
	LastInstance string
	// Attempt counts the deliveries of the current firing (0 before the first).
	// Above zero while the firing is not held, an attempt failed (LastError says
	// why) or a Scheduler died while firing it.
	Attempt int
	// LastError is why the last failed attempt of the current firing failed.
	LastError string
}

// info is the Info of the stored message mi.
func (m *Manager) info(mi mq.MessageInfo) (Info, error) {
	r, _, err := decode(m.queue, mi.Key, mi.Payload)
	if err != nil {
		return Info{Schedule: Schedule{ID: mi.Key}}, err
	}
	in := Info{Schedule: r.schedule(), Paused: r.Paused, Firing: mi.Locked, LastInstance: r.LastInstance,
		Attempt: mi.Attempt, LastError: mi.LastError}
	if !r.Paused {
		in.Next = r.Next
		if !mi.Locked {
			in.FiresAt = mi.VisibleAt
		}
	}
	return in, nil
}

// jitter is a uniform random duration in [0, j), in whole milliseconds: what the
// backends store exactly.
func jitter(j time.Duration) time.Duration {
	if j <= 0 {
		return 0
	}
	return rand.N(j).Truncate(time.Millisecond)
}

// Create stores the schedule s, whose first slot is the first after now. It fails
// with ErrExists when a schedule has its id, and with an *InvalidError (ErrInvalid)
// naming the field when s breaks a rule.
func (m *Manager) Create(ctx context.Context, s Schedule) (Info, error) {
	const op = "create"
	s, sl, err := s.normalize(op, m.queue)
	if err != nil {
		return Info{}, err
	}
	now := m.now()
	next := sl.next(now)
	if next.IsZero() {
		return Info{}, invalid(op, s.ID, "Cron", "names no time in the next five years")
	}
	r := newRecord(s, next)
	firesAt := next.Add(jitter(s.Jitter))
	msg, err := r.message(m.queue, firesAt.Sub(now))
	if err != nil {
		return Info{}, err
	}
	err = m.q.Enqueue(ctx, msg)
	if errors.Is(err, mq.ErrDuplicateKey) {
		return Info{}, idError(op, s.ID, ErrExists)
	}
	if err != nil {
		return Info{}, fmt.Errorf("schedule: %s %q: %w", op, mq.Clip(s.ID), err)
	}
	return Info{Schedule: s, Next: next, FiresAt: firesAt}, nil
}

// find returns the stored message of schedule id (ErrNotFound if none).
func (m *Manager) find(ctx context.Context, op, id string) (mq.MessageInfo, error) {
	if err := checkID(op, id); err != nil {
		return mq.MessageInfo{}, err
	}
	// The schedule's routing key is its id, so this reads its message alone.
	page, err := m.q.Peek(ctx, m.queue, mq.PeekOptions{RoutingKey: id})
	if err != nil {
		return mq.MessageInfo{}, fmt.Errorf("schedule: %s %q: %w", op, mq.Clip(id), err)
	}
	for _, mi := range page {
		if mi.Key == id {
			return mi, nil
		}
	}
	return mq.MessageInfo{}, idError(op, id, ErrNotFound)
}

// Get returns schedule id (ErrNotFound if none; ErrUnreadable if it cannot be
// read, with Info.ID set).
func (m *Manager) Get(ctx context.Context, id string) (Info, error) {
	mi, err := m.find(ctx, "get", id)
	if err != nil {
		return Info{}, err
	}
	return m.info(mi)
}

// ListOptions select a page of List.
type ListOptions struct {
	// After is the paging cursor: only schedules whose id sorts after it are
	// listed. Pass the Next of the previous page.
	After string
	// Limit is the most schedules returned: zero means 100, at most mq.MaxPeek.
	Limit int
}

// Page is a page of schedules.
type Page struct {
	Schedules []Info // in id order
	Next      string // the cursor of the next page; "" when this is the last
}

// List returns a page of the schedules in id order. It reads every schedule of
// the queue (an operator's view, not a hot path), so a page is consistent however
// often the schedules fire meanwhile. A schedule that cannot be read fails it with
// ErrUnreadable, naming it (Delete removes it).
func (m *Manager) List(ctx context.Context, o ListOptions) (Page, error) {
	const op = "list"
	switch {
	case o.Limit < 0 || o.Limit > mq.MaxPeek:
		return Page{}, invalid(op, "", "Limit", fmt.Sprintf("%d (want 0 to %d)", o.Limit, mq.MaxPeek))
	case o.Limit == 0:
		o.Limit = mq.DefaultPeek
	}
	// A schedule's message is replaced at each firing, with a new id: keep the
	// latest message of each key, in key order.
	latest := map[string]mq.MessageInfo{}
	for peek := (mq.PeekOptions{Limit: mq.MaxPeek}); ; {
		page, err := m.q.Peek(ctx, m.queue, peek)
		if err != nil {
			return Page{}, fmt.Errorf("schedule: %s: %w", op, err)
		}
		for _, mi := range page {
			if mi.Key > o.After && mi.ID > latest[mi.Key].ID {
				latest[mi.Key] = mi
			}
		}
		if len(page) < peek.Limit {
			break
		}
		peek.AfterID = page[len(page)-1].ID
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		for k := range latest {
			if !yield(k) {
				return
			}
		}
	})
	var p Page
	if len(ids) > o.Limit {
		ids, p.Next = ids[:o.Limit], ids[o.Limit-1]
	}
	for _, id := range ids {
		in, err := m.info(latest[id])
		if err != nil {
			return Page{}, err // it names the schedule
		}
		p.Schedules = append(p.Schedules, in)
	}
	return p, nil
}

// Pause stops schedule id from firing until Resume; pausing a paused schedule
// changes nothing. A firing in progress loses its lock and fires nothing (an
// orchestration it started already stays started).
func (m *Manager) Pause(ctx context.Context, id string) (Info, error) {
	return m.replace(ctx, "pause", id, func(r *record, _ slots, _ time.Time) (time.Duration, error) {
		if r.Paused {
			return 0, errUnchanged
		}
		r.Paused = true
		return pausedDelay, nil
	})
}

// Resume makes a paused schedule fire again from its first slot after now: the
// slots that passed while it was paused never fire. Resuming a schedule that is
// not paused changes nothing.
func (m *Manager) Resume(ctx context.Context, id string) (Info, error) {
	const op = "resume"
	return m.replace(ctx, op, id, func(r *record, sl slots, now time.Time) (time.Duration, error) {
		if !r.Paused {
			return 0, errUnchanged
		}
		next := sl.next(now)
		if next.IsZero() {
			return 0, invalid(op, id, "Cron", "names no time in the next five years")
		}
		r.Paused, r.Next = false, next
		return next.Add(jitter(time.Duration(r.Jitter))).Sub(now), nil
	})
}

// Update replaces the definition of schedule s.ID with s, atomically: its next
// slot is the first of the new definition after now; a paused schedule stays
// paused, and the last instance it started is kept (for OverlapSkip). A firing in
// progress loses its lock and fires nothing (an orchestration it started already
// stays started). It fails with ErrNotFound when no schedule has the id, and as
// Create when s breaks a rule.
func (m *Manager) Update(ctx context.Context, s Schedule) (Info, error) {
	const op = "update"
	s, sl, err := s.normalize(op, m.queue)
	if err != nil {
		return Info{}, err
	}
	return m.replace(ctx, op, s.ID, func(r *record, _ slots, now time.Time) (time.Duration, error) {
		next := sl.next(now)
		if next.IsZero() {
			return 0, invalid(op, s.ID, "Cron", "names no time in the next five years")
		}
		updated := newRecord(s, next)
		updated.Paused, updated.LastInstance = r.Paused, r.LastInstance
		*r = *updated
		if r.Paused {
			return pausedDelay, nil
		}
		return next.Add(jitter(s.Jitter)).Sub(now), nil
	})
}

// errUnchanged tells replace that its change has nothing to do.
var errUnchanged = errors.New("unchanged")

// replace applies change to schedule id's record and replaces its message with
// one that holds the changed record, visible after the delay change returns. The
// message is removed and re-enqueued in one transaction, so no failure loses the
// schedule, and a Scheduler firing the old message loses its lock.
func (m *Manager) replace(ctx context.Context, op, id string, change func(r *record, sl slots, now time.Time) (time.Duration, error)) (Info, error) {
	mi, err := m.find(ctx, op, id)
	if err != nil {
		return Info{}, err
	}
	r, sl, err := decode(m.queue, mi.Key, mi.Payload)
	if err != nil {
		return Info{}, err
	}
	now := m.now()
	delay, err := change(r, sl, now)
	if errors.Is(err, errUnchanged) {
		return m.info(mi)
	}
	if err != nil {
		return Info{}, err
	}
	msg, err := r.message(m.queue, delay)
	if err != nil {
		return Info{}, err
	}
	err = m.q.Database().Run(ctx, func(ctx context.Context, tx txn.Tx) error {
		q, err := m.q.In(tx)
		if err != nil {
			return err
		}
		// The message may have been replaced since it was read. By a firing: the
		// slot it moved to does not matter (a paused schedule has none, Resume
		// computes its own), LastInstance may go back one slot. By a Delete and a
		// Create of the id: that schedule is overwritten, as the mq contract has no
		// remove-if-unchanged.
		if n, err := q.Remove(ctx, m.queue, id); err != nil || n == 0 {
			return cmp.Or(err, idError(op, id, ErrNotFound))
		}
		return q.Enqueue(ctx, msg)
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Info{}, err
		}
		return Info{}, fmt.Errorf("schedule: %s %q: %w", op, mq.Clip(id), err)
	}
	in := Info{Schedule: r.schedule(), Paused: r.Paused, LastInstance: r.LastInstance}
	if !r.Paused {
		in.Next, in.FiresAt = r.Next, now.Add(max(0, delay))
	}
	return in, nil
}

// Delete removes schedule id (ErrNotFound if none). A firing in progress loses its
// lock and fires nothing (an orchestration it started already stays started).
func (m *Manager) Delete(ctx context.Context, id string) error {
	const op = "delete"
	if err := checkID(op, id); err != nil {
		return err
	}
	n, err := m.q.Remove(ctx, m.queue, id)
	if err != nil {
		return fmt.Errorf("schedule: %s %q: %w", op, mq.Clip(id), err)
	}
	if n == 0 {
		return idError(op, id, ErrNotFound)
	}
	return nil
}
