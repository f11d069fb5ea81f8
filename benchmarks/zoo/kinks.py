"""Kinks, jumps and ties: points where the function is not differentiable.

The gradient under test is what autodiff returns there by convention
(``relu'(0) = 0``, ``sign(0) = 0``, ties share the gradient, the derivative of
a step is 0); NumPy cases hand-write the same convention. A checker should
say that the point is not differentiable, not that the rule is wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .case import Case, make_case
from .ops import FRAMEWORKS, Ops

__all__ = ["cases"]

FAMILY = "kink"
_W = np.random.default_rng(21).uniform(0.5, 2.0, 8)


def _point(kink_at: float = 0.0) -> np.ndarray:
    x = np.random.default_rng(22).uniform(-2.0, 2.0, 8)
    x[2] = kink_at
    return x


def _relu(o: Ops, x: Any) -> Any:
    return o.sum(o.const(_W) * o.relu(x))


def _relu_rule(o: Ops, x: Any) -> Any:
    return o.const(_W) * (x > 0)


def _abs(o: Ops, x: Any) -> Any:
    return o.sum(o.const(_W) * o.abs(x))


def _abs_rule(o: Ops, x: Any) -> Any:
    return o.const(_W) * o.sign(x)


def _max(o: Ops, x: Any) -> Any:
    return o.max(x)


def _max_rule(o: Ops, x: Any) -> Any:
    top = (x == np.max(x)).astype(x.dtype)
    return top / np.sum(top)


def _step(o: Ops, x: Any) -> Any:
    return o.sum(o.const(_W) * (x + 2 * o.heaviside(x)))


def _step_rule(o: Ops, x: Any) -> Any:
    return o.const(_W) + 0 * x


def cases() -> list[Case]:
    """relu and abs at 0, a tie in a max, and a jump, in every framework (float64, float32)."""
    tie = _point(0.5)
    tie[5] = tie[1] = 3.0  # two equal maxima
    specs = [
        ("relu-at-zero", "sum(w * relu(x)) with x_2 = 0", _point(), _relu, _relu_rule),
        ("abs-at-zero", "sum(w * |x|) with x_2 = 0", _point(), _abs, _abs_rule),
        ("max-tie", "max(x) with two equal largest entries", tie, _max, _max_rule),
        ("jump", "sum(w * (x + 2 H(x))) with a step H at x_2 = 0", _point(), _step, _step_rule),
    ]
    out = []
    for what, desc, point, fun, rule in specs:
        for dt in ("float64", "float32"):
            for fw in FRAMEWORKS:
                out.append(
                    make_case(
                        family=FAMILY,
                        what=what,
                        framework=fw,
                        dtype=dt,
                        truth="kink",
                        point=point,
                        fun=fun,
                        rule=rule,
                        exact=None,
                        description=desc,
                    )
                )
    return out
