-- Attempts (Config.MaxAttempts) become one row per delivery, named by a random token,
-- written before the handler's transaction and deleted when the attempt ends, instead of
-- a counter per key (docs/adr/0060). The counters are dropped with the old table: they
-- are transient, and dropping them only forgets the crashes of messages yet to come back.

DROP TABLE IF EXISTS "inbox_attempts";

CREATE TABLE "inbox_attempts" (
    consumer   text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    attempt    text COLLATE "C" NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, key, attempt)
);
