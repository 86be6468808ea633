package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlstore"
	"github.com/duroq/duroq/internal/pgsql"
)

func (d *dialect) append(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event, now int64) error {
	var (
		size  int64
		seqs  = make([]int64, len(events))
		types = make([]string, len(events))
		datas = make([][]byte, len(events))
		sums  = make([]int64, len(events))
	)
	for i, e := range events {
		seqs[i], types[i] = e.Seq, e.Type
		datas[i], sums[i] = sqlstore.Stored(e)
		size += int64(len(datas[i]))
	}
	var (
		conflict sql.NullInt64
		counted  int64
	)
	err := tx.QueryRowContext(ctx, qAppend, stream, partition, seqs, types, datas, sums, now, size).Scan(&conflict, &counted)
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
