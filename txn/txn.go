// Package txn declares the seam duroq's layers meet at: a transaction that a message
// queue and an event store can both write in, so that what they write commits (or
// rolls back) as one. The runtime adapter commits every orchestration turn this way:
// the turn's history, its state and the messages it sends land together or not at
// all.
//
// A backend that can join such transactions says which Database it lives in
// (mq.TxQueue.Database, eventstore.TxStore.Database) and does its work inside a Tx
// that Database runs (mq.TxQueue.In, eventstore.TxStore.In). Two backends compose
// when their Databases are equal (==): two SQLite backends on one *sql.DB, two
// PostgreSQL backends on one pool, or two in-memory backends given one
// MemoryDatabase.
package txn

import "context"

// Tx is an open transaction of a Database. Backends recover their own handle from
// it (a SQL transaction, a MemoryTx); a Tx of another Database is refused with an
// error.
type Tx interface {
	// AfterCommit registers fn to run once the transaction has committed, never
	// if it rolls back: wake-ups of consumers waiting for what it wrote.
	AfterCommit(fn func())
}

// Database runs transactions that the backends living in it can share.
type Database interface {
	// Run runs fn in a transaction and commits it when fn returns nil; an error
	// rolls everything back and is returned. fn may run more than once: Run
	// retries it from the start after a transient conflict (a PostgreSQL
	// serialization failure or deadlock), backing off without outliving ctx.
	Run(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}
