package mq

import (
	"context"
	"fmt"

	"github.com/duroq/duroq/txn"
)

// TxQueue is a MessageQueue whose writes can join a transaction of the database it
// lives in, so that they commit atomically with another backend's (the runtime
// adapter commits a turn's messages with its history this way). Memory, mq/sqlite
// and mq/postgres implement it.
type TxQueue interface {
	MessageQueue
	// Database is where the queue lives: backends whose Databases are equal (==)
	// can write in one transaction.
	Database() txn.Database
	// In returns the queue's operations inside tx, a transaction of its Database.
	// What they write is seen by nobody else, and wakes no consumer, before tx
	// commits. A transaction of another database is refused with ErrInvalid.
	In(tx txn.Tx) (QueueTx, error)
}

// QueueTx is what a queue does inside a transaction. Each method follows the rules
// of the MessageQueue method of the same name (errors included); the batch forms
// apply them to many at once.
type QueueTx interface {
	// Enqueue stores the messages, as MessageQueue.Enqueue.
	Enqueue(ctx context.Context, msgs ...Message) error
	// DequeueBatches locks up to max batches without waiting (opts.Wait is ignored).
	DequeueBatches(ctx context.Context, queue string, opts DequeueOptions, max int) ([]*Batch, error)
	// Lock describes the live lock of token, as MessageQueue.Lock.
	Lock(ctx context.Context, token string) (LockInfo, error)
	// Ack acks every token (all or none) and says what each held, as Lock would.
	Ack(ctx context.Context, tokens ...string) ([]LockInfo, error)
	// Remove deletes the pending messages with the given message keys, as
	// MessageQueue.Remove.
	Remove(ctx context.Context, queue string, keys ...string) (int, error)
	// RemovePrefix deletes the pending messages whose message key starts with
	// prefix, as MessageQueue.RemovePrefix.
	RemovePrefix(ctx context.Context, queue, prefix string) (int, error)
	// PurgeKey deletes every message of the routing key, as MessageQueue.PurgeKey.
	PurgeKey(ctx context.Context, queue, routingKey string) (int, error)
	// SetKeyAttrs sets the attribute of each of keys to attrs at the same index.
	SetKeyAttrs(ctx context.Context, queue string, keys []string, attrs []*int64) error
}

// ForeignTx is the error of In given a transaction tx of another database.
func ForeignTx(tx txn.Tx) error {
	return fmt.Errorf("%s: %w: a transaction of another database (%T)", "mq", ErrInvalid, tx)
}
