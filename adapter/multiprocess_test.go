package adapter_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// mpChildEnv makes the test binary act as one runtime process of the multi-process
// test, on the schema and DSN in its value ("schema dsn").
const mpChildEnv = "DUROQ_MULTIPROCESS_CHILD"

const (
	mpInstances = 1000
	mpProcesses = 3
)

// mpRegistry is the code every process runs: two activities in sequence, each
// recording its execution (instance, activity id, process) so the parent can count
// how often each ran.
func mpRegistry(t *testing.T, db *pgx.Conn, mu chan struct{}) *runtime.Registry {
	reg := runtime.NewRegistry()
	record := func(a *runtime.ActivityContext, in string) (string, error) {
		mu <- struct{}{} // one pgx.Conn is not safe for concurrent use
		defer func() { <-mu }()
		_, err := db.Exec(a, "INSERT INTO mp_executions (instance, activity, pid) VALUES ($1, $2, $3)",
			a.InstanceID(), int64(a.ActivityID()), os.Getpid())
		return in + "+" + a.Name(), err
	}
	if err := reg.RegisterActivity("First", record); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterActivity("Second", record); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterOrchestration("TwoSteps", func(ctx *runtime.Context, in string) (string, error) {
		v, err := ctx.ScheduleActivity("First", in).Get()
		if err != nil {
			return "", err
		}
		return ctx.ScheduleActivity("Second", v).Get()
	}); err != nil {
		t.Fatal(err)
	}
	return reg
}

func mpOptions() runtime.Options {
	return runtime.Options{OrchestrationConcurrency: 4, WorkerConcurrency: 4, MinPollInterval: 10 * time.Millisecond,
		PollTimeout: time.Second, OrchestratorLockTimeout: 5 * time.Second, WorkerLockTimeout: 5 * time.Second}
}

// Three runtime processes share one PostgreSQL schema and complete 1,000
// orchestrations; one is killed with SIGKILL mid-run. Every orchestration completes
// once with the right output, every activity completes once in history, and only
// activities the killed process had in flight may have run twice.
func TestMultiProcessPostgres(t *testing.T) {
	if loc := os.Getenv(mpChildEnv); loc != "" {
		mpChild(t, loc)
		return
	}
	dsn, schema := pgtest.Schema(t)
	location := schema + " " + dsn
	p, err := openPostgres(location)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	conn := mpConn(t, location)
	if _, err := conn.Exec(ctx, "CREATE TABLE mp_executions (instance text, activity bigint, pid int)"); err != nil {
		t.Fatal(err)
	}

	// All the work is queued first, so the kill lands mid-run.
	c := runtime.NewClient(p)
	for i := range mpInstances {
		if err := c.StartOrchestration(ctx, fmt.Sprintf("mp-%04d", i), "TwoSteps", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	children := make([]*exec.Cmd, mpProcesses)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessPostgres$", "-test.count=1", "-test.timeout=10m")
		cmd.Env = append(os.Environ(), mpChildEnv+"="+location)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = cmd
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	}

	// Kill the first process once a tenth of the work is done.
	victim := children[0]
	eventually(t, "a tenth of the orchestrations to complete", func() bool { return mpCompleted(t, conn) >= mpInstances/10 })
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	atKill := mpCompleted(t, conn)
	t.Logf("killed process %d with %d of %d orchestrations completed", victim.Process.Pid, atKill, mpInstances)
	if atKill == mpInstances {
		t.Fatal("every orchestration completed before the kill: nothing was tested")
	}
	eventually(t, "every orchestration to complete", func() bool { return mpCompleted(t, conn) == mpInstances })

	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range mpInstances {
		id := fmt.Sprintf("mp-%04d", i)
		st, err := c.WaitForOrchestration(wait, id)
		if err != nil || st.State != runtime.StateCompleted || st.Output != fmt.Sprintf("%d+First+Second", i) {
			t.Fatalf("%s: %+v, %v", id, st, err)
		}
		h, err := p.Read(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := countEvents(h, provider.EventActivityCompleted); n != 2 {
			t.Fatalf("%s: %d activity completions in history, want 2", id, n)
		}
	}
	// At-least-once: each activity ran; repeats only for work the killed process held.
	var missing, repeats, repeatsElsewhere int
	row := conn.QueryRow(ctx, `
		WITH want AS (SELECT instance, activity FROM mp_executions GROUP BY instance, activity),
		     runs AS (SELECT instance, activity, count(*) AS n, bool_and(pid <> $1) AS survivors_only
		              FROM mp_executions GROUP BY instance, activity)
		SELECT ($2 * 2) - (SELECT count(*) FROM want),
		       coalesce(sum(n - 1), 0),
		       coalesce(sum(CASE WHEN survivors_only THEN n - 1 ELSE 0 END), 0)
		FROM runs`, victim.Process.Pid, mpInstances)
	if err := row.Scan(&missing, &repeats, &repeatsElsewhere); err != nil {
		t.Fatal(err)
	}
	t.Logf("activity executions repeated: %d (all involving the killed process: %v)", repeats, repeatsElsewhere == 0)
	if missing != 0 {
		t.Fatalf("%d activities never ran", missing)
	}
	// The killed process's executed-but-uncommitted activities bound the repeats: up
	// to WorkerConcurrency running, as many settled in the committer's buffer, and
	// the group the committer was writing (at most the buffer plus one).
	window := 3*mpOptions().WorkerConcurrency + 1
	if repeatsElsewhere != 0 || repeats > window {
		t.Fatalf("%d activities ran twice, %d of them without the killed process (it had at most %d executed and not committed)",
			repeats, repeatsElsewhere, window)
	}
}

// mpChild is one runtime process of the test; it runs until killed or the parent's
// test ends.
func mpChild(t *testing.T, location string) {
	p, err := openPostgres(location)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	defer p.Close()
	rt, err := runtime.New(p, mpRegistry(t, mpConn(t, location), make(chan struct{}, 1)), mpOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_ = rt.Run(ctx)
}

// mpConn connects to the test schema for the executions table.
func mpConn(t *testing.T, location string) *pgx.Conn {
	schema, dsn, _ := strings.Cut(location, " ")
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(context.Background(), "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// mpCompleted counts instances whose second activity ran (cheaper than statuses).
func mpCompleted(t *testing.T, conn *pgx.Conn) int {
	var n int
	if err := conn.QueryRow(context.Background(),
		"SELECT count(DISTINCT instance) FROM mp_executions WHERE activity = 4").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func countEvents(h []provider.Event, k provider.EventKind) int {
	n := 0
	for _, e := range h {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds, failing after two minutes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
