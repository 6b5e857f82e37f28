"""Idempotency keys made from an orchestrator's checkpointed identity.

groundidx logs and counts each tool call once per key: a retried step that sends the same key
gets the first answer back and writes nothing. That only works when the retry sends the *same*
key, so the key must come from what the orchestrator has checkpointed (the run or thread id, the
step, the tool call's id) and never from the model or from a random value made inside the step,
which a framework that re-runs the step from its start (LangGraph does on resume) would make
anew. ``call_key`` turns those three parts into one key the server accepts.
"""

from __future__ import annotations

import hashlib
import string
from typing import Union

Part = Union[str, int]

#: The server's limit on a key's length.
MAX_KEY_LENGTH = 255
#: A part longer than this is replaced by its hash, so three parts always fit in one key.
MAX_PART_LENGTH = 64
#: Separates the parts; never inside a part used as it is.
SEPARATOR = "/"
#: Starts a hashed part; never starts a part used as it is, so the two cannot be confused.
HASHED = "~"
#: Characters a part may keep as they are: visible ASCII but the separator, the hash marker's
#: role at the start, and the quote and backslash an ``Idempotency-Key`` sf-string cannot carry.
_VERBATIM = frozenset(string.ascii_letters + string.digits + "!#$%&'()*+,-.:;<=>?@[]^_`{|}~")


def _part(name: str, value: Part) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(
            f"call_key: {name} must be a str or an int taken from the checkpoint, "
            f"not {type(value).__name__}"
        )
    text = str(value)
    if text == "":
        raise ValueError(f"call_key: {name} is empty; pass the checkpointed {name}")
    verbatim = (
        len(text) <= MAX_PART_LENGTH
        and not text.startswith(HASHED)
        and all(char in _VERBATIM for char in text)
    )
    if verbatim:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
    return HASHED + digest


def call_key(run_id: Part, step: Part, call_id: Part) -> str:
    """The idempotency key of one tool call: ``run_id/step/call_id``.

    Pass identity the orchestrator has checkpointed: the run or thread id, the step (a node's
    step number, an activity id), and the id of the tool call within the step (the tool-call id
    of the model message already in the checkpoint, or an ordinal). The same three parts always
    give the same key, in any process; different parts give different keys. A part of at most
    64 visible ASCII characters (not ``/``, ``"`` or ``\\``, not starting with ``~``) is kept as
    it is, so keys stay readable in ``groundidx audit``; any other part (longer, non-ASCII, with
    a ``/``) is replaced by ``~`` and 32 hex digits of its SHA-256. The key is at most 194
    characters, within the server's 1 to 255 visible ASCII characters.

    Raises:
        TypeError: a part is not a str or an int.
        ValueError: a part is empty.
    """
    key = SEPARATOR.join((_part("run_id", run_id), _part("step", step), _part("call_id", call_id)))
    assert 1 <= len(key) <= MAX_KEY_LENGTH
    return key
