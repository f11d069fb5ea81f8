"""Cost case: the projection check at ``n = 1e6``.

A normal log-density summed over 1e6 inputs in float64, in PyTorch and JAX (whose
checkers have a projection mode). The other rows of the cost table reuse zoo
cases (float64 ``smooth/softmax-xent-10`` for ``n = 10``,
``smooth/log1p-square-sum-n10000`` for ``n = 1e4``) and the 784-pixel CNN of
``benchmarks.cnn_input_gradient``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .case import Case, make_case
from .ops import Ops

__all__ = ["cases", "SIZES"]

FAMILY = "cost"
SIZES = {1_000_000: ("torch", "jax")}
"""Input sizes and the frameworks each is measured in."""


def _fun(o: Ops, x: Any) -> Any:
    return o.sum(-(x * x) * 0.5 - 0.25 * x)


def _grad(o: Ops, x: Any) -> Any:
    return -x - 0.25


def cases() -> list[Case]:
    """The cost cases; the 1e6 case asks polygrad for projections."""
    out = []
    for n, frameworks in SIZES.items():
        point = np.random.default_rng(n).standard_normal(n)
        options = {"polygrad": {"strategy": "projections"}} if n >= 1_000_000 else {}
        for fw in frameworks:
            out.append(
                make_case(
                    family=FAMILY,
                    what=f"normal-logpdf-n{n}",
                    framework=fw,
                    dtype="float64",
                    truth="correct",
                    point=point,
                    fun=_fun,
                    rule=_grad,
                    exact=_grad,
                    description=f"sum of standard normal log-densities (+ a linear term), n = {n}",
                    options=options,
                )
            )
    return out
