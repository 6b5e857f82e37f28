#!/usr/bin/env python3
"""Generate a reproducible Markdown corpus for the benchmarks.

Usage: benches/gen_corpus.py --files N --out DIR [--seed S] [--size-scale F] [--queries FILE]
                             [--shape docs|proposals]

Writes N Markdown files in nested folders (`t07/s13/doc-0012345.md`): front matter on some,
a title, sections and subsections, paragraphs, bullet lists and fenced code blocks.
Sizes follow a log-normal law (median about 2 KB, from 200 bytes to 60 KB; `--size-scale`
multiplies them). Words come from a generated vocabulary of 30,000 pronounceable words drawn
with Zipf's law, mixed with the words of one of 200 topics per document, so that a query made
of a topic's words has a few hundred relevant documents among many partial matches.

The same seed, N and scale give byte-identical files: each file is drawn from its own
generator seeded from (seed, file number), with Python's `random.Random`, whose integer seeding,
`random()` and `choices()` are stable across Python 3 versions. Standard library only.
`--queries FILE` writes 200 queries (2 to 4 topic words each, one per line) from the same seed.

`--shape proposals` writes design proposals instead (as a repository of enhancement proposals
holds them): every file opens with YAML front matter of 12 to 20 fields (a proposal number such
as `GEP-0042`, title, status, dates, authors and reviewers lists, a feature gate in CamelCase, a
tracking issue URL, labels, a nested `milestone` map), its text names identifiers (the proposal
numbers of others, gates, `--flags`, `config.keys`), and files are medium-sized (median about
8.5 KB: the size scale defaults to 4.7), as in the 1,197 proposals of 15.9 MB the cold-ingest goal
was set on.
"""
import argparse
import bisect
import itertools
import math
import os
import random
import sys

ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
          "z", "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "st", "th", "tr"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "rt", "st", "x"]
SUFFIXES = ["", "", "", "", "s", "ing", "ed", "er", "ly", "tion"]

VOCABULARY = 30_000
TOPICS = 200
TOPIC_WORDS = 120
CODE_WORDS = ["let", "fn", "return", "if", "else", "for", "in", "match", "struct", "impl", "self",
              "new", "Some", "None", "Ok", "Err", "pub", "use", "mut", "const"]


def make_vocabulary(seed):
    rng = random.Random(seed * 7919 + 1)
    words, seen = [], set()
    while len(words) < VOCABULARY:
        syllables = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                       for _ in range(syllables)) + rng.choice(SUFFIXES)
        if word not in seen and 3 <= len(word) <= 16:
            seen.add(word)
            words.append(word)
    # Frequent words are short, as in natural language (stable sort: still reproducible).
    words.sort(key=len)
    # Zipf: weight of rank r is 1 / (r + 2.7) (Mandelbrot's correction for the head).
    cum = list(itertools.accumulate(1.0 / (rank + 2.7) for rank in range(VOCABULARY)))
    topics = []
    for _ in range(TOPICS):
        # Topic words come from the middle and the tail of the vocabulary: rare overall,
        # frequent in the documents of their topic.
        topics.append(rng.sample(words[300:], TOPIC_WORDS))
    return words, cum, topics


class Writer:
    def __init__(self, rng, words, cum, topic):
        self.rng = rng
        self.words = words
        self.cum = cum
        self.total = cum[-1]
        self.topic = topic

    def word(self):
        rng = self.rng
        if rng.random() < 0.22:
            # Topic words, themselves skewed: the first ones are the topic's core.
            return self.topic[int(len(self.topic) * rng.random() ** 2.5)]
        return self.words[bisect.bisect_left(self.cum, rng.random() * self.total)]

    def sentence(self, low=5, high=18):
        n = self.rng.randint(low, high)
        text = " ".join(self.word() for _ in range(n))
        return text[0].upper() + text[1:] + self.rng.choice((".", ".", ".", ".", "?", "!", ":"))

    def paragraph(self):
        return " ".join(self.sentence() for _ in range(self.rng.randint(1, 6)))

    def heading(self, low=1, high=5):
        text = " ".join(self.word() for _ in range(self.rng.randint(low, high)))
        return text[0].upper() + text[1:]

    def bullet_list(self):
        items = []
        for _ in range(self.rng.randint(2, 8)):
            item = self.sentence(3, 12)
            if self.rng.random() < 0.3:
                item += f" Use `{self.word()}_{self.word()}`."
            items.append(("- " if self.rng.random() < 0.7 else "1. ") + item)
        return "\n".join(items)

    def code_block(self):
        rng = self.rng
        lang = rng.choice(("rust", "python", "sh", "json", ""))
        lines = []
        for _ in range(rng.randint(2, 14)):
            indent = "    " * rng.randint(0, 2)
            parts = [rng.choice(CODE_WORDS) if rng.random() < 0.4 else self.word()
                     for _ in range(rng.randint(2, 8))]
            lines.append(indent + " ".join(parts) + rng.choice((";", "", "(", ")", " {", "}")))
        return f"```{lang}\n" + "\n".join(lines) + "\n```"

    def block(self):
        r = self.rng.random()
        if r < 0.62:
            return self.paragraph()
        if r < 0.84:
            return self.bullet_list()
        if r < 0.97:
            return self.code_block()
        return "> " + self.sentence()


STATUSES = ["provisional", "implementable", "implemented", "deferred", "rejected", "withdrawn"]
STAGES = ["alpha", "beta", "stable"]


def camel(w):
    return "".join(w.word().capitalize() for _ in range(w.rng.randint(2, 4)))


def identifier(w, files):
    rng = w.rng
    r = rng.random()
    if r < 0.3:
        return f"GEP-{rng.randrange(files):04d}"
    if r < 0.55:
        return f"`{camel(w)}`"
    if r < 0.8:
        return f"`--{w.word()}-{w.word()}`"
    return f"`{w.word()}.{w.word()}.{w.word()}`"


def proposal_front_matter(w, number, files, title):
    rng = w.rng
    people = lambda: "\n".join(f"  - \"@{w.word()}{rng.randrange(100)}\""
                                for _ in range(rng.randint(1, 4)))
    fields = [
        f"gep-number: \"GEP-{number:04d}\"",
        f"title: \"{title}\"",
        f"status: {rng.choice(STATUSES)}",
        f"creation-date: 20{rng.randint(18, 26)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        f"last-updated: 20{rng.randint(18, 26)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "authors:\n" + people(),
        "reviewers:\n" + people(),
        "approvers:\n" + people(),
        f"owning-sig: sig-{w.word()}",
        f"feature-gate: {camel(w)}",
        f"stage: {rng.choice(STAGES)}",
        f"tracking-issue: https://example.org/issues/{rng.randrange(100_000)}",
    ]
    extra = [
        f"see-also:\n" + "\n".join(f"  - \"GEP-{rng.randrange(files):04d}\""
                                     for _ in range(rng.randint(1, 3))),
        f"replaces: \"GEP-{rng.randrange(files):04d}\"",
        f"labels: [{', '.join(w.word() for _ in range(rng.randint(1, 4)))}]",
        f"milestone:\n  alpha: \"v1.{rng.randint(10, 30)}\"\n  beta: \"v1.{rng.randint(10, 30)}\"",
        f"prr-approvers: [\"@{w.word()}\"]",
        f"disable-supported: {rng.choice(['true', 'false'])}",
        f"metrics: [{', '.join(f'{w.word()}_{w.word()}_total' for _ in range(rng.randint(1, 3)))}]",
        f"component: {w.word()}-{w.word()}",
    ]
    fields += rng.sample(extra, rng.randint(0, len(extra)))
    return "---\n" + "\n".join(fields) + "\n---\n"


def sections(w, out, target, heading_share, identifiers_of=None):
    """Appends headings and blocks to `out` until it holds `target` bytes. With
    `identifiers_of` (the corpus's file count), half the blocks end with identifiers."""
    rng = w.rng
    size = sum(len(part) + 1 for part in out)
    level = 2
    while size < target:
        if rng.random() < heading_share:
            level = 2 if level == 3 or rng.random() < 0.5 else 3
            part = "#" * level + " " + w.heading() + "\n"
        else:
            part = w.block()
            if identifiers_of is not None and rng.random() < 0.5:
                part += " " + " ".join(identifier(w, identifiers_of) for _ in range(rng.randint(1, 3)))
            part += "\n"
        out.append(part)
        size += len(part) + 1


def document(seed, number, words, cum, topics, size_scale, shape="docs", files=0):
    rng = random.Random(seed * 1_000_003 + number)
    topic = rng.randrange(TOPICS)
    w = Writer(rng, words, cum, topics[topic])
    target = int(min(60_000, max(200, rng.lognormvariate(math.log(1_800), 0.95))) * size_scale)
    title = w.heading(2, 6)
    out = []
    if shape == "proposals":
        out.append(proposal_front_matter(w, number, files, title))
        out.append(f"# GEP-{number:04d}: {title}\n")
        sections(w, out, target, heading_share=0.3, identifiers_of=files)
        return "\n".join(out), topic
    if rng.random() < 0.3:
        tags = sorted({w.topic[rng.randrange(10)] for _ in range(rng.randint(1, 3))})
        out.append(f"---\ntitle: {title}\ntags: [{', '.join(tags)}]\nnav_order: {number % 97}\n---\n")
    out.append(f"# {title}\n")
    sections(w, out, target, heading_share=0.35)
    return "\n".join(out), topic


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--size-scale", type=float)
    parser.add_argument("--queries")
    parser.add_argument("--shape", choices=("docs", "proposals"), default="docs")
    args = parser.parse_args()
    if args.size_scale is None:
        args.size_scale = 4.7 if args.shape == "proposals" else 1.0
    words, cum, topics = make_vocabulary(args.seed)
    total = 0
    for number in range(args.files):
        if args.shape == "proposals":
            rel = os.path.join(f"sig-{number % 23:02d}", f"{number:04d}-proposal", "README.md")
        else:
            rel = os.path.join(f"t{number // 2_000:02d}", f"s{(number // 100) % 20:02d}",
                               f"doc-{number:07d}.md")
        path = os.path.join(args.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        text, _ = document(args.seed, number, words, cum, topics, args.size_scale, args.shape,
                           args.files)
        data = text.encode()
        total += len(data)
        with open(path, "wb") as f:
            f.write(data)
    if args.queries:
        rng = random.Random(args.seed * 31 + 7)
        with open(args.queries, "w") as f:
            for _ in range(200):
                topic = topics[rng.randrange(TOPICS)]
                f.write(" ".join(rng.sample(topic[:25], rng.randint(2, 4))) + "\n")
    print(f"{args.files} files, {total} bytes in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
