"""A real ``groundidx serve`` for the tests: a store ingested from ``docs_corpus``, a tokens
file, a free loopback port, and the store's audit log read with ``groundidx audit --json``."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

#: The one token of the tokens file, and the client it names.
TOKEN = "test-token-0123456789abcdef"
CLIENT_ID = "agent-tests"


def clean_env() -> Dict[str, str]:
    """This process's environment without groundidx's own settings, so nothing of the caller's
    (a store, a ledger, a rate limit) changes what the tests run against."""
    return {name: value for name, value in os.environ.items() if not name.startswith("GROUNDIDX_")}


def run(binary: str, args: Sequence[str], cwd: Path) -> str:
    """Runs ``groundidx ARGS`` and returns its stdout; fails with its stderr."""
    done = subprocess.run(
        [binary, *args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise AssertionError(
            f"groundidx {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}"
        )
    return done.stdout


class Server:
    """``groundidx --store STORE serve`` on 127.0.0.1, a free port, with the tokens file."""

    def __init__(self, binary: str, store: Path, work: Path, extra: Sequence[str] = ()) -> None:
        self.binary = binary
        self.store = store
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.tokens = work / "tokens.toml"
        self.tokens.write_text(f'[tokens]\n"{TOKEN}" = "{CLIENT_ID}"\n', encoding="utf-8")
        self.log = work / "serve.log"
        self.url = ""
        self._extra = list(extra)
        self._process: Optional[subprocess.Popen] = None

    def start(self, wait: float = 30.0) -> "Server":
        log = open(self.log, "wb")
        self._process = subprocess.Popen(
            [
                self.binary,
                "--store",
                str(self.store),
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tokens",
                str(self.tokens),
                *self._extra,
            ],
            cwd=self.work,
            env=clean_env(),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise AssertionError(
                    f"groundidx serve exited {self._process.returncode}: {self.log.read_text()}"
                )
            if not self.url:
                for line in self.log.read_text(errors="replace").splitlines():
                    if line.startswith("listening on "):
                        self.url = line[len("listening on ") :].strip()
            if self.url and self._healthy():
                return self
            time.sleep(0.05)
        self.stop()
        raise AssertionError(
            f"groundidx serve did not answer /health within {wait} s: {self.log.read_text()}"
        )

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=15)

    def audit(self) -> List[Dict[str, Any]]:
        """Every event of the store's audit log (``groundidx audit --json``)."""
        out = run(self.binary, ["--store", str(self.store), "--json", "audit"], self.work)
        return json.loads(out)["events"]

    def events(self, **match: Any) -> List[Dict[str, Any]]:
        """The audit events whose fields equal ``match`` (``key=…``, ``tool=…``)."""
        return [
            event
            for event in self.audit()
            if all(event.get(name) == value for name, value in match.items())
        ]

    def events_for_query(self, text: str) -> List[Dict[str, Any]]:
        """The audit events of calls whose arguments hold ``text`` (a query made unique)."""
        return [event for event in self.audit() if text in event.get("arguments", "")]
