"""The answers of groundidx's tools as typed, immutable values.

Each class mirrors one object of the JSON API (README.md, "The JSON contract") field for field,
and is read from the answer by ``from_json``. Fields the server sends only sometimes (``pages``
for documents with pages, ``similarity`` when the query was embedded, ``sources`` missing from
answers stored before it existed and replayed byte for byte) are optional here too, so a replayed
old answer still reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

Span = Tuple[int, int]


def _span(value: Any) -> Span:
    first, last = value
    return (int(first), int(last))


def _optional_span(value: Any) -> Optional[Span]:
    return None if value is None else _span(value)


@dataclass(frozen=True)
class Source:
    """One file a passage appears in: the folder it was ingested from and its path there."""

    root: str
    path: str
    lines: Span
    pages: Optional[Span] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Source":
        return cls(
            root=data["root"],
            path=data["path"],
            lines=_span(data["lines"]),
            pages=_optional_span(data.get("pages")),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The JSON-friendly form framework metadata carries (lists, not tuples)."""
        out: Dict[str, Any] = {"root": self.root, "path": self.path, "lines": list(self.lines)}
        if self.pages is not None:
            out["pages"] = list(self.pages)
        return out


def _sources(data: Mapping[str, Any]) -> Tuple[Source, ...]:
    return tuple(Source.from_json(source) for source in data.get("sources") or ())


@dataclass(frozen=True)
class Hit:
    """One passage a search found."""

    chunk_id: str
    score: float
    paths: Tuple[str, ...]
    heading: str
    lines: Span
    snippet: str
    text: str
    sources: Tuple[Source, ...] = ()
    pages: Optional[Span] = None
    #: Cosine similarity of query and passage (-1 to 1), when the query was embedded and the
    #: passage has a vector; unlike ``score`` it compares across queries and modes.
    similarity: Optional[float] = None
    #: True when the query names this passage's document (file name, title or identifier).
    exact_match: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Hit":
        similarity = data.get("similarity")
        return cls(
            chunk_id=data["chunk_id"],
            score=float(data["score"]),
            paths=tuple(data["paths"]),
            heading=data["heading"],
            lines=_span(data["lines"]),
            snippet=data["snippet"],
            text=data["text"],
            sources=_sources(data),
            pages=_optional_span(data.get("pages")),
            similarity=None if similarity is None else float(similarity),
            exact_match=bool(data.get("exact_match", False)),
        )

    @property
    def path(self) -> str:
        """The first file's path, relative to its root (``sources`` has every file)."""
        return self.sources[0].path if self.sources else self.paths[0]

    @property
    def root(self) -> Optional[str]:
        """The folder the first file was ingested from; None in answers older than ``sources``."""
        return self.sources[0].root if self.sources else None


@dataclass(frozen=True)
class Coverage:
    """Chunks with a vector, of all chunks."""

    vectors: int
    chunks: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Coverage":
        return cls(vectors=int(data["vectors"]), chunks=int(data["chunks"]))


@dataclass(frozen=True)
class Semantic:
    """Whether meaning took part in the ranking (``on``, ``partial``, ``off``) and why not."""

    state: str
    reason: Optional[str]
    message: Optional[str]
    hint: Optional[str]
    model: Optional[str]
    coverage: Coverage

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Semantic":
        return cls(
            state=data["state"],
            reason=data.get("reason"),
            message=data.get("message"),
            hint=data.get("hint"),
            model=data.get("model"),
            coverage=Coverage.from_json(data["coverage"]),
        )


@dataclass(frozen=True)
class RateLimit:
    """The client's quota, from the ``RateLimit-Policy`` and ``RateLimit`` headers."""

    #: Calls allowed per window (``q``).
    limit: Optional[int]
    #: The window's length in seconds (``w``).
    window_seconds: Optional[int]
    #: Calls left in this window (``r``).
    remaining: Optional[int]
    #: Seconds until the window resets (``t``).
    reset_seconds: Optional[int]


@dataclass(frozen=True)
class ResponseInfo:
    """What the HTTP headers said about a call, beside its answer."""

    #: The key the call is filed under: the caller's, or the server's ``srv-…`` without one.
    key: Optional[str]
    #: True when this is the first answer to the same key, replayed (``Idempotent-Replayed:
    #: true``): nothing was logged or counted again.
    replayed: bool = False
    #: True when the key was pruned by ``gc`` and this is a fresh answer that was still not
    #: logged or counted again (``Idempotent-Replayed: late``).
    late: bool = False
    #: True when the server reads a replica whose shared ledger is unreachable.
    read_only: bool = False
    rate_limit: Optional[RateLimit] = None


@dataclass(frozen=True)
class SearchResult:
    """The answer of ``search_docs``."""

    hits: Tuple[Hit, ...]
    #: The index generation the hits come from.
    generation: int
    #: When the last ingest finished (RFC 3339), or None before any.
    last_ingest: Optional[str]
    #: How the hits were ranked: ``hybrid``, ``lexical`` or ``semantic``.
    mode: Optional[str] = None
    semantic: Optional[Semantic] = None
    semantic_coverage: Optional[Coverage] = None
    #: Why words alone ranked though the store has embeddings, when so.
    semantic_unavailable: Optional[str] = None
    #: Why ``min_score`` could not apply, when so (no hit was dropped).
    min_score_unapplied: Optional[str] = None
    #: Pass as ``cursor`` with the same query and filters for the next page.
    next_cursor: Optional[str] = None
    response: ResponseInfo = field(default_factory=lambda: ResponseInfo(key=None))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], response: ResponseInfo) -> "SearchResult":
        semantic = data.get("semantic")
        coverage = data.get("semantic_coverage")
        return cls(
            hits=tuple(Hit.from_json(hit) for hit in data["hits"]),
            generation=int(data["generation"]),
            last_ingest=data["last_ingest"],
            mode=data.get("mode"),
            semantic=None if semantic is None else Semantic.from_json(semantic),
            semantic_coverage=None if coverage is None else Coverage.from_json(coverage),
            semantic_unavailable=data.get("semantic_unavailable"),
            min_score_unapplied=data.get("min_score_unapplied"),
            next_cursor=data.get("next_cursor"),
            response=response,
        )


@dataclass(frozen=True)
class Chunk:
    """One passage as ``get_chunk`` serves it."""

    chunk_id: str
    paths: Tuple[str, ...]
    heading: str
    lines: Span
    text: str
    sources: Tuple[Source, ...] = ()
    pages: Optional[Span] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Chunk":
        return cls(
            chunk_id=data["chunk_id"],
            paths=tuple(data["paths"]),
            heading=data["heading"],
            lines=_span(data["lines"]),
            text=data["text"],
            sources=_sources(data),
            pages=_optional_span(data.get("pages")),
        )


@dataclass(frozen=True)
class ChunkResult:
    """The answer of ``get_chunk``."""

    chunk: Chunk
    generation: int
    last_ingest: Optional[str]
    response: ResponseInfo = field(default_factory=lambda: ResponseInfo(key=None))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], response: ResponseInfo) -> "ChunkResult":
        return cls(
            chunk=Chunk.from_json(data["chunk"]),
            generation=int(data["generation"]),
            last_ingest=data["last_ingest"],
            response=response,
        )
