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
}

// Delivery is one message of a Batch.
type Delivery struct {
	ID         int64     // unique per backend, increasing in enqueue order
	Payload    []byte    // never nil
	Attempt    int       // 1 on the first delivery; incremented by every fetch
	EnqueuedAt time.Time // when Enqueue accepted the message
	Tag        string
	Session    string
	Key        string
}

// Batch is what DequeueBatch hands to one consumer: the messages it now owns under
// one lock token.
type Batch struct {
	Queue       string
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
	Ranges []AttrRange
}

// AttrRange is an inclusive range of attribute values.
type AttrRange struct {
	Min, Max int64
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
	Delay time.Duration
	// IgnoreAttempt undoes the attempt count of the fetch being abandoned (never below
	// zero), for releases that are not the message's fault, such as a shutdown.
	IgnoreAttempt bool
}

// LockInfo describes a live lock.
type LockInfo struct {
	Queue       string
	RoutingKey  string // empty for an un-keyed message
	LockedUntil time.Time
	Messages    int // how many messages the lock holds
}

// Stats describes the messages of one queue at one instant.
type Stats struct {
	Ready   int // visible and not locked (a message of a locked key counts as ready)
	Delayed int // not yet visible
	Locked  int // held by a consumer under a live lock
	// MaxAttempt is the largest attempt count among the messages (0 when none was
	// ever fetched): a poison indicator.
	MaxAttempt int
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
	// writing anything.
	Enqueue(ctx context.Context, msgs ...Message) error

	// DequeueBatch picks the oldest eligible message of the queue (earliest visibility,
	// then enqueue order). A message is eligible when it is visible, not locked, passes
	// opts.Tags and the session rule of opts.Session, and — if it has a routing key —
	// its key is not locked by another batch and passes opts.KeyAttr.
	//
	// For an un-keyed message, the batch is that message alone. For a keyed message,
	// the backend MUST lock the key and every eligible message of the key, in one
	// atomic step, under one token; the batch lists them in enqueue order. Messages of
	// the key that arrive or become visible while the key is locked MUST NOT be handed
	// to anyone until the lock ends, and are not part of the batch.
	//
	// Every message in the batch has its attempt count incremented. It returns
	// (nil, nil) when nothing is eligible within opts.Wait.
	DequeueBatch(ctx context.Context, queue string, opts DequeueOptions) (*Batch, error)

	// Ack deletes exactly the messages of the batch and releases its lock. The
	// messages in then are enqueued in the same atomic step (for example a follow-up
	// message or a dead-letter copy). When the lock has lapsed, was lost to another
	// consumer, or the token is unknown, Ack MUST fail with ErrLockLost and change
	// nothing, even if nobody fetched the messages again.
	Ack(ctx context.Context, token string, then ...Message) error

	// Abandon releases the batch: its messages become visible again (after
	// opts.Delay) and its key is unlocked. ErrLockLost as for Ack.
	Abandon(ctx context.Context, token string, opts AbandonOptions) error

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
