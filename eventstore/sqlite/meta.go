package sqlite

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlstore"
)

// updateRows creates or updates the partition, then the stream's mirror of its
// current partition: one upsert each.
func (d *dialect) updateRows(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate, status any, ends bool, now int64) error {
	if _, err := d.exec(ctx, tx, qUpsertPartition,
		status, ends, now, sqlstore.NullString(u.Output), sqlstore.NullString(u.PinnedVersion), stream, u.Partition); err != nil {
		return err
	}
	_, err := d.exec(ctx, tx, qUpsertStream,
		sqlstore.NullString(u.Name), sqlstore.NullString(u.Version), u.Parent != nil, sqlstore.NullString(u.Parent), u.Partition, now, stream)
	return err
}
