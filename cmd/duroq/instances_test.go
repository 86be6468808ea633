package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqliteprovider"
)

// operated is the code whose instances the tests operate on: a greeting that runs
// an activity, a failure, a parent with a child, instances that wait (for an event,
// for a queued message) and a chain that continues as new three times.
func operated() *runtime.Registry {
	reg := greetingRegistry()
	_ = reg.RegisterOrchestration("Fail", func(ctx *runtime.Context, in string) (string, error) {
		return "", errors.New("card declined: " + in)
	})
	_ = reg.RegisterOrchestration("Parent", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleSubOrchestration("Greeting", in, runtime.WithInstanceID(ctx.InstanceID()+"-child")).Get()
	})
	_ = reg.RegisterOrchestration("Waiter", func(ctx *runtime.Context, in string) (string, error) {
		ctx.SetCustomStatus("waiting")
		return ctx.WaitForEvent("approve").Get()
	})
	_ = reg.RegisterOrchestration("Inbox", func(ctx *runtime.Context, in string) (string, error) {
		ctx.SetCustomStatus("waiting")
		return ctx.DequeueEvent("inbox").Get()
	})
	_ = reg.RegisterOrchestration("Chain", func(ctx *runtime.Context, in string) (string, error) {
		if n, _ := strconv.Atoi(in); n < 3 {
			return "", ctx.ContinueAsNew(strconv.Itoa(n + 1))
		}
		return "done", nil
	})
	return reg
}

// The instances operated: [id, orchestration, input]; Parent adds parent-1-child.
var operatedStarts = [][3]string{{"greet-a", "Greeting", "a"}, {"greet-b", "Greeting", "b"}, {"fail-1", "Fail", "boom"},
	{"parent-1", "Parent", "p"}, {"wait-raise", "Waiter", ""}, {"wait-cancel", "Waiter", ""}, {"inbox-1", "Inbox", ""},
	{"chain-1", "Chain", "0"}, {"pending-1", "Unregistered", ""}}

var operatedIDs = []string{"chain-1", "fail-1", "greet-a", "greet-b", "inbox-1", "parent-1", "parent-1-child", "wait-cancel", "wait-raise"}

// cli runs `duroq instances` on one database while a runtime runs its instances.
type cli struct {
	t      *testing.T
	ctx    context.Context
	db     []string        // the -db (and -schema) flags
	client *runtime.Client // the running runtime's
}

// run runs `duroq instances <sub> <db flags> args...` and returns what it printed, failing the test on an error.
func (c *cli) run(args ...string) string {
	c.t.Helper()
	out, err := c.try(args...)
	if err != nil {
		c.t.Fatalf("duroq instances %q: %v", args, err)
	}
	return out
}

// try runs `duroq instances <sub> <db flags> args...`.
func (c *cli) try(args ...string) (string, error) { return c.exec(c.ctx, io.Discard, args...) }

// exec runs `duroq instances <sub> <db flags> args...` until ctx ends, writing its
// usage and progress to stderr.
func (c *cli) exec(ctx context.Context, stderr io.Writer, args ...string) (string, error) {
	var out bytes.Buffer
	err := instancesGroup.runContext(ctx, slices.Concat(args[:1], c.db, args[1:]), &out, stderr)
	return out.String(), err
}

// fails runs the command line, which must fail with a message containing want.
func (c *cli) fails(want string, args ...string) {
	c.t.Helper()
	if _, err := c.try(args...); err == nil || !strings.Contains(err.Error(), want) || exitCode(err) != 1 {
		c.t.Fatalf("duroq instances %q = %v; want an error (exit 1) containing %q", args, err, want)
	}
}

// decode runs the command line with -json and decodes its output into v.
func (c *cli) decode(v any, args ...string) {
	c.t.Helper()
	if err := json.Unmarshal([]byte(c.run(append(args, "-json")...)), v); err != nil {
		c.t.Fatalf("duroq instances %q -json: %v", args, err)
	}
}

type listed struct {
	Instances []instanceJSON `json:"instances"`
	Next      string         `json:"next"`
}

// ids lists (every page of) the instances the filter args select.
func (c *cli) ids(args ...string) []string {
	c.t.Helper()
	var l listed
	c.decode(&l, append([]string{"list", "-all", "-limit", "2"}, args...)...)
	ids := []string{}
	for _, in := range l.Instances {
		ids = append(ids, in.ID)
	}
	return ids
}

// pages follows the pages of `list -limit n` as a person would: the table's first
// column, and the -after value the last line tells.
func (c *cli) pages(n int) (ids []string, pages int) {
	c.t.Helper()
	for after := ""; ; pages++ {
		out := c.run("list", "-limit", strconv.Itoa(n), "-after", after)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if !strings.HasPrefix(lines[0], "ID ") {
			c.t.Fatalf("list printed no header:\n%s", out)
		}
		after = ""
		for _, l := range lines[1:] {
			if a, ok := strings.CutPrefix(l, "more instances follow: list the next page with -after "); ok {
				after = a
				break
			}
			ids = append(ids, strings.Fields(l)[0])
		}
		if after == "" {
			return ids, pages + 1
		}
	}
}

// operate runs starts ([id, orchestration, input], of the operated code) on p and
// returns a cli on the database dbArgs name, while a runtime keeps running them until
// the test ends. It waits for every start to complete, or to wait when it waits.
func operate(t *testing.T, p *adapter.Provider, dbArgs []string, starts [][3]string) *cli {
	rt, err := runtime.New(p, operated(), runtime.Options{MinPollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := &cli{t: t, ctx: ctx, db: dbArgs, client: rt.Client()}
	for _, s := range starts {
		if err := c.client.StartOrchestration(ctx, s[0], s[1], s[2]); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range starts {
		if s[1] == "Unregistered" {
			continue // no runtime runs it: it stays a queued start
		} else if s[1] == "Waiter" || s[1] == "Inbox" {
			if _, err := c.client.WaitForStatusChange(ctx, s[0], 0); err != nil {
				t.Fatal(err)
			}
		} else if _, err := c.client.WaitForOrchestration(ctx, s[0]); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// onEachBackend runs test on a new SQLite file and on a new PostgreSQL schema, with
// the provider and the -db (and -schema) flags naming the database.
func onEachBackend(t *testing.T, test func(t *testing.T, p *adapter.Provider, dbArgs []string)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "app.db")
		p, err := sqliteprovider.Open(path, sqliteprovider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		test(t, p, []string{"-db", path})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t) // skips, saying "PostgreSQL tests skipped", without DUROQ_POSTGRES_DSN
		p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		test(t, p, []string{"-db", dsn, "-schema", schema})
	})
}

// TestInstancesCommand: `duroq instances` on a SQLite file and on PostgreSQL, while
// a runtime runs the instances it lists, shows and operates on.
func TestInstancesCommand(t *testing.T) {
	onEachBackend(t, func(t *testing.T, p *adapter.Provider, dbArgs []string) {
		instancesScenario(operate(t, p, dbArgs, operatedStarts))
	})
}

func instancesScenario(c *cli) {
	t := c.t
	t.Run("list pages", func(t *testing.T) {
		c.t = t
		if ids, pages := c.pages(3); !slices.Equal(ids, operatedIDs) || pages != 3 {
			t.Fatalf("pages of 3 listed %q in %d pages; want %q in 3", ids, pages, operatedIDs)
		}
		var ids []string
		for after := ""; ; {
			var l listed
			c.decode(&l, "list", "-limit", "4", "-after", after)
			for _, in := range l.Instances {
				ids = append(ids, in.ID)
				if in.ID == "parent-1-child" && (in.Parent != "parent-1" || in.Status != "Completed" || in.Orchestration != "Greeting" ||
					*in.Output != "hello p" || in.Created.IsZero()) {
					t.Errorf("listed child %+v", in)
				}
			}
			if after = l.Next; after == "" {
				break
			}
		}
		if !slices.Equal(ids, operatedIDs) {
			t.Fatalf("JSON pages of 4 listed %q; want %q", ids, operatedIDs)
		}
		if ids := c.ids(); !slices.Equal(ids, operatedIDs) {
			t.Fatalf("list -all -json listed %q; want %q", ids, operatedIDs)
		}
		out := c.run("list", "-all", "-limit", "2")
		if strings.Count(out, "\n") != len(operatedIDs)+1 || strings.Contains(out, "more instances") {
			t.Fatalf("list -all printed:\n%s", out)
		}
	})
	t.Run("list filters", func(t *testing.T) {
		c.t = t
		hour := time.Hour
		at := func(d time.Duration) string { return time.Now().Add(d).Format(time.RFC3339) }
		for _, f := range []struct {
			args []string
			want []string
		}{
			{[]string{"-status", "Failed"}, []string{"fail-1"}},
			{[]string{"-status", "Running"}, []string{"inbox-1", "wait-cancel", "wait-raise"}},
			{[]string{"-orchestration", "Greeting"}, []string{"greet-a", "greet-b", "parent-1-child"}},
			{[]string{"-prefix", "wait-"}, []string{"wait-cancel", "wait-raise"}},
			{[]string{"-parent", "parent-1"}, []string{"parent-1-child"}},
			{[]string{"-roots", "-prefix", "parent"}, []string{"parent-1"}},
			{[]string{"-created-after", at(hour)}, []string{}},
			{[]string{"-created-before", at(hour), "-prefix", "greet"}, []string{"greet-a", "greet-b"}},
			{[]string{"-updated-after", at(-hour), "-updated-before", at(hour), "-orchestration", "Chain"}, []string{"chain-1"}},
			{[]string{"-updated-before", at(-hour)}, []string{}},
		} {
			if got := c.ids(f.args...); !slices.Equal(got, f.want) {
				t.Errorf("list %q = %q; want %q", f.args, got, f.want)
			}
		}
	})
	t.Run("show", func(t *testing.T) {
		c.t = t
		out := c.run("show", "fail-1")
		for _, want := range []string{`Status: +Failed\n`, `Failure: +card declined: boom\n`, `Orchestration: +Fail\n`, `EXECUTION +STATUS +STARTED`} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("show fail-1 lacks %q:\n%s", want, out)
			}
		}
		var chain showJSON
		c.decode(&chain, "show", "chain-1")
		if chain.Status != "Completed" || chain.Execution != 4 || len(chain.Executions) != 4 || chain.Executions[0].Status != "ContinuedAsNew" ||
			chain.Executions[3].Completed.IsZero() || *chain.Output != "done" {
			t.Errorf("show chain-1 = %+v", chain)
		}
		if out := c.run("show", "wait-raise"); !regexp.MustCompile(`Custom status: +waiting\n(.|\n)*1 +Running`).MatchString(out) {
			t.Errorf("show wait-raise:\n%s", out)
		}
		var pending showJSON // started, never run (listed nowhere), but shown
		if c.decode(&pending, "show", "pending-1"); pending.Status != "Pending" || pending.Orchestration != "Unregistered" || len(pending.Executions) != 0 {
			t.Errorf("show of a start no runtime runs = %+v", pending)
		}
	})
	t.Run("history", func(t *testing.T) {
		c.t = t
		out := c.run("history", "greet-a")
		rest := out
		for _, want := range []string{"OrchestrationStarted", "ActivityScheduled", `input="a"`, "ActivityCompleted", `result="hello a"`, "OrchestrationCompleted"} {
			_, after, ok := strings.Cut(rest, want)
			if !ok {
				t.Fatalf("history greet-a lacks %q after %q:\n%s", want, out[:len(out)-len(rest)], out)
			}
			rest = after
		}
		var events []eventJSON
		c.decode(&events, "history", "greet-a")
		kinds := []string{}
		for i, e := range events {
			kinds = append(kinds, e.Kind)
			if e.ID != uint64(i+1) || e.Time.IsZero() {
				t.Errorf("event %d: %+v", i, e)
			}
		}
		if want := []string{"OrchestrationStarted", "ActivityScheduled", "ActivityCompleted", "OrchestrationCompleted"}; !slices.Equal(kinds, want) ||
			events[2].Fields["result"] != "hello a" || events[1].Name != "Greet" {
			t.Fatalf("history greet-a -json = %+v; want kinds %q", events, want)
		}
		if out := c.run("history", "chain-1", "-execution", "1"); !strings.Contains(out, "OrchestrationContinuedAsNew") || !strings.Contains(out, `input="1"`) {
			t.Errorf("history of chain-1's first execution:\n%s", out)
		}
		c.fails(`instance "chain-1" has no execution 9`, "history", "chain-1", "-execution", "9")
	})
	t.Run("tree", func(t *testing.T) {
		c.t = t
		out := c.run("tree", "parent-1")
		lines := strings.Split(out, "\n")
		if len(lines) < 3 || !strings.HasPrefix(lines[1], "parent-1 ") || !strings.HasPrefix(lines[2], "  parent-1-child ") ||
			!strings.Contains(lines[2], "Completed") {
			t.Fatalf("tree parent-1:\n%s", out)
		}
		var tree treeJSON
		c.decode(&tree, "tree", "parent-1")
		if len(tree.Children) != 1 || tree.Children[0].ID != "parent-1-child" || tree.Status != "Completed" {
			t.Fatalf("tree parent-1 -json = %+v", tree)
		}
	})
	t.Run("raise, enqueue, cancel", func(t *testing.T) {
		c.t = t
		c.run("raise", "wait-raise", "approve", "yes")
		c.run("enqueue", "inbox-1", "inbox", "--", "-a message-")
		c.run("cancel", "wait-cancel", "-reason", "ops said so")
		for id, want := range map[string]string{"wait-raise": "yes", "inbox-1": "-a message-"} {
			if st, err := c.client.WaitForOrchestration(c.ctx, id); err != nil || st.State != runtime.StateCompleted || st.Output != want {
				t.Errorf("%s after raise/enqueue: %+v, %v; want Completed with %q", id, st, err, want)
			}
		}
		st, err := c.client.WaitForOrchestration(c.ctx, "wait-cancel")
		if err != nil || st.State != runtime.StateFailed || st.Failure == nil || st.Failure.AppKind != provider.AppCancelled {
			t.Fatalf("wait-cancel after cancel: %+v, %v; want Failed, cancelled", st, err)
		}
		if out := c.run("show", "wait-cancel"); !strings.Contains(out, "ops said so") || !strings.Contains(out, "Failed") {
			t.Errorf("show of the cancelled instance:\n%s", out)
		}
		var raised showJSON
		if c.decode(&raised, "show", "wait-raise"); raised.Status != "Completed" || *raised.Output != "yes" {
			t.Errorf("show -json of the raised instance: %+v", raised)
		}
		c.fails(`instance "wait-raise" has ended (Completed)`, "raise", "wait-raise", "approve", "again")
	})
	t.Run("delete", func(t *testing.T) {
		c.t = t
		if err := c.client.StartOrchestration(c.ctx, "wait-delete", "Waiter", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := c.client.WaitForStatusChange(c.ctx, "wait-delete", 0); err != nil {
			t.Fatal(err)
		}
		c.fails(`instance "wait-delete" is running: -force`, "delete", "wait-delete")
		if out := c.run("delete", "wait-delete", "-force"); !strings.HasPrefix(out, "deleted wait-delete: 1 instances, 1 executions") {
			t.Errorf("delete -force printed %q", out)
		}
		c.fails(`is a sub-orchestration of "parent-1"`, "delete", "parent-1-child")
		if out := c.run("delete", "parent-1"); !strings.HasPrefix(out, "deleted parent-1: 2 instances, 2 executions, ") {
			t.Errorf("delete parent-1 printed %q", out)
		}
		if ids := c.ids(); slices.Contains(ids, "parent-1") || slices.Contains(ids, "parent-1-child") || len(ids) != len(operatedIDs)-2 {
			t.Errorf("after delete, list = %q", ids)
		}
		c.fails(`instance "parent-1" not found`, "show", "parent-1")
	})
	t.Run("prune", func(t *testing.T) {
		c.t = t
		c.run("prune", "chain-1", "-keep-last", "2", "-completed-before", time.Now().Add(-time.Hour).Format(time.RFC3339))
		var chain showJSON
		if c.decode(&chain, "show", "chain-1"); len(chain.Executions) != 4 {
			t.Fatalf("a prune of executions completed an hour ago removed some: %+v", chain.Executions)
		}
		if out := c.run("prune", "chain-1", "-keep-last", "2"); !strings.HasPrefix(out, "pruned chain-1: 2 executions, ") {
			t.Errorf("prune printed %q", out)
		}
		var counts struct {
			Instance   string
			Executions uint64
		}
		c.decode(&counts, "prune", "chain-1")
		if counts.Instance != "chain-1" || counts.Executions != 1 {
			t.Errorf("prune -json = %v", counts)
		}
		if c.decode(&chain, "show", "chain-1"); len(chain.Executions) != 1 || chain.Executions[0].ID != 4 || chain.Status != "Completed" {
			t.Fatalf("after prune, chain-1 has %+v", chain.Executions)
		}
	})
	t.Run("stats", func(t *testing.T) {
		c.t = t
		var stats map[string]uint64
		c.decode(&stats, "stats")
		if stats["instances"] != 7 || stats["failed"] != 2 || stats["running"] != 0 || stats["executions"] != 7 {
			t.Errorf("stats = %v", stats)
		}
		if out := c.run("stats"); !strings.Contains(out, "7 instances, 0 running, 5 completed, 2 failed, 7 executions") {
			t.Errorf("stats printed:\n%s", out)
		}
	})
	t.Run("unknown instance", func(t *testing.T) {
		c.t = t
		for _, sub := range [][]string{{"show"}, {"history"}, {"tree"}, {"cancel"}, {"delete"}, {"prune"}, {"raise", "e", "d"}} {
			_, err := c.try(append([]string{sub[0], "nope"}, sub[1:]...)...)
			if want := `duroq instances ` + sub[0] + `: instance "nope" not found`; err == nil || err.Error() != want || exitCode(err) != 1 {
				t.Errorf("%s of an unknown instance = %v; want %q", sub[0], err, want)
			}
		}
		for _, n := range []int{300, 100_000} {
			_, err := c.try("show", strings.Repeat("x", n))
			if err == nil || len(err.Error()) > 800 || !strings.Contains(err.Error(), `"`+strings.Repeat("x", 200)+`..."`) {
				t.Errorf("show of an unknown id of %d bytes = %.1000v; want it clipped", n, err)
			}
		}
	})
}

// bulkStarts are the instances the bulk tests select: under "old-", ten greetings,
// two parents (each with a child, "old-p1-child") and a waiter that keeps running
// (13 roots); two greetings to keep, and two chains of four executions.
func bulkStarts() [][3]string {
	starts := [][3]string{{"old-p1", "Parent", "1"}, {"old-p2", "Parent", "2"}, {"old-w1", "Waiter", ""},
		{"keep-1", "Greeting", "k"}, {"keep-2", "Greeting", "k"}, {"chain-a", "Chain", "0"}, {"chain-b", "Chain", "0"}}
	for i := range 10 {
		starts = append(starts, [3]string{fmt.Sprintf("old-%02d", i), "Greeting", "g"})
	}
	return starts
}

// cancelOnWrite is a stderr that cancels the command's context on the first write,
// its first progress line: the command is interrupted after its first page.
type cancelOnWrite struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.cancel()
	return w.Buffer.Write(p)
}

// TestInstancesBulk: delete and prune select instances by list's filters, need -yes,
// go through them a page (a transaction) at a time telling their progress on
// stderr, and stop between pages when interrupted, saying how far they went.
func TestInstancesBulk(t *testing.T) {
	onEachBackend(t, func(t *testing.T, p *adapter.Provider, dbArgs []string) {
		bulkScenario(operate(t, p, dbArgs, bulkStarts()))
	})
}

func bulkScenario(c *cli) {
	t := c.t
	all := c.ids()
	t.Run("without -yes, says what it would do", func(t *testing.T) {
		c.t = t
		for _, r := range []struct {
			args []string
			want string
		}{
			{[]string{"delete", "-prefix", "old-"}, "refusing to delete without -yes: this would delete 13 root instances (those the filters select) " +
				"with their sub-orchestrations, but not the 1 running (-force deletes them); run it again with -yes to delete them"},
			{[]string{"delete", "-prefix", "old-", "-force"}, "this would delete 13 root instances (those the filters select) with their sub-orchestrations, 1 of them running;"},
			{[]string{"delete"}, "this would delete 17 root instances (every one stored)"},
			{[]string{"prune", "-prefix", "chain-", "-keep-last", "2"}, "refusing to prune without -yes: this would prune 2 instances (those the filters select): their executions before the latest 2;"},
		} {
			var stderr bytes.Buffer
			out, err := c.exec(c.ctx, &stderr, r.args...)
			if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), r.want) || out != "" || !strings.Contains(stderr.String(), "usage: duroq instances") {
				t.Errorf("%q = %v (exit %d), printed %q; want a usage error containing %q", r.args, err, exitCode(err), out, r.want)
			}
		}
		if ids := c.ids(); !slices.Equal(ids, all) {
			t.Fatalf("after the refusals, list = %q; want %q", ids, all)
		}
		if out := c.run("delete", "-prefix", "none-"); out != "deleted 0 instances, 0 executions, 0 events, 0 queue messages; went through 0 root instances\n" {
			t.Errorf("delete of an empty selection printed %q", out)
		}
		if _, err := c.try("delete", "-parent", "old-p1", "-yes"); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "deleted only with their root") {
			t.Errorf("delete -parent = %v; want a usage error", err)
		}
		// The children are Greetings, but not roots: they go only with their parent.
		if out := c.run("delete", "-orchestration", "Greeting", "-prefix", "old-p", "-yes"); !strings.HasPrefix(out, "deleted 0 instances,") {
			t.Errorf("delete of sub-orchestrations printed %q", out)
		}
	})
	t.Run("interrupted after a page", func(t *testing.T) {
		c.t = t
		ctx, cancel := context.WithCancel(c.ctx)
		defer cancel()
		stderr := &cancelOnWrite{cancel: cancel}
		out, err := c.exec(ctx, stderr, "delete", "-prefix", "old-", "-yes", "-batch", "4")
		if want := "duroq instances delete: interrupted after 4 of ~13 root instances (context canceled)"; err == nil || err.Error() != want || exitCode(err) != 130 {
			t.Fatalf("interrupted delete = %v (exit %d); want %q (exit 130)", err, exitCode(err), want)
		}
		if !strings.HasPrefix(out, "deleted 4 instances, 4 executions, ") || !strings.HasSuffix(out, "; went through 4 of ~13 root instances\n") {
			t.Errorf("interrupted delete printed %q", out)
		}
		if want := "duroq instances delete: 4 of ~13 root instances done (4 instances deleted)\n"; stderr.String() != want {
			t.Errorf("interrupted delete told %q; want %q", stderr.String(), want)
		}
		if ids := c.ids("-prefix", "old-0"); !slices.Equal(ids, []string{"old-04", "old-05", "old-06", "old-07", "old-08", "old-09"}) {
			t.Errorf("after the interrupted delete, old-0* = %q", ids)
		}
		// Any subcommand stopped so says it, rather than what the storage said of it.
		if _, err := c.exec(ctx, io.Discard, "list"); err == nil || err.Error() != "duroq instances list: interrupted (context canceled)" || exitCode(err) != 130 {
			t.Errorf("list, interrupted = %v (exit %d)", err, exitCode(err))
		}
	})
	t.Run("by filters, page by page", func(t *testing.T) {
		c.t = t
		var stderr bytes.Buffer
		out, err := c.exec(c.ctx, &stderr, "delete", "-prefix", "old-", "-yes", "-batch", "4")
		if err != nil || !strings.HasPrefix(out, "deleted 10 instances, 10 executions, ") ||
			!strings.HasSuffix(out, "; went through 9 root instances, kept 1 running (-force deletes them)\n") {
			t.Fatalf("delete -prefix old- -yes = %q, %v", out, err)
		}
		progress := "duroq instances delete: 4 of ~9 root instances done (4 instances deleted)\n" +
			"duroq instances delete: 8 of ~9 root instances done (10 instances deleted)\n" +
			"duroq instances delete: 9 of ~9 root instances done (10 instances deleted, 1 running kept)\n"
		if stderr.String() != progress {
			t.Errorf("delete told:\n%s\nwant:\n%s", stderr.String(), progress)
		}
		if ids := c.ids("-prefix", "old-"); !slices.Equal(ids, []string{"old-w1"}) {
			t.Errorf("after the delete, old-* = %q; want the running old-w1", ids)
		}
		stderr.Reset()
		var deleted map[string]any
		out, err = c.exec(c.ctx, &stderr, "delete", "-prefix", "old-", "-yes", "-force", "-quiet", "-json")
		if err != nil || json.Unmarshal([]byte(out), &deleted) != nil || deleted["selected"] != 1.0 || deleted["instances"] != 1.0 ||
			deleted["kept_running"] != 0.0 || deleted["interrupted"] != nil || stderr.Len() != 0 {
			t.Errorf("delete -force -quiet -json = %q, %v; told %q", out, err, stderr.String())
		}
		if ids := c.ids(); !slices.Equal(ids, []string{"chain-a", "chain-b", "keep-1", "keep-2"}) {
			t.Errorf("after the deletes, list = %q", ids)
		}
	})
	t.Run("prune", func(t *testing.T) {
		c.t = t
		var stderr bytes.Buffer
		out, err := c.exec(c.ctx, &stderr, "prune", "-prefix", "chain-", "-yes", "-batch", "1")
		if err != nil || !strings.HasPrefix(out, "pruned 6 executions, ") || !strings.HasSuffix(out, "; went through 2 instances\n") {
			t.Fatalf("prune -prefix chain- -yes = %q, %v", out, err)
		}
		if want := "duroq instances prune: 1 of ~2 instances done (3 executions pruned)\nduroq instances prune: 2 of ~2 instances done (6 executions pruned)\n"; stderr.String() != want {
			t.Errorf("prune told %q; want %q", stderr.String(), want)
		}
		for _, id := range []string{"chain-a", "chain-b"} {
			var chain showJSON
			if c.decode(&chain, "show", id); len(chain.Executions) != 1 || chain.Executions[0].ID != 4 {
				t.Errorf("after the prune, %s has %+v", id, chain.Executions)
			}
		}
		var again map[string]any
		if c.decode(&again, "prune", "-yes"); again["selected"] != 4.0 || again["executions"] != 0.0 {
			t.Errorf("a second prune of every instance -json = %v", again)
		}
	})
}

// TestInstancesRefusesBadCommandLines: a missing SQLite file is refused (and not
// created), usage errors exit 2 with the subcommand's usage, and nothing given by
// the user is echoed unbounded.
func TestInstancesRefusesBadCommandLines(t *testing.T) {
	refusesBadCommandLines(t, "instances", instancesCmd, "show", func(missing, long string) [][]string {
		return [][]string{
			{"show", "-db", missing},
			{"show", "", "-db", missing},
			{"raise", "id", "", "data", "-db", missing},
			{"list", "-db", missing, "-status", "Done"},
			{"list", "-db", missing, "-status", long},
			{"list", "-db", missing, "-created-after", "yesterday"},
			{"list", "-db", missing, "-limit", "0"},
			{"list", "-db", missing, "-" + long},
			{"history", "x", "-db", missing, "-execution", "-1"},
			{"prune", "x", "-db", missing, "-keep-last", "-1"},
			{"delete", "x", "-db", missing, "-prefix", "x"},
			{"prune", "x", "-db", missing, "-roots"},
			{"delete", "x", "y", "-db", missing},
			{"delete", "-db", missing, "-batch", "0"},
			{"prune", "-db", missing, "-batch", "1001"},
		}
	})
	// Flags may follow the arguments, and "--" ends them: the data here is "-x".
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("json", false, "")
	if pos, err := parseArgs(fs, []string{"a", "-json", "b", "--", "-x"}); err != nil || !slices.Equal(pos, []string{"a", "b", "-x"}) {
		t.Errorf("parseArgs = %q, %v", pos, err)
	}
}
