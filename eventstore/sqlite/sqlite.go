package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqlitedb"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/internal/stmtcache"
	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationLine names this package's migrations in the shared duroq_migrations table.
const MigrationLine = "eventstore"

// DBOptions tune OpenDB and Open; see the field docs for the defaults.
type DBOptions = sqlitedb.Options

// OpenDB opens the SQLite database at path with the settings this package is built
// for: WAL, synchronous=NORMAL (FULL on request), a 10 s busy timeout, transactions
// that take the write lock when they begin (BEGIN IMMEDIATE) and a pool of 8
// connections. Use it to share one database between this store and other duroq
// SQLite stores (pass the result to New); a database opened otherwise MUST use
// _txlock=immediate.
func OpenDB(path string, o DBOptions) (*sqlx.DB, error) { return sqlitedb.Open(path, o) }

// Options tune Open and New. The zero value is usable.
type Options struct {
	// DB tunes the database Open creates (ignored by New).
	DB DBOptions
	// Now is the clock every timestamp is computed from (default time.Now).
	Now func() time.Time
}

// Store is an eventstore.EventStore in SQLite. It is safe for concurrent use, also by
// several processes sharing the database file.
//
// Every method has a twin with a Tx suffix that runs inside the caller's
// transaction: writes take a *sqlx.Tx (from this store's DB, begun by the caller)
// and run inside a savepoint, so a failed call leaves nothing of itself in the
// transaction; reads take any sqlx.QueryerContext (the *sqlx.Tx, or the *sqlx.DB).
type Store struct {
	db     *sqlx.DB
	owned  bool
	now    func() time.Time
	write  *sync.Mutex
	closed atomic.Bool
	stmts  *stmtcache.Cache // statements parsed once per connection
}

var _ eventstore.EventStore = (*Store)(nil)

// Open opens (creating if needed) the database at path, applies this package's
// migrations and returns a store that owns the database: Close closes it.
func Open(path string, o Options) (*Store, error) {
	db, err := sqlitedb.Open(path, o.DB)
	if err != nil {
		return nil, fmt.Errorf("eventstore/sqlite: %w", err)
	}
	s := New(db, o)
	s.owned = true
	if err := s.Migrate(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over db, a database the caller owns (Close leaves it open) and
// may share with other stores, such as mq/sqlite. Call Migrate before use.
func New(db *sqlx.DB, o Options) *Store {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{db: db, now: o.Now, write: sqlitedb.WriteLock(db), stmts: stmtcache.New(db)}
}

// Migrate creates or upgrades the store's tables (the "eventstore" migration line).
// It is idempotent and safe when several processes call it at once.
func (s *Store) Migrate(ctx context.Context) error {
	migs, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("eventstore/sqlite: %w", err)
	}
	if err := migrate.Apply(ctx, s.db.DB, migrate.SQLite, MigrationLine, migs); err != nil {
		return fmt.Errorf("eventstore/sqlite: %w", err)
	}
	return nil
}

// DB returns the underlying database, for transactions spanning this store and other
// stores (see the *Tx methods).
func (s *Store) DB() *sqlx.DB { return s.db }

// Close implements eventstore.EventStore. It closes the database only if Open
// created it.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	err := s.stmts.Close()
	if s.owned {
		err = errors.Join(err, s.db.Close())
	}
	return err
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

// usable fails when the store is closed or ctx has ended.
func (s *Store) usable(ctx context.Context, op string) error {
	if s.closed.Load() {
		return eventstore.Closed(op)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("eventstore/sqlite: %s: %w", op, err)
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

// run runs fn in a write transaction of its own.
func (s *Store) run(ctx context.Context, op, stream string, fn func(tx *sqlx.Tx) error) error {
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	return wrap(op, stream, sqltx.RunLocked(ctx, s.db, s.write, fn))
}

// inTx runs fn inside the caller's transaction under a savepoint, so that a failing
// fn leaves nothing behind even if the caller goes on with the transaction.
func (s *Store) inTx(ctx context.Context, tx *sqlx.Tx, op, stream string, fn func() error) error {
	if err := s.usable(ctx, op); err != nil {
		return err
	}
	if tx == nil {
		return &eventstore.InvalidError{Op: op, Stream: stream, Field: "tx", Reason: "nil transaction"}
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT eventstore"); err != nil {
		return wrap(op, stream, err)
	}
	if err := fn(); err != nil {
		// The rollback must happen even when ctx has ended.
		bg := context.WithoutCancel(ctx)
		_, rbErr := tx.ExecContext(bg, "ROLLBACK TO eventstore")
		_, relErr := tx.ExecContext(bg, "RELEASE eventstore")
		if rbErr != nil || relErr != nil {
			err = errors.Join(err, rbErr, relErr)
		}
		return wrap(op, stream, err)
	}
	_, err := tx.ExecContext(ctx, "RELEASE eventstore")
	return wrap(op, stream, err)
}

// wrap names op and stream in storage errors; the contract's own errors already
// carry them and pass unchanged.
func wrap(op, stream string, err error) error {
	if err == nil || eventstore.IsContractError(err) {
		return err
	}
	if stream == "" {
		return fmt.Errorf("eventstore/sqlite: %s: %w", op, err)
	}
	return fmt.Errorf("eventstore/sqlite: %s stream %q: %w", op, stream, err)
}

// isDuplicate reports whether err is SQLite rejecting a duplicate key.
func isDuplicate(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) &&
		(se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey || se.ExtendedCode == sqlite3.ErrConstraintUnique)
}

// nullString binds a *string: nil is NULL.
func nullString(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// exec runs a statement inside tx.
func (s *Store) exec(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (sql.Result, error) {
	return s.stmts.Exec(ctx, tx, query, args...)
}

// query runs a query through q.
func (s *Store) query(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) (*sql.Rows, error) {
	return s.stmts.Query(ctx, q, query, args...)
}

// scanRow is query for a single row; it returns sql.ErrNoRows when there is none.
func (s *Store) scanRow(ctx context.Context, q sqlx.QueryerContext, query string, args []any, dest ...any) error {
	rows, err := s.query(ctx, q, query, args...)
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
