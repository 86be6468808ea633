package sqltx

import (
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

// Committed runs what was registered with AfterCommit; the Database that ran the
// transaction calls it once the commit succeeded.
func (t *Tx) Committed() {
	for _, fn := range t.after {
		fn()
	}
}

// Of returns the SQL transaction of tx when tx is a transaction of db.
func Of(tx txn.Tx, db *sqlx.DB) (*Tx, bool) {
	t, ok := tx.(*Tx)
	return t, ok && t.DB == db
}
