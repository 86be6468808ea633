package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

const pgxModule = "github.com/jackc/pgx/v5"

// riverPGDrain runs riverRun on PostgreSQL (River's own driver, riverpgxv5 over a
// pgx pool of pgxpool's default size) in a fresh schema of the server at dsn, which
// it drops afterwards.
func riverPGDrain(ctx context.Context, cfg config, dsn string, workers int) ([]result, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	schema := fmt.Sprintf("peers_river_%d", time.Now().UnixNano())
	admin, err := pgx.ConnectConfig(ctx, pcfg.ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+ident+" CASCADE")

	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	return riverRun(ctx, cfg, riverpgxv5.New(pool), workers, func(ctx context.Context) error {
		var completed, total int
		if err := pool.QueryRow(ctx, riverCountSQL).Scan(&completed, &total); err != nil {
			return err
		}
		return riverCheckCompleted(completed, total, cfg.n)
	})
}

// postgresVersion is the server's version, as it reports it.
func postgresVersion(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var v string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}
