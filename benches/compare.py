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
    for key, style in (("gen-10k", ":"), ("gen-100k", "-")):
        curve = results["cold"].get(key, {}).get("rss_curve_mib")
        if curve:
            memory.plot([t for t, _ in curve], [m for _, m in curve], style, label=f"cold ingest, {key}")
    memory.set_title("Resident memory during a cold ingest")
    memory.set_xlabel("seconds")
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
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--only", default="", help="comma-separated sections to run (default: all)")
    args = p.parse_args()
    LOAD.start()
    b = Bench(args)
    c = Path(args.work) / "corpora"
    queries = c / "queries.txt"
    only = set(filter(None, args.only.split(",")))
    want = lambda section: not only or section in only
    r = b.results
    runs = args.runs
    if want("cold"):
        r["cold"] = {}
        r["cold"]["opensearch-docs"] = b.cold("opensearch-docs", c / "shared9k" / "opensearch-docs", runs)
        r["cold"]["tldr-en"] = b.cold("tldr-en", c / "shared9k" / "tldr-en", runs)
        r["cold"]["gen-1k"] = b.cold("gen-1k", c / "gen-1000", runs)
        r["cold"]["gen-10k"] = b.cold("gen-10k", c / "gen-10000", max(3, runs // 2))
        r["cold"]["gen-100k"] = b.cold("gen-100k", c / "gen-100000", 2)
    if want("noop"):
        r["noop"] = {}
        r["noop"]["shared-9k"] = b.noop("shared-9k", c / "shared9k", runs)
        for n in ("1k", "10k", "100k"):
            r["noop"][f"gen-{n}"] = b.noop(f"gen-{n}", c / f"gen-{n.replace('k', '000')}", runs)
    if want("edit"):
        r["one_edit"] = b.one_edit("gen-100k", c / "gen-100000", max(runs, 20))
    if want("agent"):
        r["keyed"] = b.keyed(args.sample_docs, 2000)
        r["mcp"] = b.agent("gen-100k", queries, 500)
        r["mcp_search_in_process"] = b.search("gen-100k", c / "gen-100000", queries, 3)
    if want("search1m"):
        r["search_1m"] = b.search("gen-1m-chunks", c / "gen-1m-chunks", c / "queries-1m.txt", 3)
    if want("scifact"):
        r["scifact"] = b.scifact()
    r["uptime_end"] = uptime()
    r["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    r["load_samples"] = LOAD.samples
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    previous = {}
    if only and Path(args.out).exists():
        previous = json.loads(Path(args.out).read_text())
    previous.update(r)
    Path(args.out).write_text(json.dumps(previous, indent=1))
    plot(previous, args.plot)
    summary(previous)


def summary(r):
    def ms(s):
        return f"{s * 1000:,.0f} ms" if s >= 0.1 else f"{s * 1000:,.1f} ms"

    rows = []
    for name, v in r.get("noop", {}).items():
        rows.append(f"no-op {name} ({v['files']} files): groundidx {ms(v['groundidx']['median_s'])}, "
                    f"b3sum {ms(v['b3sum']['median_s'])}, find {ms(v['find']['median_s'])} -> "
                    f"{v['ratio_vs_b3sum']:.2f}x b3sum, {v['ratio_vs_find']:.2f}x find")
    if "one_edit" in r:
        v = r["one_edit"]
        rows.append(f"one edit among 100k: {ms(v['one_edit']['median_s'])} vs no-op "
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
        rows.append(f"keyed calls/s {v['keyed_calls_per_s']:.0f} vs bare insert tx/s {v['bare_insert_tx_per_s']:.0f}"
                    f" -> {v['ratio']:.2f}x; kill -9: {v['kill_check']}")
    if "scifact" in r:
        rows.append(f"SciFact: {r['scifact']}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
