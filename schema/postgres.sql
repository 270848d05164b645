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

-- Started and cleanly ended attempts, written outside the handler's transaction, when
-- Config.MaxAttempts is set: started - ended counts attempts that crashed the process.
CREATE TABLE IF NOT EXISTS "inbox_attempts" (
    consumer   text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    started    integer NOT NULL DEFAULT 1,
    ended      integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, key)
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
