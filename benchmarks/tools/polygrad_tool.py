"""``polygrad.check`` at its defaults.

Verdicts map as PASS → pass, MISMATCH → fail, NONSMOOTH → kink, and UNSTABLE,
NONFINITE, INCONCLUSIVE to their own lower-case labels. A NumPy case passes its
hand-written gradient as ``grad=``. Per-case options (``case.options["polygrad"]``)
are passed through (the cost table's 1e6-input case asks for projections).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..zoo import Case
from .common import Counter, ToolResult, accuracy, first_line, measure

__all__ = ["run", "FRAMEWORKS", "MAX_N", "VERDICT_MAP"]

FRAMEWORKS = ("numpy", "torch", "jax", "tensorflow")
MAX_N = 10_000_000
VERDICT_MAP = {
    "PASS": "pass",
    "MISMATCH": "fail",
    "NONSMOOTH": "kink",
    "UNSTABLE": "unstable",
    "NONFINITE": "nonfinite",
    "INCONCLUSIVE": "inconclusive",
}


def run(case: Case, careful: bool = False) -> ToolResult:
    """Run ``polygrad.check`` on ``case`` (``careful`` is ignored: defaults are the point)."""
    import polygrad as pg

    p = case.problem()
    f = Counter(p.f)
    kw: dict[str, Any] = dict(case.options.get("polygrad", {}))
    if p.grad is not None:
        kw["grad"] = p.grad

    m = measure(lambda: pg.check(f, p.x, **kw))
    if m.error is not None:
        return ToolResult("error", f.calls, m.seconds, m.peak_memory, first_line(m.error))
    report = m.value
    verdict = VERDICT_MAP[str(report.verdict)]
    ref = report.details.get("reference", {})
    extra: dict[str, Any] = {
        "verdict": str(report.verdict),
        "ok": bool(report.ok),
        "counts": report.counts(),
        "reference_method": ref.get("method"),
        "reference_points": ref.get("evaluations"),
        "strategy": report.details.get("strategy"),
    }
    e = report.entries
    if report.details.get("strategy") == "full" and len(e.names) == case.n:
        extra.update(accuracy(e.reference, e.reference_error, p.truth))
    detail = ""
    if verdict != "pass":
        i = int(e.worst(1)[0])
        row = e.row(i)
        detail = (
            f"{report.verdict}; worst {row['name']}: autodiff={_fmt(row['autodiff'])} "
            f"(float64 {_fmt(row['autodiff_float64'])}), reference={_fmt(row['reference'])} "
            f"± {_fmt(row['reference_error'])}, tolerance {_fmt(row['tolerance'])}"
        )
    return ToolResult(verdict, f.calls, m.seconds, m.peak_memory, detail, extra)


def _fmt(v: Any) -> str:
    if v is None:
        return "nan"
    if isinstance(v, str):
        return v
    return f"{v:.6g}" if np.isfinite(v) else str(v)
