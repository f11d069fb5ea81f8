"""NaN/Inf traps: where autodiff or finite differences produce non-finite numbers.

* ``sqrt-at-zero``: ``sum(sqrt(x))`` with one ``x_i = 0`` — autodiff gives
  ``inf``, the left difference a NaN; not differentiable there (flag).
* ``norm-at-zero``: the 2-norm at the zero vector — a cone point; autodiff
  gives 0 (PyTorch) or NaN (JAX, TensorFlow) (flag).
* ``where-trick``: ``where(x > 0, sqrt(x), 0)`` at negative ``x`` — the
  derivative is 0, autodiff returns ``0 * NaN = NaN`` (flag: the gradient is
  wrong) in NumPy (by hand), PyTorch and JAX; TensorFlow's sqrt gradient returns 0
  for a zero incoming gradient, so there the gradient is right (pass).
* ``where-trick-safe``: the double-``where`` fix — the gradient is right (pass).
* ``logsumexp-neg-inf``: log-sum-exp with some entries ``-inf`` (masked) —
  the gradient is right, 0 at the masked entries (pass); a checker that
  perturbs ``-inf`` sees ``inf - inf``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .case import Case, make_case
from .ops import FRAMEWORKS, Ops

__all__ = ["cases"]

FAMILY = "trap"


def _sqrt(o: Ops, x: Any) -> Any:
    return o.sum(o.sqrt(x))


def _sqrt_rule(o: Ops, x: Any) -> Any:
    with np.errstate(all="ignore"):
        return 0.5 / o.sqrt(x)


def _norm(o: Ops, x: Any) -> Any:
    return o.norm(x)


def _norm_rule(o: Ops, x: Any) -> Any:
    with np.errstate(all="ignore"):
        return x / o.norm(x)  # what the textbook formula (and JAX/TF) return: NaN at 0


def _where(o: Ops, x: Any) -> Any:
    return o.sum(o.where(x > 0, o.sqrt(x), o.zeros_like(x)))


def _where_rule(o: Ops, x: Any) -> Any:
    with np.errstate(all="ignore"):
        return (x > 0) * (0.5 / o.sqrt(x))  # the unselected branch's NaN leaks: 0 * NaN


def _where_exact(o: Ops, x: Any) -> Any:
    return np.where(x > 0, 0.5 / np.sqrt(np.where(x > 0, x, 1.0)), 0.0)


def _where_safe(o: Ops, x: Any) -> Any:
    safe = o.where(x > 0, x, 1.0 + o.zeros_like(x))
    return o.sum(o.where(x > 0, o.sqrt(safe), o.zeros_like(x)))


def _lse(o: Ops, x: Any) -> Any:
    return o.logsumexp(x)


def _lse_rule(o: Ops, x: Any) -> Any:
    return o.softmax(x)


def cases() -> list[Case]:
    """Five traps in every framework, float64 and float32."""
    rng = np.random.default_rng(31)
    pos = rng.uniform(0.5, 2.0, 6)
    pos[0] = 0.0
    mixed = rng.uniform(0.5, 2.0, 6) * np.array([1, -1, 1, -1, 1, -1])
    lse = rng.standard_normal(6)
    lse[[1, 4]] = -np.inf
    specs = [
        ("sqrt-at-zero", "sum(sqrt(x)) with x_0 = 0", "flag", pos, _sqrt, _sqrt_rule, None),
        ("norm-at-zero", "||x|| at x = 0", "flag", np.zeros(6), _norm, _norm_rule, None),
        (
            "where-trick",
            "sum(where(x > 0, sqrt(x), 0)) at x with negative entries",
            "flag",
            mixed,
            _where,
            _where_rule,
            _where_exact,
        ),
        (
            "where-trick-safe",
            "the double-where form of where-trick",
            "pass",
            mixed,
            _where_safe,
            _where_exact,
            _where_exact,
        ),
        (
            "logsumexp-neg-inf",
            "log-sum-exp with two entries -inf (masked)",
            "pass",
            lse,
            _lse,
            _lse_rule,
            _lse_rule,
        ),
    ]
    # where autodiff sidesteps a trap, the gradient under test is right
    right_in = {("where-trick", "tensorflow")}
    out = []
    for what, desc, expect, point, fun, rule, exact in specs:
        for dt in ("float64", "float32"):
            for fw in FRAMEWORKS:
                out.append(
                    make_case(
                        family=FAMILY,
                        what=what,
                        framework=fw,
                        dtype=dt,
                        truth="nonfinite-trap",
                        point=point,
                        fun=fun,
                        rule=rule,
                        exact=exact,
                        description=desc,
                        expect="pass" if (what, fw) in right_in else expect,
                    )
                )
    return out
