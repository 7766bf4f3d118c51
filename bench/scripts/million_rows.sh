#!/usr/bin/env bash
# Times the operator's reads against a big database (issue 39, "At a million rows").
#
# Seeds a fresh database with N ledger rows by bulk SQL (no HTTP): half of them `routed`, each
# with a queued run, a pending dispatch to the pull target `claim` and a held entity lock; the
# other half `entity_locked` deliveries about the same entities. Then starts the daemon on it
# (examples/switchyard.toml, its `triage` workflow and `claim` target) and prints the median of
# a few timed requests of each: /v1/intake?entity=..., ?outcome=entity_locked,
# ?outcome=entity_locked&since=..., /readyz (with detail), /metrics, /v1/locks, /v1/runs?status=queued.
#
# Usage: bench/scripts/million_rows.sh [N] [sqlite|postgres]   (default 1000000 sqlite)
# Needs: a built daemon ($SWITCHYARD, default target/release/switchyard), sqlite3 or psql
# (PostgreSQL: the database switchyard_million on $PG_SERVER, default
# postgres://postgres@127.0.0.1, created if missing and emptied),
# curl, python3. Work files go to $WORK (default a temporary directory).
set -euo pipefail

N=${1:-1000000}
BACKEND=${2:-sqlite}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SWITCHYARD=${SWITCHYARD:-$ROOT/target/release/switchyard}
PG_SERVER=${PG_SERVER:-postgres://postgres@127.0.0.1}
PG_URL=$PG_SERVER/switchyard_million
WORK=${WORK:-$(mktemp -d)}
PORT=${PORT:-18439}
TOKEN=million-rows-bench-token-0123456789
REPEAT=${REPEAT:-5}
export SWITCHYARD_API_TOKEN=$TOKEN

case $BACKEND in
sqlite) URL="sqlite://$WORK/million.db" ; rm -f "$WORK"/million.db* ;;
postgres) URL=$PG_URL ;;
*) echo "backend: sqlite or postgres" >&2; exit 2 ;;
esac

sed -e "s#^url = .*#url = \"$URL\"#" -e "s#^listen = .*#listen = \"127.0.0.1:$PORT\"#" \
    "$ROOT/examples/switchyard.toml" > "$WORK/million.toml"

if [ "$BACKEND" = postgres ]; then
    psql -q "$PG_SERVER/postgres" -c "DROP DATABASE IF EXISTS switchyard_million" \
        -c "CREATE DATABASE switchyard_million"
fi
"$SWITCHYARD" migrate --config "$WORK/million.toml" > "$WORK/migrate.log" 2>&1

# Now, in ms; rows are spread over the last N/10 ms (ten a millisecond), ids UUIDv7-shaped.
NOW=$(python3 -c 'import time; print(int(time.time()*1000))')
BASE=$((NOW - N / 10 - 1000))
HALF=$((N / 2))

if [ "$BACKEND" = sqlite ]; then
    SEED_START=$(date +%s)
    sqlite3 "$WORK/million.db" <<SQL
PRAGMA journal_mode = WAL;
PRAGMA synchronous = OFF;
BEGIN;
CREATE TEMP TABLE seq AS WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < $N) SELECT n, $BASE + n / 10 AS ms FROM s;
INSERT INTO intake (id, source, delivery_id, outcome, detail, channel, event_type, tenant_id,
    target_entity_id, payload, run_id, workflow_id, held_by_run_id, config_revision,
    received_at, decided_at, scope)
SELECT printf('%08x-%04x-7000-8000-%012x', ms >> 16, ms & 65535, n), 'api', 'bench-' || n,
    CASE WHEN n % 2 = 0 THEN 'routed' ELSE 'entity_locked' END, NULL, 'webhook',
    'ticket.created', 'acme', 'E-' || (n / 2), '{"ticket":{"id":"E-' || (n / 2) || '"}}',
    CASE WHEN n % 2 = 0 THEN printf('%08x-%04x-7000-9000-%012x', ms >> 16, ms & 65535, n) END,
    'triage',
    CASE WHEN n % 2 = 1 THEN printf('%08x-%04x-7000-9000-%012x', ms >> 16, ms & 65535, n - 1) END,
    'bench', ms, ms, 'acme'
FROM seq;
INSERT INTO runs (id, tenant_id, workflow_id, target_entity_id, intake_id, status, fencing_token,
    lock_ttl_ms, created_at, updated_at)
SELECT printf('%08x-%04x-7000-9000-%012x', ms >> 16, ms & 65535, n), 'acme', 'triage',
    'E-' || (n / 2), printf('%08x-%04x-7000-8000-%012x', ms >> 16, ms & 65535, n), 'queued', 1,
    600000, ms, ms
FROM seq WHERE n % 2 = 0;
INSERT INTO dispatches (id, run_id, tenant_id, workflow_id, target, status, attempts, series,
    due_at, created_at, updated_at)
SELECT printf('%08x-%04x-7000-a000-%012x', ms >> 16, ms & 65535, n),
    printf('%08x-%04x-7000-9000-%012x', ms >> 16, ms & 65535, n), 'acme', 'triage', 'claim',
    'pending', 0, 0, ms, ms, ms
FROM seq WHERE n % 2 = 0;
INSERT INTO entity_locks (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at)
SELECT 'acme', 'E-' || (n / 2), printf('%08x-%04x-7000-9000-%012x', ms >> 16, ms & 65535, n), 1,
    $NOW + 86400000, ms
FROM seq WHERE n % 2 = 0;
COMMIT;
SQL
    echo "seeded $N ledger rows, $HALF runs, dispatches and locks in $(( $(date +%s) - SEED_START )) s; $(du -h "$WORK/million.db" | cut -f1)"
else
    SEED_START=$(date +%s)
    psql -q "$PG_URL" <<SQL
SET synchronous_commit = off;
CREATE TEMP TABLE seq AS SELECT n, $BASE + n / 10 AS ms FROM generate_series(0, $N - 1) AS n;
CREATE FUNCTION pg_temp.uid(ms bigint, mid text, n bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
  \$\$ SELECT lpad(to_hex(ms >> 16), 8, '0') || '-' || lpad(to_hex(ms & 65535), 4, '0') || '-7000-' || mid || '-' || lpad(to_hex(n), 12, '0') \$\$;
INSERT INTO intake (id, source, delivery_id, outcome, channel, event_type, tenant_id,
    target_entity_id, payload, run_id, workflow_id, held_by_run_id, config_revision,
    received_at, decided_at, scope)
SELECT pg_temp.uid(ms, '8000', n), 'api', 'bench-' || n,
    CASE WHEN n % 2 = 0 THEN 'routed' ELSE 'entity_locked' END, 'webhook', 'ticket.created',
    'acme', 'E-' || (n / 2), '{"ticket":{"id":"E-' || (n / 2) || '"}}',
    CASE WHEN n % 2 = 0 THEN pg_temp.uid(ms, '9000', n) END, 'triage',
    CASE WHEN n % 2 = 1 THEN pg_temp.uid(ms, '9000', n - 1) END, 'bench', ms, ms, 'acme'
FROM seq;
INSERT INTO runs (id, tenant_id, workflow_id, target_entity_id, intake_id, status, fencing_token,
    lock_ttl_ms, created_at, updated_at)
SELECT pg_temp.uid(ms, '9000', n), 'acme', 'triage', 'E-' || (n / 2), pg_temp.uid(ms, '8000', n),
    'queued', 1, 600000, ms, ms FROM seq WHERE n % 2 = 0;
INSERT INTO dispatches (id, run_id, tenant_id, workflow_id, target, status, attempts, series,
    due_at, created_at, updated_at)
SELECT pg_temp.uid(ms, 'a000', n), pg_temp.uid(ms, '9000', n), 'acme', 'triage', 'claim',
    'pending', 0, 0, ms, ms, ms FROM seq WHERE n % 2 = 0;
INSERT INTO entity_locks (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at)
SELECT 'acme', 'E-' || (n / 2), pg_temp.uid(ms, '9000', n), 1, $NOW + 86400000, ms
FROM seq WHERE n % 2 = 0;
ANALYZE;
SQL
    echo "seeded $N ledger rows, $HALF runs, dispatches and locks in $(( $(date +%s) - SEED_START )) s"
fi

"$SWITCHYARD" serve --config "$WORK/million.toml" > "$WORK/serve.log" 2>&1 &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null && break
    sleep 0.5
done

ENTITY="E-$((HALF / 2))"
SINCE=$(python3 -c "import datetime; print(datetime.datetime.fromtimestamp(($NOW - 60000) / 1000, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'))")
python3 - "$PORT" "$TOKEN" "$REPEAT" "$ENTITY" "$SINCE" <<'PY'
import statistics, sys, time, urllib.request
port, token, repeat, entity, since = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
paths = [
    f"/v1/intake?entity={entity}",
    "/v1/intake?outcome=entity_locked",
    f"/v1/intake?outcome=entity_locked&since={since}",
    "/readyz",
    "/metrics",
    "/v1/locks",
    "/v1/runs?status=queued",
]
for path in paths:
    times = []
    for i in range(repeat):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                         headers={"Authorization": f"Bearer {token}"})
        start = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            body = response.read()
        times.append((time.perf_counter() - start) * 1000)
        # /readyz keeps its pending figures for a second: time fresh reads.
        if path == "/readyz":
            time.sleep(1.1)
    print(f"{path:55} median {statistics.median(times):8.1f} ms  (min {min(times):.1f}, max {max(times):.1f}; {len(body)} bytes)")
PY
