package sqlite

import (
	"context"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/essql"
	"github.com/jmoiron/sqlx"
)

// Update implements eventstore.Metadata.
func (s *Store) Update(ctx context.Context, stream string, u eventstore.StreamUpdate) error {
	return s.c.Update(ctx, stream, u)
}

// UpdateTx is Update inside tx.
func (s *Store) UpdateTx(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate) error {
	return s.c.UpdateTx(ctx, tx, stream, u)
}

// updateRows creates or updates the partition, then the stream's mirror of its
// current partition: one upsert each.
func (s *Store) updateRows(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate, status any, ends bool, now int64) error {
	if _, err := s.exec(ctx, tx, qUpsertPartition,
		status, ends, now, essql.NullString(u.Output), essql.NullString(u.PinnedVersion), stream, u.Partition); err != nil {
		return err
	}
	_, err := s.exec(ctx, tx, qUpsertStream,
		essql.NullString(u.Name), essql.NullString(u.Version), u.Parent != nil, essql.NullString(u.Parent), u.Partition, now, stream)
	return err
}

// Stream implements eventstore.Metadata.
func (s *Store) Stream(ctx context.Context, stream string) (eventstore.StreamInfo, error) {
	return s.c.Stream(ctx, stream)
}

// StreamTx is Stream through q.
func (s *Store) StreamTx(ctx context.Context, q sqlx.QueryerContext, stream string) (eventstore.StreamInfo, error) {
	return s.c.StreamTx(ctx, q, stream)
}

// ListStreams implements eventstore.Metadata.
func (s *Store) ListStreams(ctx context.Context, f eventstore.StreamFilter) ([]string, error) {
	return s.c.ListStreams(ctx, f)
}

// ListStreamsTx is ListStreams through q.
func (s *Store) ListStreamsTx(ctx context.Context, q sqlx.QueryerContext, f eventstore.StreamFilter) ([]string, error) {
	return s.c.ListStreamsTx(ctx, q, f)
}

// SetCustomStatus implements eventstore.Metadata.
func (s *Store) SetCustomStatus(ctx context.Context, stream string, value *string) (version int64, err error) {
	return s.c.SetCustomStatus(ctx, stream, value)
}

// SetCustomStatusTx is SetCustomStatus inside tx.
func (s *Store) SetCustomStatusTx(ctx context.Context, tx *sqlx.Tx, stream string, value *string) (version int64, err error) {
	return s.c.SetCustomStatusTx(ctx, tx, stream, value)
}

// CustomStatus implements eventstore.Metadata.
func (s *Store) CustomStatus(ctx context.Context, stream string, lastSeen int64) (eventstore.CustomStatus, bool, error) {
	return s.c.CustomStatus(ctx, stream, lastSeen)
}

// CustomStatusTx is CustomStatus through q.
func (s *Store) CustomStatusTx(ctx context.Context, q sqlx.QueryerContext, stream string, lastSeen int64) (eventstore.CustomStatus, bool, error) {
	return s.c.CustomStatusTx(ctx, q, stream, lastSeen)
}
