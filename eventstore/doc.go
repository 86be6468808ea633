// Package eventstore defines the EventStore contract: a durable, append-only log of
// events per stream, split into numbered partitions, with the stream's metadata and
// key/value state beside it. It also holds Memory, the in-memory reference backend.
//
// In duroq a stream is an orchestration instance and a partition is one of its
// executions (continue-as-new starts the next partition); the store itself never
// interprets events, statuses or values beyond the rules below.
//
// # Model
//
//   - A stream is named by a non-empty string. It is created by its first Append or
//     Update and lives until Delete.
//   - A partition is numbered from 1. Its events carry caller-assigned sequence numbers
//     (1, 2, 3, ... in the normal case) and opaque bytes with a short type tag. The
//     stream's current partition is the highest partition ever written.
//   - Metadata: per stream a name, a version, a parent stream, a custom status with a
//     version counter, creation and update times; per partition a status, an output,
//     a pinned runtime version, start and completion times and its event count and
//     bytes. The stream's Status, Output, PinnedVersion and CompletedAt are those of
//     its current partition.
//   - KV: per stream a store (the state as of the end of the last ended partition) and
//     a delta (mutations made since, tombstones included). A status that ends a
//     partition (Completed, Failed, ContinuedAsNew) merges the delta written for it
//     (and earlier partitions) into the store in the same atomic step.
//
// # Contract
//
// Every backend MUST satisfy the following; conformance.TestEventStore checks each.
//
//   - Methods are safe for concurrent use. ctx is the first parameter; a method MUST
//     return an error matching ctx.Err() when the context has ended before it starts.
//     After Close every method MUST fail with ErrClosed; Close is idempotent.
//   - Every write is atomic: on error nothing of the call is stored.
//   - Append MUST insert the events and MUST NOT read, decode, rewrite or delete any
//     stored event, so a damaged row never blocks an append. A sequence number that
//     already exists in the partition fails the whole call with a *ConflictError
//     (ErrConflict). Within one call sequence numbers MUST be ≥ 1 and strictly
//     increasing; gaps are allowed (the caller owns numbering; a store cannot check
//     gaps against stored rows without reading them).
//   - Reads return events in sequence order. A stored event that fails its integrity
//     check MUST be reported as a *CorruptError (ErrCorrupt) naming stream, partition
//     and sequence number; it MUST NOT be skipped.
//   - Reading an unknown stream or partition returns an empty list (KV reads: nothing;
//     CustomStatus: no change) and no error. LatestPartition, Stream, Stats, Prune,
//     Delete, and the writes that need an existing stream (SetCustomStatus, ApplyKV)
//     fail with ErrNotFound (a *NotFoundError naming the stream).
//   - Returned slices and maps belong to the caller; stored data is copied in and out.
//   - Delete is atomic, cascades to descendants (via parent links) and removes their
//     events, partitions and KV state. Unless DeleteOptions says otherwise it refuses a
//     running stream (ErrRunning) and a stream whose parent is not deleted with it
//     (ErrNotRoot).
//   - Prune removes old partitions of one stream but MUST NOT remove its current
//     partition or a Running partition; it works on running streams and never touches
//     KV state.
//   - Every timestamp is taken from the backend's clock (its Options.Now) in Go, so
//     tests can control time.
//
// Input that breaks the rules fails with an *InvalidError (ErrInvalid, or ErrTooLarge
// for sizes beyond MaxEventSize, MaxTypeSize, MaxValueSize and MaxNameSize) before
// anything is written. Every string the store keeps (ids, names, statuses, types,
// outputs, custom statuses, KV keys and values) MUST be valid UTF-8 without NUL
// bytes, so that any SQL backend stores it verbatim; opaque bytes belong in
// Event.Data.
//
// # Transactions
//
// A TxStore does its work inside a transaction of the database it lives in
// (Database, In; the seam is declared in package txn), so that an orchestration
// turn can commit events, metadata, custom status, KV and the queue writes of
// another backend on the same database in one transaction; TestTransactional in
// package conformance checks it. The backends also offer, beside each method, a twin
// that runs inside a transaction of the caller (Memory: AppendTx(ctx, tx
// *txn.MemoryTx, ...); eventstore/sqlite: AppendTx(ctx, tx *sqlx.Tx, ...)). Within
// one transaction apply KV mutations before the Update that ends the partition, or
// they stay in the delta until the next partition ends.
//
// # Stability
//
// The contract may still grow before duroq 1.0: new methods are added to the
// interfaces, never silently changed in meaning.
package eventstore
