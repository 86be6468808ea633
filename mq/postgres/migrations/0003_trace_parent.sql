-- The W3C traceparent of the span that produced a message (NULL: none), so that a
-- consumer continues its producer's trace.
ALTER TABLE mq_messages ADD COLUMN trace_parent TEXT;
