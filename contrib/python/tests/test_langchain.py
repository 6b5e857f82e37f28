"""``groundidx.langchain.GroundidxRetriever`` through LangChain's own entry points (``invoke``,
``ainvoke``) and inside a real LangGraph graph: documents with every field, and the key taken
from the run's checkpointed identity, or no key without one (the audit log's ``key_source``)."""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import List

import pytest
from conftest import require
from running_server import Server

from groundidx import Client, call_key
from groundidx.metadata import METADATA_KEYS


def langgraph_config(thread: str, step: int, namespace: str) -> dict:
    """A config as LangGraph hands a node: the thread in `configurable`, the step and the
    task's namespace in `metadata`."""
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": namespace},
        "metadata": {
            "langgraph_step": step,
            "langgraph_node": namespace.split(":")[0],
            "langgraph_checkpoint_ns": namespace,
        },
    }


def test_invoke_maps_each_hit_to_a_document(
    langchain: ModuleType, client: Client, roots: tuple
) -> None:
    retriever = langchain.GroundidxRetriever(client=client, top_k=3, mode="lexical")
    documents = retriever.invoke("rotate the signing key")
    result = client.search("rotate the signing key", top_k=3, mode="lexical")
    assert [d.page_content for d in documents] == [hit.text for hit in result.hits]
    for document, hit in zip(documents, result.hits):
        metadata = document.metadata
        assert tuple(metadata) == METADATA_KEYS
        assert metadata["chunk_id"] == hit.chunk_id
        assert metadata["path"] == "handbook/key-rotation.md"
        assert metadata["root"] in map(str, roots)
        assert metadata["lines"] == list(hit.lines)
        assert metadata["pages"] is None
        assert metadata["heading"] == hit.heading
        assert metadata["score"] == hit.score
        assert metadata["similarity"] is None
        assert metadata["generation"] == result.generation
        assert sorted(s["root"] for s in metadata["sources"]) == sorted(map(str, roots))
        assert metadata["exact_match"] is False


def test_filters_apply_to_every_search(langchain: ModuleType, client: Client) -> None:
    retriever = langchain.GroundidxRetriever(client=client, path_prefix="manuals/")
    documents = retriever.invoke("audit of the archive")
    assert documents and {d.metadata["path"] for d in documents} == {"manuals/vault.pdf"}
    assert documents[0].metadata["pages"] == [1, 2]


def test_a_langgraph_config_gives_the_key(
    langchain: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = langchain.GroundidxRetriever(client=client)
    config = langgraph_config(unique, 4, "retrieve:1f0c2d3e")
    first = retriever.invoke("rotate the signing key", config)
    again = retriever.invoke("rotate the signing key", config)
    assert again == first
    [event] = server.events(key=call_key(unique, 4, "retrieve:1f0c2d3e"))
    assert event["key_source"] == "caller"


def test_two_tasks_of_one_step_get_two_keys(
    langchain: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = langchain.GroundidxRetriever(client=client)
    retriever.invoke("backups", langgraph_config(unique, 2, "a:task-1"))
    retriever.invoke("restore", langgraph_config(unique, 2, "b:task-2"))
    assert len(server.events(key=call_key(unique, 2, "a:task-1"))) == 1
    assert len(server.events(key=call_key(unique, 2, "b:task-2"))) == 1


def test_explicit_metadata_takes_precedence(
    langchain: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = langchain.GroundidxRetriever(client=client)
    config = langgraph_config("thread-ignored", 9, "retrieve:x")
    config["metadata"].update(
        {"groundidx_run_id": unique, "groundidx_step": "plan", "groundidx_call_id": "call_3"}
    )
    retriever.invoke("backups", config)
    retriever.invoke("backups", config)
    [event] = server.events(key=call_key(unique, "plan", "call_3"))
    assert event["key_source"] == "caller"
    assert server.events(key=call_key("thread-ignored", 9, "retrieve:x")) == []


def test_the_retrievers_own_metadata_gives_identity_too(
    langchain: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = langchain.GroundidxRetriever(
        client=client,
        metadata={"groundidx_run_id": unique, "groundidx_step": 1, "groundidx_call_id": "c"},
    )
    retriever.invoke("backups")
    assert len(server.events(key=call_key(unique, 1, "c"))) == 1


@pytest.mark.parametrize(
    "config",
    [
        None,
        {"configurable": {"thread_id": "a thread but no step"}},
        {"metadata": {"langgraph_step": 3}},
    ],
)
def test_no_checkpointed_identity_sends_no_key(
    langchain: ModuleType, client: Client, server: Server, unique: str, config
) -> None:
    retriever = langchain.GroundidxRetriever(client=client)
    retriever.invoke(f"backups {unique}", config)
    retriever.invoke(f"backups {unique}", config)
    events = server.events_for_query(unique)
    # Served under two fresh server keys: a retry without identity is audited again.
    assert [e["key_source"] for e in events] == ["server", "server"]
    assert len({e["key"] for e in events}) == 2


def test_a_half_given_identity_is_an_error(langchain: ModuleType, client: Client) -> None:
    retriever = langchain.GroundidxRetriever(client=client)
    with pytest.raises(ValueError, match="groundidx_run_id.*no step"):
        retriever.invoke("backups", {"metadata": {"groundidx_run_id": "run-1"}})


def test_ainvoke_uses_the_same_key_as_invoke(
    langchain: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = langchain.GroundidxRetriever(client=client)
    config = langgraph_config(unique, 1, "retrieve:async")
    sync = retriever.invoke("rotate the signing key", config)
    concurrent = asyncio.run(_ainvoke_twice(retriever, "rotate the signing key", config))
    assert concurrent == [sync, sync]
    [event] = server.events(key=call_key(unique, 1, "retrieve:async"))
    assert event["key_source"] == "caller"


async def _ainvoke_twice(retriever, query: str, config: dict) -> List[list]:
    return list(await asyncio.gather(*(retriever.ainvoke(query, config) for _ in range(2))))


def test_a_resumed_langgraph_run_is_audited_once(
    langchain: ModuleType, client: Client, server: Server, unique: str
) -> None:
    """A node that crashes after its search re-runs from its start on resume: the search is
    sent again, with the same key, and replayed."""
    require("langgraph")
    from typing_extensions import TypedDict

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        question: str
        passages: List[str]

    retriever = langchain.GroundidxRetriever(client=client, top_k=2)
    crashes = [RuntimeError("the model call after the search failed")]

    def plan(state: State) -> State:
        return {"question": state["question"] + " key"}

    def retrieve(state: State) -> State:
        documents = retriever.invoke(state["question"])
        if crashes:
            raise crashes.pop()
        return {"passages": [d.page_content for d in documents]}

    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("retrieve", retrieve)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "retrieve")
    graph.add_edge("retrieve", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": unique}}
    with pytest.raises(RuntimeError):
        app.invoke({"question": "rotate the signing"}, config)
    final = app.invoke(None, config)
    assert len(final["passages"]) == 2
    events = [e for e in server.audit() if e["key"].startswith(unique + "/")]
    assert len(events) == 1, events
    assert events[0]["key_source"] == "caller"
    assert events[0]["key"].startswith(f"{unique}/2/retrieve:")


def test_batch_gives_each_input_the_key_of_its_config(
    langchain: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = langchain.GroundidxRetriever(client=client)
    configs = [langgraph_config(unique, 3, f"fan_out:{n}") for n in range(2)]
    documents = retriever.batch(["backups", "signing key"], configs)
    assert [d[0].metadata["path"] for d in documents] == [
        "ops/backups.md",
        "handbook/key-rotation.md",
    ]
    for n in range(2):
        assert len(server.events(key=call_key(unique, 3, f"fan_out:{n}"))) == 1
