// Package mqtest holds tests that every SQL backend of mq runs alike: behaviour of
// their transactional twins, which the importable conformance suite cannot reach
// through the mq.MessageQueue interface.
package mqtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/mq"
	"github.com/jmoiron/sqlx"
)

// TxQueue is a SQL queue backend with transactional twins on its database.
type TxQueue interface {
	mq.MessageQueue
	EnqueueTx(ctx context.Context, tx *sqlx.Tx, msgs ...mq.Message) error
	DequeueTx(ctx context.Context, tx *sqlx.Tx, queue string, opts mq.DequeueOptions) (*mq.Batch, time.Time, error)
	AckTx(ctx context.Context, tx *sqlx.Tx, token string, then ...mq.Message) error
	AbandonTx(ctx context.Context, tx *sqlx.Tx, token string, opts mq.AbandonOptions) error
	LockTx(ctx context.Context, tx *sqlx.Tx, token string) (mq.LockInfo, error)
	RenewTx(ctx context.Context, tx *sqlx.Tx, token string, extend time.Duration) (time.Time, error)
	RemoveTx(ctx context.Context, tx *sqlx.Tx, queue string, keys ...string) (int, error)
	RemovePrefixTx(ctx context.Context, tx *sqlx.Tx, queue, prefix string) (int, error)
	PurgeKeyTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string) (int, error)
	SetKeyAttrTx(ctx context.Context, tx *sqlx.Tx, queue, routingKey string, attr *int64) error
}

// TxTwins shows another package's writes and queue writes committing (or rolling
// back) as one transaction on db, the migrated database q runs on, and every twin
// working inside a caller's transaction.
func TxTwins(t *testing.T, db *sqlx.DB, q TxQueue) {
	t.Helper()
	ctx := t.Context()
	if _, err := db.Exec(`CREATE TABLE app_orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	write := func(id string, fail bool) error {
		return sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
			if _, err := tx.Exec(db.Rebind(`INSERT INTO app_orders (id) VALUES (?)`), id); err != nil {
				return err
			}
			if err := q.EnqueueTx(ctx, tx, mq.Message{Queue: "orders", Payload: []byte(id)}); err != nil {
				return err
			}
			if fail {
				return errors.New("the caller gives up")
			}
			return nil
		})
	}
	if err := write("committed", false); err != nil {
		t.Fatal(err)
	}
	if err := write("rolled-back", true); err == nil {
		t.Fatal("expected the failing write to fail")
	}
	var orders []string
	if err := db.Select(&orders, `SELECT id FROM app_orders`); err != nil {
		t.Fatal(err)
	}
	b, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil || b == nil {
		t.Fatalf("dequeue: %v %v", b, err)
	}
	next, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil || next != nil {
		t.Fatalf("a second message exists (%+v, %v): the rolled-back enqueue leaked", next, err)
	}
	if len(orders) != 1 || orders[0] != "committed" || string(b.Messages[0].Payload) != "committed" {
		t.Fatalf("orders %v, message %q: want exactly the committed pair", orders, b.Messages[0].Payload)
	}

	// Ack inside the caller's transaction, rolled back: the message stays locked by us.
	tx := db.MustBeginTx(ctx, nil)
	if err := q.AckTx(ctx, tx, b.Token, mq.Message{Queue: "orders", Payload: []byte("follow-up")}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	if err := q.Ack(ctx, b.Token); err != nil {
		t.Fatalf("ack after a rolled-back AckTx: %v (the rollback should have left the lock held)", err)
	}
	if st, err := q.Stats(ctx, "orders"); err != nil || st != (mq.Stats{}) {
		t.Fatalf("Stats after the ack = %+v, %v; the rolled-back AckTx must not have enqueued its follow-up", st, err)
	}

	// Every twin in one committed transaction with the caller's write.
	if err := q.Enqueue(ctx, mq.Message{Queue: "jobs", RoutingKey: "k", Key: "job-1", Payload: []byte("1")},
		mq.Message{Queue: "jobs", RoutingKey: "k", Key: "job-2", Payload: []byte("2")},
		mq.Message{Queue: "jobs", Key: "other/1", Payload: []byte("3")}); err != nil {
		t.Fatal(err)
	}
	var held *mq.Batch
	err = sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`INSERT INTO app_orders (id) VALUES ('twins')`); err != nil {
			return err
		}
		var err error
		if held, _, err = q.DequeueTx(ctx, tx, "jobs", mq.DequeueOptions{}); err != nil || held == nil {
			return errors.Join(err, errors.New("DequeueTx found nothing"))
		}
		if _, err := q.LockTx(ctx, tx, held.Token); err != nil {
			return err
		}
		if _, err := q.RenewTx(ctx, tx, held.Token, time.Minute); err != nil {
			return err
		}
		if err := q.SetKeyAttrTx(ctx, tx, "jobs", "k", new(int64(7))); err != nil {
			return err
		}
		if n, err := q.RemovePrefixTx(ctx, tx, "jobs", "other/"); err != nil || n != 1 {
			return errors.Join(err, errors.New("RemovePrefixTx removed the wrong count"))
		}
		if n, err := q.RemoveTx(ctx, tx, "jobs", "job-2"); err != nil || n != 1 {
			return errors.Join(err, errors.New("RemoveTx removed the wrong count"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("transaction with every twin: %v", err)
	}
	// Removing job-2 invalidated the batch: job-1 is eligible again, under attribute 7.
	if err := q.Ack(ctx, held.Token); !errors.Is(err, mq.ErrLockLost) {
		t.Fatalf("Ack of the batch invalidated by RemoveTx = %v, want ErrLockLost", err)
	}
	b, err = q.DequeueBatch(ctx, "jobs", mq.DequeueOptions{KeyAttr: &mq.AttrFilter{Ranges: []mq.AttrRange{{Min: 7, Max: 7}}}})
	if err != nil || b == nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "1" {
		t.Fatalf("after the twins: %+v, %v; want job-1 alone, under the attribute set by SetKeyAttrTx", b, err)
	}
	if err := sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
		if err := q.AbandonTx(ctx, tx, b.Token, mq.AbandonOptions{}); err != nil {
			return err
		}
		_, err := q.PurgeKeyTx(ctx, tx, "jobs", "k")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, "jobs"); err != nil || st != (mq.Stats{}) {
		t.Fatalf("Stats after PurgeKeyTx = %+v, %v; want an empty queue", st, err)
	}
}
