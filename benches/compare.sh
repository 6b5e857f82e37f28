#!/usr/bin/env bash
# groundidx side by side with the references that bound it. See docs/BENCHMARKS.md.
#
# Usage: benches/compare.sh [CORPORA_DIR]
#   CORPORA_DIR  the shared corpora (tldr-en/, opensearch-docs/); default $GROUNDIDX_CORPORA,
#                else ../shared/corpora beside the repository. Absent: the script says so and
#                exits 0 without measuring.
# Environment:
#   GROUNDIDX_BENCH_WORK  where corpora and stores go (default /tmp/groundidx-bench; ~3 GB)
#   GROUNDIDX_BENCH_RUNS  runs of each command per comparison (default 7)
#   GROUNDIDX_BENCH_ONLY  comma-separated sections (default: all): cold, noop, one_edit, keyed,
#                         mcp, mcp_search_in_process, search_1m, scifact, peers, http, embed,
#                         scale. `scale` generates 1M files (about 5 GB on disk) and takes most
#                         of an hour; `embed` needs `cold` (run before it, or in the last results).
#   GROUNDIDX_MODEL       the sentence-transformers folder for `embed` (default
#                         ../shared/models/all-MiniLM-L6-v2 beside the repository)
#
# Peers: qmd (npm @tobilu/qmd, pinned below) on Node 22 (npm's `node` package), both installed
# from the npm registry into WORK/peers. `http` needs wrk (Debian's package, installed if absent);
# `embed` installs sentence-transformers into a virtualenv (see benches/embed_throughput.sh).
#
# Writes target/bench-results.json and docs/benchmarks.png, and prints a summary.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
corpora="${1:-${GROUNDIDX_CORPORA:-$repo/../shared/corpora}}"
work="${GROUNDIDX_BENCH_WORK:-/tmp/groundidx-bench}"
runs="${GROUNDIDX_BENCH_RUNS:-7}"

if [[ ! -d "$corpora/tldr-en" || ! -d "$corpora/opensearch-docs" ]]; then
  echo "skipped: no shared corpora at $corpora (give the folder as an argument or GROUNDIDX_CORPORA)"
  exit 0
fi
corpora="$(cd "$corpora" && pwd)"

# Tools: b3sum, GNU time, matplotlib.
b3sum_bin="$(command -v b3sum || true)"
if [[ -z "$b3sum_bin" ]]; then
  if [[ ! -x "$work/tools/bin/b3sum" ]]; then
    echo "installing b3sum into $work/tools" >&2
    cargo install b3sum --locked --root "$work/tools" >&2
  fi
  b3sum_bin="$work/tools/bin/b3sum"
fi
if [[ ! -x /usr/bin/time ]]; then
  echo "installing GNU time" >&2
  apt-get install -y time >&2 || { apt-get update >&2 && apt-get install -y time >&2; }
fi
python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install --quiet matplotlib >&2
wants() { [[ -z "${GROUNDIDX_BENCH_ONLY:-}" || ",$GROUNDIDX_BENCH_ONLY," == *",$1,"* ]]; }
if wants http && ! command -v wrk >/dev/null; then
  echo "installing wrk" >&2
  apt-get install -y wrk >&2 || { apt-get update >&2 && apt-get install -y wrk >&2; }
fi
qmd_version=2.8.3
peers="$work/peers"
if wants peers && [[ "$("$peers/node_modules/.bin/qmd" --version 2>/dev/null)" != "qmd $qmd_version"* ]]; then
  echo "installing Node 22 and qmd $qmd_version into $peers" >&2
  mkdir -p "$peers"
  (cd "$peers" && { [[ -f package.json ]] || npm init -y >/dev/null; } &&
    npm install --no-fund --no-audit "node@22" "@tobilu/qmd@$qmd_version" >&2)
fi
model="${GROUNDIDX_MODEL:-$repo/../shared/models/all-MiniLM-L6-v2}"

# Build: the binary, and the two reference benches as plain executables.
cd "$repo"
cargo build --release --locked >&2
bench_exes="$(cargo bench --no-run --locked --message-format=json \
  --bench tantivy_reference --bench sqlite_reference 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])')"
tantivy_ref="$(awk '$1 == "tantivy_reference" {print $2}' <<<"$bench_exes")"
sqlite_ref="$(awk '$1 == "sqlite_reference" {print $2}' <<<"$bench_exes")"
[[ -x "$tantivy_ref" && -x "$sqlite_ref" ]] || { echo "could not build the reference benches" >&2; exit 1; }
# Measure copies: a build in the same target folder during the run cannot change them.
mkdir -p "$work/bin"
cp "$repo/target/release/groundidx" "$work/bin/groundidx"
cp "$tantivy_ref" "$work/bin/tantivy_reference"
cp "$sqlite_ref" "$work/bin/sqlite_reference"

# Corpora: the shared ones copied (so the page cache and file system are the same as for the
# generated ones), and generated ones of 1k, 10k and 100k files, and one of about 1M chunks.
mkdir -p "$work/corpora" "$repo/docs"
c="$work/corpora"
if [[ ! -d "$c/shared9k/opensearch-docs" ]]; then
  mkdir -p "$c/shared9k"
  cp -r "$corpora/tldr-en" "$corpora/opensearch-docs" "$c/shared9k/"
fi
generate() { # N SEED DIR [extra args]
  local n="$1" seed="$2" dir="$3"
  shift 3
  local stamp
  stamp="$n $seed $* $(sha256sum "$repo/benches/gen_corpus.py" | cut -c1-16)"
  if [[ "$(cat "$dir.stamp" 2>/dev/null)" != "$stamp" ]]; then
    echo "generating $dir ($n files)" >&2
    rm -rf "$dir"
    python3 "$repo/benches/gen_corpus.py" --files "$n" --seed "$seed" --out "$dir" "$@" >&2
    echo "$stamp" >"$dir.stamp"
  fi
}
generate 1000 42 "$c/gen-1000" --queries "$c/queries.txt"
generate 10000 42 "$c/gen-10000"
# Design proposals, every file with YAML front matter (the shape of the corpus the cold-ingest
# goal against qmd was set on: 1,200 files, 16.4 MB).
generate 1200 42 "$c/gen-proposals" --shape proposals --queries "$c/queries-proposals.txt"
if wants cold || wants noop || wants one_edit || wants mcp || wants mcp_search_in_process || wants peers; then
  generate 100000 42 "$c/gen-100000"
fi
if wants search_1m; then
  generate 200000 7 "$c/gen-1m-chunks" --queries "$c/queries-1m.txt"
fi
if wants scale; then
  generate 1000000 42 "$c/gen-1000000"
fi
# Fresh stores: a run never measures against stores of an earlier binary.
if [[ -z "${GROUNDIDX_BENCH_ONLY:-}" ]]; then
  rm -rf "$work/stores"
fi

echo "load before: $(uptime)" >&2
python3 "$repo/benches/compare.py" \
  --bin "$work/bin/groundidx" \
  --tantivy-ref "$work/bin/tantivy_reference" --sqlite-ref "$work/bin/sqlite_reference" \
  --b3sum "$b3sum_bin" \
  --qmd "$peers/node_modules/.bin/qmd" --node "$peers/node_modules/.bin/node" --model "$model" \
  --corpora "$corpora" --work "$work" --sample-docs "$repo/sample_docs" \
  --out "$repo/target/bench-results.json" --plot "$repo/docs/benchmarks.png" \
  --runs "$runs" --only "${GROUNDIDX_BENCH_ONLY:-}"
echo "load after: $(uptime)" >&2
