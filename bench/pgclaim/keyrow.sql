-- Keyed batches claimed by their key alone: the keys are taken (here from
-- ready_keys; a key row would hold the lock) and their messages read, not
-- written; in a transaction of its own, the ack deletes the messages by id.
BEGIN;
WITH k AS (
    DELETE FROM duroq_pgclaim.ready_keys WHERE (queue, routing_key) IN (
        SELECT queue, routing_key FROM duroq_pgclaim.ready_keys WHERE queue = 'q'
        ORDER BY visible_at, routing_key LIMIT :keys FOR UPDATE SKIP LOCKED)
    RETURNING routing_key)
SELECT coalesce(array_agg(m.id), '{}') AS ids FROM k JOIN duroq_pgclaim.mq_messages m ON m.queue = 'q' AND m.routing_key = k.routing_key \gset
COMMIT;
DELETE FROM duroq_pgclaim.mq_messages WHERE id = ANY(':ids'::bigint[]);
