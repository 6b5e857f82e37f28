"""Keys over HTTP: the same key twice is replayed (``Idempotent-Replayed: true``) and audited
once; with other arguments it is refused; keys ``call_key`` makes from any parts are accepted."""

from __future__ import annotations

import pytest
from running_server import Server

from groundidx import Client, GroundidxError, call_key


def test_the_same_key_twice_is_replayed_and_audited_once(
    client: Client, server: Server, unique: str
) -> None:
    key = call_key(unique, "retrieve", "call_7")
    first = client.search("rotate the signing key", top_k=2, key=key)
    again = client.search("rotate the signing key", top_k=2, key=key)
    assert first.response.key == key and first.response.replayed is False
    assert again.response.key == key and again.response.replayed is True
    assert again.hits == first.hits and again.generation == first.generation
    [event] = server.events(key=key)
    assert event["key_source"] == "caller" and event["tool"] == "search_docs"


def test_an_unknown_chunk_under_a_key_is_replayed_as_the_same_error(
    client: Client, server: Server, unique: str
) -> None:
    key = call_key(unique, "read", "call_1")
    errors = []
    for _ in range(2):
        with pytest.raises(GroundidxError) as raised:
            client.get_chunk("f" * 64, key=key)
        errors.append(raised.value)
    assert [(e.code, e.key) for e in errors] == [("not_found", key)] * 2
    assert errors[0].problem == errors[1].problem
    assert len(server.events(key=key)) == 1


def test_the_same_key_with_other_arguments_is_refused(
    client: Client, server: Server, unique: str
) -> None:
    key = call_key(unique, "retrieve", "call_1")
    client.search("backups", key=key)
    with pytest.raises(GroundidxError) as raised:
        client.search("restore", key=key)
    assert (raised.value.status, raised.value.code) == (422, "idempotency_key_reused")
    assert key in raised.value.detail
    assert len(server.events(key=key)) == 1


def test_keys_of_long_and_unusual_parts_are_accepted(
    client: Client, server: Server, unique: str
) -> None:
    key = call_key(unique + "/" + "x" * 300, "étape 3", "toolu_01/ABC")
    assert client.search("backups", key=key).response.key == key
    assert client.search("backups", key=key).response.replayed
    [event] = server.events(key=key)
    assert event["key_source"] == "caller"


def test_a_key_with_a_quote_goes_as_a_bare_header(
    client: Client, server: Server, unique: str
) -> None:
    key = f'{unique}"quoted\\'
    assert client.search("backups", key=key).response.key == key
    assert client.search("backups", key=key).response.replayed
    assert len(server.events(key=key)) == 1


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "naïve", '"a"b'])
def test_a_key_the_server_would_refuse_is_refused_before_sending(
    client: Client, server: Server, key: str
) -> None:
    before = len(server.audit())
    with pytest.raises(GroundidxError) as raised:
        client.search("backups", key=key)
    assert (raised.value.status, raised.value.code) == (None, "idempotency_key_invalid")
    assert len(server.audit()) == before
