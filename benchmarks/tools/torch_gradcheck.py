"""``torch.autograd.gradcheck`` (slow mode and ``fast_mode=True``) at its defaults.

Defaults: ``eps=1e-6``, ``atol=1e-5``, ``rtol=1e-3``, ``raise_exception=True``.
At defaults a float32/bfloat16 case runs in its own dtype, as a user who just
calls it would (gradcheck warns that it wants float64); the careful variant casts
the inputs (and so the whole computation) to float64 first.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..zoo import Case
from .common import Counter, ToolResult, first_line, measure

__all__ = ["run", "FRAMEWORKS", "MAX_N"]

FRAMEWORKS = ("torch",)
MAX_N = {"slow": 10_000, "fast": 10_000_000}
"""Largest input size run per mode (slow mode builds the full Jacobian: 2n calls)."""


def run(case: Case, careful: bool = False, fast_mode: bool = False) -> ToolResult:
    """Run gradcheck on ``case``.

    Parameters
    ----------
    case : Case
        A PyTorch case.
    careful : bool
        Cast the inputs to float64 first.
    fast_mode : bool
        ``fast_mode=True`` (a random-projection check) instead of the full Jacobian.

    Returns
    -------
    ToolResult
        ``pass`` when gradcheck returns True, ``fail`` on ``GradcheckError``,
        ``error`` on any other exception.
    """
    import torch
    from torch.autograd.gradcheck import GradcheckError

    p = case.problem("float64" if careful else None)
    f = Counter(p.f)
    x = p.x.detach().clone().requires_grad_(True)

    def go() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.autograd.gradcheck(f, (x,), fast_mode=fast_mode)

    m = measure(go)
    if m.error is None:
        verdict, detail = ("pass", "") if m.value else ("fail", "returned False")
    elif isinstance(m.error, GradcheckError):
        verdict, detail = "fail", first_line(m.error)
    else:
        verdict, detail = "error", first_line(m.error)
    return ToolResult(verdict, f.calls, m.seconds, m.peak_memory, detail)
