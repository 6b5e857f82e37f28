#!/usr/bin/env python3
"""Held-out-like tldr questions: one example description per sampled page, taken out of the page.

A tldr page lists examples as a description line (`- Create an archive from files:`) and a
command line.  A description is an English question about the command written by someone else
than us, but it is inside the page, so asking it of the unchanged corpus measures word overlap.
This script writes a copy of the corpus in which, for each sampled page, one example (its
description and its command) is removed from that page and from every other page that repeats the
same description, and the questions file whose queries are those descriptions.
What is searched then holds the command's page without the sentence asked: the page must be found
by its other examples, its summary, its name, or by meaning.

Sampling is deterministic (a hash of the page path picks the pages and the example), so the same
corpus gives the same files.  Skipped: examples whose description has fewer than four words
(`Display help:`), and descriptions that another page of another name repeats word for word
(they name no single command).  Expected pages: the page, and the pages of the same file name
on other platforms (the same command).

Usage:
  python3 benches/retrieval/tldr_descriptions.py --corpus ../shared/corpora/tldr-en \
      --out-corpus /tmp/tldr-heldout --out-questions /tmp/tldr-descriptions.jsonl [--pages 400]
"""

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path


def digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def normalize(description: str) -> str:
    """The description as a person would type it: mnemonic brackets and the colon dropped."""
    text = description.strip()
    if text.startswith("- "):
        text = text[2:]
    text = text.rstrip(":").strip()
    # `[c]reate` and `E[x]tract` mark the option letters: they are not in what a person types.
    text = re.sub(r"\[([^\[\]]{1,3})\]", r"\1", text)
    return text


def examples(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line index of each example: its `- ` description through its command line."""
    found = []
    for i, line in enumerate(lines):
        if line.startswith("- ") and line.rstrip().endswith(":"):
            end = i + 1
            while end < len(lines) and not lines[end].startswith("`"):
                if lines[end].startswith("- "):
                    break
                end += 1
            if end < len(lines) and lines[end].startswith("`"):
                found.append((i, end))
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out-corpus", required=True)
    parser.add_argument("--out-questions", required=True)
    parser.add_argument("--pages", type=int, default=400)
    args = parser.parse_args()
    corpus = Path(args.corpus)
    if not (corpus / "pages").is_dir():
        print(f"no tldr pages under {corpus}", file=sys.stderr)
        return 2
    pages = sorted(p.relative_to(corpus).as_posix() for p in corpus.glob("pages/*/*.md"))
    text = {page: (corpus / page).read_text(encoding="utf-8").split("\n") for page in pages}
    by_name: dict[str, list[str]] = {}
    for page in pages:
        by_name.setdefault(Path(page).name, []).append(page)
    # Which page names repeat each normalized description.
    names_of: dict[str, set[str]] = {}
    for page in pages:
        for first, _ in examples(text[page]):
            names_of.setdefault(normalize(text[page][first]).lower(), set()).add(Path(page).name)
    chosen: list[tuple[str, str]] = []
    used_names: set[str] = set()
    for page in sorted(pages, key=lambda p: digest("page " + p)):
        if len(chosen) == args.pages:
            break
        name = Path(page).name
        if name in used_names:
            continue
        candidates = [
            normalize(text[page][first])
            for first, _ in examples(text[page])
            if len(normalize(text[page][first]).split()) >= 4
            and names_of[normalize(text[page][first]).lower()] == {name}
        ]
        if not candidates:
            continue
        query = min(candidates, key=lambda q: digest("example " + page + q))
        chosen.append((page, query))
        used_names.add(name)
    removed = {}
    for page, query in chosen:
        for other in by_name[Path(page).name]:
            removed.setdefault(other, set()).add(query.lower())
    out = Path(args.out_corpus)
    if out.exists():
        shutil.rmtree(out)
    for page in pages:
        lines = text[page]
        drop = removed.get(page, set())
        kept_lines = lines
        if drop:
            kept_lines = []
            skip_until = -1
            spans = {first: last for first, last in examples(lines)}
            for i, line in enumerate(lines):
                if i <= skip_until:
                    continue
                if i in spans and normalize(line).lower() in drop:
                    # The example and the blank line after its command.
                    skip_until = spans[i] + 1
                    continue
                kept_lines.append(line)
        target = out / page
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(kept_lines), encoding="utf-8")
    with open(args.out_questions, "w", encoding="utf-8") as questions:
        for page, query in chosen:
            expected = sorted(by_name[Path(page).name])
            questions.write(
                json.dumps({"query": query, "kind": "question", "expected": expected}) + "\n"
            )
    print(f"{len(chosen)} questions, {len(removed)} pages changed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
