package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/runtime/runtimetest"
)

// listFlag is a flag that may be given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// exportCmd writes recorded execution histories as JSON for the replayer
// (runtimetest.ReadHistories, ReplayExecutions) until it ends or SIGINT or SIGTERM
// interrupts it.
func exportCmd(args []string, stdout io.Writer) error {
	ctx, stop := interruptible()
	defer stop()
	return export(ctx, args, stdout, os.Stderr)
}

// export is exportCmd until ctx ends, with its usage and progress on stderr. It
// writes nothing until it has read every execution: an interrupted export leaves
// no output, rather than a truncated one.
func export(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "the database: a SQLite file, or a PostgreSQL URL (postgres://...)")
	schema := fs.String("schema", "public", "PostgreSQL schema holding duroq's tables")
	out := fs.String("o", "-", "output file (- for standard output), written whole or not at all")
	var instances, orchestrations listFlag
	fs.Var(&instances, "instance", "export this instance (repeatable; default: every instance)")
	fs.Var(&orchestrations, "orchestration", "export only executions of this orchestration (repeatable)")
	b := bulkFlags(fs, "instances read per page", provider.DefaultPageSize, provider.MaxPageSize)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: duroq export -db <sqlite file | postgres://...> [-instance id]... [-orchestration name]... [-o file] [-batch n] [-quiet]")
		fmt.Fprintln(fs.Output(), "\nWrites the recorded histories of every execution selected as one JSON document, for\nruntimetest.ReadHistories and ReplayExecutions: replay them against new code before deploying it.\nIt tells its progress on standard error; Ctrl-C stops it, writing nothing.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("export: %w", err)
	}
	if *db == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("export: -db is required and takes no arguments")
	}
	p, err := openExisting(ctx, *db, *schema)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer p.Close()
	s := &session{cmd: "duroq export", p: p, admin: p.Management(), stderr: stderr}
	executions, w, err := s.readExecutions(ctx, instances, orchestrations, b)
	if errors.Is(err, errInterrupted) {
		return &cmdError{msg: "duroq export: " + err.Error() + ": nothing written", interrupted: true}
	} else if err != nil {
		return err
	}
	write := func(out io.Writer) error { return runtimetest.WriteHistories(out, executions) }
	where := "standard output"
	if *out == "-" {
		err = write(stdout)
	} else {
		where, err = *out, writeWhole(*out, write)
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(stderr, "duroq export: wrote %d executions of %s to %s\n", len(executions), w.count(), where)
	return nil
}

// readExecutions reads the executions of the instances given (every instance when
// none is), of the orchestrations given (any when none is), a page of instances at
// a time, and returns them with the walk that read them.
func (s *session) readExecutions(ctx context.Context, instances, orchestrations []string, b *bulkOptions) ([]runtimetest.Execution, *walk, error) {
	var executions []runtimetest.Execution
	read := func(ctx context.Context, ids []string) error {
		for _, id := range ids {
			x, err := runtimetest.Export(ctx, s.admin, runtimetest.ExportFilter{Instances: []string{id}, Orchestrations: orchestrations})
			if errors.Is(err, provider.ErrNotFound) && len(instances) == 0 {
				continue // deleted since it was listed
			} else if err != nil {
				return err
			}
			executions = append(executions, x...)
		}
		return nil
	}
	w := s.walk(b, "instances", func() string { return fmt.Sprintf("%d executions read", len(executions)) })
	if len(instances) > 0 {
		w.total = tally{n: len(instances)}
		rest := instances
		err := w.run(ctx, func(ctx context.Context) (int, bool, error) {
			page := rest[:min(b.batch, len(rest))]
			rest = rest[len(page):]
			return len(page), len(rest) > 0, read(ctx, page)
		})
		return executions, w, err
	}
	var err error
	if w.total, err = s.countInstances(ctx, provider.InstanceQuery{}); err != nil {
		return nil, nil, err
	}
	err = s.walkInstances(ctx, w, provider.InstanceQuery{Limit: b.batch}, func(ctx context.Context, page []provider.InstanceInfo) error {
		return read(ctx, instanceIDs(page))
	})
	return executions, w, err
}

// writeWhole writes a file through write, in a temporary file renamed to name once
// complete: name is never left truncated, by a failure or an interruption.
func writeWhole(name string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*.tmp")
	if err != nil {
		return err
	}
	err = errors.Join(write(f), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
