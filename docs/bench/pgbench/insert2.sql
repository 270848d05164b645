\set id random(0, 4095)
\set r random(1, 1000000000000)
BEGIN;
UPDATE pgb_acct SET n = n + 1 WHERE id = :id \; INSERT INTO pgb_inbox (consumer, key, fingerprint) VALUES ('bench', 'k-' || :client_id || '-' || :r || '-' || :id, NULL);
COMMIT;
