package mq

import (
	"context"
	"time"
)

// Limits every backend enforces, so that moving from one backend to another never
// turns accepted input into rejected input.
const (
	// MaxPayloadSize is the largest payload, in bytes, a message may carry.
	MaxPayloadSize = 4 << 20
	// MaxNameSize is the largest queue name, routing key, tag, session or message key,
	// in bytes. Names must also be valid UTF-8 without NUL bytes.
	MaxNameSize = 1024
	// DefaultLockTimeout is the lock timeout used when DequeueOptions.LockTimeout is zero.
	DefaultLockTimeout = 30 * time.Second
	// DefaultSessionLease is the session lease used when SessionOptions.LeaseTimeout is zero.
	DefaultSessionLease = 30 * time.Second
	// DefaultMaxMessages bounds a keyed batch when DequeueOptions.MaxMessages is zero.
	DefaultMaxMessages = 1000
	// DefaultMaxBytes bounds the payload bytes of a keyed batch when
	// DequeueOptions.MaxBytes is zero: two messages of the largest size.
	DefaultMaxBytes = 2 * MaxPayloadSize
	// MaxReasonSize is the largest failure reason, in bytes, a message keeps; longer
	// reasons are truncated (at a UTF-8 boundary).
	MaxReasonSize = 2048
	// MaxPeek is the most messages one Peek returns; DefaultPeek is used when
	// PeekOptions.Limit is zero.
	MaxPeek     = 1000
	DefaultPeek = 100
	// DefaultDedupWindow is how long a DedupID is remembered when
	// Message.DedupWindow is zero (SQS FIFO's deduplication interval).
	DefaultDedupWindow = 5 * time.Minute
	// MaxDedupWindow is the longest Message.DedupWindow.
	MaxDedupWindow = 366 * 24 * time.Hour
	// MinPriority and MaxPriority bound Message.Priority. The range is narrow on
	// purpose: a priority is a rank among a handful of classes of work, not a
	// timestamp or a score.
	MinPriority = -1000
	MaxPriority = 1000
)

// Message is a message to enqueue. Only Queue is required.
type Message struct {
	// Queue names the queue. Required; at most MaxNameSize bytes.
	Queue string
	// RoutingKey groups messages: DequeueBatch locks every visible message that shares
	// the key of the message it picks, and no other consumer receives a message of
	// that key while the lock is held. Empty means the message has no key and is
	// delivered on its own.
	RoutingKey string
	// Payload is opaque to the queue. Nil and empty payloads are both accepted and
	// delivered as an empty (non-nil) slice. At most MaxPayloadSize bytes.
	Payload []byte
	// Delay makes the message visible Delay after the enqueue. Negative is invalid.
	Delay time.Duration
	// Tag specialises consumers (see TagFilter). Empty means untagged ("default").
	Tag string
	// Session binds the message to a session: it is delivered only to a consumer that
	// owns the session or can claim it (see SessionOptions). Empty means no session.
	// A message MUST NOT carry both a RoutingKey and a Session.
	Session string
	// Key is a caller-chosen identity, unique among the pending messages of a queue,
	// so that the message can be removed later with Remove. Empty means none.
	Key string
	// DedupID is an idempotency id: the queue remembers it for DedupWindow after it
	// accepted the message (however soon the message is acked), and a message with
	// the same DedupID enqueued on the same queue meanwhile is a duplicate: it is
	// answered as accepted and nothing is stored. Within one call the first message
	// of a DedupID wins. Empty means none; at most MaxNameSize bytes.
	DedupID string
	// DedupWindow is how long DedupID is remembered: zero means
	// DefaultDedupWindow; negative, beyond MaxDedupWindow or without a DedupID is
	// invalid.
	DedupWindow time.Duration
	// TraceParent is the W3C traceparent of the span that produced the message: a
	// Consumer with a TracerProvider continues that trace. Empty means the span in
	// the context of Enqueue (or Settle), if any; at most 256 bytes.
	TraceParent string
	// LimitGroup puts the message under the limit set for this group of its queue
	// (see Limit and Admin.SetLimit), besides the queue's own limit. A batch is
	// admitted by the group of the message the dequeue picked (see DequeueBatch)
	// and counts against the group of each of its messages: give the messages of
	// one routing key one group. Empty means none; a group without a limit limits
	// nothing.
	LimitGroup string
	// Priority ranks the message among the eligible messages of its queue: higher
	// is delivered first, zero is the default, and equal priorities keep the usual
	// order (see DequeueBatch). Within [MinPriority, MaxPriority]. Priorities are
	// strict: a message waits as long as one of higher priority is eligible, so a
	// steady stream of urgent messages starves the others; use separate queues
	// (and consumers) where each class of work needs its share.
	Priority int
}

// Delivery is one message of a Batch.
type Delivery struct {
	ID         int64     // unique per backend, increasing in enqueue order
	Payload    []byte    // never nil
	Attempt    int       // 1 on the first delivery; incremented by every fetch
	EnqueuedAt time.Time // when Enqueue accepted the message
	Tag        string    // Message.Tag as enqueued ("" = untagged)
	Session    string    // Message.Session as enqueued ("" = none)
	Key        string    // Message.Key as enqueued ("" = none)
	// TraceParent is the span that produced the message ("" = none; see
	// Message.TraceParent).
	TraceParent string
	// LimitGroup is Message.LimitGroup as enqueued ("" = none).
	LimitGroup string
	// Priority is Message.Priority as enqueued.
	Priority int
}

// Batch is what DequeueBatch hands to one consumer: the messages it now owns under
// one lock token.
type Batch struct {
	Queue       string     // the queue the batch was taken from
	RoutingKey  string     // empty for an un-keyed message (then len(Messages) == 1)
	Messages    []Delivery // in enqueue order
	Token       string     // the lock token: Ack, Abandon and Renew take it
	LockedUntil time.Time  // the lock lapses at this time unless renewed
}

// MaxAttempt is the largest attempt count in the batch: the number of times the most
// often delivered message has been fetched, this fetch included.
func (b *Batch) MaxAttempt() int {
	n := 0
	for _, d := range b.Messages {
		n = max(n, d.Attempt)
	}
	return n
}

// DequeueOptions tune one DequeueBatch call. The zero value is usable.
type DequeueOptions struct {
	// LockTimeout is how long the batch stays locked without a Renew.
	// Zero means DefaultLockTimeout; negative is invalid.
	LockTimeout time.Duration
	// Wait is how long DequeueBatch may block waiting for a message to become
	// available (a long poll). Zero returns at once. A backend MUST wake a waiting
	// call early when, in the same process, a message of the queue is enqueued or
	// released (Ack or Abandon of a batch, whose key may hold waiting messages) or
	// becomes visible; changes made by other processes may be seen only at the next
	// poll.
	Wait time.Duration
	// Tags restricts which messages are eligible by their tag. The zero value accepts
	// every tag.
	Tags TagFilter
	// Session, when nil, makes only session-less messages eligible. When set, the
	// consumer acts for Session.Owner: session-less messages, messages of sessions the
	// owner holds, and messages of sessions nobody holds (or whose lease lapsed) are
	// eligible, and fetching one of the latter claims its session for the owner.
	Session *SessionOptions
	// KeyAttr, when set, makes a keyed message eligible only if its routing key has no
	// attribute (see SetKeyAttr) or an attribute inside one of the ranges. A filter with
	// no ranges accepts no keyed message. Un-keyed messages are not affected.
	KeyAttr *AttrFilter
	// MaxMessages bounds a keyed batch to the key's oldest eligible messages. Zero
	// means DefaultMaxMessages; negative means no bound. The key's other messages stay
	// held behind the batch (its key is locked) until the batch ends, so the next
	// batch of the key starts where this one stopped.
	MaxMessages int
	// MaxBytes bounds the payload bytes of a keyed batch: messages join in enqueue
	// order while the total stays within MaxBytes. The first message always joins,
	// whatever its size. Zero means DefaultMaxBytes; negative means no bound.
	MaxBytes int
}

// SessionOptions identify the consumer for session affinity.
type SessionOptions struct {
	// Owner is the stable identity of the consumer (for example a worker node id).
	// Several goroutines may share one owner. Required.
	Owner string
	// LeaseTimeout is how long a claimed session stays owned without activity or
	// renewal. Zero means DefaultSessionLease.
	LeaseTimeout time.Duration
}

// AttrFilter selects routing keys by their integer attribute.
type AttrFilter struct {
	// Ranges are the accepted attribute values: a key passes when it has no
	// attribute or its attribute is in one of them. Empty accepts no key at all.
	Ranges []AttrRange
}

// AttrRange is an inclusive range of attribute values.
type AttrRange struct {
	Min, Max int64 // the smallest and the largest accepted value
}

// Accepts reports whether a routing key with the given attribute (nil: none) passes
// the filter. A nil filter accepts every key; a filter without ranges accepts none.
func (f *AttrFilter) Accepts(attr *int64) bool {
	switch {
	case f == nil:
		return true
	case len(f.Ranges) == 0:
		return false
	case attr == nil:
		return true
	}
	for _, r := range f.Ranges {
		if *attr >= r.Min && *attr <= r.Max {
			return true
		}
	}
	return false
}

// AbandonOptions tune Abandon.
type AbandonOptions struct {
	// Delay keeps the released messages invisible for this long. Negative is invalid.
	// The batch's routing key stays held until they are visible again (see Settle).
	Delay time.Duration
	// IgnoreAttempt undoes the attempt count of the fetch being abandoned (never below
	// zero), for releases that are not the message's fault, such as a shutdown.
	// Otherwise the release counts as a failure of every message (see Settlement).
	IgnoreAttempt bool
	// Reason describes the failure (see Settlement.Reason).
	Reason string
	// ReleaseKey lets the routing key go at once even with a Delay (see Settlement).
	ReleaseKey bool
}

// Settlement ends one batch message by message (see MessageQueue.Settle). Counted in
// batch order, Messages[:Acked] are done, the next DeadLettered are moved to
// DeadLetterQueue and the rest are released for another delivery.
type Settlement struct {
	// Token is the batch's lock token.
	Token string
	// Acked messages, from the start of the batch, are done: they are deleted.
	Acked int
	// DeadLettered messages after the acked ones are moved to DeadLetterQueue, visible
	// at once and unlocked. A dead letter keeps its id, payload, routing key, tag,
	// session, priority and attempt count, and its message key unless the dead-letter queue
	// already holds that key (then the dead letter has none); it records the queue
	// it came from, Reason and its failure times (see MessageInfo).
	DeadLettered int
	// DeadLetterQueue receives the dead letters; required when DeadLettered > 0 and
	// different from the batch's queue.
	DeadLetterQueue string
	// Reason describes the failure of this delivery, kept on the dead letters and on
	// the released messages that count the attempt (truncated to MaxReasonSize).
	Reason string
	// Tried is how many of the released messages, from the first, count this fetch as
	// a failed attempt: they keep their attempt count and record Reason and the time.
	// The fetch of the others is undone (attempt count decremented, never below zero):
	// they were not tried. Values beyond the released count mean all of them.
	Tried int
	// Delay keeps the released messages invisible for this long; negative is invalid.
	// While they wait, their routing key stays held: no later message of the key is
	// delivered before them (the order rule of MessageQueue.Settle).
	Delay time.Duration
	// ReleaseKey unlocks the routing key at once even with a Delay, waiving the order
	// rule: later messages of the key may then be delivered before the released ones.
	// For callers whose messages carry their own order (the runtime's orchestrator).
	ReleaseKey bool
	// Then are enqueued in the same atomic step (follow-ups, as with Ack).
	Then []Message
}

// PeekOptions select the messages Peek returns.
type PeekOptions struct {
	// RoutingKey, when not empty, returns only the messages of this key.
	RoutingKey string
	// AfterID is the paging cursor: only messages with a larger id are returned. Pass
	// the last ID of the previous page.
	AfterID int64
	// Limit is the most messages returned: zero means DefaultPeek; at most MaxPeek.
	Limit int
	// State, when not empty, returns only the messages in this state, as Stats
	// counts them.
	State MessageState
}

// MessageState is a stored message's state as Stats counts it; PeekOptions.State
// selects one.
type MessageState string

// The message states.
const (
	StateReady   MessageState = "ready"   // visible; a message of a locked key, or whose lock lapsed, is ready
	StateDelayed MessageState = "delayed" // not visible yet (enqueued or abandoned with a delay)
	StateLocked  MessageState = "locked"  // held by a consumer under a live lock
)

// MessageInfo describes a stored message, as Peek sees it.
type MessageInfo struct {
	ID         int64     // unique per backend, increasing in enqueue order; kept when dead-lettered or redriven
	Queue      string    // the queue that holds it now
	RoutingKey string    // "" for an un-keyed message
	Payload    []byte    // never nil
	Attempt    int       // how many times it was fetched (redrive resets it to zero)
	EnqueuedAt time.Time // when Enqueue accepted it
	VisibleAt  time.Time // while locked: when the lock lapses
	Locked     bool      // held by a consumer under a live lock
	Tag        string    // "" = untagged
	Session    string    // "" = none
	Key        string    // the message key; "" = none
	// TraceParent is the span that produced it ("" = none; see Message.TraceParent).
	TraceParent string
	// LimitGroup is Message.LimitGroup as enqueued ("" = none).
	LimitGroup string
	// Priority is Message.Priority as enqueued, kept through Abandon,
	// dead-lettering and Redrive.
	Priority int
	// LastError is the Reason of its last failed attempt ("" if none or none given).
	LastError string
	// FirstFailedAt is the time of its first failed attempt (zero if it never
	// failed).
	FirstFailedAt time.Time
	// LastFailedAt is the time of its last failed attempt (zero if it never failed).
	LastFailedAt time.Time
	// OriginQueue is the queue a dead letter was moved from ("" for other messages).
	OriginQueue string
	// DeadLetteredAt is when it was moved to the dead-letter queue (zero for other
	// messages).
	DeadLetteredAt time.Time
}

// RedriveOptions select the dead letters Redrive moves. The zero value moves every
// dead letter of the queue back to the queue it came from.
type RedriveOptions struct {
	// RoutingKey, when not empty, moves only the dead letters of this key.
	RoutingKey string
	// IDs, when not empty, moves only the dead letters with these ids.
	IDs []int64
	// To, when not empty, is the destination queue instead of each message's origin.
	To string
}

// PurgeOptions select the messages Purge deletes. The zero value deletes every
// message of the queue.
type PurgeOptions struct {
	// RoutingKey, when not empty, deletes only the messages of this key.
	RoutingKey string
	// IDs, when not empty, deletes only the messages with these ids.
	IDs []int64
}

// LockInfo describes a live lock.
type LockInfo struct {
	Queue       string    // the queue of the locked messages
	RoutingKey  string    // empty for an un-keyed message
	LockedUntil time.Time // when the lock lapses unless renewed
	Messages    int       // how many messages the lock holds
}

// Stats describes the messages of one queue at one instant.
type Stats struct {
	Ready   int // visible and not locked (a message of a locked key counts as ready)
	Delayed int // not yet visible
	Locked  int // held by a consumer under a live lock
	// MaxAttempt is the largest attempt count among the messages (0 when none was
	// ever fetched): a poison indicator.
	MaxAttempt int
	// NextVisible is when the earliest delayed message becomes visible (zero when
	// none is delayed): what a scheduler or a test clock waits for.
	NextVisible time.Time
	// OldestReady is when the ready message that has waited longest became visible
	// (enqueued, its delay ended, or its lock lapsed or was released; zero when none
	// is ready): the time since is how far consumers are behind.
	OldestReady time.Time
	// Paused says the queue is paused (see Admin.Pause): its ready messages wait
	// for Resume. KeyStats reports the pause of the key's queue.
	Paused bool
}

// MessageQueue is a durable, peek-lock, at-least-once queue of opaque messages with
// routing-key batches, delayed visibility, tags, sessions and message keys.
//
// Implementations MUST be safe for concurrent use. Every method takes a context first
// and MUST return ctx.Err() (possibly wrapped) when the context ends before the
// operation does. After Close, every method MUST fail with ErrClosed.
type MessageQueue interface {
	// Enqueue stores the messages atomically: either all are accepted or none is.
	// It MUST reject invalid input (ErrInvalid, ErrPayloadTooLarge) and a message Key
	// already pending in its queue or repeated in the call (ErrDuplicateKey) before
	// writing anything. A message whose DedupID the queue remembers (see
	// Message.DedupID) MUST be answered as accepted and store nothing; the DedupIDs
	// of the messages stored are remembered atomically with them. The same holds for
	// the Then messages of Ack and Settle.
	Enqueue(ctx context.Context, msgs ...Message) error

	// DequeueBatch picks the first eligible message of the queue in eligibility
	// order: highest Message.Priority first, then earliest visibility, then enqueue
	// order. A message is eligible when it is visible, not locked, passes opts.Tags
	// and the session rule of opts.Session, and — if it has a routing key — its key
	// is not locked by another batch and passes opts.KeyAttr.
	//
	// For an un-keyed message, the batch is that message alone. For a keyed message,
	// the backend MUST lock the key and every eligible message of the key, in one
	// atomic step, under one token; the batch lists them in enqueue order. Messages of
	// the key that arrive or become visible while the key is locked MUST NOT be handed
	// to anyone until the lock ends, and are not part of the batch.
	//
	// Priority rule: a routing key competes with its most urgent eligible message,
	// but its batch is still the key's oldest eligible messages in enqueue order
	// (priority never reorders the messages of one key, so a bounded batch may leave
	// that urgent message for the key's next batch). An un-keyed message competes
	// with its own priority. Priority is strict: while a message of higher priority
	// is eligible, no message of lower priority is picked, however long it waited
	// (see Message.Priority).
	//
	// A keyed batch holds at most opts.MaxMessages messages and opts.MaxBytes payload
	// bytes (the key's oldest eligible messages, at least one); the key's other
	// messages wait behind it.
	//
	// Under a Limit (see Admin.SetLimit), a message is eligible only while its
	// queue's limit and its group's admit another batch, and a keyed batch takes
	// no more messages than the rates leave; the check and the count are one
	// atomic step with the lock, across every process of the storage.
	//
	// Every message in the batch has its attempt count incremented. It returns
	// (nil, nil) when nothing is eligible within opts.Wait.
	DequeueBatch(ctx context.Context, queue string, opts DequeueOptions) (*Batch, error)

	// DequeueBatches is up to max DequeueBatch calls in one atomic step: each batch
	// has its own token and obeys every rule of DequeueBatch (a key appears in at most
	// one batch). Batches come in eligibility order (priority first, see
	// DequeueBatch), as successive DequeueBatch calls would. It waits up to opts.Wait for at
	// least one and returns an empty slice when none came.
	DequeueBatches(ctx context.Context, queue string, opts DequeueOptions, max int) ([]*Batch, error)

	// Ack deletes exactly the messages of the batch and releases its lock. The
	// messages in then are enqueued in the same atomic step (for example a follow-up
	// message or a dead-letter copy). When the lock has lapsed, was lost to another
	// consumer, or the token is unknown, Ack MUST fail with ErrLockLost and change
	// nothing, even if nobody fetched the messages again.
	Ack(ctx context.Context, token string, then ...Message) error

	// Abandon releases the batch: its messages become visible again (after
	// opts.Delay) and its key is unlocked then (at once with opts.ReleaseKey).
	// ErrLockLost as for Ack. It is Settle of every message as released, all tried
	// unless opts.IgnoreAttempt.
	Abandon(ctx context.Context, token string, opts AbandonOptions) error

	// Settle ends batches message by message (see Settlement), all settlements in
	// one atomic step. Order rule: while released messages of a keyed batch wait for
	// their Delay, the key stays held, so no later message of the key is delivered
	// before them (unless ReleaseKey).
	//
	// It MUST reject invalid settlements (negative counts or Delay, Acked +
	// DeadLettered beyond the batch, a missing or same dead-letter queue, invalid
	// Then messages) with ErrInvalid before changing anything; that check needs the
	// batch, so a settlement whose lock is lost is reported as lost first. When
	// some locks are lost, the other settlements are still applied and the error is
	// a *SettleError naming the lost ones (it matches ErrLockLost). Any other
	// failure changes nothing.
	Settle(ctx context.Context, settlements ...Settlement) error

	// Lock describes the live lock of token; ErrLockLost as for Ack.
	Lock(ctx context.Context, token string) (LockInfo, error)

	// Renew extends a live lock to now+extend and returns the new expiry. It MUST fail
	// with ErrLockLost when the lock is no longer held. Renewing a batch of a session
	// message counts as activity of its session.
	Renew(ctx context.Context, token string, extend time.Duration) (time.Time, error)

	// Remove deletes the pending messages of queue with the given message keys and
	// returns how many it deleted; unknown keys are ignored. A removed message that was
	// locked invalidates its batch: the holder's next Renew, Ack or Abandon fails with
	// ErrLockLost and the batch's other messages become eligible again.
	Remove(ctx context.Context, queue string, keys ...string) (int, error)

	// RemovePrefix is Remove for every pending message of queue whose message key
	// starts with prefix (which must not be empty).
	RemovePrefix(ctx context.Context, queue, prefix string) (int, error)

	// PurgeKey deletes every message of the routing key in queue, locked or not, and
	// forgets the key's attribute. Holders of its lock lose it as with Remove.
	PurgeKey(ctx context.Context, queue, routingKey string) (int, error)

	// SetKeyAttr stores (or with nil, clears) the integer attribute of a routing key,
	// used by DequeueOptions.KeyAttr. The attribute outlives the key's messages until
	// it is cleared or the key is purged.
	SetKeyAttr(ctx context.Context, queue, routingKey string, attr *int64) error

	// RenewSessions extends to now+extend the leases of the sessions of queue held by
	// any of owners whose lease is live and that saw activity (a fetch, Renew or Ack
	// of one of their messages) within idle. It returns how many leases it extended.
	RenewSessions(ctx context.Context, queue string, owners []string, extend, idle time.Duration) (int, error)

	// CleanupSessions forgets the sessions of queue whose lease lapsed and that have no
	// pending message, and returns how many it forgot.
	CleanupSessions(ctx context.Context, queue string) (int, error)

	// Stats counts the messages of queue.
	Stats(ctx context.Context, queue string) (Stats, error)

	// KeyStats counts the messages of one routing key of queue.
	KeyStats(ctx context.Context, queue, routingKey string) (Stats, error)

	// Close releases the queue's resources. Pending messages stay stored (for
	// durable backends). Close is idempotent.
	Close() error
}

// Admin is what operators need to see and fix a queue's messages. Every backend of
// this module implements it.
type Admin interface {
	// Peek returns stored messages of queue (pending, locked, delayed or dead
	// letters) in id order without locking or changing them.
	Peek(ctx context.Context, queue string, opts PeekOptions) ([]MessageInfo, error)
	// Redrive moves dead letters of deadLetterQueue selected by opts back to the
	// queue each came from (or opts.To): visible at once, attempt count reset to
	// zero, failure history and priority kept, message key dropped if the destination already
	// holds it. Their ids are kept, so a redriven keyed message is delivered before
	// the later messages of its key. Locked messages and, without opts.To, messages
	// that are not dead letters are skipped. It returns how many it moved.
	Redrive(ctx context.Context, deadLetterQueue string, opts RedriveOptions) (int, error)
	// Purge deletes the messages of queue selected by opts, locked or not (holders of
	// a lock that lost a message lose it as with Remove), and returns how many.
	Purge(ctx context.Context, queue string, opts PurgeOptions) (int, error)
	// Queues lists the queues that hold messages (dead-letter queues included) and
	// the paused queues, in name order, each with its Stats at one instant. It reads
	// every stored message's state once: an operator's overview, not a hot path.
	Queues(ctx context.Context) ([]QueueStats, error)
	// Pause stops the delivery of queue's messages until Resume, for every consumer
	// of the backend's storage (every process sharing the database). While queue is
	// paused, DequeueBatch and DequeueBatches (and QueueTx.DequeueBatches) MUST
	// return no batch of it, and a long poll on it waits (see Resume). Everything
	// else MUST keep working: Enqueue, Peek, Redrive, Purge, Stats (which reports
	// Paused), and the batches held when the pause began, which are acked, settled,
	// renewed and abandoned as usual. A dequeue under way when Pause returns may
	// still deliver; every dequeue that starts afterwards sees the pause. Pause is
	// idempotent, and a queue that holds nothing, or was never used, may be paused:
	// producers may start into a paused queue. A durable backend MUST keep the pause
	// across a restart. The queue name is checked as Enqueue checks it (ErrInvalid).
	Pause(ctx context.Context, queue string) error
	// Resume ends the pause of queue (resuming a queue that is not paused does
	// nothing). Its messages are then delivered in the order they would have been
	// without the pause, keyed order kept. Resume MUST wake the long polls waiting on
	// queue, in this process at once, and in the others as an Enqueue of theirs
	// would wake them.
	Resume(ctx context.Context, queue string) error
	// SetLimit sets the limit of queue (group "") or of one of its limit groups
	// (see Message.LimitGroup), for every consumer of the backend's storage; the
	// zero Limit removes it. Setting a rate fills its bucket. A durable backend
	// MUST keep limits across a restart. Invalid input is ErrInvalid (CheckLimit).
	SetLimit(ctx context.Context, queue, group string, l Limit) error
	// Limits lists the limits of queue, the queue's own first then by group name,
	// each with the batches it holds in flight now.
	Limits(ctx context.Context, queue string) ([]LimitInfo, error)
}

// QueueStats is one queue's counts, as Admin.Queues lists them.
type QueueStats struct {
	Queue string // the queue's name
	Stats        // its counts and whether it is paused, as MessageQueue.Stats gives them
}
