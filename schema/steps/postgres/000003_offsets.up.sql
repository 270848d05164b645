-- The offsets table of offset mode (Config.Position, Inbox.ProcessOffsets), as
-- schema/postgres.sql creates it (table "inbox_offsets"). The inbox's other tables are
-- unchanged, and an inbox that does not use offset mode does not need this one.

CREATE TABLE IF NOT EXISTS "inbox_offsets" (
    consumer      text COLLATE "C" NOT NULL,
    topic         text COLLATE "C" NOT NULL,
    partition     integer NOT NULL,
    next_offset   bigint NOT NULL,
    leader_epoch  integer NOT NULL DEFAULT -1,
    max_timestamp bigint NOT NULL DEFAULT -1,
    topic_id      bytea,
    output        bytea,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);
