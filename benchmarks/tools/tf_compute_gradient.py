"""``tf.test.compute_gradient`` followed by ``assertAllClose`` at its defaults.

``theoretical, numerical = tf.test.compute_gradient(f, [x])`` (default step),
then ``tf.test.TestCase().assertAllClose(theoretical, numerical)`` with its
default ``rtol=1e-6, atol=1e-6``. The careful variant casts the inputs to
float64 first.
"""

from __future__ import annotations

from typing import Any

from ..zoo import Case
from .common import Counter, ToolResult, first_line, measure

__all__ = ["run", "FRAMEWORKS", "MAX_N"]

FRAMEWORKS = ("tensorflow",)
MAX_N = 10_000
"""Largest input size run (the check perturbs every input, one eager call each)."""


def run(case: Case, careful: bool = False) -> ToolResult:
    """Run compute_gradient + assertAllClose; ``fail`` on AssertionError."""
    import tensorflow as tf

    p = case.problem("float64" if careful else None)
    f = Counter(p.f)
    tc = tf.test.TestCase()

    def go() -> Any:
        theoretical, numerical = tf.test.compute_gradient(f, [p.x])
        tc.assertAllClose(theoretical, numerical)
        return True

    m = measure(go)
    if m.error is None:
        verdict, detail = "pass", ""
    elif isinstance(m.error, AssertionError):
        verdict, detail = "fail", first_line(m.error)
    else:
        verdict, detail = "error", first_line(m.error)
    return ToolResult(verdict, f.calls, m.seconds, m.peak_memory, detail)
