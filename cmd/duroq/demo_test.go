package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	essqlite "github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/internal/sqliteconn/sqliteconntest"
	mqsqlite "github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/runtime"
)

// demoChildEnv makes the test binary run the demo as a process the test can kill.
const demoChildEnv = "DUROQ_DEMO_CHILD_DB"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == benchProcessCmd { // a process of TestBenchProcesses
		if err := benchProcess(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if args := os.Getenv(benchChildEnv); args != "" { // a process of TestBenchPipedIntoHeadDropsItsSchema
		if err := benchCmd(strings.Fields(args), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if db := os.Getenv(demoChildEnv); db != "" {
		if err := demo([]string{"-db", db, "-orders", "30", "-work", "30ms"}, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Every order completes, approved the way its plan says: an event raised while the
// order waits and a message queued before it waits both approve it; an event raised
// before it waits is dropped, so the order is auto-approved at the timeout. The demo
// leaves its database closed, whole in its file.
func TestDemoCompletesEveryOrder(t *testing.T) {
	var out strings.Builder
	db := filepath.Join(t.TempDir(), "demo.db")
	if err := demo([]string{"-db", db, "-orders", "6", "-work", "1ms"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"all 6 orders completed",
		"order-001  Completed  approved by the raised event, charged $25, 1 parcels",
		"order-002  Completed  approved by the queued message, charged $50, 2 parcels",
		"order-003  Completed  auto-approved: no approval within 2s, charged $75, 3 parcels",
		"order-004  Completed  approved by the raised event",
		"order-005  Completed  approved by the queued message",
		"order-006  Completed  auto-approved",
		"raised while it waits (RaiseEvent): 2 of 2 orders approved by the raised event",
		"queued before it waits (EnqueueEvent): 2 of 2 orders approved by the queued message",
		"raised before it waits (RaiseEvent): 2 of 2 orders auto-approved"} {
		if !strings.Contains(got, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, got)
		}
	}
	copied := sqliteconntest.ClosedFile(t, db)
	p, err := adapter.New(mqsqlite.New(copied, mqsqlite.Options{}), essqlite.New(copied, essqlite.Options{}), adapter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := runtime.NewClient(p).Status(t.Context(), "order-006"); err != nil || st.State != runtime.StateCompleted {
		t.Fatalf("order-006 in a copy of the demo's closed file: %+v, %v; want it completed", st, err)
	}
	url := serveUI(t, "-db", db) // the UI serves what the demo left, once it is closed
	uiPage(t, url+"/instances?orchestration=ProcessOrder", `data-id="order-001"`, `data-id="order-006"`)
	uiPage(t, url+"/instance?id=order-003", "auto-approved", "TimerFired", "ShipOrder")
}

// With -otel stdout the demo prints the spans of each order as JSON lines: one trace
// per order, from its start through its turns, activities and sub-orchestration; and
// at exit its metrics, one JSON line.
func TestDemoTraces(t *testing.T) {
	var out strings.Builder
	db := filepath.Join(t.TempDir(), "demo.db")
	if err := demo([]string{"-db", db, "-orders", "2", "-work", "1ms", "-otel", "stdout"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	traces := map[string][]string{} // trace id → span names
	var metricLines int
	var metrics []string
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var span struct {
			Name         string
			SpanContext  struct{ TraceID string }
			ScopeMetrics json.RawMessage // a metrics line's, "null" when empty
		}
		if err := json.Unmarshal([]byte(line), &span); err != nil {
			t.Fatalf("a span line is not JSON: %v\n%.300s", err, line)
		}
		if span.ScopeMetrics != nil {
			metricLines++
			var scopes []struct{ Metrics []struct{ Name string } }
			if err := json.Unmarshal(span.ScopeMetrics, &scopes); err != nil {
				t.Fatalf("a metrics line's ScopeMetrics: %v\n%.300s", err, line)
			}
			for _, sm := range scopes {
				for _, m := range sm.Metrics {
					metrics = append(metrics, m.Name)
				}
			}
			continue
		}
		traces[span.SpanContext.TraceID] = append(traces[span.SpanContext.TraceID], span.Name)
	}
	if metricLines != 1 || !slices.Contains(metrics, "duroq.turn.duration") || !slices.Contains(metrics, "duroq.activity.duration") {
		t.Errorf("%d metrics lines with %v, want one with duroq.turn.duration and duroq.activity.duration", metricLines, metrics)
	}
	if len(traces) != 2 {
		t.Fatalf("%d traces, want one per order:\n%v", len(traces), traces)
	}
	for id, names := range traces {
		for _, want := range []string{"turn ProcessOrder", "turn ShipOrder", "activity ChargeCard", "activity PackItem"} {
			if !slices.Contains(names, want) {
				t.Errorf("trace %s has no %q: %v", id, want, names)
			}
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "order order-00") }) {
			t.Errorf("trace %s has no order span: %v", id, names)
		}
	}
	if err := demo([]string{"-db", db, "-otel", "jaeger"}, &out); err == nil || !strings.Contains(err.Error(), "want stdout") {
		t.Errorf("-otel jaeger: %v, want a refusal", err)
	}
}

// The demo runs on PostgreSQL too, in the schema it is given, and the UI serves
// what it left there.
func TestDemoOnPostgres(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	var out strings.Builder
	if err := demo([]string{"-db", dsn, "-schema", schema, "-orders", "3", "-work", "1ms"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "all 3 orders completed") {
		t.Fatalf("demo output:\n%s", out.String())
	}
	url := serveUI(t, "-db", dsn, "-schema", schema)
	uiPage(t, url+"/instances?orchestration=ProcessOrder", `data-id="order-001"`, `data-id="order-003"`)
	uiPage(t, url+"/instance?id=order-002", "approved by the queued message", "ShipOrder")
	if err := demo([]string{"-db", dsn, "-fresh"}, &out); err == nil || !strings.Contains(err.Error(), "-schema") {
		t.Errorf("-fresh on PostgreSQL: %v, want a refusal naming -schema", err)
	}
}

// The demo killed with SIGKILL mid-run and run again on the same file completes
// every order.
func TestDemoResumesAfterKill9(t *testing.T) {
	db := filepath.Join(t.TempDir(), "demo.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), demoChildEnv+"="+db)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill once some orders are past their first steps.
	progressed := make(chan struct{})
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			lines <- sc.Text()
			if !once && (strings.Contains(sc.Text(), "awaiting approval") || strings.Contains(sc.Text(), "shipping")) {
				once = true
				close(progressed)
			}
		}
	}()
	select {
	case <-progressed:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the demo made no progress in 30s")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	var first []string
	for l := range lines {
		first = append(first, l)
	}
	if out := strings.Join(first, "\n"); strings.Contains(out, "all 30 orders completed") {
		t.Fatalf("the demo finished before the kill; nothing was tested:\n%s", out)
	}

	var second strings.Builder
	if err := demo([]string{"-db", db, "-orders", "30", "-work", "1ms"}, &second); err != nil {
		t.Fatalf("rerun: %v\n%s", err, second.String())
	}
	if !strings.Contains(second.String(), "all 30 orders completed") {
		t.Fatalf("rerun did not complete every order:\n%s", second.String())
	}
}
