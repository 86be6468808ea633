-- Remembered deduplication ids (Message.DedupID): a message with an id a queue
-- remembers until expires_at (Unix microseconds) is a duplicate. Kept apart from the
-- messages, so an id outlives its message's ack.
CREATE TABLE mq_dedup (
    queue      TEXT    NOT NULL,
    dedup_id   TEXT    NOT NULL,
    expires_at BIGINT  NOT NULL,
    PRIMARY KEY (queue, dedup_id)
);
-- Expired ids are swept in expiry order.
CREATE INDEX mq_dedup_expiry ON mq_dedup (expires_at);
