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
	// Stream returns the metadata of a stream, as Metadata.Stream.
	Stream(ctx context.Context, stream string) (StreamInfo, error)
	// Read returns the events of a partition, as Log.Read.
	Read(ctx context.Context, stream string, partition int64) ([]Event, error)
	// KVSnapshot returns the KV store without the delta, as KVStore.KVSnapshot.
	KVSnapshot(ctx context.Context, stream string) (map[string]KVEntry, error)
	// ReadStates reads what Stream, Read of the current partition and KVSnapshot say
	// of each existing stream of streams (absent streams are left out).
	ReadStates(ctx context.Context, streams []string) (map[string]*StreamState, error)
	// Append adds events to a partition of a stream, as Log.Append.
	Append(ctx context.Context, stream string, partition int64, events []Event) error
	// Update applies a metadata change, as Metadata.Update.
	Update(ctx context.Context, stream string, u StreamUpdate) error
	// Commit appends and updates each commit's stream, as Append then Update would.
	Commit(ctx context.Context, commits []StreamCommit) error
	// SetCustomStatus sets (nil: clears) the custom status and returns its new
	// version, as Metadata.SetCustomStatus.
	SetCustomStatus(ctx context.Context, stream string, value *string) (int64, error)
	// ApplyKV applies KV mutations to the delta, as KVStore.ApplyKV.
	ApplyKV(ctx context.Context, stream string, partition int64, muts []KVMutation) error
	// ListStreams returns the ids of the streams f selects, as Metadata.ListStreams.
	ListStreams(ctx context.Context, f StreamFilter) ([]string, error)
	// ListStreamInfos returns the metadata of the streams f selects, as
	// Metadata.ListStreamInfos.
	ListStreamInfos(ctx context.Context, f StreamFilter) ([]StreamInfo, error)
	// Delete removes streams with their descendants, as Admin.Delete.
	Delete(ctx context.Context, streams []string, o DeleteOptions) (DeleteResult, error)
	// DeleteWhere deletes the root streams f selects with their descendants, as
	// Admin.DeleteWhere.
	DeleteWhere(ctx context.Context, f StreamFilter) (DeleteResult, error)
	// Prune removes old partitions of a stream, as Admin.Prune.
	Prune(ctx context.Context, stream string, o PruneOptions) (PruneResult, error)
	// PruneWhere prunes every stream f selects, as Admin.PruneWhere.
	PruneWhere(ctx context.Context, f StreamFilter, o PruneOptions) (PruneResult, error)
}

// ForeignTx is the error of In given a transaction tx of another database.
func ForeignTx(tx txn.Tx) error {
	return fmt.Errorf("%s: %w: a transaction of another database (%T)", "eventstore", ErrInvalid, tx)
}
