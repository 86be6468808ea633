package pgsql_test

import (
	"bytes"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/pgdb"
)

// StatsGuard analyses a table without planner statistics once it is large enough to
// matter, again when it has doubled since, leaves a small one alone, and stops on
// Close.
func TestStatsGuardAnalysesLargeTablesWithoutOrWithStaleStatistics(t *testing.T) {
	ctx := t.Context()
	db := openSchemaDB(t, pgdb.Options{})
	for _, stmt := range []string{
		// Autovacuum off, so that only the guard can analyse them.
		`CREATE TABLE big (id int, v text) WITH (autovacuum_enabled = false)`,
		`CREATE TABLE small (id int) WITH (autovacuum_enabled = false)`,
		`INSERT INTO big SELECT i, repeat('x', 100) FROM generate_series(1, 5000) AS i`,
		`INSERT INTO small VALUES (1)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	analysed := func(table string) bool {
		var n int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = $1`, table); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	g := &pgsql.StatsGuard{DB: db, Tables: []string{"big", "small"}}
	g.Ensure()
	deadline := time.Now().Add(10 * time.Second)
	for !analysed("big") {
		if time.Now().After(deadline) {
			t.Fatal("the large table had no statistics 10 s after Ensure")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if analysed("small") {
		t.Error("the small table was analysed; want it left to autovacuum")
	}

	// Tripled since its statistics were taken: analysed again, so that plans made
	// for its old size are made again.
	counted := func() int {
		var pages int
		if err := db.GetContext(ctx, &pages, `SELECT relpages FROM pg_class WHERE oid = 'big'::regclass`); err != nil {
			t.Fatal(err)
		}
		return pages
	}
	before := counted()
	if _, err := db.ExecContext(ctx, `INSERT INTO big SELECT i, repeat('x', 100) FROM generate_series(1, 10000) AS i`); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for counted() < 2*before {
		if time.Now().After(deadline) {
			t.Fatalf("the large table's statistics still counted %d pages 10 s after it tripled from %d", counted(), before)
		}
		g.Ensure()
		time.Sleep(20 * time.Millisecond)
	}
	g.Close()
	g.Ensure() // after Close: starts nothing, and returns
	g.Close()
}

// While another process holds the guard's advisory lock (a test connection stands
// in for it), a check leaves the tables alone; once it lets go, the next check
// analyses them.
func TestStatsGuardLeavesTablesToAnotherProcessChecking(t *testing.T) {
	ctx := t.Context()
	db := openSchemaDB(t, pgdb.Options{})
	for _, stmt := range []string{
		`CREATE TABLE big (id int, v text) WITH (autovacuum_enabled = false)`,
		`INSERT INTO big SELECT i, repeat('x', 100) FROM generate_series(1, 5000) AS i`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	tables := []string{"big"}
	other, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	if _, err := other.ExecContext(ctx, `SELECT pg_advisory_xact_lock(`+pgsql.StatsLockKey+`)`, tables); err != nil {
		t.Fatal(err)
	}

	var gaveWay atomic.Bool
	g := &pgsql.StatsGuard{DB: db, Tables: tables, Log: slog.New(slog.NewTextHandler(giveWayWriter{&gaveWay}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	defer g.Close()
	g.Ensure()
	deadline := time.Now().Add(10 * time.Second)
	for !gaveWay.Load() {
		if time.Now().After(deadline) {
			t.Fatal("no check gave way to the lock's holder within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	analysed := func() bool {
		var n int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'big'`); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	if analysed() {
		t.Fatal("the table was analysed while another process held the lock")
	}

	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !analysed() {
		if time.Now().After(deadline) {
			t.Fatal("the table had no statistics 10 s after the other process let go")
		}
		g.Ensure()
		time.Sleep(20 * time.Millisecond)
	}
}

// giveWayWriter notes a log record of a check giving way to another process.
type giveWayWriter struct{ saw *atomic.Bool }

func (w giveWayWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("another process is checking")) {
		w.saw.Store(true)
	}
	return len(p), nil
}
