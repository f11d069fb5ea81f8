"""Verdicts and the per-entry comparison data: what every stage and presentation reads.

The lowest module of the results: :mod:`polygrad.report` (the :class:`Report`), the
pipeline and the presentation (render, plot, your_terms) import these names from here,
so none of them needs the others.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SEVERITY", "Entries", "Verdict", "jsonable"]


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
    derivatives at a kink (True elsewhere; :meth:`row` gives None there);
    ``leaning`` marks entries undecided because the rule passes only by the
    round-off a right rule can inherit from intermediates of the size of ``f``,
    not measured (None: none).
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
    leaning: np.ndarray | None = None

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
            # the tolerance of the float64 evaluation of the rule, which decides MISMATCH
            # where the working dtype is narrower (UNSTABLE where only the working value fails)
            "tolerance_float64": num(self.tolerance64[i])
            if np.isfinite(self.autodiff64[i])
            else None,
            "left": num(self.left[i]),
            "right": num(self.right[i]),
            # whether autodiff lies between the one-sided derivatives: said at a kink only
            "within_one_sided": bool(self.within_one_sided[i])
            if int(self.status[i]) == SEVERITY[Verdict.NONSMOOTH]
            else None,
        }


def jsonable(x: Any) -> Any:
    """``x`` with NumPy arrays and scalars as lists and Python numbers; NaN as None, ±inf
    as ``"inf"``/``"-inf"``, enums as their values: what ``json.dumps`` accepts."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
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
