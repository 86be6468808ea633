package main

import (
	"database/sql"
	"os"
	"regexp"
	"strings"
	"testing"
)

// `duroq bench` removes what it created: the temporary directory of its SQLite file
// and its PostgreSQL schema.
func TestBenchLeavesNothingBehind(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		var out strings.Builder
		if err := benchCmd([]string{"seq", "-n", "20"}, &out); err != nil {
			t.Fatalf("bench seq: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "SQLite "+tmp) {
			t.Fatalf("the benchmark's file was not under TMPDIR:\n%s", out.String())
		}
		if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
			t.Fatalf("left behind in the temporary directory: %v (%v)", left, err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := os.Getenv("DUROQ_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("set DUROQ_POSTGRES_DSN (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL case")
		}
		var out strings.Builder
		if err := benchCmd([]string{"seq", "-n", "20", "-backend", "postgres", "-dsn", dsn}, &out); err != nil {
			t.Fatalf("bench seq: %v\n%s", err, out.String())
		}
		m := regexp.MustCompile(`PostgreSQL schema (\S+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("the report names no schema:\n%s", out.String())
		}
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow("SELECT count(*) FROM pg_namespace WHERE nspname = $1", m[1]).Scan(&n); err != nil || n != 0 {
			t.Fatalf("schema %s left behind (%d, %v)", m[1], n, err)
		}
	})
}
