#!/usr/bin/env bash
# Measures what the table metrics (inboxprom.TableCollector, inboxotel.TableGauges) and the
# consumer-name check cost on an inbox table of 10 million keys, on PostgreSQL and MariaDB:
# it fills a table of the schema's own DDL (4 consumers, keys over 30 days), then times
# each query 3 times (cold, then warm), and drops the tables. Figures: docs/operations.md.
#
#   bash scripts/table-stats-10m.sh            # both databases
#   KEYS=1000000 bash scripts/table-stats-10m.sh postgres
#
# PGURL (default postgres://postgres@127.0.0.1:5432/test) and MYSQL_ARGS (default
# -h127.0.0.1 -uroot test) name the servers. It takes a few minutes per database.
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-10000000}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
read -r -a MYSQL <<<"${MYSQL_ARGS:--h127.0.0.1 -uroot test}"
T=inbox_stats10m
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(postgres mariadb)

postgres() {
  echo "== PostgreSQL, $KEYS keys"
  psql -q "$PGURL" -v ON_ERROR_STOP=1 <<SQL
DROP TABLE IF EXISTS $T, ${T}_attempts;
$(sed "s/\"inbox\"/\"$T\"/g; s/\"inbox_attempts\"/\"${T}_attempts\"/g; s/\"inbox_processed_at\"/\"${T}_processed_at\"/g" schema/postgres.sql)
-- Loaded without its indexes, which are then built as the schema has them: inserting 10 M
-- random keys into the primary key's B-tree takes an hour on a small shared_buffers.
ALTER TABLE $T DROP CONSTRAINT ${T}_pkey;
DROP INDEX ${T}_processed_at;
INSERT INTO $T (consumer, key, processed_at, fingerprint)
  SELECT (ARRAY['billing','notifications','receipts','shipping'])[1 + i % 4],
         md5(i::text), now() - (i % 2592000) * interval '1 second', sha256(i::text::bytea)
  FROM generate_series(1, $KEYS) i;
SET maintenance_work_mem = '256MB';
ALTER TABLE $T ADD PRIMARY KEY (consumer, key);
CREATE INDEX ${T}_processed_at ON $T (processed_at);
VACUUM ANALYZE $T;
SQL
  psql -q "$PGURL" -c "SELECT pg_size_pretty(pg_total_relation_size('$T')) AS table_and_indexes"
  for run in 1 2 3; do
    psql -q "$PGURL" <<SQL
\timing on
\echo stats (keys, oldest per consumer): run $run
SELECT consumer, count(*), min(processed_at) FROM $T GROUP BY consumer ORDER BY consumer;
\echo consumer-name check (ConsumerNeighbours): run $run
(SELECT consumer FROM $T WHERE consumer = 'billing-v2' LIMIT 1)
  UNION ALL (SELECT consumer FROM $T WHERE consumer < 'billing-v2' ORDER BY consumer DESC LIMIT 1)
  UNION ALL (SELECT consumer FROM $T WHERE consumer > 'billing-v2' ORDER BY consumer LIMIT 1);
SQL
  done
  psql -q "$PGURL" -c "EXPLAIN (ANALYZE, COSTS OFF) SELECT consumer, count(*), min(processed_at) FROM $T GROUP BY consumer"
  psql -q "$PGURL" -c "EXPLAIN (ANALYZE, COSTS OFF) (SELECT consumer FROM $T WHERE consumer = 'billing-v2' LIMIT 1) UNION ALL (SELECT consumer FROM $T WHERE consumer < 'billing-v2' ORDER BY consumer DESC LIMIT 1) UNION ALL (SELECT consumer FROM $T WHERE consumer > 'billing-v2' ORDER BY consumer LIMIT 1)"
  psql -q "$PGURL" -c "DROP TABLE $T, ${T}_attempts"
}

mariadb() {
  echo "== MariaDB, $KEYS keys"
  mysql "${MYSQL[@]}" <<SQL
DROP TABLE IF EXISTS \`$T\`, \`${T}_attempts\`;
$(sed "s/\`inbox\`/\`$T\`/g; s/\`inbox_attempts\`/\`${T}_attempts\`/g; s/\`inbox_processed_at\`/\`${T}_processed_at\`/g" schema/mysql.sql)
-- Loaded in primary-key order (InnoDB clusters rows by it), without the secondary index,
-- which is then built as the schema has it.
ALTER TABLE \`$T\` DROP INDEX \`${T}_processed_at\`;
SET SESSION unique_checks = 0;
INSERT INTO \`$T\` (\`consumer\`, \`key\`, \`processed_at\`, \`fingerprint\`)
  SELECT ELT(1 + seq % 4, 'billing', 'notifications', 'receipts', 'shipping') AS c,
         MD5(seq) AS k, UTC_TIMESTAMP(6) - INTERVAL (seq % 2592000) SECOND, UNHEX(SHA2(seq, 256))
  FROM seq_1_to_$KEYS ORDER BY c, k;
ALTER TABLE \`$T\` ADD INDEX \`${T}_processed_at\` (\`processed_at\`);
ANALYZE TABLE \`$T\`;
SQL
  mysql "${MYSQL[@]}" -e "SELECT ROUND((data_length + index_length) / 1048576) AS table_and_indexes_mib FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '$T'"
  for run in 1 2 3; do
    echo "stats (keys, oldest per consumer): run $run"
    mysql "${MYSQL[@]}" -vvv -e "SELECT \`consumer\`, COUNT(*), MIN(\`processed_at\`) FROM \`$T\` GROUP BY \`consumer\` ORDER BY \`consumer\`" | grep -E "rows? in set"
    echo "consumer-name check (ConsumerNeighbours, three statements): run $run"
    mysql "${MYSQL[@]}" -vvv -e "SELECT \`consumer\` FROM \`$T\` WHERE \`consumer\` = 'billing-v2' LIMIT 1; SELECT \`consumer\` FROM \`$T\` WHERE \`consumer\` < 'billing-v2' ORDER BY \`consumer\` DESC LIMIT 1; SELECT \`consumer\` FROM \`$T\` WHERE \`consumer\` > 'billing-v2' ORDER BY \`consumer\` LIMIT 1" | grep -E "rows? in set|Empty set"
  done
  mysql "${MYSQL[@]}" -e "EXPLAIN SELECT \`consumer\`, COUNT(*), MIN(\`processed_at\`) FROM \`$T\` GROUP BY \`consumer\`; EXPLAIN SELECT \`consumer\` FROM \`$T\` WHERE \`consumer\` < 'billing-v2' ORDER BY \`consumer\` DESC LIMIT 1"
  mysql "${MYSQL[@]}" -e "DROP TABLE \`$T\`, \`${T}_attempts\`"
}

for db in "${which[@]}"; do "$db"; done
