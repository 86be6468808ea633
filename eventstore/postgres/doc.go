// Package postgres stores an eventstore.EventStore in PostgreSQL
// (github.com/jackc/pgx/v5 through its database/sql driver, with
// github.com/jmoiron/sqlx), for deployments where several processes share one
// store. Its Store is the SQL event store of package sqlstore with PostgreSQL's
// dialect.
//
// Open(ctx, dsn, Options) is the common case: it connects, creates the schema named
// by Options.DB.Schema if needed, applies the embedded migrations (line
// "eventstore", tables es_*) and owns the database. New(db, Options) builds a store
// over a database the caller shares with other stores, for example mq/postgres
// (line "mq", tables mq_*) in the same schema; open it with pgdb.Open and call Migrate
// once. The *Tx methods (AppendTx, UpdateTx, SetCustomStatusTx, ApplyKVTx, DeleteTx,
// DeleteWhereTx, PruneTx, PruneWhereTx, and the reads ReadTx, ReadLatestTx,
// StreamTx, KVSnapshotTx, ...) run inside the caller's transaction, so events,
// metadata and queue writes commit together:
//
//	tx, err := db.BeginTxx(ctx, nil)
//	...
//	if err := store.AppendTx(ctx, tx, id, 1, events); err != nil {
//		return err // roll back
//	}
//	if err := queue.EnqueueTx(ctx, tx, next); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// Each write twin runs under a savepoint: a failing call (a sequence number
// conflict, a running stream refused, a statement PostgreSQL rejects) is rolled
// back to it, so it leaves nothing of itself and the caller's transaction stays
// usable (PostgreSQL refuses every statement of a transaction after a failed one
// otherwise). That costs two short statements per call.
//
// # Settings
//
//   - Connection: Options.DB (pgdb.Options, the settings every duroq PostgreSQL store
//     shares). Schema (default "public") is created if missing and set as every
//     connection's search_path, so deployments and tests can share a database in
//     schemas of their own. MaxOpenConns bounds the pool (default GOMAXPROCS, at
//     least 4): every concurrent call holds one connection for the length of its
//     transaction, and this store opens no long-lived connection of its own.
//     ConnMaxLifetime (default 30 minutes) recycles connections. pgx prepares each
//     statement once per connection and reuses it (its statement cache), so no
//     statement is parsed per call.
//   - Isolation: READ COMMITTED, the server's default, for the store's own
//     transactions; a twin runs at whatever level the caller began. Correctness does
//     not come from the isolation level but from keys and row locks (below). Should
//     a transaction of the store still fail transiently (a deadlock, a serialization
//     failure, a connection lost before the statement was sent; see
//     internal/pgsql.IsRetryable), the whole transaction runs again, at most six
//     times with a jittered backoff of 2.5 to 200 ms, the policy every duroq
//     PostgreSQL write shares (the queue and txn runs too). A twin is never
//     retried: the error goes to the caller, whose transaction it is.
//   - Wake-ups: none. The event store has no consumers to wake, so it uses no
//     LISTEN/NOTIFY and no polling; the queue (mq/postgres) does that.
//   - Timestamps are computed in Go (Options.Now) and stored as BIGINT Unix
//     microseconds, like eventstore/sqlite, so both backends behave identically.
//
// # Layout
//
//   - es_events has the primary key (stream, partition, seq): the key decides
//     every sequence number, so of several concurrent appenders exactly one wins
//     each number and the others get eventstore.ErrConflict, and a partition's read
//     is one ordered range scan. Data is BYTEA; each row carries
//     eventstore.Checksum (CRC-32C), and a row that fails it is reported as
//     eventstore.ErrCorrupt.
//   - es_partitions keeps each partition's event count and bytes, bumped by Append
//     with an upsert (event_count = es_partitions.event_count + n), so stats never
//     scan events.
//   - es_streams mirrors the current partition's status, indexed (status, stream) for
//     listing by status; a partial index on (parent, stream) serves children lookups
//     and cascades.
//   - es_streams and es_partitions leave a fifth of each page free (fillfactor 80):
//     every commit to a stream rewrites both rows, and a new version that fits on
//     its page is written without new index entries (a heap-only update) unless an
//     indexed column (a status) changed.
//   - es_kv_store and es_kv_delta hold the KV state and the current partition's
//     mutations (NULL value = tombstone); the merge runs in the Update that ends the
//     partition.
//   - Ids, parents, statuses and keys use the "C" collation, so lists come out in
//     byte order (Go's string order, that of every other backend), whatever the
//     database's default collation.
//
// # Writes and locks
//
// Append is one statement that inserts the events with ON CONFLICT DO NOTHING (a
// number already stored is skipped, not an error, so the statement does not abort
// the transaction) and, only if every event went in, upserts the stream (current
// partition) and then the partition (counters). It reads no stored event, so a
// damaged row never blocks an append. A skipped number makes Append roll back (its
// own transaction, or the twin's savepoint) and return an *eventstore.ConflictError
// naming the lowest number that was taken.
//
// The row of es_streams is the stream's lock, and every write takes the locks of a
// stream in one order: the stream's row first, then its partitions, events and KV
// rows. Update begins with an upsert of the stream's row, SetCustomStatus and
// ApplyKV with an update of it, Prune with SELECT ... FOR UPDATE; Append inserts its
// new events first (new keys, which no other writer waits for) and then upserts the
// stream's row. Statements that lock several streams take them in id order
// (SELECT ... WHERE stream = ANY($1) ORDER BY stream FOR UPDATE): Delete and
// DeleteWhere plan the cascade, lock the planned streams in id order, and plan again
// over the locked rows; if the tree grew meanwhile (a new child) they give the locks
// back (a savepoint) and lock the larger set in id order. PruneWhere selects its
// streams with ORDER BY stream FOR UPDATE. With one order for everyone, writers of
// this store never deadlock each other (TestConcurrentWritersAcrossProcesses checks
// that none was retried); a writer of a stream being deleted waits for the delete
// and then sees it, as if it had come after.
//
// A caller's transaction that writes several streams through the twins should take
// them in id order too, or be ready to retry on a deadlock.
package postgres
