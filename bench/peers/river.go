package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

const riverModule = "github.com/riverqueue/river"

// River's SQLite driver documentation, its CLI and its tests limit the pool to one
// connection (concurrent River operations otherwise fail with SQLITE_BUSY).
const riverConns = 1

// The fetch settings `river bench` (cmd/river/riverbench) configures its client with;
// River's defaults are FetchCooldown 100 ms and FetchPollInterval 1 s.
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// noopArgs is a job whose args carry the payload as a string of cfg.size bytes.
type noopArgs struct {
	Payload string `json:"p"`
}

func (noopArgs) Kind() string { return "peers_noop" }

// noopWorker does nothing: the drain measures River's fetch and completion.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverDrain runs riverRun on a fresh SQLite database through driver d.
func riverDrain(ctx context.Context, cfg config, d sqlDriver, workers int) ([]result, error) {
	db, cleanup, err := freshDB(ctx, d, riverConns)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	return riverRun(ctx, cfg, riversqlite.New(db), workers, func(ctx context.Context) error {
		return riverAllCompleted(ctx, db, cfg.n)
	})
}

// riverRun migrates driver's database, inserts cfg.n jobs, then starts a client whose
// default queue has MaxWorkers workers and measures until every job is completed
// (counted by the client's completion events, as `river bench` does); allCompleted
// checks the table afterwards.
func riverRun[TTx any](ctx context.Context, cfg config, driver riverdriver.Driver[TTx], workers int, allCompleted func(context.Context) error) ([]result, error) {
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river: migrate: %w", err)
	}

	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		// River's default logger writes warnings to stdout; keep stdout for results.
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: ws,
	})
	if err != nil {
		return nil, err
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: cfg.n + 1000, // never drop an event: the count decides when the drain ends
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()

	// Insert everything before the client starts working, in batches of enqueueBatch.
	args := noopArgs{Payload: strings.Repeat("x", cfg.size)}
	batch := make([]river.InsertManyParams, 0, enqueueBatch)
	began := time.Now()
	for i := range cfg.n {
		batch = append(batch, river.InsertManyParams{Args: args})
		if len(batch) == cap(batch) || i == cfg.n-1 {
			if _, err := client.InsertManyFast(ctx, batch); err != nil {
				return nil, fmt.Errorf("river: insert: %w", err)
			}
			batch = batch[:0]
		}
	}
	enq := time.Since(began)

	began = time.Now()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	timeout := time.NewTimer(time.Duration(cfg.n)*10*time.Millisecond + time.Minute)
	defer timeout.Stop()
	var drain time.Duration
	for done := 0; done < cfg.n; {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, fmt.Errorf("river: event channel closed after %d of %d jobs", done, cfg.n)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return nil, fmt.Errorf("river: job %d: unexpected event %s", ev.Job.ID, ev.Kind)
			}
			done++
		case <-timeout.C:
			return nil, fmt.Errorf("river: timed out with %d of %d jobs completed", done, cfg.n)
		}
	}
	drain = time.Since(began)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return nil, err
	}
	if err := allCompleted(ctx); err != nil {
		return nil, err
	}
	return []result{
		{Workload: fmt.Sprintf("enqueue (InsertManyFast of %d)", enqueueBatch), Consumers: 1, Messages: cfg.n, Seconds: enq.Seconds(), PerSec: float64(cfg.n) / enq.Seconds()},
		{Workload: "drain (fetch + complete)", Consumers: workers, Messages: cfg.n, Seconds: drain.Seconds(), PerSec: float64(cfg.n) / drain.Seconds()},
	}, nil
}

func riverAllCompleted(ctx context.Context, db *sql.DB, n int) error {
	var completed, total int
	if err := db.QueryRowContext(ctx, riverCountSQL).Scan(&completed, &total); err != nil {
		return err
	}
	return riverCheckCompleted(completed, total, n)
}

const riverCountSQL = "select count(*) filter (where state = 'completed'), count(*) from river_job"

func riverCheckCompleted(completed, total, n int) error {
	if completed != n || total != n {
		return fmt.Errorf("river: %d of %d jobs completed, want %d", completed, total, n)
	}
	return nil
}
