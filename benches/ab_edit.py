#!/usr/bin/env python3
"""One-file edits, two or more builds side by side.

    python3 benches/ab_edit.py CORPUS STORE RUNS BIN [BIN ...]

Each build gets its own copy of STORE (a store of CORPUS made by any of them; copied to
/tmp/ab-edit-N) and one edit a round, in turn: the file in the middle of CORPUS gets a new last
line, and the build ingests CORPUS. The file is put back at the end, and each copy ingested
again. Prints, for each build, the median and least wall time of an edit and the median CPU
time (user and system, from wait4), which moves less than wall time on a shared machine.
Every edit must report exactly one changed document, or the script stops.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def ingest(binary, store, corpus):
    """Runs one ingest; returns its report, wall and CPU seconds."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [binary, "--store", store, "ingest", corpus, "--json"], stdout=subprocess.PIPE
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        sys.exit(f"{binary} ingest {corpus} failed (wait status {status})")
    return json.loads(out), wall, usage.ru_utime + usage.ru_stime


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    corpus, base, runs, binaries = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    files = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(corpus)
        for name in names
        if name.endswith(".md")
    )
    if not files:
        sys.exit(f"{corpus}: no Markdown file to edit")
    edited = files[len(files) // 2]
    original = open(edited, "rb").read()
    stores = {}
    for n, binary in enumerate(binaries):
        stores[binary] = f"/tmp/ab-edit-{n}"
        shutil.rmtree(stores[binary], ignore_errors=True)
        shutil.copytree(base, stores[binary])
        ingest(binary, stores[binary], corpus)
    wall = {binary: [] for binary in binaries}
    cpu = {binary: [] for binary in binaries}
    try:
        for run in range(runs):
            for n, binary in enumerate(binaries):
                with open(edited, "wb") as file:
                    file.write(original + f"\nedit {run} of build {n}\n".encode())
                report, seconds, cpu_seconds = ingest(binary, stores[binary], corpus)
                if report["documents"]["changed"] != 1:
                    sys.exit(f"{binary}: an edit changed {report['documents']}")
                wall[binary].append(seconds)
                cpu[binary].append(cpu_seconds)
    finally:
        with open(edited, "wb") as file:
            file.write(original)
    for binary in binaries:
        ingest(binary, stores[binary], corpus)
        print(
            f"{binary}: median {statistics.median(wall[binary]) * 1000:.2f} ms, "
            f"least {min(wall[binary]) * 1000:.2f} ms, "
            f"CPU median {statistics.median(cpu[binary]) * 1000:.2f} ms ({runs} edits)"
        )


if __name__ == "__main__":
    main()
