package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestSmoke runs every workload on a few messages so that the command keeps building
// and running against the pinned library versions.
func TestSmoke(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-n", "200", "-json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("decode -json output: %v\n%s", err, out.Bytes())
	}
	if rep.Settings.Messages != 200 || rep.Settings.PayloadBytes != 128 {
		t.Errorf("settings = %+v, want 200 messages of 128 bytes", rep.Settings)
	}
	for _, d := range []string{"mattn", "modernc"} {
		if rep.Settings.SQLite[d] == "" {
			t.Errorf("no SQLite version for %s", d)
		}
	}
	type key struct {
		lib, workload string
		consumers     int
	}
	got := map[key]int{}
	for _, r := range rep.Results {
		if r.Version == "" || !strings.HasPrefix(r.Version, "v") {
			t.Errorf("%s %s: version %q", r.Library, r.Workload, r.Version)
		}
		if r.Messages != 200 || r.PerSec <= 0 {
			t.Errorf("%+v: want 200 messages at a positive rate", r)
		}
		workload, _, _ := strings.Cut(r.Workload, " ")
		if r.Library == "river" {
			driver, _, _ := strings.Cut(r.Driver, " ")
			workload += " " + driver
		}
		got[key{r.Library, workload, r.Consumers}]++
		if workload == "cycle" && (r.P50 <= 0 || r.P99 < r.P50) {
			t.Errorf("%+v: want latency percentiles", r)
		}
	}
	want := []key{{"goqite", "cycle", 1}}
	for _, c := range []int{1, 4, 16} {
		want = append(want, key{"goqite", "drain", c},
			key{"river", "drain github.com/mattn/go-sqlite3", c}, key{"river", "drain modernc.org/sqlite", c})
		if os.Getenv("DUROQ_POSTGRES_DSN") != "" {
			want = append(want, key{"river", "drain github.com/jackc/pgx/v5", c})
		}
	}
	if pg := os.Getenv("DUROQ_POSTGRES_DSN") != ""; pg != (rep.Settings.PostgreSQL != "") {
		t.Errorf("DUROQ_POSTGRES_DSN set: %v, but the PostgreSQL version is %q", pg, rep.Settings.PostgreSQL)
	}
	for _, k := range want {
		if got[k] != 1 {
			t.Errorf("%v: %d results, want 1 (results: %v)", k, got[k], got)
		}
	}
	// One enqueue per drain run.
	if enq := got[key{"goqite", "enqueue", 1}]; enq != 3 {
		t.Errorf("goqite enqueue results = %d, want 3", enq)
	}
}

func TestTable(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-n", "20", "-libs", "goqite", "-consumers", "2"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`synchronous=NORMAL`, `_journal_mode=WAL`, `(?m)^library +version +workload +consumers +msgs/s`,
		`(?m)^goqite +v\S+ +drain \(Receive \+ Delete\) +2 +\d+ `, `(?m)^goqite +v\S+ +cycle .* 1 +\d+ +\d\S*s `} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("table does not match %s:\n%s", re, out.String())
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"-consumers", "x"}, {"-libs", "nope"}, {"-river-drivers", "pg"}, {"-river-drivers", "postgres", "-postgres", ""}, {"extra"}} {
		if err := run(t.Context(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) = nil error, want one", args)
		}
	}
}
