#!/usr/bin/env bash
# Searches per second over HTTP with 1, 2, 4 and 8 concurrent clients, for one or more groundidx
# binaries side by side (say, a build before and after a change), with wrk as the client (a
# Python client is itself the bottleneck past one connection on two cores).
#
# usage: benches/http_clients.sh DOCS BIN [BIN ...]
#   ROUNDS (3), SECONDS (4) and CLIENTS ("1 2 4 8") in the environment.
# Each binary ingests DOCS into a store of its own (stores of different versions may not open in
# the other), then for every round, client count and binary in turn: a fresh `serve` on a
# loopback port, wrk for SECONDS, the server stopped. Prints the median of the rounds.
# Needs wrk (Debian's package wrk) and curl.
set -euo pipefail
docs=$1; shift
rounds=${ROUNDS:-3} seconds=${SECONDS_EACH:-4} clients=${CLIENTS:-"1 2 4 8"}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
for bin in "$@"; do
    "$bin" --store "$work/store-$n" ingest "$docs" --quiet
    n=$((n + 1))
done

one_run() { # bin store clients -> requests per second
    local bin=$1 store=$2 c=$3 port
    port=$((20000 + RANDOM % 20000))
    "$bin" --store "$store" serve --listen "127.0.0.1:$port" --rate-limit 100000000/60s \
        >/dev/null 2>"$work/serve.err" &
    local pid=$!
    for _ in $(seq 100); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
    local threads=$(( c < 2 ? 1 : 2 ))
    local out
    out=$(wrk -t"$threads" -c"$c" -d"${seconds}s" -s "$here/keyed_search.lua" \
        "http://127.0.0.1:$port" -- "$RANDOM$RANDOM$n")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    if grep -q "Non-2xx" <<<"$out"; then echo "non-2xx answers with $c clients: $out" >&2; exit 1; fi
    awk '/Requests\/sec/ {print $2}' <<<"$out"
}

results="$work/results"
for round in $(seq "$rounds"); do
    for c in $clients; do
        n=0
        for bin in "$@"; do
            echo "$n $c $(one_run "$bin" "$work/store-$n" "$c")" >>"$results"
            n=$((n + 1))
        done
    done
done
echo "searches per second over HTTP (keyed calls), median of $rounds rounds of ${seconds} s"
python3 - "$results" "$@" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
bins = sys.argv[2:]
counts = sorted({int(r[1]) for r in rows})
print("clients " + "".join(f"{b.rsplit('/', 1)[-1]:>22}" for b in bins))
for c in counts:
    cells = []
    for i in range(len(bins)):
        values = [float(r[2]) for r in rows if r[0] == str(i) and int(r[1]) == c]
        cells.append(f"{statistics.median(values):>22.1f}")
    print(f"{c:>7} " + "".join(cells))
PY
