package eventstore

import (
	"context"
	"time"
)

// Limits every backend enforces, so that moving from one backend to another never
// turns accepted input into rejected input.
const (
	// MaxEventSize is the largest Event.Data, in bytes.
	MaxEventSize = 4 << 20
	// MaxTypeSize is the largest Event.Type, in bytes.
	MaxTypeSize = 256
	// MaxValueSize is the largest output, custom status or KV value, in bytes.
	MaxValueSize = 4 << 20
	// MaxNameSize is the largest stream id, name, version, parent, status, pinned
	// version or KV key, in bytes.
	MaxNameSize = 1024
)

// Status is the status of a partition, and of a stream (that of its current
// partition). The store treats it as an opaque string except for the statuses
// below: Running marks work in progress (Delete refuses it without Force, Prune keeps
// it), and the statuses for which EndsPartition is true merge the KV delta.
type Status string

// The statuses the store knows. Any other non-empty string may be stored.
const (
	StatusRunning        Status = "Running"
	StatusCompleted      Status = "Completed"
	StatusFailed         Status = "Failed"
	StatusContinuedAsNew Status = "ContinuedAsNew"
)

// EndsPartition reports whether s ends a partition: Completed, Failed or
// ContinuedAsNew.
func (s Status) EndsPartition() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusContinuedAsNew
}

// Event is one entry of a partition.
type Event struct {
	// Seq is the caller-assigned sequence number, ≥ 1, unique in its partition.
	Seq int64
	// Type is a short tag usable for indexing (at most MaxTypeSize bytes); may be empty.
	Type string
	// Data is opaque (at most MaxEventSize bytes). Reads return a non-nil slice.
	Data []byte
	// CreatedAt is set by the store when the event is appended; Append ignores it.
	CreatedAt time.Time
}

// StreamInfo is the metadata of a stream.
type StreamInfo struct {
	Stream  string // the stream's id
	Name    string // "" until set by Update
	Version string // "" until set by Update
	Parent  string // "" for a root stream
	// Status, Output, PinnedVersion and CompletedAt are those of the current partition.
	Status        Status
	Output        *string   // the current partition's output; nil until an Update sets it
	PinnedVersion *string   // the current partition's pinned version; nil until an Update sets it
	CompletedAt   time.Time // zero unless the current partition has ended
	// CurrentPartition is the highest partition ever written (≥ 1 for a stored
	// stream).
	CurrentPartition int64
	// CustomStatus is nil when never set or cleared.
	CustomStatus *string
	// CustomStatusVersion counts every set and clear of CustomStatus (0 for a new
	// stream); Metadata.CustomStatus compares its lastSeen against it.
	CustomStatusVersion int64
	CreatedAt           time.Time // when the stream's first Append or Update stored it
	UpdatedAt           time.Time // the last write of any kind to the stream
}

// PartitionInfo is the metadata of one partition.
type PartitionInfo struct {
	Partition     int64     // the partition's number, ≥ 1
	Status        Status    // Running when created
	Output        *string   // nil until an Update sets it
	PinnedVersion *string   // nil until an Update sets it
	StartedAt     time.Time // when the partition was created
	CompletedAt   time.Time // when a status that ends the partition was set; else zero
	Events        int64     // number of stored events
	Bytes         int64     // sum of the stored events' Data lengths
}

// StreamUpdate is a change of metadata. Nil fields are left as they are.
type StreamUpdate struct {
	// Partition is the partition Status, Output and PinnedVersion belong to (≥ 1).
	// The partition is created if missing and becomes current if it is the highest.
	Partition int64
	// Name sets the stream's name (in duroq, the orchestration's name).
	Name *string
	// Version sets the stream's version (in duroq, the orchestration's version).
	Version *string
	// Parent links the stream to its parent stream (empty clears the link). A stream
	// cannot be its own parent.
	Parent *string
	// Status sets the partition's status. A status that ends the partition records its
	// completion time and merges into the KV store the delta written for this
	// partition and earlier ones (see KVStore), in the same atomic step.
	Status *Status
	// Output sets the partition's output (in duroq, the ended execution's result,
	// failure message or continue-as-new input).
	Output *string
	// PinnedVersion is overwritten whenever given (keeping it write-once is the
	// caller's business).
	PinnedVersion *string
}

// StreamCommit is one stream's part of a bulk commit (the SQL backends'
// CommitManyTx): Events appended to Update.Partition, then Update applied, as Append
// then Update would.
type StreamCommit struct {
	Stream string       // the stream written
	Events []Event      // appended to Update.Partition first; may be empty
	Update StreamUpdate // applied after the events
}

// StreamState is what a bulk read of streams (the SQL backends' ReadStatesTx) holds
// of one stream: what Stream, Read of the current partition and KVSnapshot say.
type StreamState struct {
	Info   StreamInfo // what Stream says
	Events []Event    // the current partition's events, in sequence order
	// Corrupt is the *CorruptError of an event that failed its check (Events is
	// then nil).
	Corrupt error
	// KV is the stream's KV store without the delta, as KVSnapshot returns it.
	KV map[string]KVEntry
}

// StreamFilter selects streams. Conditions are ANDed; the zero value selects all.
//
// Streams come out in ascending id order (byte order), so After and Limit page
// through a listing: pass the last id of a page as the next page's After. A page is
// stable under concurrent writes: a stream created or deleted meanwhile appears or
// disappears, nothing is listed twice and no untouched stream is skipped.
type StreamFilter struct {
	Streams         []string  // only these ids (nil: any; empty non-nil: none)
	Status          Status    // only streams with this status ("": any)
	Name            string    // only streams with this name ("": any)
	IDPrefix        string    // only ids that start with this ("": any)
	Parent          string    // only children of this stream ("": any)
	RootsOnly       bool      // only streams without a parent
	CreatedAfter    time.Time // only streams created at or after this (zero: any)
	CreatedBefore   time.Time // only streams created before this (zero: any)
	UpdatedAfter    time.Time // only streams last updated at or after this (zero: any)
	UpdatedBefore   time.Time // only streams last updated before this (zero: any)
	CompletedBefore time.Time // only streams whose current partition ended before this (zero: any)
	After           string    // only ids greater than this: the paging cursor ("": from the start)
	Limit           int       // at most this many (0: no limit)
}

// CustomStatus is a stream's custom status and its version.
type CustomStatus struct {
	Value   *string // nil when cleared or never set
	Version int64   // counts every set and clear; 0 when never set
}

// KVOp is the kind of a KVMutation.
type KVOp uint8

// The KV mutations.
const (
	KVSet      KVOp = iota + 1 // set Key to Value
	KVClear                    // remove Key
	KVClearAll                 // remove every key of the stream
)

// KVMutation is one change of a stream's KV state.
type KVMutation struct {
	Op    KVOp   // what the mutation does; the zero KVOp is invalid
	Key   string // required for KVSet and KVClear; at most MaxNameSize bytes
	Value string // for KVSet; may be empty; at most MaxValueSize bytes
	// At is when the mutation happened (the caller's clock, for example the time the
	// runtime recorded it). Zero means the store's clock.
	At time.Time
}

// KVEntry is one stored key.
type KVEntry struct {
	Value     string    // the key's value (may be empty)
	Partition int64     // the partition that wrote it
	UpdatedAt time.Time // KVMutation.At of the write
}

// DeleteOptions express the caller's deletion policy.
type DeleteOptions struct {
	// Force deletes running streams too; without it any running stream in the
	// cascade fails the call with ErrRunning.
	Force bool
	// AllowNonRoot deletes a stream whose parent is not deleted with it (a
	// sub-orchestration on its own); without it such a stream fails the call with
	// ErrNotRoot.
	AllowNonRoot bool
}

// DeleteResult reports what a delete removed.
type DeleteResult struct {
	StreamIDs  []string // the deleted streams, descendants included, in id order
	Streams    int      // len(StreamIDs)
	Partitions int64    // partitions of the deleted streams
	Events     int64    // events of the deleted streams
}

// PruneOptions choose the partitions Prune removes. A partition is removed when it is
// older than the KeepLast newest partitions and, if CompletedBefore is set, it ended
// before CompletedBefore. The current partition and Running partitions are always
// kept.
type PruneOptions struct {
	KeepLast        int       // ≥ 0; 0 and 1 both keep only the current partition
	CompletedBefore time.Time // when set, only partitions that ended before it go; zero: any age
}

// PruneResult reports what a prune removed.
type PruneResult struct {
	Streams    int   // streams examined
	Partitions int64 // partitions removed
	Events     int64 // events removed with them
}

// Stats describes one stream: its current partition's events and its KV state as
// readers see it (delta over store, tombstones excluded).
type Stats struct {
	Partition    int64 // the current partition
	Events       int64 // events stored in the current partition
	EventBytes   int64 // sum of those events' Data lengths
	KVKeys       int   // live keys (delta over store, cleared keys excluded)
	KVValueBytes int64 // sum of the live keys' value lengths
}

// Totals describes the whole store.
type Totals struct {
	Streams    int64            // stored streams
	Partitions int64            // stored partitions, of all streams
	Events     int64            // stored events, of all partitions
	ByStatus   map[Status]int64 // streams per status (that of their current partition)
}

// Log is the append-only event log.
type Log interface {
	// Append adds events to a partition of a stream, creating both if needed; the
	// partition becomes current if it is the highest. An empty events list writes
	// nothing. See the package contract for the rules.
	Append(ctx context.Context, stream string, partition int64, events []Event) error
	// Read returns the events of a partition in sequence order (empty if unknown).
	Read(ctx context.Context, stream string, partition int64) ([]Event, error)
	// ReadLatest returns the current partition and its events; (0, empty) for an
	// unknown stream.
	ReadLatest(ctx context.Context, stream string) (int64, []Event, error)
	// LatestPartition returns the current partition; ErrNotFound for an unknown stream.
	LatestPartition(ctx context.Context, stream string) (int64, error)
	// Partitions lists the stored partitions in ascending order (empty if unknown).
	Partitions(ctx context.Context, stream string) ([]PartitionInfo, error)
}

// Metadata holds stream and partition metadata.
type Metadata interface {
	// Update applies u to the stream, creating the stream and the partition if
	// needed.
	Update(ctx context.Context, stream string, u StreamUpdate) error
	// Stream returns the metadata of a stream; ErrNotFound if unknown. A child's
	// parent is StreamInfo.Parent.
	Stream(ctx context.Context, stream string) (StreamInfo, error)
	// ListStreams returns the ids of the streams f selects, in id order. Children of a
	// stream: StreamFilter{Parent: id}.
	ListStreams(ctx context.Context, f StreamFilter) ([]string, error)
	// ListStreamInfos returns the metadata of the streams f selects, in id order, as
	// Stream returns it: what a page of a listing shows, in one read (one statement
	// on the SQL backends) instead of a Stream per id.
	ListStreamInfos(ctx context.Context, f StreamFilter) ([]StreamInfo, error)
	// SetCustomStatus sets (nil: clears) the custom status of an existing stream and
	// increments its version either way; it returns the new version. ErrNotFound if
	// the stream is unknown.
	SetCustomStatus(ctx context.Context, stream string, value *string) (int64, error)
	// CustomStatus returns the custom status and true when its version is greater than
	// lastSeen; false for an unknown stream or an unchanged status.
	CustomStatus(ctx context.Context, stream string, lastSeen int64) (CustomStatus, bool, error)
}

// KVStore holds per-stream key/value state in two parts: the store (as of the end of
// the last ended partition) and the delta (mutations since). Mutations go to the
// delta; a status that ends a partition merges the delta entries written for it and
// earlier partitions into the store (set keys are written, tombstoned keys removed)
// and drops them from the delta. Prune never touches KV state; Delete removes it.
type KVStore interface {
	// ApplyKV applies the mutations, in order, to the delta of an existing stream
	// (ErrNotFound otherwise), recording partition and time. KVClearAll tombstones
	// every key of the store and of the delta.
	ApplyKV(ctx context.Context, stream string, partition int64, muts []KVMutation) error
	// KVGet returns a key as readers see it (delta over store); false if absent,
	// cleared or the stream is unknown.
	KVGet(ctx context.Context, stream, key string) (KVEntry, bool, error)
	// KVAll returns every key as readers see it (empty for an unknown stream).
	KVAll(ctx context.Context, stream string) (map[string]KVEntry, error)
	// KVSnapshot returns the store only, without the delta: the state a replay of the
	// current partition starts from.
	KVSnapshot(ctx context.Context, stream string) (map[string]KVEntry, error)
}

// Admin holds management operations.
type Admin interface {
	// Delete removes the streams and all their descendants, atomically.
	// ErrNotFound if a listed stream is unknown; ErrRunning and ErrNotRoot as
	// DeleteOptions describes. Nothing is deleted on error.
	Delete(ctx context.Context, streams []string, o DeleteOptions) (DeleteResult, error)
	// DeleteWhere deletes the root streams f selects (f.Parent must be empty), with
	// their descendants, skipping silently those whose tree has a running stream;
	// f.Limit bounds the number of roots deleted. Atomic.
	DeleteWhere(ctx context.Context, f StreamFilter) (DeleteResult, error)
	// Prune removes old partitions of a stream (see PruneOptions); ErrNotFound if the
	// stream is unknown.
	Prune(ctx context.Context, stream string, o PruneOptions) (PruneResult, error)
	// PruneWhere prunes every stream f selects, running ones included. Atomic.
	PruneWhere(ctx context.Context, f StreamFilter, o PruneOptions) (PruneResult, error)
	// Stats describes a stream; ErrNotFound if unknown.
	Stats(ctx context.Context, stream string) (Stats, error)
	// Totals describes the whole store.
	Totals(ctx context.Context) (Totals, error)
}

// EventStore is the full contract (see the package documentation).
type EventStore interface {
	Log
	Metadata
	KVStore
	Admin
	// Close releases the store's resources; stored data stays (for durable
	// backends). Idempotent.
	Close() error
}
