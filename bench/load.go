package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// Workloads of Load.
const (
	WorkloadSeq    = "seq"    // N instances × K sequential no-op activities
	WorkloadFanout = "fanout" // N instances × F parallel activities (each sleeping ActivityDelay), joined
	WorkloadTimers = "timers" // N instances × K sequential durable timers of TimerDelay
	WorkloadEvents = "events" // N instances × K events, each waited for and delivered through the instance's event queue
)

// Config describes a load run.
type Config struct {
	Workload string // one of the Workload constants; required
	N        int    // instances (default 1000)
	K        int    // sequential steps per instance: activities, timers or events (default 2)
	F        int    // parallel activities per fanout instance (default 5)
	// ActivityDelay is how long each activity sleeps (default 0; fanout: 10 ms; a
	// negative delay means none, also for fanout).
	ActivityDelay time.Duration
	// TimerDelay is each timer's duration (default 1 ms).
	TimerDelay time.Duration
	// Concurrency bounds the instances in flight, started from 16 goroutines (at
	// most Concurrency) while the runtime runs, as a web server's requests would; 0
	// starts all N before the runtime (prefill), the setup of the peers' published
	// figures.
	Concurrency int
	// Runtime options (concurrency, locks); the load driver sets OnExecutionEnded.
	Options runtime.Options
}

func (c *Config) defaults() error {
	if c.N <= 0 {
		c.N = 1000
	}
	if c.K <= 0 {
		c.K = 2
	}
	if c.F <= 0 {
		c.F = 5
	}
	if c.TimerDelay <= 0 {
		c.TimerDelay = time.Millisecond
	}
	switch c.Workload {
	case WorkloadFanout:
		if c.ActivityDelay == 0 {
			c.ActivityDelay = 10 * time.Millisecond
		}
		c.ActivityDelay = max(c.ActivityDelay, 0)
	case WorkloadSeq, WorkloadTimers, WorkloadEvents:
	default:
		return fmt.Errorf("bench: unknown workload %q (want seq, fanout, timers or events)", c.Workload)
	}
	return nil
}

// Report is the outcome of a load run.
type Report struct {
	Workload       string        `json:"workload"`             // Config.Workload
	Orchestrations int           `json:"orchestrations"`       // instances run (Config.N)
	Activities     int           `json:"activities"`           // activities run by them (0 for timers and events)
	Elapsed        time.Duration `json:"elapsed_ns"`           // from the runtime's start (Drive: the first start) to the last instance's end
	OrchPerSec     float64       `json:"orchestrations_per_s"` // Orchestrations / Elapsed
	ActPerSec      float64       `json:"activities_per_s"`     // Activities / Elapsed
	// Latency from start request to completion.
	P50, P95, P99 time.Duration
	// StartP50 is how long a StartOrchestration call took (median), when the
	// instances were started while the runtime ran; zero when started first.
	StartP50 time.Duration `json:"start_p50_ns"`
	// StartP99 is StartP50's 99th percentile.
	StartP99 time.Duration `json:"start_p99_ns"`
	// StartsPerSec is the rate of StartOrchestration calls, from the first call
	// to the last one's return, when the instances were started while the runtime
	// ran: with Concurrency at least N, how fast clients can start instances while
	// the runtime drains those started before.
	StartsPerSec float64 `json:"starts_per_s"`
	// CPUPerOrch is the process's user+system CPU time per orchestration.
	CPUPerOrch time.Duration `json:"cpu_per_orchestration_ns"`
	// TxPerOrch is the provider's write transactions per orchestration (0 when the
	// provider does not count them).
	TxPerOrch float64 `json:"write_transactions_per_orchestration"`
	// Settings lists the configuration the figures were measured with, for humans.
	Settings string `json:"settings"`
}

// String renders the report on three lines: throughput, latency and cost, settings.
func (r Report) String() string {
	s := fmt.Sprintf("%s: %d orchestrations in %v: %.0f orchestrations/s, %.0f activities/s\n"+
		"  latency p50 %v p95 %v p99 %v · CPU %v per orchestration",
		r.Workload, r.Orchestrations, r.Elapsed.Round(time.Millisecond), r.OrchPerSec, r.ActPerSec,
		r.P50.Round(10*time.Microsecond), r.P95.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond),
		r.CPUPerOrch.Round(time.Microsecond))
	if r.TxPerOrch > 0 {
		s += fmt.Sprintf(" · %.1f write transactions per orchestration", r.TxPerOrch)
	}
	if r.StartP50 > 0 {
		s += fmt.Sprintf(" · StartOrchestration p50 %v p99 %v, %.0f starts/s", r.StartP50.Round(10*time.Microsecond), r.StartP99.Round(10*time.Microsecond), r.StartsPerSec)
	}
	return s + "\n  settings: " + r.Settings
}

// TxCounter is implemented by providers that count their write transactions.
type TxCounter interface {
	// WriteTransactions returns how many write transactions the provider has
	// committed since it was opened.
	WriteTransactions() uint64
}

// Load runs cfg's workload on a runtime over p and reports throughput and latency.
// p must be empty of other work.
func Load(ctx context.Context, p provider.Provider, cfg Config) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	d := newDriver(p, cfg)
	if cfg.Concurrency == 0 {
		for _, id := range d.ids {
			if err := d.start(ctx, id); err != nil {
				return Report{}, err
			}
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ended := make(chan Ended, cfg.N)
	var runErr error
	ran := make(chan struct{})
	cpu0 := cpuTime()
	tx0 := txCount(p)
	began := time.Now()
	if cfg.Concurrency == 0 {
		d.restart(began) // prefilled instances count from when the runtime starts
	}
	go func() {
		defer close(ran)
		runErr = Serve(runCtx, p, cfg, func(e Ended) {
			select { // once collect has stopped, the runtime must still drain
			case ended <- e:
			case <-runCtx.Done():
			}
		})
	}()
	var fed <-chan error
	if cfg.Concurrency > 0 {
		fed = d.feed(runCtx)
	}
	err := d.collect(ctx, ended, fed, ran)
	elapsed := time.Since(began)
	cpu := cpuTime() - cpu0
	tx := txCount(p) - tx0
	stop()
	<-ran
	if err != nil || runErr != nil {
		return Report{}, errors.Join(err, runErr)
	}
	r := d.report(elapsed, cpu, "all started first")
	if tx > 0 {
		r.TxPerOrch = float64(tx) / float64(cfg.N)
	}
	return r, nil
}

// Ended is the end of an execution, as the runtime that ran it reports it.
type Ended struct {
	Instance string    `json:"instance"` // the instance whose execution ended
	Status   string    `json:"status"`   // provider.StatusCompleted, StatusFailed or StatusContinuedAsNew
	At       time.Time `json:"at"`       // when the runtime committed the end, by its process's clock
}

// Serve runs cfg's workload on a runtime over p until ctx ends, calling ended for
// every execution that ends there: a worker of Load, or a worker process of a
// scale-out run (see Drive).
func Serve(ctx context.Context, p provider.Provider, cfg Config, ended func(Ended)) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	reg, err := loadRegistry(cfg)
	if err != nil {
		return err
	}
	opts := cfg.Options
	opts.OnExecutionEnded = func(instance string, _ uint64, status string) {
		ended(Ended{Instance: instance, Status: status, At: time.Now()})
	}
	rt, err := runtime.New(p, reg, opts)
	if err != nil {
		return err
	}
	if err := rt.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("bench: runtime stopped: %w", err)
	}
	return nil
}

// Drive is the client of a scale-out run, whose runtimes (Serve) run in other
// processes: it starts cfg.N instances on p while they run, from 16 goroutines with
// at most cfg.Concurrency in flight (0: no bound), and counts them done as ended
// reports their ends (from whichever process ran them; the clocks of the processes
// must agree). The report's CPU is this process's.
func Drive(ctx context.Context, p provider.Provider, cfg Config, ended <-chan Ended) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	d := newDriver(p, cfg)
	cpu0 := cpuTime()
	began := time.Now()
	feedCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := d.collect(ctx, ended, d.feed(feedCtx), nil); err != nil {
		return Report{}, err
	}
	return d.report(d.last.Sub(began), cpuTime()-cpu0, "no bound"), nil
}

// driver starts a load's instances and measures them as they end.
type driver struct {
	cfg    Config
	client *runtime.Client
	ids    []string
	slots  chan struct{} // in flight, when cfg.Concurrency bounds them

	mu        sync.Mutex
	started   map[string]time.Time
	latencies []time.Duration
	starts    []time.Duration // how long each StartOrchestration call took
	startsAt  time.Time       // when feed's first StartOrchestration call began; zero: the instances were started first
	startsEnd time.Time       // when the latest StartOrchestration call returned
	failures  []string
	last      time.Time // the latest end
}

func newDriver(p provider.Provider, cfg Config) *driver {
	d := &driver{cfg: cfg, client: runtime.NewClient(p), ids: make([]string, cfg.N), started: make(map[string]time.Time, cfg.N)}
	for i := range d.ids {
		d.ids[i] = fmt.Sprintf("%s-%06d", cfg.Workload, i)
	}
	if cfg.Concurrency > 0 {
		d.slots = make(chan struct{}, cfg.Concurrency)
	}
	return d
}

// start starts instance id (and sends its events).
func (d *driver) start(ctx context.Context, id string) error {
	d.mu.Lock()
	d.started[id] = time.Now()
	d.mu.Unlock()
	began := time.Now()
	if err := d.client.StartOrchestration(ctx, id, d.cfg.Workload, ""); err != nil {
		return err
	}
	now := time.Now()
	d.mu.Lock()
	d.starts = append(d.starts, now.Sub(began))
	if now.After(d.startsEnd) {
		d.startsEnd = now
	}
	d.mu.Unlock()
	if d.cfg.Workload == WorkloadEvents {
		for k := range d.cfg.K {
			if err := d.client.EnqueueEvent(ctx, id, "signal", strconv.Itoa(k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// restart counts every started instance from t.
func (d *driver) restart(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.started {
		d.started[id] = t
	}
}

// feed starts every instance from 16 goroutines, as a web server's requests would,
// each waiting for a slot when in-flight instances are bounded. The channel
// reports the first failure.
func (d *driver) feed(ctx context.Context) <-chan error {
	d.startsAt = time.Now()
	failed := make(chan error, 1)
	const feeders = 16
	var next atomic.Int64
	for range feeders {
		go func() {
			for i := next.Add(1) - 1; i < int64(len(d.ids)); i = next.Add(1) - 1 {
				if d.slots != nil {
					select {
					case d.slots <- struct{}{}:
					case <-ctx.Done():
						return
					}
				}
				if err := d.start(ctx, d.ids[i]); err != nil {
					select {
					case failed <- err:
					default:
					}
					return
				}
			}
		}()
	}
	return failed
}

// collect records ends until every instance ended, a feeder failed, the runtime
// stopped (ran closed; nil when it runs elsewhere) or ctx ended.
func (d *driver) collect(ctx context.Context, ended <-chan Ended, fed <-chan error, ran <-chan struct{}) error {
	for done := 0; done < d.cfg.N; {
		select {
		case e, ok := <-ended:
			if !ok {
				return fmt.Errorf("bench: the runtimes stopped after %d of %d instances ended", done, d.cfg.N)
			}
			if d.end(e) {
				done++
			}
		case err := <-fed:
			return err
		case <-ran:
			return errors.New("bench: the runtime stopped")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if len(d.failures) > 0 {
		return fmt.Errorf("bench: %d instances did not complete, e.g. %s", len(d.failures), d.failures[0])
	}
	return nil
}

// end records e; false when e is not the first end of an instance of this load.
func (d *driver) end(e Ended) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t0, ok := d.started[e.Instance]
	if !ok {
		return false
	}
	delete(d.started, e.Instance)
	d.latencies = append(d.latencies, e.At.Sub(t0))
	if e.At.After(d.last) {
		d.last = e.At
	}
	if e.Status != provider.StatusCompleted {
		d.failures = append(d.failures, e.Instance+": "+e.Status)
	}
	if d.slots != nil {
		<-d.slots
	}
	return true
}

// report describes the load, which took elapsed and cpu; unbounded says what
// Concurrency 0 meant.
func (d *driver) report(elapsed, cpu time.Duration, unbounded string) Report {
	cfg := d.cfg
	slices.Sort(d.latencies)
	var startP50, startP99 time.Duration
	var startRate float64
	if !d.startsAt.IsZero() { // fed while the runtime ran
		slices.Sort(d.starts)
		startP50, startP99 = percentile(d.starts, 0.50), percentile(d.starts, 0.99)
		startRate = float64(len(d.starts)) / d.startsEnd.Sub(d.startsAt).Seconds()
	}
	acts := cfg.N * activitiesPer(cfg)
	o := cfg.Options
	return Report{Workload: cfg.Workload, Orchestrations: cfg.N, Activities: acts, Elapsed: elapsed,
		OrchPerSec: float64(cfg.N) / elapsed.Seconds(), ActPerSec: float64(acts) / elapsed.Seconds(),
		P50: percentile(d.latencies, 0.50), P95: percentile(d.latencies, 0.95), P99: percentile(d.latencies, 0.99), StartP50: startP50, StartP99: startP99, StartsPerSec: startRate, CPUPerOrch: cpu / time.Duration(cfg.N),
		Settings: fmt.Sprintf("n=%d k=%d f=%d activity-delay=%v timer-delay=%v concurrency=%d (0: %s) orchestration-dispatchers=%d workers=%d state-cache=%d (0: runtime defaults)",
			cfg.N, cfg.K, cfg.F, cfg.ActivityDelay, cfg.TimerDelay, cfg.Concurrency, unbounded, o.OrchestrationConcurrency, o.WorkerConcurrency, o.StateCacheSize) +
			tracing(o)}
}

// percentile returns the q-quantile of sorted (not empty).
func percentile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// tracing says whether the runtime traced the run.
func tracing(o runtime.Options) string {
	if o.TracerProvider == nil {
		return ""
	}
	return " tracing=on"
}

func activitiesPer(cfg Config) int {
	switch cfg.Workload {
	case WorkloadSeq:
		return cfg.K
	case WorkloadFanout:
		return cfg.F
	}
	return 0
}

// loadRegistry registers the workload's orchestration (named after the workload).
func loadRegistry(cfg Config) (*runtime.Registry, error) {
	reg := runtime.NewRegistry()
	if err := reg.RegisterActivity("Work", func(ctx *runtime.ActivityContext, in string) (string, error) {
		if cfg.ActivityDelay > 0 {
			select {
			case <-time.After(cfg.ActivityDelay):
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return in, nil
	}); err != nil {
		return nil, err
	}
	var fn runtime.Orchestration
	switch cfg.Workload {
	case WorkloadSeq:
		fn = func(ctx *runtime.Context, in string) (string, error) {
			for k := range cfg.K {
				if _, err := ctx.ScheduleActivity("Work", strconv.Itoa(k)).Get(); err != nil {
					return "", err
				}
			}
			return "done", nil
		}
	case WorkloadFanout:
		fn = func(ctx *runtime.Context, in string) (string, error) {
			fs := make([]*runtime.Future, cfg.F)
			for i := range fs {
				fs[i] = ctx.ScheduleActivity("Work", strconv.Itoa(i))
			}
			for _, err := range ctx.Join(fs...) {
				if err != nil {
					return "", err
				}
			}
			return "done", nil
		}
	case WorkloadTimers:
		fn = func(ctx *runtime.Context, in string) (string, error) {
			for range cfg.K {
				if _, err := ctx.CreateTimer(cfg.TimerDelay).Get(); err != nil {
					return "", err
				}
			}
			return "done", nil
		}
	case WorkloadEvents:
		fn = func(ctx *runtime.Context, in string) (string, error) {
			for k := range cfg.K {
				v, err := ctx.DequeueEvent("signal").Get()
				if err != nil {
					return "", err
				}
				if v != strconv.Itoa(k) {
					return "", fmt.Errorf("event %d carried %q: out of order", k, v)
				}
			}
			return "done", nil
		}
	}
	return reg, reg.RegisterOrchestration(cfg.Workload, fn)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func txCount(p provider.Provider) uint64 {
	if c, ok := p.(TxCounter); ok {
		return c.WriteTransactions()
	}
	return 0
}
