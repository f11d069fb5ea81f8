"""``jax.test_util.check_grads(f, (x,), order=1, modes=["rev"])`` at its defaults.

Default tolerances and step come from the input dtype (JAX's
``default_gradient_tolerance``); the check compares VJPs with finite
differences along random directions. The careful variant casts the inputs to
float64 (with ``jax_enable_x64``) first.
"""

from __future__ import annotations

from typing import Any

from ..zoo import Case
from .common import Counter, ToolResult, first_line, measure

__all__ = ["run", "FRAMEWORKS", "MAX_N"]

FRAMEWORKS = ("jax",)
MAX_N = 10_000_000


def run(case: Case, careful: bool = False) -> ToolResult:
    """Run ``check_grads`` on ``case``; ``fail`` on its AssertionError, ``error`` otherwise."""
    from jax.test_util import check_grads

    p = case.problem("float64" if careful else None)
    f = Counter(p.f)

    def go() -> Any:
        check_grads(f, (p.x,), order=1, modes=["rev"])
        return True

    m = measure(go)
    if m.error is None:
        verdict, detail = "pass", ""
    elif isinstance(m.error, AssertionError):
        verdict, detail = "fail", first_line(m.error)
    else:
        verdict, detail = "error", first_line(m.error)
    return ToolResult(verdict, f.calls, m.seconds, m.peak_memory, detail)
