package sqlitedb_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/internal/sqliteconn"
	"github.com/duroq/duroq/internal/sqliteconn/sqliteconntest"
	"github.com/duroq/duroq/sqlitedb"
)

// openWritten opens a database at a fresh path, writes a row through the writer (which
// keeps its connection) and reads it through the pool.
func openWritten(t *testing.T, o sqlitedb.Options) (*sqlx.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sqlitedb.Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = sqliteconn.WriterOf(db).Run(context.Background(), func(tx *sqlx.Tx) error {
		_, err := tx.Exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (42)")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var x int
	if err := db.Get(&x, "SELECT x FROM t"); err != nil || x != 42 {
		t.Fatalf("read back: %d, %v", x, err)
	}
	return db, path
}

func checkRow(t *testing.T, path string) {
	t.Helper()
	var x int
	if err := sqliteconntest.ClosedFile(t, path).Get(&x, "SELECT x FROM t"); err != nil || x != 42 {
		t.Fatalf("the copy of the closed file reads %d, %v; want 42", x, err)
	}
}

// Close returns once the database is closed: the WAL is checkpointed into the file
// and the side files are gone, so the file alone holds the write. A second Close is
// harmless.
func TestCloseLeavesEverythingInTheFile(t *testing.T) {
	db, path := openWritten(t, sqlitedb.Options{})
	if err := db.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkRow(t, path)
	if err := db.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	err := sqliteconn.WriterOf(db).Run(context.Background(), func(*sqlx.Tx) error { return nil })
	if !closedDB(err) {
		t.Fatalf("a write after Close: %v, want the database closed", err)
	}
}

// A connection in use when Close is called is closed when it is released, and Close
// returns only after that.
func TestCloseWaitsForConnectionsInUse(t *testing.T) {
	db, path := openWritten(t, sqlitedb.Options{})
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	// Once the pool refuses new work, Close has begun.
	for !closedDB(db.Ping()) {
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v while a connection was in use", err)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a connection was in use", err)
	default:
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return 30s after the last connection was released")
	}
	checkRow(t, path)
}

// A connection never released does not make Close hang: it gives up after the busy
// timeout and says why; the database closes when the connection is released.
func TestCloseIsBoundedByTheBusyTimeout(t *testing.T) {
	db, path := openWritten(t, sqlitedb.Options{BusyTimeout: 100 * time.Millisecond})
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = db.Close()
	if err == nil || !strings.Contains(err.Error(), "1 connections still in use") || !strings.Contains(err.Error(), path) {
		t.Fatalf("close with a connection held: %v, want it to say one connection is in use and name the file", err)
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Fatalf("close took %v with a busy timeout of 100ms", took)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().OpenConnections; n != 0 {
		t.Fatalf("%d connections open after the last one was released", n)
	}
	checkRow(t, path)
}

// closedDB reports whether err is database/sql refusing work on a closed database,
// an error it does not export.
func closedDB(err error) bool {
	return err != nil && strings.Contains(err.Error(), "sql: database is closed")
}
