// Package pgdb opens a PostgreSQL database (through pgx's database/sql driver) with
// the settings duroq's PostgreSQL backends (mq/postgres, eventstore/postgres,
// pgprovider) are built for. Open one database and pass it to several backends to
// let them commit together.
package pgdb

import (
	"context"
	"errors"
	"fmt"
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
	// MaxOpenConns bounds the pool (default 16); long polls hold no connection while
	// they wait, except the one LISTEN connection per backend.
	MaxOpenConns int
	// ConnMaxLifetime recycles connections (default 30 minutes).
	ConnMaxLifetime time.Duration
}

// ErrNoSchema is the error Open wraps when Options.ExistingSchema is set and the
// schema does not exist.
var ErrNoSchema = errors.New("schema does not exist")

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
