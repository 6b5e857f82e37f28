"""groundidx for Python: a client for groundidx's JSON API, idempotency keys made from
checkpointed identity, and retrievers for LangChain (``groundidx.langchain``) and LlamaIndex
(``groundidx.llama_index``).

This package imports nothing beyond the standard library; each retriever module needs its
framework, installed with the extra of the same name (``groundidx[langchain]``,
``groundidx[llama-index]``).
"""

from .client import DEFAULT_URL, Client, Reply
from .errors import CONNECTION_FAILED, UNEXPECTED_RESPONSE, GroundidxError
from .keys import call_key
from .models import (
    Chunk,
    ChunkResult,
    Coverage,
    Hit,
    RateLimit,
    ResponseInfo,
    SearchResult,
    Semantic,
    Source,
)

__version__ = "0.1.0"

__all__ = [
    "CONNECTION_FAILED",
    "DEFAULT_URL",
    "UNEXPECTED_RESPONSE",
    "Chunk",
    "ChunkResult",
    "Client",
    "Coverage",
    "GroundidxError",
    "Hit",
    "RateLimit",
    "Reply",
    "ResponseInfo",
    "SearchResult",
    "Semantic",
    "Source",
    "call_key",
]
