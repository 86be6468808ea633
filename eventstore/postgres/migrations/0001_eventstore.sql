-- Migration line "eventstore", version 1: streams, partitions, events and KV state.
-- The same data model as eventstore/sqlite. Every timestamp is Unix microseconds
-- computed in Go (BIGINT). Statuses are opaque strings. Identifiers and keys use the
-- "C" collation: byte order, which is the order of Go's string comparison, so lists
-- come out in the same id order as every other backend, whatever the database's
-- default collation.

-- One row per stream. status mirrors the status of the current partition so that
-- streams can be listed by status through an index. The row is also the stream's
-- lock: every write that touches a stream's partitions or KV state locks it first
-- (Append right after inserting its events), so writers of one stream never lock in
-- opposite orders.
CREATE TABLE es_streams (
    stream                TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name                  TEXT   NOT NULL DEFAULT '',
    version               TEXT   NOT NULL DEFAULT '',
    parent                TEXT COLLATE "C",                 -- NULL for a root stream
    status                TEXT COLLATE "C" NOT NULL,
    current_partition     BIGINT NOT NULL,
    custom_status         TEXT,                             -- NULL when never set or cleared
    custom_status_version BIGINT NOT NULL DEFAULT 0,
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL
);
-- Children of a stream (cascading delete, listing) and listing by status; stream
-- is part of each key so the lists come out in id order without a sort.
CREATE INDEX es_streams_parent ON es_streams (parent, stream) WHERE parent IS NOT NULL;
CREATE INDEX es_streams_status ON es_streams (status, stream);

-- One row per partition. event_count and bytes are kept by Append with an upsert
-- (event_count = event_count + n), so stats never scan events.
CREATE TABLE es_partitions (
    stream         TEXT COLLATE "C" NOT NULL,
    partition      BIGINT NOT NULL,
    status         TEXT   NOT NULL,
    output         TEXT,
    pinned_version TEXT,
    started_at     BIGINT NOT NULL,
    completed_at   BIGINT,                                  -- set by a status that ends the partition
    event_count    BIGINT NOT NULL DEFAULT 0,
    bytes          BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, partition)
);

-- The log. The primary key rejects a duplicate sequence number (exactly one of
-- several concurrent appenders wins each number) and serves a partition's read as
-- one ordered index range scan. checksum is eventstore.Checksum(seq, type, data), a
-- uint32 held in a BIGINT.
CREATE TABLE es_events (
    stream     TEXT COLLATE "C" NOT NULL,
    partition  BIGINT NOT NULL,
    seq        BIGINT NOT NULL,
    type       TEXT   NOT NULL,
    data       BYTEA  NOT NULL,
    checksum   BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (stream, partition, seq)
);

-- KV state as of the end of the last ended partition.
CREATE TABLE es_kv_store (
    stream     TEXT COLLATE "C" NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    value      TEXT   NOT NULL,
    partition  BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (stream, key)
);

-- KV mutations since then; a NULL value is a tombstone that hides the stored key.
CREATE TABLE es_kv_delta (
    stream     TEXT COLLATE "C" NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    value      TEXT,
    partition  BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (stream, key)
);
