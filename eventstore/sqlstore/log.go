package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// Stored returns the data and checksum columns of an event: nil data is stored
// empty, not NULL.
func Stored(e eventstore.Event) (data []byte, checksum int64) {
	data = e.Data
	if data == nil {
		data = []byte{}
	}
	return data, int64(eventstore.Checksum(e.Seq, e.Type, data))
}

// Append implements eventstore.Log (Dialect.Append).
func (s *Store) Append(ctx context.Context, stream string, partition int64, events []eventstore.Event) error {
	if err := s.checkAppend(ctx, stream, partition, events); err != nil || len(events) == 0 {
		return err
	}
	return s.run(ctx, "append", stream, func(tx *sqlx.Tx) error { return s.append(ctx, tx, stream, partition, events) })
}

// AppendTx is Append inside tx.
func (s *Store) AppendTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	if err := s.checkAppend(ctx, stream, partition, events); err != nil || len(events) == 0 {
		return err
	}
	return s.inTx(ctx, tx, "append", stream, func() error { return s.append(ctx, tx, stream, partition, events) })
}

func (s *Store) checkAppend(ctx context.Context, stream string, partition int64, events []eventstore.Event) error {
	if err := s.usable(ctx, "append"); err != nil {
		return err
	}
	return eventstore.CheckAppend(stream, partition, events)
}

func (s *Store) append(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	return s.d.Append(ctx, tx, stream, partition, events, micros(s.now()))
}

// Read implements eventstore.Log.
func (s *Store) Read(ctx context.Context, stream string, partition int64) ([]eventstore.Event, error) {
	return s.ReadTx(ctx, s.db, stream, partition)
}

// ReadTx is Read through q.
func (s *Store) ReadTx(ctx context.Context, q sqlx.QueryerContext, stream string, partition int64) ([]eventstore.Event, error) {
	const op = "read"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	if err := eventstore.CheckPartition(op, stream, partition); err != nil {
		return nil, err
	}
	events, err := s.readEvents(ctx, q, op, stream, partition)
	return events, s.wrap(op, stream, err)
}

// readEvents reads a partition, checking every row.
func (s *Store) readEvents(ctx context.Context, q sqlx.QueryerContext, op, stream string, partition int64) ([]eventstore.Event, error) {
	rows, err := s.d.Query(ctx, q, s.d.Queries.ReadEvents, stream, partition)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	events := []eventstore.Event{}
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&r.seq, &r.typ, &r.data, &r.sum, &r.created); err != nil {
			return nil, err
		}
		e, err := r.event(op, stream, partition)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

// eventRow holds the columns of a stored event. Type, data and checksum are scanned
// loosely (SQLite lets any column hold any type), so that a row damaged outside the
// store is reported as corrupt, not as a scan error. seq and created are NULL only
// for the empty partition of ReadLatest's outer join.
type eventRow struct {
	seq, created   sql.NullInt64
	typ, data, sum any
}

// event decodes the row, checking its integrity.
func (r *eventRow) event(op, stream string, partition int64) (eventstore.Event, error) {
	corrupt := func(reason string) error {
		return &eventstore.CorruptError{Op: op, Stream: stream, Partition: partition, Seq: r.seq.Int64, Reason: reason}
	}
	e := eventstore.Event{Seq: r.seq.Int64, CreatedAt: fromMicros(r.created.Int64)}
	switch v := r.typ.(type) {
	case string:
		e.Type = v
	case []byte:
		e.Type = string(v)
	default:
		return eventstore.Event{}, corrupt(fmt.Sprintf("type column holds %T", r.typ))
	}
	switch v := r.data.(type) {
	case []byte:
		e.Data = v
	case string:
		e.Data = []byte(v)
	case nil:
	default:
		return eventstore.Event{}, corrupt(fmt.Sprintf("data column holds %T", r.data))
	}
	if e.Data == nil {
		e.Data = []byte{}
	}
	checksum, ok := r.sum.(int64)
	if !ok || checksum < 0 || checksum > 1<<32-1 {
		return eventstore.Event{}, corrupt(fmt.Sprintf("checksum column holds %T %v", r.sum, r.sum))
	}
	if err := eventstore.VerifyEvent(op, stream, partition, e, uint32(checksum)); err != nil {
		return eventstore.Event{}, err
	}
	return e, nil
}

// ReadLatest implements eventstore.Log.
func (s *Store) ReadLatest(ctx context.Context, stream string) (int64, []eventstore.Event, error) {
	return s.ReadLatestTx(ctx, s.db, stream)
}

// ReadLatestTx is ReadLatest through q: in one statement with Queries.ReadLatest,
// otherwise the partition, then its events.
func (s *Store) ReadLatestTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, []eventstore.Event, error) {
	const op = "read latest"
	if err := s.usableWith(ctx, op, q); err != nil {
		return 0, nil, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return 0, nil, err
	}
	if s.d.Queries.ReadLatest != "" {
		partition, events, err := s.readLatest(ctx, q, op, stream)
		if err != nil {
			return 0, nil, s.wrap(op, stream, err)
		}
		return partition, events, nil
	}
	partition, found, err := s.currentPartition(ctx, q, stream, false)
	if err != nil || !found {
		return 0, []eventstore.Event{}, s.wrap(op, stream, err)
	}
	events, err := s.readEvents(ctx, q, op, stream, partition)
	if err != nil {
		return 0, nil, s.wrap(op, stream, err)
	}
	return partition, events, nil
}

// readLatest reads the current partition and its events with Queries.ReadLatest.
func (s *Store) readLatest(ctx context.Context, q sqlx.QueryerContext, op, stream string) (int64, []eventstore.Event, error) {
	rows, err := s.d.Query(ctx, q, s.d.Queries.ReadLatest, stream)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var partition int64
	events := []eventstore.Event{}
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&partition, &r.seq, &r.typ, &r.data, &r.sum, &r.created); err != nil {
			return 0, nil, err
		}
		if !r.seq.Valid {
			continue // the partition has no events
		}
		e, err := r.event(op, stream, partition)
		if err != nil {
			return 0, nil, err
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	return partition, events, nil
}

// currentPartition reads the stream's current partition through q, locking the
// stream when lock is set (q must then be a transaction).
func (s *Store) currentPartition(ctx context.Context, q sqlx.QueryerContext, stream string, lock bool) (int64, bool, error) {
	query := s.d.Queries.CurrentPartition
	if lock {
		query = s.d.Queries.LockCurrentPartition
	}
	var p int64
	err := s.scanRow(ctx, q, query, []any{stream}, &p)
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
	p, found, err := s.currentPartition(ctx, q, stream, false)
	if err != nil {
		return 0, s.wrap(op, stream, err)
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
	return parts, s.wrap(op, stream, err)
}

func (s *Store) partitions(ctx context.Context, q sqlx.QueryerContext, stream string) ([]eventstore.PartitionInfo, error) {
	rows, err := s.d.Query(ctx, q, s.d.Queries.Partitions, stream)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []eventstore.PartitionInfo{}
	for rows.Next() {
		var (
			p              eventstore.PartitionInfo
			status         string
			output, pinned sql.NullString
			started        int64
			completed      sql.NullInt64
		)
		if err := rows.Scan(&p.Partition, &status, &output, &pinned, &started, &completed, &p.Events, &p.Bytes); err != nil {
			return nil, err
		}
		p.Status = eventstore.Status(status)
		p.Output, p.PinnedVersion = stringPtr(output), stringPtr(pinned)
		p.StartedAt = fromMicros(started)
		p.CompletedAt = timeOrZero(completed)
		out = append(out, p)
	}
	return out, rows.Err()
}
