#!/usr/bin/env python3
"""The measurements of benches/compare.sh, side by side with their references.

Called by compare.sh (which builds, finds the tools and prepares the corpora); it can be run
alone with the same arguments. Every comparison alternates the commands run by run (the order
rotates each round), reports medians, and records the load average while it ran. Results go to
a JSON file; the plot of no-op and cold-ingest time against corpus size is drawn from it.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


class LoadSampler(threading.Thread):
    """Samples the 1-minute load average every 5 s."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append((time.time(), float(open("/proc/loadavg").read().split()[0])))
            self.stop.wait(5)

    def between(self, start, end):
        values = [v for t, v in self.samples if start - 5 <= t <= end + 5]
        if not values:
            return None
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}


LOAD = LoadSampler()
# Concurrent callers a side in the keyed-calls comparison (the server's calls arriving together
# commit together; the reference writes one transaction per call whatever the concurrency).
KEYED_CLIENTS = 8


class RssSampler(threading.Thread):
    """Samples the resident memory of a process (or, when it runs under /usr/bin/time, of the
    child it started) every 100 ms, as (seconds since `started`, MiB)."""

    def __init__(self, pid, started, out):
        super().__init__(daemon=True)
        self.pid, self.started, self.out = pid, started, out
        self.stop = threading.Event()

    def target(self):
        try:
            children = open(f"/proc/{self.pid}/task/{self.pid}/children").read().split()
        except OSError:
            return None
        return children[0] if children else str(self.pid)

    def run(self):
        while not self.stop.is_set():
            pid = self.target()
            try:
                status = open(f"/proc/{pid}/status").read() if pid else ""
            except OSError:
                status = ""
            match = re.search(r"VmRSS:\s+(\d+) kB", status)
            if match:
                self.out.append((round(time.perf_counter() - self.started, 2),
                                 round(int(match.group(1)) / 1024, 1)))
            self.stop.wait(0.1)


def tree_bytes(path):
    """Bytes of every file under `path` (apparent sizes)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def timed(cmd, check_json=None, env=None):
    """Runs cmd (a list), returns (seconds, stdout)."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    if check_json is not None:
        check_json(json.loads(proc.stdout))
    return seconds, proc.stdout


def peak_rss_kb(stderr_text):
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr_text)
    return int(match.group(1)) if match else None


def alternate(commands, runs, before_each=None):
    """commands: {name: callable returning seconds}. Runs them `runs` rounds, rotating order."""
    names = list(commands)
    times = {name: [] for name in names}
    started = time.time()
    for round_ in range(runs):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            if before_each:
                before_each(name)
            times[name].append(commands[name]())
    ended = time.time()
    return {
        name: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "runs": v}
        for name, v in times.items()
    } | {"_load": LOAD.between(started, ended)}


class Bench:
    def __init__(self, args):
        self.args = args
        self.bin = args.bin
        self.work = Path(args.work)
        self.stores = self.work / "stores"
        self.stores.mkdir(parents=True, exist_ok=True)
        self.results = {"machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "uptime_start": uptime(), "binaries": {"groundidx": self.bin},
                        "source": source()}

    def ingest(self, store, corpus, expect=None, time_v=False, curve=None):
        """Runs one ingest; with `time_v`, under GNU time for the peak RSS. With `curve` (a
        list), the process's RSS is sampled every 100 ms into it as (seconds, MiB)."""
        cmd = [self.bin, "--store", str(store), "ingest", str(corpus), "--json", "--quiet"]
        if time_v:
            cmd = ["/usr/bin/time", "-v"] + cmd
        started = time.perf_counter()
        if curve is None:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        else:
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            sampler = RssSampler(child.pid, started, curve)
            sampler.start()
            out, err = child.communicate()
            sampler.stop.set()
            sampler.join()
            proc = subprocess.CompletedProcess(cmd, child.returncode, out, err)
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"ingest {corpus} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
        report = json.loads(proc.stdout)
        if expect:
            expect(report)
        return seconds, report, peak_rss_kb(proc.stderr.decode())

    # ---- cold ingest, with raw Tantivy and peak RSS ----
    def cold(self, name, corpus, runs, reference=True):
        log(f"cold ingest {name}: {runs} runs each, alternating with raw Tantivy")
        store = self.stores / f"cold-{name}"
        raw = self.stores / f"raw-{name}"
        info = {}

        def ours():
            shutil.rmtree(store, ignore_errors=True)
            curve = []
            seconds, report, rss = self.ingest(store, corpus, time_v=True, curve=curve)
            info.setdefault("rss_kb", []).append(rss)
            info["rss_curve_mib"] = curve
            info["report"] = {k: report[k] for k in ("documents", "chunks", "generation", "duration_ms")}
            info["store_bytes"] = {p.name: tree_bytes(p) if p.is_dir() else p.stat().st_size
                                   for p in store.iterdir()}
            return seconds

        def tantivy():
            shutil.rmtree(raw, ignore_errors=True)
            cmd = ["/usr/bin/time", "-v", self.args.tantivy_ref, "index", str(corpus), str(raw)]
            started = time.perf_counter()
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            seconds = time.perf_counter() - started
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.decode()[-2000:])
            info.setdefault("raw_rss_kb", []).append(peak_rss_kb(proc.stderr.decode()))
            info["raw_report"] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
            return seconds

        commands = {"groundidx": ours}
        if reference:
            commands["tantivy"] = tantivy
        result = alternate(commands, runs)
        shutil.rmtree(raw, ignore_errors=True)
        result.update(info)
        result["peak_rss_kb"] = max(info["rss_kb"])
        result["corpus_bytes"] = tree_bytes(corpus)
        result["store_total_bytes"] = sum(info["store_bytes"].values())
        result["store_ratio_vs_corpus"] = result["store_total_bytes"] / result["corpus_bytes"]
        if reference:
            result["ratio_vs_tantivy"] = result["groundidx"]["median_s"] / result["tantivy"]["median_s"]
        return result

    # ---- no-op re-run against b3sum and find ----
    def noop(self, name, corpus, runs):
        log(f"no-op {name}: {runs} runs each of groundidx, b3sum, find")
        # `find` does not descend into a folder given as a link to it: resolved, the three
        # read the same files.
        corpus = Path(corpus).resolve()
        store = self.stores / f"cold-{name}"
        if not (store / "ledger.sqlite").exists():
            self.ingest(store, corpus)
        # Let the racy-clean window (2 s) pass, and refresh the stat cache once.
        time.sleep(2.2)
        self.ingest(store, corpus)
        n_docs = {}

        def expect(report):
            docs = report["documents"]
            assert docs["added"] == docs["changed"] == docs["removed"] == 0, report
            assert report["chunks"]["added"] == report["chunks"]["removed"] == 0, report
            n_docs["unchanged"] = docs["unchanged"]

        b3 = f"find {corpus} -type f -print0 | xargs -0 {self.args.b3sum} > /dev/null"
        fd = f"find {corpus} -type f -printf '%s %T@\\n' > /dev/null"
        result = alternate({
            "groundidx": lambda: self.ingest(store, corpus, expect=expect)[0],
            "b3sum": lambda: timed(["bash", "-c", b3])[0],
            "find": lambda: timed(["bash", "-c", fd])[0],
        }, runs)
        files = int(subprocess.run(["bash", "-c", f"find {corpus} -type f | wc -l"],
                                   capture_output=True, text=True).stdout)
        result.update({
            "files": files, "documents_unchanged": n_docs["unchanged"],
            "ratio_vs_b3sum": result["groundidx"]["median_s"] / result["b3sum"]["median_s"],
            "ratio_vs_find": result["groundidx"]["median_s"] / result["find"]["median_s"],
        })
        return result

    # ---- one edited file against the no-op ----
    def one_edit(self, name, corpus, runs):
        log(f"one edit among {name}: {runs} runs each of edit and no-op")
        store = self.stores / f"cold-{name}"
        target = sorted((Path(corpus) / "t00" / "s00").glob("*.md"))[0]
        original = target.read_bytes()
        counter = [0]
        durations = []

        def edit():
            counter[0] += 1
            target.write_bytes(original + f"\n\nEdit number {counter[0]}.\n".encode())
            # An mtime safely in the past, so the next no-op trusts the stat cache at once.
            past = time.time() - 10 - counter[0] * 0.001
            os.utime(target, (past, past))
            seconds, report, _ = self.ingest(store, corpus)
            assert report["documents"]["changed"] == 1, report
            durations.append(report["duration_ms"])
            return seconds

        def noop():
            seconds, report, _ = self.ingest(store, corpus)
            assert report["chunks"]["added"] == 0 and report["documents"]["changed"] == 0, report
            return seconds

        noop()
        try:
            result = alternate({"one_edit": edit, "noop": noop}, runs)
        finally:
            target.write_bytes(original)
            past = time.time() - 10
            os.utime(target, (past, past))
            self.ingest(store, corpus)
        result["ratio_vs_noop"] = result["one_edit"]["median_s"] / result["noop"]["median_s"]
        result["edit_duration_ms"] = durations
        result["slowest_vs_median"] = result["one_edit"]["max_s"] / result["one_edit"]["median_s"]
        result["corpus"] = name
        return result

    # ---- peers: qmd's lexical path, every step a process, beside groundidx ----
    def peer_qmd(self, name, corpus, queries, runs, cold_runs=None):
        """`queries`: a few queries, asked in turn; `cold_runs` (default max(3, runs // 2)) the
        cold ingests a side."""
        """qmd (`collection add`, `update`, `search`) against groundidx (`ingest`, `search`) on
        the same copy of a corpus: cold, no-op, one edited file, and one search as a process."""
        qmd = self.args.qmd
        home = self.work / "peers" / f"qmd-home-{name}"
        env = dict(os.environ, XDG_CACHE_HOME=str(home / "cache"), XDG_CONFIG_HOME=str(home / "config"),
                   PATH=f"{Path(self.args.node).parent}:{os.environ['PATH']}", NO_COLOR="1")
        store = self.stores / f"peer-{name}"
        version = subprocess.run([qmd, "--version"], capture_output=True, text=True, env=env).stdout.strip()
        log(f"peers on {name}: qmd {version}, {runs} runs each")

        def qmd_run(*args):
            seconds, out = timed([qmd, *args], env=env)
            return seconds, out.decode()

        def qmd_cold():
            shutil.rmtree(home, ignore_errors=True)
            seconds, out = qmd_run("collection", "add", str(corpus), "--name", "bench")
            assert "Indexed:" in out, out
            return seconds

        def ours_cold():
            shutil.rmtree(store, ignore_errors=True)
            return self.ingest(store, corpus)[0]

        node = subprocess.run([self.args.node, "--version"], capture_output=True, text=True).stdout.strip()
        result = {"qmd_version": version, "node_version": node}
        result["cold"] = alternate({"groundidx": ours_cold, "qmd": qmd_cold},
                                   cold_runs or max(3, runs // 2))
        time.sleep(2.2)  # past the racy-clean window, then one run to refresh both stat caches
        self.ingest(store, corpus)
        qmd_run("update")

        def ours_noop():
            seconds, report, _ = self.ingest(store, corpus)
            assert report["documents"]["changed"] == report["documents"]["added"] == 0, report
            return seconds

        def qmd_noop():
            seconds, out = qmd_run("update")
            assert "0 new, 0 updated" in out, out
            return seconds

        result["noop"] = alternate({"groundidx": ours_noop, "qmd": qmd_noop}, runs)
        pages = sorted(Path(corpus).rglob("*.md"))
        target = pages[len(pages) // 2]
        original = target.read_bytes()
        counter = [0]

        def edit():
            counter[0] += 1
            target.write_bytes(original + f"\n\nEdit number {counter[0]}.\n".encode())
            past = time.time() - 10 - counter[0] * 0.001
            os.utime(target, (past, past))

        def ours_edit():
            edit()
            seconds, report, _ = self.ingest(store, corpus)
            assert report["documents"]["changed"] == 1, report
            return seconds

        def qmd_edit():
            edit()
            seconds, out = qmd_run("update")
            assert "1 updated" in out, out
            return seconds

        try:
            result["one_edit"] = alternate({"groundidx": ours_edit, "qmd": qmd_edit}, runs)
        finally:
            target.write_bytes(original)
            past = time.time() - 10
            os.utime(target, (past, past))
        words = list(queries)
        turn = [0]

        def next_query():
            turn[0] += 1
            return words[turn[0] % len(words)]

        def ours_search():
            q = next_query()
            return timed([self.bin, "--store", str(store), "search", q, "--top-k", "10", "--json"],
                         check_json=lambda answer: answer["hits"] is not None)[0]

        def qmd_search():
            q = next_query()
            return qmd_run("search", q, "-n", "10", "--format", "json")[0]

        result["search"] = alternate({"groundidx": ours_search, "qmd": qmd_search}, max(runs, 2 * len(words)))
        result["queries"] = words
        for step in ("cold", "noop", "one_edit", "search"):
            result[step]["qmd_over_groundidx"] = (result[step]["qmd"]["median_s"]
                                                 / result[step]["groundidx"]["median_s"])
        shutil.rmtree(home, ignore_errors=True)
        return result

    # ---- searches per second with 1 and 8 HTTP clients (benches/http_clients.sh, wrk) ----
    def http_clients(self, docs):
        log(f"HTTP clients on {docs}: 1 and 8, wrk")
        started = time.time()
        env = dict(os.environ, CLIENTS="1 8", ROUNDS="3", SECONDS_EACH="4")
        out = subprocess.run(["bash", str(Path(__file__).with_name("http_clients.sh")), str(docs), self.bin],
                             capture_output=True, text=True, check=True, env=env).stdout
        per_s = {}
        for line in out.splitlines():
            cells = line.split()
            if len(cells) == 2 and cells[0].isdigit():
                per_s[int(cells[0])] = float(cells[1])
        return {"searches_per_s": per_s, "ratio_8_vs_1": per_s[8] / per_s[1],
                "_load": LOAD.between(started, time.time())}

    # ---- embedding: chunks/s against sentence-transformers, and the model's share of an ingest ----
    def embedding(self, corpus, cold_without_s):
        model = self.args.model
        if not model or not (Path(model) / "model.safetensors").exists():
            raise RuntimeError(f"no model at {model}")
        log("embedding throughput against sentence-transformers (benches/embed_throughput.sh)")
        work = self.work / "embed"
        env = dict(os.environ, GROUNDIDX_BENCH_WORK=str(work), GROUNDIDX_BENCH_RUNS="3")
        started = time.time()
        subprocess.run(["bash", str(Path(__file__).with_name("embed_throughput.sh")),
                        self.args.corpora, model], check=True, env=env, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(work / "embed-results.jsonl") if line.strip()]
        result = {"throughput": rows, "_load": LOAD.between(started, time.time())}
        for corpus_name in dict.fromkeys(row["corpus"] for row in rows):
            sides = {row["side"]: row for row in rows if row["corpus"] == corpus_name}
            result[f"cosine_{corpus_name}"] = sides["cosine"]
            result[f"ratio_{corpus_name}"] = (sides["candle"]["median_chunks_per_s"]
                                             / sides["reference"]["median_chunks_per_s"])
            result[f"ratio_{corpus_name}_float32"] = (sides["candle-float32"]["median_chunks_per_s"]
                                                     / sides["reference"]["median_chunks_per_s"])
        log(f"cold ingest of {corpus} with the model, once")
        store = self.stores / "embed-cold"
        shutil.rmtree(store, ignore_errors=True)
        cmd = [self.bin, "--store", str(store), "ingest", str(corpus), "--json", "--quiet",
               "--embed-model", model]
        seconds, out = timed(cmd)
        report = json.loads(out)
        result["cold_with_model_s"] = seconds
        result["cold_without_model_s"] = cold_without_s
        result["embedding_report"] = report["embedding"]
        result["model_share"] = 1 - cold_without_s / seconds
        shutil.rmtree(store, ignore_errors=True)
        return result

    # ---- one generated corpus of 1M files: every figure once or a few times ----
    def scale(self, name, corpus, queries):
        result = {"cold": self.cold(name, corpus, 1)}
        result["noop"] = self.noop(name, corpus, 3)
        result["one_edit"] = self.one_edit(name, corpus, 5)
        result["search"] = self.search(name, corpus, queries, 1)
        return result

    # ---- search: groundidx in process vs Tantivy's own query ----
    def search(self, name, corpus, queries, rounds):
        store = self.stores / f"cold-{name}"
        if not (store / "ledger.sqlite").exists():
            log(f"cold ingest {name} for search (once)")
            seconds, report, rss = self.ingest(store, corpus, time_v=True)
            self.results.setdefault("search_ingest", {})[name] = {
                "seconds": seconds, "peak_rss_kb": rss,
                "report": {k: report[k] for k in ("documents", "chunks", "generation")}}
        log(f"search on {name}: in process, alternating with Tantivy alone")
        started = time.time()
        _, out = timed([self.args.tantivy_ref, "search", str(store), str(queries), str(rounds)])
        result = json.loads(out.decode().strip().splitlines()[-1])
        result["_load"] = LOAD.between(started, time.time())
        for p in ("p50_us", "p99_us"):
            result[f"ratio_{p[:3]}_vs_tantivy"] = result["groundidx_search"][p] / result["tantivy_top10"][p]
            result[f"ratio_{p[:3]}_vs_tantivy_load_docs"] = (
                result["groundidx_search"][p] / result["tantivy_top10_load_docs"][p])
        return result

    # ---- MCP stdio vs in process; keyed calls vs bare inserts; kill -9 ----
    def agent(self, name, queries, calls):
        store = self.stores / f"cold-{name}"
        log(f"MCP stdio and HTTP on {name}: {calls} calls")
        started = time.time()
        out = subprocess.run([sys.executable, str(Path(__file__).with_name("agent_latency.py")),
                              "--bin", self.bin, "--store", str(store), "--queries", str(queries),
                              "--calls", str(calls), "--json"],
                             capture_output=True, text=True, check=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        result["_load"] = LOAD.between(started, time.time())
        log(f"keyed calls in process on {name}: {calls} calls")
        _, out = timed([self.args.sqlite_ref, "keyed", str(store), str(calls), "5", str(queries)])
        result["in_process_keyed"] = json.loads(out.decode().strip().splitlines()[-1])
        return result

    def keyed(self, docs, calls):
        store = self.stores / "keyed-sample"
        shutil.rmtree(store, ignore_errors=True)
        self.ingest(store, docs)
        log(f"keyed calls vs bare SQLite inserts: {calls} each, alternating in blocks")
        started = time.time()
        _, out = timed([self.args.sqlite_ref, "keyed", str(store), str(calls), "10"])
        result = json.loads(out.decode().strip().splitlines()[-1])
        log(f"keyed calls vs bare SQLite inserts, {KEYED_CLIENTS} clients a side (group commit)")
        _, out = timed([self.args.sqlite_ref, "keyed", str(store), str(calls), "10",
                        "--clients", str(KEYED_CLIENTS)])
        result["concurrent"] = json.loads(out.decode().strip().splitlines()[-1])
        result["_load"] = LOAD.between(started, time.time())
        log("kill -9 durability check over HTTP")
        out = subprocess.run([sys.executable, str(Path(__file__).with_name("agent_latency.py")),
                              "--bin", self.bin, "--store", str(store), "--kill-check", "--json"],
                             capture_output=True, text=True, check=True).stdout
        result["kill_check"] = json.loads(out.strip().splitlines()[-1])
        return result

    def scifact(self):
        script = Path(self.args.corpora).parent / "eval" / "scifact-ndcg"
        if not script.exists():
            return {"skipped": f"{script} not found"}
        log("SciFact nDCG@10")
        proc = subprocess.run([sys.executable, str(script), "--bin", self.bin],
                              capture_output=True, text=True)
        match = re.search(r"ndcg@10=([0-9.]+) recall@100=([0-9.]+)", proc.stdout)
        if not match:
            return {"error": proc.stdout[-500:] + proc.stderr[-500:]}
        return {"ndcg_at_10": float(match.group(1)), "recall_at_100": float(match.group(2))}


# Queries for the peers' search as a process: what a person would ask of each corpus (the
# generated corpora: the first queries of their queries file).
PEER_QUERIES = {
    "tldr-en": ["extract a tar archive", "list open ports", "git rebase interactive",
                "resize an image", "ssh tunnel port forwarding"],
    "opensearch-docs": ["index template mappings", "k-NN vector search", "snapshot repository",
                        "cluster health", "ingest pipeline processor"],
}


def peer_corpora(c):
    """Every corpus the peers section runs qmd on: (name, folder, queries, runs, cold runs).
    `GROUNDIDX_BENCH_PEERS` (comma-separated names) runs some of them."""
    generated = (c / "queries.txt").read_text().splitlines()[:5] if (c / "queries.txt").exists() else []
    proposals = (c / "queries-proposals.txt").read_text().splitlines()[:5] \
        if (c / "queries-proposals.txt").exists() else []
    every = [(name, c / "shared9k" / name, qs, None, None) for name, qs in PEER_QUERIES.items()]
    every += [("gen-proposals", c / "gen-proposals", proposals, None, None),
              ("gen-1k", c / "gen-1000", generated, None, None),
              ("gen-10k", c / "gen-10000", generated, 5, 3),
              ("gen-100k", c / "gen-100000", generated, 3, 1)]
    wanted = set(filter(None, os.environ.get("GROUNDIDX_BENCH_PEERS", "").split(",")))
    return [entry for entry in every if not wanted or entry[0] in wanted]


def machine():
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1))
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory_gb": round(mem_kb / 1024 / 1024, 1),
            "kernel": platform.release()}


def source():
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "modified": git("status", "--short").splitlines()}


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def plot(results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes, noop, b3, find, cold, raw = [], [], [], [], [], []
    for n in ("1k", "10k", "100k"):
        key = f"gen-{n}"
        if key not in results.get("noop", {}) or key not in results.get("cold", {}):
            continue
        files = results["noop"][key]["files"]
        sizes.append(files)
        noop.append(results["noop"][key]["groundidx"]["median_s"])
        b3.append(results["noop"][key]["b3sum"]["median_s"])
        find.append(results["noop"][key]["find"]["median_s"])
        cold.append(results["cold"][key]["groundidx"]["median_s"])
        raw.append(results["cold"][key].get("tantivy", {}).get("median_s"))
    big = results.get("scale", {}).get("gen-1m")
    if sizes and big:
        sizes.append(big["noop"]["files"])
        noop.append(big["noop"]["groundidx"]["median_s"])
        b3.append(big["noop"]["b3sum"]["median_s"])
        find.append(big["noop"]["find"]["median_s"])
        cold.append(big["cold"]["groundidx"]["median_s"])
        raw.append(big["cold"].get("tantivy", {}).get("median_s"))
    if not sizes:
        return
    fig, (left, right, memory) = plt.subplots(1, 3, figsize=(16, 4.2))
    left.plot(sizes, noop, "o-", label="groundidx no-op re-run")
    left.plot(sizes, b3, "s--", label="b3sum over every file")
    left.plot(sizes, find, "^:", label="find -printf size, mtime")
    left.set_title("No-op re-run (medians)")
    right.plot(sizes, cold, "o-", label="groundidx cold ingest")
    if all(r is not None for r in raw):
        right.plot(sizes, raw, "s--", label="raw Tantivy, ~1,000-char pieces")
    right.set_title("Cold ingest (medians)")
    curves = [(key, results["cold"].get(key, {}).get("rss_curve_mib"), style)
              for key, style in (("gen-10k", ":"), ("gen-100k", "-"))]
    if big:
        curves.append(("gen-1m", big["cold"].get("rss_curve_mib"), "--"))
    for key, curve, style in curves:
        if curve:
            memory.plot([t for t, _ in curve], [m for _, m in curve], style, label=f"cold ingest, {key}")
    memory.set_title("Resident memory during a cold ingest")
    memory.set_xscale("log")
    memory.set_xlabel("seconds (log)")
    memory.set_ylabel("MiB")
    memory.grid(True, alpha=0.3)
    memory.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("files (generated corpus)")
        ax.set_ylabel("seconds")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"groundidx, {results['machine']['nproc']} cores, {results['machine']['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--tantivy-ref", required=True)
    p.add_argument("--sqlite-ref", required=True)
    p.add_argument("--b3sum", required=True)
    p.add_argument("--corpora", required=True, help="the shared corpora folder")
    p.add_argument("--work", required=True, help="prepared corpora under WORK/corpora")
    p.add_argument("--sample-docs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--plot", required=True)
    p.add_argument("--qmd", help="qmd's executable (peers)")
    p.add_argument("--node", help="the node executable qmd runs on (peers)")
    p.add_argument("--model", help="a sentence-transformers folder (embed)")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--only", default="", help="comma-separated sections to run (default: all)")
    args = p.parse_args()
    LOAD.start()
    b = Bench(args)
    c = Path(args.work) / "corpora"
    queries = c / "queries.txt"
    only = set(filter(None, args.only.split(",")))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # A partial run (--only) keeps the other sections of the last run's results.
    r = json.loads(out.read_text()) if only and out.exists() else {}
    r.update(b.results)
    runs = args.runs

    def section(name, measure):
        """Runs one section unless --only leaves it out. A failure is recorded in its place and
        the run goes on; the results are written after every section, so a late failure or an
        interrupt loses nothing measured before it."""
        if only and name not in only:
            return
        try:
            r[name] = measure()
        except Exception as e:
            log(f"section {name} failed: {e!r}")
            r[name] = {"error": repr(e)[-2000:]}
        r["load_samples"] = LOAD.samples
        out.write_text(json.dumps(r, indent=1))

    section("cold", lambda: {
        "opensearch-docs": b.cold("opensearch-docs", c / "shared9k" / "opensearch-docs", runs),
        "tldr-en": b.cold("tldr-en", c / "shared9k" / "tldr-en", runs),
        "gen-1k": b.cold("gen-1k", c / "gen-1000", runs),
        "gen-10k": b.cold("gen-10k", c / "gen-10000", max(3, runs // 2)),
        "gen-100k": b.cold("gen-100k", c / "gen-100000", 2),
        "gen-proposals": b.cold("gen-proposals", c / "gen-proposals", runs),
    })
    section("noop", lambda: {"shared-9k": b.noop("shared-9k", c / "shared9k", runs)} | {
        f"gen-{n}": b.noop(f"gen-{n}", c / f"gen-{n.replace('k', '000')}", runs) for n in ("1k", "10k", "100k")})
    section("one_edit", lambda: b.one_edit("gen-100k", c / "gen-100000", max(runs, 20)))
    section("keyed", lambda: b.keyed(args.sample_docs, 2000))
    section("mcp", lambda: b.agent("gen-100k", queries, 500))
    section("mcp_search_in_process", lambda: b.search("gen-100k", c / "gen-100000", queries, 3))
    section("search_1m", lambda: b.search("gen-1m-chunks", c / "gen-1m-chunks", c / "queries-1m.txt", 3))
    section("scifact", b.scifact)
    # With `GROUNDIDX_BENCH_PEERS`, the corpora run join those of the last results.
    kept_peers = r.get("peers", {}) if os.environ.get("GROUNDIDX_BENCH_PEERS") else {}
    kept_peers = {} if "error" in kept_peers else kept_peers
    section("peers", lambda: kept_peers | {
        name: b.peer_qmd(name, folder, qs, peer_runs or runs, cold_runs)
        for name, folder, qs, peer_runs, cold_runs in peer_corpora(c)})
    section("http", lambda: b.http_clients(c / "shared9k" / "opensearch-docs"))
    section("embed", lambda: b.embedding(c / "shared9k" / "tldr-en",
                                         r["cold"]["tldr-en"]["groundidx"]["median_s"]))
    section("scale", lambda: {"gen-1m": b.scale("gen-1m", c / "gen-1000000", queries)})
    r["uptime_end"] = uptime()
    r["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    r["load_samples"] = LOAD.samples
    out.write_text(json.dumps(r, indent=1))
    plot(without_errors(r), args.plot)
    summary(r)


def without_errors(r):
    """The results without the sections that failed (their errors are printed by `summary`)."""
    return {k: v for k, v in r.items() if not (isinstance(v, dict) and "error" in v)}


def summary(r):
    for name, v in r.items():
        if isinstance(v, dict) and "error" in v:
            print(f"section {name} FAILED: {v['error'][:300]}")
    r = without_errors(r)

    def ms(s):
        return f"{s * 1000:,.0f} ms" if s >= 0.1 else f"{s * 1000:,.1f} ms"

    rows = []
    for name, v in r.get("noop", {}).items():
        rows.append(f"no-op {name} ({v['files']} files): groundidx {ms(v['groundidx']['median_s'])}, "
                    f"b3sum {ms(v['b3sum']['median_s'])}, find {ms(v['find']['median_s'])} -> "
                    f"{v['ratio_vs_b3sum']:.2f}x b3sum, {v['ratio_vs_find']:.2f}x find")
    if "one_edit" in r:
        v = r["one_edit"]
        rows.append(f"one edit among {v.get('corpus', 'gen-100k')}: {ms(v['one_edit']['median_s'])} vs no-op "
                    f"{ms(v['noop']['median_s'])} -> {v['ratio_vs_noop']:.2f}x; slowest "
                    f"{ms(v['one_edit']['max_s'])} = {v.get('slowest_vs_median', 0):.2f}x the median")
    for name, v in r.get("cold", {}).items():
        line = (f"cold {name}: groundidx {ms(v['groundidx']['median_s'])}, peak RSS {v['peak_rss_kb'] / 1024:.0f} MiB, "
                f"store {v.get('store_total_bytes', 0) / 1e6:.1f} MB = {v.get('store_ratio_vs_corpus', 0):.2f}x corpus")
        if "tantivy" in v:
            line += f"; raw Tantivy {ms(v['tantivy']['median_s'])} -> {v['ratio_vs_tantivy']:.2f}x"
        rows.append(line)
    for key in ("search_1m", "mcp_search_in_process"):
        if key in r:
            v = r[key]
            rows.append(f"search {key} ({v['chunks']} chunks): groundidx p50 {v['groundidx_search']['p50_us']:.0f} us "
                        f"p99 {v['groundidx_search']['p99_us']:.0f} us; Tantivy top 10 p50 "
                        f"{v['tantivy_top10']['p50_us']:.0f} us p99 {v['tantivy_top10']['p99_us']:.0f} us; "
                        f"with docs p50 {v['tantivy_top10_load_docs']['p50_us']:.0f} us -> "
                        f"{v['ratio_p50_vs_tantivy']:.1f}x / {v['ratio_p99_vs_tantivy']:.1f}x")
    if "mcp" in r:
        v = r["mcp"]
        k = v["in_process_keyed"]
        rows.append(f"MCP stdio search_docs p50 {v['mcp_stdio']['p50_ms']:.2f} ms p99 {v['mcp_stdio']['p99_ms']:.2f} ms; "
                    f"in-process keyed call p50 {k['keyed_call_p50_us'] / 1000:.2f} ms p99 {k['keyed_call_p99_us'] / 1000:.2f} ms")
    if "keyed" in r:
        v = r["keyed"]
        c = v["concurrent"]
        rows.append(f"keyed calls/s {v['keyed_calls_per_s']:.0f} vs bare insert tx/s {v['bare_insert_tx_per_s']:.0f}"
                    f" -> {v['ratio']:.2f}x; {c['clients']} clients a side: {c['keyed_calls_per_s']:.0f} vs "
                    f"{c['bare_insert_tx_per_s']:.0f} -> {c['ratio']:.2f}x; kill -9: {v['kill_check']}")
    if "scifact" in r:
        rows.append(f"SciFact: {r['scifact']}")
    for name, v in r.get("peers", {}).items():
        rows.append(f"{v['qmd_version']} on {name}: " + "; ".join(
            f"{step} groundidx {ms(v[step]['groundidx']['median_s'])} qmd {ms(v[step]['qmd']['median_s'])}"
            f" -> {v[step]['qmd_over_groundidx']:.1f}x" for step in ("cold", "noop", "one_edit", "search")))
    if "http" in r:
        v = r["http"]
        rows.append(f"HTTP searches/s: {v['searches_per_s']} -> 8 clients {v['ratio_8_vs_1']:.2f}x one")
    if "embed" in r:
        v = r["embed"]
        rows.append("embedding vs sentence-transformers: " + ", ".join(
            f"{k[6:]} {x:.2f}x" for k, x in v.items() if k.startswith("ratio_")) + "; " + ", ".join(
            f"{k[7:]} {c['kernel']} cosine to float32 min {c['cosine_min']:.5f}"
            for k, c in v.items() if k.startswith("cosine_"))
            + f"; tldr-en cold with the model {v['cold_with_model_s']:.1f} s, without "
              f"{v['cold_without_model_s']:.2f} s -> model share {v['model_share']:.3f}")
    for name, v in r.get("scale", {}).items():
        cold, noop, edit, search = v["cold"], v["noop"], v["one_edit"], v["search"]
        rows.append(f"scale {name} ({noop['files']} files, {search['chunks']} chunks): cold {ms(cold['groundidx']['median_s'])}"
                    f" vs raw Tantivy {ms(cold['tantivy']['median_s'])} -> {cold['ratio_vs_tantivy']:.2f}x, peak RSS "
                    f"{cold['peak_rss_kb'] / 1024:.0f} MiB, store {cold['store_ratio_vs_corpus']:.2f}x corpus; no-op "
                    f"{ms(noop['groundidx']['median_s'])} = {noop['ratio_vs_b3sum']:.2f}x b3sum, {noop['ratio_vs_find']:.2f}x find;"
                    f" one edit {edit['ratio_vs_noop']:.2f}x no-op; search p50 {search['groundidx_search']['p50_us']:.0f} us"
                    f" p99 {search['groundidx_search']['p99_us']:.0f} us = {search['ratio_p50_vs_tantivy']:.1f}x Tantivy")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
