package eventstore

import (
	"context"
	"fmt"

	"github.com/duroq/duroq/txn"
)

// TxStore is an EventStore whose writes can join a transaction of the database it
// lives in, so that they commit atomically with another backend's (the runtime
// adapter commits a turn's history with the messages it sends this way). Memory,
// eventstore/sqlite and eventstore/postgres implement it.
type TxStore interface {
	EventStore
	// Database is where the store lives: backends whose Databases are equal (==)
	// can write in one transaction.
	Database() txn.Database
	// In returns the store's operations inside tx, a transaction of its Database.
	// A transaction of another database is refused with ErrInvalid.
	In(tx txn.Tx) (StoreTx, error)
}

// StoreTx is what a store does inside a transaction. Each method follows the rules
// of the EventStore method of the same name (errors included). Within one
// transaction apply KV mutations before the Update that ends the partition.
type StoreTx interface {
	Stream(ctx context.Context, stream string) (StreamInfo, error)
	Read(ctx context.Context, stream string, partition int64) ([]Event, error)
	KVSnapshot(ctx context.Context, stream string) (map[string]KVEntry, error)
	// ReadStates reads what Stream, Read of the current partition and KVSnapshot say
	// of each existing stream of streams (absent streams are left out).
	ReadStates(ctx context.Context, streams []string) (map[string]*StreamState, error)
	Append(ctx context.Context, stream string, partition int64, events []Event) error
	Update(ctx context.Context, stream string, u StreamUpdate) error
	// Commit appends and updates each commit's stream, as Append then Update would.
	Commit(ctx context.Context, commits []StreamCommit) error
	SetCustomStatus(ctx context.Context, stream string, value *string) (int64, error)
	ApplyKV(ctx context.Context, stream string, partition int64, muts []KVMutation) error
	ListStreams(ctx context.Context, f StreamFilter) ([]string, error)
	Delete(ctx context.Context, streams []string, o DeleteOptions) (DeleteResult, error)
	DeleteWhere(ctx context.Context, f StreamFilter) (DeleteResult, error)
	Prune(ctx context.Context, stream string, o PruneOptions) (PruneResult, error)
	PruneWhere(ctx context.Context, f StreamFilter, o PruneOptions) (PruneResult, error)
}

// ForeignTx is the error of In given a transaction tx of another database.
func ForeignTx(tx txn.Tx) error {
	return fmt.Errorf("%s: %w: a transaction of another database (%T)", "eventstore", ErrInvalid, tx)
}
