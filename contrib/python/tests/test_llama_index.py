"""``groundidx.llama_index.GroundidxRetriever`` through LlamaIndex's ``retrieve`` and
``aretrieve``: nodes with every field, the key from the identity the caller gives (constructor
or ``call_identity``), and no key without one."""

from __future__ import annotations

import asyncio
import threading
from types import ModuleType

import pytest
from conftest import require
from running_server import Server

from groundidx import Client, call_key
from groundidx.metadata import METADATA_KEYS


def test_retrieve_maps_each_hit_to_a_node(
    llama_index: ModuleType, client: Client, roots: tuple
) -> None:
    schema = require("llama_index.core.schema")
    retriever = llama_index.GroundidxRetriever(client, top_k=3, mode="lexical")
    nodes = retriever.retrieve("rotate the signing key")
    result = client.search("rotate the signing key", top_k=3, mode="lexical")
    assert [n.node.node_id for n in nodes] == [hit.chunk_id for hit in result.hits]
    for node, hit in zip(nodes, result.hits):
        assert isinstance(node, schema.NodeWithScore) and isinstance(node.node, schema.TextNode)
        assert node.node.text == hit.text
        assert node.score == hit.score
        metadata = node.node.metadata
        assert tuple(metadata) == METADATA_KEYS
        assert metadata["path"] == "handbook/key-rotation.md"
        assert metadata["root"] in map(str, roots)
        assert metadata["lines"] == list(hit.lines)
        assert metadata["generation"] == result.generation
        assert len(metadata["sources"]) == 2
        # What an LLM is shown: the passage with its path and heading, not the bookkeeping.
        shown = node.node.get_content(metadata_mode=schema.MetadataMode.LLM)
        assert hit.text in shown and "handbook/key-rotation.md" in shown
        assert hit.chunk_id not in shown and "generation" not in shown


def test_a_query_bundle_and_pages(llama_index: ModuleType, client: Client) -> None:
    schema = require("llama_index.core.schema")
    retriever = llama_index.GroundidxRetriever(client, path_prefix="manuals/")
    [node] = retriever.retrieve(schema.QueryBundle(query_str="sealed archive manifest"))
    assert node.node.metadata["path"] == "manuals/vault.pdf"
    assert node.node.metadata["pages"] == [1, 2]


def test_the_constructors_identity_gives_the_key(
    llama_index: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = llama_index.GroundidxRetriever(client, run_id=unique, step=5, call_id="call_1")
    first = retriever.retrieve("backups")
    again = retriever.retrieve("backups")
    assert [n.node.node_id for n in again] == [n.node.node_id for n in first]
    [event] = server.events(key=call_key(unique, 5, "call_1"))
    assert event["key_source"] == "caller"


def test_call_identity_gives_each_call_its_key(
    llama_index: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = llama_index.GroundidxRetriever(client, run_id=unique)
    with llama_index.call_identity(step="answer", call_id="call_1"):
        retriever.retrieve("backups")
        retriever.retrieve("backups")
    with llama_index.call_identity(step="answer", call_id="call_2"):
        retriever.retrieve("restore")
    with llama_index.call_identity(run_id=unique + "-other", step="answer", call_id="call_1"):
        retriever.retrieve("restore")
    assert len(server.events(key=call_key(unique, "answer", "call_1"))) == 1
    assert len(server.events(key=call_key(unique, "answer", "call_2"))) == 1
    assert len(server.events(key=call_key(unique + "-other", "answer", "call_1"))) == 1


def test_no_identity_sends_no_key(
    llama_index: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = llama_index.GroundidxRetriever(client)
    retriever.retrieve(f"backups {unique}")
    retriever.retrieve(f"backups {unique}")
    assert [e["key_source"] for e in server.events_for_query(unique)] == ["server", "server"]


def test_a_half_given_identity_is_an_error(llama_index: ModuleType, client: Client) -> None:
    retriever = llama_index.GroundidxRetriever(client, run_id="run-1")
    with pytest.raises(ValueError, match="no step, call_id"):
        retriever.retrieve("backups")


def test_aretrieve_reads_the_identity_of_its_task(
    llama_index: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = llama_index.GroundidxRetriever(client, run_id=unique, step=1)

    async def call(call_id: str, query: str) -> list:
        with llama_index.call_identity(call_id=call_id):
            return await retriever.aretrieve(query)

    async def both() -> list:
        return list(await asyncio.gather(call("a", "backups"), call("b", "signing key")))

    backups, signing = asyncio.run(both())
    assert backups[0].node.metadata["path"] == "ops/backups.md"
    assert signing[0].node.metadata["path"] == "handbook/key-rotation.md"
    [a] = server.events(key=call_key(unique, 1, "a"))
    [b] = server.events(key=call_key(unique, 1, "b"))
    assert "backups" in a["arguments"] and "signing key" in b["arguments"]


def test_call_identity_is_per_thread(
    llama_index: ModuleType, client: Client, server: Server, unique: str
) -> None:
    retriever = llama_index.GroundidxRetriever(client, run_id=unique, step=1)
    entered = threading.Barrier(2)

    def call(call_id: str) -> None:
        with llama_index.call_identity(call_id=call_id):
            entered.wait(timeout=10)  # both identities are set before either thread searches
            retriever.retrieve("backups")

    threads = [threading.Thread(target=call, args=(name,)) for name in ("t1", "t2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(server.events(key=call_key(unique, 1, "t1"))) == 1
    assert len(server.events(key=call_key(unique, 1, "t2"))) == 1
