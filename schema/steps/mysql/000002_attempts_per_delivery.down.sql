-- Back to version 1's counter per key; the attempts' rows are dropped.

DROP TABLE IF EXISTS `inbox_attempts`;

CREATE TABLE `inbox_attempts` (
    `consumer`   VARBINARY(255) NOT NULL,
    `key`        VARBINARY(255) NOT NULL,
    `started`    INT NOT NULL DEFAULT 1,
    `ended`      INT NOT NULL DEFAULT 0,
    `started_at` DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (`consumer`, `key`)
) ENGINE=InnoDB;
