package postgres

import "github.com/duroq/duroq/eventstore/sqlstore"

// The statements of the store, in one place. Parameters carry explicit casts where
// PostgreSQL could not infer their type (INSERT ... SELECT lists, CASE, COALESCE).

// queries are the statements the shared code runs (see sqlstore.Queries for their
// parameters).
var queries = sqlstore.Queries{
	// TouchStream locks an existing stream's row (ApplyKV).
	TouchStream: `UPDATE es_streams SET updated_at = $1 WHERE stream = $2`,

	// KVPut writes a delta entry; a NULL value is a tombstone.
	KVPut: `INSERT INTO es_kv_delta AS d (stream, key, value, partition, updated_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (stream, key) DO UPDATE SET
	value = EXCLUDED.value, partition = EXCLUDED.partition, updated_at = EXCLUDED.updated_at`,
	KVTombstoneDelta: `UPDATE es_kv_delta SET value = NULL, partition = $1, updated_at = $2 WHERE stream = $3`,
	KVTombstoneStore: `INSERT INTO es_kv_delta (stream, key, value, partition, updated_at)
SELECT stream, key, NULL, $2::bigint, $3::bigint FROM es_kv_store WHERE stream = $1
ON CONFLICT (stream, key) DO NOTHING`,

	KVDeltaGet: `SELECT value, partition, updated_at FROM es_kv_delta WHERE stream = $1 AND key = $2`,
	KVStoreGet: `SELECT value, partition, updated_at FROM es_kv_store WHERE stream = $1 AND key = $2`,
	KVDeltaAll: `SELECT key, value, partition, updated_at FROM es_kv_delta WHERE stream = $1`,
	KVStoreAll: `SELECT key, value, partition, updated_at FROM es_kv_store WHERE stream = $1`,

	// The KV merge when partition $2 ends: set keys are written, tombstoned keys
	// removed, the merged delta rows dropped.
	MergeKVSet: `INSERT INTO es_kv_store AS k (stream, key, value, partition, updated_at)
SELECT stream, key, value, partition, updated_at FROM es_kv_delta
WHERE stream = $1 AND partition <= $2 AND value IS NOT NULL
ON CONFLICT (stream, key) DO UPDATE SET
	value = EXCLUDED.value, partition = EXCLUDED.partition, updated_at = EXCLUDED.updated_at`,
	MergeKVClear: `DELETE FROM es_kv_store WHERE stream = $1 AND key IN (
	SELECT key FROM es_kv_delta WHERE stream = $1 AND partition <= $2 AND value IS NULL)`,
	MergeKVDrop: `DELETE FROM es_kv_delta WHERE stream = $1 AND partition <= $2`,

	ReadEvents: `SELECT seq, type, data, checksum, created_at FROM es_events
WHERE stream = $1 AND partition = $2 ORDER BY seq`,

	// ReadLatest reads the current partition and its events in one statement (one
	// snapshot): no row for an unknown stream, one row of NULL event columns for an
	// empty partition.
	ReadLatest: `SELECT s.current_partition, e.seq, e.type, e.data, e.checksum, e.created_at
FROM es_streams s
LEFT JOIN es_events e ON e.stream = s.stream AND e.partition = s.current_partition
WHERE s.stream = $1
ORDER BY e.seq`,

	CurrentPartition: `SELECT current_partition FROM es_streams WHERE stream = $1`,
	// LockCurrentPartition is CurrentPartition locking the stream (Prune).
	LockCurrentPartition: `SELECT current_partition FROM es_streams WHERE stream = $1 FOR UPDATE`,

	Partitions: `SELECT partition, status, output, pinned_version, started_at, completed_at, event_count, bytes
FROM es_partitions WHERE stream = $1 ORDER BY partition`,

	Stream: "SELECT " + sqlstore.StreamColumns + " WHERE s.stream = $1",

	SetCustomStatus: `UPDATE es_streams SET
	custom_status = $1, custom_status_version = custom_status_version + 1, updated_at = $2
WHERE stream = $3
RETURNING custom_status_version`,
	CustomStatus: `SELECT custom_status, custom_status_version FROM es_streams
WHERE stream = $1 AND custom_status_version > $2`,

	// One array parameter, whatever the number of ids.
	StreamIn:     `s.stream = ANY(?::text[])`,
	LockSelected: ` FOR UPDATE OF s`,

	Node:     `SELECT COALESCE(parent, ''), status FROM es_streams WHERE stream = $1`,
	Children: `SELECT stream FROM es_streams WHERE parent = $1 ORDER BY stream`,

	// All the streams at once.
	DeleteEvents:     `DELETE FROM es_events WHERE stream = ANY($1::text[])`,
	DeletePartitions: `DELETE FROM es_partitions WHERE stream = ANY($1::text[])`,
	DeleteKVStore:    `DELETE FROM es_kv_store WHERE stream = ANY($1::text[])`,
	DeleteKVDelta:    `DELETE FROM es_kv_delta WHERE stream = ANY($1::text[])`,
	DeleteStreams:    `DELETE FROM es_streams WHERE stream = ANY($1::text[])`,

	// All the partitions at once.
	PruneEvents:     `DELETE FROM es_events WHERE stream = $1 AND partition = ANY($2::bigint[])`,
	PrunePartitions: `DELETE FROM es_partitions WHERE stream = $1 AND partition = ANY($2::bigint[])`,

	Stats: `SELECT s.current_partition, COALESCE(p.event_count, 0), COALESCE(p.bytes, 0)
FROM es_streams s
LEFT JOIN es_partitions p ON p.stream = s.stream AND p.partition = s.current_partition
WHERE s.stream = $1`,

	TotalStreams:    `SELECT COUNT(*) FROM es_streams`,
	TotalPartitions: `SELECT COUNT(*), COALESCE(SUM(event_count), 0)::bigint FROM es_partitions`,
	TotalsByStatus:  `SELECT status, COUNT(*) FROM es_streams GROUP BY status`,
}

// The statements of this backend's own steps: Append, Update and the locks of a
// delete.
const (
	// qAppend is Append in one statement. It inserts the events ($3 sequence
	// numbers, $4 types, $5 data, $6 checksums), skipping a number that is already
	// stored (or being stored by a concurrent transaction that then commits) instead
	// of failing; only if every event went in does it create the stream or advance
	// its current partition (a partition above the current one is new, so the
	// stream takes its status, Running), then create the partition or add to its
	// counters ($8 bytes). No stored event is read. It returns the lowest number
	// that did not go in (NULL if all did; otherwise the caller rolls back) and the
	// number of partition rows written (1 on success). Each upsert reads
	// the row of the one before it, so the stream's row is locked before the
	// partition's, the order of every writer.
	qAppend = `WITH ev AS (
	INSERT INTO es_events (stream, partition, seq, type, data, checksum, created_at)
	SELECT $1::text, $2::bigint, e.seq, e.type, e.data, e.checksum, $7::bigint
	FROM unnest($3::bigint[], $4::text[], $5::bytea[], $6::bigint[]) AS e(seq, type, data, checksum)
	ON CONFLICT (stream, partition, seq) DO NOTHING
	RETURNING seq
), done AS (
	SELECT count(*) AS n FROM ev
), st AS (
	INSERT INTO es_streams AS s (stream, status, current_partition, created_at, updated_at)
	SELECT $1::text, 'Running', $2::bigint, $7::bigint, $7::bigint FROM done WHERE done.n = cardinality($3::bigint[])
	ON CONFLICT (stream) DO UPDATE SET
		status = CASE WHEN EXCLUDED.current_partition > s.current_partition THEN 'Running' ELSE s.status END,
		current_partition = GREATEST(s.current_partition, EXCLUDED.current_partition),
		updated_at = EXCLUDED.updated_at
	RETURNING stream
), pt AS (
	INSERT INTO es_partitions AS p (stream, partition, status, started_at, event_count, bytes)
	SELECT st.stream, $2::bigint, 'Running', $7::bigint, done.n, $8::bigint FROM st, done
	ON CONFLICT (stream, partition) DO UPDATE SET
		event_count = p.event_count + EXCLUDED.event_count,
		bytes = p.bytes + EXCLUDED.bytes
	RETURNING partition
)
SELECT
	(SELECT min(g.seq) FROM unnest($3::bigint[]) AS g(seq) WHERE NOT EXISTS (SELECT FROM ev WHERE ev.seq = g.seq)),
	(SELECT count(*) FROM pt)`

	// qLockStream creates the stream (current partition $2, Running) or locks its
	// row: the first statement of Update, so that it locks the stream before the
	// partition as every other writer does.
	qLockStream = `INSERT INTO es_streams AS s (stream, status, current_partition, created_at, updated_at)
VALUES ($1, 'Running', $2, $3, $3)
ON CONFLICT (stream) DO UPDATE SET updated_at = EXCLUDED.updated_at`

	// qUpsertPartition creates or updates a partition and returns its status: $3
	// status (NULL: unchanged, Running when new), $4 whether it ends the partition,
	// $5 output and $6 pinned version (NULL: unchanged), $7 now.
	qUpsertPartition = `INSERT INTO es_partitions AS p (stream, partition, status, output, pinned_version, started_at, completed_at)
VALUES ($1, $2, COALESCE($3::text, 'Running'), $5::text, $6::text, $7::bigint,
	CASE WHEN $4::boolean THEN $7::bigint END)
ON CONFLICT (stream, partition) DO UPDATE SET
	status = COALESCE($3::text, p.status),
	completed_at = CASE WHEN $3::text IS NULL THEN p.completed_at WHEN $4::boolean THEN $7::bigint ELSE NULL END,
	output = COALESCE($5::text, p.output),
	pinned_version = COALESCE($6::text, p.pinned_version)
RETURNING status`

	// qUpdateStream: the stream's status follows its current partition, which is the
	// higher of the old current partition and $5 whose status is $6 (SET sees the
	// row's old values).
	qUpdateStream = `UPDATE es_streams SET
	name = COALESCE($1::text, name),
	version = COALESCE($2::text, version),
	parent = CASE WHEN $3::boolean THEN NULLIF($4::text, '') ELSE parent END,
	status = CASE WHEN $5::bigint >= current_partition THEN $6::text ELSE status END,
	current_partition = GREATEST(current_partition, $5::bigint),
	updated_at = $7
WHERE stream = $8`

	// qLockStreams locks streams in id order, the one order in which every
	// statement that locks several streams takes them, so that two of them never
	// wait for each other.
	qLockStreams = `SELECT stream FROM es_streams WHERE stream = ANY($1::text[]) ORDER BY stream FOR UPDATE`
)
