-- The offsets table of offset mode (Config.Position, Inbox.ProcessOffsets), as
-- schema/mysql.sql creates it (table "inbox_offsets"). The inbox's other tables are
-- unchanged, and an inbox that does not use offset mode does not need this one.

CREATE TABLE IF NOT EXISTS `inbox_offsets` (
    `consumer`      VARBINARY(255) NOT NULL,
    `topic`         VARBINARY(255) NOT NULL,
    `partition`     INT NOT NULL,
    `next_offset`   BIGINT NOT NULL,
    `leader_epoch`  INT NOT NULL DEFAULT -1,
    `max_timestamp` BIGINT NOT NULL DEFAULT -1,
    `topic_id`      VARBINARY(16) NULL,
    `output`        LONGBLOB NULL,
    `updated_at`    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (`consumer`, `topic`, `partition`)
) ENGINE=InnoDB;
