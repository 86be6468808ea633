-- The paused queues (Admin.Pause): a row stops the delivery of its queue's messages
-- until Resume deletes it. A queue needs no message to be paused. The dequeue
-- statements probe this table's primary key once (an InitPlan), not per message.
CREATE TABLE mq_paused (
    queue TEXT COLLATE "C" PRIMARY KEY
);
