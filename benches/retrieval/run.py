#!/usr/bin/env python3
"""Retrieval quality of groundidx on a documentation corpus: hit@1, hit@3, hit@10 and MRR@10.

Usage:
  run.py --bin PATH --corpus DIR --questions FILE [--store DIR] [--mode lexical|semantic|hybrid]...
         [--embed-model DIR] [--allow-partial] [--json]

The corpus is ingested once into the store (`ingest` is idempotent: a store that already holds
the corpus costs a no-op re-run), then every query of the questions file runs through
`groundidx search QUERY --store S --json --top-k 10 [--mode M]` for each mode asked for.
Without `--mode`, one run is made without the flag (the binary's default mode).
`--embed-model` is passed to `ingest` only when given.

A query's ranking is the list of documents of its hits (a hit's document is its first path,
relative to the corpus root), each kept at its best rank.
hit@k: an expected page is among the first k documents (k = 1, 3, 10); MRR@10: the mean of 1/rank of the
first expected page in the top 10 hits (0 when none is there).
Figures are given per mode and per kind (question / identifier).

A semantic or hybrid figure is refused when an answer's `coverage` is below 1.0 (the store is
still embedding), unless `--allow-partial`.
Exits 2 on a missing binary, corpus or questions file, or an expected path that does not exist;
1 when ingest or a search fails; 0 with the figures otherwise.
"""

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing binary.py must not leave __pycache__ in the repository
import binary  # noqa: E402
from binary import MODES, Failure  # noqa: E402

TOP_K = 10
KINDS = ("question", "identifier")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="the groundidx binary")
    parser.add_argument("--corpus", required=True, help="the corpus folder (expected paths are relative to it)")
    parser.add_argument("--questions", required=True, help="a JSON Lines file of {query, kind, expected}")
    parser.add_argument("--store", help="the store to ingest into and search (default: one per corpus under the temp folder)")
    parser.add_argument("--mode", action="append", choices=MODES, help="a search mode; repeat for several")
    parser.add_argument("--embed-model", help="passed to `ingest --embed-model`")
    parser.add_argument("--allow-partial", action="store_true", help="report semantic/hybrid figures even when coverage < 1.0")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of Markdown")
    args = parser.parse_args()
    try:
        report = run(args)
    except Failure as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2 if isinstance(failure, InputFailure) else 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(markdown(report))
    return 0


class InputFailure(Failure):
    """A missing or inconsistent input: nothing was run."""


def run(args) -> dict:
    try:
        groundidx = binary.check_binary(args.bin)
        corpus = binary.check_folder(args.corpus, "corpus")
    except Failure as failure:
        raise InputFailure(str(failure))
    queries = load_queries(Path(args.questions), corpus)
    store = Path(args.store) if args.store else default_store(corpus)

    ingest_report = binary.ingest(groundidx, store, corpus, args.embed_model)
    print(
        f"ingest {corpus} into {store}: {binary.summary(ingest_report)}",
        file=sys.stderr,
    )

    runs = []
    for mode in args.mode or [None]:
        runs.append(run_mode(groundidx, store, corpus, queries, mode, args.allow_partial))
    return {
        "corpus": str(corpus),
        "questions": str(Path(args.questions).resolve()),
        "bin": str(groundidx.resolve()),
        "store": str(store),
        "top_k": TOP_K,
        "ingest": {key: ingest_report.get(key) for key in ("documents", "chunks", "seconds")},
        "modes": runs,
    }


def load_queries(path: Path, corpus: Path) -> list[dict]:
    """Reads and checks the questions file; every expected path must exist in the corpus."""
    if not path.is_file():
        raise InputFailure(f"questions file {path} does not exist")
    queries, problems = [], []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            problems.append(f"{where}: not JSON ({error})")
            continue
        query, kind, expected = entry.get("query"), entry.get("kind"), entry.get("expected")
        if not isinstance(query, str) or not query.strip():
            problems.append(f"{where}: `query` must be a non-empty string")
        if kind not in KINDS:
            problems.append(f"{where}: `kind` must be one of {', '.join(KINDS)}, not {kind!r}")
        if not isinstance(expected, list) or not expected or not all(isinstance(p, str) for p in expected):
            problems.append(f"{where}: `expected` must be a non-empty list of paths")
            continue
        for relative in expected:
            if not (corpus / relative).is_file():
                problems.append(f"{where}: expected page {corpus / relative} does not exist")
        queries.append({"query": query, "kind": kind, "expected": expected})
    if problems:
        raise InputFailure("\n".join(problems) + f"\nhint: expected paths are relative to {corpus}")
    if not queries:
        raise InputFailure(f"questions file {path} holds no queries")
    return queries


def default_store(corpus: Path) -> Path:
    """A store of the corpus's own, kept between runs so the ingest is paid once."""
    tag = hashlib.sha256(str(corpus).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "groundidx-retrieval" / f"{corpus.name}-{tag}"


def run_mode(groundidx, store, corpus, queries, mode, allow_partial) -> dict:
    per_query, reported_modes, coverages = [], set(), []
    started = time.perf_counter()
    for entry in queries:
        answer = binary.search(groundidx, store, entry["query"], TOP_K, mode)
        if "mode" in answer:
            reported_modes.add(str(answer["mode"]))
        if answer.get("mode") not in (None, "lexical") and "semantic_coverage" in answer:
            coverages.append(answer["semantic_coverage"])
        documents = binary.ranked_documents(answer, corpus)
        rank = next((i + 1 for i, d in enumerate(documents) if d in entry["expected"]), None)
        per_query.append({"query": entry["query"], "kind": entry["kind"], "rank": rank, "top": documents[:3]})
    seconds = time.perf_counter() - started

    coverage = lowest_coverage(coverages)
    partial = coverage is not None and coverage < 1.0
    if mode in ("semantic", "hybrid"):
        if coverages and coverage is None:
            raise Failure(f"mode {mode}: cannot read the answers' coverage {coverages[0]!r}")
        if partial and not allow_partial:
            raise Failure(
                f"mode {mode}: semantic coverage is {coverage:.3f} < 1.0 in {store}, the store is still embedding\n"
                "hint: wait for the embedding to finish, or pass --allow-partial to report it anyway"
            )
    return {
        "mode": mode or "default",
        "reported_mode": ", ".join(sorted(reported_modes)) or None,
        "coverage": coverage,
        "partial": partial,
        "search_seconds": seconds,
        "figures": figures(per_query),
        "queries": per_query,
    }


def lowest_coverage(coverages: list) -> float | None:
    fractions = [binary.coverage_fraction(c) for c in coverages]
    if not fractions or any(f is None for f in fractions):
        return None
    return min(fractions)


def figures(per_query: list[dict]) -> dict:
    groups = {kind: [q for q in per_query if q["kind"] == kind] for kind in KINDS}
    groups["all"] = per_query
    result = {}
    for name, group in groups.items():
        if not group:
            continue
        ranks = [q["rank"] for q in group]
        result[name] = {
            "n": len(group),
            "hit@1": sum(1 for r in ranks if r is not None and r <= 1) / len(ranks),
            "hit@3": sum(1 for r in ranks if r is not None and r <= 3) / len(ranks),
            "hit@10": sum(1 for r in ranks if r is not None and r <= TOP_K) / len(ranks),
            "mrr@10": sum(1 / r for r in ranks if r is not None and r <= TOP_K) / len(ranks),
        }
    return result


def markdown(report: dict) -> str:
    lines = [
        f"corpus `{report['corpus']}`, {sum(f['n'] for k, f in report['modes'][0]['figures'].items() if k != 'all')} queries, top {report['top_k']}",
        "",
        "| mode | reported mode | coverage | kind | n | hit@1 | hit@3 | hit@10 | MRR@10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report["modes"]:
        coverage = "" if run["coverage"] is None else f"{run['coverage']:.3f}" + (" (partial)" if run["partial"] else "")
        reported = run["reported_mode"] or ""
        for kind, f in run["figures"].items():
            lines.append(
                f"| {run['mode']} | {reported} | {coverage} | {kind} | {f['n']} | "
                f"{f['hit@1']:.3f} | {f['hit@3']:.3f} | {f['hit@10']:.3f} | {f['mrr@10']:.3f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
