-- The inbox tables for PostgreSQL. Run it as it is for the default table name "inbox";
-- inbox.PostgresSchema(table) and (*PostgresStore).CreateSchema return it for another name.

-- One row per processed message and consumer. The primary key is the only duplicate
-- check: a second insert of a key waits on the first transaction's index entry.
CREATE TABLE IF NOT EXISTS "inbox" (
    consumer     text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    fingerprint  bytea,   -- identifies the first delivery's content
    output       bytea,   -- the messages its handler produced, replayed on a duplicate
    PRIMARY KEY (consumer, key)
);

-- The purge scans keys by age.
CREATE INDEX IF NOT EXISTS "inbox_processed_at" ON "inbox" (processed_at);

-- One row per attempt to process a message (Config.MaxAttempts), named by a random
-- token, written before the handler's transaction begins and deleted when the attempt
-- ends. While its attempt runs, the row's token is held as a session advisory lock: a
-- row whose lock is free is an attempt whose process died.
CREATE TABLE IF NOT EXISTS "inbox_attempts" (
    consumer   text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    attempt    text COLLATE "C" NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, key, attempt)
);

-- Offset mode (Config.Position, Inbox.ProcessOffsets): for a consumer of a log that
-- delivers each partition in order (Kafka), one row per consumer, topic and partition,
-- moved forward in the handler's transaction. A record below next_offset is a duplicate.
CREATE TABLE IF NOT EXISTS "inbox_offsets" (
    consumer      text COLLATE "C" NOT NULL,
    topic         text COLLATE "C" NOT NULL,
    partition     integer NOT NULL,
    next_offset   bigint NOT NULL,              -- the offset after the last processed record
    leader_epoch  integer NOT NULL DEFAULT -1,  -- that record's leader epoch; -1: unknown
    max_timestamp bigint NOT NULL DEFAULT -1,   -- the latest processed record time, Unix ms; -1: unknown
    topic_id      bytea,                        -- the topic's ID, when the client reports it
    output        bytea,                        -- what the last record's handler produced, replayed on its duplicate
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);

-- The version of these tables (ADR 134), one row per version applied, with the oldest
-- version whose code runs on them: inbox.New refuses tables older than its code, and
-- "inbox migrate up" (or CreateSchema) applies what is missing. Keep it in step with
-- the last migration of schema/steps/postgres.
CREATE TABLE IF NOT EXISTS "inbox_schema" (
    version    integer NOT NULL PRIMARY KEY,
    name       text NOT NULL,
    compatible integer NOT NULL,  -- the oldest version whose code runs on these tables
    applied_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO "inbox_schema" (version, name, compatible) VALUES
    (1, 'inbox', 1), (2, 'attempts_per_delivery', 2), (3, 'offsets', 2), (4, 'schema_version', 2)
    ON CONFLICT (version) DO NOTHING;
