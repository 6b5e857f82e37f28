"""The metadata both retrievers attach to a passage, so LangChain documents and LlamaIndex
nodes describe a hit with the same names and values."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .models import Hit

#: The metadata keys of every passage, in the order they are set.
METADATA_KEYS = (
    "chunk_id",
    "path",
    "root",
    "lines",
    "pages",
    "heading",
    "score",
    "similarity",
    "generation",
    "sources",
    "exact_match",
)


def hit_metadata(hit: Hit, generation: int) -> Dict[str, Any]:
    """A hit's metadata: JSON values only (lists, not tuples), every key always present (None
    where the answer had nothing: ``pages`` outside PDFs, ``similarity`` without embeddings),
    so that downstream code and serialisers need no special cases. ``path`` and ``root`` are
    the first file's; ``sources`` lists every file the passage appears in."""
    pages: Optional[List[int]] = None if hit.pages is None else list(hit.pages)
    return {
        "chunk_id": hit.chunk_id,
        "path": hit.path,
        "root": hit.root,
        "lines": list(hit.lines),
        "pages": pages,
        "heading": hit.heading,
        "score": hit.score,
        "similarity": hit.similarity,
        "generation": generation,
        "sources": [source.to_dict() for source in hit.sources],
        "exact_match": hit.exact_match,
    }
