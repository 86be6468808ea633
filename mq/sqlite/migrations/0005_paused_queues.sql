-- The paused queues (Admin.Pause): a row stops the delivery of its queue's messages
-- until Resume deletes it. A queue needs no message to be paused. The dequeue scan
-- probes this table's primary key once per statement, not per message.
CREATE TABLE mq_paused (
    queue TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;
