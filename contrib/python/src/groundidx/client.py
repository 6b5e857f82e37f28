"""A client for groundidx's JSON API (``POST /v1/tools/{tool}``), standard library only.

Every call may carry an idempotency key (the ``Idempotency-Key`` header): a retry with the same
key and arguments gets the first answer back and is logged and counted once. Make the key with
``groundidx.call_key`` from the orchestrator's checkpointed identity; without one the server
files the call under a fresh key of its own and every retry is logged and counted again.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, TypeVar

from . import wire
from .errors import CONNECTION_FAILED, UNEXPECTED_RESPONSE, GroundidxError
from .models import ChunkResult, ResponseInfo, SearchResult

DEFAULT_URL = "http://127.0.0.1:7878"
USER_AGENT = "groundidx-python/0.1.0"


@dataclass(frozen=True)
class Reply:
    """A tool's answer as a dict, with what the headers said about the call."""

    body: Dict[str, Any]
    response: ResponseInfo


class Client:
    """Calls the tools of a running ``groundidx serve``.

    Args:
        base_url: where ``groundidx serve`` listens (``http://127.0.0.1:7878`` by default).
        token: the bearer token from the server's ``--tokens`` file, if it has one.
        timeout: seconds to wait for an answer before raising ``connection_failed``.

    The client holds no connection and no state, so one instance may serve many threads.
    """

    def __init__(
        self, base_url: str = DEFAULT_URL, *, token: Optional[str] = None, timeout: float = 30.0
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url {base_url!r} is not an http(s) URL such as {DEFAULT_URL}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def __repr__(self) -> str:
        auth = ", token=…" if self.token else ""
        return f"Client({self.base_url!r}{auth})"

    # -----------------------------------------------------------------------------------------
    # The tools.

    def search(
        self,
        query: str,
        *,
        top_k: Optional[int] = None,
        mode: Optional[str] = None,
        path_prefix: Optional[str] = None,
        tags: Optional[Iterable[str]] = None,
        min_score: Optional[float] = None,
        cursor: Optional[str] = None,
        key: Optional[str] = None,
        root: Optional[str] = None,
        path_glob: Optional[str] = None,
        fields: Optional[Mapping[str, str]] = None,
    ) -> SearchResult:
        """``search_docs``: passages for ``query``, best first, never one twice.

        ``top_k`` (1 to 100; the server's default 10), ``mode`` (``hybrid``, ``lexical``,
        ``semantic``), ``path_prefix``, ``tags`` (all must match), ``min_score`` (drop hits
        whose similarity is below it), ``cursor`` (a previous answer's ``next_cursor``, with the
        same query and filters), ``root`` (an ingested folder, by path or folder name),
        ``path_glob`` (``guides/**/*.md``), ``fields`` (front-matter values, ignoring case). Arguments left None are not sent, so the server's defaults
        apply. Raises ``GroundidxError`` (``invalid_arguments``, ``cursor_expired``, …).
        """
        arguments: Dict[str, Any] = {"query": query}
        optional: Tuple[Tuple[str, Any], ...] = (
            ("top_k", top_k),
            ("mode", mode),
            ("path_prefix", path_prefix),
            ("tags", None if tags is None else list(tags)),
            ("min_score", min_score),
            ("cursor", cursor),
            ("root", root),
            ("path_glob", path_glob),
            ("fields", None if fields is None else dict(fields)),
        )
        arguments.update((name, value) for name, value in optional if value is not None)
        reply = self.request("search_docs", arguments, key=key)
        return _parse("search_docs", SearchResult.from_json, reply)

    def get_chunk(self, chunk_id: str, *, key: Optional[str] = None) -> ChunkResult:
        """``get_chunk``: one passage by the ``chunk_id`` a search returned.

        An unknown id raises ``GroundidxError`` with code ``not_found`` (status 404): a later
        ingest may have removed the passage; search again.
        """
        reply = self.request("get_chunk", {"chunk_id": chunk_id}, key=key)
        return _parse("get_chunk", ChunkResult.from_json, reply)

    def read_document(self, *, key: Optional[str] = None, **arguments: Any) -> Dict[str, Any]:
        """``read_document``: a document by ``path`` (and ``root``), whole, by ``lines`` or
        ``pages`` (``[first, last]``), or around a hit (``chunk_id``, ``around``); ``generation``
        (a search answer's) reads it as that search saw it, else raises ``document_changed``;
        ``max_chars`` and ``cursor`` page a long one. The answer as a dict: ``document``,
        ``passages``, ``generation``, ``last_ingest`` and ``next_cursor`` when more follows."""
        return self.call("read_document", arguments, key=key)

    def list_documents(self, *, key: Optional[str] = None, **arguments: Any) -> Dict[str, Any]:
        """``list_documents``: ``roots`` with their counts and ``documents`` (path, title, tags,
        fields), filtered by ``root``, ``path_prefix``, ``path_glob``, ``tags``, ``fields`` and
        ``title``; ``limit`` and ``cursor`` page them. The answer as a dict."""
        return self.call("list_documents", arguments, key=key)

    def call(
        self, tool: str, arguments: Mapping[str, Any], *, key: Optional[str] = None
    ) -> Dict[str, Any]:
        """Calls any tool with a JSON object of arguments; its answer as a dict.

        A tool this server does not have raises ``GroundidxError`` with code
        ``unknown_tool`` (404).
        """
        return self.request(tool, arguments, key=key).body

    def health(self) -> Dict[str, Any]:
        """``GET /health``: the server's status, generation and search mode."""
        status, headers, body = self._send("GET", "/health", None, {}, "health")
        if status != 200:
            raise wire.problem_error("health", status, headers, body)
        return _json_object("health", status, headers, body)

    # -----------------------------------------------------------------------------------------
    # The transport.

    def request(
        self, tool: str, arguments: Mapping[str, Any], *, key: Optional[str] = None
    ) -> Reply:
        """Sends ``POST /v1/tools/{tool}`` and returns the answer with its headers' meaning;
        every error answer raises ``GroundidxError``."""
        if not isinstance(arguments, Mapping):
            raise TypeError(f"{tool}: arguments must be a mapping, not {type(arguments).__name__}")
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = wire.key_header(key, tool)
        body = json.dumps(dict(arguments), ensure_ascii=False).encode("utf-8")
        path = "/v1/tools/" + urllib.parse.quote(tool, safe="")
        status, answer_headers, answer = self._send("POST", path, body, headers, tool)
        if status != 200:
            raise wire.problem_error(tool, status, answer_headers, answer)
        return Reply(
            body=_json_object(tool, status, answer_headers, answer),
            response=wire.response_info(answer_headers),
        )

    def _send(
        self,
        method: str,
        path: str,
        body: Optional[bytes],
        headers: Dict[str, str],
        tool: str,
    ) -> Tuple[int, Dict[str, str], bytes]:
        headers = dict(headers)
        headers["Accept"] = "application/json, application/problem+json"
        headers["User-Agent"] = USER_AGENT
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            self.base_url + path, data=body, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return answer.status, dict(answer.headers.items()), answer.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, dict(error.headers.items()), error.read()
        except (urllib.error.URLError, socket.timeout, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise GroundidxError(
                status=None,
                code=CONNECTION_FAILED,
                detail=f"no answer from {self.base_url}{path}: {reason}; is `groundidx serve` "
                "running there? Retry with the same key",
                tool=tool,
            ) from error


def _json_object(tool: str, status: int, headers: Mapping[str, str], body: bytes) -> Dict[str, Any]:
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise GroundidxError(
            status=status,
            code=UNEXPECTED_RESPONSE,
            detail=f"the answer is not JSON ({error}): {body[:200]!r}",
            tool=tool,
            key=wire.response_info(headers).key,
        ) from error
    if not isinstance(value, dict):
        raise GroundidxError(
            status=status,
            code=UNEXPECTED_RESPONSE,
            detail=f"the answer is not a JSON object: {body[:200]!r}",
            tool=tool,
        )
    return value


Answer = TypeVar("Answer")


def _parse(
    tool: str, parse: Callable[[Dict[str, Any], ResponseInfo], Answer], reply: Reply
) -> Answer:
    """Reads a tool's typed answer; an answer without a field the contract requires raises
    ``unexpected_response`` naming it, not a bare KeyError."""
    try:
        return parse(reply.body, reply.response)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        what = f"field {error}" if isinstance(error, KeyError) else f"a field ({error})"
        raise GroundidxError(
            status=200,
            code=UNEXPECTED_RESPONSE,
            detail=f"the answer lacks or mistypes {what}; is the server a groundidx of "
            "another version?",
            tool=tool,
            key=reply.response.key,
        ) from error
