-- Failure history of a message (Settle, Abandon) and the origin of a dead letter.
ALTER TABLE mq_messages ADD COLUMN last_error TEXT;
ALTER TABLE mq_messages ADD COLUMN first_failed_at INTEGER;
ALTER TABLE mq_messages ADD COLUMN last_failed_at INTEGER;
ALTER TABLE mq_messages ADD COLUMN origin_queue TEXT;
ALTER TABLE mq_messages ADD COLUMN dead_lettered_at INTEGER;

-- A bounded batch takes the oldest messages of its key by id, and Peek pages a key in
-- id order: the key's messages in id order.
DROP INDEX mq_messages_routing;
CREATE INDEX mq_messages_routing ON mq_messages (queue, routing_key, id) WHERE routing_key IS NOT NULL;
-- Peek, Redrive and Purge page or select a queue's messages in id order.
CREATE INDEX mq_messages_queue ON mq_messages (queue, id);
