#!/bin/bash
# What the PostgreSQL backend of the daemon's intake writer is doing, sampled: running, waiting
# for the daemon's next message (ClientRead), flushing WAL, extending files. Picks the busiest
# backend connected to a switchyard-bench daemon database (bench_*_daemon) over one second (the
# intake writer's), then reads its pg_stat_activity row SAMPLES times, 5 ms apart, and prints
# the count of each state. BENCHMARKS.md round 32 runs it during a one-round PostgreSQL load.
# Usage: pg_writer_waits.sh [SAMPLES=1000]   (psql as postgres on 127.0.0.1, database test)
set -eu
samples=${1:-1000}
psql_at() { psql -h 127.0.0.1 -U postgres -d test -At "$@"; }
pids=$(psql_at -c "SELECT pid FROM pg_stat_activity WHERE datname LIKE 'bench_%_daemon'")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
declare -A before
for p in $pids; do before[$p]=$(ticks "$p"); done
sleep 1
busiest='' most=-1
for p in $pids; do
    used=$(( $(ticks "$p") - ${before[$p]} ))
    if [ "$used" -gt "$most" ]; then busiest=$p most=$used; fi
done
[ -n "$busiest" ] || { echo "no backend of a bench_*_daemon database"; exit 1; }
echo "busiest backend: pid $busiest, $most clock ticks of CPU in 1 s"
# pg_stat_activity is read once per transaction unless the snapshot is cleared.
psql_at <<SQL
DO \$\$
DECLARE state text; counts jsonb := '{}';
BEGIN
  FOR i IN 1..$samples LOOP
    PERFORM pg_stat_clear_snapshot();
    SELECT coalesce(wait_event_type || ':' || wait_event, 'running (' || a.state || ')')
      INTO state FROM pg_stat_activity a WHERE pid = $busiest;
    state := coalesce(state, 'gone');
    counts := jsonb_set(counts, ARRAY[state], to_jsonb(coalesce((counts->>state)::int, 0) + 1));
    PERFORM pg_sleep(0.005);
  END LOOP;
  RAISE NOTICE '%', counts;
END \$\$;
SQL
