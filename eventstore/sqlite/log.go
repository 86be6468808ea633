package sqlite

import (
	"context"
	"fmt"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/essql"
	"github.com/jmoiron/sqlx"
)

// Append implements eventstore.Log: one INSERT per event (the primary key rejects a
// duplicate), then the partition's counters and the stream's current partition are
// bumped in place. No stored event is read.
func (s *Store) Append(ctx context.Context, stream string, partition int64, events []eventstore.Event) error {
	return s.c.Append(ctx, stream, partition, events)
}

// AppendTx is Append inside tx.
func (s *Store) AppendTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	return s.c.AppendTx(ctx, tx, stream, partition, events)
}

func (s *Store) append(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event, now int64) error {
	var size int64
	for _, e := range events {
		data, sum := essql.Stored(e)
		if _, err := s.exec(ctx, tx, qInsertEvent, stream, partition, e.Seq, e.Type, data, sum, now); err != nil {
			if isDuplicate(err) {
				return &eventstore.ConflictError{Stream: stream, Partition: partition, Seq: e.Seq}
			}
			return fmt.Errorf("insert event %d: %w", e.Seq, err)
		}
		size += int64(len(data))
	}
	if _, err := s.exec(ctx, tx, qAddPartitionCounts, stream, partition, now, len(events), size); err != nil {
		return err
	}
	_, err := s.exec(ctx, tx, qTouchStreamOnAppend, stream, partition, now)
	return err
}

// Read implements eventstore.Log.
func (s *Store) Read(ctx context.Context, stream string, partition int64) ([]eventstore.Event, error) {
	return s.c.Read(ctx, stream, partition)
}

// ReadTx is Read through q (a *sqlx.Tx to read inside a transaction).
func (s *Store) ReadTx(ctx context.Context, q sqlx.QueryerContext, stream string, partition int64) ([]eventstore.Event, error) {
	return s.c.ReadTx(ctx, q, stream, partition)
}

// ReadLatest implements eventstore.Log.
func (s *Store) ReadLatest(ctx context.Context, stream string) (int64, []eventstore.Event, error) {
	return s.c.ReadLatest(ctx, stream)
}

// ReadLatestTx is ReadLatest through q. Outside a transaction the partition and its
// events are read by two statements; a partition that starts between them is seen
// by the next read.
func (s *Store) ReadLatestTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, []eventstore.Event, error) {
	return s.c.ReadLatestTx(ctx, q, stream)
}

// LatestPartition implements eventstore.Log.
func (s *Store) LatestPartition(ctx context.Context, stream string) (int64, error) {
	return s.c.LatestPartition(ctx, stream)
}

// LatestPartitionTx is LatestPartition through q.
func (s *Store) LatestPartitionTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, error) {
	return s.c.LatestPartitionTx(ctx, q, stream)
}

// Partitions implements eventstore.Log.
func (s *Store) Partitions(ctx context.Context, stream string) ([]eventstore.PartitionInfo, error) {
	return s.c.Partitions(ctx, stream)
}

// PartitionsTx is Partitions through q.
func (s *Store) PartitionsTx(ctx context.Context, q sqlx.QueryerContext, stream string) ([]eventstore.PartitionInfo, error) {
	return s.c.PartitionsTx(ctx, q, stream)
}
