"""The one exception the client raises, so that an agent loop needs a single ``except``.

groundidx answers every error of its JSON API as ``application/problem+json`` (RFC 9457) with a
stable ``code``; the exception keeps that code, the HTTP status, the detail, how long to wait
before a retry and the whole problem body. A failure to reach the server at all is raised as the
same class with ``status`` None and code ``connection_failed``, because the caller's remedy is
the same as for ``busy`` or ``unavailable``: retry later with the same idempotency key.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .models import RateLimit

#: The code of a request that got no HTTP answer (refused connection, timeout, reset).
CONNECTION_FAILED = "connection_failed"
#: The code of an HTTP answer that is not groundidx's: not JSON, or not the shape expected.
UNEXPECTED_RESPONSE = "unexpected_response"

#: Codes after which the same call, with the same key, may succeed later.
RETRYABLE_CODES = frozenset(
    {"rate_limited", "busy", "unavailable", "cancelled", "body_timeout", CONNECTION_FAILED}
)


class GroundidxError(Exception):
    """A call groundidx refused or could not answer.

    Attributes:
        status: the HTTP status, or None when no answer came (``connection_failed``).
        code: the problem's stable ``code`` (``invalid_arguments``, ``not_found``,
            ``unauthorized``, ``idempotency_key_reused``, ``rate_limited``, ``busy``, ...).
        detail: what was wrong, in the server's words.
        retry_after: seconds to wait before retrying, from ``Retry-After`` (or the body's
            ``retry_after_seconds``); None when the server gave none.
        problem: the whole problem+json body as a dict (empty when there was none).
        key: the idempotency key the server filed the call under, when it said.
        rate_limit: the client's quota from the ``RateLimit`` headers, when sent.
        tool: the tool that was called.
    """

    def __init__(
        self,
        *,
        status: Optional[int],
        code: str,
        detail: str,
        tool: str,
        retry_after: Optional[float] = None,
        problem: Optional[Dict[str, Any]] = None,
        key: Optional[str] = None,
        rate_limit: Optional[RateLimit] = None,
    ) -> None:
        where = f"HTTP {status}" if status is not None else "no answer"
        wait = f"; retry after {retry_after:g} s" if retry_after is not None else ""
        super().__init__(f"groundidx {tool}: {code} ({where}): {detail}{wait}")
        self.status = status
        self.code = code
        self.detail = detail
        self.tool = tool
        self.retry_after = retry_after
        self.problem: Dict[str, Any] = dict(problem or {})
        self.key = key
        self.rate_limit = rate_limit

    @property
    def retryable(self) -> bool:
        """Whether the same call with the same key may succeed later (after ``retry_after``)."""
        return self.code in RETRYABLE_CODES
