-- Attempts (Config.MaxAttempts) become one row per delivery, named by a random token,
-- written before the handler's transaction and deleted when the attempt ends, instead of
-- a counter per key (docs/adr/0060). The counters are dropped with the old table: they
-- are transient, and dropping them only forgets the crashes of messages yet to come back.

DROP TABLE IF EXISTS `inbox_attempts`;

CREATE TABLE `inbox_attempts` (
    `consumer`   VARBINARY(255) NOT NULL,
    `key`        VARBINARY(255) NOT NULL,
    `attempt`    VARBINARY(64) NOT NULL,
    `started_at` DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (`consumer`, `key`, `attempt`)
) ENGINE=InnoDB;
