package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"maragu.dev/goqite"
)

const goqiteModule = "maragu.dev/goqite"

// goqiteConns is the connection pool size goqite's README sets up
// (db.SetMaxOpenConns(1)).
const goqiteConns = 1

// goqiteSchema returns schema_sqlite.sql of the goqite version this program is built
// with, the file goqite's README tells users to apply. goqite does not export it, so
// it is read from the module cache (`go mod download` fetches it if missing) rather
// than copied here.
func goqiteSchema(ctx context.Context) (string, error) {
	v := moduleVersion(goqiteModule)
	if v == "" {
		return "", fmt.Errorf("goqite: no version of %s in the build info", goqiteModule)
	}
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", goqiteModule+"@"+v).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("goqite: locate %s@%s: %w", goqiteModule, v, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("goqite: locate %s@%s: %w", goqiteModule, v, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("goqite: locate %s@%s: %s", goqiteModule, v, m.Error)
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, "schema_sqlite.sql"))
	return string(b), err
}

// goqiteQueue opens a fresh database with goqite's schema and returns a queue on it.
func goqiteQueue(ctx context.Context, schema string) (*goqite.Queue, *sql.DB, func(), error) {
	db, cleanup, err := freshDB(ctx, mattn, goqiteConns)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		cleanup()
		return nil, nil, nil, fmt.Errorf("goqite: schema: %w", err)
	}
	// Default options: max receive 3, redelivery timeout 5 s.
	return goqite.New(goqite.NewOpts{DB: db, Name: "bench"}), db, cleanup, nil
}

// goqiteDrain enqueues cfg.n messages, then drains them with consumers goroutines
// each looping Receive + Delete. It returns the enqueue and the drain results.
func goqiteDrain(ctx context.Context, cfg config, schema string, consumers int) ([]result, error) {
	q, db, cleanup, err := goqiteQueue(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	// goqite has no multi-message Send; SendTx in the caller's transaction is how it
	// batches, so messages go in transactions of enqueueBatch sends each.
	body := payload(cfg.size)
	began := time.Now()
	for i := 0; i < cfg.n; i += enqueueBatch {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		for range min(enqueueBatch, cfg.n-i) {
			if err := q.SendTx(ctx, tx, goqite.Message{Body: body}); err != nil {
				tx.Rollback()
				return nil, err
			}
		}
		if err := tx.Commit(); err != nil {
			return nil, err
		}
	}
	enq := time.Since(began)

	var left atomic.Int64
	left.Store(int64(cfg.n))
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	began = time.Now()
	for range consumers {
		wg.Go(func() {
			for left.Load() > 0 {
				m, err := q.Receive(ctx)
				if err != nil {
					errs <- err
					return
				}
				if m == nil {
					// Only at the tail: the rest are held by other consumers.
					time.Sleep(time.Millisecond)
					continue
				}
				if err := q.Delete(ctx, m.ID); err != nil {
					errs <- err
					return
				}
				left.Add(-1)
			}
		})
	}
	wg.Wait()
	drain := time.Since(began)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	if err := goqiteEmpty(ctx, db); err != nil {
		return nil, err
	}
	return []result{
		{Workload: fmt.Sprintf("enqueue (tx of %d SendTx)", enqueueBatch), Consumers: 1, Messages: cfg.n, Seconds: enq.Seconds(), PerSec: float64(cfg.n) / enq.Seconds()},
		{Workload: "drain (Receive + Delete)", Consumers: consumers, Messages: cfg.n, Seconds: drain.Seconds(), PerSec: float64(cfg.n) / drain.Seconds()},
	}, nil
}

func goqiteEmpty(ctx context.Context, db *sql.DB) error {
	var rows int
	if err := db.QueryRowContext(ctx, "select count(*) from goqite").Scan(&rows); err != nil {
		return err
	}
	if rows != 0 {
		return fmt.Errorf("goqite: %d messages left after the drain", rows)
	}
	return nil
}

// goqiteCycle runs cfg.n cycles of Send, Receive, Delete one message at a time on an
// empty queue and reports cycles/s and the latency percentiles of a cycle.
func goqiteCycle(ctx context.Context, cfg config, schema string) (result, error) {
	q, db, cleanup, err := goqiteQueue(ctx, schema)
	if err != nil {
		return result{}, err
	}
	defer cleanup()
	body := payload(cfg.size)
	lat := make([]time.Duration, cfg.n)
	began := time.Now()
	for i := range cfg.n {
		t := time.Now()
		if err := q.Send(ctx, goqite.Message{Body: body}); err != nil {
			return result{}, err
		}
		m, err := q.Receive(ctx)
		if err != nil {
			return result{}, err
		}
		if m == nil {
			return result{}, errors.New("goqite: cycle: sent message not received")
		}
		if err := q.Delete(ctx, m.ID); err != nil {
			return result{}, err
		}
		lat[i] = time.Since(t)
	}
	total := time.Since(began)
	if err := goqiteEmpty(ctx, db); err != nil {
		return result{}, err
	}
	slices.Sort(lat)
	return result{
		Workload: "cycle (Send, Receive, Delete)", Consumers: 1, Messages: cfg.n,
		Seconds: total.Seconds(), PerSec: float64(cfg.n) / total.Seconds(),
		P50: pct(lat, 0.50), P99: pct(lat, 0.99),
	}, nil
}
