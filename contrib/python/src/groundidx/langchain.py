"""A LangChain retriever over a running ``groundidx serve``.

The idempotency key of each search comes from the run's config, where LangGraph keeps its
checkpointed identity: ``thread_id`` (in ``configurable``, and in ``metadata`` inside a graph),
``langgraph_step`` and the task's ``checkpoint_ns`` (``node:task-id``, the same when a resumed
run re-executes the task, different for two nodes of one step). Explicit ``groundidx_run_id``,
``groundidx_step`` and ``groundidx_call_id`` metadata take precedence over each. Without a
checkpointed identity no key is sent (never a random one): the call is served, and a retry is
logged and counted again.

Needs ``langchain-core``: ``pip install 'groundidx[langchain]'``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Mapping, Optional, cast

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig, ensure_config
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "groundidx.langchain needs langchain-core: pip install 'groundidx[langchain]'"
    ) from error

from .client import Client
from .keys import Part, call_key
from .metadata import hit_metadata
from .models import SearchResult

#: Explicit identity in a run's metadata, each taking precedence over LangGraph's.
RUN_ID = "groundidx_run_id"
STEP = "groundidx_step"
CALL_ID = "groundidx_call_id"


def _present(value: Any) -> bool:
    return value is not None and value != ""


def key_from_metadata(metadata: Mapping[str, Any]) -> Optional[str]:
    """The idempotency key a run's metadata gives, or None when it holds no checkpointed
    identity.

    The run is ``groundidx_run_id``, else LangGraph's ``thread_id``; the step
    ``groundidx_step``, else ``langgraph_step``; the call ``groundidx_call_id``, else the
    task's ``langgraph_checkpoint_ns`` or ``checkpoint_ns``, else ``langgraph_node``. A node
    that searches more than once per step must give each search its own
    ``groundidx_call_id`` (the tool-call id of the model message, or an ordinal), or the
    second search is refused with ``idempotency_key_reused``.

    Raises ``ValueError`` when some ``groundidx_*`` identity is given but the rest cannot be
    found: a half-given identity is a mistake to fix, not a reason to send no key.
    """
    run_id = metadata.get(RUN_ID) if _present(metadata.get(RUN_ID)) else metadata.get("thread_id")
    step = metadata.get(STEP) if _present(metadata.get(STEP)) else metadata.get("langgraph_step")
    call_id = next(
        (
            metadata[name]
            for name in (CALL_ID, "langgraph_checkpoint_ns", "checkpoint_ns", "langgraph_node")
            if _present(metadata.get(name))
        ),
        None,
    )
    parts = {"run_id": run_id, "step": step, "call_id": call_id}
    missing = [name for name, value in parts.items() if not _present(value)]
    if not missing:
        return call_key(cast(Part, run_id), cast(Part, step), cast(Part, call_id))
    explicit = [name for name in (RUN_ID, STEP, CALL_ID) if _present(metadata.get(name))]
    if explicit:
        raise ValueError(
            f"groundidx: the run's metadata gives {', '.join(explicit)} but no "
            f"{', '.join(missing)} (from groundidx_* metadata or LangGraph's thread_id, "
            "langgraph_step and checkpoint_ns); give all three, or none to send no key"
        )
    return None


def key_from_config(
    config: Optional[RunnableConfig], own_metadata: Optional[Mapping[str, Any]] = None
) -> Optional[str]:
    """The key of a run's config (``key_from_metadata`` of its ``configurable`` scalars, then
    its ``metadata``, then the retriever's own ``metadata``, each later one taking precedence).

    A config of None is the one of the enclosing run, as LangChain passes it down.
    """
    config = ensure_config(config)
    merged: Dict[str, Any] = {
        name: value
        for name, value in (config.get("configurable") or {}).items()
        if isinstance(value, (str, int)) and not name.startswith("__")
    }
    merged.update(config.get("metadata") or {})
    merged.update(own_metadata or {})
    return key_from_metadata(merged)


def to_documents(result: SearchResult) -> List[Document]:
    """Each hit as a ``Document``: the passage's text, and its metadata (``hit_metadata``)."""
    return [
        Document(page_content=hit.text, metadata=hit_metadata(hit, result.generation))
        for hit in result.hits
    ]


class GroundidxRetriever(BaseRetriever):
    """Passages from groundidx's ``search_docs`` as LangChain documents.

    ``retriever.invoke(query, config)`` and ``await retriever.ainvoke(query, config)`` search
    with the key of the config's checkpointed identity (``key_from_config``); ``batch`` and
    ``stream`` go through them. The filters below apply to every search; None leaves the
    server's default.
    """

    client: Client
    top_k: Optional[int] = None
    mode: Optional[str] = None
    path_prefix: Optional[str] = None
    tags: Optional[List[str]] = None
    min_score: Optional[float] = None
    root: Optional[str] = None
    path_glob: Optional[str] = None
    fields: Optional[Dict[str, str]] = None

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

    # The key is made here, where the config is at hand (the run manager that reaches
    # `_get_relevant_documents` has the metadata but not `configurable`), and handed down as
    # an argument: LangChain passes extra arguments on to a retriever whose
    # `_get_relevant_documents` declares them.
    def invoke(
        self, input: str, config: Optional[RunnableConfig] = None, **kwargs: Any
    ) -> List[Document]:
        key = key_from_config(config, self.metadata)
        return super().invoke(input, config, groundidx_key=key, **kwargs)

    async def ainvoke(
        self, input: str, config: Optional[RunnableConfig] = None, **kwargs: Any
    ) -> List[Document]:
        key = key_from_config(config, self.metadata)
        return await super().ainvoke(input, config, groundidx_key=key, **kwargs)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        groundidx_key: Optional[str] = None,
    ) -> List[Document]:
        return to_documents(self._search(query, groundidx_key))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        groundidx_key: Optional[str] = None,
    ) -> List[Document]:
        # The client is blocking (urllib); a worker thread keeps the event loop free.
        result = await asyncio.to_thread(self._search, query, groundidx_key)
        return to_documents(result)
