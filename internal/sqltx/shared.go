package sqltx

import (
	"context"

	"github.com/duroq/duroq/txn"
	"github.com/jmoiron/sqlx"
)

// Tx is a SQL transaction of DB shared through txn.Tx: the backends on DB write in
// SQL, and register what must happen after the commit.
type Tx struct {
	DB    *sqlx.DB
	SQL   *sqlx.Tx
	after []func()
}

var _ txn.Tx = (*Tx)(nil)

// AfterCommit implements txn.Tx.
func (t *Tx) AfterCommit(fn func()) { t.after = append(t.after, fn) }

// Share runs fn as a txn transaction over the SQL transaction of db that run runs
// it in, and once run has committed, what fn registered with AfterCommit: the
// txn.Database of a SQL database, whatever its policy of running transactions.
func Share(ctx context.Context, db *sqlx.DB, run func(func(*sqlx.Tx) error) error, fn func(context.Context, txn.Tx) error) error {
	var t *Tx
	err := run(func(tx *sqlx.Tx) error {
		t = &Tx{DB: db, SQL: tx}
		return fn(ctx, t)
	})
	if err == nil {
		for _, after := range t.after {
			after()
		}
	}
	return err
}

// Of returns the SQL transaction of tx when tx is a transaction of db.
func Of(tx txn.Tx, db *sqlx.DB) (*Tx, bool) {
	t, ok := tx.(*Tx)
	return t, ok && t.DB == db
}
