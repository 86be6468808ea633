// Package pgtest gives PostgreSQL tests an isolated schema on the server named by
// the DUROQ_POSTGRES_DSN environment variable, or skips them loudly without it (fails
// them instead when DUROQ_REQUIRE_SERVICES is set, as CI does).
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duroq/duroq/internal/testenv"
)

// EnvDSN names the environment variable holding the test server's DSN, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const EnvDSN = "DUROQ_POSTGRES_DSN"

var seq atomic.Int64

// DSN returns the test server's DSN or skips t (see testenv.SkipOrFail), saying
// how to enable the test.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		testenv.SkipOrFail(t, "PostgreSQL tests skipped: set "+EnvDSN+" (for example postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run them")
	}
	return dsn
}

// Schema returns a fresh schema name for t, dropped (with everything in it) when t
// ends, so concurrent tests and runs never see each other's tables.
func Schema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = DSN(t)
	name := strings.ToLower(strings.NewReplacer("/", "_", " ", "_", "-", "_", "=", "_").Replace(t.Name()))
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	schema = fmt.Sprintf("t%d_%d_%s", time.Now().UnixNano()%1e9, seq.Add(1), name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return dsn, schema
}

// SchemaExists reports whether the schema exists on the server at dsn.
func SchemaExists(t testing.TB, dsn, schema string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
