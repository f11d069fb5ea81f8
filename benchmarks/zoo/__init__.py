"""The gradient zoo: cases with a known truth, grouped by kind (one idea per module).

* :mod:`~benchmarks.zoo.smooth` — correct gradients that fixed-step checkers get wrong;
* :mod:`~benchmarks.zoo.bugs` — wrong gradients planted in custom rules (sizes and kinds);
* :mod:`~benchmarks.zoo.kinks` — kinks, jumps and ties;
* :mod:`~benchmarks.zoo.traps` — NaN/Inf traps;
* :mod:`~benchmarks.zoo.cost` — the cost table's cases (not counted in the zoo's rates).

Cases are data (:class:`~benchmarks.zoo.case.Case`); a case imports its framework only
when it is built.
"""

from __future__ import annotations

from . import bugs, cost, kinks, smooth, traps
from .case import TRUTHS, Case, Problem

__all__ = ["Case", "Problem", "TRUTHS", "all_cases", "zoo_cases", "cost_cases", "by_name"]


def zoo_cases() -> list[Case]:
    """Every zoo case (the cost cases excluded)."""
    return smooth.cases() + bugs.cases() + kinks.cases() + traps.cases()


def cost_cases() -> list[Case]:
    """The cases of the cost table."""
    return cost.cases()


def all_cases() -> list[Case]:
    """Zoo and cost cases; names are unique.

    Raises
    ------
    RuntimeError
        Two cases share a name.
    """
    out = zoo_cases() + cost_cases()
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise RuntimeError(f"duplicate case names: {dup[:5]}")
    return out


def by_name() -> dict[str, Case]:
    """All cases by name."""
    return {c.name: c for c in all_cases()}
