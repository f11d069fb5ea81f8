"""The ATen operators with kinks, and where they sit at one (see :mod:`.kinks`).

Keys are operator names without the ``aten.`` namespace, the overload and the in-place
underscore (``relu`` for ``aten.relu_.default``); each test takes the operator's bound
arguments as the interpreter holds them (object arrays of ``mpf``, exact integer
arrays, Python scalars). Every other covered operator is differentiable wherever its
value is finite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .kinks import at_integer, at_values, at_zero, floating, power_at_zero, repeated, tie

__all__ = ["KINKED_OPERATORS", "kink_test"]

Test = Callable[[dict[str, Any]], bool]


def _compare(a: dict[str, Any]) -> bool:
    x, y = a["self"], a["other"]
    return floating(x, y) and tie(x, y)


def _quotient(a: dict[str, Any]) -> bool:
    x, y = a["self"], a["other"]
    return floating(x, y) and at_integer(np.asarray(x, dtype=object) / y)


def _self(test: Callable[[Any], bool]) -> Test:
    return lambda a: floating(a["self"]) and test(a["self"])


def _shrink(a: dict[str, Any]) -> bool:
    lam = a.get("lambd", 0.5)
    return at_values(a["self"], lam, -lam)


def _distance(key: str) -> Test:
    def test(a: dict[str, Any]) -> bool:
        d = np.asarray(a["self"], dtype=object) - a["target"]
        return at_values(d, a.get(key, 1.0), -a.get(key, 1.0)) or at_zero(d)

    return test


def _softplus(a: dict[str, Any]) -> bool:
    beta = a.get("beta", 1.0)
    return at_values(np.asarray(a["self"], dtype=object) * beta, a.get("threshold", 20.0))


def _logit(a: dict[str, Any]) -> bool:
    eps = a.get("eps")
    return eps is not None and at_values(a["self"], eps, 1 - eps)


def _hypot(a: dict[str, Any]) -> bool:
    both = np.equal(np.asarray(a["self"], dtype=object), 0) & np.equal(
        np.asarray(a["other"], dtype=object), 0
    )
    return bool(np.any(both))


KINKED_OPERATORS: dict[str, Test] = {
    **dict.fromkeys(
        ("maximum", "minimum", "fmax", "fmin", "eq", "ne", "gt", "ge", "lt", "le"), _compare
    ),  # fmt: skip
    **dict.fromkeys(
        (
            "abs",
            "sgn",
            "sign",
            "relu",
            "leaky_relu",
            "elu",
            "celu",
            "sqrt",
            "rsqrt",
            "linalg_vector_norm",
        ),
        _self(at_zero),
    ),  # fmt: skip
    **dict.fromkeys(("floor", "ceil", "trunc", "frac"), _self(at_integer)),
    "round": _self(lambda x: at_integer(x, 0.5)),
    **dict.fromkeys(("fmod", "remainder", "floor_divide"), _quotient),
    **dict.fromkeys(("clamp", "clip"), lambda a: at_values(a["self"], a.get("min"), a.get("max"))),
    "clamp_min": lambda a: at_values(a["self"], a.get("min")),
    "clamp_max": lambda a: at_values(a["self"], a.get("max")),
    "hardtanh": lambda a: at_values(a["self"], a.get("min_val", -1.0), a.get("max_val", 1.0)),
    **dict.fromkeys(("hardsigmoid", "hardswish"), lambda a: at_values(a["self"], -3.0, 3.0)),
    **dict.fromkeys(("hardshrink", "softshrink"), _shrink),
    "huber_loss": _distance("delta"),
    "smooth_l1_loss": _distance("beta"),
    "softplus": _softplus,
    "logit": _logit,
    "hypot": _hypot,
    "pow": lambda a: (
        isinstance(a["self"], np.ndarray) and power_at_zero(a["self"], a.get("exponent"))
    ),
    **dict.fromkeys(
        (
            "amax",
            "amin",
            "max",
            "min",
            "argmax",
            "argmin",
            "sort",
            "topk",
            "max_pool2d",
            "max_pool2d_with_indices",
            "std",
        ),
        _self(repeated),
    ),  # fmt: skip
}
"""Tests of the operators with kinks, by base name."""


def kink_test(op: str, a: dict[str, Any]) -> Callable[[], bool] | None:
    """The deferred test of ``op`` (``"aten.relu_.default"``) at its bound arguments ``a``,
    or None for an operator without kinks."""
    parts = op.split(".")
    base = parts[1].rstrip("_") if len(parts) > 1 else op
    test = KINKED_OPERATORS.get(base)
    return None if test is None else (lambda: bool(test(a)))
