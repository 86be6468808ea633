package pgsql_test

import (
	"strings"
	"testing"

	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/jmoiron/sqlx"
)

// openSchemaDB opens a database with options o on a fresh schema of the test
// server (skipping the test without DUROQ_POSTGRES_DSN), closed when the test ends.
func openSchemaDB(t *testing.T, o pgdb.Options) *sqlx.DB {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	o.Schema = schema
	db, err := pgdb.Open(t.Context(), dsn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A statement run in Run's transactions is planned once, generically, on its
// connection, and walks an index even where the table is small; the same
// statement run on the pool outside them is planned for its arguments as the
// server's plan_cache_mode says (at least its first five runs) and scans the small
// table whole. Run's transactions are READ COMMITTED whatever the session's default.
func TestRunPlansStatementsOnceWithIndexes(t *testing.T) {
	ctx := t.Context()
	db := openSchemaDB(t, pgdb.Options{MaxOpenConns: 1}) // one session: its statements
	const inTx = `SELECT count(*) FROM unnest($1::int[]) AS v WHERE v > 1 /* in Run */`
	const onPool = `SELECT count(*) FROM unnest($1::int[]) AS v WHERE v > 1 /* on the pool */`
	const runs = 8
	for i := range runs {
		arg := make([]int32, i+1)
		if err := pgsql.Run(ctx, db, func(tx *sqlx.Tx) error {
			var n int
			return tx.GetContext(ctx, &n, inTx, arg)
		}); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.GetContext(ctx, &n, onPool, arg); err != nil {
			t.Fatal(err)
		}
	}
	for _, stmt := range []string{
		`CREATE TABLE small (id int PRIMARY KEY, v text)`,
		`INSERT INTO small SELECT i, 'v' FROM generate_series(1, 50) AS i`,
		`ANALYZE small`, // one page: the planner's choice is to read it whole
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	const lookup = `EXPLAIN SELECT v FROM small WHERE id = ANY($1)`
	var inRun, outside string
	if err := pgsql.Run(ctx, db, func(tx *sqlx.Tx) error { return tx.GetContext(ctx, &inRun, lookup, []int32{1, 2}) }); err != nil {
		t.Fatal(err)
	}
	if err := db.GetContext(ctx, &outside, lookup, []int32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(inRun, "Seq Scan") {
		t.Errorf("in Run's transactions, a lookup in a small table by its key: %s, want an index scan", inRun)
	}
	if !strings.Contains(outside, "Seq Scan") {
		t.Errorf("on the pool, a lookup in a small table by its key: %s, want the server's choice, a sequential scan: the setting leaked out of the transaction", outside)
	}

	// Bitmap scans are off in Run's transactions only.
	var bitmapInRun, bitmapOutside string
	if err := pgsql.Run(ctx, db, func(tx *sqlx.Tx) error { return tx.GetContext(ctx, &bitmapInRun, `SHOW enable_bitmapscan`) }); err != nil {
		t.Fatal(err)
	}
	if err := db.GetContext(ctx, &bitmapOutside, `SHOW enable_bitmapscan`); err != nil {
		t.Fatal(err)
	}
	if bitmapInRun != "off" || bitmapOutside != "on" {
		t.Errorf("enable_bitmapscan: %q in Run's transactions and %q on the pool, want off and the server's default, on", bitmapInRun, bitmapOutside)
	}

	// So is JIT compilation: in Run, a statement whose estimated cost is past
	// jit_above_cost (0 here, so any) is not compiled; on the pool it is, where the
	// server can (pg_jit_available).
	if _, err := db.ExecContext(ctx, `SET jit_above_cost = 0`); err != nil {
		t.Fatal(err)
	}
	const costly = `EXPLAIN SELECT sum(v) FROM unnest($1::int[]) AS v`
	var jitInRun, jitOutside []string
	if err := pgsql.Run(ctx, db, func(tx *sqlx.Tx) error { return tx.SelectContext(ctx, &jitInRun, costly, []int32{1}) }); err != nil {
		t.Fatal(err)
	}
	if err := db.SelectContext(ctx, &jitOutside, costly, []int32{1}); err != nil {
		t.Fatal(err)
	}
	var canJIT bool
	if err := db.GetContext(ctx, &canJIT, `SELECT pg_jit_available()`); err != nil {
		t.Fatal(err)
	}
	if jitted := func(plan []string) bool { return strings.Contains(strings.Join(plan, "\n"), "JIT:") }; jitted(jitInRun) || jitted(jitOutside) != canJIT {
		t.Errorf("JIT with jit_above_cost 0: in Run's transactions %q, on the pool %q (server can compile: %v); want none in Run, the server's choice on the pool",
			jitInRun, jitOutside, canJIT)
	}

	// READ COMMITTED whatever the session's default.
	if _, err := db.ExecContext(ctx, `SET default_transaction_isolation = 'serializable'`); err != nil {
		t.Fatal(err)
	}
	var isolation string
	if err := pgsql.Run(ctx, db, func(tx *sqlx.Tx) error { return tx.GetContext(ctx, &isolation, `SHOW transaction_isolation`) }); err != nil {
		t.Fatal(err)
	}
	if isolation != "read committed" {
		t.Errorf("Run's transaction isolation under a serializable default: %q, want read committed", isolation)
	}

	plans := func(statement string) (custom, generic int) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT custom_plans, generic_plans FROM pg_prepared_statements WHERE statement = $1`, statement).Scan(&custom, &generic); err != nil {
			t.Fatalf("pg_prepared_statements of %q: %v", statement, err)
		}
		return custom, generic
	}
	if custom, generic := plans(inTx); custom != 0 || generic != runs {
		t.Errorf("in Run's transactions: %d custom and %d generic plans in %d runs, want 0 and %d", custom, generic, runs, runs)
	}
	if custom, _ := plans(onPool); custom < 5 {
		t.Errorf("on the pool: %d custom plans in %d runs, want the server's default (5 or more): the setting leaked out of the transaction", custom, runs)
	}
}
