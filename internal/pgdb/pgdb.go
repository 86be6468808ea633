// Package pgdb opens PostgreSQL databases (through pgx's database/sql driver) with
// the settings duroq's PostgreSQL backends are built for, and classifies their errors.
package pgdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/txn"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
)

// Options tune Open. The zero value gives the documented defaults.
type Options struct {
	// Schema holds duroq's tables (default "public"); it is created if missing and set
	// as every connection's search_path, so several deployments (or tests) can share
	// one database.
	Schema string
	// MaxOpenConns bounds the pool (default 16); long polls hold no connection while
	// they wait, except the one LISTEN connection per backend.
	MaxOpenConns int
	// ConnMaxLifetime recycles connections (default 30 minutes).
	ConnMaxLifetime time.Duration
}

// Open connects to the database at dsn (a postgres:// URL or key=value string).
func Open(ctx context.Context, dsn string, o Options) (*sqlx.DB, error) {
	if o.Schema == "" {
		o.Schema = "public"
	}
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = 16
	}
	if o.ConnMaxLifetime <= 0 {
		o.ConnMaxLifetime = 30 * time.Minute
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	// Create the schema with a plain connection first: search_path must name an
	// existing schema to take effect.
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{o.Schema}.Sanitize())
	conn.Close(ctx)
	if err != nil && !IsUniqueViolation(err) { // two processes creating it at once
		return nil, fmt.Errorf("postgres: create schema %q: %w", o.Schema, err)
	}
	cfg.RuntimeParams["search_path"] = o.Schema
	db := sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")
	db.SetMaxOpenConns(o.MaxOpenConns)
	db.SetMaxIdleConns(o.MaxOpenConns)
	db.SetConnMaxLifetime(o.ConnMaxLifetime)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: ping: %w", err)
	}
	return db, nil
}

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
