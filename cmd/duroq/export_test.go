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

			var out, stderr bytes.Buffer
			if err := export(t.Context(), append(b.args, "-batch", "3"), &out, &stderr); err != nil {
				t.Fatal(err)
			}
			if want := "duroq export: 3 of ~4 instances done (3 executions read)\nduroq export: 4 of ~4 instances done (5 executions read)\n" +
				"duroq export: wrote 5 executions of 4 instances to standard output\n"; stderr.String() != want {
				t.Errorf("export told %q; want %q", stderr.String(), want)
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
			stderr.Reset()
			if err := export(t.Context(), append(b.args, "-orchestration", "Greeting", "-instance", "ann", "-instance", "chain", "-o", file, "-quiet"), &out, &stderr); err != nil {
				t.Fatal(err)
			}
			if want := "duroq export: wrote 1 executions of 2 instances to " + file + "\n"; stderr.String() != want {
				t.Errorf("export -quiet told %q; want %q", stderr.String(), want)
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

			// Interrupted after its first instance, export writes nothing: the file
			// there stays as it was, and no temporary file is left.
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if err := export(ctx, append(b.args, "-batch", "1", "-o", file), &out, &cancelOnWrite{cancel: cancel}); err == nil ||
				err.Error() != "duroq export: interrupted after 1 of ~4 instances (context canceled): nothing written" || exitCode(err) != 130 {
				t.Fatalf("interrupted export = %v (exit %d)", err, exitCode(err))
			}
			if f, err := os.Open(file); err != nil {
				t.Fatal(err)
			} else if kept, err := runtimetest.ReadHistories(f); err != nil || len(kept) != 1 {
				t.Errorf("after an interrupted export, the file holds %+v, %v; want what the export before wrote", kept, err)
			}
			if entries, err := os.ReadDir(filepath.Dir(file)); err != nil || len(entries) != 1 {
				t.Errorf("after an interrupted export, the directory holds %v, %v", entries, err)
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
