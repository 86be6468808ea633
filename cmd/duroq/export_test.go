package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/runtimetest"
	"github.com/duroq/duroq/sqliteprovider"
)

// greeter is the code whose runs the export tests record: a greeting activity, and
// a Chain that continues as new once when started without input.
func greeter() *runtime.Registry {
	reg := greetingRegistry()
	_ = reg.RegisterOrchestration("Chain", func(ctx *runtime.Context, in string) (string, error) {
		if in == "" {
			return "", ctx.ContinueAsNew("again")
		}
		return in, nil
	})
	return reg
}

// greetingRegistry registers the greeting every command test runs: an orchestration
// "Greeting" whose one activity "Greet" answers "hello <input>".
func greetingRegistry() *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Greet", func(_ *runtime.ActivityContext, in string) (string, error) { return "hello " + in, nil })
	_ = reg.RegisterOrchestration("Greeting", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Greet", in).Get()
	})
	return reg
}

// record runs two Greetings and a Chain to completion on p.
func record(t *testing.T, p *adapter.Provider) {
	t.Helper()
	rt, err := runtime.New(p, greeter(), runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	c := rt.Client()
	for _, s := range [][3]string{{"ann", "Greeting", "ann"}, {"bob", "Greeting", "bob"}, {"chain", "Chain", "done"}, {"chain2", "Chain", ""}} {
		if err := c.StartOrchestration(ctx, s[0], s[1], s[2]); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"ann", "bob", "chain", "chain2"} {
		if st, err := c.WaitForOrchestration(ctx, id); err != nil || st.State != runtime.StateCompleted {
			t.Fatalf("%s: %+v, %v", id, st, err)
		}
	}
	cancel()
	<-done
}

// TestExportWritesHistoriesTheReplayerReads: `duroq export` on a SQLite file and on
// PostgreSQL writes every execution (or those selected), the replayer reads them,
// the recording code replays cleanly and changed code is flagged.
func TestExportWritesHistoriesTheReplayerReads(t *testing.T) {
	type backend struct {
		args []string
		open func(t *testing.T) *adapter.Provider
	}
	dir := t.TempDir()
	backends := map[string]backend{"sqlite": {
		args: []string{"-db", filepath.Join(dir, "app.db")},
		open: func(t *testing.T) *adapter.Provider {
			p, err := sqliteprovider.Open(filepath.Join(dir, "app.db"), sqliteprovider.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	}}
	if os.Getenv(pgtest.EnvDSN) != "" {
		dsn, schema := pgtest.Schema(t)
		backends["postgres"] = backend{
			args: []string{"-db", dsn, "-schema", schema},
			open: func(t *testing.T) *adapter.Provider {
				p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
		}
	} else {
		t.Logf("%s is not set: the PostgreSQL case does not run", pgtest.EnvDSN)
	}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			p := b.open(t)
			record(t, p)
			p.Close()

			var out bytes.Buffer
			if err := exportCmd(b.args, &out); err != nil {
				t.Fatal(err)
			}
			all, err := runtimetest.ReadHistories(&out)
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 5 { // ann, bob, chain, and chain2's two executions
				t.Fatalf("exported %d executions; want 5", len(all))
			}
			if err := runtimetest.ReplayExecutions(t.Context(), greeter(), all); err != nil {
				t.Fatalf("replay against the recording code: %v", err)
			}
			changed := runtime.NewRegistry()
			_ = changed.RegisterOrchestration("Greeting", func(ctx *runtime.Context, in string) (string, error) {
				return ctx.ScheduleActivity("Greet", strings.ToUpper(in)).Get()
			})
			_ = changed.RegisterOrchestration("Chain", func(ctx *runtime.Context, in string) (string, error) { return in, nil })
			err = runtimetest.ReplayExecutions(t.Context(), changed, all)
			if !errors.Is(err, runtime.ErrNondeterminism) || strings.Count(err.Error(), "\n")+1 != 3 {
				t.Fatalf("replay against changed code = %v; want 3 executions flagged (the Greetings and chain2's first)", err)
			}

			file := filepath.Join(t.TempDir(), "greetings.json")
			if err := exportCmd(append(b.args, "-orchestration", "Greeting", "-instance", "ann", "-instance", "chain", "-o", file), &out); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			some, err := runtimetest.ReadHistories(f)
			if err != nil || len(some) != 1 || some[0].Instance != "ann" {
				t.Fatalf("export of Greetings among ann and chain = %+v, %v; want ann's one execution", some, err)
			}
		})
	}
}

// TestExportRefusesWhatItCannotRead: a missing SQLite file is an error, and is not
// created; so are missing and unknown flags.
func TestExportRefusesWhatItCannotRead(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo.db")
	var out bytes.Buffer
	if err := exportCmd([]string{"-db", missing}, &out); err == nil || !strings.Contains(err.Error(), "no SQLite database") {
		t.Fatalf("export of a missing file = %v; want an error saying so", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("export created %s", missing)
	}
	for _, args := range [][]string{nil, {"-db"}, {"-bogus"}, {"-db", missing, "extra"}} {
		if err := exportCmd(args, &out); err == nil {
			t.Errorf("export %q succeeded", args)
		}
	}
}
