#!/usr/bin/env bash
# Embedding throughput: groundidx's local model, at its default precision (`auto`) and in
# float32, beside sentence-transformers (PyTorch, float32) on the same chunk texts, model,
# maximum length and threads. See docs/BENCHMARKS.md.
#
# Usage: benches/embed_throughput.sh [CORPORA_DIR] [MODEL_DIR]
#   CORPORA_DIR  the shared corpora (tldr-en/, opensearch-docs/); default $GROUNDIDX_CORPORA,
#                else ../shared/corpora beside the repository
#   MODEL_DIR    a sentence-transformers folder; default ../shared/models/all-MiniLM-L6-v2
#   Either absent: the script says so and exits 0 without measuring.
# Environment:
#   GROUNDIDX_BENCH_WORK      stores, texts and the reference's virtualenv (default /tmp/groundidx-embed-bench)
#   GROUNDIDX_BENCH_RUNS      timed runs of each side per corpus (default 5), taking turns; the median
#                             is reported
#   GROUNDIDX_EMBED_CHUNKS    chunks sampled from each corpus (default 300, a fixed seed)
#   GROUNDIDX_EMBED_THREADS   threads for both sides (default: every core)
#   GROUNDIDX_EMBED_MAX       maximum tokens for both sides (default: the folder's)
#   GROUNDIDX_REFERENCE_PYTHON  a python3 with sentence-transformers; default a virtualenv in the work folder
#   GROUNDIDX_EMBED_PROFILE   release (default) or dev: the dev profile builds groundidx itself
#                             unoptimised but every dependency (candle, gemm) at opt-level 2
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
corpora="${1:-${GROUNDIDX_CORPORA:-$repo/../shared/corpora}}"
model="${2:-$repo/../shared/models/all-MiniLM-L6-v2}"
work="${GROUNDIDX_BENCH_WORK:-/tmp/groundidx-embed-bench}"
runs="${GROUNDIDX_BENCH_RUNS:-5}"
n_chunks="${GROUNDIDX_EMBED_CHUNKS:-300}"
threads="${GROUNDIDX_EMBED_THREADS:-$(nproc)}"
max_tokens="${GROUNDIDX_EMBED_MAX:-}"
profile="${GROUNDIDX_EMBED_PROFILE:-release}"

if [[ ! -d "$corpora/tldr-en" || ! -d "$corpora/opensearch-docs" ]]; then
  echo "skipped: no shared corpora at $corpora (give the folder as an argument or GROUNDIDX_CORPORA)"
  exit 0
fi
if [[ ! -f "$model/model.safetensors" ]]; then
  echo "skipped: no model at $model (give the folder as the second argument)"
  exit 0
fi
corpora="$(cd "$corpora" && pwd)"
model="$(cd "$model" && pwd)"
mkdir -p "$work"

python="${GROUNDIDX_REFERENCE_PYTHON:-}"
if [[ -z "$python" ]]; then
  python="$work/venv/bin/python"
  if ! "$python" -c 'import sentence_transformers' 2>/dev/null; then
    echo "installing sentence-transformers into $work/venv" >&2
    python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install --quiet sentence-transformers >&2
  fi
fi

cd "$repo"
target="${CARGO_TARGET_DIR:-$repo/target}"
# The bench's executable, run directly: a `cargo bench` per run would take cargo's lock on the
# target folder, and wait, untimed but for minutes, whenever something else builds there.
bench_executable() {
  "$@" --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable") \
            and message["target"]["name"] == "embed_throughput":
        print(message["executable"])'
}
if [[ "$profile" == release ]]; then
  cargo build --release --locked --bin groundidx >&2
  candle=("$(bench_executable cargo bench --locked --bench embed_throughput --no-run)")
  groundidx="$target/release/groundidx"
else
  # Built as the integration tests build it, so with the same dependency features (dev-dependencies
  # included) as the bench: a plain `cargo build` would compile candle again.
  candle=("$(bench_executable cargo test --locked --test it --bench embed_throughput --no-run)")
  groundidx="$target/debug/groundidx"
fi
echo "profile: $profile; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

results="$work/embed-results.jsonl"
: >"$results"
for corpus in tldr-en opensearch-docs; do
  store="$work/store-$corpus"
  texts="$work/$corpus.jsonl"
  rm -rf "$store"
  "$groundidx" ingest "$corpora/$corpus" --store "$store" >/dev/null
  "$groundidx" export --store "$store" \
    | python3 -c '
import random, sys
lines = [line for line in sys.stdin if line.strip()]
random.Random(0).shuffle(lines)
sys.stdout.writelines(lines[:int(sys.argv[1])])' "$n_chunks" >"$texts"
  tokens="$("$python" "$repo/benches/embed_throughput.py" "$model" "$texts" "$threads" 0 $max_tokens --tokens 2>/dev/null)"
  echo "$corpus: $tokens" >&2
  # How far `auto` (bfloat16 on AMX tiles, where the CPU has them) is from float32.
  cosine="$("${candle[@]}" "$model" "$texts" "$threads" 1 $max_tokens --cosine 2>/dev/null)"
  echo "$corpus: auto against float32: $cosine" >&2
  echo "$cosine" | python3 -c '
import json, sys
print(json.dumps({"corpus": sys.argv[1], "side": "cosine", **json.loads(sys.stdin.read())}))' "$corpus" >>"$results"
  # The sides take turns, one run each per round, so a change in the machine's load (another
  # build, another benchmark) falls on both sides alike; each run is a fresh process, and the
  # model's loading is not timed.
  # `candle` runs the default precision (`auto`: bfloat16 on AMX tiles where the CPU has them),
  # `candle-float32` float32 everywhere.
  declare -A lines=([candle]="" [candle-float32]="" [reference]="")
  for ((round = 0; round < runs; round++)); do
    for side in candle candle-float32 reference; do
      if [[ "$side" == candle ]]; then
        line="$(GROUNDIDX_EMBED_PRECISION=auto "${candle[@]}" "$model" "$texts" "$threads" 1 $max_tokens 2>/dev/null)"
      elif [[ "$side" == candle-float32 ]]; then
        line="$(GROUNDIDX_EMBED_PRECISION=float32 "${candle[@]}" "$model" "$texts" "$threads" 1 $max_tokens 2>/dev/null)"
      else
        line="$("$python" "$repo/benches/embed_throughput.py" "$model" "$texts" "$threads" 1 $max_tokens 2>/dev/null)"
      fi
      echo "$corpus $side round $round: $line (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
      lines[$side]+="$line"$'\n'
    done
  done
  for side in candle candle-float32 reference; do
    echo "${lines[$side]}" | python3 -c '
import json, statistics, sys
corpus, side, tokens = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rates = [json.loads(line)["chunks_per_s"] for line in sys.stdin if line.strip()]
print(json.dumps({"corpus": corpus, "side": side, "runs": len(rates),
                  "median_chunks_per_s": round(statistics.median(rates), 2),
                  "all": [round(rate, 2) for rate in rates], **tokens}))' "$corpus" "$side" "$tokens" >>"$results"
  done
done

python3 - "$results" "$threads" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"threads: {sys.argv[2]}; load average at the end: {open('/proc/loadavg').read().split()[:3]}")
print(f"{'corpus':<16} {'chunks':>6} {'median tok':>10} {'auto c/s':>9} {'float32 c/s':>11} "
      f"{'reference c/s':>14} {'auto/ref':>8} {'f32/ref':>7}  runs (auto; float32; reference)")
for corpus in dict.fromkeys(row["corpus"] for row in rows):
    by_side = {row["side"]: row for row in rows if row["corpus"] == corpus}
    cosine = by_side["cosine"]
    print(f"{corpus}: auto ran {cosine['kernel']}; cosine to float32 min {cosine['cosine_min']:.5f}, "
          f"median {cosine['cosine_median']:.5f} over {cosine['texts']} texts")
    auto, f32, reference = by_side["candle"], by_side["candle-float32"], by_side["reference"]
    print(f"{corpus:<16} {auto['chunks']:>6} {auto['median_tokens']:>10} "
          f"{auto['median_chunks_per_s']:>9} {f32['median_chunks_per_s']:>11} "
          f"{reference['median_chunks_per_s']:>14} "
          f"{auto['median_chunks_per_s'] / reference['median_chunks_per_s']:>8.2f} "
          f"{f32['median_chunks_per_s'] / reference['median_chunks_per_s']:>7.2f}  "
          f"{auto['all']}; {f32['all']}; {reference['all']}")
PY
