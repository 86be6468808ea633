package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, to drop the benchmark's schema

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/sqlitedb"
	"github.com/duroq/duroq/sqliteprovider"
)

const benchUsage = `usage: duroq bench <workload> [flags]

workloads:
  seq      N instances × K sequential no-op activities (defaults n=1000 k=2)
  fanout   N instances × F parallel activities sleeping 10 ms, joined (duroxide's stress shape: f=5, 20 in flight)
  timers   N instances × K sequential durable timers of 1 ms
  events   N instances × K events delivered through each instance's event queue
  queue    raw queue: enqueue 10×N messages, then drain them through mq.Consumer (un-keyed, keyed 1 and 10 per key,
           1, 16 and 64 concurrent handlers; 4 and 16 consumers of 64, 4 of 256); then N send-receive-ack
           cycles one message at a time. -consumers C -handlers H [-per-key K] runs that one load alone;
           -warmup measures each load after an unmeasured run of it

flags:`

func benchCmd(args []string, out io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(os.Stderr, benchUsage)
		return errors.New("bench: name a workload")
	}
	workload := args[0]
	fs := flag.NewFlagSet("bench "+workload, flag.ExitOnError)
	fs.Usage = func() { fmt.Fprintln(os.Stderr, benchUsage); fs.PrintDefaults() }
	backend := fs.String("backend", "sqlite", "sqlite (a file), sqlite-memory or postgres")
	dir := fs.String("dir", "", "directory of the SQLite file (default: a temporary one)")
	dsn := fs.String("dsn", os.Getenv("DUROQ_POSTGRES_DSN"), "PostgreSQL DSN (postgres backend; default $DUROQ_POSTGRES_DSN)")
	syncMode := fs.String("sync", "normal", "SQLite synchronous mode: normal or full")
	pool := fs.Int("pool", 0, "PostgreSQL connections per process (0: pgdb's default, GOMAXPROCS but at least 4)")
	load := addLoadFlags(fs)
	prefill := fs.Bool("prefill", false, "start every instance before the runtime (same as -concurrency 0)")
	processes := fs.Int("processes", 0, "run the workload on this many worker processes, with starts from a separate client process\n"+
		"(at most -concurrency in flight, default 200; 0: in this process)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	memprofile := fs.String("memprofile", "", "write a heap profile (what the run allocated: go tool pprof -sample_index=alloc_space) to this file")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	consumers := fs.Int("consumers", 0, "queue: run only the load of this many consumers (0: every standard load, then the cycle)")
	handlers := fs.Int("handlers", 1, "queue, with -consumers: batches each consumer handles at once")
	perKey := fs.Int("per-key", 0, "queue, with -consumers: messages per routing key (0: un-keyed)")
	warmup := fs.Bool("warmup", false, "queue: run each load once, unmeasured, before measuring it on the same backend\n"+
		"(the figures of a long-running process, whose connections have prepared every statement)")
	fs.Parse(args[1:])

	// SIGPIPE too: piped into head, the benchmark would otherwise die at its next line
	// of output and leave its PostgreSQL schema behind; now it stops and drops it.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()
	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memprofile != "" {
		defer func() {
			if err := writeHeapProfile(*memprofile); err != nil {
				fmt.Fprintf(os.Stderr, "duroq bench: %v\n", err)
			}
		}()
	}
	open := func() (*benchBackend, error) {
		return openBenchBackend(ctx, *backend, *dir, *dsn, *syncMode, *pool)
	}
	machine := fmt.Sprintf("%d CPUs, %s/%s, %s, %s", goruntime.NumCPU(), goruntime.GOOS, goruntime.GOARCH, goruntime.Version(), gcSettings())

	if *consumers < 0 || *handlers < 1 || *perKey < 0 {
		return fmt.Errorf("bench: -consumers %d -handlers %d -per-key %d: want -consumers and -per-key at least 0, -handlers at least 1", *consumers, *handlers, *perKey)
	}
	if workload == "queue" {
		loads := slices.Clone(queueConfigs)
		if *consumers > 0 {
			loads = []bench.QueueConfig{{Consumers: *consumers, Concurrency: *handlers, PerKey: *perKey}}
		}
		for i := range loads {
			loads[i].Warmup = *warmup
		}
		return queueBench(ctx, out, open, loads, *consumers == 0, *load.n, *asJSON, machine)
	}
	if *consumers > 0 || *warmup {
		return errors.New("bench: -consumers and -warmup are flags of the queue workload")
	}

	cfg := load.config(workload)
	if cfg.Concurrency < 0 {
		cfg.Concurrency = 0
		switch {
		case *processes > 0:
			cfg.Concurrency = 200
		case workload == bench.WorkloadFanout:
			cfg.Concurrency = 20
		}
	}
	if *prefill {
		cfg.Concurrency = 0
	}
	p, err := open()
	if err != nil {
		return err
	}
	defer p.Close()
	var r fmt.Stringer
	if *processes > 0 {
		sr, err := scaleOut(ctx, p, cfg, *processes)
		if err != nil {
			return err
		}
		sr.Settings += " · backend: " + p.setting + " · " + machine
		r = sr
	} else {
		lr, err := bench.Load(ctx, p, cfg)
		if err != nil {
			return err
		}
		lr.Settings += " · backend: " + p.setting + " · " + machine
		r = lr
	}
	if *asJSON {
		return json.NewEncoder(out).Encode(r)
	}
	fmt.Fprintln(out, r)
	return nil
}

// loadFlags are the flags that describe a load run (bench.Config), shared by
// `duroq bench` and the processes of a scale-out run.
type loadFlags struct {
	n, k, f, concurrency, orchConc, workers, stateCache *int
	delay                                               *time.Duration
	trace                                               *bool
}

func addLoadFlags(fs *flag.FlagSet) *loadFlags {
	return &loadFlags{
		n:           fs.Int("n", 1000, "instances (queue: messages ÷ 10, and cycles)"),
		k:           fs.Int("k", 2, "sequential steps per instance (seq, timers, events)"),
		f:           fs.Int("f", 5, "parallel activities per instance (fanout)"),
		delay:       fs.Duration("activity-delay", 0, "activity duration (fanout default 10ms)"),
		concurrency: fs.Int("concurrency", -1, "instances in flight; 0 starts all before the runtime (default: 0, fanout 20)"),
		orchConc:    fs.Int("orchestrations", 0, "orchestration dispatchers (0: the runtime default)"),
		workers:     fs.Int("workers", 0, "activity slots (0: the runtime default)"),
		stateCache:  fs.Int("state-cache", 0, "executions whose replayed state is cached between turns (0: the runtime default, -1: off)"),
		trace:       fs.Bool("trace", false, "trace every turn and activity with OpenTelemetry's SDK (spans batched, then discarded): what tracing costs"),
	}
}

func (l *loadFlags) config(workload string) bench.Config {
	cfg := bench.Config{Workload: workload, N: *l.n, K: *l.k, F: *l.f, ActivityDelay: *l.delay, Concurrency: *l.concurrency,
		Options: runtime.Options{OrchestrationConcurrency: *l.orchConc, WorkerConcurrency: *l.workers, StateCacheSize: *l.stateCache}}
	if *l.trace {
		cfg.Options.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
	}
	return cfg
}

// discardSpans is a span exporter that drops what it is given: the spans are
// recorded and batched as with a real exporter, without the export's own cost.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// loadArgs are the flags of loadFlags that make cfg.
func loadArgs(cfg bench.Config) []string {
	o := cfg.Options
	return []string{"-workload", cfg.Workload, "-n", strconv.Itoa(cfg.N), "-k", strconv.Itoa(cfg.K), "-f", strconv.Itoa(cfg.F),
		"-activity-delay", cfg.ActivityDelay.String(), "-concurrency", strconv.Itoa(cfg.Concurrency),
		"-orchestrations", strconv.Itoa(o.OrchestrationConcurrency), "-workers", strconv.Itoa(o.WorkerConcurrency),
		"-state-cache", strconv.Itoa(o.StateCacheSize), "-trace=" + strconv.FormatBool(o.TracerProvider != nil)}
}

// benchBackend is a fresh provider of `duroq bench` and what it leaves behind: Close
// closes the provider, then removes the temporary directory of its SQLite file or
// drops its PostgreSQL schema.
type benchBackend struct {
	*adapter.Provider
	setting string       // what it is, for the report
	remove  func() error // nil: nothing to remove
	// dbArgs are the flags with which another process opens the same database (see
	// benchProcess).
	dbArgs []string
}

func (b *benchBackend) Close() error {
	err := b.Provider.Close()
	if b.remove != nil {
		err = errors.Join(err, b.remove())
	}
	return err
}

// openBenchBackend opens a fresh provider of the named backend and describes it;
// pool is a PostgreSQL provider's MaxOpenConns.
func openBenchBackend(ctx context.Context, backend, dir, dsn, syncMode string, pool int) (*benchBackend, error) {
	sync := strings.ToUpper(syncMode)
	if sync != "NORMAL" && sync != "FULL" {
		return nil, fmt.Errorf("bench: -sync %q: want normal or full", syncMode)
	}
	if pool < 0 || pool > 0 && backend != "postgres" {
		return nil, fmt.Errorf("bench: -pool %d: want a positive number of connections, with -backend postgres", pool)
	}
	switch backend {
	case "sqlite", "sqlite-memory":
		path := ":memory:"
		var remove func() error
		if backend == "sqlite" {
			if dir == "" {
				tmp, err := os.MkdirTemp("", "duroq-bench-")
				if err != nil {
					return nil, err
				}
				dir, remove = tmp, func() error { return os.RemoveAll(tmp) }
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("bench: -dir: %w", err)
			}
			path = filepath.Join(dir, fmt.Sprintf("bench-%d.db", time.Now().UnixNano()))
		}
		p, err := sqliteprovider.Open(path, sqliteprovider.Options{DB: sqlitedb.Options{Synchronous: sync}})
		if err != nil {
			if remove != nil {
				err = errors.Join(err, remove())
			}
			return nil, err
		}
		return &benchBackend{Provider: p, setting: fmt.Sprintf("SQLite %s (WAL, synchronous=%s)", path, sync), remove: remove,
			dbArgs: []string{"-sqlite", path, "-sync", sync}}, nil
	case "postgres":
		if dsn == "" {
			return nil, errors.New("bench: the postgres backend needs -dsn or $DUROQ_POSTGRES_DSN")
		}
		schema := fmt.Sprintf("duroq_bench_%d", time.Now().UnixNano())
		drop := func() error { return dropSchema(dsn, schema) }
		p, err := pgprovider.Open(ctx, dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: pool}})
		if err != nil {
			return nil, errors.Join(err, drop())
		}
		setting := "PostgreSQL schema " + schema + " (default pool)"
		if pool > 0 {
			setting = fmt.Sprintf("PostgreSQL schema %s (pool of %d)", schema, pool)
		}
		return &benchBackend{Provider: p, setting: setting, remove: drop,
			dbArgs: []string{"-dsn", dsn, "-schema", schema, "-pool", strconv.Itoa(pool)}}, nil
	}
	return nil, fmt.Errorf("bench: unknown backend %q (want sqlite, sqlite-memory or postgres)", backend)
}

// dropSchema drops the benchmark's schema and everything in it.
func dropSchema(dsn, schema string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec("DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE"); err != nil {
		return fmt.Errorf("bench: drop schema %s: %w", schema, err)
	}
	return nil
}

// queueConfigs are the loads of `duroq bench queue`, on 10×n messages each.
var queueConfigs = []bench.QueueConfig{
	{Concurrency: 1}, {Concurrency: 16}, {Concurrency: 64},
	{Concurrency: 1, PerKey: 1}, {Concurrency: 16, PerKey: 1}, {Concurrency: 64, PerKey: 1},
	{Concurrency: 1, PerKey: 10}, {Concurrency: 16, PerKey: 10}, {Concurrency: 64, PerKey: 10},
	// Several consumers at once, as several processes would drain a queue.
	{Consumers: 4, Concurrency: 64}, {Consumers: 16, Concurrency: 64},
	{Consumers: 4, Concurrency: 64, PerKey: 10}, {Consumers: 16, Concurrency: 64, PerKey: 10},
	// As many handlers as River's own benchmark comes near (bench/peers runs River
	// with -consumers 256,2000 beside them).
	{Consumers: 4, Concurrency: 256}, {Consumers: 4, Concurrency: 256, PerKey: 10},
}

// queueBench runs `duroq bench queue`: each of loads and, if cycle, the cycle, each
// on a fresh backend.
func queueBench(ctx context.Context, out io.Writer, open func() (*benchBackend, error), loads []bench.QueueConfig, cycle bool, n int, asJSON bool, machine string) error {
	var res struct {
		Loads []bench.QueueReport `json:"loads"`
		Cycle *bench.CycleReport  `json:"cycle,omitempty"`
	}
	run := func(measure func(q mq.MessageQueue) (fmt.Stringer, error)) error {
		p, err := open()
		if err != nil {
			return err
		}
		defer p.Close()
		r, err := measure(p.Queue())
		if err == nil && !asJSON {
			fmt.Fprintf(out, "%s\n  backend: %s · %s\n", r, p.setting, machine)
		}
		return err
	}
	for _, c := range loads {
		c.Messages = n * 10
		err := run(func(q mq.MessageQueue) (fmt.Stringer, error) {
			r, err := bench.QueueLoad(ctx, q, c)
			res.Loads = append(res.Loads, r)
			return r, err
		})
		if err != nil {
			return err
		}
	}
	if cycle {
		err := run(func(q mq.MessageQueue) (fmt.Stringer, error) {
			r, err := bench.QueueCycle(ctx, q, n)
			res.Cycle = &r
			return r, err
		})
		if err != nil {
			return err
		}
	}
	if !asJSON {
		return nil
	}
	return json.NewEncoder(out).Encode(res)
}

// writeHeapProfile writes the heap profile, whose alloc_space and alloc_objects
// samples count everything the process allocated so far, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// gcSettings names the garbage collector's settings the run's processes read from
// the environment: they move a worker's CPU per orchestration by a quarter (README,
// "Deploying").
func gcSettings() string {
	s := "GOGC=" + cmp.Or(os.Getenv("GOGC"), "100")
	if limit := os.Getenv("GOMEMLIMIT"); limit != "" {
		s += " GOMEMLIMIT=" + limit
	}
	return s
}
