-- The inbox records the version of its tables (ADR 134): one row per version applied,
-- with the oldest version whose code runs on tables at that version. inbox.New refuses
-- tables older than its code, naming "inbox migrate up". Versions 1 and 2 are recorded
-- here for the tables they made; every later migration inserts its own row.

CREATE TABLE IF NOT EXISTS "inbox_schema" (
    "version"    INTEGER NOT NULL PRIMARY KEY,
    "name"       TEXT    NOT NULL,
    "compatible" INTEGER NOT NULL,  -- the oldest version whose code runs on these tables
    "applied_at" INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
);

INSERT OR IGNORE INTO "inbox_schema" ("version", "name", "compatible") VALUES
    (1, 'inbox', 1), (2, 'offsets', 1), (3, 'schema_version', 1);
