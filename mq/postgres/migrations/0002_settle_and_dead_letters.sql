-- Failure history and dead-letter origin (issue 13; see mq.MessageInfo). Times are
-- Unix microseconds, as elsewhere. Adding nullable columns without a default rewrites
-- nothing.
ALTER TABLE mq_messages
    ADD COLUMN last_error       TEXT,
    ADD COLUMN first_failed_at  BIGINT,
    ADD COLUMN last_failed_at   BIGINT,
    ADD COLUMN origin_queue     TEXT COLLATE "C",
    ADD COLUMN dead_lettered_at BIGINT;

-- A bounded batch takes its key's oldest messages in id order, and Peek pages a key's
-- messages by id: the routing-key index is in id order now (PurgeKey and KeyStats use
-- its prefix as before).
DROP INDEX mq_messages_routing;
CREATE INDEX mq_messages_routing ON mq_messages (queue, routing_key, id) WHERE routing_key IS NOT NULL;

-- No (queue, id) index: every delivery and release rewrites its row and would add an
-- entry to it (measured: keyed dequeue+ack about a third slower). Peek of a whole
-- queue walks the primary key or sorts the queue's rows from mq_messages_ready, as the
-- planner estimates is cheaper; Redrive and Purge read them through the latter.
