// Package sqlite stores an eventstore.EventStore in SQLite
// (github.com/mattn/go-sqlite3 through github.com/jmoiron/sqlx): its Store is the
// SQL event store of package sqlstore with SQLite's dialect (statements parsed once
// per connection, writes queued on the process's one writer).
//
// Open(path, Options) is the common case: it opens the file in WAL mode, applies the
// embedded migrations (line "eventstore", tables es_*) and owns the database.
// New(db, Options) builds a store over a database the caller shares with other
// stores, for example mq/sqlite (line "mq", tables mq_*), in one file; call Migrate
// once. The *Tx methods (AppendTx, UpdateTx, SetCustomStatusTx, ApplyKVTx, DeleteTx,
// DeleteWhereTx, PruneTx, PruneWhereTx, and the reads ReadTx, ReadLatestTx, StreamTx,
// KVSnapshotTx, ...) run inside the caller's transaction, so events, metadata and
// queue writes commit together:
//
//	tx, err := db.BeginTxx(ctx, nil) // db from sqlitedb.Open, shared by store and queue
//	...
//	if err := store.AppendTx(ctx, tx, id, 1, events); err != nil {
//		return err
//	}
//	if err := queue.EnqueueTx(ctx, tx, next); err != nil {
//		return err
//	}
//	err = tx.Commit()
//
// Each
// write twin runs under a savepoint, so a failing call leaves nothing of itself even
// if the caller carries on with the transaction.
//
// Layout and why:
//   - es_events has the primary key (stream, partition, seq) WITHOUT ROWID: the key
//     rejects a duplicate sequence number (reported as eventstore.ErrConflict), and a
//     partition's events are stored together in order, so a read is one range scan.
//     Each row carries eventstore.Checksum; a row that fails it is reported as
//     eventstore.ErrCorrupt. Append inserts and never reads rows.
//   - es_partitions keeps each partition's event count and bytes, updated in place by
//     Append (event_count = event_count + n), so stats never scan events.
//   - es_streams mirrors the current partition's status, indexed for listing by
//     status; a partial index on parent serves children lookups and cascades.
//   - es_kv_store and es_kv_delta hold the KV state and the current partition's
//     mutations (NULL value = tombstone); the merge runs in the Update that ends the
//     partition.
//
// Every timestamp is computed in Go (Options.Now) and stored as Unix microseconds.
package sqlite
