// Package sqltx runs functions inside database transactions.
package sqltx

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// Run runs fn in a transaction of db and commits it when fn returns nil; otherwise
// (or on panic) it rolls back and returns fn's error.
func Run(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return RunWith(ctx, func(ctx context.Context) (*sqlx.Tx, error) { return db.BeginTxx(ctx, nil) }, fn)
}

// RunWith is Run with the transaction begun by begin (e.g. on a dedicated
// connection).
func RunWith(ctx context.Context, begin func(ctx context.Context) (*sqlx.Tx, error), fn func(tx *sqlx.Tx) error) (err error) {
	tx, err := begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, context.Canceled) {
			return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// DBClosed reports whether err comes from a closed *sql.DB (an operation that
// began as its database was closed), whose error database/sql does not export.
func DBClosed(err error) bool {
	return err != nil && strings.Contains(err.Error(), "sql: database is closed")
}
