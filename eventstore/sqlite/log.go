package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// Append implements eventstore.Log: one INSERT per event (the primary key rejects a
// duplicate), then the partition's counters and the stream's current partition are
// bumped in place. No stored event is read.
func (s *Store) Append(ctx context.Context, stream string, partition int64, events []eventstore.Event) error {
	if err := s.usable(ctx, "append"); err != nil {
		return err
	}
	if err := eventstore.CheckAppend(stream, partition, events); err != nil || len(events) == 0 {
		return err
	}
	return s.run(ctx, "append", stream, func(tx *sqlx.Tx) error { return s.append(ctx, tx, stream, partition, events) })
}

// AppendTx is Append inside tx.
func (s *Store) AppendTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	if err := s.usable(ctx, "append"); err != nil {
		return err
	}
	if err := eventstore.CheckAppend(stream, partition, events); err != nil || len(events) == 0 {
		return err
	}
	return s.inTx(ctx, tx, "append", stream, func() error { return s.append(ctx, tx, stream, partition, events) })
}

func (s *Store) append(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	now := micros(s.now())
	var size int64
	for _, e := range events {
		data := e.Data
		if data == nil {
			data = []byte{} // a zero-length BLOB, not NULL
		}
		sum := eventstore.Checksum(e.Seq, e.Type, data)
		if _, err := s.exec(ctx, tx, qInsertEvent, stream, partition, e.Seq, e.Type, data, int64(sum), now); err != nil {
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
	return s.ReadTx(ctx, s.db, stream, partition)
}

// ReadTx is Read through q (a *sqlx.Tx to read inside a transaction).
func (s *Store) ReadTx(ctx context.Context, q sqlx.QueryerContext, stream string, partition int64) ([]eventstore.Event, error) {
	const op = "read"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	if err := eventstore.CheckPartition(op, stream, partition); err != nil {
		return nil, err
	}
	events, err := s.readEvents(ctx, q, op, stream, partition)
	return events, wrap(op, stream, err)
}

// readEvents reads a partition, checking every row. Columns are scanned loosely so
// that a row damaged outside the store is reported as corrupt, not as a scan error.
func (s *Store) readEvents(ctx context.Context, q sqlx.QueryerContext, op, stream string, partition int64) ([]eventstore.Event, error) {
	rows, err := s.query(ctx, q, qReadEvents, stream, partition)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := []eventstore.Event{}
	for rows.Next() {
		var (
			seq, created   int64
			typ, data, sum any
		)
		if err := rows.Scan(&seq, &typ, &data, &sum, &created); err != nil {
			return nil, err
		}
		corrupt := func(reason string) error {
			return &eventstore.CorruptError{Op: op, Stream: stream, Partition: partition, Seq: seq, Reason: reason}
		}
		e := eventstore.Event{Seq: seq, CreatedAt: fromMicros(created)}
		switch v := typ.(type) {
		case string:
			e.Type = v
		case []byte:
			e.Type = string(v)
		default:
			return nil, corrupt(fmt.Sprintf("type column holds %T", typ))
		}
		switch v := data.(type) {
		case []byte:
			e.Data = v
		case string:
			e.Data = []byte(v)
		case nil:
			e.Data = []byte{}
		default:
			return nil, corrupt(fmt.Sprintf("data column holds %T", data))
		}
		if e.Data == nil {
			e.Data = []byte{}
		}
		checksum, ok := sum.(int64)
		if !ok || checksum < 0 || checksum > 1<<32-1 {
			return nil, corrupt(fmt.Sprintf("checksum column holds %T %v", sum, sum))
		}
		if err := eventstore.VerifyEvent(op, stream, partition, e, uint32(checksum)); err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

// ReadLatest implements eventstore.Log.
func (s *Store) ReadLatest(ctx context.Context, stream string) (int64, []eventstore.Event, error) {
	return s.ReadLatestTx(ctx, s.db, stream)
}

// ReadLatestTx is ReadLatest through q. Outside a transaction the partition and its
// events are read by two statements; a partition that starts between them is seen
// by the next read.
func (s *Store) ReadLatestTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, []eventstore.Event, error) {
	const op = "read latest"
	if err := s.usableWith(ctx, op, q); err != nil {
		return 0, nil, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return 0, nil, err
	}
	partition, found, err := s.currentPartition(ctx, q, stream)
	if err != nil || !found {
		return 0, []eventstore.Event{}, wrap(op, stream, err)
	}
	events, err := s.readEvents(ctx, q, op, stream, partition)
	if err != nil {
		return 0, nil, wrap(op, stream, err)
	}
	return partition, events, nil
}

func (s *Store) currentPartition(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, bool, error) {
	var p int64
	err := s.scanRow(ctx, q, qCurrentPartition, []any{stream}, &p)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return p, err == nil, err
}

// LatestPartition implements eventstore.Log.
func (s *Store) LatestPartition(ctx context.Context, stream string) (int64, error) {
	return s.LatestPartitionTx(ctx, s.db, stream)
}

// LatestPartitionTx is LatestPartition through q.
func (s *Store) LatestPartitionTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, error) {
	const op = "latest partition"
	if err := s.usableWith(ctx, op, q); err != nil {
		return 0, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return 0, err
	}
	p, found, err := s.currentPartition(ctx, q, stream)
	if err != nil {
		return 0, wrap(op, stream, err)
	}
	if !found {
		return 0, eventstore.NotFound(op, stream)
	}
	return p, nil
}

// Partitions implements eventstore.Log.
func (s *Store) Partitions(ctx context.Context, stream string) ([]eventstore.PartitionInfo, error) {
	return s.PartitionsTx(ctx, s.db, stream)
}

// PartitionsTx is Partitions through q.
func (s *Store) PartitionsTx(ctx context.Context, q sqlx.QueryerContext, stream string) ([]eventstore.PartitionInfo, error) {
	const op = "partitions"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return nil, err
	}
	parts, err := s.partitions(ctx, q, stream)
	return parts, wrap(op, stream, err)
}

func (s *Store) partitions(ctx context.Context, q sqlx.QueryerContext, stream string) ([]eventstore.PartitionInfo, error) {
	rows, err := s.query(ctx, q, qPartitions, stream)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []eventstore.PartitionInfo{}
	for rows.Next() {
		var (
			p               eventstore.PartitionInfo
			status          string
			output, pinned  sql.NullString
			started         int64
			completed       sql.NullInt64
			count, numBytes int64
		)
		if err := rows.Scan(&p.Partition, &status, &output, &pinned, &started, &completed, &count, &numBytes); err != nil {
			return nil, err
		}
		p.Status = eventstore.Status(status)
		p.Output, p.PinnedVersion = stringPtr(output), stringPtr(pinned)
		p.StartedAt = fromMicros(started)
		p.CompletedAt = timeOrZero(completed)
		p.Events, p.Bytes = count, numBytes
		out = append(out, p)
	}
	return out, rows.Err()
}

func stringPtr(ns sql.NullString) *string {
	if !ns.Valid {
		return nil
	}
	v := ns.String
	return &v
}

func timeOrZero(n sql.NullInt64) (t time.Time) {
	if n.Valid {
		t = fromMicros(n.Int64)
	}
	return t
}
