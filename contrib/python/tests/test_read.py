"""Reading around a hit through the client: ``read_document`` around a passage, by lines and by
pages, pinned to a search's generation, two roots told apart; ``list_documents`` with filters;
both keyed like a search."""

from __future__ import annotations

import pytest

from groundidx import Client, GroundidxError


def test_read_around_a_hit(client: Client, unique: str) -> None:
    result = client.search("restore a ledger from the cold bucket", top_k=1)
    hit = result.hits[0]
    assert hit.paths == ("ops/backups.md",)
    around = client.read_document(chunk_id=hit.chunk_id, around=1, generation=result.generation)
    assert around["generation"] == result.generation
    assert around["document"]["path"] == "ops/backups.md"
    assert around["document"]["title"] == "Backups"
    assert around["document"]["tags"] == ["ops"]
    texts = [passage["text"] for passage in around["passages"]]
    assert hit.text in texts
    assert any("Nightly backups" in text for text in texts)
    assert [p["ordinal"] for p in around["passages"]] == sorted(
        p["ordinal"] for p in around["passages"]
    )


def test_a_path_under_two_roots_needs_its_root(client: Client, roots: tuple) -> None:
    with pytest.raises(GroundidxError) as refused:
        client.read_document(path="handbook/key-rotation.md")
    assert refused.value.code == "ambiguous_path" and refused.value.status == 409
    assert all(str(root) in refused.value.detail for root in roots)
    by_name = client.read_document(path="handbook/key-rotation.md", root="b")
    assert by_name["document"]["root"] == str(roots[1])
    lines = client.read_document(path="handbook/key-rotation.md", root="a", lines=[10, 12])
    assert [p["heading"] for p in lines["passages"]] == ["Signing key rotation > Rotate the key"]


def test_a_pdf_is_read_by_pages(client: Client) -> None:
    page = client.read_document(path="manuals/vault.pdf", pages=[2, 2])
    assert page["passages"], page
    assert all(p["pages"][0] <= 2 <= p["pages"][1] for p in page["passages"])


def test_listing_with_filters(client: Client, roots: tuple) -> None:
    everything = client.list_documents()
    assert {(r["root"], r["documents"]) for r in everything["roots"]} == {
        (str(roots[0]), 3),
        (str(roots[1]), 1),
    }
    security = client.list_documents(tags=["security"], root="a")
    assert [d["path"] for d in security["documents"]] == ["handbook/key-rotation.md"]
    assert security["documents"][0]["fields"]["title"] == "Signing key rotation"
    by_field = client.list_documents(fields={"title": "backups"})
    assert [d["path"] for d in by_field["documents"]] == ["ops/backups.md"]
    pdfs = client.list_documents(path_glob="**/*.pdf")
    assert [d["path"] for d in pdfs["documents"]] == ["manuals/vault.pdf"]
    with pytest.raises(GroundidxError) as refused:
        client.list_documents(path_glob="[")
    assert refused.value.code == "invalid_arguments" and "path_glob" in refused.value.detail


def test_reads_are_keyed(client: Client, unique: str) -> None:
    first = client.request("read_document", {"path": "ops/backups.md"}, key=unique)
    again = client.request("read_document", {"path": "ops/backups.md"}, key=unique)
    assert again.response.replayed and not first.response.replayed
    assert again.body == first.body
    with pytest.raises(GroundidxError) as refused:
        client.read_document(path="manuals/vault.pdf", key=unique)
    assert refused.value.code == "idempotency_key_reused"


def test_search_takes_the_cli_filters(client: Client, roots: tuple) -> None:
    in_b = client.search("signing key", root="b")
    assert in_b.hits and all(hit.paths == ("handbook/key-rotation.md",) for hit in in_b.hits)
    assert client.search("restore backups", root="b").hits == ()
    ops = client.search("restore backups key", path_glob="ops/**")
    assert ops.hits and {hit.path for hit in ops.hits} == {"ops/backups.md"}
    titled = client.search("key backups", fields={"title": "BACKUPS"})
    assert {hit.path for hit in titled.hits} == {"ops/backups.md"}


def test_the_retrievers_take_the_filters(client: Client, langchain, llama_index) -> None:
    documents = langchain.GroundidxRetriever(client=client, path_glob="ops/*.md").invoke(
        "restore backups key"
    )
    assert documents and {d.metadata["path"] for d in documents} == {"ops/backups.md"}
    nodes = llama_index.GroundidxRetriever(client, fields={"title": "signing key rotation"}).retrieve(
        "rotate key backups"
    )
    assert nodes and {n.node.metadata["path"] for n in nodes} == {"handbook/key-rotation.md"}
