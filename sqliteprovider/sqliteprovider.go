// Package sqliteprovider opens the runtime's provider on one SQLite file: the
// mq/sqlite queue and the eventstore/sqlite store on one database (package
// sqlitedb), composed by package adapter. It is the default way to run duroq's
// durable-execution runtime on one machine; several processes on the machine can
// share the file.
package sqliteprovider

import (
	"context"
	"fmt"

	"github.com/duroq/duroq/adapter"
	essqlite "github.com/duroq/duroq/eventstore/sqlite"
	mqsqlite "github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/sqlitedb"
)

// Options tune Open. The zero value gives the documented defaults.
type Options struct {
	adapter.Options
	// DB tunes the database: WAL, synchronous=NORMAL (or FULL), busy timeout, pool
	// size (see sqlitedb.Options).
	DB sqlitedb.Options
}

// Open opens (creating if needed) the SQLite file at path, applies the queue's and
// the event store's migrations (idempotent, safe when several processes open the
// file at once) and returns the provider. Its Close closes the database and returns
// once it is closed: when no other process has the file open, its WAL is
// checkpointed and the -wal and -shm files are removed, so the file alone holds the
// final state.
func Open(path string, o Options) (*adapter.Provider, error) {
	db, err := sqlitedb.Open(path, o.DB)
	if err != nil {
		return nil, err
	}
	p, err := adapter.Open(context.Background(), db,
		mqsqlite.New(db, mqsqlite.Options{Now: o.Now, Logger: o.Logger}), essqlite.New(db, essqlite.Options{Now: o.Now}), o.Options)
	if err != nil {
		return nil, fmt.Errorf("sqliteprovider: open %s: %w", path, err)
	}
	return p, nil
}
