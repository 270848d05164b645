-- Drops the inbox tables, and with them every stored key: redeliveries of messages
-- processed before are then processed again.

DROP TABLE IF EXISTS "inbox_attempts";
DROP TABLE IF EXISTS "inbox";
