"""What the client puts on the wire and reads back from it, seen by a recording HTTP server:
the tool's path, the JSON body, the token, the ``Idempotency-Key`` header's two forms, and
headers groundidx may send that the real server in these tests does not (an HTTP-date
``Retry-After``, ``Idempotent-Replayed: late``, a read-only replica)."""

from __future__ import annotations

import json
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from groundidx import Client, GroundidxError


class Recorder:
    """A loopback HTTP server that records each request and answers what it is told to."""

    def __init__(self) -> None:
        self.requests: List[Dict[str, Any]] = []
        self.answer: Tuple[int, Dict[str, str], bytes] = (200, {}, b"{}")
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server interface
                length = int(self.headers.get("Content-Length", "0"))
                recorder.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                status, headers, body = recorder.answer
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture()
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.http.shutdown()
    server.http.server_close()


def test_read_document_and_list_documents_post_their_tool(recorder: Recorder) -> None:
    client = Client(recorder.url + "/", token="secret-token-0123456789")
    recorder.answer = (200, {"Content-Type": "application/json"}, b'{"documents": []}')
    assert client.list_documents(path_prefix="ops/", key="run/1/a") == {"documents": []}
    assert client.read_document(path="ops/backups.md", root="/docs") == {"documents": []}
    listed, read = recorder.requests
    assert listed["path"] == "/v1/tools/list_documents"
    assert listed["body"] == {"path_prefix": "ops/"}
    assert listed["headers"]["idempotency-key"] == '"run/1/a"'
    assert listed["headers"]["authorization"] == "Bearer secret-token-0123456789"
    assert listed["headers"]["content-type"] == "application/json"
    assert read["path"] == "/v1/tools/read_document"
    assert read["body"] == {"path": "ops/backups.md", "root": "/docs"}
    assert "idempotency-key" not in read["headers"]


def test_search_sends_only_the_arguments_given(recorder: Recorder) -> None:
    recorder.answer = (200, {}, b'{"generation": 3, "last_ingest": null, "hits": []}')
    result = Client(recorder.url).search(
        "q",
        top_k=3,
        mode="semantic",
        path_prefix="a/",
        tags=("x", "y"),
        min_score=0.5,
        cursor="c2.x",
    )
    assert recorder.requests[-1]["body"] == {
        "query": "q",
        "top_k": 3,
        "mode": "semantic",
        "path_prefix": "a/",
        "tags": ["x", "y"],
        "min_score": 0.5,
        "cursor": "c2.x",
    }
    assert (result.generation, result.hits, result.mode) == (3, (), None)
    Client(recorder.url).search("only the query")
    assert recorder.requests[-1]["body"] == {"query": "only the query"}
    assert "authorization" not in recorder.requests[-1]["headers"]


def test_a_key_with_a_quote_is_sent_bare(recorder: Recorder) -> None:
    Client(recorder.url).call("search_docs", {"query": "q"}, key='a"b\\c')
    assert recorder.requests[-1]["headers"]["idempotency-key"] == 'a"b\\c'


def test_a_late_replay_and_a_read_only_replica_are_reported(recorder: Recorder) -> None:
    recorder.answer = (
        200,
        {"Idempotent-Replayed": "late", "Groundidx-Read-Only": "1", "Idempotency-Key": "k"},
        b"{}",
    )
    info = Client(recorder.url).request("search_docs", {"query": "q"}, key="k").response
    assert (info.key, info.replayed, info.late, info.read_only) == ("k", False, True, True)


def test_retry_after_as_an_http_date(recorder: Recorder) -> None:
    import time

    problem = {
        "type": "/problems#busy",
        "title": "Store busy",
        "status": 503,
        "detail": "the ledger is locked",
        "code": "busy",
    }
    recorder.answer = (
        503,
        {
            "Content-Type": "application/problem+json",
            "Retry-After": formatdate(time.time() + 30, usegmt=True),
        },
        json.dumps(problem).encode(),
    )
    with pytest.raises(GroundidxError) as raised:
        Client(recorder.url).search("q")
    error = raised.value
    assert (error.status, error.code, error.detail) == (503, "busy", "the ledger is locked")
    assert error.retry_after is not None and 25 <= error.retry_after <= 31
    assert error.problem == problem and error.retryable


def test_an_answer_that_is_not_groundidx_is_unexpected_response(recorder: Recorder) -> None:
    recorder.answer = (502, {"Content-Type": "text/html"}, b"<html>Bad Gateway</html>")
    with pytest.raises(GroundidxError) as raised:
        Client(recorder.url).search("q")
    assert (raised.value.status, raised.value.code) == (502, "unexpected_response")
    assert "Bad Gateway" in raised.value.detail
    for body, named in ((b'{"hits": []}', "generation"), (b'{"hits": "no list"}', "str")):
        recorder.answer = (200, {}, body)
        with pytest.raises(GroundidxError) as raised:
            Client(recorder.url).search("q")
        assert (raised.value.status, raised.value.code) == (200, "unexpected_response")
        assert named in raised.value.detail
