#!/usr/bin/env python3
"""The reference beside benches/embed_throughput.rs: sentence-transformers (PyTorch, CPU) on the
same texts, with the same model, threads, maximum length and calls of 256 passages.

Usage: python3 benches/embed_throughput.py MODEL_DIR TEXTS.jsonl THREADS RUNS [MAX_TOKENS]
Prints one JSON line per run: {"run", "chunks", "seconds", "chunks_per_s"}; with --tokens, the
token counts of the texts instead (median, p90, max), as the model's tokenizer truncates them.
"""
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

CALL_CHUNKS = 256
BATCH_SIZE = 32

tokens_only = "--tokens" in sys.argv
args = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
model_dir, texts_path, threads, runs = args[0], args[1], int(args[2]), int(args[3])
torch.set_num_threads(threads)
torch.set_num_interop_threads(1)
with open(texts_path, encoding="utf-8") as lines:
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
model = SentenceTransformer(model_dir, device="cpu")
if len(args) > 4:
    model.max_seq_length = int(args[4])

if tokens_only:
    counts = sorted(
        len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]
    )
    print(json.dumps({
        "chunks": len(texts),
        "median_tokens": statistics.median(counts),
        "p90_tokens": counts[int(0.9 * (len(counts) - 1))],
        "max_tokens": counts[-1],
        "truncated": sum(1 for n in counts if n >= model.max_seq_length),
    }))
    sys.exit(0)

for run in range(runs):
    start = time.perf_counter()
    n_vectors = 0
    with torch.inference_mode():
        for at in range(0, len(texts), CALL_CHUNKS):
            n_vectors += len(model.encode(texts[at:at + CALL_CHUNKS], batch_size=BATCH_SIZE, convert_to_numpy=True))
    seconds = time.perf_counter() - start
    assert n_vectors == len(texts)
    print(json.dumps({"run": run, "chunks": len(texts), "seconds": seconds, "chunks_per_s": len(texts) / seconds}), flush=True)
