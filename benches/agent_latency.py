#!/usr/bin/env python3
"""Round-trip latency of the agent tool and keyed-call throughput, whole-process.

Usage: benches/agent_latency.py --bin target/release/groundidx --docs DIR [--calls 500]

Ingests DIR into a temporary store, then measures, in one run:
  - search_docs over MCP stdio (`groundidx mcp`), one call at a time, each with a fresh key;
  - search_docs over HTTP (`POST /v1/tools/search_docs` on `groundidx serve`), the same;
  - keyed calls per second over HTTP, one client: each call with a new key (search, then the
    audit + usage + key transaction), and each key again (replays: a lookup, no search).
Prints p50 and p99 in milliseconds and calls per second. Standard library only.
"""
import argparse
import http.client
import json
import os
import statistics
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/release/groundidx")
    parser.add_argument("--docs", required=True)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        subprocess.run([args.bin, "--store", store, "ingest", args.docs, "--quiet"], check=True)
        report("search_docs, MCP stdio", mcp_stdio(args.bin, store, args.calls))
        server, port = start_server(args.bin, store)
        try:
            run = f"bench-{os.getpid()}-{time.time_ns()}"
            fresh = http_calls(port, args.calls, lambda i: f"{run}/http/{i}")
            report("search_docs, HTTP JSON API", fresh)
            replays = http_calls(port, args.calls, lambda i: f"{run}/http/{i}")
            report("search_docs, HTTP replays", replays)
            print(f"keyed calls per second (HTTP, 1 client): {len(fresh) / sum(fresh):8.1f} executed, "
                  f"{len(replays) / sum(replays):8.1f} replayed")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
