// Package sqlite stores an mq.MessageQueue in SQLite (github.com/mattn/go-sqlite3).
//
// Open(path, Options) is the common case: it opens the file in WAL mode, applies the
// embedded migrations and owns the database. New(db, Options) builds a queue over a
// database the caller shares with other stores (for example eventstore/sqlite); the
// *Tx methods (EnqueueTx, DequeueTx, DequeueManyTx, AckTx, AckManyTx, AbandonTx,
// SettleTx, RenewTx, RemoveTx, PurgeKeyTx, SetKeyAttrTx, RedriveTx, PurgeTx; PeekTx
// reads) then run inside the caller's transaction, so queue writes commit together
// with the caller's own. After committing such a transaction, call Notify for the
// queues it touched to wake this process's long polls at once. A *Tx method that
// fails leaves the transaction to be rolled back (SettleTx's *mq.SettleError aside).
//
// Queue also implements mq.Admin (Peek, Redrive, Purge, Queues, Pause, Resume,
// SetLimit, Limits; a pause is a row of mq_paused and a limit one of mq_limits,
// seen by every process: a dequeue counts against a limit inside its write
// transaction, which SQLite serialises). A damaged database file fails with
// mq.ErrCorrupt.
//
// Settings and why:
//   - WAL journal: readers never block the writer and a commit is one append to the log.
//   - synchronous=NORMAL by default: a commit survives a crash of the process; a power
//     loss may lose the last commits. Choose FULL (Options.DB.Synchronous) to sync every
//     commit.
//   - BEGIN IMMEDIATE transactions: a transaction takes the write lock when it begins,
//     so two writers never deadlock upgrading a read lock; writers of this process also
//     queue on an in-process mutex instead of SQLite's sleeping busy handler.
//   - The queue's own transactions (those of the methods without Tx) are BEGIN
//     IMMEDIATE and COMMIT statements on the process's writer connection, not
//     database/sql transactions, whose goroutines cost a fifth of a short one; their
//     statements run to completion once started, and a transaction whose context
//     ends rolls back at its next statement or at its end.
//   - busy_timeout 10 s: how long a writer waits for another process's transaction.
//   - pool of 8 connections: long polls hold none while they wait.
//
// Every timestamp is computed in Go (Options.Now) and stored as Unix microseconds.
// One DequeueBatch or DequeueBatches attempt is one short transaction; Enqueue of
// many messages is one transaction. DequeueBatches and Settle take a constant number
// of statements whatever the number of batches.
package sqlite
