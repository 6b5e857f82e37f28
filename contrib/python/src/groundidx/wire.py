"""Reading groundidx's HTTP answers: problem bodies and the headers that come with a call.

Kept apart from the client so that what each header means (``Idempotency-Key``,
``Idempotent-Replayed``, ``Retry-After``, ``RateLimit-Policy``/``RateLimit``) is written once.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, Mapping, Optional

from .errors import UNEXPECTED_RESPONSE, GroundidxError
from .models import RateLimit, ResponseInfo

#: What an HTTP header value carrying an idempotency key may hold, as the server checks it.
_MAX_KEY = 255


def key_header(key: str, tool: str) -> str:
    """The ``Idempotency-Key`` header value that carries ``key``: an RFC 8941 sf-string
    (``"abc"``) when it can hold the key, else the bare key, which the server also accepts.

    Raises ``GroundidxError`` (code ``idempotency_key_invalid``, status None) for a key the
    server would refuse (not 1 to 255 visible ASCII characters) or one no header can carry
    (a leading quote with a quote or backslash inside), before anything is sent.
    """
    visible = 1 <= len(key) <= _MAX_KEY and all(0x21 <= ord(char) <= 0x7E for char in key)
    if not visible:
        raise GroundidxError(
            status=None,
            code="idempotency_key_invalid",
            detail=f"key {key!r} is not 1 to 255 visible ASCII characters; "
            "make it with groundidx.call_key",
            tool=tool,
        )
    if '"' not in key and "\\" not in key:
        return f'"{key}"'
    if not key.startswith('"'):
        return key
    raise GroundidxError(
        status=None,
        code="idempotency_key_invalid",
        detail=f"key {key!r} starts with a quote and holds a quote or backslash, so no "
        "Idempotency-Key header can carry it; make it with groundidx.call_key",
        tool=tool,
    )


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    for header, value in headers.items():
        if header.lower() == name:
            return value
    return None


def _first_item_params(value: Optional[str]) -> Dict[str, int]:
    """The integer parameters of the first item of a structured-field list
    (``"per-client";r=599;t=31`` → ``{"r": 599, "t": 31}``)."""
    if not value:
        return {}
    params: Dict[str, int] = {}
    for part in value.split(",")[0].split(";")[1:]:
        name, _, number = part.strip().partition("=")
        try:
            params[name.strip()] = int(number)
        except ValueError:
            continue
    return params


def rate_limit(headers: Mapping[str, str]) -> Optional[RateLimit]:
    """The quota the ``RateLimit-Policy`` and ``RateLimit`` headers describe, if sent."""
    policy = _first_item_params(_header(headers, "ratelimit-policy"))
    current = _first_item_params(_header(headers, "ratelimit"))
    if not policy and not current:
        return None
    return RateLimit(
        limit=policy.get("q"),
        window_seconds=policy.get("w"),
        remaining=current.get("r"),
        reset_seconds=current.get("t"),
    )


def retry_after(headers: Mapping[str, str], problem: Mapping[str, Any]) -> Optional[float]:
    """Seconds to wait: ``Retry-After`` as seconds or as an HTTP date, else the problem's
    ``retry_after_seconds``."""
    value = _header(headers, "retry-after")
    if value is not None:
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, when.timestamp() - time.time())
    seconds = problem.get("retry_after_seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        return float(seconds)
    return None


def response_info(headers: Mapping[str, str]) -> ResponseInfo:
    """The call's key, replay flag, read-only flag and quota, from its headers."""
    replayed = (_header(headers, "idempotent-replayed") or "").strip().lower()
    return ResponseInfo(
        key=_header(headers, "idempotency-key"),
        replayed=replayed == "true",
        late=replayed == "late",
        read_only=_header(headers, "groundidx-read-only") == "1",
        rate_limit=rate_limit(headers),
    )


def problem_error(
    tool: str, status: int, headers: Mapping[str, str], body: bytes
) -> GroundidxError:
    """The exception for an error answer: its problem+json fields, or, for a body that is not
    a problem (a proxy's error page), ``unexpected_response`` with the start of the body."""
    try:
        problem = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        problem = None
    info = response_info(headers)
    if not isinstance(problem, dict) or not isinstance(problem.get("code"), str):
        text = body[:200].decode("utf-8", "replace")
        return GroundidxError(
            status=status,
            code=UNEXPECTED_RESPONSE,
            detail=f"the answer is not a problem+json body: {text!r}",
            tool=tool,
            retry_after=retry_after(headers, {}),
            key=info.key,
            rate_limit=info.rate_limit,
        )
    detail = problem.get("detail")
    if not isinstance(detail, str):
        detail = str(problem.get("title") or problem["code"])
    return GroundidxError(
        status=status,
        code=problem["code"],
        detail=detail,
        tool=tool,
        retry_after=retry_after(headers, problem),
        problem=problem,
        key=info.key,
        rate_limit=info.rate_limit,
    )
