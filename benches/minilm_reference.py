#!/usr/bin/env python3
"""Reference vectors for tests/fixtures/minilm-reference.json, from sentence-transformers itself.

Usage: python3 benches/minilm_reference.py [MODEL_DIR] > tests/fixtures/minilm-reference.json
  MODEL_DIR  an all-MiniLM-L6-v2 sentence-transformers folder
             (default ../shared/models/all-MiniLM-L6-v2 beside the repository)
Needs: pip install sentence-transformers (torch on the CPU). Loads the folder by path, offline.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from sentence_transformers import SentenceTransformer, models  # noqa: E402
import sentence_transformers  # noqa: E402
import torch  # noqa: E402

repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "..", "shared", "models", "all-MiniLM-L6-v2")

# Short and long, prose and code, accents and CJK, and one far past the 256-token maximum
# (so truncation is compared too).
SENTENCES = [
    "A man is eating food.",
    "tar -xzf archive.tar.gz extracts a gzipped tarball into the current directory",
    "How do I configure a k-NN index with the Lucene engine in OpenSearch?",
    "Crème brûlée, naïve café résumé — Unicode text with accents.",
    "東京は日本の首都です。",
    "x",
    "The ledger is the source of truth; the index is a projection kept consistent by an outbox log. "
    * 30,
    "```bash\ngit rebase -i HEAD~3\n```\nRewrite the last three commits interactively.",
]

model = SentenceTransformer(model_dir, device="cpu")
with torch.no_grad():
    vectors = model.encode(SENTENCES, batch_size=32, normalize_embeddings=False, convert_to_numpy=True)
lengths = [len(model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"]) for text in SENTENCES]


def variant(pooling, normalize):
    """The same transformer under another pooling, with or without the Normalize module."""
    transformer = models.Transformer(model_dir, max_seq_length=model.max_seq_length)
    modules = [transformer, models.Pooling(transformer.get_word_embedding_dimension(), pooling)]
    if normalize:
        modules.append(models.Normalize())
    return SentenceTransformer(modules=modules, device="cpu")


# Other poolings (unnormalised, as a folder without 2_Normalize gives them) and a query prompt.
VARIANT_TEXTS = SENTENCES[:3] + [SENTENCES[6]]
with torch.no_grad():
    cls = variant("cls", False).encode(VARIANT_TEXTS, convert_to_numpy=True)
    maxed = variant("max", False).encode(VARIANT_TEXTS, convert_to_numpy=True)
    prompted = SentenceTransformer(model_dir, device="cpu", prompts={"query": "query: "}).encode(
        VARIANT_TEXTS, prompt_name="query", convert_to_numpy=True
    )


def cases(texts, rows):
    return [{"text": text, "vector": [float(f"{value:.7g}") for value in row]} for text, row in zip(texts, rows)]


json.dump(
    {
        "model": "all-MiniLM-L6-v2",
        "made_by": f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}, CPU",
        "max_seq_length": model.max_seq_length,
        "cases": [
            {"text": text, "tokens": n, "vector": [float(f"{value:.7g}") for value in vector]}
            for text, n, vector in zip(SENTENCES, lengths, vectors)
        ],
        "cls_unnormalised": cases(VARIANT_TEXTS, cls),
        "max_unnormalised": cases(VARIANT_TEXTS, maxed),
        "query_prompt": {"prompt": "query: ", "cases": cases(VARIANT_TEXTS, prompted)},
    },
    sys.stdout,
    ensure_ascii=False,
    indent=None,
)
sys.stdout.write("\n")
