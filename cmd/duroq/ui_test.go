package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/sqliteprovider"
)

// serveUI runs `duroq ui` with args on a free loopback port until the test ends
// and returns the URL it serves.
func serveUI(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out, w := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- uiCmd(ctx, append(args, "-addr", "127.0.0.1:0"), w, io.Discard)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("duroq ui after its context ended: %v, want nil", err)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("duroq ui printed no address: %v", err)
	}
	go io.Copy(io.Discard, out)
	_, rest, _ := strings.Cut(line, "http://")
	addr, _, _ := strings.Cut(rest, "/")
	return "http://" + addr
}

// uiPage fetches a page and fails unless it answers 200 with every one of want.
func uiPage(t *testing.T, url string, want ...string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	for _, w := range want {
		if !strings.Contains(string(b), w) {
			t.Errorf("GET %s: no %q", url, w)
		}
	}
	return string(b)
}

// TestUICommand serves a SQLite file and a PostgreSQL schema the runtime filled.
func TestUICommand(t *testing.T) {
	check := func(t *testing.T, args ...string) {
		url := serveUI(t, args...)
		uiPage(t, url+"/instances", `data-id="ann"`, `data-id="bob"`, `data-id="chain"`)
		uiPage(t, url+"/instance?id=ann", "hello ann", "ActivityCompleted", "/instance/delete?id=ann")
		uiPage(t, url+"/queues", "<h1>Queues</h1>")
		ro := serveUI(t, append(args, "-read-only")...)
		if page := uiPage(t, ro+"/instance?id=ann", "read-only"); strings.Contains(page, "/instance/delete") {
			t.Error("-read-only offers a delete")
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "app.db")
		p, err := sqliteprovider.Open(path, sqliteprovider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		record(t, p)
		p.Close()
		check(t, "-db", path)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t)
		p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
		if err != nil {
			t.Fatal(err)
		}
		record(t, p)
		p.Close()
		check(t, "-db", dsn, "-schema", schema)
	})
}

func TestUICommandRefusesBadCommandLines(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-db is required"},
		{[]string{"-db", missing, "extra"}, "takes no arguments"},
		{[]string{"-db", missing}, "no SQLite database"},
		{[]string{"-nope"}, "flag provided but not defined"},
	} {
		err := uiCmd(t.Context(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("duroq ui %q: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

func TestUIDoesNotPrintThePassword(t *testing.T) {
	if got := redacted("postgres://app:s3cret@db:5432/app"); strings.Contains(got, "s3cret") || !strings.Contains(got, "app:xxxxx@db") {
		t.Errorf("redacted: %q", got)
	}
	if got := redacted("data/app.db"); got != "data/app.db" {
		t.Errorf("a SQLite path redacted to %q", got)
	}
}
