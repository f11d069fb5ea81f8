"""numdifftools ``Gradient`` (central differences with Richardson extrapolation).

``nd.Gradient(fun, full_output=True)(x0)`` at its defaults (``method="central"``,
``order=2``, its own step sequence); the check passes when
``max |g_nd - g| <= RTOL * max |g|`` with ``RTOL = 1e-6``. The error estimate it
returns is used for the reference-accuracy table (coverage of the true error).
At defaults the function runs in the case's dtype; the careful variant casts the
inputs to float64 first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..zoo import Case
from .common import Counter, ToolResult, accuracy, first_line, measure

__all__ = ["run", "FRAMEWORKS", "MAX_N", "RTOL"]

FRAMEWORKS = ("numpy",)
MAX_N = 10_000
RTOL = 1e-6
"""Pass when ``max |g_nd - g| <= RTOL * max |g|``."""


def run(case: Case, careful: bool = False) -> ToolResult:
    """Run numdifftools on a NumPy case and compare with its hand-written gradient."""
    import numdifftools as nd

    p = case.problem("float64" if careful else None)
    shape = np.shape(p.x64)

    def fun(xf: np.ndarray) -> float:
        return float(np.asarray(p.f(p.o.const(np.reshape(xf, shape))), dtype=np.float64))

    counted = Counter(fun)
    x0 = np.ravel(p.x64)

    def go() -> Any:
        with np.errstate(all="ignore"):
            return nd.Gradient(counted, full_output=True)(x0)

    m = measure(go)
    if m.error is not None:
        return ToolResult("error", counted.calls, m.seconds, m.peak_memory, first_line(m.error))
    result = m.value  # an EstimateResult: estimate, error_estimate, final_step, best_index
    g_nd = np.ravel(np.asarray(result.estimate, dtype=np.float64))
    assert p.grad is not None
    with np.errstate(all="ignore"):
        g = np.ravel(np.asarray(p.grad(p.x), dtype=np.float64))
        worst = float(np.max(np.abs(g_nd - g)))
        scale = float(np.max(np.abs(g)))
    ok = bool(np.isfinite(worst) and worst <= RTOL * scale)
    err_est = np.ravel(np.asarray(result.error_estimate, dtype=np.float64))
    extra = accuracy(g_nd, err_est if err_est.shape == g_nd.shape else None, p.truth)
    detail = f"max |g_nd - g| = {worst:.3g}, max |g| = {scale:.3g}"
    return ToolResult(
        "pass" if ok else "fail", counted.calls, m.seconds, m.peak_memory, detail, extra
    )
