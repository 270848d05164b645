\set id random(0, 4095)
BEGIN;
UPDATE pgb_acct SET n = n + 1 WHERE id = :id;
COMMIT;
