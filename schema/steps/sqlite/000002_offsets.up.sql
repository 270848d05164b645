-- The offsets table of offset mode (Config.Position, Inbox.ProcessOffsets), as
-- schema/sqlite.sql creates it (table "inbox_offsets"). The inbox's other tables are
-- unchanged, and an inbox that does not use offset mode does not need this one.

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
