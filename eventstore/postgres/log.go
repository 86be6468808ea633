package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/essql"
	"github.com/duroq/duroq/internal/pgsql"
	"github.com/jmoiron/sqlx"
)

// Append implements eventstore.Log in one statement: it inserts all the events (the
// primary key decides every sequence number) and, if none was taken, upserts the
// stream's current partition and the partition's counters. No stored event is read.
func (s *Store) Append(ctx context.Context, stream string, partition int64, events []eventstore.Event) error {
	return s.c.Append(ctx, stream, partition, events)
}

// AppendTx is Append inside tx.
func (s *Store) AppendTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	return s.c.AppendTx(ctx, tx, stream, partition, events)
}

func (s *Store) append(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event, now int64) error {
	var (
		size  int64
		seqs  = make([]int64, len(events))
		types = make([]string, len(events))
		datas = make([][]byte, len(events))
		sums  = make([]int64, len(events))
	)
	for i, e := range events {
		seqs[i], types[i] = e.Seq, e.Type
		datas[i], sums[i] = essql.Stored(e)
		size += int64(len(datas[i]))
	}
	var (
		conflict sql.NullInt64
		counted  int64
	)
	err := s.c.ScanRow(ctx, tx, qAppend, []any{stream, partition, seqs, types, datas, sums, now, size}, &conflict, &counted)
	if err != nil {
		return conflictOr(stream, partition, events, fmt.Errorf("insert events: %w", err))
	}
	if conflict.Valid {
		// The first number, in call order, that was already stored; the caller's
		// rollback undoes the events that went in.
		return &eventstore.ConflictError{Stream: stream, Partition: partition, Seq: conflict.Int64}
	}
	if counted != 1 {
		return fmt.Errorf("insert events: %d partition rows written, want 1", counted)
	}
	return nil
}

// conflictOr reports a unique violation on the event key as a conflict. The insert
// skips stored numbers, so this happens only if something outside the store (a
// trigger, an added constraint) raises it; the first event stands for the call.
func conflictOr(stream string, partition int64, events []eventstore.Event, err error) error {
	if pgsql.IsUniqueViolation(err) {
		return &eventstore.ConflictError{Stream: stream, Partition: partition, Seq: events[0].Seq}
	}
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

// ReadLatestTx is ReadLatest through q. The partition and its events are read by one
// statement, so they are consistent even outside a transaction.
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
