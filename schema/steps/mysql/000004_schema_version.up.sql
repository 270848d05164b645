-- The inbox records the version of its tables (ADR 134): one row per version applied,
-- with the oldest version whose code runs on tables at that version. inbox.New refuses
-- tables older than its code, naming "inbox migrate up". Versions 1 to 3 are recorded
-- here for the tables they made; every later migration inserts its own row.

CREATE TABLE IF NOT EXISTS `inbox_schema` (
    `version`    INT NOT NULL PRIMARY KEY,
    `name`       VARCHAR(255) NOT NULL,
    `compatible` INT NOT NULL,  -- the oldest version whose code runs on these tables
    `applied_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

INSERT IGNORE INTO `inbox_schema` (`version`, `name`, `compatible`) VALUES
    (1, 'inbox', 1), (2, 'attempts_per_delivery', 2), (3, 'offsets', 2), (4, 'schema_version', 2);
