#!/usr/bin/env python3
"""groundidx on BEIR SciFact per search mode: nDCG@10 and recall@100 (trec_eval semantics).

Usage:
  scifact.py --bin PATH [--data DIR] [--work DIR] [--mode lexical|semantic|hybrid]...
             [--embed-model DIR] [--allow-partial] [--json]

The corpus is written as one Markdown file per abstract, `<doc id>.md` holding `# <title>`, a
blank line and the text (the layout of `../shared/eval/scifact-ndcg`), into `WORK/docs`, and
ingested once into `WORK/store` (`--embed-model` passed to `ingest` when given); both are kept,
so a second run costs a no-op re-ingest.
Each of the 300 test queries runs through `groundidx search QUERY --json --top-k 100 [--mode M]`;
every hit maps to its document (the first path's file name), each document kept at its best rank.
nDCG@10: gain from the judgements, log2 discount, ideal DCG from the judged relevant documents;
recall@100: the share of the judged relevant documents in the top 100; both averaged over the
queries, a query without hits scoring 0 (`../shared/eval/README.md`).
With the same binary, the lexical figure equals `scifact-ndcg`'s.

A semantic or hybrid figure is refused while an answer's `coverage` is below 1.0, unless
`--allow-partial`. Exits 2 on missing data or binary, 1 when ingest or a search fails.
"""

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing binary.py must not leave __pycache__ in the repository
import binary  # noqa: E402
from binary import MODES, Failure  # noqa: E402

TOP_K = 100
REPOSITORY = Path(__file__).resolve().parent.parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="the groundidx binary")
    parser.add_argument("--data", default=str(REPOSITORY.parent / "shared" / "eval" / "scifact"),
                        help="the SciFact folder: corpus.jsonl, queries.jsonl, qrels/test.tsv (default: ../shared/eval/scifact)")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "groundidx-retrieval" / "scifact"),
                        help="where the Markdown corpus and the store are kept between runs")
    parser.add_argument("--mode", action="append", choices=MODES, help="a search mode; repeat for several")
    parser.add_argument("--embed-model", help="passed to `ingest --embed-model`")
    parser.add_argument("--allow-partial", action="store_true", help="report semantic/hybrid figures even when coverage < 1.0")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of Markdown")
    args = parser.parse_args()
    try:
        groundidx = binary.check_binary(args.bin)
        data = binary.check_folder(args.data, "SciFact folder")
        qrels, queries = load_judgements(data)
    except Failure as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2
    try:
        report = run(args, groundidx, data, qrels, queries)
    except Failure as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(markdown(report))
    return 0


def load_judgements(data: Path) -> tuple[dict, dict]:
    """The test judgements (positive ones) and the text of every judged query."""
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        if not (data / name).is_file():
            raise Failure(f"SciFact file {data / name} does not exist\nhint: pass --data DIR")
    qrels: dict[str, dict[str, int]] = {}
    with open(data / "qrels" / "test.tsv") as lines:
        next(lines)
        for line in lines:
            query_id, document_id, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels.setdefault(query_id, {})[document_id] = int(score)
    queries = {}
    with open(data / "queries.jsonl") as lines:
        for line in lines:
            query = json.loads(line)
            if query["_id"] in qrels:
                queries[query["_id"]] = query["text"]
    missing = sorted(set(qrels) - set(queries))
    if missing:
        raise Failure(f"{data / 'queries.jsonl'} lacks judged queries {', '.join(missing[:5])}")
    return qrels, queries


def write_corpus(data: Path, docs: Path) -> int:
    """Writes one Markdown file per abstract; a folder left half-written by a killed run is redone."""
    if docs.is_dir():
        return sum(1 for _ in docs.iterdir())
    partial = docs.with_name(docs.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    n_documents = 0
    with open(data / "corpus.jsonl") as lines:
        for line in lines:
            document = json.loads(line)
            title = " ".join(document.get("title", "").split())
            text = document.get("text", "").strip()
            (partial / f"{document['_id']}.md").write_text(f"# {title}\n\n{text}\n")
            n_documents += 1
    partial.rename(docs)
    return n_documents


def run(args, groundidx: Path, data: Path, qrels: dict, queries: dict) -> dict:
    work = Path(args.work)
    docs, store = work / "docs", work / "store"
    n_documents = write_corpus(data, docs)
    docs = docs.resolve()
    ingest_report = binary.ingest(groundidx, store, docs, args.embed_model)
    print(f"ingest {docs} ({n_documents} files) into {store}: {binary.summary(ingest_report)}", file=sys.stderr)
    runs = [run_mode(groundidx, store, docs, qrels, queries, mode, args.allow_partial) for mode in args.mode or [None]]
    return {"bin": str(groundidx.resolve()), "work": str(work), "queries": len(queries), "modes": runs}


def run_mode(groundidx, store, docs, qrels, queries, mode, allow_partial) -> dict:
    ndcgs, recalls, reported_modes, coverages = [], [], set(), []
    started = time.perf_counter()
    for query_id, text in queries.items():
        answer = binary.search(groundidx, store, text, TOP_K, mode)
        if "mode" in answer:
            reported_modes.add(str(answer["mode"]))
        if answer.get("mode") not in (None, "lexical") and "semantic_coverage" in answer:
            coverages.append(answer["semantic_coverage"])
        ranked = [Path(path).stem for path in binary.ranked_documents(answer, docs)]
        relevant = qrels[query_id]
        ndcgs.append(ndcg_at(ranked, relevant, 10))
        recalls.append(len(set(ranked[:TOP_K]) & set(relevant)) / len(relevant))
    seconds = time.perf_counter() - started
    fractions = [binary.coverage_fraction(c) for c in coverages]
    coverage = min(fractions) if fractions and None not in fractions else None
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
        "ndcg@10": sum(ndcgs) / len(ndcgs),
        "recall@100": sum(recalls) / len(recalls),
    }


def ndcg_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    ideal_dcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / ideal_dcg if ideal_dcg else 0.0


def markdown(report: dict) -> str:
    lines = [
        f"SciFact test, {report['queries']} queries, top {TOP_K}",
        "",
        "| mode | reported mode | coverage | nDCG@10 | recall@100 |",
        "|---|---|---|---|---|",
    ]
    for run in report["modes"]:
        coverage = "" if run["coverage"] is None else f"{run['coverage']:.3f}" + (" (partial)" if run["partial"] else "")
        lines.append(
            f"| {run['mode']} | {run['reported_mode'] or ''} | {coverage} | {run['ndcg@10']:.4f} | {run['recall@100']:.4f} |"
        )
    lines.append("")
    lines += [f"scifact {run['mode']} ndcg@10={run['ndcg@10']:.4f} recall@100={run['recall@100']:.4f}" for run in report["modes"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
