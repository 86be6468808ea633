// Package pgsql is what duroq's PostgreSQL backends share besides opening the
// database (package pgdb): the migration dialect, error classes, the transaction
// runner and the statistics guard.
package pgsql

import (
	"context"
	"errors"
	"fmt"
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

// IsUniqueViolation reports whether err is a unique or primary key violation.
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// maxTxAttempts bounds the tries of a transaction that keeps meeting transient
// conflicts (serialization failures, deadlocks).
const maxTxAttempts = 5

// Database returns db as a txn.Database. Every call with the same db returns an
// equal value, so the backends on one PostgreSQL pool compose.
func Database(db *sqlx.DB) txn.Database { return database{db} }

type database struct{ db *sqlx.DB }

// Run implements txn.Database: a transaction that fails with a transient conflict
// (IsRetryable) is run again, up to maxTxAttempts times, after a backoff that ends
// early with ctx.
func (d database) Run(ctx context.Context, fn func(ctx context.Context, tx txn.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := sqltx.Share(ctx, d.db, func(run func(*sqlx.Tx) error) error { return sqltx.Run(ctx, d.db, run) }, fn)
		if err == nil || attempt == maxTxAttempts || !IsRetryable(err) {
			return err
		}
		timer := time.NewTimer(time.Duration(attempt) * 5 * time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
	}
}
