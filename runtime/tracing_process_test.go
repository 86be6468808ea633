package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqliteprovider"
)

// xpChildEnv makes the test binary act as the process that runs Child in
// TestTracingAcrossProcesses; its value is the JSON of an xpConfig.
const xpChildEnv = "DUROQ_TRACING_PROCESS_CHILD"

const (
	xpParentID = "parent-1"
	xpChildID  = "child-1"
	xpFanOut   = 3
	// xpDeadline bounds every wait of the test, in either process (a run takes about
	// a second).
	xpDeadline = 20 * time.Second
)

// xpConfig tells the child process where the database is and where to write its
// spans.
type xpConfig struct {
	Backend string `json:"backend"` // "sqlite" or "postgres"
	Path    string `json:"path"`    // sqlite: the database file
	DSN     string `json:"dsn"`     // postgres: the server
	Schema  string `json:"schema"`  // postgres: the test's schema
	Spans   string `json:"spans"`   // the file the child writes its spans to
}

// xpSpan is an ended span as both processes report it: the parent converts its
// exporter's spans, the child writes its own as JSON.
type xpSpan struct {
	Process      string            `json:"process"` // "parent" or "child": the process that recorded it
	Name         string            `json:"name"`
	TraceID      string            `json:"trace_id"`
	SpanID       string            `json:"span_id"`
	ParentID     string            `json:"parent_id"`
	ParentRemote bool              `json:"parent_remote"` // the parent came in a traceparent
	Start        time.Time         `json:"start"`
	Status       string            `json:"status"`
	Events       []string          `json:"events"`
	Attrs        map[string]string `json:"attrs"`
}

// xpChildFile is what the child process writes.
type xpChildFile struct {
	PID   int      `json:"pid"`
	Spans []xpSpan `json:"spans"`
}

func xpSpans(process string, stubs tracetest.SpanStubs) []xpSpan {
	out := make([]xpSpan, 0, len(stubs))
	for _, s := range stubs {
		x := xpSpan{Process: process, Name: s.Name, TraceID: s.SpanContext.TraceID().String(), SpanID: s.SpanContext.SpanID().String(),
			ParentRemote: s.Parent.IsRemote(), Start: s.StartTime, Status: s.Status.Code.String(), Attrs: map[string]string{}}
		if s.Parent.SpanID().IsValid() {
			x.ParentID = s.Parent.SpanID().String()
		}
		for _, e := range s.Events {
			x.Events = append(x.Events, e.Name)
		}
		for _, kv := range s.Attributes {
			x.Attrs[string(kv.Key)] = kv.Value.Emit()
		}
		out = append(out, x)
	}
	return out
}

// xpParentRegistry: Parent fans out Fan activities, then calls Flaky (it fails once
// and is retried), then Child, which only the other process has.
func xpParentRegistry(flaky *atomic.Int32) *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Fan", func(_ *runtime.ActivityContext, in string) (string, error) { return "fan" + in, nil })
	_ = reg.RegisterActivity("Flaky", func(_ *runtime.ActivityContext, in string) (string, error) {
		if flaky.Add(1) == 1 {
			return "", errors.New("first call fails")
		}
		return "ok", nil
	})
	_ = reg.RegisterOrchestration("Parent", func(ctx *runtime.Context, in string) (string, error) {
		fs := make([]*runtime.Future, xpFanOut)
		for i := range fs {
			fs[i] = ctx.ScheduleActivity("Fan", strconv.Itoa(i))
		}
		if err := errors.Join(ctx.Join(fs...)...); err != nil {
			return "", err
		}
		f, err := ctx.ScheduleActivityWithRetry("Flaky", in, runtime.RetryPolicy{MaxAttempts: 2, Backoff: runtime.FixedBackoff{Interval: time.Millisecond}}).Get()
		if err != nil {
			return "", err
		}
		c, err := ctx.ScheduleSubOrchestration("Child", in, runtime.WithInstanceID(xpChildID)).Get()
		if err != nil {
			return "", err
		}
		return f + "+" + c, nil
	})
	return reg
}

// xpChildRegistry: Child calls Greet; neither is in the parent process.
func xpChildRegistry() *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Greet", func(_ *runtime.ActivityContext, in string) (string, error) { return "hello " + in, nil })
	_ = reg.RegisterOrchestration("Child", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Greet", in).Get()
	})
	return reg
}

func xpOpen(ctx context.Context, cfg xpConfig) (*adapter.Provider, error) {
	switch cfg.Backend {
	case "sqlite":
		return sqliteprovider.Open(cfg.Path, sqliteprovider.Options{})
	case "postgres":
		return pgprovider.Open(ctx, cfg.DSN, pgprovider.Options{DB: pgdb.Options{Schema: cfg.Schema, MaxOpenConns: 4}})
	}
	return nil, fmt.Errorf("unknown backend %q", cfg.Backend)
}

// xpRun runs a runtime of reg traced by tp on p until stop is called (or the test
// ends). Each process offers back what only the other has: it must not give it up
// as poison (MaxAttempts) before the other takes it.
func xpRun(t *testing.T, p provider.Provider, reg *runtime.Registry, tp trace.TracerProvider) (rt *runtime.Runtime, stop func()) {
	t.Helper()
	// Locks outlast the test's deadline: a claim the child process left behind when
	// it stopped (as mq/postgres and the adapter once could, cut short in their
	// commit) would hold the parent's messages until the test fails.
	rt, err := runtime.New(p, reg, runtime.Options{TracerProvider: tp, MaxAttempts: 1000,
		UnregisteredBackoff: time.Millisecond, MinPollInterval: time.Millisecond, OrchestratorLockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-ran; err != nil {
				t.Errorf("runtime: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return rt, stop
}

// TestTracingAcrossProcesses: the trace of an orchestration with a fan-out, a
// retried activity and a child run by another OS process (this test binary run
// again) is one tree, each span once: the child's turns, recorded by the other
// process's tracer, are children of the parent's turn that started it, linked only
// by the traceparent the database carried.
func TestTracingAcrossProcesses(t *testing.T) {
	if raw := os.Getenv(xpChildEnv); raw != "" {
		xpChild(t, raw)
		return
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) { testTracingAcrossProcesses(t, backend) })
	}
}

// xpChild is the other process: it runs Child until child-1 completed, then writes the spans it recorded to the file the parent named.
func xpChild(t *testing.T, raw string) {
	var cfg xpConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("child: %s: %v", xpChildEnv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), xpDeadline)
	defer cancel()
	p, err := xpOpen(ctx, cfg)
	if err != nil {
		t.Fatalf("child: open: %v", err)
	}
	defer p.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	rt, stop := xpRun(t, p, xpChildRegistry(), tp)
	st, waitErr := rt.Client().WaitForOrchestration(ctx, xpChildID)
	// Stopped at once, the runtime may be stopped mid-fetch, claiming the completion
	// its last commit sent parent-1: the parent's long poll, which skipped the row
	// while it was claimed, must look again soon (mq/postgres once let it sleep 30 s).
	stop() // every span of Child has ended: the last turn's before its commit
	data, err := json.Marshal(xpChildFile{PID: os.Getpid(), Spans: xpSpans("child", exp.GetSpans())})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Spans, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if waitErr != nil || st.State != runtime.StateCompleted {
		t.Fatalf("child: %s: %+v, %v", xpChildID, st, waitErr)
	}
	t.Logf("child process %d: %s completed; %d spans written to %s", os.Getpid(), xpChildID, len(exp.GetSpans()), cfg.Spans)
}

func testTracingAcrossProcesses(t *testing.T, backend string) {
	began := time.Now()
	dir := t.TempDir()
	cfg := xpConfig{Backend: backend, Spans: filepath.Join(dir, "child-spans.json")}
	if backend == "sqlite" {
		cfg.Path = filepath.Join(dir, "app.db")
	} else {
		cfg.DSN, cfg.Schema = pgtest.Schema(t) // skips, saying so, without DUROQ_POSTGRES_DSN
	}
	ctx, cancel := context.WithTimeout(t.Context(), xpDeadline)
	defer cancel()
	// Opened (and migrated) before the child process opens it.
	p, err := xpOpen(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var flaky atomic.Int32
	rt, _ := xpRun(t, p, xpParentRegistry(&flaky), tp)

	// The child process: this test again, as the runtime that has Child.
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTracingAcrossProcesses$", "-test.count=1", "-test.v", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), xpChildEnv+"="+string(raw))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The wait for parent-1 ends when the child process fails: nobody else runs Child.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	childDone := make(chan struct{})
	var childErr error
	go func() {
		childErr = cmd.Wait()
		if childErr != nil {
			stopWaiting()
		}
		close(childDone)
	}()
	// childOutput ends the child process if it still runs and returns what it said.
	childOutput := func() string {
		_ = cmd.Process.Kill()
		<-childDone
		return fmt.Sprintf("child process %d (exit: %v)\n--- stdout:\n%s--- stderr:\n%s", cmd.Process.Pid, childErr, &stdout, &stderr)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-childDone })

	reqCtx, request := tp.Tracer("test").Start(ctx, "request")
	if err := rt.Client().StartOrchestration(reqCtx, xpParentID, "Parent", "x"); err != nil {
		t.Fatal(err)
	}
	request.End()
	st, err := rt.Client().WaitForOrchestration(waitCtx, xpParentID)
	if err != nil || st.State != runtime.StateCompleted || st.Output != "ok+hello x" {
		t.Fatalf("%s: %+v, %v; want Completed with output %q\n%s", xpParentID, st, err, "ok+hello x", childOutput())
	}
	completed := time.Since(began)
	select {
	case <-childDone:
	case <-ctx.Done():
		t.Fatalf("the child process did not exit after %s completed\n%s", xpChildID, childOutput())
	}
	if childErr != nil {
		t.Fatalf("the child process failed\n%s", childOutput())
	}
	data, err := os.ReadFile(cfg.Spans)
	if err != nil {
		t.Fatalf("child spans: %v\n%s", err, childOutput())
	}
	var cf xpChildFile
	if err := json.Unmarshal(data, &cf); err != nil {
		t.Fatalf("child spans: %v\n%s", err, childOutput())
	}
	if cf.PID == os.Getpid() || cf.PID != cmd.Process.Pid {
		t.Fatalf("the child spans come from process %d; want the child process %d, not this one (%d)", cf.PID, cmd.Process.Pid, os.Getpid())
	}
	hist := map[string][]provider.Event{}
	for _, id := range []string{xpParentID, xpChildID} {
		if hist[id], err = p.ReadHistory(ctx, id); err != nil || len(hist[id]) == 0 {
			t.Fatalf("history of %s: %d events, %v", id, len(hist[id]), err)
		}
	}
	spans := append(xpSpans("parent", exp.GetSpans()), cf.Spans...)
	xpCheckTree(t, spans, request.SpanContext(), hist, childOutput)
	t.Logf("%s: %d spans (%d from child process %d); %s completed after %v, the test took %v", backend, len(spans), len(cf.Spans), cf.PID,
		xpParentID, completed.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// xpCheckTree asserts the exact tree: request → Parent turns (and the retry's timer)
// → Fan, Flaky and the Child turns of the other process → Greet; each span once, all
// in one trace, each a child of the turn whose committed events scheduled it (read
// from history).
func xpCheckTree(t *testing.T, spans []xpSpan, request trace.SpanContext, hist map[string][]provider.Event, childOutput func() string) {
	t.Helper()
	dump := func() string {
		var b strings.Builder
		for _, s := range spans {
			fmt.Fprintf(&b, "  %-6s %-16s span %s parent %s instance %s replayed %s new %s activity %s outcome %s\n", s.Process, s.Name, s.SpanID, s.ParentID,
				s.Attrs["duroq.instance.id"], s.Attrs["duroq.turn.replayed_events"], s.Attrs["duroq.turn.new_events"], s.Attrs["duroq.activity.id"], s.Attrs["duroq.activity.outcome"])
		}
		return b.String() + childOutput()
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nspans:\n%s", append(args, dump())...)
	}

	// One trace, each span once, each in the process that runs its code.
	ids := map[string]bool{}
	count := map[string]int{}
	for _, s := range spans {
		if s.TraceID != request.TraceID().String() {
			fail("span %s %q is in trace %s, want the request's %s", s.Process, s.Name, s.TraceID, request.TraceID())
		}
		if ids[s.SpanID] {
			fail("span id %s appears twice", s.SpanID)
		}
		ids[s.SpanID] = true
		count[s.Process+"/"+s.Name]++
	}
	turnsParent, turnsChild := count["parent/turn Parent"], count["child/turn Child"]
	// The retry waits on a timer: one "timer" span for each that fired.
	fired := map[string]bool{}
	for _, e := range hist[xpParentID] {
		if e.Kind == provider.EventTimerFired {
			fired[strconv.FormatUint(e.SourceEventID, 10)] = true
		}
	}
	want := map[string]int{"parent/request": 1, "parent/turn Parent": turnsParent, "parent/activity Fan": xpFanOut,
		"parent/activity Flaky": 2, "parent/timer": len(fired), "child/turn Child": turnsChild, "child/activity Greet": 1}
	if !maps.Equal(count, want) || turnsParent < 6 || turnsChild < 2 {
		fail("spans by process and name: %v; want %v with at least 6 Parent turns (start, fan-out done, failure, retry timer, success, child done) and 2 Child turns", count, want)
	}

	// Turns: each once, together exactly the history (turn n+1 replays what turns 1..n
	// wrote); each ran the events [replayed, replayed+new).
	type turn struct {
		span               xpSpan
		replayed, newEvent int
	}
	turns := map[string][]turn{}
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, "turn ") {
			continue
		}
		r, err1 := strconv.Atoi(s.Attrs["duroq.turn.replayed_events"])
		n, err2 := strconv.Atoi(s.Attrs["duroq.turn.new_events"])
		if err1 != nil || err2 != nil || n <= 0 {
			fail("turn span %s: replayed %q, new %q; want numbers, new > 0", s.SpanID, s.Attrs["duroq.turn.replayed_events"], s.Attrs["duroq.turn.new_events"])
		}
		turns[s.Attrs["duroq.instance.id"]] = append(turns[s.Attrs["duroq.instance.id"]], turn{s, r, n})
	}
	for id, name := range map[string]string{xpParentID: "turn Parent", xpChildID: "turn Child"} {
		ts := turns[id]
		slices.SortFunc(ts, func(a, b turn) int { return a.replayed - b.replayed })
		next := 0
		for i, tr := range ts {
			status, wantStatus := tr.span.Attrs["duroq.orchestration.status"], provider.StatusRunning
			if i == len(ts)-1 {
				wantStatus = provider.StatusCompleted
			}
			if tr.span.Name != name || tr.replayed != next || status != wantStatus {
				fail("%s turn %d: %q replayed %d events, status %q; want %q replaying %d (each turn once, none missing), status %q",
					id, i+1, tr.span.Name, tr.replayed, status, name, next, wantStatus)
			}
			next += tr.newEvent
		}
		if next != len(hist[id]) {
			fail("%s: the turns wrote %d events, the history holds %d", id, next, len(hist[id]))
		}
	}
	// turnOf is the turn that wrote instance's event eventID.
	turnOf := func(instance string, eventID uint64, kind provider.EventKind, name string) xpSpan {
		t.Helper()
		i := slices.IndexFunc(hist[instance], func(e provider.Event) bool { return e.EventID == eventID })
		if i < 0 || hist[instance][i].Kind != kind || hist[instance][i].Name != name {
			fail("%s has no %s %q event %d", instance, kind, name, eventID)
		}
		for _, tr := range turns[instance] {
			if tr.replayed <= i && i < tr.replayed+tr.newEvent {
				return tr.span
			}
		}
		fail("no turn of %s wrote event %d", instance, eventID)
		return xpSpan{}
	}

	// Parent turns: children of the request, carried by the history's traceparent.
	for _, tr := range turns[xpParentID] {
		if tr.span.ParentID != request.SpanID().String() || !tr.span.ParentRemote {
			fail("Parent turn %s: parent %s (remote %v); want the request %s, from the stored traceparent", tr.span.SpanID, tr.span.ParentID, tr.span.ParentRemote, request.SpanID())
		}
	}
	// Child turns, recorded in the other process: children of the Parent turn that
	// scheduled the child, through the traceparent in its OrchestrationStarted event.
	started := hist[xpChildID][0]
	if started.Kind != provider.EventOrchestrationStarted || started.ParentInstance != xpParentID {
		fail("%s starts with %s from parent %q; want OrchestrationStarted from %s", xpChildID, started.Kind, started.ParentInstance, xpParentID)
	}
	scheduler := turnOf(xpParentID, started.ParentID, provider.EventSubOrchestrationScheduled, "Child")
	if !strings.Contains(started.TraceParent, "-"+scheduler.SpanID+"-") {
		fail("%s's stored traceparent %q does not name the Parent turn %s that scheduled it", xpChildID, started.TraceParent, scheduler.SpanID)
	}
	for _, tr := range turns[xpChildID] {
		if tr.span.Process != "child" || tr.span.ParentID != scheduler.SpanID || !tr.span.ParentRemote {
			fail("Child turn %s (%s process): parent %s (remote %v); want the Parent turn %s of the parent process",
				tr.span.SpanID, tr.span.Process, tr.span.ParentID, tr.span.ParentRemote, scheduler.SpanID)
		}
	}

	// Timers: siblings of the turns (children of the request), one per timer fired.
	if len(fired) != 1 {
		fail("%s fired %d timers, want 1 (the retry's backoff)", xpParentID, len(fired))
	}
	for _, s := range spans {
		if s.Name != "timer" {
			continue
		}
		id := s.Attrs["duroq.timer.id"]
		if !fired[id] || s.Attrs["duroq.instance.id"] != xpParentID || s.ParentID != request.SpanID().String() {
			fail("timer span %s: timer %q of %q, parent %s; want one span per timer %s fired, a child of the request %s",
				s.SpanID, id, s.Attrs["duroq.instance.id"], s.ParentID, xpParentID, request.SpanID())
		}
		delete(fired, id) // each once
	}

	// Activities: children of the turn that scheduled them, one span per attempt.
	var flakies []xpSpan
	first := turns[xpParentID][0].span
	for _, s := range spans {
		name, ok := strings.CutPrefix(s.Name, "activity ")
		if !ok {
			continue
		}
		instance := s.Attrs["duroq.instance.id"]
		id, err := strconv.ParseUint(s.Attrs["duroq.activity.id"], 10, 64)
		if err != nil {
			fail("activity span %s: id %q", s.SpanID, s.Attrs["duroq.activity.id"])
		}
		by := turnOf(instance, id, provider.EventActivityScheduled, name)
		if s.ParentID != by.SpanID || !s.ParentRemote {
			fail("activity %s (%s %d): parent %s; want the %s turn %s that scheduled it", name, instance, id, s.ParentID, instance, by.SpanID)
		}
		switch name {
		case "Fan":
			if by.SpanID != first.SpanID || s.Attrs["duroq.activity.outcome"] != "completed" {
				fail("Fan %d: scheduled by turn %s, outcome %q; want the first Parent turn %s (the fan-out), completed", id, by.SpanID, s.Attrs["duroq.activity.outcome"], first.SpanID)
			}
		case "Flaky":
			flakies = append(flakies, s)
		case "Greet":
			if instance != xpChildID || s.Attrs["duroq.activity.outcome"] != "completed" {
				fail("Greet: instance %s, outcome %q; want %s, completed", instance, s.Attrs["duroq.activity.outcome"], xpChildID)
			}
		}
	}
	slices.SortFunc(flakies, func(a, b xpSpan) int { return a.Start.Compare(b.Start) })
	outcomes := []string{flakies[0].Attrs["duroq.activity.outcome"], flakies[1].Attrs["duroq.activity.outcome"]}
	if outcomes[0] != "failed" || outcomes[1] != "completed" || flakies[0].ParentID == flakies[1].ParentID ||
		flakies[0].Attrs["duroq.activity.id"] == flakies[1].Attrs["duroq.activity.id"] {
		fail("Flaky attempts: outcomes %v, parents %s %s; want failed then completed, each scheduled by its own Parent turn", outcomes, flakies[0].ParentID, flakies[1].ParentID)
	}
	if flakies[0].Status != "Error" || !slices.Contains(flakies[0].Events, "exception") || flakies[1].Status == "Error" {
		fail("Flaky spans: statuses %s %s, first's events %v; want Error with the exception recorded, then not Error", flakies[0].Status, flakies[1].Status, flakies[0].Events)
	}
}
