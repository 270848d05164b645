-- Back to version 1's counter per key; the attempts' rows are dropped.

DROP TABLE IF EXISTS "inbox_attempts";

CREATE TABLE "inbox_attempts" (
    consumer   text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    started    integer NOT NULL DEFAULT 1,
    ended      integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, key)
);
