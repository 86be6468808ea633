// Package wrapped is a backend pair written outside duroq's module: decorators of
// duroq's queue and event store that count the transactions they join. It shows
// that a pair built from the public contract alone (mq.TxQueue, eventstore.TxStore
// and the seam of package txn) composes into a runtime provider with adapter.New,
// and its tests run duroq's conformance suites on it.
package wrapped

import (
	"sync/atomic"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/txn"
)

// AdminQueue is what the adapter uses of a queue: the transactional contract, and
// the admin operations it reads pending starts with.
type AdminQueue interface {
	mq.TxQueue
	mq.Admin
}

// Queue is a queue that counts the transactions it joins.
type Queue struct {
	AdminQueue
	Joined atomic.Int64
}

// In implements mq.TxQueue.
func (q *Queue) In(tx txn.Tx) (mq.QueueTx, error) {
	q.Joined.Add(1)
	return q.AdminQueue.In(tx)
}

// Store is an event store that counts the transactions it joins.
type Store struct {
	eventstore.TxStore
	Joined atomic.Int64
}

// In implements eventstore.TxStore.
func (s *Store) In(tx txn.Tx) (eventstore.StoreTx, error) {
	s.Joined.Add(1)
	return s.TxStore.In(tx)
}

// NewMemory returns a counting pair over duroq's in-memory backends, sharing one
// database.
func NewMemory() (*Queue, *Store) {
	db := txn.NewMemoryDatabase()
	return &Queue{AdminQueue: mq.NewMemory(mq.MemoryOptions{Database: db})},
		&Store{TxStore: eventstore.NewMemory(eventstore.MemoryOptions{Database: db})}
}

// Wrap returns a counting pair over q and s.
func Wrap(q AdminQueue, s eventstore.TxStore) (*Queue, *Store) {
	return &Queue{AdminQueue: q}, &Store{TxStore: s}
}
