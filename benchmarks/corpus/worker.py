"""Run corpus cases in a worker process with a per-case timeout, rows written as they come.

The worker imports the frameworks once; a case that runs past its timeout gets the
worker killed (and restarted for the next case) and is recorded as ``timeout``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .runner import CaseKey

__all__ = ["run_all"]

SETUP_SECONDS = 300.0
"""Time allowed for a worker's imports and a catalog's enumeration."""


def _serve(conn: Connection) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    warnings.simplefilter("ignore")
    from .runner import run_case

    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(("started", None))
        conn.send(("row", run_case(CaseKey(*msg))))


class _Worker:
    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None

    def call(self, key: CaseKey, timeout: float) -> dict[str, Any] | None:
        if self._proc is None:
            parent, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
            self._proc.start()
            child.close()
            self._conn = parent
        assert self._conn is not None
        self._conn.send(tuple(key.__dict__.values()))
        limit = SETUP_SECONDS + timeout
        while True:
            try:
                if not self._conn.poll(limit):
                    self.close(kill=True)
                    return None
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                self.close(kill=True)
                return None
            if kind == "row":
                return value
            limit = timeout

    def close(self, kill: bool = False) -> None:
        if self._conn is not None and not kill:
            try:
                self._conn.send(None)
                self._proc.join(10)
            except (OSError, BrokenPipeError):
                pass
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._proc, self._conn = None, None


def _timed_out(key: CaseKey, timeout: float) -> dict[str, Any]:
    return {
        "name": key.name,
        **key.__dict__,
        "status": "timeout",
        "reason": f"no answer within {timeout:g} s (worker restarted)",
    }


def run_all(
    keys: Iterable[CaseKey], out: Path, timeout: float, deadline: float | None = None
) -> Iterator[dict[str, Any]]:
    """Run ``keys`` in order, appending each row to the JSON-lines file ``out``.

    Parameters
    ----------
    keys : iterable of CaseKey
        The cases.
    out : Path
        JSON-lines file; rows are appended (and flushed) one by one, so a partial
        run still gives a table.
    timeout : float
        Seconds one case may take (after the worker's imports).
    deadline : float, optional
        ``time.time()`` after which no new case is started.

    Yields
    ------
    dict
        Each row as it is written.
    """
    w = _Worker()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with out.open("a") as fh:
            for key in keys:
                if deadline is not None and time.time() > deadline:
                    print("deadline reached: stopping", file=sys.stderr)
                    break
                row = w.call(key, timeout) or _timed_out(key, timeout)
                fh.write(json.dumps(row, default=str) + "\n")
                fh.flush()
                yield row
    finally:
        w.close()
