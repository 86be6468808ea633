#!/usr/bin/env bash
# The row-level ceiling of claiming and acking keyed batches (10 messages per
# routing key) on a PostgreSQL server, without duroq's code (on its tables, from
# its migrations; the go command builds them): pgbench runs each claim
# script with 4 clients, 64 keys per claim, on a fresh table each time, and
# prints messages per second. rewrite.sql claims as mq/postgres does today (every
# message rewritten with the batch's token and lock); keyrow.sql claims by the key
# alone and only reads the messages; keyqueue.sql is a whole cycle where the key row
# is the queue entry and the lock (token, lock and delivered ids on it, the
# messages only read), the ack deleting key rows and messages. See
# docs/performance.md, "Stop 40" and "Stop 41".
# SECONDS_PER_RUN (default 6) and ROWS (default 3,000,000) shorten it.
#
#   DUROQ_POSTGRES_DSN=postgres://postgres@127.0.0.1:5432/test bash bench/pgclaim/run.sh
set -euo pipefail
dsn=${DUROQ_POSTGRES_DSN:?set DUROQ_POSTGRES_DSN}
here=$(cd "$(dirname "$0")" && pwd)
# duroq's own tables, from its migrations (the claims run on the real mq_messages).
migrations=$(cd "$here/../.." && go run ./cmd/duroq migrate sql -backend postgres)
seconds=${SECONDS_PER_RUN:-6}
rows=${ROWS:-3000000} # messages in the table, 10 per key
keys=64
trap 'psql -q -X "$dsn" -c "DROP SCHEMA IF EXISTS duroq_pgclaim CASCADE" >/dev/null 2>&1' EXIT
for script in rewrite keyrow keyqueue rewrite keyrow keyqueue; do
    psql -q -X "$dsn" -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS duroq_pgclaim CASCADE;
CREATE SCHEMA duroq_pgclaim;
SET search_path = duroq_pgclaim;
$migrations
SQL
    psql -q -X "$dsn" -v ON_ERROR_STOP=1 -v rows="$rows" -f "$here/setup.sql" >/dev/null
    tps=$(pgbench -n -c 4 -j 2 -T "$seconds" -D keys="$keys" -f "$here/$script.sql" "$dsn" | awk '/^tps/ {print $3}')
    left=$(psql -X -At "$dsn" -c "SELECT count(*) FROM duroq_pgclaim.ready_keys")
    note=""
    if [ "$left" = 0 ]; then note=" (ran out of messages, so overstated: raise ROWS)"; fi
    awk -v s="$script" -v k="$keys" -v t="$tps" -v n="$note" 'BEGIN { printf "%-8s %d keys of 10 per claim: %7.0f msgs/s (%.1f claims/s)%s\n", s, k, t * k * 10, t, n }'
done
