package postgres

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlstore"
)

// updateRows locks (or creates) the stream, upserts the partition, then brings the
// stream's mirror of its current partition up to date.
func (d *dialect) updateRows(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate, status any, ends bool, now int64) error {
	if _, err := tx.ExecContext(ctx, qLockStream, stream, u.Partition, now); err != nil {
		return err
	}
	var partStatus string
	if err := tx.QueryRowContext(ctx, qUpsertPartition,
		stream, u.Partition, status, ends, sqlstore.NullString(u.Output), sqlstore.NullString(u.PinnedVersion), now,
	).Scan(&partStatus); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, qUpdateStream,
		sqlstore.NullString(u.Name), sqlstore.NullString(u.Version), u.Parent != nil, sqlstore.NullString(u.Parent),
		u.Partition, partStatus, now, stream)
	return err
}
