// Package sqliteconntest checks, for the tests of duroq's SQLite backends, that a closed
// database left everything in its main file, and that hot statements are compiled
// once.
package sqliteconntest

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/jmoiron/sqlx"
	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver
)

// ClosedFile fails t unless the SQLite database at path is closed and whole in its
// file: no -wal or -shm file remains beside it, and a copy of the file alone, in
// another directory, opens read-only. It returns that copy, closed when t ends, for
// the caller to check the data it holds.
func ClosedFile(t testing.TB, path string) *sqlx.DB {
	t.Helper()
	for _, side := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(path + side); !os.IsNotExist(err) {
			t.Fatalf("%s%s remains after Close (stat: %v): the database is still open or its WAL was not checkpointed", path, side, err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(copied, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sqlx.Open("sqlite3", "file:"+(&url.URL{Path: copied}).EscapedPath()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("open a copy of %s read-only: %v", path, err)
	}
	return db
}
