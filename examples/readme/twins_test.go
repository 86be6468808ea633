package readme_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/sqlitedb"
)

// The transactional twins (README): a row of the application's own table and the
// message announcing it commit together, or neither does.
func Example_enqueueTx() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, err := sqlitedb.Open(filepath.Join(dir, "app.db"), sqlitedb.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	q := sqlite.New(db, sqlite.Options{}) // db stays the caller's: q.Close leaves it open
	if err := q.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)`); err != nil {
		panic(err)
	}

	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback() // no-op once committed
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, "order-42", 25); err != nil {
		panic(err)
	}
	if err := q.EnqueueTx(ctx, tx, mq.Message{Queue: "orders", Payload: []byte("order-42 created")}); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	q.Notify("orders") // wake this process's waiting consumers at once

	b, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b.Messages[0].Payload))
	// Output: order-42 created
}
