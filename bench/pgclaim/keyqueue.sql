-- Keyed batches claimed and acked with the key row as both the queue entry and the
-- lock, the messages only read at the claim: the claim takes the first ready keys
-- (FOR UPDATE SKIP LOCKED: no advisory lock), reads each key's messages and writes
-- the batch's token, lock and delivered ids on the key row alone; in a transaction
-- of its own the ack finds the key rows by token, deletes them where the batch was
-- the key's last messages (a probe for any other; a key with more would be
-- unlocked and its head read again instead) and deletes the delivered messages.
BEGIN;
WITH k AS MATERIALIZED (
    SELECT routing_key FROM duroq_pgclaim.ready_keys
    WHERE queue = 'q' AND visible_at <= 1000000000
    ORDER BY visible_at, routing_key LIMIT :keys FOR UPDATE SKIP LOCKED),
b AS (
    SELECT k.routing_key, array_agg(m.id ORDER BY m.id) AS ids, sum(octet_length(m.payload)) AS bytes
    FROM k CROSS JOIN LATERAL (
        SELECT m.id, m.payload FROM duroq_pgclaim.mq_messages m
        WHERE m.queue = 'q' AND m.routing_key = k.routing_key AND m.visible_at <= 1000000000
        ORDER BY m.id LIMIT 100) m
    GROUP BY k.routing_key),
u AS (
    UPDATE duroq_pgclaim.ready_keys r SET lock_token = gen_random_uuid(), locked_until = 2000000000,
        visible_at = 2000000000, delivered = b.ids
    FROM b WHERE r.queue = 'q' AND r.routing_key = b.routing_key RETURNING r.lock_token)
SELECT coalesce(array_agg(lock_token), '{}') AS tokens FROM u \gset
COMMIT;
WITH k AS (
    DELETE FROM duroq_pgclaim.ready_keys r
    WHERE r.lock_token = ANY(':tokens'::uuid[]) AND NOT EXISTS (
        SELECT 1 FROM duroq_pgclaim.mq_messages o
        WHERE o.queue = r.queue AND o.routing_key = r.routing_key AND o.id <> ALL(r.delivered))
    RETURNING r.delivered)
DELETE FROM duroq_pgclaim.mq_messages m USING k WHERE m.id = ANY(k.delivered);
