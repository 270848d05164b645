-- The inbox tables for PostgreSQL, as schema/postgres.sql creates them (table "inbox").
-- IF NOT EXISTS lets a database whose tables CreateSchema or schema/postgres.sql made
-- adopt the migrations: this version then changes nothing.

CREATE TABLE IF NOT EXISTS "inbox" (
    consumer     text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    fingerprint  bytea,
    output       bytea,
    PRIMARY KEY (consumer, key)
);

CREATE INDEX IF NOT EXISTS "inbox_processed_at" ON "inbox" (processed_at);

CREATE TABLE IF NOT EXISTS "inbox_attempts" (
    consumer   text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    started    integer NOT NULL DEFAULT 1,
    ended      integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, key)
);
