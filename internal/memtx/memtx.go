// Package memtx gives in-memory stores transactions: a Domain is one lock shared by
// the stores that must commit together, and a Tx records how to undo its writes.
package memtx

import "sync"

// Domain serialises every transaction of the stores that share it.
type Domain struct {
	mu sync.Mutex
}

// NewDomain returns an empty domain.
func NewDomain() *Domain { return &Domain{} }

// Tx is a transaction of a Domain. It holds the domain's lock from Begin until Commit
// or Rollback. A Tx is used by one goroutine.
type Tx struct {
	d        *Domain
	undo     []func()
	onCommit []func()
	done     bool
}

// Begin locks the domain and starts a transaction.
func (d *Domain) Begin() *Tx {
	d.mu.Lock()
	return &Tx{d: d}
}

// Undo registers f to run if the transaction rolls back; undo actions run in reverse
// order of registration.
func (tx *Tx) Undo(f func()) { tx.undo = append(tx.undo, f) }

// OnCommit registers f to run after a successful commit, once the lock is released.
func (tx *Tx) OnCommit(f func()) { tx.onCommit = append(tx.onCommit, f) }

// Commit keeps the writes and releases the lock. It is a no-op after Commit or
// Rollback.
func (tx *Tx) Commit() {
	if tx.done {
		return
	}
	tx.done = true
	tx.d.mu.Unlock()
	for _, f := range tx.onCommit {
		f()
	}
}

// Rollback undoes the writes and releases the lock. It is a no-op after Commit or
// Rollback, so `defer tx.Rollback()` is safe.
func (tx *Tx) Rollback() {
	if tx.done {
		return
	}
	tx.done = true
	for i := len(tx.undo) - 1; i >= 0; i-- {
		tx.undo[i]()
	}
	tx.d.mu.Unlock()
}

// Run runs fn in a transaction of d and commits when fn returns nil, else rolls back.
func (d *Domain) Run(fn func(tx *Tx) error) error {
	tx := d.Begin()
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	tx.Commit()
	return nil
}
