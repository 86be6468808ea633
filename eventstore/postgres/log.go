package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/pgdb"
	"github.com/jmoiron/sqlx"
)

// Append implements eventstore.Log in one statement: it inserts all the events (the
// primary key decides every sequence number) and, if none was taken, upserts the
// stream's current partition and the partition's counters. No stored event is read.
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
	var (
		size  int64
		seqs  = make([]int64, len(events))
		types = make([]string, len(events))
		datas = make([][]byte, len(events))
		sums  = make([]int64, len(events))
	)
	for i, e := range events {
		data := e.Data
		if data == nil {
			data = []byte{} // an empty BYTEA, not NULL
		}
		seqs[i], types[i], datas[i] = e.Seq, e.Type, data
		sums[i] = int64(eventstore.Checksum(e.Seq, e.Type, data))
		size += int64(len(data))
	}
	var (
		conflict sql.NullInt64
		counted  int64
	)
	err := scanRow(ctx, tx, qAppend, []any{stream, partition, seqs, types, datas, sums, now, size}, &conflict, &counted)
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
	if pgdb.IsUniqueViolation(err) {
		return &eventstore.ConflictError{Stream: stream, Partition: partition, Seq: events[0].Seq}
	}
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
	rows, err := q.QueryContext(ctx, qReadEvents, stream, partition)
	if err != nil {
		return nil, wrap(op, stream, err)
	}
	defer rows.Close()
	events := []eventstore.Event{}
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&r.seq, &r.typ, &r.data, &r.sum, &r.created); err != nil {
			return nil, wrap(op, stream, err)
		}
		e, err := r.event(op, stream, partition)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, wrap(op, stream, rows.Err())
}

// eventRow holds the columns of a stored event; they are NULL only for the empty
// partition of ReadLatest's outer join.
type eventRow struct {
	seq, sum, created sql.NullInt64
	typ               sql.NullString
	data              []byte
}

// event decodes a row, checking its integrity.
func (r eventRow) event(op, stream string, partition int64) (eventstore.Event, error) {
	e := eventstore.Event{Seq: r.seq.Int64, Type: r.typ.String, Data: r.data, CreatedAt: fromMicros(r.created.Int64)}
	if e.Data == nil {
		e.Data = []byte{}
	}
	if !r.sum.Valid || r.sum.Int64 < 0 || r.sum.Int64 > 1<<32-1 {
		return eventstore.Event{}, &eventstore.CorruptError{Op: op, Stream: stream, Partition: partition, Seq: e.Seq,
			Reason: fmt.Sprintf("checksum column holds %v, not a 32-bit checksum", r.sum.Int64)}
	}
	if err := eventstore.VerifyEvent(op, stream, partition, e, uint32(r.sum.Int64)); err != nil {
		return eventstore.Event{}, err
	}
	return e, nil
}

// ReadLatest implements eventstore.Log.
func (s *Store) ReadLatest(ctx context.Context, stream string) (int64, []eventstore.Event, error) {
	return s.ReadLatestTx(ctx, s.db, stream)
}

// ReadLatestTx is ReadLatest through q. The partition and its events are read by one
// statement, so they are consistent even outside a transaction.
func (s *Store) ReadLatestTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, []eventstore.Event, error) {
	const op = "read latest"
	if err := s.usableWith(ctx, op, q); err != nil {
		return 0, nil, err
	}
	if err := eventstore.CheckStream(op, stream); err != nil {
		return 0, nil, err
	}
	rows, err := q.QueryContext(ctx, qReadLatest, stream)
	if err != nil {
		return 0, nil, wrap(op, stream, err)
	}
	defer rows.Close()
	var partition int64
	events := []eventstore.Event{}
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&partition, &r.seq, &r.typ, &r.data, &r.sum, &r.created); err != nil {
			return 0, nil, wrap(op, stream, err)
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
		return 0, nil, wrap(op, stream, err)
	}
	return partition, events, nil
}

// currentPartition reads the stream's current partition through q, locking the
// stream's row when lock is set (q must then be a transaction).
func currentPartition(ctx context.Context, q sqlx.QueryerContext, stream string, lock bool) (int64, bool, error) {
	query := qCurrentPartition
	if lock {
		query = qLockCurrentPartition
	}
	var p int64
	err := scanRow(ctx, q, query, []any{stream}, &p)
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
	p, found, err := currentPartition(ctx, q, stream, false)
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
	parts, err := partitions(ctx, q, stream)
	return parts, wrap(op, stream, err)
}

func partitions(ctx context.Context, q sqlx.QueryerContext, stream string) ([]eventstore.PartitionInfo, error) {
	rows, err := q.QueryContext(ctx, qPartitions, stream)
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
