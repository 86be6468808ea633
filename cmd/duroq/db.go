package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/sqliteprovider"
)

// openExisting opens the provider at db, a PostgreSQL URL (its tables in schema) or
// the path of a SQLite file, which must exist: a tool that reads must not create an
// empty database where a path was mistyped.
func openExisting(ctx context.Context, db, schema string) (*adapter.Provider, error) {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		return pgprovider.Open(ctx, db, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
	}
	if _, err := os.Stat(db); err != nil {
		return nil, fmt.Errorf("no SQLite database at %s: %w", clip(db), err)
	}
	return sqliteprovider.Open(db, sqliteprovider.Options{})
}
