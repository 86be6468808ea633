package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3"

	"github.com/duroq/duroq/eventstore/sqlstore"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqliteconn"
	"github.com/duroq/duroq/internal/stmtcache"
	"github.com/duroq/duroq/sqlitedb"
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
	// DB tunes the database Open creates (ignored by New).
	DB sqlitedb.Options
	// Now is the clock every timestamp is computed from (default time.Now).
	Now func() time.Time
}

// Store is the SQL event store (package sqlstore) speaking SQLite. It is safe for
// concurrent use, also by several processes sharing the database file.
type Store = sqlstore.Store

// Open opens (creating if needed) the database at path, applies this package's
// migrations and returns a store that owns the database: Close closes it, and
// returns once it is closed (when no other process has the file open, its WAL is
// checkpointed and the -wal and -shm files are removed).
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

// dialect is what SQLite does its own way: statements parsed once per connection,
// the writes of appends and updates, and conflict detection by the primary key.
type dialect struct {
	stmts *stmtcache.Cache
}

func newStore(db *sqlx.DB, owned bool, o Options) *Store {
	d := &dialect{stmts: stmtcache.New(db)}
	writer := sqliteconn.WriterOf(db) // SQLite has one writer: queue on the process's
	return sqlstore.New(db, sqlstore.Dialect{
		Name:      "eventstore/sqlite",
		Savepoint: "eventstore",
		Bind:      sqlx.QUESTION,
		Queries:   queries,
		Database:  sqliteconn.Database(db),
		Migrate: func(ctx context.Context, db *sqlx.DB) error {
			return migrate.Run(ctx, db.DB, migrate.SQLite, migrations, MigrationLine)
		},
		Run:        writer.Run,
		Exec:       d.exec,
		Query:      d.stmts.Query,
		Append:     d.append,
		UpdateRows: d.updateRows,
		CommitMany: d.commitMany,
		Release:    d.stmts.Close,
	}, sqlstore.Options{Now: o.Now, CloseDB: owned})
}

// isDuplicate reports whether err is SQLite rejecting a duplicate key.
func isDuplicate(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) &&
		(se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey || se.ExtendedCode == sqlite3.ErrConstraintUnique)
}

// exec runs a statement inside tx.
func (d *dialect) exec(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (sql.Result, error) {
	return d.stmts.Exec(ctx, tx, query, args...)
}
