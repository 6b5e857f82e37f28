"""The package imports with no framework installed; each retriever module says which extra
to install when its framework is missing. Run in a fresh interpreter where importing the
frameworks fails, as it would without them."""

from __future__ import annotations

import subprocess
import sys

BLOCK = "import sys; sys.modules['langchain_core'] = None; sys.modules['llama_index'] = None; "


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code], capture_output=True, text=True, timeout=60
    )


def test_the_client_needs_no_framework() -> None:
    done = run("import groundidx; print(groundidx.call_key('r', 1, 'c'), groundidx.Client())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("r/1/c Client(")
    assert "langchain" not in done.stderr and "llama" not in done.stderr


def test_each_retriever_names_its_extra() -> None:
    for module, extra in (("langchain", "langchain"), ("llama_index", "llama-index")):
        done = run(f"import groundidx.{module}")
        assert done.returncode != 0
        assert f"pip install 'groundidx[{extra}]'" in done.stderr, done.stderr
