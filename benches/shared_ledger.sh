#!/usr/bin/env bash
# The shared PostgreSQL ledger beside the store's own SQLite ledger, in one run:
#   1. cold ingest of DOCS into SQLite and into PostgreSQL (a fresh store and schema each round);
#   2. replica catch-up: a new host's `sync` (a snapshot) and a host's `sync` after 5% of the
#      files changed (the log), in chunks per second;
#   3. keyed calls per second over HTTP (wrk, 8 connections, each call a new key) on one server
#      with the SQLite ledger, one with the PostgreSQL ledger, and bare PostgreSQL transactions
#      of the same four rows (pgbench, 8 clients);
#   4. keyed searches per second with 1, 2 and 3 servers on one schema, all loaded at once.
#
# usage: benches/shared_ledger.sh BIN DOCS     (ROUNDS=3, SECONDS_EACH=5 in the environment)
# PostgreSQL 15 runs as a private cluster with its durable defaults (fsync on) on a unix socket
# in a temp folder, as the `postgres` user when run as root. Needs wrk, curl and pgbench
# (Debian's wrk and postgresql-15). Prints a table of medians and one JSON line.
set -euo pipefail
bin=$(realpath "$1") docs=$(realpath "$2")
rounds=${ROUNDS:-3} seconds=${SECONDS_EACH:-5}
pg_bin=${GROUNDIDX_TEST_PG_BIN:-/usr/lib/postgresql/15/bin}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/groundidx-shared-bench.XXXXXX)
chmod 755 "$work"   # the postgres user reaches its folder through it
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    as_pg "$pg_bin/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work/pg"
(cd / && as_pg "$pg_bin/initdb" -D "$work/pg/data" -U postgres -A trust -E UTF8 --no-locale >/dev/null)
(cd / && as_pg "$pg_bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -w \
    -o "-c listen_addresses='' -k $work/pg -c max_connections=200" start >/dev/null)
url="postgresql://postgres@${work//\//%2F}%2Fpg/postgres"
psql_() { "$pg_bin/psql" -X -q -At "$url" "$@"; }

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {printf "%.4f\n", (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
record() { echo "$1 $2" >>"$work/results"; }   # name value
value() { awk -v n="$1" '$1 == n {print $2}' "$work/results" | median; }

# A copy of the corpus the catch-up step edits.
cp -r "$docs" "$work/docs"
docs="$work/docs"

echo "== cold ingest, $rounds rounds, SQLite and PostgreSQL alternating" >&2
for round in $(seq "$rounds"); do
    t0=$(now); "$bin" --store "$work/sqlite-$round" ingest "$docs" --quiet; t1=$(now)
    record cold_sqlite_s "$(echo "$t1 - $t0" | bc)"
    t0=$(now)
    "$bin" --ledger "$url" --ledger-schema "cold_$round" --store "$work/pg-$round" ingest "$docs" --quiet
    t1=$(now)
    record cold_pg_s "$(echo "$t1 - $t0" | bc)"
done
chunks=$(psql_ -c "SELECT count(*) FROM cold_1.chunks")

echo "== replica catch-up" >&2
for round in $(seq "$rounds"); do
    t0=$(now); "$bin" --ledger "$url" --ledger-schema cold_1 --store "$work/replica-$round" sync --quiet; t1=$(now)
    record bootstrap_s "$(echo "$t1 - $t0" | bc)"
done
for round in $(seq "$rounds"); do
    # 5% of the files get a new paragraph; the writer publishes them; a replica pulls them.
    find "$docs" -type f \( -name '*.md' -o -name '*.txt' \) | sort | awk -v r="$round" 'NR % 20 == r' |
        while read -r f; do printf '\n\nRevision %s of this page.\n' "$round" >>"$f"; done
    "$bin" --ledger "$url" --ledger-schema cold_1 --store "$work/pg-1" ingest "$docs" --quiet
    changed=$(psql_ -c "SELECT count(*) FROM cold_1.chunk_log WHERE seq > (SELECT coalesce(max(applied_seq), 0) FROM cold_1.consumers WHERE store_dir = '$work/replica-1')")
    t0=$(now); "$bin" --ledger "$url" --ledger-schema cold_1 --store "$work/replica-1" sync --quiet; t1=$(now)
    record pull_s "$(echo "$t1 - $t0" | bc)"
    record pull_rows "$changed"
done

serve() { # schema store port -> pid (listening)
    local schema=$1 store=$2 port=$3
    if [ "$schema" = sqlite ]; then
        "$bin" --store "$store" serve --listen "127.0.0.1:$port" --rate-limit 100000000/60s >/dev/null 2>&1 &
    else
        "$bin" --ledger "$url" --ledger-schema "$schema" --store "$store" serve \
            --listen "127.0.0.1:$port" --rate-limit 100000000/60s >/dev/null 2>&1 &
    fi
    local pid=$!
    for _ in $(seq 200); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
    echo "$pid"
}
stop() { # pid: ends a server and waits until it has gone (its port is free again)
    kill "$1" 2>/dev/null || true
    for _ in $(seq 200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
}
wrk_rps() { # port connections -> requests per second
    local out
    out=$(wrk -t2 -c"$2" -d"${seconds}s" -s "$here/keyed_search.lua" "http://127.0.0.1:$1" -- "$RANDOM$RANDOM")
    if grep -q "Non-2xx" <<<"$out"; then echo "non-2xx answers: $out" >&2; exit 1; fi
    awk '/Requests\/sec/ {print $2}' <<<"$out"
}

echo "== keyed calls per second: SQLite server, PostgreSQL server, bare PostgreSQL transactions" >&2
cat >"$work/bare.sql" <<'SQL'
\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO idempotency_keys (scope, key, tool, fingerprint, status, response, is_error, index_generation, created_at, expires_at)
  VALUES ('bench', 'b' || :client_id || '-' || :k, 'search_docs', sha256('x'::bytea), 'completed', convert_to(repeat('x', 4000), 'UTF8'), false, 1, now_ms(), now_ms() + 604800000)
  ON CONFLICT DO NOTHING;
INSERT INTO usage_windows AS w (scope, window_secs, window_start, used) VALUES ('bench', 60, now_ms() - now_ms() % 60000, 1)
  ON CONFLICT (scope, window_secs, window_start) DO UPDATE SET used = w.used + 1 WHERE w.used < 100000000;
INSERT INTO audit_events (scope, key, key_source, tool, fingerprint, arguments, outcome, n_hits, index_generation, created_at, served_by)
  VALUES ('bench', 'b' || :client_id || '-' || :k, 'caller', 'search_docs', sha256('x'::bytea), '{"query":"rotate the signing key","top_k":10}', 'ok', 10, 1, now_ms(), 'pgbench')
  ON CONFLICT DO NOTHING;
INSERT INTO usage_events (scope, key, units, window_start, window_secs, created_at)
  VALUES ('bench', 'b' || :client_id || '-' || :k, 1, now_ms() - now_ms() % 60000, 60, now_ms())
  ON CONFLICT DO NOTHING;
COMMIT;
SQL
"$bin" --ledger "$url" --ledger-schema bare migrate --quiet
for round in $(seq "$rounds"); do
    pid=$(serve sqlite "$work/sqlite-1" 27101); pids+=("$pid")
    record keyed_sqlite_rps "$(wrk_rps 27101 8)"
    stop "$pid"
    pid=$(serve cold_1 "$work/pg-1" 27102); pids+=("$pid")
    record keyed_pg_rps "$(wrk_rps 27102 8)"
    stop "$pid"
    tps=$(PGOPTIONS="-c search_path=bare" "$pg_bin/pgbench" -n -c 8 -j 2 -T "$seconds" -f "$work/bare.sql" "$url" 2>/dev/null |
        awk '/^tps/ {print $3; exit}')
    record bare_pg_tps "$tps"
done

echo "== keyed searches per second with 1, 2 and 3 servers on one schema" >&2
for round in $(seq "$rounds"); do
    for hosts in 1 2 3; do
        ports=()
        for h in $(seq "$hosts"); do
            port=$((27200 + h))
            pid=$(serve cold_1 "$work/replica-$h" "$port"); pids+=("$pid"); ports+=("$port")
        done
        : >"$work/rps"
        loads=()
        for port in "${ports[@]}"; do (wrk_rps "$port" 4 >>"$work/rps") & loads+=($!); done
        wait "${loads[@]}"
        record "hosts_${hosts}_rps" "$(awk '{s += $1} END {print s}' "$work/rps")"
        for pid in "${pids[@]}"; do stop "$pid"; done
        pids=()
    done
done

cold_sqlite=$(value cold_sqlite_s) cold_pg=$(value cold_pg_s)
bootstrap=$(value bootstrap_s) pull=$(value pull_s) pull_rows=$(value pull_rows)
keyed_sqlite=$(value keyed_sqlite_rps) keyed_pg=$(value keyed_pg_rps) bare=$(value bare_pg_tps)
h1=$(value hosts_1_rps) h2=$(value hosts_2_rps) h3=$(value hosts_3_rps)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
per_s() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%.0f", n / s}'; }
cat <<EOF
shared ledger on $(basename "$2"), $chunks chunks; medians of $rounds rounds; PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') on this machine
cold ingest         SQLite ${cold_sqlite} s, PostgreSQL ${cold_pg} s ($(ratio "$cold_pg" "$cold_sqlite")x), $(per_s "$chunks" "$cold_pg") chunks/s
replica bootstrap   ${bootstrap} s, $(per_s "$chunks" "$bootstrap") chunks/s
replica pull        ${pull} s for ${pull_rows} logged chunks ($(per_s "$pull_rows" "$pull") chunks/s)
keyed calls/s       SQLite server ${keyed_sqlite}, PostgreSQL server ${keyed_pg}, bare PostgreSQL tx ${bare} ($(ratio "$keyed_pg" "$bare")x bare)
keyed searches/s    1 host ${h1}, 2 hosts ${h2} ($(ratio "$h2" "$h1")x), 3 hosts ${h3} ($(ratio "$h3" "$h1")x)
EOF
printf '{"corpus":"%s","chunks":%s,"cold_sqlite_s":%s,"cold_pg_s":%s,"bootstrap_s":%s,"pull_s":%s,"pull_rows":%s,"keyed_sqlite_rps":%s,"keyed_pg_rps":%s,"bare_pg_tps":%s,"hosts_1_rps":%s,"hosts_2_rps":%s,"hosts_3_rps":%s}\n' \
    "$(basename "$2")" "$chunks" "$cold_sqlite" "$cold_pg" "$bootstrap" "$pull" "$pull_rows" \
    "$keyed_sqlite" "$keyed_pg" "$bare" "$h1" "$h2" "$h3"
