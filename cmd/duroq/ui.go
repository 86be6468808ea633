package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/duroq/duroq/schedule"
	"github.com/duroq/duroq/ui"
)

// uiCmd serves the web UI of a database until ctx ends (SIGINT or SIGTERM from
// main).
func uiCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "the database: a SQLite file, or a PostgreSQL URL (postgres://...)")
	schema := fs.String("schema", "public", "PostgreSQL schema holding duroq's tables")
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on; the UI has no authentication: keep it on loopback or behind a proxy that has")
	readOnly := fs.Bool("read-only", false, "show only: no cancel, raise, delete, redrive or pause")
	scheduleQueue := fs.String("schedules-queue", schedule.DefaultQueue, "the queue holding the schedules the Schedules page shows (see duroq schedules -queue)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: duroq ui -db <sqlite file | postgres://...> [-addr 127.0.0.1:8080] [-read-only] [-schedules-queue q]\n\nServes the web UI: instances, their histories and trees, queues and dead letters,\nschedules, with cancel, raise, delete, redrive and queue and schedule pause/resume\n(confirmed, POST, same-origin only).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("ui: %w", err)
	}
	if *db == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("ui: -db is required and takes no arguments")
	}
	p, err := openExisting(ctx, *db, *schema)
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	defer p.Close()
	h, err := ui.New(ui.Options{Provider: p, Queues: p.Queue(), ScheduleQueue: *scheduleQueue, ReadOnly: *readOnly,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() && !*readOnly {
		fmt.Fprintf(stderr, "duroq ui: warning: %s is reachable from other machines and the UI has no authentication: anyone who reaches it can cancel and delete instances (-read-only, or a proxy with authentication)\n", ln.Addr())
	}
	mode := ""
	if *readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(stdout, "duroq ui: serving %s on http://%s/%s; Ctrl-C stops\n", clip(redacted(*db)), ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("ui: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// redacted is db without the password a PostgreSQL URL may hold.
func redacted(db string) string {
	if u, err := url.Parse(db); err == nil && isPostgres(db) {
		return u.Redacted()
	}
	return db
}

// uiMain runs uiCmd until SIGINT or SIGTERM.
func uiMain(args []string, stdout, stderr io.Writer) error {
	ctx, stop := interruptible()
	defer stop()
	return uiCmd(ctx, args, stdout, stderr)
}
