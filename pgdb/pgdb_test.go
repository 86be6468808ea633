package pgdb_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/jackc/pgx/v5"
)

// schemaExists reports whether the schema exists on the server at dsn.
func schemaExists(t *testing.T, ctx context.Context, dsn, schema string) bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

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
	if schemaExists(t, ctx, dsn, schema) {
		t.Fatalf("Open(ExistingSchema) created schema %q", schema)
	}

	// Without ExistingSchema, Open creates it; then ExistingSchema opens it.
	db, err = pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if !schemaExists(t, ctx, dsn, schema) {
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

// TestStatementsArePlannedOnce runs a prepared statement whose generic plan looks
// costlier than its plans for known arguments (LIMIT $1), which PostgreSQL would
// plan again at every run: Open's connections plan it once, unless the DSN sets
// plan_cache_mode.
func TestStatementsArePlannedOnce(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	plans := func(dsn string) (custom, generic int) {
		t.Helper()
		db, err := pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema, MaxOpenConns: 1}) // one session: its statements
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS planned AS SELECT g AS id FROM generate_series(1, 10000) g;
			CREATE INDEX IF NOT EXISTS planned_id ON planned (id); ANALYZE planned`); err != nil {
			t.Fatal(err)
		}
		const query = `SELECT id FROM planned WHERE id > $1 ORDER BY id LIMIT $2`
		for i := range 10 {
			var id int
			if err := db.GetContext(ctx, &id, query, i, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.QueryRowContext(ctx, `SELECT custom_plans, generic_plans FROM pg_prepared_statements WHERE statement = $1`, query).
			Scan(&custom, &generic); err != nil {
			t.Fatal(err)
		}
		return custom, generic
	}
	if custom, generic := plans(dsn); custom != 0 || generic != 10 {
		t.Errorf("10 runs of a prepared statement: %d custom plans, %d runs of its generic plan; want 0 and 10", custom, generic)
	}
	// The DSN's setting wins; under PostgreSQL's default the same statement is
	// planned at every run (which shows the check above can fail).
	sep := " "
	if strings.Contains(dsn, "://") {
		sep = "&"
		if !strings.Contains(dsn, "?") {
			sep = "?"
		}
	}
	if custom, _ := plans(dsn + sep + "plan_cache_mode=auto"); custom != 10 {
		t.Errorf("with plan_cache_mode=auto in the DSN: %d custom plans in 10 runs, want 10", custom)
	}
}
