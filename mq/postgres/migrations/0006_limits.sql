-- The limit group of a message (Message.LimitGroup; NULL: none).
ALTER TABLE mq_messages ADD COLUMN limit_group TEXT COLLATE "C";
-- Delivery limits (Admin.SetLimit): grp '' is the queue's own limit. tokens is the
-- content of the rate's bucket at refilled_at; per and refilled_at are Unix
-- microseconds. A dequeue reads its queue's rows first, FOR UPDATE when there are
-- any: the limited dequeues of a queue take turns, so each counts the batches the
-- others took; a queue without rows takes the unlimited path.
CREATE TABLE mq_limits (
    queue         TEXT COLLATE "C" NOT NULL,
    grp           TEXT COLLATE "C" NOT NULL,
    max_in_flight INTEGER NOT NULL,
    rate          INTEGER NOT NULL,
    per           BIGINT NOT NULL,
    tokens        DOUBLE PRECISION NOT NULL,
    refilled_at   BIGINT NOT NULL,
    PRIMARY KEY (queue, grp)
);
