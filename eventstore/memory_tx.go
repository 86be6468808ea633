package eventstore

import (
	"context"
	"errors"

	"github.com/duroq/duroq/txn"
)

// In implements TxStore for transactions of the store's MemoryDatabase.
func (m *Memory) In(tx txn.Tx) (StoreTx, error) {
	mt, ok := tx.(*txn.MemoryTx)
	if !ok || mt.Database() != m.domain {
		return nil, ForeignTx(tx)
	}
	return memoryTx{m: m, tx: mt}, nil
}

// memoryTx is a Memory store inside a transaction: the twins, and loops over them
// for the bulk forms.
type memoryTx struct {
	m  *Memory
	tx *txn.MemoryTx
}

func (t memoryTx) Stream(ctx context.Context, stream string) (StreamInfo, error) {
	return t.m.StreamTx(ctx, t.tx, stream)
}

func (t memoryTx) Read(ctx context.Context, stream string, partition int64) ([]Event, error) {
	return t.m.ReadTx(ctx, t.tx, stream, partition)
}

func (t memoryTx) KVSnapshot(ctx context.Context, stream string) (map[string]KVEntry, error) {
	return t.m.KVSnapshotTx(ctx, t.tx, stream)
}

func (t memoryTx) ReadStates(ctx context.Context, streams []string) (map[string]*StreamState, error) {
	states := map[string]*StreamState{}
	for _, stream := range streams {
		info, err := t.Stream(ctx, stream)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		st := &StreamState{Info: info}
		st.Events, err = t.Read(ctx, stream, info.CurrentPartition)
		if errors.Is(err, ErrCorrupt) {
			st.Events, st.Corrupt = nil, err
		} else if err != nil {
			return nil, err
		}
		if st.KV, err = t.KVSnapshot(ctx, stream); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		states[stream] = st
	}
	return states, nil
}

func (t memoryTx) Append(ctx context.Context, stream string, partition int64, events []Event) error {
	return t.m.AppendTx(ctx, t.tx, stream, partition, events)
}

func (t memoryTx) Update(ctx context.Context, stream string, u StreamUpdate) error {
	return t.m.UpdateTx(ctx, t.tx, stream, u)
}

func (t memoryTx) Commit(ctx context.Context, commits []StreamCommit) error {
	for _, c := range commits {
		if err := t.Append(ctx, c.Stream, c.Update.Partition, c.Events); err != nil {
			return err
		}
		if err := t.Update(ctx, c.Stream, c.Update); err != nil {
			return err
		}
	}
	return nil
}

func (t memoryTx) SetCustomStatus(ctx context.Context, stream string, value *string) (int64, error) {
	return t.m.SetCustomStatusTx(ctx, t.tx, stream, value)
}

func (t memoryTx) ApplyKV(ctx context.Context, stream string, partition int64, muts []KVMutation) error {
	return t.m.ApplyKVTx(ctx, t.tx, stream, partition, muts)
}

func (t memoryTx) ListStreams(ctx context.Context, f StreamFilter) ([]string, error) {
	return t.m.ListStreamsTx(ctx, t.tx, f)
}

func (t memoryTx) ListStreamInfos(ctx context.Context, f StreamFilter) ([]StreamInfo, error) {
	return t.m.ListStreamInfosTx(ctx, t.tx, f)
}

func (t memoryTx) Delete(ctx context.Context, streams []string, o DeleteOptions) (DeleteResult, error) {
	return t.m.DeleteTx(ctx, t.tx, streams, o)
}

func (t memoryTx) DeleteWhere(ctx context.Context, f StreamFilter) (DeleteResult, error) {
	return t.m.DeleteWhereTx(ctx, t.tx, f)
}

func (t memoryTx) Prune(ctx context.Context, stream string, o PruneOptions) (PruneResult, error) {
	return t.m.PruneTx(ctx, t.tx, stream, o)
}

func (t memoryTx) PruneWhere(ctx context.Context, f StreamFilter, o PruneOptions) (PruneResult, error) {
	return t.m.PruneWhereTx(ctx, t.tx, f, o)
}

var _ TxStore = (*Memory)(nil)
