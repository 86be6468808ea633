package postgres

import (
	"context"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// ApplyKV implements eventstore.KVStore.
func (s *Store) ApplyKV(ctx context.Context, stream string, partition int64, muts []eventstore.KVMutation) error {
	return s.c.ApplyKV(ctx, stream, partition, muts)
}

// ApplyKVTx is ApplyKV inside tx.
func (s *Store) ApplyKVTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, muts []eventstore.KVMutation) error {
	return s.c.ApplyKVTx(ctx, tx, stream, partition, muts)
}

// KVGet implements eventstore.KVStore.
func (s *Store) KVGet(ctx context.Context, stream, key string) (eventstore.KVEntry, bool, error) {
	return s.c.KVGet(ctx, stream, key)
}

// KVGetTx is KVGet through q.
func (s *Store) KVGetTx(ctx context.Context, q sqlx.QueryerContext, stream, key string) (eventstore.KVEntry, bool, error) {
	return s.c.KVGetTx(ctx, q, stream, key)
}

// KVAll implements eventstore.KVStore.
func (s *Store) KVAll(ctx context.Context, stream string) (map[string]eventstore.KVEntry, error) {
	return s.c.KVAll(ctx, stream)
}

// KVAllTx is KVAll through q.
func (s *Store) KVAllTx(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error) {
	return s.c.KVAllTx(ctx, q, stream)
}

// KVSnapshot implements eventstore.KVStore.
func (s *Store) KVSnapshot(ctx context.Context, stream string) (map[string]eventstore.KVEntry, error) {
	return s.c.KVSnapshot(ctx, stream)
}

// ReadStatesTx reads through q, for each of streams that exists, what StreamTx, ReadTx
// of its current partition and KVSnapshotTx would, in three statements.
func (s *Store) ReadStatesTx(ctx context.Context, q sqlx.QueryerContext, streams []string) (map[string]*eventstore.StreamState, error) {
	s.planStats.Ensure()
	return s.c.ReadStatesTx(ctx, q, streams)
}

// KVSnapshotTx is KVSnapshot through q.
func (s *Store) KVSnapshotTx(ctx context.Context, q sqlx.QueryerContext, stream string) (map[string]eventstore.KVEntry, error) {
	return s.c.KVSnapshotTx(ctx, q, stream)
}
