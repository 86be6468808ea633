package sqlite

import "github.com/duroq/duroq/eventstore/sqlstore"

// The statements of the store, in one place. Numbered parameters (?1, ?2) let one
// value be used twice. The parameters of the hot reads' WHERE clauses are +? so
// that SQLite does not recompile them at every run (see internal/sqliteconn).

// queries are the statements the shared code runs (see sqlstore.Queries for their
// parameters).
var queries = sqlstore.Queries{
	TouchStream: `UPDATE es_streams SET updated_at = ? WHERE stream = ?`,

	// KVPut writes a delta entry; a NULL value is a tombstone.
	KVPut: `INSERT INTO es_kv_delta (stream, key, value, partition, updated_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (stream, key) DO UPDATE SET
	value = excluded.value, partition = excluded.partition, updated_at = excluded.updated_at`,
	KVTombstoneDelta: `UPDATE es_kv_delta SET value = NULL, partition = ?, updated_at = ? WHERE stream = ?`,
	KVTombstoneStore: `INSERT INTO es_kv_delta (stream, key, value, partition, updated_at)
SELECT stream, key, NULL, ?2, ?3 FROM es_kv_store WHERE stream = ?1
ON CONFLICT (stream, key) DO NOTHING`,

	KVDeltaGet: `SELECT value, partition, updated_at FROM es_kv_delta WHERE stream = ? AND key = ?`,
	KVStoreGet: `SELECT value, partition, updated_at FROM es_kv_store WHERE stream = ? AND key = ?`,
	KVDeltaAll: `SELECT key, value, partition, updated_at FROM es_kv_delta WHERE stream = ?`,
	KVStoreAll: `SELECT key, value, partition, updated_at FROM es_kv_store WHERE stream = ?`,

	// The KV merge when partition ?2 ends: set keys are written, tombstoned keys
	// removed, the merged delta rows dropped.
	MergeKVSet: `INSERT INTO es_kv_store (stream, key, value, partition, updated_at)
SELECT stream, key, value, partition, updated_at FROM es_kv_delta
WHERE stream = ?1 AND partition <= ?2 AND value IS NOT NULL
ON CONFLICT (stream, key) DO UPDATE SET
	value = excluded.value, partition = excluded.partition, updated_at = excluded.updated_at`,
	MergeKVClear: `DELETE FROM es_kv_store WHERE stream = ?1 AND key IN (
	SELECT key FROM es_kv_delta WHERE stream = ?1 AND partition <= ?2 AND value IS NULL)`,
	MergeKVDrop: `DELETE FROM es_kv_delta WHERE stream = ?1 AND partition <= ?2`,

	ReadEvents: `SELECT seq, type, data, checksum, created_at FROM es_events
WHERE stream = +? AND partition = +? ORDER BY seq`,

	// ReadLatest reads the partition, then its events (no ReadLatest statement).
	CurrentPartition: `SELECT current_partition FROM es_streams WHERE stream = ?`,
	// The write lock keeps every writer out: no row lock is needed.
	LockCurrentPartition: `SELECT current_partition FROM es_streams WHERE stream = ?`,

	Partitions: `SELECT partition, status, output, pinned_version, started_at, completed_at, event_count, bytes
FROM es_partitions WHERE stream = ? ORDER BY partition`,

	Stream: "SELECT " + sqlstore.StreamColumns + " WHERE s.stream = +?",

	SetCustomStatus: `UPDATE es_streams SET
	custom_status = ?, custom_status_version = custom_status_version + 1, updated_at = ?
WHERE stream = ?
RETURNING custom_status_version`,
	CustomStatus: `SELECT custom_status, custom_status_version FROM es_streams
WHERE stream = ? AND custom_status_version > ?`,

	// One JSON parameter, whatever the number of ids (no bound-variable limit).
	StreamIn: `s.stream IN (SELECT value FROM json_each(?))`,

	Node:     `SELECT COALESCE(parent, ''), status FROM es_streams WHERE stream = ?`,
	Children: `SELECT stream FROM es_streams WHERE parent = ? ORDER BY stream`,

	// One stream at a time.
	DeleteEvents:     `DELETE FROM es_events WHERE stream = ?`,
	DeletePartitions: `DELETE FROM es_partitions WHERE stream = ?`,
	DeleteKVStore:    `DELETE FROM es_kv_store WHERE stream = ?`,
	DeleteKVDelta:    `DELETE FROM es_kv_delta WHERE stream = ?`,
	DeleteStreams:    `DELETE FROM es_streams WHERE stream = ?`,

	// One partition at a time.
	PruneEvents:     `DELETE FROM es_events WHERE stream = ? AND partition = ?`,
	PrunePartitions: `DELETE FROM es_partitions WHERE stream = ? AND partition = ?`,

	Stats: `SELECT s.current_partition, COALESCE(p.event_count, 0), COALESCE(p.bytes, 0)
FROM es_streams s
LEFT JOIN es_partitions p ON p.stream = s.stream AND p.partition = s.current_partition
WHERE s.stream = ?`,

	TotalStreams:    `SELECT COUNT(*) FROM es_streams`,
	TotalPartitions: `SELECT COUNT(*), COALESCE(SUM(event_count), 0) FROM es_partitions`,
	TotalsByStatus:  `SELECT status, COUNT(*) FROM es_streams GROUP BY status`,
}

// The statements of this backend's own steps, Append and Update.
const (
	// qInsertEvents is followed by one "(?, ?, ?, ?, ?, ?, ?)" per event.
	qInsertEvents = `INSERT INTO es_events (stream, partition, seq, type, data, checksum, created_at) VALUES `

	// qAddPartitionCounts creates the partition (Running) or adds to its counters.
	qAddPartitionCounts = `INSERT INTO es_partitions (stream, partition, status, started_at, event_count, bytes)
VALUES (?1, ?2, 'Running', ?3, ?4, ?5)
ON CONFLICT (stream, partition) DO UPDATE SET
	event_count = event_count + excluded.event_count,
	bytes = bytes + excluded.bytes`

	// qTouchStreamOnAppend creates the stream or advances its current partition. A
	// partition above the current one is new, so the stream takes its status, Running.
	qTouchStreamOnAppend = `INSERT INTO es_streams (stream, status, current_partition, created_at, updated_at)
VALUES (?1, 'Running', ?2, ?3, ?3)
ON CONFLICT (stream) DO UPDATE SET
	status = CASE WHEN excluded.current_partition > es_streams.current_partition
		THEN 'Running' ELSE es_streams.status END,
	current_partition = MAX(es_streams.current_partition, excluded.current_partition),
	updated_at = excluded.updated_at`

	// qUpsertPartition creates the partition (Running unless ?1 says otherwise) or
	// updates it: ?1 status (NULL: unchanged), ?2 whether it ends the partition, ?3
	// now, ?4 output, ?5 pinned version (NULL: unchanged).
	qUpsertPartition = `INSERT INTO es_partitions (stream, partition, status, started_at, completed_at, output, pinned_version)
VALUES (?6, ?7, COALESCE(?1, 'Running'), ?3, CASE WHEN ?1 IS NOT NULL AND ?2 THEN ?3 END, ?4, ?5)
ON CONFLICT (stream, partition) DO UPDATE SET
	status = COALESCE(?1, status),
	completed_at = CASE WHEN ?1 IS NULL THEN completed_at WHEN ?2 THEN ?3 ELSE NULL END,
	output = COALESCE(?4, output),
	pinned_version = COALESCE(?5, pinned_version)`

	// qUpsertStream creates the stream or updates it. Its status follows its current
	// partition, which is the higher of the old current partition and ?5 (SET sees the
	// row's old values).
	qUpsertStream = `INSERT INTO es_streams (stream, name, version, parent, status, current_partition, created_at, updated_at)
VALUES (?7, COALESCE(?1, ''), COALESCE(?2, ''), CASE WHEN ?3 THEN NULLIF(?4, '') END,
	COALESCE((SELECT p.status FROM es_partitions p WHERE p.stream = ?7 AND p.partition = ?5), 'Running'), ?5, ?6, ?6)
ON CONFLICT (stream) DO UPDATE SET
	name = COALESCE(?1, name),
	version = COALESCE(?2, version),
	parent = CASE WHEN ?3 THEN NULLIF(?4, '') ELSE parent END,
	current_partition = MAX(current_partition, ?5),
	status = (SELECT p.status FROM es_partitions p
		WHERE p.stream = es_streams.stream AND p.partition = MAX(es_streams.current_partition, ?5)),
	updated_at = ?6`
)
