// Package mqsql is what the SQL queues (mq/sqlite, mq/postgres) share above their
// dialects: their operations inside a txn.Tx, built from their *Tx methods.
package mqsql

import (
	"context"

	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/txn"
	"github.com/jmoiron/sqlx"
)

// Queue is a SQL queue: its writes inside a caller's *sqlx.Tx, and the wake-up of a
// queue's consumers, due once such a write commits.
type Queue interface {
	DB() *sqlx.DB
	Notify(queue string)
	EnqueueTx(ctx context.Context, tx *sqlx.Tx, msgs ...mq.Message) error
	DequeueManyTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error)
	LockTx(ctx context.Context, tx *sqlx.Tx, token string) (mq.LockInfo, error)
	AckManyTx(ctx context.Context, tx *sqlx.Tx, tokens []string) ([]mq.LockInfo, error)
	RemoveTx(ctx context.Context, tx *sqlx.Tx, queue string, keys ...string) (int, error)
	RemovePrefixTx(ctx context.Context, tx *sqlx.Tx, queue, prefix string) (int, error)
	PurgeKeyTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string) (int, error)
	SetKeyAttrsTx(ctx context.Context, tx *sqlx.Tx, queue string, keys []string, attrs []*int64) error
}

// In returns q's operations inside tx, which must be a transaction of q's database.
func In(q Queue, tx txn.Tx) (mq.QueueTx, error) {
	t, ok := sqltx.Of(tx, q.DB())
	if !ok {
		return nil, mq.ForeignTx(tx)
	}
	return &queueTx{q: q, t: t, woken: map[string]bool{}}, nil
}

type queueTx struct {
	q     Queue
	t     *sqltx.Tx
	woken map[string]bool // queues whose wake-up is registered
}

// wake registers the wake-up of queue's consumers after the commit: what the
// transaction enqueued, or the lock it released, is theirs then.
func (x *queueTx) wake(queue string) {
	if x.woken[queue] {
		return
	}
	x.woken[queue] = true
	x.t.AfterCommit(func() { x.q.Notify(queue) })
}

func (x *queueTx) Enqueue(ctx context.Context, msgs ...mq.Message) error {
	for _, m := range msgs {
		x.wake(m.Queue)
	}
	return x.q.EnqueueTx(ctx, x.t.SQL, msgs...)
}

func (x *queueTx) DequeueBatches(ctx context.Context, queue string, opts mq.DequeueOptions, max int) ([]*mq.Batch, error) {
	return x.q.DequeueManyTx(ctx, x.t.SQL, queue, opts, max)
}

func (x *queueTx) Lock(ctx context.Context, token string) (mq.LockInfo, error) {
	return x.q.LockTx(ctx, x.t.SQL, token)
}

func (x *queueTx) Ack(ctx context.Context, tokens ...string) ([]mq.LockInfo, error) {
	infos, err := x.q.AckManyTx(ctx, x.t.SQL, tokens)
	for _, info := range infos {
		x.wake(info.Queue) // the acks released the locks
	}
	return infos, err
}

func (x *queueTx) Remove(ctx context.Context, queue string, keys ...string) (int, error) {
	x.wake(queue) // a removed message may have held its key
	return x.q.RemoveTx(ctx, x.t.SQL, queue, keys...)
}

func (x *queueTx) RemovePrefix(ctx context.Context, queue, prefix string) (int, error) {
	x.wake(queue)
	return x.q.RemovePrefixTx(ctx, x.t.SQL, queue, prefix)
}

func (x *queueTx) PurgeKey(ctx context.Context, queue, routingKey string) (int, error) {
	return x.q.PurgeKeyTx(ctx, x.t.SQL, queue, routingKey)
}

func (x *queueTx) SetKeyAttrs(ctx context.Context, queue string, keys []string, attrs []*int64) error {
	return x.q.SetKeyAttrsTx(ctx, x.t.SQL, queue, keys, attrs)
}
