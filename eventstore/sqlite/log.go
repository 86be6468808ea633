package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/essql"
	"github.com/jmoiron/sqlx"
)

// Append implements eventstore.Log: the events in one INSERT (the primary key
// rejects a duplicate), then the partition's counters and the stream's current partition are
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
	for chunk := range slices.Chunk(events, insertChunk) {
		var sb strings.Builder
		sb.WriteString(qInsertEvents)
		args := make([]any, 0, len(chunk)*7)
		for i, e := range chunk {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			data, sum := essql.Stored(e)
			args = append(args, stream, partition, e.Seq, e.Type, data, sum, now)
			size += int64(len(data))
		}
		if _, err := s.exec(ctx, tx, sb.String(), args...); err != nil {
			if isDuplicate(err) {
				return s.conflict(ctx, tx, stream, partition, chunk)
			}
			return fmt.Errorf("insert events %d-%d: %w", chunk[0].Seq, chunk[len(chunk)-1].Seq, err)
		}
	}
	if _, err := s.exec(ctx, tx, qAddPartitionCounts, stream, partition, now, len(events), size); err != nil {
		return err
	}
	_, err := s.exec(ctx, tx, qTouchStreamOnAppend, stream, partition, now)
	return err
}

// insertChunk bounds the events of one INSERT (7 parameters each) well below
// SQLite's parameter limit.
const insertChunk = 256

// conflict names the first of events whose sequence number is already stored: the
// primary key, not a read per append, rejects duplicates, so only a failed insert
// pays for finding which one it was.
func (s *Store) conflict(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	for _, e := range events {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM es_events WHERE stream = ? AND partition = ? AND seq = ?`, stream, partition, e.Seq).Scan(&one)
		if err == nil {
			return &eventstore.ConflictError{Stream: stream, Partition: partition, Seq: e.Seq}
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	return &eventstore.ConflictError{Stream: stream, Partition: partition, Seq: events[0].Seq}
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
