package sqlite

// The statements of the store, in one place. Numbered parameters (?1, ?2) let one
// value be used twice.

const (
	qInsertEvent = `INSERT INTO es_events (stream, partition, seq, type, data, checksum, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)`

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

	qEnsureStream = `INSERT INTO es_streams (stream, status, current_partition, created_at, updated_at)
VALUES (?1, 'Running', ?2, ?3, ?3)
ON CONFLICT (stream) DO NOTHING`

	qEnsurePartition = `INSERT INTO es_partitions (stream, partition, status, started_at)
VALUES (?, ?, 'Running', ?)
ON CONFLICT (stream, partition) DO NOTHING`

	// qUpdatePartition: ?1 status (NULL: unchanged), ?2 whether it ends the partition,
	// ?3 now, ?4 output, ?5 pinned version (NULL: unchanged).
	qUpdatePartition = `UPDATE es_partitions SET
	status = COALESCE(?1, status),
	completed_at = CASE WHEN ?1 IS NULL THEN completed_at WHEN ?2 THEN ?3 ELSE NULL END,
	output = COALESCE(?4, output),
	pinned_version = COALESCE(?5, pinned_version)
WHERE stream = ?6 AND partition = ?7`

	// qUpdateStream: the stream's status follows its current partition, which is the
	// higher of the old current partition and ?5 (SET sees the row's old values).
	qUpdateStream = `UPDATE es_streams SET
	name = COALESCE(?1, name),
	version = COALESCE(?2, version),
	parent = CASE WHEN ?3 THEN NULLIF(?4, '') ELSE parent END,
	current_partition = MAX(current_partition, ?5),
	status = (SELECT p.status FROM es_partitions p
		WHERE p.stream = es_streams.stream AND p.partition = MAX(es_streams.current_partition, ?5)),
	updated_at = ?6
WHERE stream = ?7`

	// The KV merge when partition ?2 ends: set keys are written, tombstoned keys
	// removed, the merged delta rows dropped.
	qMergeKVSet = `INSERT INTO es_kv_store (stream, key, value, partition, updated_at)
SELECT stream, key, value, partition, updated_at FROM es_kv_delta
WHERE stream = ?1 AND partition <= ?2 AND value IS NOT NULL
ON CONFLICT (stream, key) DO UPDATE SET
	value = excluded.value, partition = excluded.partition, updated_at = excluded.updated_at`
	qMergeKVClear = `DELETE FROM es_kv_store WHERE stream = ?1 AND key IN (
	SELECT key FROM es_kv_delta WHERE stream = ?1 AND partition <= ?2 AND value IS NULL)`
	qMergeKVDrop = `DELETE FROM es_kv_delta WHERE stream = ?1 AND partition <= ?2`

	qSetCustomStatus = `UPDATE es_streams SET
	custom_status = ?, custom_status_version = custom_status_version + 1, updated_at = ?
WHERE stream = ?
RETURNING custom_status_version`

	qCustomStatus = `SELECT custom_status, custom_status_version FROM es_streams
WHERE stream = ? AND custom_status_version > ?`

	qTouchStream = `UPDATE es_streams SET updated_at = ? WHERE stream = ?`

	// qKVPut writes a delta entry; a NULL value is a tombstone.
	qKVPut = `INSERT INTO es_kv_delta (stream, key, value, partition, updated_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (stream, key) DO UPDATE SET
	value = excluded.value, partition = excluded.partition, updated_at = excluded.updated_at`
	qKVTombstoneDelta = `UPDATE es_kv_delta SET value = NULL, partition = ?, updated_at = ? WHERE stream = ?`
	qKVTombstoneStore = `INSERT INTO es_kv_delta (stream, key, value, partition, updated_at)
SELECT stream, key, NULL, ?2, ?3 FROM es_kv_store WHERE stream = ?1
ON CONFLICT (stream, key) DO NOTHING`

	qKVDeltaGet = `SELECT value, partition, updated_at FROM es_kv_delta WHERE stream = ? AND key = ?`
	qKVStoreGet = `SELECT value, partition, updated_at FROM es_kv_store WHERE stream = ? AND key = ?`
	qKVDeltaAll = `SELECT key, value, partition, updated_at FROM es_kv_delta WHERE stream = ?`
	qKVStoreAll = `SELECT key, value, partition, updated_at FROM es_kv_store WHERE stream = ?`

	qReadEvents = `SELECT seq, type, data, checksum, created_at FROM es_events
WHERE stream = ? AND partition = ? ORDER BY seq`

	qCurrentPartition = `SELECT current_partition FROM es_streams WHERE stream = ?`

	qPartitions = `SELECT partition, status, output, pinned_version, started_at, completed_at, event_count, bytes
FROM es_partitions WHERE stream = ? ORDER BY partition`

	qStream = `SELECT s.name, s.version, COALESCE(s.parent, ''), s.status, s.current_partition,
	s.custom_status, s.custom_status_version, s.created_at, s.updated_at,
	p.status, p.output, p.pinned_version, p.completed_at
FROM es_streams s
LEFT JOIN es_partitions p ON p.stream = s.stream AND p.partition = s.current_partition
WHERE s.stream = ?`

	qNode     = `SELECT COALESCE(parent, ''), status FROM es_streams WHERE stream = ?`
	qChildren = `SELECT stream FROM es_streams WHERE parent = ? ORDER BY stream`

	qDeleteEvents     = `DELETE FROM es_events WHERE stream = ?`
	qDeletePartitions = `DELETE FROM es_partitions WHERE stream = ?`
	qDeleteKVStore    = `DELETE FROM es_kv_store WHERE stream = ?`
	qDeleteKVDelta    = `DELETE FROM es_kv_delta WHERE stream = ?`
	qDeleteStream     = `DELETE FROM es_streams WHERE stream = ?`

	qPruneEvents    = `DELETE FROM es_events WHERE stream = ? AND partition = ?`
	qPrunePartition = `DELETE FROM es_partitions WHERE stream = ? AND partition = ?`

	qStats = `SELECT s.current_partition, COALESCE(p.event_count, 0), COALESCE(p.bytes, 0)
FROM es_streams s
LEFT JOIN es_partitions p ON p.stream = s.stream AND p.partition = s.current_partition
WHERE s.stream = ?`

	qTotalStreams    = `SELECT COUNT(*) FROM es_streams`
	qTotalPartitions = `SELECT COUNT(*), COALESCE(SUM(event_count), 0) FROM es_partitions`
	qTotalsByStatus  = `SELECT status, COUNT(*) FROM es_streams GROUP BY status`
)
