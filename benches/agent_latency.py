#!/usr/bin/env python3
"""Round-trip latency of the agent tool and keyed-call throughput, whole-process.

Usage: benches/agent_latency.py --bin target/release/groundidx (--docs DIR | --store STORE)
       [--calls 500] [--queries FILE] [--json] [--kill-check]
       [--clients 1,2,4,8 [--seconds 5] [--rounds 3] [--bin OTHER ...]]

Ingests DIR into a temporary store (or uses the existing STORE), then measures, in one run:
  - search_docs over MCP stdio (`groundidx mcp`), one call at a time, each with a fresh key;
  - search_docs over HTTP (`POST /v1/tools/search_docs` on `groundidx serve`), the same;
  - keyed calls per second over HTTP, one client: each call with a new key (search, then the
    audit + usage + key transaction), and each key again (replays: a lookup, no search).
Prints p50 and p99 in milliseconds and calls per second; `--json` adds one JSON line.
`--kill-check` instead checks that keyed calls are durable against kill -9: it makes keyed
calls over HTTP from a thread, kills the server with SIGKILL at a random moment, and checks
that every call that got its answer is in `groundidx audit`.
`--clients 1,2,4,8` instead measures searches per second over HTTP with that many concurrent
clients (each its own connection, each call with a fresh key, for `--seconds`), for every `--bin`
given (say, a build before and after a change), each on a store it ingested itself from --docs
(or all on --store), alternating binaries each
round, and prints the median of `--rounds` per binary and client count side by side.
Standard library only.
"""
import argparse
import http.client
import json
import os
import random
import signal
import statistics
import threading
import subprocess
import sys
import tempfile
import time

QUERIES = [
    "rotate the signing key", "list files in a directory", "compress a folder with tar",
    "show running processes", "search text in files", "create a new user", "change file permissions",
    "download a file", "kill a process by name", "show disk usage", "git commit all changes",
    "set an environment variable", "query dsl match", "index settings", "snapshot restore",
]


def pct(values, p):
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


def report(name, seconds):
    ms = [s * 1000 for s in seconds]
    print(f"{name:<34} n={len(ms):<5} p50={pct(ms, 50):7.2f} ms  p99={pct(ms, 99):7.2f} ms  "
          f"mean={statistics.mean(ms):7.2f} ms")
    return {"n": len(ms), "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99), "mean_ms": statistics.mean(ms)}


def mcp_stdio(binary, store, calls):
    proc = subprocess.Popen([binary, "--store", store, "mcp", "--rate-limit", "1000000/60s"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, bufsize=1)

    def send(message):
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def receive(expected_id):
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("groundidx mcp closed stdout")
            message = json.loads(line)
            if message.get("id") == expected_id:
                return message

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    receive(0)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    times = []
    run = f"bench-{os.getpid()}-{time.time_ns()}"
    for i in range(calls):
        started = time.perf_counter()
        send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {
            "name": "search_docs", "arguments": {"query": QUERIES[i % len(QUERIES)], "top_k": 10},
            "_meta": {"groundidx/idempotencyKey": f"{run}/stdio/{i}"}}})
        answer = receive(i + 1)
        times.append(time.perf_counter() - started)
        if answer["result"].get("isError"):
            raise RuntimeError(f"tool error: {answer}")
    proc.stdin.close()
    proc.wait(timeout=10)
    return times


def start_server(binary, store):
    proc = subprocess.Popen([binary, "--store", store, "serve", "--listen", "127.0.0.1:0",
                             "--rate-limit", "1000000/60s"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    port = int(line.strip().rsplit(":", 1)[1])
    return proc, port


def http_calls(port, calls, key_of):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    times = []
    for i in range(calls):
        body = json.dumps({"query": QUERIES[i % len(QUERIES)], "top_k": 10})
        started = time.perf_counter()
        conn.request("POST", "/v1/tools/search_docs", body=body,
                     headers={"Content-Type": "application/json", "Idempotency-Key": key_of(i)})
        response = conn.getresponse()
        response.read()
        times.append(time.perf_counter() - started)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
    conn.close()
    return times


def throughput(binary, store, clients, seconds):
    """Searches per second with `clients` concurrent HTTP clients on one `serve`."""
    server, port = start_server(binary, store)
    run = f"conc-{os.getpid()}-{time.time_ns()}"
    counts = [0] * clients
    errors = []
    stop = threading.Event()
    go = threading.Barrier(clients + 1)

    def client(c):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        i = 0
        go.wait()
        while not stop.is_set():
            body = json.dumps({"query": QUERIES[(c + i) % len(QUERIES)], "top_k": 10})
            conn.request("POST", "/v1/tools/search_docs", body=body,
                         headers={"Content-Type": "application/json",
                                  "Idempotency-Key": f"{run}/{c}/{i}"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                errors.append(response.status)
                return
            counts[c] += 1
            i += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    try:
        for thread in threads:
            thread.start()
        go.wait()
        started = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        elapsed = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=10)
    if errors:
        raise RuntimeError(f"HTTP {errors[0]} under {clients} clients")
    return sum(counts) / elapsed


def concurrency(binaries, stores, clients, seconds, rounds):
    """`stores` maps each binary to its store (each ingested by its own binary, since stores of
    different versions may not open in the other)."""
    results = {b: {n: [] for n in clients} for b in binaries}
    for _ in range(rounds):
        for n in clients:
            for binary in binaries:
                results[binary][n].append(throughput(binary, stores[binary], n, seconds))
    print("searches per second over HTTP, median of %d rounds of %g s" % (rounds, seconds))
    print("clients " + "".join(f"{os.path.basename(b):>24}" for b in binaries))
    for n in clients:
        print(f"{n:>7} " + "".join(f"{statistics.median(results[b][n]):>24.1f}" for b in binaries))
    return {b: {str(n): statistics.median(v) for n, v in r.items()} for b, r in results.items()}


def kill_check(binary, store):
    """SIGKILL the server while keyed calls are in flight; every answered call must be audited."""
    server, port = start_server(binary, store)
    run = f"kill-{os.getpid()}-{time.time_ns()}"
    answered = []
    stop = threading.Event()

    def caller():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        i = 0
        while not stop.is_set():
            key = f"{run}/{i}"
            try:
                conn.request("POST", "/v1/tools/search_docs",
                             body=json.dumps({"query": QUERIES[i % len(QUERIES)], "top_k": 5}),
                             headers={"Content-Type": "application/json", "Idempotency-Key": key})
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                return
            if response.status == 200:
                answered.append(key)
            i += 1

    thread = threading.Thread(target=caller)
    thread.start()
    time.sleep(random.uniform(1.0, 2.0))
    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    stop.set()
    thread.join(timeout=15)
    out = subprocess.run([binary, "--store", store, "audit", "--since", "1h", "--json"],
                         capture_output=True, text=True, check=True).stdout
    audited = {e["key"] for e in json.loads(out)["events"] if e["key"].startswith(run + "/")}
    missing = [k for k in answered if k not in audited]
    result = {"answered": len(answered), "audited": len(audited), "missing": len(missing)}
    print(f"kill -9 check: {len(answered)} calls answered before SIGKILL, {len(audited)} audited, "
          f"{len(missing)} answered but missing")
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", action="append",
                        help="the groundidx binary (target/release/groundidx); several with --clients")
    parser.add_argument("--docs")
    parser.add_argument("--store", help="an existing store (nothing is ingested)")
    parser.add_argument("--queries", help="a file of queries, one a line")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="print the results as a last JSON line")
    parser.add_argument("--kill-check", action="store_true")
    parser.add_argument("--clients", help="concurrent HTTP clients to measure, e.g. 1,2,4,8")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binaries = args.bin or ["target/release/groundidx"]
    args.bin = binaries[0]
    if not args.docs and not args.store:
        parser.error("give --docs or --store")
    if args.queries:
        with open(args.queries) as f:
            QUERIES[:] = [line.strip() for line in f if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store
        if not store:
            store = os.path.join(tmp, "store")
            subprocess.run([args.bin, "--store", store, "ingest", args.docs, "--quiet"], check=True)
        if args.clients:
            clients = [int(n) for n in args.clients.split(",")]
            stores = {binaries[0]: store}
            for i, binary in enumerate(binaries[1:], start=1):
                stores[binary] = store
                if args.docs:
                    stores[binary] = os.path.join(tmp, f"store-{i}")
                    subprocess.run([binary, "--store", stores[binary], "ingest", args.docs, "--quiet"],
                                   check=True)
            result = concurrency(binaries, stores, clients, args.seconds, args.rounds)
            if args.json:
                print(json.dumps(result))
            return 0
        if args.kill_check:
            result = kill_check(args.bin, store)
            if args.json:
                print(json.dumps(result))
            return 1 if result["missing"] else 0
        results = {"mcp_stdio": report("search_docs, MCP stdio", mcp_stdio(args.bin, store, args.calls))}
        server, port = start_server(args.bin, store)
        try:
            run = f"bench-{os.getpid()}-{time.time_ns()}"
            fresh = http_calls(port, args.calls, lambda i: f"{run}/http/{i}")
            results["http"] = report("search_docs, HTTP JSON API", fresh)
            replays = http_calls(port, args.calls, lambda i: f"{run}/http/{i}")
            results["http_replays"] = report("search_docs, HTTP replays", replays)
            results["http_calls_per_s"] = len(fresh) / sum(fresh)
            results["http_replays_per_s"] = len(replays) / sum(replays)
            print(f"keyed calls per second (HTTP, 1 client): {len(fresh) / sum(fresh):8.1f} executed, "
                  f"{len(replays) / sum(replays):8.1f} replayed")
        finally:
            server.terminate()
            server.wait(timeout=10)
        if args.json:
            print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
