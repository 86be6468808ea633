// Package mq is a durable, peek-lock, at-least-once message queue contract with
// routing-key batches, and its in-memory reference backend.
//
// # Model
//
// A queue holds opaque messages. A consumer fetches with DequeueBatch and owns what it
// got under a lock token until it acks (deletes), abandons (releases) or the lock
// lapses (then the messages are delivered again, with their attempt count raised).
// Delivery is at least once: a handler must tolerate seeing a message again.
//
// The key primitive is the routing-key batch. DequeueBatch picks the oldest eligible
// message; when it carries a routing key, the backend atomically locks the key and
// every eligible message of that key, in enqueue order, under one token. While the key
// is locked no other consumer receives any message of it — not even messages enqueued
// after the lock was taken. This is what SQS FIFO message groups and Service Bus
// sessions offer: one consumer at a time per key, in order, others in parallel.
// Messages without a routing key are delivered one per batch, independently. A keyed
// batch is bounded (DequeueOptions.MaxMessages and MaxBytes): it takes the key's
// oldest messages, and the rest wait behind the locked key.
//
// A message may carry a priority (Message.Priority): among the eligible messages the
// most urgent is picked first, and a routing key competes with its most urgent
// eligible message, while its batch is still its oldest messages in enqueue order.
// Priorities are strict (a lower one waits while a higher one is eligible): put work
// that needs a fair share in a queue of its own.
//
// # Order under failure
//
// A batch is settled message by message (Settle): the messages a consumer finished
// are acked, a failing one is retried or moved to a dead-letter queue with its
// reason, and the rest are released. While released messages of a key wait for a
// retry delay, their key stays held, so no later message of the key overtakes them
// — the way an SQS FIFO message group stays blocked behind a failing message. A lock
// that lapses (a consumer that crashed) releases messages that are older than any
// other message of their key, so they come first in its next batch as well.
// DequeueBatches and a Settle of many settlements move many batches per
// transaction, which is how Consumer drains un-keyed traffic fast.
//
// # Rules every backend follows (the conformance suite checks each)
//
//   - A backend MUST hand a routing key to at most one live lock at a time, and MUST
//     NOT include in a batch, nor delete on its ack, a message that arrived or became
//     visible after the batch was taken.
//   - Ack, Abandon and Renew MUST fail with ErrLockLost and change nothing when the
//     token is unknown, its lock has lapsed (even if nobody fetched again) or its batch
//     lost a message to Remove or PurgeKey. A failed Ack leaves a live lock held.
//   - Fetching MUST increment the attempt count of every message it locks; Abandon with
//     IgnoreAttempt, and Settle for the released messages it does not count as tried,
//     MUST undo that increment.
//   - While released messages of a keyed batch wait for their delay, the key MUST stay
//     held (unless the caller waives it with ReleaseKey).
//   - Enqueue, Ack and Settle MUST be atomic: all of their writes happen or none does
//     (Settle skips, and reports, the settlements whose lock was lost).
//   - Delays, lock expiries and session leases MUST be computed from the backend's
//     clock, so an injected clock controls them all.
//   - A paused queue (Admin.Pause) MUST deliver nothing until Resume, which MUST wake
//     its waiting long polls; its producers, and the holders of its batches, go on.
//   - Under a Limit (Admin.SetLimit), a dequeue MUST count against the limits of the
//     queue and of the first message's group in the same atomic step as its lock,
//     so that the processes sharing the storage never exceed them together.
//   - Bad input MUST be rejected before anything is written, with an error that names
//     the operation and matches ErrInvalid, ErrPayloadTooLarge or ErrDuplicateKey; a
//     closed queue MUST answer ErrClosed. No input may cause a panic.
//
// # Tags, sessions and key attributes
//
// A tag routes a message to specialised consumers (TagFilter has five variants). A
// session gives a message owner affinity: the first consumer (owner) that fetches a
// message of a session holds the session for a lease, and until the lease lapses only
// that owner receives the session's messages. A routing key may carry an integer
// attribute (SetKeyAttr) that consumers filter on with DequeueOptions.KeyAttr, before
// anything is locked.
//
// # Composition
//
// A TxQueue does its writes inside a transaction of the database it lives in
// (Database, In; the seam is declared in package txn), so queue writes commit
// together with another backend's on the same database; TestTransactional in
// package conformance checks it. The backends also offer *Tx twins of their methods
// for a caller's own transaction (Memory: on a *txn.MemoryTx; mq/sqlite and
// mq/postgres: on a *sqlx.Tx, to enqueue with an application's own SQL writes).
//
// For applications, Consumer runs a Handler over a queue with lock renewal, retries
// with backoff that keep per-key order, dead-lettering of the failing message alone,
// group commits and graceful shutdown, and Typed adds a Codec at the edge. Operators
// browse, redrive and purge messages, and pause and resume queues, through Admin,
// which every backend implements.
package mq
