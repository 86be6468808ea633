package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/duroq/duroq/runtime/runtimetest"
)

// listFlag is a flag that may be given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// exportCmd writes recorded execution histories as JSON for the replayer
// (runtimetest.ReadHistories, ReplayExecutions).
func exportCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	db := fs.String("db", "", "the database: a SQLite file, or a PostgreSQL URL (postgres://...)")
	schema := fs.String("schema", "public", "PostgreSQL schema holding duroq's tables")
	out := fs.String("o", "-", "output file (- for standard output)")
	var instances, orchestrations listFlag
	fs.Var(&instances, "instance", "export this instance (repeatable; default: every instance)")
	fs.Var(&orchestrations, "orchestration", "export only executions of this orchestration (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: duroq export -db <sqlite file | postgres://...> [-instance id]... [-orchestration name]... [-o file]")
		fmt.Fprintln(fs.Output(), "\nWrites the recorded histories of every execution selected as one JSON document, for\nruntimetest.ReadHistories and ReplayExecutions: replay them against new code before deploying it.")
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
	ctx := context.Background()
	p, err := openExisting(ctx, *db, *schema)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer p.Close()
	executions, err := runtimetest.Export(ctx, p, runtimetest.ExportFilter{Instances: instances, Orchestrations: orchestrations})
	if err != nil {
		return err
	}
	if *out == "-" {
		return runtimetest.WriteHistories(stdout, executions)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := errors.Join(runtimetest.WriteHistories(f, executions), f.Close()); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(os.Stderr, "duroq: exported %d executions to %s\n", len(executions), *out)
	return nil
}
