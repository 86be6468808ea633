-- A table shaped like mq_messages (its hot columns and indexes), filled with
-- :rows ready messages of 128 bytes, 10 per routing key, and a table of the keys
-- with ready messages (one row per key, in the order of their first message):
-- what a claim would scan if keys were queued themselves.
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS duroq_pgclaim CASCADE;
CREATE SCHEMA duroq_pgclaim;
SET search_path = duroq_pgclaim;
CREATE TABLE msgs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        TEXT COLLATE "C" NOT NULL,
    routing_key  TEXT COLLATE "C",
    payload      BYTEA NOT NULL,
    visible_at   BIGINT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    lock_token   UUID,
    locked_until BIGINT
);
CREATE INDEX msgs_ready ON msgs (queue, visible_at, id);
CREATE INDEX msgs_routing ON msgs (queue, routing_key, id) WHERE routing_key IS NOT NULL;
CREATE INDEX msgs_token ON msgs (lock_token) WHERE lock_token IS NOT NULL;
CREATE TABLE ready_keys (
    queue       TEXT COLLATE "C" NOT NULL,
    routing_key TEXT COLLATE "C" NOT NULL,
    visible_at  BIGINT NOT NULL,
    PRIMARY KEY (queue, routing_key)
);
CREATE INDEX ready_keys_order ON ready_keys (queue, visible_at, routing_key);
INSERT INTO msgs (queue, routing_key, payload, visible_at)
SELECT 'q', 'k' || (g / 10), convert_to(repeat('x', 128), 'UTF8'), g FROM generate_series(0, :rows - 1) g;
INSERT INTO ready_keys SELECT 'q', 'k' || k, k * 10 FROM generate_series(0, :rows / 10 - 1) k;
VACUUM ANALYZE msgs;
VACUUM ANALYZE ready_keys;
