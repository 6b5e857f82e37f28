"""``call_key``: the same checkpointed identity always makes the same key, other identities
other keys, and every key is one the server accepts (1 to 255 visible ASCII characters)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from groundidx import call_key


def test_short_plain_parts_are_kept_readable() -> None:
    assert call_key("run-42", "retrieve", "call_7") == "run-42/retrieve/call_7"
    assert call_key("thread-1", 3, "retrieve:1f0c-aa") == "thread-1/3/retrieve:1f0c-aa"


def test_the_same_parts_make_the_same_key_in_any_process() -> None:
    parts = ("r" * 100, "step/2", "call_é")
    here = call_key(*parts)
    code = f"from groundidx import call_key; print(call_key(*{parts!r}))"
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == here


@pytest.mark.parametrize(
    "parts",
    [
        ("x" * 10_000, "y" * 10_000, "z" * 10_000),
        ("ünïcode", "шаг", "呼び出し"),
        ("with space", "tab\there", "new\nline"),
        ('quo"te', "back\\slash", "~tilde"),
    ],
)
def test_every_key_is_visible_ascii_within_255(parts: tuple) -> None:
    key = call_key(*parts)
    assert 1 <= len(key) <= 255
    assert all(0x21 <= ord(char) <= 0x7E for char in key)
    assert '"' not in key and "\\" not in key


def test_different_parts_make_different_keys() -> None:
    keys = {
        call_key("a/b", "c", "d"),
        call_key("a", "b/c", "d"),
        call_key("a", "b", "c/d"),
        call_key("a", "b", "c"),
        call_key("x" * 65, "s", "c"),
        call_key("x" * 66, "s", "c"),
        call_key("1", "2", "3"),
        call_key(1, 2, 4),
    }
    assert len(keys) == 8


def test_a_part_cannot_pose_as_a_hashed_part() -> None:
    hashed = call_key("x" * 65, "s", "c").split("/")[0]
    assert hashed.startswith("~")
    assert call_key(hashed, "s", "c") != call_key("x" * 65, "s", "c")


def test_an_int_step_equals_its_text() -> None:
    assert call_key("run", 3, "call") == call_key("run", "3", "call")


@pytest.mark.parametrize(
    "parts, error",
    [
        (("", "s", "c"), ValueError),
        (("r", "", "c"), ValueError),
        (("r", "s", ""), ValueError),
        ((None, "s", "c"), TypeError),
        (("r", True, "c"), TypeError),
        (("r", 1.5, "c"), TypeError),
    ],
)
def test_a_missing_or_odd_part_is_refused(parts: tuple, error: type) -> None:
    with pytest.raises(error):
        call_key(*parts)
