"""Drives the groundidx binary for the retrieval benchmarks: ingest once, search, read coverage.

Shared by `run.py` and `scifact.py` (Python 3.11 standard library only).
Every failure raises `Failure` with a message that names the path, the command or the value;
the scripts print it and exit non-zero, so a benchmark never reports a figure from a broken run.
"""

import json
import os
import subprocess
import time
from pathlib import Path

MODES = ("lexical", "semantic", "hybrid")

# `ingest` exits 0 when done and 3 when some paths could not be read; anything else is a failure.
INGEST_DONE = 0


class Failure(Exception):
    """A run that must not produce figures; the message says what and where."""


def check_binary(path: str) -> Path:
    binary = Path(path)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise Failure(
            f"no groundidx binary at {binary}\n"
            "hint: run `cargo build --release` in the repository and pass --bin target/release/groundidx"
        )
    return binary


def check_folder(path: str, what: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise Failure(f"{what} {folder} does not exist or is not a folder")
    return folder.resolve()


def ingest(binary: Path, store: Path, folder: Path, embed_model: str | None) -> dict:
    """Ingests `folder` into `store`; a store that already holds it is a fast no-op.

    Returns the `ingest --json` report with `seconds` added.
    """
    command = [str(binary), "--store", str(store), "ingest", str(folder), "--json"]
    if embed_model is not None:
        command += ["--embed-model", embed_model]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != INGEST_DONE:
        raise Failure(
            f"ingest of {folder} into {store} failed with exit {result.returncode}: "
            f"{' '.join(command)}\n{result.stderr.strip()[-2000:]}"
        )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise Failure(f"ingest of {folder} printed no JSON report ({error}): {result.stdout[:300]!r}")
    report["seconds"] = seconds
    return report


def summary(report: dict) -> str:
    """One line for stderr: what an ingest changed, its warnings and its time."""
    documents = report.get("documents") or {}
    changed = ", ".join(f"{documents[k]} {k}" for k in ("added", "changed", "removed", "unchanged") if k in documents)
    return f"{changed}; {len(report.get('warnings') or [])} warnings; {report['seconds']:.1f} s"


def search(binary: Path, store: Path, query: str, top_k: int, mode: str | None) -> dict:
    """One `groundidx search QUERY --json`; `--mode` only when a mode is asked for."""
    command = [str(binary), "search", query, "--store", str(store), "--json", "--top-k", str(top_k)]
    if mode is not None:
        command += ["--mode", mode]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise Failure(
            f"search failed with exit {result.returncode} for query {query!r} "
            f"(mode {mode or 'default'}, store {store}): {result.stderr.strip()[:1000]}"
        )
    try:
        answer = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise Failure(f"search for {query!r} printed no JSON answer ({error}): {result.stdout[:300]!r}")
    if not isinstance(answer.get("hits"), list):
        raise Failure(f"search for {query!r} answered without a `hits` list: {result.stdout[:300]!r}")
    return answer


def ranked_documents(answer: dict, root: Path) -> list[str]:
    """The documents of an answer in rank order, each once, at its best rank.

    A hit's document is its first path (relative to the ingested folder).
    A hit from a folder other than `root` means the store holds another corpus as well, which
    would mix its pages into the figures, so it is a failure.
    """
    documents: list[str] = []
    for hit in answer["hits"]:
        for source in hit.get("sources") or []:
            source_root = source.get("root")
            if source_root is not None and Path(source_root) != root:
                raise Failure(
                    f"the store holds documents from {source_root} as well as {root}\n"
                    "hint: give each corpus a store of its own (--store)"
                )
        paths = hit.get("paths") or []
        if not paths:
            raise Failure(f"a hit without paths in the answer: {json.dumps(hit)[:300]}")
        if paths[0] not in documents:
            documents.append(paths[0])
    return documents


def coverage_fraction(coverage) -> float | None:
    """The share of chunks a semantic answer could see, from the answer's `semantic_coverage`
    (`{"vectors", "chunks"}`, the `search --json` contract). None for any other shape."""
    if isinstance(coverage, dict):
        vectors, chunks = coverage.get("vectors"), coverage.get("chunks")
        if isinstance(vectors, int) and isinstance(chunks, int) and not isinstance(vectors, bool):
            return vectors / chunks if chunks else 1.0
    return None
    if isinstance(coverage, (int, float)):
        return float(coverage)
    if isinstance(coverage, dict):
        for key in ("fraction", "ratio", "share"):
            if isinstance(coverage.get(key), (int, float)):
                return float(coverage[key])
        for done, total in (("embedded", "total"), ("embedded_chunks", "chunks"), ("embedded", "chunks")):
            if isinstance(coverage.get(done), (int, float)) and isinstance(coverage.get(total), (int, float)):
                return float(coverage[done]) / coverage[total] if coverage[total] else 1.0
    return None
