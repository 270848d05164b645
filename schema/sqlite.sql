-- The inbox tables for SQLite 3.24+ (sqlitestore). Run it as it is for the default table
-- name "inbox"; inbox.SQLiteSchema(table) and (*sqlitestore.Store).CreateSchema return it
-- for another name.
--
-- Keys and consumers are TEXT under SQLite's default BINARY collation: they compare byte
-- for byte ('a', 'a ' and 'A' are three keys). Times are INTEGER microseconds since the
-- Unix epoch, UTC, which no driver converts (read them with
-- datetime(processed_at / 1000000, 'unixepoch')); the store writes them itself.

-- One row per processed message and consumer. The primary key is the only duplicate
-- check: a second insert of a key waits for the database's write lock, which the first
-- delivery's transaction holds until it ends.
CREATE TABLE IF NOT EXISTS "inbox" (
    "consumer"     TEXT    NOT NULL,
    "key"          TEXT    NOT NULL,
    "processed_at" INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    "fingerprint"  BLOB,  -- identifies the first delivery's content
    "output"       BLOB,  -- the messages its handler produced, replayed on a duplicate
    PRIMARY KEY ("consumer", "key")
) WITHOUT ROWID;

-- The purge scans keys by age.
CREATE INDEX IF NOT EXISTS "inbox_processed_at" ON "inbox" ("processed_at");

-- One row per attempt to process a message (Config.MaxAttempts), named by a random
-- token, written before the handler's transaction begins and deleted when the attempt
-- ends. While its attempt runs, its process holds an advisory lock on one byte of the
-- file <database>-inbox-attempts.lock: a row whose byte is free is an attempt whose
-- process died.
CREATE TABLE IF NOT EXISTS "inbox_attempts" (
    "consumer"   TEXT    NOT NULL,
    "key"        TEXT    NOT NULL,
    "attempt"    TEXT    NOT NULL,
    "started_at" INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    PRIMARY KEY ("consumer", "key", "attempt")
) WITHOUT ROWID;

-- Offset mode (Config.Position, Inbox.ProcessOffsets): for a consumer of a log that
-- delivers each partition in order (Kafka), one row per consumer, topic and partition,
-- moved forward in the handler's transaction. A record below next_offset is a duplicate.
-- updated_at is in microseconds since the Unix epoch, as processed_at.
CREATE TABLE IF NOT EXISTS "inbox_offsets" (
    "consumer"      TEXT    NOT NULL,
    "topic"         TEXT    NOT NULL,
    "partition"     INTEGER NOT NULL,
    "next_offset"   INTEGER NOT NULL,              -- the offset after the last processed record
    "leader_epoch"  INTEGER NOT NULL DEFAULT -1,   -- that record's leader epoch; -1: unknown
    "max_timestamp" INTEGER NOT NULL DEFAULT -1,   -- the latest processed record time, Unix ms; -1: unknown
    "topic_id"      BLOB,                          -- the topic's ID, when the client reports it
    "output"        BLOB,                          -- what the last record's handler produced, replayed on its duplicate
    "updated_at"    INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    PRIMARY KEY ("consumer", "topic", "partition")
) WITHOUT ROWID;

-- The version of these tables (ADR 134), one row per version applied, with the oldest
-- version whose code runs on them: inbox.New refuses tables older than its code, and
-- "inbox migrate up" (or CreateSchema) applies what is missing. Keep it in step with
-- the last migration of schema/steps/sqlite.
CREATE TABLE IF NOT EXISTS "inbox_schema" (
    "version"    INTEGER NOT NULL PRIMARY KEY,
    "name"       TEXT    NOT NULL,
    "compatible" INTEGER NOT NULL,  -- the oldest version whose code runs on these tables
    "applied_at" INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
);

INSERT OR IGNORE INTO "inbox_schema" ("version", "name", "compatible") VALUES
    (1, 'inbox', 1), (2, 'offsets', 1), (3, 'schema_version', 1);
