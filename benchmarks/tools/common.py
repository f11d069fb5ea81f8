"""What every tool adapter shares: the result type, call counting, time and memory."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ToolResult",
    "Measured",
    "Counter",
    "measure",
    "accuracy",
    "VERDICTS",
    "first_line",
]

VERDICTS = (
    "pass",
    "fail",
    "kink",
    "unstable",
    "nonfinite",
    "inconclusive",
    "error",
    "timeout",
    "skipped",
)
"""What a tool can say about a case: ``pass``/``fail``/``kink`` are the tools' own
answers (``kink``: polygrad's NONSMOOTH), ``unstable``/``nonfinite``/``inconclusive`` are
polygrad's other verdicts, ``error`` means the tool raised something other than its
check failure, ``timeout`` and ``skipped`` (input too large for the tool) come from the
runner."""


@dataclass
class ToolResult:
    """The outcome of one tool on one case.

    Attributes
    ----------
    verdict : str
        One of :data:`VERDICTS`.
    evaluations : int or None
        Calls of the case's function counted by a wrapper (a batched call counts
        once).
    seconds : float
        Wall time of the tool's call (the case is built before the clock starts).
    peak_memory : int or None
        Peak resident memory above the level before the call, in bytes (Linux
        ``VmHWM`` after resetting it; None where it cannot be read).
    detail : str
        The first line of the tool's message, or why the verdict was reached.
    extra : dict
        Tool-specific numbers (reference accuracy, polygrad's reference method...).
    """

    verdict: str
    evaluations: int | None
    seconds: float
    peak_memory: int | None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Measured:
    """Value or exception of a call, with its wall time and peak memory."""

    value: Any
    error: BaseException | None
    seconds: float
    peak_memory: int | None


class Counter:
    """Wrap a function and count its calls.

    Parameters
    ----------
    f : callable
        The function to wrap.
    """

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f
        self.calls = 0
        # a transparent wrapper (as functools.wraps makes one): polygrad's capture cache
        # then sees the function, not a count that changes with every call, which would
        # make it capture the function again for every target a check builds
        self.__wrapped__ = f

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.f(*args, **kwargs)


_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def _rss(key: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        _CLEAR.write_text("5")  # Linux: reset VmHWM to the current RSS
        return True
    except OSError:
        return False


def measure(fn: Callable[[], Any]) -> Measured:
    """Call ``fn()``; return its value or exception, wall time and peak memory.

    Peak memory is the rise of the process's peak resident set size (``VmHWM``)
    during the call, after resetting it; None on systems without ``/proc``.
    Exceptions are caught and returned, never raised.
    """
    base = _rss("VmRSS") if _reset_peak() else None
    t0 = time.perf_counter()
    value, error = None, None
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - every tool failure is data here
        error = exc
    seconds = time.perf_counter() - t0
    peak = _rss("VmHWM")
    mem = None if base is None or peak is None else max(peak - base, 0)
    return Measured(value, error, seconds, mem)


def first_line(exc: BaseException | str, limit: int = 200) -> str:
    """The first non-empty line of an exception's message, prefixed by its type."""
    if isinstance(exc, BaseException):
        text = str(exc).strip()
        head = next((ln for ln in text.splitlines() if ln.strip()), "")
        text = f"{type(exc).__name__}: {head}"
    else:
        text = exc
    return text[:limit]


def accuracy(
    estimate: np.ndarray, error_bar: np.ndarray | None, truth: np.ndarray | None
) -> dict[str, Any]:
    """Digits of a derivative estimate against the closed form, and error-bar coverage.

    Parameters
    ----------
    estimate : numpy.ndarray
        The numerical derivative, shape ``(n,)``.
    error_bar : numpy.ndarray or None
        Its stated absolute error per entry, shape ``(n,)``.
    truth : numpy.ndarray or None
        The closed-form gradient, shape ``(n,)``.

    Returns
    -------
    dict
        ``digits``: ``-log10(max|estimate - truth| / max|truth|)`` (capped at 17);
        ``covered``: fraction of entries with ``|estimate - truth| <= error_bar +
        64 eps (|truth_i| + rms(truth))`` (the float64 closed form is itself rounded,
        and cancels in places: softmax minus one-hot, large coefficients); empty when
        the truth is unknown or not finite.
    """
    if truth is None:
        return {}
    est = np.ravel(np.asarray(estimate, dtype=np.float64))
    tru = np.ravel(np.asarray(truth, dtype=np.float64))
    if est.shape != tru.shape or not np.all(np.isfinite(tru)) or not np.any(tru):
        return {}
    with np.errstate(all="ignore"):
        err = np.abs(est - tru)
        worst = float(np.max(err)) if np.all(np.isfinite(err)) else float("inf")
        rel = worst / float(np.max(np.abs(tru)))
    out: dict[str, Any] = {"digits": float(min(17.0, -np.log10(rel))) if rel > 0 else 17.0}
    if error_bar is not None:
        bar = np.ravel(np.asarray(error_bar, dtype=np.float64))
        rms = float(np.sqrt(np.mean(tru**2)))
        slack = 64 * np.finfo(np.float64).eps * (np.abs(tru) + rms)
        out["covered"] = float(np.mean(err <= bar + slack))
    return out
