package sqliteconn

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jmoiron/sqlx"
)

// Runner is what a write transaction's statements run on: the *sqlx.Tx of Run or
// the *ConnTx of RunConn.
type Runner interface {
	sqlx.QueryerContext
	sqlx.ExecerContext
}

// rides holds the writes waiting to ride along in the writer's next commit
// (RunAlong) and those the transaction in progress carries.
type rides struct {
	mu      sync.Mutex
	waiting []*rider // guarded by mu: a transaction takes them before its commit
	carried []*rider // taken by the transaction in progress; only its holder touches them
}

// rider is a write of RunAlong.
type rider struct {
	ctx context.Context
	fn  func(ctx context.Context, tx Runner) error
	// Written by the holder that carried it, read by RunAlong once it holds the
	// writer in turn (the writer's handover orders the two).
	taken bool  // guarded by rides.mu
	final bool  // err is its outcome: its host committed, or it never ran
	err   error // fn's error (its savepoint rolled back), or its context's
}

// RunAlong runs fn in the write transaction that holds the writer when fn is
// called, if there is one, or else in a transaction of its own, and returns once
// fn's writes are committed. A transaction carries the writes waiting for it
// after its own statements, each in a savepoint, and commits them with its own:
// for a client's short write (an Enqueue that starts an orchestration) while a
// runtime's batches keep the writer busy, which under synchronous=FULL saves an
// fsync per write. A write that finds the writer free, or whose carrier fails to
// commit, runs alone in a transaction that goes ahead of every waiting one (see
// turns), so that it waits for the transaction in progress only. fn's failure
// rolls back its own writes only; fn may run twice (carried, then alone), never
// with its writes committed twice. Its statements run to completion (ctx is
// checked before fn runs, not during: interrupting a statement would roll back the
// carrier's whole transaction).
//
// alone reports whether fn's writes were a transaction of their own.
func (w *Writer) RunAlong(ctx context.Context, fn func(ctx context.Context, tx Runner) error) (alone bool, err error) {
	if err := ended(ctx); err != nil {
		return false, err
	}
	r := &rider{ctx: ctx, fn: fn}
	w.rides.mu.Lock()
	w.rides.waiting = append(w.rides.waiting, r)
	w.rides.mu.Unlock()
	w.mu.lock(true)
	w.rides.mu.Lock()
	if !r.taken {
		w.rides.waiting = slices.DeleteFunc(w.rides.waiting, func(o *rider) bool { return o == r })
	}
	w.rides.mu.Unlock()
	if r.final {
		w.mu.unlock()
		return false, r.err
	}
	if err := ended(ctx); err != nil { // its carrier failed meanwhile
		w.mu.unlock()
		return false, err
	}
	return true, w.hold(ctx, w.connTx(ctx, func(tx *ConnTx) error { return fn(context.WithoutCancel(ctx), tx) }))
}

// carry runs the writes waiting to ride along in tx, the transaction in progress,
// each in a savepoint, before tx commits. An error is the transaction's: it fails
// and its riders run again alone.
func (w *Writer) carry(ctx context.Context, tx Runner) error {
	w.rides.mu.Lock()
	riders := w.rides.waiting
	w.rides.waiting = nil
	for _, r := range riders {
		r.taken = true
	}
	w.rides.mu.Unlock()
	w.rides.carried = append(w.rides.carried, riders...)
	for _, r := range riders {
		if err := r.ctx.Err(); err != nil {
			r.final, r.err = true, err
			continue
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT duroq_ride"); err != nil {
			return fmt.Errorf("savepoint: %w", err)
		}
		r.err = r.fn(context.WithoutCancel(r.ctx), tx)
		if r.err != nil {
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO duroq_ride"); err != nil {
				return fmt.Errorf("rollback to savepoint: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE duroq_ride"); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
	}
	return nil
}

// settle ends the transaction in progress's carrying: its riders' outcomes are
// final if it committed; otherwise they run again alone.
func (rs *rides) settle(committed bool) {
	for _, r := range rs.carried {
		if committed {
			r.final = true
		} else if !r.final {
			r.err = nil
		}
	}
	rs.carried = nil
}
