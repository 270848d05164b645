-- The inbox tables for SQLite 3.24+, as schema/sqlite.sql creates them (table "inbox").
-- IF NOT EXISTS lets a database whose tables CreateSchema or schema/sqlite.sql made
-- adopt the migrations: this version then changes nothing.

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
