package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/internal/pgtest"
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
		dsn := pgtest.DSN(t)
		var out strings.Builder
		if err := benchCmd([]string{"seq", "-n", "20", "-backend", "postgres", "-dsn", dsn}, &out); err != nil {
			t.Fatalf("bench seq: %v\n%s", err, out.String())
		}
		m := regexp.MustCompile(`PostgreSQL schema (duroq_bench_\d+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("the report names no schema:\n%s", out.String())
		}
		if pgtest.SchemaExists(t, dsn, m[1]) {
			t.Fatalf("schema %s left behind", m[1])
		}
	})
}

// `duroq bench -processes 2` runs the workload in two worker processes, with starts
// from a client process: every instance completes, the workers report their ends and
// their CPU, and nothing is left behind.
func TestBenchProcesses(t *testing.T) {
	backends := map[string][]string{"sqlite": nil}
	if dsn := os.Getenv("DUROQ_POSTGRES_DSN"); dsn != "" {
		backends["postgres"] = []string{"-backend", "postgres", "-dsn", dsn}
	} else {
		t.Log("DUROQ_POSTGRES_DSN is not set: the PostgreSQL case does not run")
	}
	for name, args := range backends {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			var out strings.Builder
			err := benchCmd(append([]string{"seq", "-n", "200", "-processes", "2", "-json"}, args...), &out)
			if err != nil {
				t.Fatalf("bench seq -processes 2: %v\n%s", err, out.String())
			}
			var r scaleOutReport
			if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
				t.Fatalf("report: %v\n%s", err, out.String())
			}
			if r.Orchestrations != 200 || r.Processes != 2 || len(r.WorkerCPU) != 2 || r.OrchPerSec <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
				t.Fatalf("report: %+v", r)
			}
			ends := 0
			for i, c := range r.WorkerCPU {
				if c <= 0 {
					t.Errorf("worker %d used no CPU: %+v", i+1, r)
				}
				ends += r.WorkerEnds[i]
			}
			if ends < 200 {
				t.Errorf("the workers reported %v ends, want at least 200", r.WorkerEnds)
			}
			t.Logf("%d orchestrations/s, p50 %v; ends per worker %v", int(r.OrchPerSec), r.P50, r.WorkerEnds)
			if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
				t.Fatalf("left behind in the temporary directory: %v (%v)", left, err)
			}
		})
	}
}

// -cpuprofile and -memprofile each write a profile pprof reads (gzip-compressed
// protocol buffers) where they are told.
func TestBenchWritesProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	var out strings.Builder
	if err := benchCmd([]string{"seq", "-n", "20", "-backend", "sqlite-memory", "-cpuprofile", cpu, "-memprofile", mem}, &out); err != nil {
		t.Fatalf("bench seq: %v\n%s", err, out.String())
	}
	for _, path := range []string{cpu, mem} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %d bytes, not a gzip-compressed profile", filepath.Base(path), len(b))
		}
	}
}

// benchChildEnv holds the arguments of `duroq bench` for TestMain to run in a child
// process of TestBenchPipedIntoHeadDropsItsSchema.
const benchChildEnv = "DUROQ_BENCH_CHILD_ARGS"

// `duroq bench queue | head -2` on PostgreSQL: the benchmark finds its output closed
// at its next line and drops the schema it was using, where the default SIGPIPE used
// to end the process on the spot and leave the schema behind.
func TestBenchPipedIntoHeadDropsItsSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchChildEnv+"=queue -backend postgres -n 200 -dsn "+dsn)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	var head strings.Builder
	for range 2 { // a drain's line and its backend's, which names the schema
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the benchmark's output: %v (so far %q; stderr %s)", err, head.String(), stderr.String())
		}
		head.WriteString(line)
	}
	stdout.Close() // as head does when it has its lines
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the benchmark ran on for a minute after its output closed; stderr:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`PostgreSQL schema duroq_bench_(\d+)`).FindStringSubmatch(head.String())
	if m == nil {
		t.Fatalf("no schema named in %q", head.String())
	}
	first, _ := strconv.ParseInt(m[1], 10, 64)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'duroq\_bench\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		// Only this run's: a schema older than its first was left by something else.
		if n, err := strconv.ParseInt(strings.TrimPrefix(name, "duroq_bench_"), 10, 64); err == nil && n >= first {
			t.Errorf("schema %s left behind after the output closed (stderr: %s)", name, stderr.String())
			t.Cleanup(func() { _ = dropSchema(dsn, name) })
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// The report names the garbage collector's settings, which move a worker's CPU.
func TestBenchNamesGCSettings(t *testing.T) {
	for _, c := range []struct{ gogc, limit, want string }{
		{"", "", "GOGC=100"},
		{"400", "", "GOGC=400"},
		{"200", "512MiB", "GOGC=200 GOMEMLIMIT=512MiB"},
	} {
		t.Setenv("GOGC", c.gogc)
		t.Setenv("GOMEMLIMIT", c.limit)
		if got := gcSettings(); got != c.want {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: %q, want %q", c.gogc, c.limit, got, c.want)
		}
	}
	var out strings.Builder
	if err := benchCmd([]string{"seq", "-n", "20", "-backend", "sqlite-memory"}, &out); err != nil {
		t.Fatalf("bench seq: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), gcSettings()) {
		t.Fatalf("the report does not name %s:\n%s", gcSettings(), out.String())
	}
}

// -pool sizes a PostgreSQL provider's pool, and the report says so; the SQLite
// backends refuse it rather than ignore it.
func TestBenchPool(t *testing.T) {
	var out strings.Builder
	err := benchCmd([]string{"seq", "-n", "20", "-backend", "sqlite-memory", "-pool", "4"}, &out)
	if err == nil || !strings.Contains(err.Error(), "-pool 4") || !strings.Contains(err.Error(), "postgres") {
		t.Errorf("bench -backend sqlite-memory -pool 4: %v, want an error naming -pool and the postgres backend", err)
	}
	dsn := os.Getenv("DUROQ_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("DUROQ_POSTGRES_DSN is not set")
	}
	for pool, want := range map[string]string{"0": "(default pool)", "3": "(pool of 3)"} {
		out.Reset()
		if err := benchCmd([]string{"seq", "-n", "20", "-backend", "postgres", "-dsn", dsn, "-pool", pool}, &out); err != nil {
			t.Fatalf("bench -pool %s: %v\n%s", pool, err, out.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench -pool %s: the report does not say %q:\n%s", pool, want, out.String())
		}
	}
}

// With starts arriving while the runtime runs, the report says how long a start
// took; with every instance started first, it does not.
func TestBenchReportsStartLatency(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{[]string{"-concurrency", "50"}, true}, {nil, false}} {
		var out strings.Builder
		if err := benchCmd(append([]string{"seq", "-n", "200", "-backend", "sqlite-memory", "-json"}, c.args...), &out); err != nil {
			t.Fatalf("bench seq %v: %v\n%s", c.args, err, out.String())
		}
		var r bench.Report
		if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
			t.Fatalf("report: %v\n%s", err, out.String())
		}
		if got := r.StartP50 > 0 && r.StartP99 >= r.StartP50 && r.StartsPerSec > 0; got != c.want {
			t.Errorf("bench seq %v: StartOrchestration p50 %v p99 %v, %.0f starts/s; want them measured: %v", c.args, r.StartP50, r.StartP99, r.StartsPerSec, c.want)
		}
	}
}

// `duroq bench queue -consumers C -handlers H -per-key K -warmup` runs that one load,
// on 10×n messages, after a warm-up run, and no cycle; -consumers and -warmup are
// refused for other workloads.
func TestBenchQueueOneLoad(t *testing.T) {
	var out strings.Builder
	if err := benchCmd([]string{"queue", "-n", "50", "-backend", "sqlite-memory", "-consumers", "2", "-handlers", "4", "-per-key", "5", "-warmup", "-json"}, &out); err != nil {
		t.Fatalf("bench queue: %v\n%s", err, out.String())
	}
	var res struct {
		Loads []bench.QueueReport `json:"loads"`
		Cycle *bench.CycleReport  `json:"cycle"`
	}
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	want := bench.QueueConfig{Messages: 500, Consumers: 2, Concurrency: 4, PerKey: 5, Warmup: true}
	if len(res.Loads) != 1 || res.Loads[0].Config != want || res.Loads[0].DrainPerSec <= 0 || res.Cycle != nil {
		t.Errorf("bench queue -consumers 2 -handlers 4 -per-key 5 ran %+v and cycle %v; want one load of %+v, drained, and no cycle", res.Loads, res.Cycle, want)
	}
	if err := benchCmd([]string{"seq", "-n", "20", "-backend", "sqlite-memory", "-consumers", "2"}, &out); err == nil || !strings.Contains(err.Error(), "-consumers") {
		t.Errorf("bench seq -consumers 2: %v, want an error naming -consumers", err)
	}
	if err := benchCmd([]string{"seq", "-n", "20", "-backend", "sqlite-memory", "-warmup"}, &out); err == nil || !strings.Contains(err.Error(), "-warmup") {
		t.Errorf("bench seq -warmup: %v, want an error naming -warmup", err)
	}
	if err := benchCmd([]string{"queue", "-backend", "sqlite-memory", "-consumers", "2", "-handlers", "0"}, &out); err == nil || !strings.Contains(err.Error(), "-handlers 0") {
		t.Errorf("bench queue -handlers 0: %v, want an error naming -handlers", err)
	}
}
