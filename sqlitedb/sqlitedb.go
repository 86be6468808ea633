// Package sqlitedb opens a SQLite database with the settings duroq's SQLite backends
// (mq/sqlite, eventstore/sqlite, sqliteprovider) are designed and tested for: WAL,
// transactions that take the write lock when they begin (BEGIN IMMEDIATE), one
// writer connection per process, WAL checkpoints beside the commits instead of
// inside them (on one more connection, outside the pool), and a watcher that
// notices other processes' commits. Open one database and pass it to several
// backends to let them commit together.
package sqlitedb

import (
	"fmt"
	"strings"
	"time"

	"github.com/duroq/duroq/internal/sqliteconn"
	"github.com/jmoiron/sqlx"
)

// Options tune Open. The zero value gives the documented defaults.
type Options struct {
	// Synchronous is SQLite's synchronous pragma: "NORMAL" (default; in WAL mode a
	// commit survives a process crash, and a power loss can lose only the last
	// commits) or "FULL" (every commit is synced to disk before it returns).
	Synchronous string
	// BusyTimeout is how long a connection waits for another writer (another process
	// or connection) before failing with "database is locked". Default 10s.
	BusyTimeout time.Duration
	// MaxOpenConns bounds the connection pool. SQLite admits one writer at a time but,
	// in WAL mode, readers run beside it; a small pool keeps long polls and readers
	// from queueing behind writers without piling up busy-waiting writers. Default 8.
	MaxOpenConns int
}

// Open opens (creating if needed) the SQLite database at path; ":memory:" opens a
// private in-memory database shared by the pool's connections. A database opened
// otherwise MUST use _txlock=immediate to be shared with duroq's backends.
//
// Close returns once every connection is closed: when no other process has the file
// open, SQLite has then checkpointed the WAL and removed the -wal and -shm files, so
// the file alone holds every commit.
func Open(path string, o Options) (*sqlx.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlite: open: empty path")
	}
	sync := strings.ToUpper(o.Synchronous)
	switch sync {
	case "":
		sync = "NORMAL"
	case "NORMAL", "FULL", "EXTRA", "OFF":
	default:
		return nil, fmt.Errorf("sqlite: open %s: unknown synchronous mode %q (want NORMAL or FULL)", path, o.Synchronous)
	}
	busy := o.BusyTimeout
	if busy <= 0 {
		busy = 10 * time.Second
	}
	conns := o.MaxOpenConns
	if conns <= 0 {
		conns = 8
	}
	return sqliteconn.Open(path, sync, busy, conns)
}
