// Package pgprovider opens the runtime's provider on PostgreSQL: the mq/postgres
// queue and the eventstore/postgres store in one schema of one database (package
// pgdb), composed by package adapter. Several processes on several machines can
// share the schema.
package pgprovider

import (
	"context"
	"fmt"

	"github.com/duroq/duroq/adapter"
	espostgres "github.com/duroq/duroq/eventstore/postgres"
	mqpostgres "github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/pgdb"
)

// Options tune Open. The zero value gives the documented defaults.
type Options struct {
	adapter.Options
	// DB tunes the pool: schema (default "public"), pool size, connection lifetime
	// (see pgdb.Options).
	DB pgdb.Options
}

// Open connects to the PostgreSQL database at dsn (a postgres:// URL or a key=value
// string), applies the queue's and the event store's migrations in o.DB.Schema
// (idempotent, safe when several processes start together) and returns the
// provider. Its Close closes the pool.
func Open(ctx context.Context, dsn string, o Options) (*adapter.Provider, error) {
	db, err := pgdb.Open(ctx, dsn, o.DB)
	if err != nil {
		return nil, err
	}
	p, err := adapter.Open(ctx, db,
		mqpostgres.New(db, mqpostgres.Options{Now: o.Now, Logger: o.Logger}), espostgres.New(db, espostgres.Options{Now: o.Now}), o.Options)
	if err != nil {
		return nil, fmt.Errorf("pgprovider: open: %w", err)
	}
	return p, nil
}
