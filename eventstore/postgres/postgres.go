package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/essql"
	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/txn"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationLine names this package's migrations in the shared duroq_migrations table.
const MigrationLine = "eventstore"

// Options tune Open and New. The zero value is usable.
type Options struct {
	// DB tunes the database Open connects to: schema and pool (ignored by New).
	DB pgdb.Options
	// Now is the clock every timestamp is computed from (default time.Now).
	Now func() time.Time
}

// Store is an eventstore.EventStore in PostgreSQL. It is safe for concurrent use, also
// by several processes sharing the database (and schema).
//
// Every method has a twin with a Tx suffix that runs inside the caller's
// transaction: writes take a *sqlx.Tx (from this store's DB, begun by the caller)
// and run inside a savepoint, so a failed call leaves nothing of itself and the
// transaction stays usable; reads take any sqlx.QueryerContext (the *sqlx.Tx, or the
// *sqlx.DB).
type Store struct {
	c         *essql.Store
	retries   atomic.Int64     // transactions run again (see run), for tests
	planStats pgsql.StatsGuard // gives the tables ReadStatesTx reads planner statistics
}

var _ eventstore.TxStore = (*Store)(nil)

// Open connects to the database at dsn, applies this package's migrations and
// returns a store that owns the database: Close closes it.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	db, err := pgdb.Open(ctx, dsn, o.DB)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: %w", err)
	}
	s := newStore(db, true, o)
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over db, a database the caller owns (Close leaves it open) and
// may share with other stores, such as mq/postgres. Call Migrate before use.
func New(db *sqlx.DB, o Options) *Store { return newStore(db, false, o) }

func newStore(db *sqlx.DB, owned bool, o Options) *Store {
	s := &Store{planStats: pgsql.StatsGuard{DB: db, Tables: []string{"es_streams", "es_partitions", "es_events", "es_kv_store"}}}
	s.c = essql.New(db, owned, o.Now, essql.Dialect{
		Name:      "eventstore/postgres",
		Savepoint: savepoint,
		Bind:      sqlx.DOLLAR,
		Arrays:    true,
		Queries:   queries,
		Run:       s.run,
		Exec: func(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (sql.Result, error) {
			return tx.ExecContext(ctx, query, args...)
		},
		Query: func(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) (*sql.Rows, error) {
			return q.QueryContext(ctx, query, args...)
		},
		Append:     s.append,
		CommitMany: s.commitMany,
		UpdateRows: s.updateRows,
		LockPlan:   lockedPlan,
	})
	return s
}

// Migrate creates or upgrades the store's tables (the "eventstore" migration line)
// in the schema of db's search_path. It is idempotent and safe when several
// processes call it at once: migrators serialise on an advisory lock.
func (s *Store) Migrate(ctx context.Context) error {
	return s.c.Migrate(ctx, migrations, pgsql.Dialect, MigrationLine)
}

// DB returns the underlying database, for transactions spanning this store and other
// stores (see the *Tx methods).
func (s *Store) DB() *sqlx.DB { return s.c.DB() }

// Database implements eventstore.TxStore: the database the store lives in.
func (s *Store) Database() txn.Database { return pgsql.Database(s.c.DB()) }

// In implements eventstore.TxStore: the store's operations inside tx, a transaction
// its Database runs.
func (s *Store) In(tx txn.Tx) (eventstore.StoreTx, error) { return essql.In(s, tx) }

// Close implements eventstore.EventStore. It closes the database only if Open
// created it.
func (s *Store) Close() error {
	s.planStats.Close()
	return s.c.Close()
}

// Retries of a write that PostgreSQL aborted for a transient reason (a deadlock
// between writers of overlapping streams, a serialization failure, a lost
// connection): the whole transaction runs again, at most maxAttempts times, after a
// jittered, growing pause.
const (
	maxAttempts  = 6
	retryBackoff = 2 * time.Millisecond
	maxBackoff   = 100 * time.Millisecond
)

// run runs fn in a transaction of its own (READ COMMITTED, the server's default),
// retrying the whole transaction on a retryable failure.
func (s *Store) run(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := sqltx.Run(ctx, s.c.DB(), fn)
		if err == nil || attempt == maxAttempts || !pgsql.IsRetryable(err) || eventstore.IsContractError(err) {
			return err
		}
		s.retries.Add(1)
		pause := min(retryBackoff<<(attempt-1), maxBackoff)
		pause = pause/2 + rand.N(pause/2+1)
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return errors.Join(err, ctx.Err())
		case <-timer.C:
		}
	}
}

// savepoint names the savepoint of a write twin. PostgreSQL allows nesting one
// name; ROLLBACK TO and RELEASE act on the innermost.
const savepoint = "duroq_eventstore"
