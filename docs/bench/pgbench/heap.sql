\set id random(0, 4095)
\set r random(1, 1000000000000)
BEGIN ISOLATION LEVEL READ COMMITTED \; INSERT INTO pgb_heap VALUES ('bench', 'k-' || :r);
UPDATE pgb_acct SET n = n + 1 WHERE id = :id;
COMMIT;
