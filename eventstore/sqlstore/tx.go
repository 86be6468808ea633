package sqlstore

import (
	"context"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/txn"
	"github.com/jmoiron/sqlx"
)

// In implements eventstore.TxStore: the store's operations inside tx, which must be
// a transaction of its Database.
func (s *Store) In(tx txn.Tx) (eventstore.StoreTx, error) {
	t, ok := sqltx.Of(tx, s.DB())
	if !ok {
		return nil, eventstore.ForeignTx(tx)
	}
	return storeTx{s: s, tx: t.SQL}, nil
}

type storeTx struct {
	s  *Store
	tx *sqlx.Tx
}

func (x storeTx) Stream(ctx context.Context, stream string) (eventstore.StreamInfo, error) {
	return x.s.StreamTx(ctx, x.tx, stream)
}

func (x storeTx) Read(ctx context.Context, stream string, partition int64) ([]eventstore.Event, error) {
	return x.s.ReadTx(ctx, x.tx, stream, partition)
}

func (x storeTx) KVSnapshot(ctx context.Context, stream string) (map[string]eventstore.KVEntry, error) {
	return x.s.KVSnapshotTx(ctx, x.tx, stream)
}

func (x storeTx) ReadStates(ctx context.Context, streams []string) (map[string]*eventstore.StreamState, error) {
	return x.s.ReadStatesTx(ctx, x.tx, streams)
}

func (x storeTx) Append(ctx context.Context, stream string, partition int64, events []eventstore.Event) error {
	return x.s.AppendTx(ctx, x.tx, stream, partition, events)
}

func (x storeTx) Update(ctx context.Context, stream string, u eventstore.StreamUpdate) error {
	return x.s.UpdateTx(ctx, x.tx, stream, u)
}

func (x storeTx) Commit(ctx context.Context, commits []eventstore.StreamCommit) error {
	return x.s.CommitManyTx(ctx, x.tx, commits)
}

func (x storeTx) SetCustomStatus(ctx context.Context, stream string, value *string) (int64, error) {
	return x.s.SetCustomStatusTx(ctx, x.tx, stream, value)
}

func (x storeTx) ApplyKV(ctx context.Context, stream string, partition int64, muts []eventstore.KVMutation) error {
	return x.s.ApplyKVTx(ctx, x.tx, stream, partition, muts)
}

func (x storeTx) ListStreams(ctx context.Context, f eventstore.StreamFilter) ([]string, error) {
	return x.s.ListStreamsTx(ctx, x.tx, f)
}

func (x storeTx) ListStreamInfos(ctx context.Context, f eventstore.StreamFilter) ([]eventstore.StreamInfo, error) {
	return x.s.ListStreamInfosTx(ctx, x.tx, f)
}

func (x storeTx) Delete(ctx context.Context, streams []string, o eventstore.DeleteOptions) (eventstore.DeleteResult, error) {
	return x.s.DeleteTx(ctx, x.tx, streams, o)
}

func (x storeTx) DeleteWhere(ctx context.Context, f eventstore.StreamFilter) (eventstore.DeleteResult, error) {
	return x.s.DeleteWhereTx(ctx, x.tx, f)
}

func (x storeTx) Prune(ctx context.Context, stream string, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	return x.s.PruneTx(ctx, x.tx, stream, o)
}

func (x storeTx) PruneWhere(ctx context.Context, f eventstore.StreamFilter, o eventstore.PruneOptions) (eventstore.PruneResult, error) {
	return x.s.PruneWhereTx(ctx, x.tx, f, o)
}
