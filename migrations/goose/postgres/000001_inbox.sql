-- +goose Up
-- Generated from the golang-migrate files by migratetest (go test -update); do not edit.
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

-- +goose Down
-- Drops the inbox tables, and with them every stored key: redeliveries of messages
-- processed before are then processed again.

DROP TABLE IF EXISTS "inbox_attempts";
DROP TABLE IF EXISTS "inbox";
