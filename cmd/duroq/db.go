package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/duroq/duroq/adapter"
	espostgres "github.com/duroq/duroq/eventstore/postgres"
	essqlite "github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/pgsql"
	mqpostgres "github.com/duroq/duroq/mq/postgres"
	mqsqlite "github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/sqliteprovider"
	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver, to read a file without creating it
)

// isPostgres reports whether db, a -db flag, names a PostgreSQL database (else it is
// the path of a SQLite file).
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// migrationLine is a migration line of a backend: its name and its files (under
// "migrations/").
type migrationLine struct {
	name string
	fsys fs.FS
}

// backends lists, per backend (-backend), its migration lines in the order a
// provider applies them, and its migration dialect.
var backends = map[string]struct {
	lines   []migrationLine
	dialect migrate.Dialect
}{
	"sqlite": {[]migrationLine{{mqsqlite.MigrationLine, mqsqlite.Migrations()}, {essqlite.MigrationLine, essqlite.Migrations()}}, migrate.SQLite},
	"postgres": {[]migrationLine{{mqpostgres.MigrationLine, mqpostgres.Migrations()}, {espostgres.MigrationLine, espostgres.Migrations()}},
		pgsql.Dialect},
}

// target is a database opened to be looked at, without creating anything in it.
type target struct {
	backend string  // "sqlite" or "postgres"
	where   string  // the SQLite file, or `schema "x"`, for messages
	db      *sql.DB // nil when the SQLite file or the PostgreSQL schema does not exist
}

// openTarget opens db, a SQLite file or a PostgreSQL URL with its tables
// in schema, creating nothing (a SQLite file is opened read-write, but only read, so
// that closing it checkpoints and removes its -wal and -shm files, as the providers
// do): a missing file or schema gives a target without db.
func openTarget(ctx context.Context, db, schema string) (*target, error) {
	if isPostgres(db) {
		t := &target{backend: "postgres", where: fmt.Sprintf("schema %q", clip(schema))}
		pg, err := pgdb.Open(ctx, db, pgdb.Options{Schema: schema, ExistingSchema: true, MaxOpenConns: 2})
		if errors.Is(err, pgdb.ErrNoSchema) {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		t.db = pg.DB
		return t, nil
	}
	t := &target{backend: "sqlite", where: clip(db)}
	if db == "" {
		return nil, errors.New("the SQLite path is empty")
	}
	if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
		return t, nil
	} else if err != nil {
		return nil, fmt.Errorf("no SQLite database at %s: %w", clip(db), err)
	}
	sq, err := sql.Open("sqlite3", "file:"+(&url.URL{Path: db}).EscapedPath()+"?mode=rw&_busy_timeout=10000")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", clip(db), err)
	}
	t.db = sq
	return t, nil
}

// Close closes the target's database.
func (t *target) Close() error {
	if t.db == nil {
		return nil
	}
	return t.db.Close()
}

// applied returns the version applied of each of the backend's migration lines (0
// for every line when the database does not exist).
func (t *target) applied(ctx context.Context) ([]int, error) {
	b := backends[t.backend]
	versions := make([]int, len(b.lines))
	if t.db == nil {
		return versions, nil
	}
	for i, l := range b.lines {
		v, err := migrate.Applied(ctx, t.db, b.dialect, l.name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.where, err)
		}
		versions[i] = v
	}
	return versions, nil
}

// openExisting opens the provider at db, a PostgreSQL URL (its tables in schema) or
// the path of a SQLite file, where duroq's migrations must have been applied: a tool
// that reads must not create an empty database, a schema or tables where a path or a
// schema was mistyped.
func openExisting(ctx context.Context, db, schema string) (*adapter.Provider, error) {
	t, err := openTarget(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	versions, err := t.applied(ctx)
	t.Close()
	switch {
	case err != nil:
		return nil, err
	case t.db == nil && t.backend == "sqlite":
		return nil, fmt.Errorf("no SQLite database at %s: %w", clip(db), fs.ErrNotExist)
	case t.db == nil:
		return nil, fmt.Errorf("no duroq tables in %s: it does not exist (mistyped? duroq migrate up -create creates it)", t.where)
	case !anyApplied(versions):
		return nil, fmt.Errorf("no duroq tables in %s: duroq's migrations were never applied there (duroq migrate up applies them)", t.where)
	}
	if t.backend == "postgres" {
		return pgprovider.Open(ctx, db, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
	}
	return sqliteprovider.Open(db, sqliteprovider.Options{})
}

func anyApplied(versions []int) bool {
	for _, v := range versions {
		if v > 0 {
			return true
		}
	}
	return false
}
