package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/schedule"
	"github.com/duroq/duroq/sqliteprovider"
)

// scli runs `duroq schedules` on one database.
type scli struct {
	t  *testing.T
	db []string // the -db (and -schema) flags
}

func (c *scli) try(args ...string) (string, string, error) {
	var out, stderr bytes.Buffer
	err := schedulesGroup.runContext(c.t.Context(), slices.Concat(args[:1], c.db, args[1:]), &out, &stderr)
	return out.String(), stderr.String(), err
}

func (c *scli) run(args ...string) string {
	c.t.Helper()
	out, _, err := c.try(args...)
	if err != nil {
		c.t.Fatalf("duroq schedules %q: %v", args, err)
	}
	return out
}

func (c *scli) decode(v any, args ...string) {
	c.t.Helper()
	out := c.run(append(args, "-json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("duroq schedules %q -json printed %q: %v", args, out, err)
	}
}

// fails runs a command that must fail with the exit code and a message holding
// want.
func (c *scli) fails(code int, want string, args ...string) {
	c.t.Helper()
	_, _, err := c.try(args...)
	if err == nil || exitCode(err) != code || !strings.Contains(err.Error(), want) || len(err.Error()) > 1100 {
		c.t.Fatalf("duroq schedules %q = %v (exit %d); want exit %d saying %q", args, err, exitCode(err), code, want)
	}
}

// listedSchedules is what list prints with -json.
type listedSchedules struct {
	Schedules []scheduleJSON `json:"schedules"`
	Next      string         `json:"next"`
}

// TestSchedulesCommand: `duroq schedules` on a SQLite file and on PostgreSQL.
func TestSchedulesCommand(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "app.db")
		p, err := sqliteprovider.Open(path, sqliteprovider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		schedulesScenario(t, p, &scli{t: t, db: []string{"-db", path}})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t) // skips, saying "PostgreSQL tests skipped", without DUROQ_POSTGRES_DSN
		p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
		if err != nil {
			t.Fatal(err)
		}
		schedulesScenario(t, p, &scli{t: t, db: []string{"-db", dsn, "-schema", schema}})
	})
}

func schedulesScenario(t *testing.T, p *adapter.Provider, c *scli) {
	defer p.Close()
	before := time.Now()
	out := c.run("create", "nightly", "-cron", "0 3 * * *", "-tz", "Europe/Paris", "-jitter", "1m",
		"-enqueue", "reports", "-key", "rk", "-tag", "t", "-payload", "daily")
	for _, want := range []string{"Schedule:", "nightly", "Time zone:", "Europe/Paris", "Enqueue to:", "reports", "Payload:", "daily", "State:", "active", "Next slot:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("create printed no %q:\n%s", want, out)
		}
	}
	var tick scheduleJSON
	c.decode(&tick, "create", "tick", "-every", "30s", "-catchup", "all", "-max-catchup", "10", "-start", "Report", "-input", "x", "-overlap", "skip")
	if tick.Every != "30s" || tick.Catchup != "all" || tick.MaxCatchup != 10 || tick.Overlap != "skip" || tick.Orchestration == nil ||
		tick.Orchestration.Name != "Report" || tick.Orchestration.Input != "x" || tick.Next.Before(before) || tick.Next.Sub(before) > 31*time.Second {
		t.Fatalf("create tick -json = %+v", tick)
	}

	// What the CLI stored is what a Scheduler reads, through the same queue.
	m, err := schedule.NewManager(p.Queue(), schedule.ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.Get(t.Context(), "nightly")
	if err != nil || in.Cron != "0 3 * * *" || in.TimeZone != "Europe/Paris" || in.Jitter != time.Minute || in.Enqueue == nil ||
		in.Enqueue.RoutingKey != "rk" || in.Enqueue.Tag != "t" || string(in.Enqueue.Payload) != "daily" || in.Next.UTC().Minute() != 0 {
		t.Fatalf("Get(nightly) = %+v, %v", in, err)
	}

	c.fails(1, "exists", "create", "tick", "-every", "1m", "-enqueue", "q")
	c.fails(1, "Cron", "create", "bad", "-cron", "61 * * * *", "-enqueue", "q")
	c.fails(1, "TimeZone", "create", "bad", "-cron", "@daily", "-tz", "Mars/Olympus", "-enqueue", "q")
	c.fails(2, "give -cron or -every", "create", "bad", "-enqueue", "q")
	c.fails(2, "give -cron or -every", "create", "bad", "-cron", "@daily", "-every", "1m", "-enqueue", "q")
	c.fails(2, "give -enqueue <queue> or -start <orchestration>", "create", "bad", "-every", "1m")
	c.fails(2, "-key, -tag and -payload go with -enqueue", "create", "bad", "-every", "1m", "-start", "R", "-payload", "p")
	c.fails(2, "-input goes with -start", "create", "bad", "-every", "1m", "-enqueue", "q", "-input", "i")

	out = c.run("list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], "nightly ") || !strings.HasPrefix(lines[2], "tick ") ||
		!strings.Contains(lines[1], "cron 0 3 * * * Europe/Paris (jitter 1m0s)") || !strings.Contains(lines[2], "start Report") ||
		!strings.HasSuffix(lines[2], "active") {
		t.Fatalf("list printed:\n%s", out)
	}
	out = c.run("list", "-limit", "1")
	if !strings.Contains(out, "nightly") || strings.Contains(out, "tick ") ||
		!strings.HasSuffix(out, "more schedules follow: list the next page with -after nightly\n") {
		t.Fatalf("list -limit 1 printed:\n%s", out)
	}
	var page listedSchedules
	c.decode(&page, "list", "-after", "nightly")
	if len(page.Schedules) != 1 || page.Schedules[0].ID != "tick" || page.Next != "" {
		t.Fatalf("list -after nightly -json = %+v", page)
	}

	var paused scheduleJSON
	c.decode(&paused, "pause", "tick")
	if !paused.Paused || !paused.Next.IsZero() {
		t.Fatalf("pause tick -json = %+v", paused)
	}
	if out := c.run("list"); !strings.Contains(out, "paused") {
		t.Fatalf("list after pause:\n%s", out)
	}
	out = c.run("resume", "tick")
	if !strings.Contains(out, "active") || !strings.Contains(out, "Next slot:") {
		t.Fatalf("resume printed:\n%s", out)
	}
	var shown scheduleJSON
	c.decode(&shown, "show", "nightly")
	if e := shown.Enqueue; e == nil || e.Queue != "reports" || e.RoutingKey != "rk" || e.Tag != "t" || string(e.Payload) != "daily" ||
		shown.TimeZone != "Europe/Paris" || shown.Jitter != "1m0s" {
		t.Fatalf("show nightly -json = %+v", shown)
	}

	// update replaces the definition, keeping the pause.
	c.run("pause", "nightly")
	var updated scheduleJSON
	c.decode(&updated, "update", "nightly", "-every", "2h", "-start", "Report")
	if updated.Every != "2h0m0s" || updated.Cron != "" || updated.Enqueue != nil || updated.Orchestration == nil || !updated.Paused {
		t.Fatalf("update nightly -json = %+v", updated)
	}
	c.run("resume", "nightly")
	c.fails(1, "no schedule with this id", "update", "missing", "-every", "1h", "-enqueue", "q")
	c.fails(2, "give -cron or -every", "update", "nightly", "-enqueue", "q")

	// Another schedules queue holds other schedules.
	c.run("create", "other", "-queue", "more.schedules", "-every", "1h", "-enqueue", "q")
	c.decode(&page, "list", "-queue", "more.schedules")
	if len(page.Schedules) != 1 || page.Schedules[0].ID != "other" {
		t.Fatalf("list -queue more.schedules = %+v", page)
	}

	if out := c.run("delete", "tick"); out != "deleted schedule tick\n" {
		t.Fatalf("delete printed %q", out)
	}
	c.fails(1, "no schedule with this id", "delete", "tick")
	c.fails(1, "no schedule with this id", "show", "tick")
	c.fails(1, "no schedule with this id", "pause", "tick")
	c.decode(&page, "list")
	if len(page.Schedules) != 1 || page.Schedules[0].ID != "nightly" {
		t.Fatalf("list after delete = %+v", page)
	}
}

// TestSchedulesRefusesBadCommandLines: as `duroq queues`.
func TestSchedulesRefusesBadCommandLines(t *testing.T) {
	refusesBadCommandLines(t, "schedules", schedulesCmd, "create", func(missing, long string) [][]string {
		return [][]string{
			{"show", "-db", missing},
			{"show", "", "-db", missing},
			{"pause", "a", "b", "-db", missing},
			{"list", "-db", missing, "-limit", "0"},
			{"list", "-db", missing, "-limit", "1001"},
			{"create", "x", "-db", missing, "-every", "soon"},
			{"create", "x", "-db", missing, "-anchor", "yesterday"},
			{"create", "x", "-db", missing, "-max-catchup", "0"},
			{"create", "x", "-db", missing, "-" + long},
		}
	})
}
