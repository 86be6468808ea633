package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3"
	_ "modernc.org/sqlite"          // registers "sqlite"
)

// dsnParams are the connection settings duroq's SQLite backend uses (see
// internal/sqliteconn in the main module): WAL journal, synchronous=NORMAL, a 10 s busy
// timeout, and transactions that take the write lock when they begin. Both drivers
// used here accept these keys.
const dsnParams = "_journal_mode=WAL&_synchronous=NORMAL&_busy_timeout=10000&_txlock=immediate"

// sqlDriver names a database/sql SQLite driver.
type sqlDriver string

const (
	mattn   sqlDriver = "sqlite3" // github.com/mattn/go-sqlite3 (cgo), as duroq uses
	modernc sqlDriver = "sqlite"  // modernc.org/sqlite (pure Go), as River's CLI and examples use
)

func (d sqlDriver) module() string {
	if d == modernc {
		return "modernc.org/sqlite"
	}
	return "github.com/mattn/go-sqlite3"
}

func (d sqlDriver) short() string {
	if d == modernc {
		return "modernc"
	}
	return "mattn"
}

// freshDB creates a new temporary directory and opens a new database file in it with
// at most maxConns connections. The returned cleanup closes the pool and removes the
// directory.
func freshDB(ctx context.Context, d sqlDriver, maxConns int) (*sql.DB, func(), error) {
	dir, err := os.MkdirTemp("", "duroq-peers-*")
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "bench.db")
	db, err := sql.Open(string(d), "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+dsnParams)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(0)
	cleanup := func() {
		db.Close()
		os.RemoveAll(dir)
	}
	// Check that the settings took: a driver that ignored a key would measure
	// something else than it says.
	var journal string
	var syncMode int
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&journal); err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode); err != nil {
		cleanup()
		return nil, nil, err
	}
	if journal != "wal" || syncMode != 1 {
		cleanup()
		return nil, nil, fmt.Errorf("%s: journal_mode=%s synchronous=%d, want wal and 1 (NORMAL)", d.short(), journal, syncMode)
	}
	return db, cleanup, nil
}

// sqliteVersion reports the SQLite library version behind driver d.
func sqliteVersion(ctx context.Context, d sqlDriver) (string, error) {
	db, err := sql.Open(string(d), ":memory:")
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	err = db.QueryRowContext(ctx, "select sqlite_version()").Scan(&v)
	return v, err
}
