"""Verdicts and reports: what was compared, the verdict, and the numbers behind it."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .details import Details

__all__ = ["Verdict", "Entries", "Report"]


class Verdict(str, enum.Enum):
    """Outcome of a gradient check, for one entry or for the whole check.

    Ordered from worst to best: the verdict of a check is the worst verdict
    of its entries (``MISMATCH`` > ``NONFINITE`` > ``UNSTABLE`` >
    ``INCONCLUSIVE`` > ``NONSMOOTH`` > ``PASS``).
    """

    PASS = "PASS"
    """Autodiff agrees with the reference within the combined error bars."""
    MISMATCH = "MISMATCH"
    """The gradient rule is wrong: the difference is far outside round-off."""
    UNSTABLE = "UNSTABLE"
    """The rule is right (float64 agrees) but the working-dtype gradient lost far more digits
    than round-off explains."""
    NONSMOOTH = "NONSMOOTH"
    """The function is not differentiable here (kink, jump); one-sided derivatives reported."""
    NONFINITE = "NONFINITE"
    """Autodiff and reference disagree on finiteness (NaN/Inf on one side only)."""
    INCONCLUSIVE = "INCONCLUSIVE"
    """No reference accurate enough could be had; the report says why."""

    def __str__(self) -> str:
        return self.value


SEVERITY = {
    Verdict.MISMATCH: 5,
    Verdict.NONFINITE: 4,
    Verdict.UNSTABLE: 3,
    Verdict.INCONCLUSIVE: 2,
    Verdict.NONSMOOTH: 1,
    Verdict.PASS: 0,
}
_BY_CODE = {v: k for k, v in SEVERITY.items()}


@dataclass
class Entries:
    """Per-entry comparison data; every array has shape ``(K,)``.

    ``autodiff`` is the gradient quantity in the working dtype (rounded to
    float64), ``autodiff64`` the same rule evaluated in float64 (NaN where not
    available), ``reference`` ± ``reference_error`` the reference derivative,
    ``left``/``right`` the one-sided derivatives, ``tolerance`` the allowed
    difference for the working-dtype value and ``tolerance64`` for the float64
    value; ``status`` holds :data:`SEVERITY` codes of :class:`Verdict`;
    ``within_one_sided`` says whether autodiff lies between the one-sided
    derivatives at a kink (True elsewhere; :meth:`row` gives None there).
    """

    names: list[str]
    autodiff: np.ndarray
    autodiff64: np.ndarray
    reference: np.ndarray
    reference_error: np.ndarray
    left: np.ndarray
    left_error: np.ndarray
    right: np.ndarray
    right_error: np.ndarray
    tolerance: np.ndarray
    tolerance64: np.ndarray
    status: np.ndarray
    within_one_sided: np.ndarray

    @property
    def difference(self) -> np.ndarray:
        return np.abs(self.autodiff - self.reference)

    @property
    def badness(self) -> np.ndarray:
        """``|autodiff - reference| / tolerance`` (larger is worse), inf where non-finite."""
        with np.errstate(all="ignore"):
            b = self.difference / self.tolerance
        b = np.where(np.isfinite(b), b, np.inf)
        return b + 1e6 * self.status

    def verdicts(self) -> list[Verdict]:
        return [_BY_CODE[int(c)] for c in self.status]

    def worst(self, k: int = 5) -> np.ndarray:
        """Indices of the ``k`` worst entries."""
        return np.argsort(-self.badness, kind="stable")[:k]

    def row(self, i: int) -> dict[str, Any]:
        def num(x: float) -> float | str | None:
            x = float(x)
            if math.isnan(x):
                return None
            return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")

        return {
            "name": self.names[i],
            "verdict": str(_BY_CODE[int(self.status[i])]),
            "autodiff": num(self.autodiff[i]),
            "autodiff_float64": num(self.autodiff64[i]),
            "reference": num(self.reference[i]),
            "reference_error": num(self.reference_error[i]),
            "difference": num(self.difference[i]),
            "tolerance": num(self.tolerance[i]),
            "left": num(self.left[i]),
            "right": num(self.right[i]),
            # whether autodiff lies between the one-sided derivatives: said at a kink only
            "within_one_sided": bool(self.within_one_sided[i])
            if int(self.status[i]) == SEVERITY[Verdict.NONSMOOTH]
            else None,
        }


@dataclass
class Report:
    """The result of :func:`polygrad.check`.

    Attributes
    ----------
    verdict : Verdict
        The worst verdict over all compared entries.
    ok : bool
        True for ``PASS``; for ``NONSMOOTH`` as the ``nonsmooth=`` option of
        :func:`polygrad.check` says (by default a kink is not an error; the
        report says whether autodiff lies between the one-sided derivatives).
    entries : Entries
        Every compared quantity (Jacobian entries, or projections ``uᵀJw``).
    quantity : str
        What the entries are: ``"Jacobian entries"`` or ``"projections"``.
    details : Details
        Everything else behind the verdict: reference method, noise, steps,
        tolerances, projections' detection power, timings, notes (typed; it
        also reads as the mapping of its JSON form, ``details["reference"]["method"]``).
    """

    verdict: Verdict
    ok: bool
    entries: Entries
    quantity: str
    details: Details

    @property
    def notes(self) -> list[str]:
        return list(self.details.notes)

    def counts(self) -> dict[str, int]:
        """Number of entries per verdict."""
        out: dict[str, int] = {}
        for v in self.entries.verdicts():
            out[str(v)] = out.get(str(v), 0) + 1
        return out

    def to_dict(self, max_entries: int = 20) -> dict[str, Any]:
        """JSON-serialisable summary; the ``max_entries`` worst entries are included."""
        worst = self.entries.worst(max_entries)
        d = {
            "verdict": str(self.verdict),
            "ok": self.ok,
            "quantity": self.quantity,
            "counts": self.counts(),
            "worst_entries": [self.entries.row(int(i)) for i in worst],
            "details": _jsonable(self.details.to_dict()),
        }
        return d

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        from .render import render_text

        return render_text(self)

    def to_text(self, color: bool | None = None) -> str:
        """The text report (``str(report)``); ``color=False`` for logs and exception messages."""
        from .render import render_text

        return render_text(self, color=color)

    def plot(self, path: Any = None, ax: Any = None) -> Any:
        """Heat map of ``|autodiff - reference| / tolerance`` per Jacobian entry.

        Needs matplotlib (``pip install 'polygrad-check[plot]'``). Saves to ``path``
        (PNG/SVG by extension) when given; returns the matplotlib figure.
        """
        from .plot import plot_report

        return plot_report(self, path, ax=ax)

    def __repr__(self) -> str:
        size = len(self.entries.names)
        return f"<polygrad.Report {self.verdict} ok={self.ok} ({size} {self.quantity})>"


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if math.isnan(f):
            return None
        return f if math.isfinite(f) else ("inf" if f > 0 else "-inf")
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, enum.Enum):
        return str(x.value)
    return x
