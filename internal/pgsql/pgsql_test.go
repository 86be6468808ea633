package pgsql_test

import (
	"testing"

	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/jmoiron/sqlx"
)

// A statement run in Run's transactions is planned once, generically, on its
// connection; the same statement run on the pool outside them is planned for its
// arguments as the server's plan_cache_mode says (at least its first five runs).
func TestRunPlansStatementsOnce(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	ctx := t.Context()
	db, err := pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema, MaxOpenConns: 1}) // one session: its statements
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
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
