// Package pgsql is what duroq's PostgreSQL backends share besides opening the
// database (package pgdb): the migration dialect, error classes, the transaction
// runner and the statistics guard.
package pgsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/txn"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"
)

// Dialect is the migration dialect of PostgreSQL: migrators serialise on a
// transaction-scoped advisory lock (per schema, since search_path scopes the tables).
var Dialect = migrate.Dialect{
	Begin:        []string{"BEGIN", "SELECT pg_advisory_xact_lock(hashtext('duroq_migrations:' || current_schema()))"},
	VersionTable: "duroq_migrations",
	TableExists:  `SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = $1`,
	Placeholder:  func(n int) string { return fmt.Sprintf("$%d", n) },
}

// IsRetryable reports whether err is a transient PostgreSQL failure worth retrying:
// a serialization failure, a deadlock, a lock-not-available or a lost connection.
func IsRetryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "55P03", "57P01":
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err)
}

// IsLockNotAvailable reports whether err is a NOWAIT lock that another
// transaction holds.
func IsLockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// IsUniqueViolation reports whether err is a unique or primary key violation.
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// The one retry policy of duroq's PostgreSQL writes: a transient failure
// (IsRetryable) runs the whole transaction again, at most MaxTries times, after a
// jittered pause growing from retryBackoff to maxBackoff.
const (
	MaxTries     = 6
	retryBackoff = 5 * time.Millisecond
	maxBackoff   = 200 * time.Millisecond
)

// Retry runs fn until it succeeds, fails with an error retryable rejects (nil:
// IsRetryable), has run MaxTries times, or ctx ends, which ends a pause at once and
// is joined to the last error. onRetry, if set, learns of each retry before its
// pause (for counters and logs).
func Retry(ctx context.Context, retryable func(error) bool, onRetry func(try int, pause time.Duration, err error), fn func() error) error {
	if retryable == nil {
		retryable = IsRetryable
	}
	for try := 1; ; try++ {
		err := fn()
		if err == nil || try == MaxTries || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		pause := min(retryBackoff<<(try-1), maxBackoff)
		pause = pause/2 + rand.N(pause/2+1)
		if onRetry != nil {
			onRetry(try, pause, err)
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return errors.Join(err, ctx.Err())
		case <-timer.C:
		}
	}
}

// Database returns db as a txn.Database. Every call with the same db returns an
// equal value, so the backends on one PostgreSQL pool compose.
func Database(db *sqlx.DB) txn.Database { return database{db} }

type database struct{ db *sqlx.DB }

// Run implements txn.Database: a transaction that fails with a transient conflict is
// run again (Retry).
func (d database) Run(ctx context.Context, fn func(ctx context.Context, tx txn.Tx) error) error {
	return Retry(ctx, nil, nil, func() error {
		return sqltx.Share(ctx, d.db, func(run func(*sqlx.Tx) error) error { return Run(ctx, d.db, run) }, fn)
	})
}

// Begin starts a READ COMMITTED transaction of db (whatever the server's default:
// the queue's statements rely on each seeing what committed before it began) whose
// statements run on generic plans and never scan a whole table.
//
// Generic plans are made once per connection, not again for each run's arguments:
// pgx prepares each statement once per connection, but under the server's
// plan_cache_mode=auto a statement is planned for its arguments at its first five
// runs on each connection, and at every run when its generic plan looks costlier,
// as it does for the batch statements whose arrays a custom plan can count.
// Planning took a quarter of the server's time in duroq bench seq
// (pg_stat_statements with track_planning).
//
// A generic plan is kept until the server invalidates it (an ANALYZE of its
// tables), so one made while a table was a few pages (a new schema) would keep
// scanning it whole as it grows: reading the histories of 32 instances scanned
// 5,000 events. Every duroq statement is built for an index walk, so sequential
// scans are off (enable_seqscan: the planner takes one only where no index
// serves), and so are bitmap scans (enable_bitmapscan), which read every matching
// entry before any row: a queue scan planned without statistics read and sorted
// all 40,000 ready messages to lock 64, where an index scan in eligibility order
// stops at its limit. JIT compilation is off (jit): a generic plan's cost is
// estimated for a share of a table's rows, so with 100,000 keyed messages the queue's
// scan statement crossed jit_above_cost and spent 60 ms compiling itself at each
// run to read a few hundred rows in 3 ms (a keyed drain fell from 18,000 to 7,500
// messages/s). The settings are local to the transaction: a statement the
// application runs on the pool keeps its own.
func Begin(ctx context.Context, db *sqlx.DB) (*sqlx.Tx, error) {
	tx, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, txSettings); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

const txSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)`

// Run runs fn in a transaction begun by Begin (sqltx.RunWith).
func Run(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return sqltx.RunWith(ctx, func(ctx context.Context) (*sqlx.Tx, error) { return Begin(ctx, db) }, fn)
}
