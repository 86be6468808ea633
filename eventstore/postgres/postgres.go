package postgres

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlstore"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/pgdb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns this package's migration files, under "migrations/" and named
// NNNN_description.sql, for tools that show or apply them (duroq migrate).
func Migrations() fs.FS { return migrations }

// MigrationLine names this package's migrations in the shared duroq_migrations table.
const MigrationLine = "eventstore"

// Options tune Open and New. The zero value is usable.
type Options struct {
	// DB tunes the database Open connects to: schema and pool (ignored by New).
	DB pgdb.Options
	// Now is the clock every timestamp is computed from (default time.Now).
	Now func() time.Time
}

// Store is the SQL event store (package sqlstore) speaking PostgreSQL. It is safe
// for concurrent use, also by several processes sharing the schema.
type Store = sqlstore.Store

// Open connects to the database at dsn, applies this package's migrations and
// returns a store that owns the database: Close closes it.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	db, err := pgdb.Open(ctx, dsn, o.DB)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: %w", err)
	}
	s, _ := newStore(db, true, o)
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over db, a database the caller owns (Close leaves it open) and
// may share with other stores, such as mq/postgres. Call Migrate before use.
func New(db *sqlx.DB, o Options) *Store {
	s, _ := newStore(db, false, o)
	return s
}

// dialect is what PostgreSQL does its own way: transactions retried on transient
// failures, appends and updates in one statement each, planner statistics kept.
type dialect struct {
	db        *sqlx.DB
	retries   atomic.Int64     // transactions run again (see run), for tests
	planStats pgsql.StatsGuard // gives the tables the batch reads use planner statistics
}

func newStore(db *sqlx.DB, owned bool, o Options) (*Store, *dialect) {
	d := &dialect{db: db, planStats: pgsql.StatsGuard{DB: db, Tables: []string{"es_streams", "es_partitions", "es_events", "es_kv_store"}}}
	return sqlstore.New(db, sqlstore.Dialect{
		Name:      "eventstore/postgres",
		Savepoint: savepoint,
		Bind:      sqlx.DOLLAR,
		Arrays:    true,
		Queries:   queries,
		Database:  pgsql.Database(db),
		// Migrators serialise on an advisory lock, in the schema of db's search_path.
		Migrate: func(ctx context.Context, db *sqlx.DB) error {
			return migrate.Run(ctx, db.DB, pgsql.Dialect, migrations, MigrationLine)
		},
		Run: d.run,
		Exec: func(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (sql.Result, error) {
			return tx.ExecContext(ctx, query, args...)
		},
		Query: func(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) (*sql.Rows, error) {
			d.planStats.Ensure()
			return q.QueryContext(ctx, query, args...)
		},
		Append:     d.append,
		CommitMany: d.commitMany,
		UpdateRows: d.updateRows,
		LockPlan:   lockedPlan,
		Release: func() error {
			d.planStats.Close()
			return nil
		},
	}, sqlstore.Options{Now: o.Now, CloseDB: owned}), d
}

// run runs fn in a transaction of its own (pgsql.Run),
// retrying the whole transaction on a transient failure (pgsql.Retry) unless it
// broke the store's contract.
func (d *dialect) run(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return pgsql.Retry(ctx,
		func(err error) bool { return pgsql.IsRetryable(err) && !eventstore.IsContractError(err) },
		func(int, time.Duration, error) { d.retries.Add(1) },
		func() error { return pgsql.Run(ctx, d.db, fn) })
}

// savepoint names the savepoint of a write twin. PostgreSQL allows nesting one
// name; ROLLBACK TO and RELEASE act on the innermost.
const savepoint = "duroq_eventstore"
