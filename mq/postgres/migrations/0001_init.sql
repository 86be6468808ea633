-- Messages. Times are Unix microseconds computed by the application (Options.Now).
-- While a message is locked, visible_at equals locked_until: "eligible" is then just
-- visible_at <= now (plus the routing-key lock), and an expired lock needs no cleanup.
-- Names use the "C" collation: comparisons are bytewise, as in the SQLite backend,
-- which makes RemovePrefix a plain index range scan.
CREATE TABLE mq_messages (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- a sequence: never reused
    queue        TEXT COLLATE "C" NOT NULL,
    routing_key  TEXT COLLATE "C",
    message_key  TEXT COLLATE "C",
    session      TEXT COLLATE "C",
    tag          TEXT COLLATE "C",
    payload      BYTEA  NOT NULL,
    enqueued_at  BIGINT NOT NULL,
    visible_at   BIGINT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    lock_token   UUID,
    locked_until BIGINT
);
-- DequeueBatch scans eligible messages in (visible_at, id) order.
CREATE INDEX mq_messages_ready ON mq_messages (queue, visible_at, id);
-- The messages of one routing key (batch locking, PurgeKey).
CREATE INDEX mq_messages_routing ON mq_messages (queue, routing_key, visible_at) WHERE routing_key IS NOT NULL;
-- Message keys are unique among the pending messages of a queue (Remove).
CREATE UNIQUE INDEX mq_messages_key ON mq_messages (queue, message_key) WHERE message_key IS NOT NULL;
-- Ack, Abandon and Renew find a batch by its token.
CREATE INDEX mq_messages_token ON mq_messages (lock_token) WHERE lock_token IS NOT NULL;
-- CleanupSessions looks for pending messages of a session.
CREATE INDEX mq_messages_session ON mq_messages (queue, session) WHERE session IS NOT NULL;

-- Routing-key state: the key lock (one holder at a time) and the key's attribute.
-- A row exists only while the key is locked or has an attribute.
CREATE TABLE mq_keys (
    queue        TEXT COLLATE "C" NOT NULL,
    routing_key  TEXT COLLATE "C" NOT NULL,
    lock_token   UUID,
    locked_until BIGINT,
    attr         BIGINT,
    PRIMARY KEY (queue, routing_key)
);

-- Session ownership leases.
CREATE TABLE mq_sessions (
    queue            TEXT COLLATE "C" NOT NULL,
    session          TEXT COLLATE "C" NOT NULL,
    owner            TEXT COLLATE "C" NOT NULL,
    locked_until     BIGINT NOT NULL,
    last_activity_at BIGINT NOT NULL,
    PRIMARY KEY (queue, session)
);
CREATE INDEX mq_sessions_owner ON mq_sessions (queue, owner);

-- Every delivery rewrites its message row and every ack deletes it: vacuum the churning
-- tables after 2% of their rows changed instead of PostgreSQL's default 20%.
ALTER TABLE mq_messages SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE mq_keys SET (autovacuum_vacuum_scale_factor = 0.02);
