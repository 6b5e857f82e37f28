#!/usr/bin/env bash
# Cold lexical ingest throughput per format, and pdftotext beside it for the PDF corpora.
# See docs/BENCHMARKS.md ("Formats: throughput and retrieval per format").
#
# Usage: benches/formats_throughput.sh [CORPORA_DIR]
#   CORPORA_DIR  the shared corpora (opensearch-docs/, rst-sqlalchemy-docs/, …); default
#                $GROUNDIDX_CORPORA, else ../shared/corpora beside the repository. A corpus that
#                is absent is skipped with a line that says so; none present: exits 0.
# Environment:
#   GROUNDIDX_BENCH_WORK  stores, the binary's copy and the results (default
#                         /tmp/groundidx-formats-bench)
#   GROUNDIDX_BENCH_RUNS  timed runs of each command per corpus (default 5), taking turns; the
#                         median is reported
#   GROUNDIDX_BENCH_BIN   a groundidx binary to measure instead of building the release one
#
# For each corpus, one format: a cold ingest of that format only (`--formats FMT`, so a
# LICENSE.md beside the HTML pages is not in the figure) into a fresh store, no model, as a whole
# process; MB/s and files/s are of the format's files (their apparent sizes), the same files the
# ingest reads. For the PDF corpora, pdftotext (poppler, installed with apt if absent) over every
# file, one process per file in turn as a user runs it, into a scratch folder; its total per
# round is timed, taking turns with the ingest in the same rounds. Every ingest is checked: its
# exit must be 0 or 3 (3: some files could not be read), and the table gives the documents its
# report added beside the files of the format, and its warnings, so a file that was passed over
# is seen.
#
# Prints a Markdown table, and writes every run's time to $GROUNDIDX_BENCH_WORK/runs.tsv, each
# pdftotext process's time to pdftotext-files.tsv, and the table to table.md there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
corpora="${1:-${GROUNDIDX_CORPORA:-$repo/../shared/corpora}}"
work="${GROUNDIDX_BENCH_WORK:-/tmp/groundidx-formats-bench}"
runs="${GROUNDIDX_BENCH_RUNS:-5}"
given_bin="${GROUNDIDX_BENCH_BIN:-}"

# corpus folder, format (--formats name), the extensions of that format's files.
corpus_list=(
  "opensearch-docs md md,markdown"
  "rst-sqlalchemy-docs rst rst,rest"
  "mdx-astro-docs mdx mdx"
  "adoc-spring-security-docs adoc adoc,asciidoc,asc"
  "html-wcag html html,htm,xhtml"
  "pdf-jose-papers pdf pdf"
  "pdf-cncf-tag-security pdf pdf"
  "ipynb-handson-ml3 ipynb ipynb"
)

if [[ ! -d "$corpora" ]]; then
  echo "skipped: no shared corpora at $corpora (give the folder as an argument or GROUNDIDX_CORPORA)"
  exit 0
fi
corpora="$(cd "$corpora" && pwd)"
present=0
for entry in "${corpus_list[@]}"; do
  [[ -d "$corpora/${entry%% *}" ]] && present=$((present + 1))
done
if ((present == 0)); then
  echo "skipped: none of the format corpora is in $corpora"
  exit 0
fi

# No setting of the caller's may reach the measured ingest: no model, no config, no ledger.
for name in $(compgen -e | grep '^GROUNDIDX_' || true); do
  unset "$name"
done

if ! command -v pdftotext >/dev/null; then
  echo "installing poppler-utils (pdftotext)" >&2
  apt-get install -y poppler-utils >&2 || { apt-get update >&2 && apt-get install -y poppler-utils >&2; }
fi

# The measured binary is a copy: a build in the same target folder during the run cannot change it.
mkdir -p "$work/bin"
if [[ -n "$given_bin" ]]; then
  [[ -x "$given_bin" ]] || { echo "error: GROUNDIDX_BENCH_BIN=$given_bin is not an executable" >&2; exit 2; }
  cp "$given_bin" "$work/bin/groundidx"
else
  (cd "$repo" && cargo build --release --locked >&2)
  cp "${CARGO_TARGET_DIR:-$repo/target}/release/groundidx" "$work/bin/groundidx"
fi
bin="$work/bin/groundidx"
commit="$(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo '+modified')"

# Files of a format under a folder, NUL-separated, sorted (the same list every time).
format_files() { # DIR EXTENSIONS(comma-separated)
  local dir="$1" exts="$2" ext args=()
  IFS=',' read -ra ext_list <<<"$exts"
  for ext in "${ext_list[@]}"; do
    ((${#args[@]})) && args+=(-o)
    args+=(-iname "*.$ext")
  done
  find -H "$dir" -type f \( "${args[@]}" \) -print0 | sort -z
}
now() { echo "$EPOCHREALTIME"; } # bash 5: no process started, so timing each file costs nothing
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

cold_ingest() { # CORPUS_DIR FORMAT STORE -> prints "seconds exit added chunks warnings"
  local dir="$1" format="$2" store="$3" started ended code=0
  rm -rf "$store"
  started="$(now)"
  "$bin" --store "$store" ingest "$dir" --formats "$format" --json --quiet >"$work/ingest.json" 2>"$work/ingest.err" || code=$?
  ended="$(now)"
  if ((code != 0 && code != 3)); then
    echo "error: ingest of $dir (--formats $format) exited $code" >&2
    tail -c 2000 "$work/ingest.err" >&2
    exit 1
  fi
  python3 - "$work/ingest.json" "$code" "$started" "$ended" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
seconds = float(sys.argv[4]) - float(sys.argv[3])
print(f"{seconds:.4f} {sys.argv[2]} {report['documents']['added']} {report['chunks']['added']} {len(report['warnings'])}")
EOF
}

pdftotext_all() { # LIST_FILE (NUL-separated) CORPUS ROUND -> prints "seconds failed"; each file's time to files.tsv
  local list="$1" name="$2" round="$3" scratch="$work/pdftotext-out" started ended one n=0 failed=0
  rm -rf "$scratch"
  mkdir -p "$scratch"
  started="$EPOCHREALTIME"
  while IFS= read -r -d '' file; do
    n=$((n + 1))
    one="$EPOCHREALTIME"
    pdftotext "$file" "$scratch/$n.txt" 2>/dev/null || failed=$((failed + 1))
    printf '%s\t%d\t%s\t%s\n' "$name" "$round" "${file#"$corpora/$name/"}" "$(awk -v a="$one" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.4f", b - a}')" >>"$files_tsv"
  done <"$list"
  ended="$EPOCHREALTIME"
  awk -v a="$started" -v b="$ended" -v f="$failed" 'BEGIN {printf "%.4f %d\n", b - a, f}'
}

mkdir -p "$work/stores"
runs_tsv="$work/runs.tsv"
printf 'corpus\tformat\tcommand\tround\tseconds\n' >"$runs_tsv"
files_tsv="$work/pdftotext-files.tsv"
printf 'corpus\tround\tfile\tseconds\n' >"$files_tsv"
machine="$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
echo "machine: $machine" >&2
echo "groundidx $commit ($bin); $(pdftotext -v 2>&1 | head -1); $runs runs each" >&2
echo "load before: $(uptime)" >&2

rows=()
for entry in "${corpus_list[@]}"; do
  read -r name format exts <<<"$entry"
  dir="$corpora/$name"
  if [[ ! -d "$dir" ]]; then
    echo "skipped $name: no folder $dir" >&2
    continue
  fi
  list="$work/$name.files"
  format_files "$dir" "$exts" >"$list"
  files="$(tr -cd '\0' <"$list" | wc -c)"
  bytes="$(xargs -0 -r stat -c %s <"$list" | awk '{s += $1} END {print s + 0}')"
  # The page cache holds the corpus before anything is timed.
  xargs -0 -r cat <"$list" >/dev/null
  store="$work/stores/$name"
  is_pdf=0
  [[ "$format" == pdf ]] && is_pdf=1
  echo "$name: $files .$format files, $bytes bytes" >&2

  ours=() theirs=() code=0 added=0 chunks=0 warnings=0 failed=0
  for ((round = 0; round < runs; round++)); do
    order=(ingest)
    ((is_pdf)) && { ((round % 2)) && order=(pdftotext ingest) || order=(ingest pdftotext); }
    for command in "${order[@]}"; do
      if [[ "$command" == ingest ]]; then
        result="$(cold_ingest "$dir" "$format" "$store")"
        read -r seconds code added chunks warnings <<<"$result"
        ours+=("$seconds")
      else
        result="$(pdftotext_all "$list" "$name" "$round")"
        read -r seconds failed <<<"$result"
        theirs+=("$seconds")
      fi
      printf '%s\t%s\t%s\t%d\t%s\n' "$name" "$format" "$command" "$round" "$seconds" >>"$runs_tsv"
      echo "  round $round $command: $seconds s" >&2
    done
  done
  rm -rf "$store"

  ours_median="$(printf '%s\n' "${ours[@]}" | median)"
  row="$(awk -v n="$name" -v f="$format" -v files="$files" -v b="$bytes" -v s="$ours_median" \
    -v a="$added" -v c="$chunks" -v w="$warnings" -v code="$code" 'BEGIN {
      printf "| %s | %s | %d | %.1f | %d | %d | %.2f | %.2f | %.1f |", n, f, files, b / 1e6, a, c, s, b / 1e6 / s, files / s
      printf " %s%s |", w, (code == 3 ? " (exit 3)" : "")
    }')"
  if ((is_pdf)); then
    theirs_median="$(printf '%s\n' "${theirs[@]}" | median)"
    row+="$(awk -v b="$bytes" -v files="$files" -v s="$ours_median" -v t="$theirs_median" -v failed="$failed" 'BEGIN {
      printf " %.2f | %.2f | %.1f | %.2f |", t, b / 1e6 / t, files / t, s / t
      if (failed) printf " (%d files failed)", failed
    }')"
  else
    row+=" | | | |"
  fi
  rows+=("$row")
done
echo "load after: $(uptime)" >&2

{
  echo "groundidx $commit, $(pdftotext -v 2>&1 | head -1), $runs runs each, medians; $machine"
  echo
  echo "| corpus | format | files | MB | indexed | chunks | groundidx cold s | MB/s | files/s | warnings | pdftotext s | MB/s | files/s | groundidx / pdftotext |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$work/table.md"
