-- Drops the offsets of offset mode: consumers in that mode then take every record the
-- broker delivers for new, until their offsets are stored again.

DROP TABLE IF EXISTS "inbox_offsets";
