"""Every error is one exception class carrying the problem's status, code, detail, wait and
body: refused arguments, an unknown chunk, a bad token, an unreachable server, the quota."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from conftest import ingested_store
from running_server import TOKEN, Server

from groundidx import CONNECTION_FAILED, Client, GroundidxError, call_key


def refusal(call) -> GroundidxError:
    with pytest.raises(GroundidxError) as raised:
        call()
    return raised.value


def test_a_bad_argument_is_invalid_arguments(client: Client) -> None:
    error = refusal(lambda: client.search("signing", top_k=0))
    assert (error.status, error.code, error.tool) == (400, "invalid_arguments", "search_docs")
    assert "top_k" in error.detail
    assert error.problem["code"] == "invalid_arguments"
    assert error.problem["type"] == "/problems#invalid-arguments"
    assert error.problem["status"] == 400
    assert error.retry_after is None and not error.retryable
    assert "invalid_arguments" in str(error) and "top_k" in str(error)


def test_an_unknown_chunk_is_not_found(client: Client) -> None:
    error = refusal(lambda: client.get_chunk("0" * 64))
    assert (error.status, error.code) == (404, "not_found")
    assert "0" * 64 in error.detail
    # An executed error is stored under a key like an answer: the server's own here.
    assert error.key and error.key.startswith("srv-")
    assert error.rate_limit is not None and error.rate_limit.limit == 600


def test_a_bad_token_is_unauthorized(server: Server) -> None:
    for token in ("not-the-token-0123456789", None):
        unauthorized = Client(server.url, token=token)
        error = refusal(lambda: unauthorized.search("signing"))  # noqa: B023 - called at once
        assert (error.status, error.code) == (401, "unauthorized")
        assert "Bearer" in error.detail


def test_no_server_is_connection_failed() -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    error = refusal(lambda: Client(f"http://127.0.0.1:{port}", timeout=5).search("signing"))
    assert error.status is None and error.code == CONNECTION_FAILED
    assert f"127.0.0.1:{port}" in error.detail
    assert error.retryable


def test_the_quota_says_when_to_retry(
    groundidx_bin: str, roots: tuple, tmp_path: Path, unique: str
) -> None:
    store = ingested_store(groundidx_bin, roots, tmp_path)
    limited = Server(groundidx_bin, store, tmp_path / "serve", ["--rate-limit", "1/60s"]).start()
    try:
        client = Client(limited.url, token=TOKEN)
        key = call_key(unique, "retrieve", "call_1")
        first = client.search("backups", key=key)
        assert first.response.rate_limit is not None
        assert (first.response.rate_limit.limit, first.response.rate_limit.remaining) == (1, 0)
        error = refusal(
            lambda: client.search("signing", key=call_key(unique, "retrieve", "call_2"))
        )
        assert (error.status, error.code) == (429, "rate_limited")
        assert error.retry_after is not None and 0 < error.retry_after <= 60
        assert error.problem["retry_after_seconds"] == error.retry_after
        assert error.rate_limit is not None and error.rate_limit.remaining == 0
        assert error.retryable
        # A replay is free, and served over the quota.
        again = client.search("backups", key=key)
        assert again.response.replayed and again.hits == first.hits
    finally:
        limited.stop()
