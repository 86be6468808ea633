// Package pgdb opens a PostgreSQL database (through pgx's database/sql driver) with
// the settings duroq's PostgreSQL backends (mq/postgres, eventstore/postgres,
// pgprovider) are built for. Open one database and pass it to several backends to
// let them commit together.
package pgdb

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/duroq/duroq/internal/pgsql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
)

// Options tune Open. The zero value gives the documented defaults.
type Options struct {
	// Schema holds duroq's tables (default "public"); it is created if missing and set
	// as every connection's search_path, so several deployments (or tests) can share
	// one database.
	Schema string
	// ExistingSchema makes Open fail, naming the schema, instead of creating it when it
	// does not exist (the error wraps ErrNoSchema): for tools that must not create
	// anything where a schema name was mistyped.
	ExistingSchema bool
	// MaxOpenConns bounds the pool (default GOMAXPROCS, at least 4, as pgxpool
	// sizes its pools: see defaultMaxOpenConns); long polls hold no connection while
	// they wait, except the one LISTEN connection per backend, and the queue's
	// enqueues keep one between their rounds while they stream (mq/postgres).
	MaxOpenConns int
	// ConnMaxLifetime recycles connections (default 30 minutes).
	ConnMaxLifetime time.Duration
}

// defaultMaxOpenConns is the pool size Open uses when Options.MaxOpenConns is not
// set. duroq's transactions are short and batched, so a process gains nothing from
// running more of them at once than it has cores to build them, and each one more
// is a server backend competing for the server's cores. Measured on 2 cores with
// the server beside the workers (docs/performance.md, "Pool size"): 16 queue
// consumers drained keyed messages as fast as 4 with pools of 4, and 30–50 % slower
// with pools of 16; the runtime ran as fast with either. Starts made by a process
// that also runs the runtime waited for a connection behind its transactions in
// small pools until the queue's enqueues kept their own between rounds.
func defaultMaxOpenConns() int { return max(4, runtime.GOMAXPROCS(0)) }

// ErrNoSchema is the error Open wraps when Options.ExistingSchema is set and the
// schema does not exist.
var ErrNoSchema = errors.New("schema does not exist")

// Open connects to the database at dsn (a postgres:// URL or key=value string).
func Open(ctx context.Context, dsn string, o Options) (*sqlx.DB, error) {
	if o.Schema == "" {
		o.Schema = "public"
	}
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = defaultMaxOpenConns()
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
	if o.ExistingSchema {
		var one int
		err := conn.QueryRow(ctx, "SELECT 1 FROM pg_namespace WHERE nspname = $1", o.Schema).Scan(&one)
		if err != nil {
			conn.Close(ctx)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, fmt.Errorf("postgres: schema %q: %w", o.Schema, ErrNoSchema)
			}
			return nil, fmt.Errorf("postgres: look for schema %q: %w", o.Schema, err)
		}
	} else {
		_, err = conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{o.Schema}.Sanitize())
	}
	conn.Close(ctx)
	if err != nil && !pgsql.IsUniqueViolation(err) { // two processes creating it at once
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
