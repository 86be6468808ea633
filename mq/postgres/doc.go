// Package postgres stores an mq.MessageQueue in PostgreSQL (github.com/jackc/pgx/v5
// through its database/sql driver), for deployments where many processes share one
// queue.
//
// Open(ctx, dsn, Options) is the common case: it connects, creates the schema if
// needed, applies the embedded migrations and owns the database. New(db, Options)
// builds a queue over a database the caller shares with other stores (open it with
// pgdb.Open, for example together with eventstore/postgres); call Migrate before use.
// The *Tx methods (EnqueueTx, DequeueTx, AckTx, AbandonTx, SettleTx, LockTx, RenewTx,
// RemoveTx, RemovePrefixTx, PurgeKeyTx, SetKeyAttrTx) run inside the caller's
// transaction, so queue writes commit together with the caller's own. As on the
// SQLite backend, call Notify after the transaction commits for the queues it wrote
// to: it wakes this process's long polls and, through one NOTIFY, every other
// process's (see Wake-ups).
//
// # Settings and why
//
//   - Schema (Options.DB.Schema, default "public"): every connection's search_path, so
//     several deployments or test runs can share one database. Migrations serialise
//     on an advisory lock per schema, so processes may migrate at once.
//   - Pool (Options.DB.MaxOpenConns, default GOMAXPROCS, at least 4): a transaction
//     holds a connection only while it runs; a long poll holds none while it waits.
//     Each Queue that has long-polled holds one more connection for LISTEN, taken
//     from this pool (with a pool of one connection there is no listener: long polls
//     are then woken only by this process and their deadlines). Enqueue's rounds
//     (concurrent calls share one) keep the connection they ran on for the next
//     round until 50 ms pass without one, in pools of 4 or more: a stream of
//     enqueues (a web process starting orchestrations while its runtime works) does
//     not wait for a connection behind the process's other transactions. Any other
//     call waits for a free connection; the claims and settlements of many Consumers
//     share a few well, as more transactions at once than the server has cores slow
//     each of them (on 2 cores, 16 Consumers drained keyed messages 30–50 % slower
//     with 16 connections than with 4). Raise it for callers whose own transactions
//     (DequeueTx, SettleTx) hold connections while they work.
//   - Isolation READ COMMITTED: each statement sees the newest committed data, row
//     locks skip or wait instead of failing, and a row changed by a concurrent
//     transaction is re-checked against its newest version. The *Tx methods assume
//     it too; under REPEATABLE READ or SERIALIZABLE they stay correct but concurrent
//     work fails with serialization errors that the caller must retry.
//   - Durability: Enqueue, Ack, Abandon and every other write commit as the server's
//     synchronous_commit says (on by default: the commit waits for the WAL flush).
//     DequeueBatch and DequeueBatches commit their locks asynchronously
//     (synchronous_commit=off for that transaction only): if a server crash loses
//     one, the batch's messages are simply eligible again, as after a lapsed lock,
//     and its holder's Ack fails with ErrLockLost; at-least-once delivery is
//     unaffected, only the attempt count of that fetch may be lost. This saves a WAL
//     flush per delivering transaction. DequeueTx follows the caller's transaction.
//   - Limits (mq.Admin.SetLimit, table mq_limits): a dequeue of a queue with limits
//     first locks the queue's limit rows (FOR UPDATE), so the limited dequeues of a
//     queue take turns across processes and each counts the batches the others
//     took; it then takes batch by batch. A queue without limits pays one primary-key
//     probe of mq_limits inside each scan statement (an InitPlan guard that makes
//     the scan take nothing when the queue has limits). An Ack or Settle of a batch
//     of a limited queue wakes its long polls (it frees a place).
//   - Statistics: the dequeue statement relies on the planner walking the
//     (queue, visible_at, id) index, which it does once mq_messages has statistics.
//     The migration makes autovacuum analyse the table after 5% of its rows changed.
//     Before the first ANALYZE (a large backlog loaded into a new schema), a dequeue
//     would sort the queue's visible messages instead: 10 ms a dequeue at 10,000
//     messages. So a dequeuing Queue checks, at most every second until the table has
//     statistics, and runs ANALYZE mq_messages itself once the table holds 8 pages
//     (a few hundred small messages; see pgdb.StatsGuard).
//   - Times are Unix microseconds computed in Go (Options.Now), as in the SQLite
//     backend, so behaviour is identical; processes sharing a schema need clocks in
//     sync (lock expiry compares one process's times with another's).
//   - Names are text in the "C" collation (bytewise, as SQLite compares them), so
//     names that PostgreSQL text cannot hold — invalid UTF-8 or a NUL byte — are
//     rejected with ErrInvalid. Payloads are bytea and may hold anything.
//   - Transient failures (serialization failure, deadlock, lock not available, a
//     connection lost before the statement was sent; see internal/pgsql.IsRetryable) are
//     retried up to 6 times with a short jittered backoff; callers see them only if
//     they persist, wrapped with the operation's name. The *Tx methods do not retry:
//     the caller owns the transaction and must rerun it.
//
// # Locking
//
// DequeueBatch and DequeueBatches make attempts, each one short transaction of two
// statements whatever the number of batches:
//
//  1. The scan statement picks the first eligible messages in eligibility order
//     (priority, visible_at, id) with SELECT ... FOR UPDATE SKIP LOCKED: a UNION ALL
//     of three ordered, limited branches, the positive priorities (a partial index),
//     priority 0 (the (queue, visible_at, id) index) and the negative ones (another
//     partial index), which PostgreSQL reads in turn only until it has enough rows,
//     so a queue without priorities reads its ready index as before priorities. It
//     is joined with the routing-key rows for the key-lock and attribute
//     conditions, so rows other consumers are taking are skipped, never waited for.
//     Without visible priorities it locks one row per routing key, the key's first
//     by (visible_at, id) (a probe of the (queue, routing_key, id) index leaves out
//     the others): two consumers' scans then meet on a key only at that row, which
//     the second skips, instead of both trying the key and one undoing its whole
//     attempt (16 consumers on keyed traffic lost most attempts so).
//     It keeps the messages of the first max batches (an un-keyed message is a
//     batch, a routing key's messages are one, ranked by its most urgent) and tries the
//     advisory lock of each of their routing keys, pg_try_advisory_xact_lock on a
//     hash of (schema, queue, routing key), which never waits. If it won every key,
//     the same statement claims each un-keyed message under a token of its own. A
//     plain scan reads max rows; a phased one reads max rows times the rows per
//     batch the previous phased scan saw, so keyed traffic fills max batches in one
//     attempt too.
//  2. If it won keys, a second statement (its snapshot and its clock reading taken
//     after the locks, so it sees everything the keys' previous holders committed)
//     takes them: INSERT INTO mq_keys ... ON CONFLICT DO UPDATE ... WHERE the key is
//     not locked (and its attribute still passes the filter), and UPDATE locks each
//     taken key's oldest eligible messages in id order under its new token, as many
//     as MaxMessages and MaxBytes allow (a window of row_number and running payload
//     size over the (queue, routing_key, id) index, cut by LIMIT).
//
// Each attempt runs after a savepoint. An attempt that lost a key (its advisory lock
// is taken) claims nothing and is rolled back to it, which frees its candidate rows
// at once, and the next attempt, in the same transaction, skips that key; the
// batches of earlier attempts stand. A key that was claimed by a consumer that
// committed since the scan's snapshot is left out of the batches and skipped from
// then on. DequeueTx and DequeueManyTx run inside the caller's transaction the same
// way. After 32 lost attempts DequeueBatch reports what it holds, or nothing for now
// and, in a long poll, looks again 5 ms later.
//
// A session message is taken alone, first: the first eligible message is picked as
// above, and an un-keyed one is claimed together with its session, by an upsert
// guarded by "no other owner holds a live lease". A session the owner does not hold
// yet is claimed only with its first eligible message (in eligibility order), so
// when owners race for a session, the one that picked its first message wins; an
// attempt whose session has an earlier message being claimed right now retries the session a millisecond later
// instead (the claimant may be the same owner, whose goroutines share the session).
// The batches after it take no session message, so a transaction claims or touches
// at most one session row. A session attempt that loses is undone with its
// transaction (DequeueTx and DequeueManyTx: rolled back to a savepoint of their own).
//
// Every other operation that touches a key's lock row or a keyed message's row
// first takes that key's advisory lock, waiting for it: Ack, Abandon, Settle and
// Renew find their batches' keys by token and lock them in ascending lock-id order
// in the same statement before touching a row (a Settle that needs its batches'
// sizes first runs a statement that takes the same locks and then locks the
// batches' rows in id order); Remove, RemovePrefix, Purge and Redrive lock the keys
// of the matching messages in ascending lock-id order, then lock rows in id order
// (Purge and Redrive a thousand keys per transaction: PostgreSQL's shared lock
// table holds some thousands of locks for all sessions together); PurgeKey and
// SetKeyAttr lock their key. A dead-lettered or redriven message is locked under
// the key of the queue it leaves: no consumer of the queue it enters can have
// chosen it yet. Session rows are always locked after message rows, and Settle,
// RenewSessions and CleanupSessions lock them in session order.
//
// A keyed batch released with a Delay (Abandon, Settle) keeps its key: the key's
// row keeps the dead token and locked_until becomes the time its messages are
// visible again, so no later message of the key is delivered first (the order rule
// of mq.MessageQueue.Settle).
//
// Why no deadlock is possible among these operations: a deadlock is a cycle of
// transactions each waiting for a lock the next one holds. A dequeue attempt that
// holds a keyed candidate row without the key's advisory lock never waits (SKIP
// LOCKED and try-locks only) and ends at once, so it is in no cycle; this is why an
// attempt that lost any key goes no further, even for the keys it won. A dequeue
// that holds keys' advisory locks waits only in its batch UPDATE, and only for
// candidate rows another scan holds: every other writer of the key's rows needs
// the advisory lock it holds, which is also why its mq_keys upsert cannot wait at
// all. A scan locks rows beyond the batches it keeps, though, and goes on to lock
// its own keys' rows while holding them: two such dequeues can wait for each other.
// So the batch UPDATE waits at most keyRowsWait (200 ms, lock_timeout), then the
// attempt counts its keys as lost and rolls back, freeing what it held. Every other
// acquisition follows one global order — advisory key locks in ascending id, then
// message rows (in id order where one statement locks several un-keyed ones), then
// mq_keys rows, then session rows (in session order where several) — and waits in
// one order cannot close a cycle. That includes an un-keyed dequeue, which locks its
// candidate row and then, for a session message, may wait for the session's row.
// Enqueue only inserts; it waits only for another uncommitted insert of the same
// message key, as does a message moved by Settle or Redrive (which, when that insert
// commits, fails on the key's unique index and is retried: it then drops its key).
// The contention tests check this under load: no deadlock is ever retried (one
// was, twice in a run, before the bounded wait).
// Transactions of the caller that combine several *Tx calls keep the guarantee when
// they lock at most one routing key each, or keys in a consistent order (the adapter
// locks one instance per transaction); otherwise PostgreSQL may detect a deadlock and
// abort one of them with a retryable error.
//
// # Wake-ups
//
// Every write that can make a message eligible — Enqueue, Ack of a keyed batch (its
// key's waiting messages) or with follow-up messages, Abandon, a Settle that released
// messages, touched a key or made dead letters (the dead-letter queue too), Redrive
// (the destination queues), and a Remove or Purge that invalidated a live batch —
// wakes the queue once it has committed: this process's long polls at once, and the
// other processes' through pg_notify(channel, queue) on a channel named after the
// schema. (The *Tx methods leave this to the caller's Notify.) Each Queue runs, from
// its first long poll on, one listener goroutine holding one connection that
// LISTENs on the channel and wakes this process's long polls on the notified queue.
// It reconnects with a growing backoff (100 ms to 5 s) when its connection fails and
// wakes every long poll once when it is back; while it is down, long polls end at
// their Wait deadline or when the next message becomes visible, as without
// notifications.
//
// The NOTIFY is a statement of its own, sent after the commit, at most one every
// 2 ms per process: the queues named meanwhile go out together in the next (under
// duroq bench seq, that halved the NOTIFY statements, half of all transactions
// before). A wake-up across processes waits at most that long. A NOTIFY inside the
// writing transaction would be simpler and atomic, but PostgreSQL holds a
// database-wide lock from a notifying transaction's commit until its WAL flush, so
// notifying commits would flush one at a time across every process (measured on the
// test machine with 8 concurrent writers: 3-5k notifying commits/s against 11k
// without; with 4 worker processes of `duroq bench -processes`, three quarters of
// the lock waits sampled were commits waiting for it). A NOTIFY alone writes no WAL
// and holds that lock for microseconds. The price: a process that dies between a
// commit and its NOTIFY leaves the other processes' long polls to their deadlines.
// Acks of un-keyed batches without follow-up messages, which make nothing eligible,
// wake nobody.
//
// # Signals
//
// Signal and Watch carry wake-ups by name that are not about a queue's messages, on
// a second channel of the schema, in the same NOTIFY statements: the runtime's
// clients (package adapter) watch the instance they wait for, and every commit of
// a turn that ends an execution or changes its custom status or KV state signals
// it, so a web process waiting for instances that worker processes run reads each
// one when it changes instead of every 100 ms. A signal's payload is a 64-bit hash
// of its name, so names of any length fit; a collision only wakes a watcher that
// then finds nothing new. Like the wake-ups, a signal of a process that dies right
// after its commit is lost: watchers read again now and then.
package postgres
