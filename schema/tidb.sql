-- The inbox tables for TiDB 8+: schema/mysql.sql without the server-side defaults of
-- processed_at, started_at and updated_at, which TiDB refuses (error 1064 near
-- "UTC_TIMESTAMP(6))"). A MySQLStore with Engine: inbox.MySQLTiDB writes them itself,
-- in UTC; its CreateSchema runs this DDL. Run it as it is for the default table name "inbox".
--
-- Keys and consumers are VARBINARY: they compare byte for byte whatever the server's
-- collation ('a' and 'a ' or 'A' are three keys).

-- One row per processed message and consumer. The primary key is the only duplicate
-- check: a second insert of a key waits on the first transaction's index entry.
CREATE TABLE IF NOT EXISTS `inbox` (
    `consumer`     VARBINARY(255) NOT NULL,
    `key`          VARBINARY(255) NOT NULL,
    `processed_at` DATETIME(6) NOT NULL,
    `fingerprint`  BLOB NULL,      -- identifies the first delivery's content
    `output`       LONGBLOB NULL,  -- the messages its handler produced, replayed on a duplicate
    PRIMARY KEY (`consumer`, `key`),
    INDEX `inbox_processed_at` (`processed_at`)  -- the purge scans keys by age
) ENGINE=InnoDB;

-- One row per attempt to process a message (Config.MaxAttempts), named by a random
-- token, written before the handler's transaction begins and deleted when the attempt
-- ends. While its attempt runs, the row's token names a lock (GET_LOCK) of the
-- attempt's session: a row whose lock is free is an attempt whose process died.
CREATE TABLE IF NOT EXISTS `inbox_attempts` (
    `consumer`   VARBINARY(255) NOT NULL,
    `key`        VARBINARY(255) NOT NULL,
    `attempt`    VARBINARY(64) NOT NULL,
    `started_at` DATETIME(6) NOT NULL,
    PRIMARY KEY (`consumer`, `key`, `attempt`)
) ENGINE=InnoDB;

-- Offset mode (Config.Position, Inbox.ProcessOffsets): for a consumer of a log that
-- delivers each partition in order (Kafka), one row per consumer, topic and partition,
-- moved forward in the handler's transaction. A record below next_offset is a duplicate.
CREATE TABLE IF NOT EXISTS `inbox_offsets` (
    `consumer`      VARBINARY(255) NOT NULL,
    `topic`         VARBINARY(255) NOT NULL,
    `partition`     INT NOT NULL,
    `next_offset`   BIGINT NOT NULL,             -- the offset after the last processed record
    `leader_epoch`  INT NOT NULL DEFAULT -1,     -- that record's leader epoch; -1: unknown
    `max_timestamp` BIGINT NOT NULL DEFAULT -1,  -- the latest processed record time, Unix ms; -1: unknown
    `topic_id`      VARBINARY(16) NULL,          -- the topic's ID, when the client reports it
    `output`        LONGBLOB NULL,               -- what the last record's handler produced, replayed on its duplicate
    `updated_at`    DATETIME(6) NOT NULL,
    PRIMARY KEY (`consumer`, `topic`, `partition`)
) ENGINE=InnoDB;

-- The version of these tables (ADR 134), one row per version applied, with the oldest
-- version whose code runs on them: inbox.New refuses tables older than its code, and
-- "inbox migrate up" (or CreateSchema) applies what is missing. Keep it in step with
-- the last migration of schema/steps/mysql.
CREATE TABLE IF NOT EXISTS `inbox_schema` (
    `version`    INT NOT NULL PRIMARY KEY,
    `name`       VARCHAR(255) NOT NULL,
    `compatible` INT NOT NULL,  -- the oldest version whose code runs on these tables
    `applied_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

INSERT IGNORE INTO `inbox_schema` (`version`, `name`, `compatible`) VALUES
    (1, 'inbox', 1), (2, 'attempts_per_delivery', 2), (3, 'offsets', 2), (4, 'schema_version', 2);
