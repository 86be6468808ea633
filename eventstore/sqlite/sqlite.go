package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/essql"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqliteconn"
	"github.com/duroq/duroq/internal/stmtcache"
	"github.com/duroq/duroq/sqlitedb"
	"github.com/duroq/duroq/txn"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationLine names this package's migrations in the shared duroq_migrations table.
const MigrationLine = "eventstore"

// Options tune Open and New. The zero value is usable.
type Options struct {
	// DB tunes the database Open creates (ignored by New).
	DB sqlitedb.Options
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
	c     *essql.Store
	stmts *stmtcache.Cache // statements parsed once per connection
}

var _ eventstore.TxStore = (*Store)(nil)

// Open opens (creating if needed) the database at path, applies this package's
// migrations and returns a store that owns the database: Close closes it.
func Open(path string, o Options) (*Store, error) {
	db, err := sqlitedb.Open(path, o.DB)
	if err != nil {
		return nil, fmt.Errorf("eventstore/sqlite: %w", err)
	}
	s := newStore(db, true, o)
	if err := s.Migrate(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over db, a database the caller owns (Close leaves it open) and
// may share with other stores, such as mq/sqlite. Call Migrate before use.
func New(db *sqlx.DB, o Options) *Store { return newStore(db, false, o) }

func newStore(db *sqlx.DB, owned bool, o Options) *Store {
	s := &Store{stmts: stmtcache.New(db)}
	writer := sqliteconn.WriterOf(db) // SQLite has one writer: queue on the process's
	s.c = essql.New(db, owned, o.Now, essql.Dialect{
		Name:      "eventstore/sqlite",
		Savepoint: "eventstore",
		Bind:      sqlx.QUESTION,
		Queries:   queries,
		Run: func(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
			return writer.Run(ctx, fn)
		},
		Exec: s.exec,
		Query: func(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) (*sql.Rows, error) {
			return s.stmts.Query(ctx, q, query, args...)
		},
		Append:     s.append,
		UpdateRows: s.updateRows,
		CommitMany: s.commitMany,
		Release:    s.stmts.Close,
	})
	return s
}

// Migrate creates or upgrades the store's tables (the "eventstore" migration line).
// It is idempotent and safe when several processes call it at once.
func (s *Store) Migrate(ctx context.Context) error {
	return s.c.Migrate(ctx, migrations, migrate.SQLite, MigrationLine)
}

// DB returns the underlying database, for transactions spanning this store and other
// stores (see the *Tx methods).
func (s *Store) DB() *sqlx.DB { return s.c.DB() }

// Database implements eventstore.TxStore: the database the store lives in.
func (s *Store) Database() txn.Database { return sqliteconn.Database(s.c.DB()) }

// In implements eventstore.TxStore: the store's operations inside tx, a transaction
// its Database runs.
func (s *Store) In(tx txn.Tx) (eventstore.StoreTx, error) { return essql.In(s, tx) }

// Close implements eventstore.EventStore. It closes the database only if Open
// created it, and then returns once the database is closed: when no other process
// has the file open, its WAL is checkpointed and the -wal and -shm files are removed.
func (s *Store) Close() error { return s.c.Close() }

// isDuplicate reports whether err is SQLite rejecting a duplicate key.
func isDuplicate(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) &&
		(se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey || se.ExtendedCode == sqlite3.ErrConstraintUnique)
}

// exec runs a statement inside tx.
func (s *Store) exec(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (sql.Result, error) {
	return s.stmts.Exec(ctx, tx, query, args...)
}
