package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/duroq/duroq/runtime"
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
	Workload string
	N        int // instances (default 1000)
	K        int // sequential steps per instance: activities, timers or events (default 2)
	F        int // parallel activities per fanout instance (default 5)
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
	Workload       string        `json:"workload"`
	Orchestrations int           `json:"orchestrations"`
	Activities     int           `json:"activities"`
	Elapsed        time.Duration `json:"elapsed_ns"`
	OrchPerSec     float64       `json:"orchestrations_per_s"`
	ActPerSec      float64       `json:"activities_per_s"`
	// Latency from start request to completion.
	P50, P95, P99 time.Duration
	// CPUPerOrch is the process's user+system CPU time per orchestration.
	CPUPerOrch time.Duration `json:"cpu_per_orchestration_ns"`
	// TxPerOrch is the provider's write transactions per orchestration (0 when the
	// provider does not count them).
	TxPerOrch float64 `json:"write_transactions_per_orchestration"`
	Settings  string  `json:"settings"`
}

func (r Report) String() string {
	s := fmt.Sprintf("%s: %d orchestrations in %v: %.0f orchestrations/s, %.0f activities/s\n"+
		"  latency p50 %v p95 %v p99 %v · CPU %v per orchestration",
		r.Workload, r.Orchestrations, r.Elapsed.Round(time.Millisecond), r.OrchPerSec, r.ActPerSec,
		r.P50.Round(10*time.Microsecond), r.P95.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond),
		r.CPUPerOrch.Round(time.Microsecond))
	if r.TxPerOrch > 0 {
		s += fmt.Sprintf(" · %.1f write transactions per orchestration", r.TxPerOrch)
	}
	return s + "\n  settings: " + r.Settings
}

// TxCounter is implemented by providers that count their write transactions.
type TxCounter interface {
	WriteTransactions() uint64
}

// Load runs cfg's workload on a runtime over p and reports throughput and latency.
// p must be empty of other work.
func Load(ctx context.Context, p runtime.Provider, cfg Config) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	reg, err := loadRegistry(cfg)
	if err != nil {
		return Report{}, err
	}
	ids := make([]string, cfg.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%06d", cfg.Workload, i)
	}
	var mu sync.Mutex
	started := make(map[string]time.Time, cfg.N)
	var latencies []time.Duration
	var failures []string
	allDone := make(chan struct{})
	slots := make(chan struct{}, max(cfg.Concurrency, 1))
	opts := cfg.Options
	opts.OnExecutionEnded = func(instance string, _ uint64, status string) {
		mu.Lock()
		defer mu.Unlock()
		t0, ok := started[instance]
		if !ok {
			return
		}
		delete(started, instance)
		latencies = append(latencies, time.Since(t0))
		if status != runtime.StatusCompleted {
			failures = append(failures, instance+": "+status)
		}
		if cfg.Concurrency > 0 {
			<-slots
		}
		if len(latencies) == cfg.N {
			close(allDone)
		}
	}
	rt, err := runtime.New(p, reg, opts)
	if err != nil {
		return Report{}, err
	}
	client := runtime.NewClient(p)
	start := func(id string) error {
		mu.Lock()
		started[id] = time.Now()
		mu.Unlock()
		if err := client.StartOrchestration(ctx, id, cfg.Workload, ""); err != nil {
			return err
		}
		if cfg.Workload == WorkloadEvents {
			for k := range cfg.K {
				if err := client.EnqueueEvent(ctx, id, "signal", strconv.Itoa(k)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if cfg.Concurrency == 0 {
		for _, id := range ids {
			if err := start(id); err != nil {
				return Report{}, err
			}
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	cpu0 := cpuTime()
	tx0 := txCount(p)
	began := time.Now()
	if cfg.Concurrency == 0 {
		// Prefilled instances count from when the runtime starts.
		mu.Lock()
		for id := range started {
			started[id] = began
		}
		mu.Unlock()
	}
	go func() { ran <- rt.Run(runCtx) }()
	feedErr := make(chan error, 1)
	const feeders = 16
	if cfg.Concurrency > 0 {
		// Starts come from several goroutines, as a web server's requests would.
		var next atomic.Int64
		for range min(cfg.Concurrency, feeders) {
			go func() {
				for i := next.Add(1) - 1; i < int64(len(ids)); i = next.Add(1) - 1 {
					select {
					case slots <- struct{}{}:
					case <-runCtx.Done():
						return
					}
					if err := start(ids[i]); err != nil {
						select {
						case feedErr <- err:
						default:
						}
						return
					}
				}
			}()
		}
	}
	select {
	case <-allDone:
	case err := <-feedErr:
		return Report{}, err
	case err := <-ran:
		return Report{}, fmt.Errorf("bench: runtime stopped: %v", err)
	case <-ctx.Done():
		return Report{}, ctx.Err()
	}
	elapsed := time.Since(began)
	cpu := cpuTime() - cpu0
	tx := txCount(p) - tx0
	stop()
	<-ran
	if len(failures) > 0 {
		return Report{}, fmt.Errorf("bench: %d instances did not complete, e.g. %s", len(failures), failures[0])
	}

	slices.Sort(latencies)
	pct := func(q float64) time.Duration { return latencies[min(len(latencies)-1, int(q*float64(len(latencies))))] }
	acts := cfg.N * activitiesPer(cfg)
	o := opts
	r := Report{Workload: cfg.Workload, Orchestrations: cfg.N, Activities: acts, Elapsed: elapsed,
		OrchPerSec: float64(cfg.N) / elapsed.Seconds(), ActPerSec: float64(acts) / elapsed.Seconds(),
		P50: pct(0.50), P95: pct(0.95), P99: pct(0.99), CPUPerOrch: cpu / time.Duration(cfg.N),
		Settings: fmt.Sprintf("n=%d k=%d f=%d activity-delay=%v timer-delay=%v concurrency=%d (0: all started first) orchestration-dispatchers=%d workers=%d state-cache=%d (0: runtime defaults)",
			cfg.N, cfg.K, cfg.F, cfg.ActivityDelay, cfg.TimerDelay, cfg.Concurrency, o.OrchestrationConcurrency, o.WorkerConcurrency, o.StateCacheSize)}
	if tx > 0 {
		r.TxPerOrch = float64(tx) / float64(cfg.N)
	}
	return r, nil
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

func txCount(p runtime.Provider) uint64 {
	if c, ok := p.(TxCounter); ok {
		return c.WriteTransactions()
	}
	return 0
}
