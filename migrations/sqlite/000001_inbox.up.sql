-- The inbox tables for SQLite 3.35+, as schema/sqlite.sql creates them (table "inbox").
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

-- Started and cleanly ended attempts, written outside the handler's transaction, when
-- Config.MaxAttempts is set: started - ended counts attempts that crashed the process.
CREATE TABLE IF NOT EXISTS "inbox_attempts" (
    "consumer"   TEXT    NOT NULL,
    "key"        TEXT    NOT NULL,
    "started"    INTEGER NOT NULL DEFAULT 1,
    "ended"      INTEGER NOT NULL DEFAULT 0,
    "started_at" INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    PRIMARY KEY ("consumer", "key")
) WITHOUT ROWID;
