-- The limit group of a message (Message.LimitGroup; NULL: none).
ALTER TABLE mq_messages ADD COLUMN limit_group TEXT;
-- Delivery limits (Admin.SetLimit): grp '' is the queue's own limit. tokens is the
-- content of the rate's bucket at refilled_at; per and refilled_at are Unix
-- microseconds. A dequeue reads its queue's rows first: a queue without rows takes
-- the unlimited path.
CREATE TABLE mq_limits (
    queue         TEXT    NOT NULL,
    grp           TEXT    NOT NULL,
    max_in_flight INTEGER NOT NULL,
    rate          INTEGER NOT NULL,
    per           INTEGER NOT NULL,
    tokens        REAL    NOT NULL,
    refilled_at   INTEGER NOT NULL,
    PRIMARY KEY (queue, grp)
) WITHOUT ROWID;
