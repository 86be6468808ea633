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

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/pgdb"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/jmoiron/sqlx"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationLine names this package's migrations in the shared duroq_migrations table.
const MigrationLine = "eventstore"

// DBOptions tune OpenDB and Open: Schema (default "public", created if missing and
// set as every connection's search_path), MaxOpenConns (the pool size, default 16)
// and ConnMaxLifetime (default 30 minutes).
type DBOptions = pgdb.Options

// OpenDB connects to the PostgreSQL database at dsn (a postgres:// URL or a
// key=value string) through pgx's database/sql driver, with the settings this
// package is built for (see DBOptions). Use it to share one database between this
// store and other duroq PostgreSQL stores, such as mq/postgres (pass the result to
// New).
func OpenDB(ctx context.Context, dsn string, o DBOptions) (*sqlx.DB, error) {
	return pgdb.Open(ctx, dsn, o)
}

// Options tune Open and New. The zero value is usable.
type Options struct {
	// DB tunes the database Open connects to: schema and pool (ignored by New).
	DB DBOptions
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
	db      *sqlx.DB
	owned   bool
	now     func() time.Time
	closed  atomic.Bool
	retries atomic.Int64 // transactions run again (see run), for tests
}

var _ eventstore.EventStore = (*Store)(nil)

// Open connects to the database at dsn, applies this package's migrations and
// returns a store that owns the database: Close closes it.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	db, err := pgdb.Open(ctx, dsn, o.DB)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: %w", err)
	}
	s := New(db, o)
	s.owned = true
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over db, a database the caller owns (Close leaves it open) and
// may share with other stores, such as mq/postgres. Call Migrate before use.
func New(db *sqlx.DB, o Options) *Store {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{db: db, now: o.Now}
}

// Migrate creates or upgrades the store's tables (the "eventstore" migration line)
// in the schema of db's search_path. It is idempotent and safe when several
// processes call it at once: migrators serialise on an advisory lock.
func (s *Store) Migrate(ctx context.Context) error {
	migs, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("eventstore/postgres: %w", err)
	}
	if err := migrate.Apply(ctx, s.db.DB, pgdb.Dialect, MigrationLine, migs); err != nil {
		return fmt.Errorf("eventstore/postgres: %w", err)
	}
	return nil
}

// DB returns the underlying database, for transactions spanning this store and other
// stores (see the *Tx methods).
func (s *Store) DB() *sqlx.DB { return s.db }

// Close implements eventstore.EventStore. It closes the database only if Open
// created it.
func (s *Store) Close() error {
	if s.closed.Swap(true) || !s.owned {
		return nil
	}
	return s.db.Close()
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

// usable fails when the store is closed or ctx has ended.
func (s *Store) usable(ctx context.Context, op string) error {
	if s.closed.Load() {
		return eventstore.Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("eventstore/postgres: %s: %w", op, err)
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
func (s *Store) run(ctx context.Context, op, stream string, fn func(tx *sqlx.Tx) error) error {
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := sqltx.Run(ctx, s.db, fn)
		if err == nil || attempt == maxAttempts || !pgdb.IsRetryable(err) || eventstore.IsContractError(err) {
			return wrap(op, stream, err)
		}
		s.retries.Add(1)
		pause := min(retryBackoff<<(attempt-1), maxBackoff)
		pause = pause/2 + rand.N(pause/2+1)
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return wrap(op, stream, errors.Join(err, ctx.Err()))
		case <-timer.C:
		}
	}
}

// savepoint names the savepoint of a write twin. PostgreSQL allows nesting one
// name; ROLLBACK TO and RELEASE act on the innermost.
const savepoint = "duroq_eventstore"

// inTx runs fn inside the caller's transaction under a savepoint, so that a failing
// fn leaves nothing behind and the transaction stays usable (PostgreSQL refuses
// every statement of a transaction after a failed one, unless it is rolled back to
// a savepoint).
func (s *Store) inTx(ctx context.Context, tx *sqlx.Tx, op, stream string, fn func() error) error {
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	if tx == nil {
		return &eventstore.InvalidError{Op: op, Stream: stream, Field: "tx", Reason: "nil transaction"}
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
		return wrap(op, stream, err)
	}
	if err := fn(); err != nil {
		// The rollback must happen even when ctx has ended.
		bg := context.WithoutCancel(ctx)
		if _, rbErr := tx.ExecContext(bg, "ROLLBACK TO SAVEPOINT "+savepoint); rbErr != nil {
			return wrap(op, stream, errors.Join(err, rbErr))
		}
		if _, relErr := tx.ExecContext(bg, "RELEASE SAVEPOINT "+savepoint); relErr != nil {
			return wrap(op, stream, errors.Join(err, relErr))
		}
		return wrap(op, stream, err)
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+savepoint)
	return wrap(op, stream, err)
}

// wrap names op and stream in storage errors; the contract's own errors already
// carry them and pass unchanged.
func wrap(op, stream string, err error) error {
	if err == nil || eventstore.IsContractError(err) {
		return err
	}
	if stream == "" {
		return fmt.Errorf("eventstore/postgres: %s: %w", op, err)
	}
	return fmt.Errorf("eventstore/postgres: %s stream %q: %w", op, stream, err)
}

// nullString binds a *string: nil is NULL.
func nullString(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// scanRow runs a single-row query through q; it returns sql.ErrNoRows when there is
// none.
func scanRow(ctx context.Context, q sqlx.QueryerContext, query string, args []any, dest ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
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
