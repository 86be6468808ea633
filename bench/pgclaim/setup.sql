-- Run after duroq's own migrations (run.sh applies `duroq migrate sql -backend
-- postgres` in the schema duroq_pgclaim): fills mq_messages with :rows ready
-- messages of 128 bytes, 10 per routing key, and creates a table of the keys with
-- ready messages (one row per key, in the order of their first message), which is
-- what a claim would scan if keys were queued themselves.
SET client_min_messages = warning;
SET search_path = duroq_pgclaim;
CREATE TABLE ready_keys (
    queue        TEXT COLLATE "C" NOT NULL,
    routing_key  TEXT COLLATE "C" NOT NULL,
    visible_at   BIGINT NOT NULL,
    -- keyqueue.sql's lock and batch, on the key row alone
    lock_token   UUID,
    locked_until BIGINT,
    delivered    BIGINT[],
    PRIMARY KEY (queue, routing_key)
);
CREATE INDEX ready_keys_order ON ready_keys (queue, visible_at, routing_key);
CREATE INDEX ready_keys_token ON ready_keys (lock_token) WHERE lock_token IS NOT NULL;
INSERT INTO mq_messages (queue, routing_key, payload, enqueued_at, visible_at)
SELECT 'q', 'k' || (g / 10), convert_to(repeat('x', 128), 'UTF8'), g, g FROM generate_series(0, :rows - 1) g;
INSERT INTO ready_keys (queue, routing_key, visible_at) SELECT 'q', 'k' || k, k * 10 FROM generate_series(0, :rows / 10 - 1) k;
VACUUM ANALYZE mq_messages;
VACUUM ANALYZE ready_keys;
