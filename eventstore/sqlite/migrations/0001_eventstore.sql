-- Migration line "eventstore", version 1: streams, partitions, events and KV state.
-- Every timestamp is Unix microseconds computed in Go. Statuses are opaque strings.

-- One row per stream. status mirrors the status of the current partition so that
-- streams can be listed by status through an index.
CREATE TABLE es_streams (
    stream                TEXT    NOT NULL PRIMARY KEY,
    name                  TEXT    NOT NULL DEFAULT '',
    version               TEXT    NOT NULL DEFAULT '',
    parent                TEXT,                         -- NULL for a root stream
    status                TEXT    NOT NULL,
    current_partition     INTEGER NOT NULL,
    custom_status         TEXT,                         -- NULL when never set or cleared
    custom_status_version INTEGER NOT NULL DEFAULT 0,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL
);
-- Children of a stream (cascading delete, listing) and listing by status; stream
-- is part of each key so the lists come out in id order without a sort.
CREATE INDEX es_streams_parent ON es_streams (parent, stream) WHERE parent IS NOT NULL;
CREATE INDEX es_streams_status ON es_streams (status, stream);

-- One row per partition. event_count and bytes are kept by Append, so stats never
-- scan events.
CREATE TABLE es_partitions (
    stream         TEXT    NOT NULL,
    partition      INTEGER NOT NULL,
    status         TEXT    NOT NULL,
    output         TEXT,
    pinned_version TEXT,
    started_at     INTEGER NOT NULL,
    completed_at   INTEGER,                             -- set by a status that ends the partition
    event_count    INTEGER NOT NULL DEFAULT 0,
    bytes          INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, partition)
);

-- The log. The primary key rejects a duplicate sequence number and clusters a
-- partition's events in sequence order, so a read is one range scan. checksum is
-- eventstore.Checksum(seq, type, data).
CREATE TABLE es_events (
    stream     TEXT    NOT NULL,
    partition  INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    data       BLOB    NOT NULL,
    checksum   INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (stream, partition, seq)
) WITHOUT ROWID;

-- KV state as of the end of the last ended partition.
CREATE TABLE es_kv_store (
    stream     TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    partition  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (stream, key)
) WITHOUT ROWID;

-- KV mutations since then; a NULL value is a tombstone that hides the stored key.
CREATE TABLE es_kv_delta (
    stream     TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      TEXT,
    partition  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (stream, key)
) WITHOUT ROWID;
