-- The inbox tables for MySQL 8+ and MariaDB 10.11+, as schema/mysql.sql creates them
-- (table "inbox"). IF NOT EXISTS lets a database whose tables CreateSchema or
-- schema/mysql.sql made adopt the migrations: this version then changes nothing.

CREATE TABLE IF NOT EXISTS `inbox` (
    `consumer`     VARBINARY(255) NOT NULL,
    `key`          VARBINARY(255) NOT NULL,
    `processed_at` DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    `fingerprint`  BLOB NULL,
    `output`       LONGBLOB NULL,
    PRIMARY KEY (`consumer`, `key`),
    INDEX `inbox_processed_at` (`processed_at`)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS `inbox_attempts` (
    `consumer`   VARBINARY(255) NOT NULL,
    `key`        VARBINARY(255) NOT NULL,
    `started`    INT NOT NULL DEFAULT 1,
    `ended`      INT NOT NULL DEFAULT 0,
    `started_at` DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (`consumer`, `key`)
) ENGINE=InnoDB;
