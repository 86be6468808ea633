// Package migrate applies embedded, versioned SQL migrations. Each package keeps its
// own migration line (a name), so several packages can share one database.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one step of a line.
type Migration struct {
	Version int    // from the file name prefix, 1, 2, ...
	Name    string // the file name
	SQL     string
}

// Load reads the migrations of dir in fsys: files named NNNN_description.sql,
// numbered from 1 without gaps.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", dir, err)
	}
	var migs []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrate: %s: file name must start with a positive version and '_'", e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", e.Name(), err)
		}
		migs = append(migs, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	slices.SortFunc(migs, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range migs {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrate: %s: expected version %d (versions must be contiguous from 1)", m.Name, i+1)
		}
	}
	return migs, nil
}

// Dialect holds the statements that differ between databases.
type Dialect struct {
	// Begin starts a transaction on conn that excludes every other migrator until it
	// ends (SQLite: BEGIN IMMEDIATE; PostgreSQL: BEGIN plus an advisory lock).
	Begin []string
	// VersionTable is the name of the table recording applied versions per line.
	VersionTable string
	// TableExists is a query returning a row when the table its one parameter names
	// exists where the migrations apply (Applied reads it before the version table).
	TableExists string
	// Placeholder returns the bind parameter for position n (1-based).
	Placeholder func(n int) string
}

// Apply brings line up to the newest migration of migs. It is idempotent and safe
// when several processes run it at once: they serialise on Dialect.Begin and each
// applies only what is still missing. All pending migrations commit together.
func Apply(ctx context.Context, db *sql.DB, d Dialect, line string, migs []Migration) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", line, err)
	}
	defer conn.Close()
	for _, stmt := range d.Begin {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate %s: begin: %w", line, err)
		}
	}
	defer func() {
		end := "COMMIT"
		if err != nil {
			end = "ROLLBACK"
		}
		// A background context: the transaction must end even if ctx is done.
		if _, endErr := conn.ExecContext(context.Background(), end); endErr != nil && err == nil {
			err = fmt.Errorf("migrate %s: commit: %w", line, endErr)
		}
	}()
	// Inside the exclusive transaction: concurrent CREATE TABLE IF NOT EXISTS is not
	// safe on every database (PostgreSQL can fail on its catalog's unique index).
	if _, err := conn.ExecContext(ctx, CreateVersionTable(d)); err != nil {
		return fmt.Errorf("migrate %s: create version table: %w", line, err)
	}
	var current sql.NullInt64
	if err := conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT MAX(version) FROM %s WHERE line = %s`,
		d.VersionTable, d.Placeholder(1)), line).Scan(&current); err != nil {
		return fmt.Errorf("migrate %s: read version: %w", line, err)
	}
	if int(current.Int64) > len(migs) {
		return fmt.Errorf("migrate %s: database is at version %d, newer than this build knows (%d): upgrade the program",
			line, current.Int64, len(migs))
	}
	for _, m := range migs[current.Int64:] {
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate %s: apply %s: %w", line, m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (line, version, name) VALUES (%s, %s, %s)`,
			d.VersionTable, d.Placeholder(1), d.Placeholder(2), d.Placeholder(3)), line, m.Version, m.Name); err != nil {
			return fmt.Errorf("migrate %s: record %s: %w", line, m.Name, err)
		}
	}
	return nil
}

// CreateVersionTable is the statement creating d's version table if it is missing.
func CreateVersionTable(d Dialect) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (line TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL, PRIMARY KEY (line, version))`,
		d.VersionTable)
}

// Applied returns the version of line applied to db: 0 when the version table or the
// line is absent. It only reads: it creates no table.
func Applied(ctx context.Context, db *sql.DB, d Dialect, line string) (int, error) {
	var one int
	err := db.QueryRowContext(ctx, d.TableExists, d.VersionTable).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("migrate %s: look for %s: %w", line, d.VersionTable, err)
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT MAX(version) FROM %s WHERE line = %s`,
		d.VersionTable, d.Placeholder(1)), line).Scan(&v); err != nil {
		return 0, fmt.Errorf("migrate %s: read version: %w", line, err)
	}
	return int(v.Int64), nil
}

// SQLite is the dialect of SQLite databases.
var SQLite = Dialect{
	Begin:        []string{"BEGIN IMMEDIATE"},
	VersionTable: "duroq_migrations",
	TableExists:  `SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`,
	Placeholder:  func(int) string { return "?" },
}

// Run applies the migrations of the "migrations" directory of fsys to db as line
// (Load, then Apply): what every SQL backend's Migrate does.
func Run(ctx context.Context, db *sql.DB, d Dialect, fsys fs.FS, line string) error {
	migs, err := Load(fsys, "migrations")
	if err != nil {
		return err
	}
	return Apply(ctx, db, d, line, migs)
}
