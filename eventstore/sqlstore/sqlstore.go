// Package sqlstore is duroq's event store in SQL: one implementation of
// eventstore.EventStore and eventstore.TxStore that speaks a Dialect. The SQLite
// (eventstore/sqlite) and PostgreSQL (eventstore/postgres) stores are this Store
// with their dialects; another database needs only a Dialect.
//
// Every method has a twin with a Tx suffix that runs inside the caller's
// transaction: writes take a *sqlx.Tx (from the store's DB, begun by the caller) and
// run inside a savepoint, so a failed call leaves nothing of itself and the
// transaction stays usable; reads take any sqlx.QueryerContext (the *sqlx.Tx, or the
// *sqlx.DB). The shared code does validation, row scanning and decoding (checksums,
// corrupt rows), the KV overlay and result assembly; a Dialect supplies the
// statements and the few steps that differ: how a write transaction runs, how a
// statement is executed, the append and update writes, locking, migrations.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/txn"
	"github.com/jmoiron/sqlx"
)

// Dialect is what a database supplies: its statements and the steps it does its
// own way. Every field is required unless its doc says "if set".
type Dialect struct {
	// Name prefixes storage errors, e.g. "eventstore/sqlite".
	Name string
	// Savepoint names the savepoint a write twin runs under.
	Savepoint string
	// Bind is the placeholder style (sqlx.QUESTION, sqlx.DOLLAR) of the queries built
	// at run time, which are written with ?.
	Bind int
	// Arrays is set when the database binds a list as one array parameter: a
	// statement over several streams or partitions then runs once with all of them,
	// and a list of streams is bound as it is. Otherwise such a statement runs once
	// for each, and a list of streams is bound as JSON text.
	Arrays bool
	// Queries are the statements the shared code runs.
	Queries Queries

	// Database is the database the store lives in as a txn.Database (see
	// eventstore.TxStore): equal for every backend on the same database, so that
	// they compose.
	Database txn.Database
	// Migrate creates or upgrades the store's tables in db.
	Migrate func(ctx context.Context, db *sqlx.DB) error

	// Run runs fn in a write transaction of its own and commits it if fn succeeds
	// (SQLite: under the process's write lock; PostgreSQL: run again on a transient
	// failure).
	Run func(ctx context.Context, fn func(tx *sqlx.Tx) error) error
	// Exec runs a statement inside tx.
	Exec func(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (sql.Result, error)
	// Query runs a query through q, a transaction or a database.
	Query func(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) (*sql.Rows, error)
	// Append writes events (checked, at least one) to a partition inside tx; now
	// is in Unix microseconds. Rows are built with Stored; a sequence number that
	// is already stored fails with an *eventstore.ConflictError.
	Append func(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event, now int64) error
	// UpdateRows applies an update (checked) to the stream's and the partition's
	// rows, creating them if needed: status is the new status (nil: unchanged) and
	// ends whether it ends the partition. Update then merges the KV delta of an
	// ended partition.
	UpdateRows func(ctx context.Context, tx *sqlx.Tx, stream string, u eventstore.StreamUpdate, status any, ends bool, now int64) error
	// CommitMany writes the events and applies the updates of commits (checked,
	// distinct streams) inside tx in a constant number of statements; CommitManyTx
	// then merges the KV delta of ended partitions.
	CommitMany func(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit, now int64) error
	// LockPlan, if set, returns the streams plan picks for a delete, locked so that
	// they cannot change before they are removed. Nil runs plan as it is (the
	// transaction already excludes every other writer).
	LockPlan func(ctx context.Context, tx *sqlx.Tx, plan func() ([]string, error)) ([]string, error)
	// Release, if set, frees what the backend holds besides the database; Close
	// calls it once.
	Release func() error
}

// Queries are the statements of a dialect that the shared code runs. Parameters
// are listed in order; the SQL text may number them.
type Queries struct {
	// TouchStream (now, stream) bumps an existing stream's updated_at.
	TouchStream string
	// KVPut (stream, key, value, partition, at) writes a delta entry; a NULL value is
	// a tombstone.
	KVPut string
	// KVTombstoneDelta (partition, at, stream) tombstones every delta entry;
	// KVTombstoneStore (stream, partition, at) adds a tombstone for every stored key
	// without one.
	KVTombstoneDelta, KVTombstoneStore string
	// KVDeltaGet and KVStoreGet (stream, key) select value, partition, updated_at.
	KVDeltaGet, KVStoreGet string
	// KVDeltaAll and KVStoreAll (stream) select key, value, partition, updated_at.
	KVDeltaAll, KVStoreAll string
	// MergeKVSet, MergeKVClear and MergeKVDrop (stream, partition) merge the delta of
	// an ended partition into the store: set keys are written, tombstoned keys
	// removed, the merged delta rows dropped.
	MergeKVSet, MergeKVClear, MergeKVDrop string

	// ReadEvents (stream, partition) selects seq, type, data, checksum, created_at in
	// seq order.
	ReadEvents string
	// ReadLatest, if set, (stream) selects current_partition, seq, type, data,
	// checksum, created_at of the current partition in one statement: no row for an
	// unknown stream, one row of NULL event columns for an empty partition. If unset,
	// ReadLatest reads the current partition, then its events.
	ReadLatest string
	// CurrentPartition (stream) selects the stream's current partition;
	// LockCurrentPartition does so locking the stream (Prune).
	CurrentPartition, LockCurrentPartition string
	// Partitions (stream) selects partition, status, output, pinned_version,
	// started_at, completed_at, event_count, bytes in partition order.
	Partitions string
	// Stream (stream) selects the columns of eventstore.StreamInfo (see StreamTx).
	Stream string
	// SetCustomStatus (value, now, stream) returns the new version;
	// CustomStatus (stream, lastSeen) selects value and version if newer.
	SetCustomStatus, CustomStatus string
	// StreamIn is ListStreams' condition that s.stream is in the list bound to its
	// one ? (see Dialect.Arrays).
	StreamIn string
	// LockSelected ends a ListStreams query that locks the streams it selects ("" if
	// no lock is needed).
	LockSelected string

	// Node (stream) selects COALESCE(parent, ''), status; Children (parent) selects
	// the children's ids in order.
	Node, Children string
	// The deletes of streams (stream, or an array of them with Arrays), the last one
	// of the streams' own rows. DeleteEvents and DeletePartitions are counted.
	DeleteEvents, DeletePartitions, DeleteKVStore, DeleteKVDelta, DeleteStreams string
	// PruneEvents and PrunePartitions (stream, partition or an array of them with
	// Arrays) delete partitions.
	PruneEvents, PrunePartitions string
	// Stats (stream) selects current_partition, its event count and bytes.
	Stats string
	// TotalStreams selects the number of streams; TotalPartitions the number of
	// partitions and of events; TotalsByStatus status, streams per status.
	TotalStreams, TotalPartitions, TotalsByStatus string
}

// Store is the SQL event store. It is safe for concurrent use, also by several
// processes sharing the database.
type Store struct {
	db     *sqlx.DB
	owned  bool
	now    func() time.Time
	d      Dialect
	closed atomic.Bool
}

var _ eventstore.TxStore = (*Store)(nil)

// Options tune New. The zero value is usable.
type Options struct {
	// Now is the clock every timestamp is computed from (default time.Now).
	Now func() time.Time
	// CloseDB makes Close close the database: set by a backend's Open, which opened
	// it. A database shared with other stores is the caller's to close.
	CloseDB bool
}

// New returns a store over db speaking d. Call Migrate before use.
func New(db *sqlx.DB, d Dialect, o Options) *Store {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{db: db, owned: o.CloseDB, now: o.Now, d: d}
}

// DB returns the underlying database, for transactions spanning this store and
// other stores (see the *Tx methods).
func (s *Store) DB() *sqlx.DB { return s.db }

// Database implements eventstore.TxStore: the database the store lives in.
func (s *Store) Database() txn.Database { return s.d.Database }

// Migrate creates or upgrades the store's tables (the "eventstore" migration line).
// It is idempotent and safe when several processes call it at once.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.d.Migrate(ctx, s.db); err != nil {
		return fmt.Errorf("%s: %w", s.d.Name, err)
	}
	return nil
}

// Close implements eventstore.EventStore: it marks the store closed; the first call
// also runs Dialect.Release and closes the database if Options.CloseDB is set (then
// a SQLite database is closed when Close returns: when no other process has the file
// open, its WAL is checkpointed and the -wal and -shm files are removed).
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	var err error
	if s.d.Release != nil {
		err = s.d.Release()
	}
	if s.owned {
		err = errors.Join(err, s.db.Close())
	}
	return err
}

// usable fails when the store is closed or ctx has ended.
func (s *Store) usable(ctx context.Context, op string) error {
	if s.closed.Load() {
		return eventstore.Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %s: %w", s.d.Name, op, err)
	}
	return nil
}

// usableWith is usable for a read through q, which must be a transaction or a
// database.
func (s *Store) usableWith(ctx context.Context, op string, q sqlx.QueryerContext) error {
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	switch q := q.(type) {
	case nil:
	case *sqlx.Tx:
		if q != nil {
			return nil
		}
	case *sqlx.DB:
		if q != nil {
			return nil
		}
	default:
		return nil
	}
	return &eventstore.InvalidError{Op: op, Field: "q", Reason: "nil transaction or database"}
}

// run runs fn in a write transaction of its own (Dialect.Run).
func (s *Store) run(ctx context.Context, op, stream string, fn func(tx *sqlx.Tx) error) error {
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	return s.wrap(op, stream, s.d.Run(ctx, fn))
}

// inTx runs fn inside the caller's transaction under a savepoint, so that a failing
// fn leaves nothing behind and the caller can go on with the transaction (which
// PostgreSQL allows after a failed statement only once it is rolled back to a
// savepoint).
func (s *Store) inTx(ctx context.Context, tx *sqlx.Tx, op, stream string, fn func() error) error {
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	if tx == nil {
		return &eventstore.InvalidError{Op: op, Stream: stream, Field: "tx", Reason: "nil transaction"}
	}
	// The savepoint statements go through Dialect.Exec: prepared once, not parsed
	// on every call.
	if _, err := s.d.Exec(ctx, tx, "SAVEPOINT "+s.d.Savepoint); err != nil {
		return s.wrap(op, stream, err)
	}
	if err := fn(); err != nil {
		// The rollback must happen even when ctx has ended.
		bg := context.WithoutCancel(ctx)
		_, rbErr := s.d.Exec(bg, tx, "ROLLBACK TO SAVEPOINT "+s.d.Savepoint)
		_, relErr := s.d.Exec(bg, tx, "RELEASE SAVEPOINT "+s.d.Savepoint)
		if rbErr != nil || relErr != nil {
			err = errors.Join(err, rbErr, relErr)
		}
		return s.wrap(op, stream, err)
	}
	_, err := s.d.Exec(ctx, tx, "RELEASE SAVEPOINT "+s.d.Savepoint)
	return s.wrap(op, stream, err)
}

// wrap names op and stream in storage errors; the contract's own errors already
// carry them and pass unchanged.
func (s *Store) wrap(op, stream string, err error) error {
	if err == nil || eventstore.IsContractError(err) {
		return err
	}
	if sqltx.DBClosed(err) { // the caller closed the database under the store
		err = fmt.Errorf("%w: %w", eventstore.ErrClosed, err)
	}
	if stream == "" {
		return fmt.Errorf("%s: %s: %w", s.d.Name, op, err)
	}
	return fmt.Errorf("%s: %s stream %q: %w", s.d.Name, op, stream, err)
}

// scanRow runs a single-row query through q (Dialect.Query) and scans the row into
// dest; it returns sql.ErrNoRows when there is none.
func (s *Store) scanRow(ctx context.Context, q sqlx.QueryerContext, query string, args []any, dest ...any) error {
	rows, err := s.d.Query(ctx, q, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// each returns the arguments of a statement over items: items itself, run once,
// with Dialect.Arrays; otherwise each item, run once per item.
func each[T any](arrays bool, items []T) []any {
	if len(items) == 0 {
		return nil
	}
	if arrays {
		return []any{items}
	}
	args := make([]any, len(items))
	for i, item := range items {
		args[i] = item
	}
	return args
}

// NullString binds a *string: nil is NULL.
func NullString(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

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
