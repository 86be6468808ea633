package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	espostgres "github.com/duroq/duroq/eventstore/postgres"
	essqlite "github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/pgtest"
	mqpostgres "github.com/duroq/duroq/mq/postgres"
	mqsqlite "github.com/duroq/duroq/mq/sqlite"
	"github.com/jackc/pgx/v5"
)

// migrateRun runs `duroq migrate args...` and returns its standard output.
func migrateRun(args ...string) (string, error) {
	var out bytes.Buffer
	err := migrateCmd(args, &out, io.Discard)
	return out.String(), err
}

// checkMigrateCycle checks migrate status, status -check and up on db (-schema
// schema), which holds no duroq table: everything is pending until up applies it.
// create is the flag up needs ("-create" when the file or schema is missing).
func checkMigrateCycle(t *testing.T, db, schema string, create ...string) {
	t.Helper()
	backend := "sqlite"
	if isPostgres(db) {
		backend = "postgres"
	}
	var perLine []int // each line's migrations, as the backend embeds them
	total := 0
	for _, l := range backends[backend].lines {
		files, err := fs.Glob(l.fsys, "migrations/*.sql")
		if err != nil || len(files) == 0 {
			t.Fatalf("line %s embeds %v: %v", l.name, files, err)
		}
		perLine = append(perLine, len(files))
		total += len(files)
	}
	pending := fmt.Sprintf("%d migrations pending", total)
	base := []string{"-db", db, "-schema", schema}
	out, err := migrateRun(append([]string{"status"}, base...)...)
	if err != nil || !strings.Contains(out, pending) || !strings.Contains(out, "0001_init.sql") {
		t.Fatalf("status of an empty database = %v\n%s", err, out)
	}
	out, err = migrateRun(append([]string{"status", "-check", "-json"}, base...)...)
	if err == nil || exitCode(err) != 1 || err.Error() != "duroq migrate status: "+pending {
		t.Fatalf("status -check of an empty database = %v; want exit 1, %s", err, pending)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Pending != total || len(st.Lines) != 2 ||
		st.Lines[0].Line != "mq" || st.Lines[0].Applied != 0 || st.Lines[0].Latest != perLine[0] || len(st.Lines[1].Pending) != perLine[1] {
		t.Fatalf("status -json = %v, %+v\n%s", err, st, out)
	}
	out, err = migrateRun(append(append([]string{"up"}, create...), base...)...)
	if err != nil || !strings.Contains(out, fmt.Sprintf("applied %d migrations", total)) || !strings.Contains(out, "up to date") {
		t.Fatalf("up = %v\n%s", err, out)
	}
	out, err = migrateRun(append([]string{"status", "-check"}, base...)...)
	if err != nil || !strings.Contains(out, "up to date") {
		t.Fatalf("status -check after up = %v\n%s", err, out)
	}
	if out, err := migrateRun(append([]string{"up"}, base...)...); err != nil || !strings.Contains(out, "applied 0 migrations") {
		t.Fatalf("up again = %v\n%s", err, out)
	}
	// The commands that read now open the database.
	for _, cmd := range []func([]string, io.Writer, io.Writer) error{instancesCmd, queuesCmd} {
		if err := cmd(append([]string{"list"}, base...), io.Discard, io.Discard); err != nil {
			t.Errorf("list after up: %v", err)
		}
	}
}

func TestMigrateSQLite(t *testing.T) {
	dir := t.TempDir()

	// A missing file: status creates nothing, up needs -create.
	missing := filepath.Join(dir, "new.db")
	if _, err := migrateRun("up", "-db", missing); err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "-create creates it") {
		t.Fatalf("up of a missing file without -create = %v", err)
	}
	if out, err := migrateRun("status", "-db", missing); err != nil || !strings.Contains(out, "does not exist") {
		t.Fatalf("status of a missing file = %v\n%s", err, out)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("status or up created %s", missing)
	}
	checkMigrateCycle(t, missing, "public", "-create")

	// An empty file: the commands that read refuse it and leave it empty.
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, cmd := range map[string]func([]string, io.Writer, io.Writer) error{"instances": instancesCmd, "queues": queuesCmd, "schedules": schedulesCmd} {
		err := cmd([]string{"list", "-db", empty}, io.Discard, io.Discard)
		if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "no duroq tables in "+empty) {
			t.Errorf("%s list of an empty file = %v; want it refused", name, err)
		}
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Fatalf("the empty file was written: %v, %v", fi, err)
	}
	checkMigrateCycle(t, empty, "public")
	if matches, _ := filepath.Glob(filepath.Join(dir, "*-wal")); len(matches) > 0 {
		t.Errorf("left behind: %v", matches)
	}
}

// schemaTables counts the schemas named schema and the tables in it.
func schemaTables(t *testing.T, dsn, schema string) (schemas, tables int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	return schemas, tables
}

func TestMigratePostgres(t *testing.T) {
	dsn, schema := pgtest.Schema(t) // skips, saying "PostgreSQL tests skipped", without DUROQ_POSTGRES_DSN
	_, typo := pgtest.Schema(t)

	// An empty schema and a mistyped one: the commands that read refuse them and
	// create nothing.
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	conn.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schema  string
		schemas int
	}{{schema, 1}, {typo, 0}} {
		for name, cmd := range map[string]func([]string, io.Writer, io.Writer) error{"instances": instancesCmd, "queues": queuesCmd, "schedules": schedulesCmd} {
			err := cmd([]string{"list", "-db", dsn, "-schema", c.schema}, io.Discard, io.Discard)
			if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), `no duroq tables in schema "`+c.schema+`"`) {
				t.Errorf("%s list in schema %s = %v; want it refused", name, c.schema, err)
			}
		}
		if err := exportCmd([]string{"-db", dsn, "-schema", c.schema}, io.Discard); err == nil || !strings.Contains(err.Error(), "no duroq tables") {
			t.Errorf("export in schema %s = %v; want it refused", c.schema, err)
		}
		if schemas, tables := schemaTables(t, dsn, c.schema); schemas != c.schemas || tables != 0 {
			t.Fatalf("schema %s: %d schemas, %d tables after the refused commands; want %d, 0", c.schema, schemas, tables, c.schemas)
		}
	}

	// A mistyped schema: status creates nothing, up needs -create.
	if out, err := migrateRun("status", "-db", dsn, "-schema", typo); err != nil || !strings.Contains(out, "does not exist") {
		t.Fatalf("status of a missing schema = %v\n%s", err, out)
	}
	if _, err := migrateRun("up", "-db", dsn, "-schema", typo); err == nil || !strings.Contains(err.Error(), "-create creates it") {
		t.Fatalf("up of a missing schema without -create = %v", err)
	}
	if schemas, _ := schemaTables(t, dsn, typo); schemas != 0 {
		t.Fatalf("status or up created schema %s", typo)
	}

	checkMigrateCycle(t, dsn, schema)
	checkMigrateCycle(t, dsn, typo, "-create")
}

func TestMigrateSQL(t *testing.T) {
	for backend, lines := range map[string][][2]any{
		"sqlite":   {{"mq", mqsqlite.Migrations()}, {"eventstore", essqlite.Migrations()}},
		"postgres": {{"mq", mqpostgres.Migrations()}, {"eventstore", espostgres.Migrations()}},
	} {
		all, err := migrateRun("sql", "-backend", backend)
		if err != nil {
			t.Fatalf("sql -backend %s: %v", backend, err)
		}
		at := 0 // where in all the next file must come
		for _, l := range lines {
			line, fsys := l[0].(string), l[1].(fs.FS)
			one, err := migrateRun("sql", "-backend", backend, "-line", line)
			if err != nil {
				t.Fatalf("sql -backend %s -line %s: %v", backend, line, err)
			}
			entries, err := fs.ReadDir(fsys, "migrations")
			if err != nil || len(entries) == 0 {
				t.Fatalf("%s %s migrations: %v, %d files", backend, line, err, len(entries))
			}
			oneAt := 0
			for i, e := range entries { // ReadDir sorts by name: in version order
				body, err := fs.ReadFile(fsys, "migrations/"+e.Name())
				if err != nil {
					t.Fatal(err)
				}
				header := "-- duroq migration: line " + line + ", version " + strconv.Itoa(i+1) + " (" + e.Name() + ")\n"
				want := header + strings.TrimRight(string(body), "\n") + "\n"
				j := strings.Index(all[at:], want)
				k := strings.Index(one[oneAt:], want)
				if j < 0 || k < 0 {
					t.Fatalf("sql -backend %s: %s is missing or out of order (all %d, -line %d)", backend, e.Name(), j, k)
				}
				at, oneAt = at+j+len(want), oneAt+k+len(want)
				record := "INSERT INTO duroq_migrations (line, version, name) VALUES ('" + line + "', " + strconv.Itoa(i+1) + ", '" + e.Name() + "');\n"
				if !strings.HasPrefix(all[at:], record) {
					t.Errorf("sql -backend %s: %s is not followed by %q", backend, e.Name(), record)
				}
			}
			if n := strings.Count(one, "-- duroq migration: line "); n != len(entries) || strings.Count(one, "line "+line+",") != n {
				t.Errorf("sql -backend %s -line %s prints %d migrations; want the %d of %s", backend, line, n, len(entries), line)
			}
		}
	}
	for _, args := range [][]string{{"sql"}, {"sql", "-backend", "mysql"}, {"sql", "-backend", "sqlite", "-line", "x"}, {"status"}, {"up"}} {
		if _, err := migrateRun(args...); err == nil || exitCode(err) != 2 {
			t.Errorf("migrate %q = %v; want a usage error", args, err)
		}
	}
}
