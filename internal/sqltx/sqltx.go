// Package sqltx runs functions inside database transactions.
package sqltx

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jmoiron/sqlx"
)

// Run runs fn in a transaction of db and commits it when fn returns nil; otherwise
// (or on panic) it rolls back and returns fn's error.
func Run(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) (err error) {
	tx, err := db.BeginTxx(ctx, nil)
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

// RunLocked is Run while holding mu, the process's write lock of db (see
// sqlitedb.WriteLock); mu is released once the transaction has ended.
func RunLocked(ctx context.Context, db *sqlx.DB, mu *sync.Mutex, fn func(tx *sqlx.Tx) error) error {
	mu.Lock()
	defer mu.Unlock()
	return Run(ctx, db, fn)
}
