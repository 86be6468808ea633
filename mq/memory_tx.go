package mq

import (
	"context"

	"github.com/duroq/duroq/txn"
)

// In implements TxQueue for transactions of the queue's MemoryDatabase.
func (s *Memory) In(tx txn.Tx) (QueueTx, error) {
	mt, ok := tx.(*txn.MemoryTx)
	if !ok || mt.Database() != s.domain {
		return nil, ForeignTx(tx)
	}
	return memoryTx{s: s, tx: mt}, nil
}

// memoryTx is a Memory queue inside a transaction: the twins, and loops over them
// for the batch forms.
type memoryTx struct {
	s  *Memory
	tx *txn.MemoryTx
}

func (t memoryTx) Enqueue(ctx context.Context, msgs ...Message) error {
	return t.s.EnqueueTx(t.tx, Traced(ctx, msgs)...)
}

func (t memoryTx) DequeueBatches(_ context.Context, queue string, opts DequeueOptions, max int) ([]*Batch, error) {
	var batches []*Batch
	for len(batches) < max {
		b, _, err := t.s.DequeueTx(t.tx, queue, opts)
		if err != nil || b == nil {
			return batches, err
		}
		batches = append(batches, b)
	}
	return batches, nil
}

func (t memoryTx) Lock(_ context.Context, token string) (LockInfo, error) {
	return t.s.LockTx(t.tx, token)
}

func (t memoryTx) Ack(_ context.Context, tokens ...string) ([]LockInfo, error) {
	infos := make([]LockInfo, len(tokens))
	for i, token := range tokens {
		info, err := t.s.LockTx(t.tx, token)
		if err != nil {
			return nil, err
		}
		if err := t.s.AckTx(t.tx, token); err != nil {
			return nil, err
		}
		infos[i] = info
	}
	return infos, nil
}

func (t memoryTx) Remove(_ context.Context, queue string, keys ...string) (int, error) {
	return t.s.RemoveTx(t.tx, queue, keys...)
}

func (t memoryTx) RemovePrefix(_ context.Context, queue, prefix string) (int, error) {
	return t.s.RemovePrefixTx(t.tx, queue, prefix)
}

func (t memoryTx) PurgeKey(_ context.Context, queue, routingKey string) (int, error) {
	return t.s.PurgeKeyTx(t.tx, queue, routingKey)
}

func (t memoryTx) SetKeyAttrs(_ context.Context, queue string, keys []string, attrs []*int64) error {
	if len(keys) != len(attrs) {
		return invalid("set key attributes", "attrs", "must have one attribute per key")
	}
	for i, key := range keys {
		if err := t.s.SetKeyAttrTx(t.tx, queue, key, attrs[i]); err != nil {
			return err
		}
	}
	return nil
}

var _ TxQueue = (*Memory)(nil)
