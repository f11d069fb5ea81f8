"""Run tool-on-case jobs in a worker process with a per-job timeout.

The worker imports frameworks as cases need them and warms each framework up
once (every tool on a tiny case, results discarded) so that one-off import and
initialisation costs are not charged to the first case. A job that runs past
its timeout gets its worker killed and restarted; the job is recorded as
``timeout``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import warnings
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["Worker", "WARMUP_CASE"]

WARMUP_CASE = "smooth/softmax-xent-10/{framework}/float64"
"""The case each framework is warmed up on (every applicable tool, untimed)."""


def _quiet() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    warnings.simplefilter("ignore")


def _serve(conn: Connection) -> None:
    """Worker loop: answer ``("job", case, tool)`` and ``("cnn", size)`` messages."""
    _quiet()
    from .tools import by_key
    from .tools.common import ToolResult, first_line, measure
    from .zoo import by_name

    cases = by_name()
    tools = by_key()
    warmed: set[str] = set()

    def warm(framework: str) -> None:
        case = cases[WARMUP_CASE.format(framework=framework)]
        for tool in tools.values():
            if tool.applies(case):
                try:
                    tool.run(case)
                except Exception:  # noqa: BLE001, S110 - warm-up only
                    pass
        warmed.add(framework)

    while True:
        msg = conn.recv()
        if msg is None:
            return
        if msg[0] == "job":
            _, case_name, tool_key = msg
            case = cases[case_name]
            if case.framework not in warmed:
                warm(case.framework)
            conn.send("started")
            try:
                result = tools[tool_key].run(case)
            except Exception as exc:  # noqa: BLE001 - an adapter bug is recorded, not fatal
                result = ToolResult("error", None, 0.0, None, first_line(exc))
            conn.send(result.to_dict())
        elif msg[0] == "cnn":
            from . import cnn_input_gradient as cnn

            size = msg[1]
            conn.send("started")
            out: dict[str, Any] = {}
            runs: list[tuple[str, Callable[[int], Any]]] = [
                ("tensorflow", cnn.run_tensorflow),
                ("torch", cnn.run_torch),
            ]
            for name, fn in runs:
                m = measure(partial(fn, size))
                out[name] = {
                    "rows": m.value,
                    "error": None if m.error is None else first_line(m.error),
                    "seconds": m.seconds,
                    "peak_memory": m.peak_memory,
                }
            conn.send(out)


class Worker:
    """A worker process that runs jobs; restarted after a timeout.

    Parameters
    ----------
    timeout : float
        Seconds a job may take before the worker is killed.
    """

    SETUP_SECONDS = 240.0
    """Time allowed for imports and a framework's warm-up before a job starts."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def call(self, msg: tuple[Any, ...], timeout: float | None = None) -> Any | None:
        """Send ``msg``; the answer, or None when it took longer than the timeout.

        The clock starts when the worker has the framework imported and warmed up
        (it says ``"started"``); imports and warm-up get :attr:`SETUP_SECONDS`.
        """
        if self._proc is None:
            self._start()
        assert self._conn is not None
        self._conn.send(msg)
        for limit in (self.SETUP_SECONDS, timeout or self.timeout):
            try:
                if not self._conn.poll(limit):
                    self._kill()
                    return None
                answer = self._conn.recv()
            except (EOFError, OSError):
                self._kill()
                return None
            if answer != "started":
                return answer
        return None

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc, self._conn = None, None

    def close(self) -> None:
        """Stop the worker."""
        if self._conn is not None:
            try:
                self._conn.send(None)
                self._proc.join(10)
            except (OSError, BrokenPipeError):
                pass
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._proc, self._conn = None, None
