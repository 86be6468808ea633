-- Keyed batches claimed as mq/postgres claims them: the keys are taken (here from
-- ready_keys), then every message of each key is rewritten with the batch's
-- token, its lock and a visible_at past the lock (indexed columns: no HOT
-- update); in a transaction of its own, the ack deletes the messages by token.
BEGIN;
WITH k AS (
    DELETE FROM duroq_pgclaim.ready_keys WHERE (queue, routing_key) IN (
        SELECT queue, routing_key FROM duroq_pgclaim.ready_keys WHERE queue = 'q'
        ORDER BY visible_at, routing_key LIMIT :keys FOR UPDATE SKIP LOCKED)
    RETURNING routing_key, gen_random_uuid() AS token),
u AS (
    UPDATE duroq_pgclaim.mq_messages m SET lock_token = k.token, locked_until = 2000000000,
        visible_at = 2000000000, attempts = m.attempts + 1
    FROM k WHERE m.queue = 'q' AND m.routing_key = k.routing_key RETURNING m.lock_token)
SELECT coalesce(array_agg(DISTINCT lock_token), '{}') AS tokens FROM u \gset
COMMIT;
DELETE FROM duroq_pgclaim.mq_messages WHERE lock_token = ANY(':tokens'::uuid[]);
