-- Drops the record of the tables' version; the tables are unchanged.

DROP TABLE IF EXISTS "inbox_schema";
