// Package stmtcache prepares SQL statements once per database and reuses them, on
// the database or inside its transactions, so SQLite parses a statement once per
// connection instead of once per call (parsing is a large part of a short
// statement's cost).
package stmtcache

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/jmoiron/sqlx"
)

// maxStatements bounds the cache; statements beyond it run as text. Stores build a
// small, fixed set of statement texts, so the bound is a safety net.
const maxStatements = 512

// Cache holds the prepared statements of one database.
type Cache struct {
	db    *sqlx.DB
	mu    sync.Mutex
	stmts map[string]*sqlx.Stmt // nil once closed
}

// New returns an empty cache for db.
func New(db *sqlx.DB) *Cache { return &Cache{db: db, stmts: map[string]*sqlx.Stmt{}} }

// prepared returns query prepared on the database, or nil when it is not cached and
// cannot be (the caller then runs the text directly).
func (c *Cache) prepared(ctx context.Context, query string) (*sqlx.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	if c.stmts == nil || len(c.stmts) >= maxStatements {
		return nil, nil
	}
	st, err := c.db.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

// Preparer is a runner with statements of its own: a transaction on one
// connection that keeps the statements it prepared there. Its statements run to
// completion (see bind).
type Preparer interface {
	// Prepared returns query prepared for the runner, or nil to run it as text.
	Prepared(ctx context.Context, query string) (*sqlx.Stmt, error)
}

// bind returns query as a statement of q, and the context to run it in: q is the
// cache's database, one of its transactions or a Preparer (any other runner gets
// a nil statement: run the text).
//
// A Preparer's statements run to completion: one does not start once ctx has
// ended, but none is interrupted. SQLite's driver runs a statement whose context
// can end on a goroutine of its own, to interrupt it: two switches between threads
// per statement, more than a short statement's own cost.
func (c *Cache) bind(ctx context.Context, q any, query string) (context.Context, *sqlx.Stmt, error) {
	switch q := q.(type) {
	case Preparer:
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		st, err := q.Prepared(ctx, query)
		return context.WithoutCancel(ctx), st, err
	case *sqlx.Tx:
		st, err := c.prepared(ctx, query)
		if st == nil || err != nil {
			return ctx, nil, err
		}
		// database/sql reuses the statement where it is already prepared on the
		// transaction's connection.
		return ctx, q.StmtxContext(ctx, st), nil
	case *sqlx.DB:
		if q == c.db {
			st, err := c.prepared(ctx, query)
			return ctx, st, err
		}
	}
	return ctx, nil, nil
}

// Exec runs query with args through q.
func (c *Cache) Exec(ctx context.Context, q sqlx.ExecerContext, query string, args ...any) (sql.Result, error) {
	ctx, st, err := c.bind(ctx, q, query)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return st.ExecContext(ctx, args...)
	}
	return q.ExecContext(ctx, query, args...)
}

// Query runs query with args through q.
func (c *Cache) Query(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) (*sql.Rows, error) {
	ctx, st, err := c.bind(ctx, q, query)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return st.QueryContext(ctx, args...)
	}
	return q.QueryContext(ctx, query, args...)
}

// Get scans the single row of query into dest (sql.ErrNoRows when there is none).
func (c *Cache) Get(ctx context.Context, q sqlx.QueryerContext, dest any, query string, args ...any) error {
	ctx, st, err := c.bind(ctx, q, query)
	if err != nil {
		return err
	}
	if st != nil {
		return st.GetContext(ctx, dest, args...)
	}
	return sqlx.GetContext(ctx, q, dest, query, args...)
}

// Select scans every row of query into the slice dest points to.
func (c *Cache) Select(ctx context.Context, q sqlx.QueryerContext, dest any, query string, args ...any) error {
	ctx, st, err := c.bind(ctx, q, query)
	if err != nil {
		return err
	}
	if st != nil {
		return st.SelectContext(ctx, dest, args...)
	}
	return sqlx.SelectContext(ctx, q, dest, query, args...)
}

// Close closes the prepared statements; later calls run statements as text.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.stmts {
		errs = append(errs, st.Close())
	}
	c.stmts = nil
	return errors.Join(errs...)
}
