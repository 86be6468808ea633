// Command peers measures duroq's peers, goqite and River, on SQLite with the
// workloads `duroq bench queue` measures for duroq: enqueue N messages, then drain
// them un-keyed with 1 and more consumers; and, for goqite, a send-receive-ack cycle
// one message at a time. Every run uses a fresh database file in a new temporary
// directory, in WAL mode with synchronous=NORMAL. See README.md.
//
//	go run . [-n 10000] [-size 128] [-consumers 1,4,16] [-river-drivers mattn,modernc] [-json]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// enqueueBatch is the batch size of the enqueue phase, as in `duroq bench queue`.
const enqueueBatch = 100

type config struct {
	n            int
	size         int
	consumers    []int
	libs         []string
	riverDrivers []sqlDriver
	riverPG      bool   // River also runs on PostgreSQL
	postgres     string // its DSN
}

type result struct {
	Library   string        `json:"library"`
	Version   string        `json:"version"`
	Driver    string        `json:"sql_driver"`
	Workload  string        `json:"workload"`
	Consumers int           `json:"consumers"`
	Messages  int           `json:"messages"`
	Seconds   float64       `json:"seconds"`
	PerSec    float64       `json:"msgs_per_s"`
	P50       time.Duration `json:"p50_ns,omitempty"`
	P99       time.Duration `json:"p99_ns,omitempty"`
}

// report is the -json output.
type report struct {
	Settings settings `json:"settings"`
	Results  []result `json:"results"`
}

type settings struct {
	Messages      int               `json:"messages"`
	PayloadBytes  int               `json:"payload_bytes"`
	GoVersion     string            `json:"go_version"`
	GOOS          string            `json:"goos"`
	GOARCH        string            `json:"goarch"`
	CPUs          int               `json:"cpus"`
	SQLite        map[string]string `json:"sqlite_versions"`
	PostgreSQL    string            `json:"postgres_version,omitempty"`
	DSN           string            `json:"dsn_params"`
	GoqiteConns   int               `json:"goqite_max_open_conns"`
	RiverConns    int               `json:"river_max_open_conns"`
	RiverCooldown string            `json:"river_fetch_cooldown"`
	RiverPoll     string            `json:"river_fetch_poll_interval"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 10000, "messages per run (and cycles for the goqite cycle)")
	size := fs.Int("size", 128, "payload bytes per message")
	consumers := fs.String("consumers", "1,4,16", "comma-separated consumer (goqite goroutines) / worker (River MaxWorkers) counts for the drain")
	libs := fs.String("libs", "goqite,river", "comma-separated libraries to measure")
	pgDSN := os.Getenv("DUROQ_POSTGRES_DSN")
	defDrivers := "mattn,modernc"
	if pgDSN != "" {
		defDrivers += ",postgres"
	}
	drivers := fs.String("river-drivers", defDrivers, "comma-separated drivers to run River on: mattn (github.com/mattn/go-sqlite3, duroq's), modernc (modernc.org/sqlite, River's CLI's),\n"+
		"postgres (riverpgxv5 on the server of -postgres, in a schema of its own that is dropped; default when $DUROQ_POSTGRES_DSN is set)")
	pg := fs.String("postgres", pgDSN, "PostgreSQL DSN of -river-drivers postgres (default $DUROQ_POSTGRES_DSN)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := config{n: *n, size: *size, postgres: *pg}
	if cfg.n <= 0 || cfg.size < 0 {
		return fmt.Errorf("-n must be > 0 and -size >= 0")
	}
	for f := range strings.SplitSeq(*consumers, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c <= 0 {
			return fmt.Errorf("-consumers: bad count %q", f)
		}
		cfg.consumers = append(cfg.consumers, c)
	}
	for f := range strings.SplitSeq(*libs, ",") {
		switch f = strings.TrimSpace(f); f {
		case "goqite", "river":
			cfg.libs = append(cfg.libs, f)
		default:
			return fmt.Errorf("-libs: unknown library %q (want goqite, river)", f)
		}
	}
	for f := range strings.SplitSeq(*drivers, ",") {
		switch strings.TrimSpace(f) {
		case "mattn":
			cfg.riverDrivers = append(cfg.riverDrivers, mattn)
		case "modernc":
			cfg.riverDrivers = append(cfg.riverDrivers, modernc)
		case "postgres":
			if cfg.postgres == "" {
				return fmt.Errorf("-river-drivers postgres needs -postgres or $DUROQ_POSTGRES_DSN")
			}
			cfg.riverPG = true
		default:
			return fmt.Errorf("-river-drivers: unknown driver %q (want mattn, modernc, postgres)", f)
		}
	}

	st := settings{
		Messages: cfg.n, PayloadBytes: cfg.size,
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(),
		SQLite: map[string]string{}, DSN: dsnParams,
		GoqiteConns: goqiteConns, RiverConns: riverConns,
		RiverCooldown: riverFetchCooldown.String(), RiverPoll: riverFetchPollInterval.String(),
	}
	for _, d := range []sqlDriver{mattn, modernc} {
		v, err := sqliteVersion(ctx, d)
		if err != nil {
			return fmt.Errorf("%s: %w", d.short(), err)
		}
		st.SQLite[d.short()] = v
	}
	if cfg.riverPG && slices.Contains(cfg.libs, "river") {
		v, err := postgresVersion(ctx, cfg.postgres)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		st.PostgreSQL = v
	}

	results, err := measure(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(report{Settings: st, Results: results})
	}
	return printTable(stdout, st, results)
}

// measure runs every workload of cfg, each on a fresh database, and logs progress to
// progress.
func measure(ctx context.Context, cfg config, progress io.Writer) ([]result, error) {
	var out []result
	add := func(lib, module, driverModule, short string, rs ...result) {
		for _, r := range rs {
			r.Library, r.Version = lib, moduleVersion(module)
			r.Driver = driverModule + " " + moduleVersion(driverModule)
			fmt.Fprintf(progress, "%s %s [%s]: %s, %d consumers: %.0f/s\n", r.Library, r.Version, short, r.Workload, r.Consumers, r.PerSec)
			out = append(out, r)
		}
	}
	for _, lib := range cfg.libs {
		switch lib {
		case "goqite":
			schema, err := goqiteSchema(ctx)
			if err != nil {
				return nil, err
			}
			for _, c := range cfg.consumers {
				rs, err := goqiteDrain(ctx, cfg, schema, c)
				if err != nil {
					return nil, fmt.Errorf("goqite drain, %d consumers: %w", c, err)
				}
				add("goqite", goqiteModule, mattn.module(), mattn.short(), rs...)
			}
			r, err := goqiteCycle(ctx, cfg, schema)
			if err != nil {
				return nil, fmt.Errorf("goqite cycle: %w", err)
			}
			add("goqite", goqiteModule, mattn.module(), mattn.short(), r)
		case "river":
			for _, d := range cfg.riverDrivers {
				for _, c := range cfg.consumers {
					rs, err := riverDrain(ctx, cfg, d, c)
					if err != nil {
						return nil, fmt.Errorf("river [%s] drain, %d workers: %w", d.short(), c, err)
					}
					add("river", riverModule, d.module(), d.short(), rs...)
				}
			}
			if !cfg.riverPG {
				continue
			}
			for _, c := range cfg.consumers {
				rs, err := riverPGDrain(ctx, cfg, cfg.postgres, c)
				if err != nil {
					return nil, fmt.Errorf("river [postgres] drain, %d workers: %w", c, err)
				}
				add("river", riverModule, pgxModule, "postgres", rs...)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func printTable(w io.Writer, st settings, results []result) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "peers: %d messages of %d bytes per run; fresh SQLite file in a temp dir per run\n", st.Messages, st.PayloadBytes)
	fmt.Fprintf(&b, "settings: %s (WAL journal, synchronous=NORMAL); SQLite %s (mattn), %s (modernc)\n", st.DSN, st.SQLite["mattn"], st.SQLite["modernc"])
	fmt.Fprintf(&b, "pools: goqite MaxOpenConns %d (its README), River MaxOpenConns %d (its driver docs); River FetchCooldown %s, FetchPollInterval %s (as `river bench`)\n",
		st.GoqiteConns, st.RiverConns, st.RiverCooldown, st.RiverPoll)
	if st.PostgreSQL != "" {
		fmt.Fprintf(&b, "postgres: River on PostgreSQL %s through riverpgxv5, a fresh schema per run, pgxpool's default pool size\n", st.PostgreSQL)
	}
	fmt.Fprintf(&b, "machine: %s %s/%s, %d CPUs\n\n", st.GoVersion, st.GOOS, st.GOARCH, st.CPUs)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "library\tversion\tworkload\tconsumers\tmsgs/s\tp50\tsql driver")
	for _, r := range results {
		p50 := "-"
		if r.P50 > 0 {
			p50 = r.P50.Round(time.Microsecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%s\t%s\n", r.Library, r.Version, r.Workload, r.Consumers, r.PerSec, p50, r.Driver)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// moduleVersion is the version of module path in this binary's build info.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

func payload(size int) []byte { return bytes.Repeat([]byte{'x'}, size) }

// pct is the p-th percentile of sorted.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(float64(len(sorted))*p), len(sorted)-1)]
}
