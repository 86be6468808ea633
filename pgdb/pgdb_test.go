package pgdb_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
)

func TestExistingSchema(t *testing.T) {
	dsn, schema := pgtest.Schema(t) // a fresh name, not created yet
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	db, err := pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema, ExistingSchema: true})
	if err == nil {
		db.Close()
		t.Fatalf("Open(ExistingSchema) of missing schema %q succeeded", schema)
	}
	if !errors.Is(err, pgdb.ErrNoSchema) || !strings.Contains(err.Error(), schema) {
		t.Errorf("Open(ExistingSchema) = %v; want ErrNoSchema naming %q", err, schema)
	}
	if pgtest.SchemaExists(t, dsn, schema) {
		t.Fatalf("Open(ExistingSchema) created schema %q", schema)
	}

	// Without ExistingSchema, Open creates it; then ExistingSchema opens it.
	db, err = pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if !pgtest.SchemaExists(t, dsn, schema) {
		t.Fatalf("Open did not create schema %q", schema)
	}
	db, err = pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema, ExistingSchema: true})
	if err != nil {
		t.Fatalf("Open(ExistingSchema) of existing schema: %v", err)
	}
	defer db.Close()
	var got string
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&got); err != nil || got != schema {
		t.Errorf("current_schema() = %q, %v; want %q", got, err, schema)
	}
}

// The pool's default size follows GOMAXPROCS, with a floor of 4.
func TestDefaultPoolSize(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	for _, procs := range []int{1, 2, 4, 16} {
		prev := runtime.GOMAXPROCS(procs)
		db, err := pgdb.Open(t.Context(), dsn, pgdb.Options{Schema: schema})
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Fatal(err)
		}
		got := db.Stats().MaxOpenConnections
		db.Close()
		if want := max(4, procs); got != want {
			t.Errorf("GOMAXPROCS=%d: pool of %d connections, want %d", procs, got, want)
		}
	}
}
