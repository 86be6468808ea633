-- Messages. Times are Unix microseconds computed by the application.
-- While a message is locked, visible_at equals locked_until: "eligible" is then just
-- visible_at <= now (plus the routing-key lock), and an expired lock needs no cleanup.
CREATE TABLE mq_messages (
    id           INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: delivery ids stay unique
    queue        TEXT    NOT NULL,
    routing_key  TEXT,
    message_key  TEXT,
    session      TEXT,
    tag          TEXT,
    payload      BLOB    NOT NULL,
    enqueued_at  INTEGER NOT NULL,
    visible_at   INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    lock_token   TEXT,
    locked_until INTEGER
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
    queue        TEXT NOT NULL,
    routing_key  TEXT NOT NULL,
    lock_token   TEXT,
    locked_until INTEGER,
    attr         INTEGER,
    PRIMARY KEY (queue, routing_key)
) WITHOUT ROWID;

-- Session ownership leases.
CREATE TABLE mq_sessions (
    queue            TEXT    NOT NULL,
    session          TEXT    NOT NULL,
    owner            TEXT    NOT NULL,
    locked_until     INTEGER NOT NULL,
    last_activity_at INTEGER NOT NULL,
    PRIMARY KEY (queue, session)
) WITHOUT ROWID;
