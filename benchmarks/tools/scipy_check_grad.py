"""``scipy.optimize.check_grad`` with a relative threshold.

``check_grad(fun, grad, x0)`` at its defaults (forward differences with
``epsilon = sqrt(eps64) ≈ 1.5e-8``, all directions) returns the 2-norm of the
difference; the check passes when that is at most ``RTOL = 1e-5`` times the
2-norm of the gradient, the threshold a careful user would pick in float64.
At defaults the function runs in the case's dtype; the careful variant casts
the inputs to float64 first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..zoo import Case
from .common import Counter, ToolResult, first_line, measure

__all__ = ["run", "FRAMEWORKS", "MAX_N", "RTOL"]

FRAMEWORKS = ("numpy",)
MAX_N = 100_000
RTOL = 1e-5
"""Pass when ``check_grad(...) <= RTOL * ||grad(x0)||_2``."""


def run(case: Case, careful: bool = False) -> ToolResult:
    """Run ``check_grad`` on a NumPy case; ``fail`` above the threshold (or non-finite)."""
    from scipy.optimize import check_grad

    p = case.problem("float64" if careful else None)
    shape = np.shape(p.x64)

    def fun(xf: np.ndarray) -> float:
        return float(np.asarray(p.f(p.o.const(np.reshape(xf, shape))), dtype=np.float64))

    def grad(xf: np.ndarray) -> np.ndarray:
        assert p.grad is not None
        return np.ravel(np.asarray(p.grad(p.o.const(np.reshape(xf, shape))), dtype=np.float64))

    counted = Counter(fun)
    x0 = np.ravel(p.x64)

    def go() -> Any:
        with np.errstate(all="ignore"):
            return check_grad(counted, grad, x0)

    m = measure(go)
    if m.error is not None:
        return ToolResult("error", counted.calls, m.seconds, m.peak_memory, first_line(m.error))
    with np.errstate(all="ignore"):
        scale = float(np.linalg.norm(grad(x0)))
    err = float(m.value)
    ok = bool(np.isfinite(err) and err <= RTOL * scale)
    detail = f"|difference| = {err:.3g}, |grad| = {scale:.3g}"
    return ToolResult("pass" if ok else "fail", counted.calls, m.seconds, m.peak_memory, detail)
