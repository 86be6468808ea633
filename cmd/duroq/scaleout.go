package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/sqlitedb"
	"github.com/duroq/duroq/sqliteprovider"
)

// A scale-out run (`duroq bench <workload> -processes N`) is N worker processes
// and one client process over one database, which the parent process creates,
// starts them on and removes afterwards. They are this executable again, with the
// hidden command benchProcessCmd:
//
//   - a worker opens the database, prints readyLine, runs the workload's runtime
//     (bench.Serve) and prints each execution's end as a JSON bench.Ended line,
//     until its standard input closes;
//   - the client starts the instances (bench.Drive), reads the ends the parent
//     forwards from every worker on its standard input and prints its
//     bench.Report as JSON.
const (
	benchProcessCmd = "bench-process"
	readyLine       = "ready"
)

// scaleOutReport is the outcome of a scale-out run.
type scaleOutReport struct {
	bench.Report
	Processes int             `json:"worker_processes"`
	WorkerCPU []time.Duration `json:"worker_cpu_ns"` // user+system CPU time of each worker process
	// WorkerEnds counts the executions that ended in each worker process.
	WorkerEnds []int         `json:"worker_ends"`
	ClientCPU  time.Duration `json:"client_cpu_ns"`
}

func (r scaleOutReport) String() string {
	var cpu []string
	total := r.ClientCPU
	for i, c := range r.WorkerCPU {
		cpu = append(cpu, fmt.Sprintf("%.2fs (%.0f%%, %d ended)", c.Seconds(), 100*c.Seconds()/r.Elapsed.Seconds(), r.WorkerEnds[i]))
		total += c
	}
	return fmt.Sprintf("%s: %d worker processes, starts from a client process: %d orchestrations in %v: %.0f orchestrations/s, %.0f activities/s\n"+
		"  latency from start to end p50 %v p95 %v p99 %v · StartOrchestration p50 %v p99 %v, %.0f starts/s\n"+
		"  CPU (user+system, %% of a core over the run): workers %s · client %.2fs · %v per orchestration in all\n"+
		"  settings: %s",
		r.Workload, r.Processes, r.Orchestrations, r.Elapsed.Round(time.Millisecond), r.OrchPerSec, r.ActPerSec,
		r.P50.Round(10*time.Microsecond), r.P95.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond),
		r.StartP50.Round(10*time.Microsecond), r.StartP99.Round(10*time.Microsecond), r.StartsPerSec,
		strings.Join(cpu, ", "), r.ClientCPU.Seconds(), (total / time.Duration(r.Orchestrations)).Round(time.Microsecond), r.Settings)
}

// scaleOut runs cfg on processes worker processes and a client process over b's
// database, whose provider it closes first.
func scaleOut(ctx context.Context, b *benchBackend, cfg bench.Config, processes int) (scaleOutReport, error) {
	if b.dbArgs == nil {
		return scaleOutReport{}, errors.New("bench: -processes needs a database other processes can open (sqlite or postgres)")
	}
	childArgs := append(loadArgs(cfg), b.dbArgs...)
	if err := b.Provider.Close(); err != nil { // the children open it themselves
		return scaleOutReport{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return scaleOutReport{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	spawn := func(role string, extra ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, error) {
		cmd := exec.CommandContext(ctx, exe, append(append([]string{benchProcessCmd, "-role", role}, childArgs...), extra...)...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, nil, nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, nil, fmt.Errorf("bench: start a %s process: %w", role, err)
		}
		return cmd, in, out, nil
	}

	type worker struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Scanner
	}
	var workers []worker
	var forwarders sync.WaitGroup // read the workers' output until they exit
	stopWorkers := func() []error {
		for _, w := range workers {
			w.in.Close() // which stops it
		}
		forwarders.Wait() // Wait closes the pipes: after the last read
		var errs []error
		for i, w := range workers {
			if err := w.cmd.Wait(); err != nil {
				errs = append(errs, fmt.Errorf("bench: worker process %d: %w", i+1, err))
			}
		}
		return errs
	}
	abort := func(err error) (scaleOutReport, error) {
		return scaleOutReport{}, errors.Join(append([]error{err}, stopWorkers()...)...)
	}
	for range processes {
		cmd, in, out, err := spawn("worker")
		if err != nil {
			return abort(err)
		}
		w := worker{cmd, in, bufio.NewScanner(out)}
		workers = append(workers, w)
		if !w.out.Scan() || w.out.Text() != readyLine {
			return abort(fmt.Errorf("bench: worker process %d did not start", len(workers)))
		}
	}

	client, clientIn, clientOut, err := spawn("client")
	if err != nil {
		return abort(err)
	}
	var mu sync.Mutex // one forwarded line at a time
	ends := make([]int, len(workers))
	clientDone := false
	for i, w := range workers {
		forwarders.Go(func() {
			for w.out.Scan() {
				line := append(w.out.Bytes(), '\n')
				mu.Lock()
				ends[i]++
				_, _ = clientIn.Write(line) // fails only once the client is done
				mu.Unlock()
			}
			mu.Lock()
			defer mu.Unlock()
			if !clientDone { // a worker died: the client then fails for want of ends
				clientIn.Close()
			}
		})
	}
	var report bench.Report
	decodeErr := json.NewDecoder(clientOut).Decode(&report)
	mu.Lock()
	clientDone = true
	clientIn.Close()
	mu.Unlock()
	clientErr := client.Wait()
	errs := stopWorkers()
	if clientErr != nil {
		errs = append([]error{fmt.Errorf("bench: client process: %w", clientErr)}, errs...)
	} else if decodeErr != nil {
		errs = append([]error{fmt.Errorf("bench: client process report: %w", decodeErr)}, errs...)
	}
	if len(errs) > 0 {
		return scaleOutReport{}, errors.Join(errs...)
	}
	r := scaleOutReport{Report: report, Processes: processes, ClientCPU: cpuOf(client), WorkerEnds: ends}
	for _, w := range workers {
		r.WorkerCPU = append(r.WorkerCPU, cpuOf(w.cmd))
	}
	return r, nil
}

func cpuOf(cmd *exec.Cmd) time.Duration {
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// benchProcess runs one process of a scale-out run (see benchProcessCmd).
func benchProcess(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet(benchProcessCmd, flag.ContinueOnError)
	role := fs.String("role", "", "worker or client")
	workload := fs.String("workload", "", "the workload")
	load := addLoadFlags(fs)
	path := fs.String("sqlite", "", "SQLite file")
	syncMode := fs.String("sync", "NORMAL", "SQLite synchronous mode")
	dsn := fs.String("dsn", "", "PostgreSQL DSN")
	schema := fs.String("schema", "", "PostgreSQL schema")
	pool := fs.Int("pool", 0, "PostgreSQL connections (0: pgdb's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *role != "worker" && *role != "client" {
		return fmt.Errorf("%s: -role %q: want worker or client", benchProcessCmd, *role)
	}
	cfg := load.config(*workload)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var p *adapter.Provider
	var err error
	if *path != "" {
		p, err = sqliteprovider.Open(*path, sqliteprovider.Options{DB: sqlitedb.Options{Synchronous: *syncMode}})
	} else {
		p, err = pgprovider.Open(ctx, *dsn, pgprovider.Options{DB: pgdb.Options{Schema: *schema, MaxOpenConns: *pool}})
	}
	if err != nil {
		return err
	}
	defer p.Close()
	lines := bufio.NewScanner(stdin)
	switch *role {
	case "worker":
		go func() { // the parent closes stdin to stop the worker
			for lines.Scan() {
			}
			cancel()
		}()
		if _, err := fmt.Fprintln(stdout, readyLine); err != nil {
			return err
		}
		var mu sync.Mutex // one line at a time
		return bench.Serve(ctx, p, cfg, func(e bench.Ended) {
			line, _ := json.Marshal(e)
			mu.Lock()
			defer mu.Unlock()
			stdout.Write(append(line, '\n'))
		})
	default: // "client"
		ended := make(chan bench.Ended)
		go func() {
			defer close(ended)
			for lines.Scan() {
				var e bench.Ended
				if json.Unmarshal(lines.Bytes(), &e) == nil {
					select {
					case ended <- e:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
		r, err := bench.Drive(ctx, p, cfg, ended)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(r)
	}
}
