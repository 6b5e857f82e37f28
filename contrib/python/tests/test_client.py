"""The client's tools against a real server: every field of a search and a chunk, filters,
pages of hits, and the generic ``call``."""

from __future__ import annotations

import re

import docs_corpus
import pytest
from running_server import CLIENT_ID

from groundidx import Client, GroundidxError, Hit, SearchResult, Source


def only(hits, heading: str) -> Hit:
    found = [hit for hit in hits if hit.heading == heading]
    assert len(found) == 1, f"one hit under {heading!r} expected in {hits}"
    return found[0]


def test_search_reads_every_field_of_the_answer(client: Client, roots: tuple) -> None:
    result = client.search("rotate the signing key", top_k=5, mode="lexical")
    assert isinstance(result, SearchResult)
    health = client.health()
    assert result.generation == health["generation"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", result.last_ingest or "")
    assert result.mode == "lexical"
    assert result.semantic is not None and result.semantic.state == "off"
    assert result.semantic.reason in ("no_model", "lexical_asked")
    assert result.semantic_coverage is not None and result.semantic_coverage.vectors == 0
    assert result.next_cursor is None  # two passages match, five were asked for

    hit = only(result.hits, "Signing key rotation")
    assert re.fullmatch(r"[0-9a-f]{64}", hit.chunk_id)
    assert hit.score > 0
    assert hit.paths == ("handbook/key-rotation.md",)
    # The same relative path under two roots: one path, two sources.
    assert sorted(hit.sources, key=lambda s: s.root) == [
        Source(root=str(root), path="handbook/key-rotation.md", lines=hit.lines) for root in roots
    ]
    assert hit.path == "handbook/key-rotation.md" and hit.root in map(str, roots)
    lines = docs_corpus.KEY_ROTATION.splitlines()
    first, last = hit.lines
    assert hit.text == "\n".join(lines[first - 1 : last])
    assert "**signing**" in hit.snippet.lower()
    assert hit.pages is None
    assert hit.similarity is None  # no embedding model: the query was not embedded
    assert hit.exact_match is False


def test_a_passage_of_a_pdf_has_pages(client: Client) -> None:
    result = client.search("sealed archive manifest")
    hit = result.hits[0]
    assert hit.paths == ("manuals/vault.pdf",)
    assert hit.pages == (1, len(docs_corpus.VAULT_PAGES))
    assert [source.pages for source in hit.sources] == [hit.pages]
    assert "verified against its manifest" in hit.text


def test_a_query_naming_a_document_is_an_exact_match(client: Client) -> None:
    hits = client.search("Signing key rotation").hits
    assert hits[0].exact_match is True
    assert hits[0].paths == ("handbook/key-rotation.md",)


def test_filters_reach_the_server(client: Client) -> None:
    by_path = client.search("key backups ledger", path_prefix="ops/").hits
    assert by_path and all(hit.path.startswith("ops/") for hit in by_path)
    by_tag = client.search("key backups ledger", tags=["security"]).hits
    assert by_tag and all(hit.path == "handbook/key-rotation.md" for hit in by_tag)
    assert client.search("key backups ledger", tags=["security", "ops"]).hits == ()


def test_cursor_gives_the_next_page(client: Client) -> None:
    first = client.search("rotate the signing key", top_k=1)
    assert len(first.hits) == 1 and first.next_cursor
    second = client.search("rotate the signing key", top_k=1, cursor=first.next_cursor)
    assert len(second.hits) == 1
    assert second.generation == first.generation
    assert second.hits[0].chunk_id != first.hits[0].chunk_id
    both = client.search("rotate the signing key", top_k=2).hits
    assert [hit.chunk_id for hit in both] == [first.hits[0].chunk_id, second.hits[0].chunk_id]


def test_get_chunk_serves_the_passage_a_search_found(client: Client) -> None:
    hit = client.search("sealed archive manifest").hits[0]
    got = client.get_chunk(hit.chunk_id)
    assert got.chunk.chunk_id == hit.chunk_id
    assert got.chunk.text == hit.text
    assert got.chunk.paths == hit.paths
    assert got.chunk.sources == hit.sources
    assert got.chunk.lines == hit.lines
    assert got.chunk.pages == hit.pages
    assert got.chunk.heading == hit.heading
    assert got.generation == client.health()["generation"]


def test_headers_are_read_into_the_response(client: Client) -> None:
    result = client.search("backups")
    # No key given: the server filed the call under one of its own, and said which.
    assert result.response.key and result.response.key.startswith("srv-")
    assert result.response.replayed is False and result.response.late is False
    assert result.response.read_only is False
    quota = result.response.rate_limit
    assert quota is not None
    assert (quota.limit, quota.window_seconds) == (600, 60)
    assert quota.remaining is not None and 0 <= quota.remaining < 600
    assert quota.reset_seconds is not None and 0 <= quota.reset_seconds <= 60


def test_call_returns_the_answer_as_a_dict(client: Client) -> None:
    answer = client.call("search_docs", {"query": "backups", "top_k": 1})
    typed = client.search("backups", top_k=1)
    assert [hit["chunk_id"] for hit in answer["hits"]] == [typed.hits[0].chunk_id]
    chunk = client.call("get_chunk", {"chunk_id": typed.hits[0].chunk_id})
    assert chunk["chunk"]["text"] == typed.hits[0].text


def test_calls_are_filed_under_the_tokens_client(client: Client, server, unique: str) -> None:
    client.search(f"backups {unique}")
    [event] = server.events_for_query(unique)
    assert event["scope"] == CLIENT_ID and event["tool"] == "search_docs"


def test_an_unknown_tool_is_refused(client: Client) -> None:
    with pytest.raises(GroundidxError) as refused:
        client.call("no_such_tool", {})
    error = refused.value
    assert (error.status, error.code, error.tool) == (404, "unknown_tool", "no_such_tool")
