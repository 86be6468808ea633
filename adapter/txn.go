package adapter

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/txn"
)

// ErrNotComposable: the queue and the store cannot commit in one transaction.
var ErrNotComposable = errors.New("adapter: the queue and the event store do not share a transaction")

// binding runs functions in one transaction spanning the queue and the store.
type binding struct {
	db txn.Database
	q  mq.TxQueue
	s  eventstore.TxStore
}

// turnTx is one transaction spanning the queue and the store.
type turnTx struct {
	q mq.QueueTx
	s eventstore.StoreTx
}

// bind finds the database q and s can both write in, or refuses the pair.
func bind(q mq.MessageQueue, s eventstore.EventStore) (binding, error) {
	tq, ok := q.(mq.TxQueue)
	if !ok {
		return binding{}, fmt.Errorf("%w: the queue (%T) is not an mq.TxQueue", ErrNotComposable, q)
	}
	ts, ok := s.(eventstore.TxStore)
	if !ok {
		return binding{}, fmt.Errorf("%w: the event store (%T) is not an eventstore.TxStore", ErrNotComposable, s)
	}
	db := tq.Database()
	if !sameDatabase(db, ts.Database()) {
		return binding{}, fmt.Errorf("%w: the queue's database (%T) is not the event store's (%T)", ErrNotComposable, db, ts.Database())
	}
	return binding{db: db, q: tq, s: ts}, nil
}

// sameDatabase compares a and b with ==, refusing (rather than panicking on) a
// Database whose type == cannot compare.
func sameDatabase(a, b txn.Database) bool {
	if a == nil || b == nil || !reflect.TypeOf(a).Comparable() || !reflect.TypeOf(b).Comparable() {
		return false
	}
	return a == b
}

func (b binding) run(ctx context.Context, fn func(tx turnTx) error) error {
	return b.db.Run(ctx, func(ctx context.Context, t txn.Tx) error {
		q, err := b.q.In(t)
		if err != nil {
			return err
		}
		s, err := b.s.In(t)
		if err != nil {
			return err
		}
		return fn(turnTx{q: q, s: s})
	})
}
