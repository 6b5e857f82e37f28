"""A LlamaIndex retriever over a running ``groundidx serve``.

LlamaIndex keeps no run identity of its own, so the caller gives it: ``run_id``, ``step`` and
``call_id`` to the constructor (a retriever made per step), and any of them per call with
``call_identity(...)`` around ``retrieve``/``aretrieve``, which takes precedence. A key is sent
when all three are known; with none known no key is sent (never a random one); with some but
not all, ``ValueError`` says which are missing.

Needs ``llama-index-core``: ``pip install 'groundidx[llama-index]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from typing import Any, Dict, Iterator, List, Optional, Union

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "groundidx.llama_index needs llama-index-core: pip install 'groundidx[llama-index]'"
    ) from error

from .client import Client
from .keys import call_key
from .metadata import hit_metadata
from .models import SearchResult

Part = Union[str, int]

#: The identity ``call_identity`` sets for the calls made inside it: a context variable, so
#: threads and asyncio tasks each see their own.
_identity: contextvars.ContextVar[Optional[Dict[str, Part]]] = contextvars.ContextVar(
    "groundidx_llama_index_identity", default=None
)

#: Metadata kept out of the text LlamaIndex gives an LLM or an embedding model: numbers and
#: lists about the passage, not its content. ``path`` and ``heading`` stay: they help the model
#: cite and understand the passage.
EXCLUDED_FROM_TEXT = [
    "chunk_id",
    "root",
    "lines",
    "pages",
    "score",
    "similarity",
    "generation",
    "sources",
    "exact_match",
]


@contextlib.contextmanager
def call_identity(
    *,
    run_id: Optional[Part] = None,
    step: Optional[Part] = None,
    call_id: Optional[Part] = None,
) -> Iterator[None]:
    """Gives the groundidx retrievers called inside this block the checkpointed identity of
    the call (each part given here takes precedence over the retriever's own)::

        with call_identity(run_id=run.id, step="retrieve", call_id=tool_call.id):
            nodes = retriever.retrieve(question)
    """
    given = {
        name: value
        for name, value in (("run_id", run_id), ("step", step), ("call_id", call_id))
        if value is not None
    }
    token = _identity.set({**(_identity.get() or {}), **given})
    try:
        yield
    finally:
        _identity.reset(token)


def to_nodes(result: SearchResult) -> List[NodeWithScore]:
    """Each hit as a ``NodeWithScore`` around a ``TextNode`` whose id is the chunk id."""
    nodes = []
    for hit in result.hits:
        node = TextNode(
            id_=hit.chunk_id,
            text=hit.text,
            metadata=hit_metadata(hit, result.generation),
            excluded_llm_metadata_keys=list(EXCLUDED_FROM_TEXT),
            excluded_embed_metadata_keys=list(EXCLUDED_FROM_TEXT),
        )
        nodes.append(NodeWithScore(node=node, score=hit.score))
    return nodes


class GroundidxRetriever(BaseRetriever):
    """Passages from groundidx's ``search_docs`` as LlamaIndex nodes.

    Args:
        client: the ``groundidx.Client`` to search with.
        run_id, step, call_id: the checkpointed identity of the call, when the retriever is
            made for one call; ``call_identity`` gives it per call instead.
        top_k, mode, path_prefix, tags, min_score, root, path_glob, fields: ``search_docs``'s
            filters for every search;
            None leaves the server's default.
    """

    def __init__(
        self,
        client: Client,
        *,
        run_id: Optional[Part] = None,
        step: Optional[Part] = None,
        call_id: Optional[Part] = None,
        top_k: Optional[int] = None,
        mode: Optional[str] = None,
        path_prefix: Optional[str] = None,
        tags: Optional[List[str]] = None,
        min_score: Optional[float] = None,
        root: Optional[str] = None,
        path_glob: Optional[str] = None,
        fields: Optional[Dict[str, str]] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client = client
        self._own_identity = {
            name: value
            for name, value in (("run_id", run_id), ("step", step), ("call_id", call_id))
            if value is not None
        }
        self.top_k = top_k
        self.mode = mode
        self.path_prefix = path_prefix
        self.tags = tags
        self.min_score = min_score
        self.root = root
        self.path_glob = path_glob
        self.fields = fields

    def current_key(self) -> Optional[str]:
        """The key a search made now would carry, or None without identity.

        Raises ``ValueError`` when only part of the identity is known.
        """
        identity = {**self._own_identity, **(_identity.get() or {})}
        missing = [name for name in ("run_id", "step", "call_id") if name not in identity]
        if not missing:
            return call_key(identity["run_id"], identity["step"], identity["call_id"])
        if identity:
            raise ValueError(
                f"groundidx: the call's identity has {', '.join(sorted(identity))} but no "
                f"{', '.join(missing)}; give all three (constructor or call_identity), or none "
                "to send no key"
            )
        return None

    def _search(self, query: str, key: Optional[str]) -> SearchResult:
        return self.client.search(
            query,
            top_k=self.top_k,
            mode=self.mode,
            path_prefix=self.path_prefix,
            tags=self.tags,
            min_score=self.min_score,
            root=self.root,
            path_glob=self.path_glob,
            fields=self.fields,
            key=key,
        )

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return to_nodes(self._search(query_bundle.query_str, self.current_key()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        # The key is read here, in the caller's context; the blocking client runs in a thread.
        key = self.current_key()
        result = await asyncio.to_thread(self._search, query_bundle.query_str, key)
        return to_nodes(result)
