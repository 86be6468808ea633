package txn

import (
	"context"
	"sync"
)

// MemoryDatabase is the Database of in-memory backends: one lock that serialises
// every transaction of the backends that share it, and undo logs that roll back a
// failed one. Give the same MemoryDatabase to mq.NewMemory and eventstore.NewMemory
// to compose them.
type MemoryDatabase struct {
	mu sync.Mutex
}

// NewMemoryDatabase returns an empty in-memory database.
func NewMemoryDatabase() *MemoryDatabase { return &MemoryDatabase{} }

// MemoryTx is a transaction of a MemoryDatabase. It holds the database's lock from
// Begin until Commit or Rollback and is used by one goroutine.
type MemoryTx struct {
	d           *MemoryDatabase
	undo        []func()
	afterCommit []func()
	done        bool
}

var (
	_ Database = (*MemoryDatabase)(nil)
	_ Tx       = (*MemoryTx)(nil)
)

// Begin locks the database and starts a transaction.
func (d *MemoryDatabase) Begin() *MemoryTx {
	d.mu.Lock()
	return &MemoryTx{d: d}
}

// Database is the database tx belongs to.
func (tx *MemoryTx) Database() *MemoryDatabase { return tx.d }

// Undo registers f to run if the transaction rolls back; undo actions run in reverse
// order of registration.
func (tx *MemoryTx) Undo(f func()) { tx.undo = append(tx.undo, f) }

// AfterCommit implements Tx: f runs after a successful commit, once the lock is
// released.
func (tx *MemoryTx) AfterCommit(f func()) { tx.afterCommit = append(tx.afterCommit, f) }

// Commit keeps the writes and releases the lock. It is a no-op after Commit or
// Rollback.
func (tx *MemoryTx) Commit() {
	if tx.done {
		return
	}
	tx.done = true
	tx.d.mu.Unlock()
	for _, f := range tx.afterCommit {
		f()
	}
}

// Rollback undoes the writes and releases the lock. It is a no-op after Commit or
// Rollback, so `defer tx.Rollback()` is safe.
func (tx *MemoryTx) Rollback() {
	if tx.done {
		return
	}
	tx.done = true
	for i := len(tx.undo) - 1; i >= 0; i-- {
		tx.undo[i]()
	}
	tx.d.mu.Unlock()
}

// Do runs fn in a transaction of d and commits when fn returns nil, else rolls back.
func (d *MemoryDatabase) Do(fn func(tx *MemoryTx) error) error {
	tx := d.Begin()
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	tx.Commit()
	return nil
}

// Run implements Database. Transactions of a MemoryDatabase never conflict, so fn
// runs once.
func (d *MemoryDatabase) Run(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.Do(func(tx *MemoryTx) error { return fn(ctx, tx) })
}
