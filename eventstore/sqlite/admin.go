package sqlite

import (
	"context"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// Delete implements eventstore.Admin.
func (s *Store) Delete(ctx context.Context, streams []string, o eventstore.DeleteOptions) (r eventstore.DeleteResult, err error) {
	return s.c.Delete(ctx, streams, o)
}

// DeleteTx is Delete inside tx. The adapter uses DeleteResult.StreamIDs to remove the
// deleted streams' queue messages in the same transaction.
func (s *Store) DeleteTx(ctx context.Context, tx *sqlx.Tx, streams []string, o eventstore.DeleteOptions) (r eventstore.DeleteResult, err error) {
	return s.c.DeleteTx(ctx, tx, streams, o)
}

// DeleteWhere implements eventstore.Admin.
func (s *Store) DeleteWhere(ctx context.Context, f eventstore.StreamFilter) (r eventstore.DeleteResult, err error) {
	return s.c.DeleteWhere(ctx, f)
}

// DeleteWhereTx is DeleteWhere inside tx.
func (s *Store) DeleteWhereTx(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter) (r eventstore.DeleteResult, err error) {
	return s.c.DeleteWhereTx(ctx, tx, f)
}

// Prune implements eventstore.Admin.
func (s *Store) Prune(ctx context.Context, stream string, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	return s.c.Prune(ctx, stream, o)
}

// PruneTx is Prune inside tx.
func (s *Store) PruneTx(ctx context.Context, tx *sqlx.Tx, stream string, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	return s.c.PruneTx(ctx, tx, stream, o)
}

// PruneWhere implements eventstore.Admin.
func (s *Store) PruneWhere(ctx context.Context, f eventstore.StreamFilter, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	return s.c.PruneWhere(ctx, f, o)
}

// PruneWhereTx is PruneWhere inside tx.
func (s *Store) PruneWhereTx(ctx context.Context, tx *sqlx.Tx, f eventstore.StreamFilter, o eventstore.PruneOptions) (r eventstore.PruneResult, err error) {
	return s.c.PruneWhereTx(ctx, tx, f, o)
}

// Stats implements eventstore.Admin.
func (s *Store) Stats(ctx context.Context, stream string) (eventstore.Stats, error) {
	return s.c.Stats(ctx, stream)
}

// StatsTx is Stats through q. Event figures come from the partition's counters; no
// event is read.
func (s *Store) StatsTx(ctx context.Context, q sqlx.QueryerContext, stream string) (eventstore.Stats, error) {
	return s.c.StatsTx(ctx, q, stream)
}

// Totals implements eventstore.Admin.
func (s *Store) Totals(ctx context.Context) (eventstore.Totals, error) {
	return s.c.Totals(ctx)
}

// TotalsTx is Totals through q.
func (s *Store) TotalsTx(ctx context.Context, q sqlx.QueryerContext) (eventstore.Totals, error) {
	return s.c.TotalsTx(ctx, q)
}
