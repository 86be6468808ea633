-- Message priorities (Message.Priority): higher is delivered first, 0 is the default.
-- Adding a column with a constant default rewrites nothing.
ALTER TABLE mq_messages ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
-- The dequeue scan takes the messages of a queue with a positive priority first, in
-- eligibility order, then those of priority 0 through mq_messages_ready, then the
-- negative ones. Partial indexes: they hold only the messages that use priorities,
-- so a queue that uses none pays one empty probe of each, and its messages, which
-- these indexes leave out, are written and rewritten at no extra cost. SQLite uses
-- them only for a query whose WHERE repeats their condition literally.
CREATE INDEX mq_messages_urgent ON mq_messages (queue, priority DESC, visible_at, id) WHERE priority > 0;
CREATE INDEX mq_messages_deferred ON mq_messages (queue, priority DESC, visible_at, id) WHERE priority < 0;
