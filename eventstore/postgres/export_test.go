package postgres

import "github.com/jmoiron/sqlx"

// NewCounting is New that also returns how many transactions the store has run
// again after a retryable failure.
func NewCounting(db *sqlx.DB, o Options) (*Store, func() int64) {
	s, d := newStore(db, false, o)
	return s, d.retries.Load
}
