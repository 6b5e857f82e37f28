"""Fixtures: the groundidx binary (``GROUNDIDX_BIN``), a store ingested from ``docs_corpus``
and a ``groundidx serve`` on it for the whole session, a client with the server's token, and
the framework modules. A missing binary or package fails the test with what to install; no
test is skipped."""

from __future__ import annotations

import importlib
import os
import uuid
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

import docs_corpus
from running_server import TOKEN, Server, run

from groundidx import Client

INSTALL = (
    "python3 -m venv contrib/python/.venv && contrib/python/.venv/bin/pip install "
    "-r contrib/python/requirements-test.txt -e contrib/python"
)


def require(module: str) -> ModuleType:
    """Imports ``module``, or fails the test saying how to install what it needs."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        pytest.fail(f"cannot import {module} ({error}); install the test requirements: {INSTALL}")


@pytest.fixture(scope="session")
def groundidx_bin() -> str:
    binary = os.environ.get("GROUNDIDX_BIN", "")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail(
            f"GROUNDIDX_BIN={binary!r} is not an executable groundidx binary; build one "
            "(`cargo build`) and set GROUNDIDX_BIN=target/debug/groundidx"
        )
    return binary


@pytest.fixture(scope="session")
def roots(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The two ingested folders (``a``, ``b``), resolved as the server names them."""
    a, b = docs_corpus.write(tmp_path_factory.mktemp("docs"))
    return a.resolve(), b.resolve()


def ingested_store(binary: str, roots: tuple, folder: Path) -> Path:
    store = folder / "store"
    run(binary, ["--store", str(store), "--quiet", "ingest", *map(str, roots)], folder)
    return store


@pytest.fixture(scope="session")
def server(
    groundidx_bin: str, roots: tuple, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("serve")
    running = Server(groundidx_bin, ingested_store(groundidx_bin, roots, work), work).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture()
def client(server: Server) -> Client:
    return Client(server.url, token=TOKEN)


@pytest.fixture()
def unique() -> str:
    """A word no other test uses: keeps keys and audit events of tests sharing a store apart."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture()
def langchain() -> ModuleType:
    return require("groundidx.langchain")


@pytest.fixture()
def llama_index() -> ModuleType:
    return require("groundidx.llama_index")
