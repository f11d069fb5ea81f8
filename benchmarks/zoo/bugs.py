"""Wrong gradients: bugs planted in custom gradient rules.

Each case is a loss ``sum(w * op(x))`` with fixed weights ``w`` (so the
incoming gradient is not all ones) around one custom operation ``op`` whose
VJP rule is hand-written: ``torch.autograd.Function``, ``jax.custom_vjp``,
``tf.custom_gradient``, or in NumPy the hand-written gradient. The framework
is never edited; the bug is in the rule. Two groups:

* **sizes** — the rule returns ``g + delta * g``: a relative error ``delta``
  from 1e-1 down to 1e-6 (float32) or 1e-8 (float64);
* **kinds** — the bugs people write: a wrong sign on one branch, one wrong
  entry in a large gradient, a missing incoming-gradient factor, a dropped
  cotangent for one input, a transposed Jacobian, a wrong broadcast reduction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .case import Case, make_case
from .ops import FRAMEWORKS, Ops, ops

__all__ = ["cases", "size_cases", "kind_cases", "SIZES"]

SIZES = {
    "float32": [10.0**-k for k in range(1, 7)],
    "float64": [10.0**-k for k in range(1, 9)],
}
"""Planted relative error sizes per working dtype."""

Fwd = Callable[..., Any]
Bwd = Callable[..., Any]


@dataclass(frozen=True)
class Planted:
    """A custom operation with a correct and a buggy VJP rule."""

    what: str
    description: str
    point: np.ndarray
    weights: np.ndarray  # shape of op's output
    split: tuple[int, ...]  # sizes of the op's inputs inside the flat point
    fwd: Fwd
    bwd_true: Bwd
    bwd_bug: Bwd

    def _parts(self, o: Ops, x: Any) -> list[Any]:
        parts, a = [], 0
        for k in self.split:
            parts.append(x[a : a + k])
            a += k
        return parts

    def fun(self, o: Ops, x: Any) -> Any:
        y = o.custom(self.fwd, self.bwd_bug)(*self._parts(o, x))
        return o.sum(o.const(self.weights) * y)

    def _rule(self, bwd: Bwd, o: Ops, x: Any) -> Any:
        xs = tuple(self._parts(o, x))
        y = self.fwd(o, *xs)
        g = bwd(o, xs, y, o.const(self.weights))
        return o.concat([o.reshape(gi, (-1,)) for gi in g])

    def rule(self, o: Ops, x: Any) -> Any:
        return self._rule(self.bwd_bug, o, x)

    def exact(self, o: Ops, x: Any) -> Any:
        return self._rule(self.bwd_true, o, x)

    def bug_size(self) -> float:
        """``max |g_bug - g| / max |g|`` at the point, in float64."""
        o = ops("numpy", "float64")
        g = np.asarray(self.exact(o, self.point))
        gb = np.asarray(self.rule(o, self.point))
        return float(np.max(np.abs(gb - g)) / np.max(np.abs(g)))


def _softplus_fwd(o: Ops, x: Any) -> Any:
    return o.softplus(x)


def _softplus_bwd(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    return (ct * o.sigmoid(xs[0]),)


def _sized(delta: float) -> Bwd:
    def bwd(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
        g = ct * o.sigmoid(xs[0])
        return (g + delta * g,)

    return bwd


def size_cases() -> list[Case]:
    """Softplus with a VJP off by a relative ``delta``, for every size, dtype and framework."""
    rng = np.random.default_rng(7)
    point = 2.0 * rng.standard_normal(16)
    w = rng.uniform(0.5, 2.0, 16)
    out = []
    for dt, sizes in SIZES.items():
        for delta in sizes:
            p = Planted(
                f"softplus-scaled-{delta:.0e}",
                f"softplus VJP returns (1 + {delta:.0e}) x the right value",
                point,
                w,
                (16,),
                _softplus_fwd,
                _softplus_bwd,
                _sized(delta),
            )
            for fw in FRAMEWORKS:
                out.append(_case(p, fw, dt, "bug-size", delta))
    return out


# ---- the kinds of bugs people write ----------------------------------------------------


def _branch_fwd(o: Ops, x: Any) -> Any:
    return o.where(x > 0, x * x, x * x * x)


def _branch_true(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    x = xs[0]
    return (ct * o.where(x > 0, 2 * x, 3 * x * x),)


def _branch_bug(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    x = xs[0]
    return (ct * o.where(x > 0, 2 * x, -3 * x * x),)


_ONE_ENTRY = 137


def _entry_fwd(o: Ops, x: Any) -> Any:
    return o.log1p(x * x)


def _entry_true(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    x = xs[0]
    return (ct * 2 * x / (1 + x * x),)


def _entry_bug(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    x = xs[0]
    g = ct * 2 * x / (1 + x * x)
    mask = np.zeros(1000)
    mask[_ONE_ENTRY] = 1e-3
    return (g + g * o.const(mask),)


def _xsinx_fwd(o: Ops, x: Any) -> Any:
    return x * o.sin(x)


def _xsinx_true(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    x = xs[0]
    return (ct * (o.sin(x) + x * o.cos(x)),)


def _xsinx_bug(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    x = xs[0]
    return (o.sin(x) + x * o.cos(x),)  # forgets to multiply by the incoming gradient


def _mul_fwd(o: Ops, x: Any, y: Any) -> Any:
    return x * o.sin(y)


def _mul_true(o: Ops, xs: tuple[Any, ...], out: Any, ct: Any) -> tuple[Any, ...]:
    x, y = xs
    return (ct * o.sin(y), ct * x * o.cos(y))


def _mul_bug(o: Ops, xs: tuple[Any, ...], out: Any, ct: Any) -> tuple[Any, ...]:
    x, y = xs
    return (ct * o.sin(y), o.zeros_like(y))  # the second input's cotangent is dropped


_A = np.random.default_rng(11).standard_normal((6, 6))


def _matvec_fwd(o: Ops, x: Any) -> Any:
    return o.matvec(o.const(_A), x)


def _matvec_true(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    return (o.matvec(o.transpose(o.const(_A)), ct),)


def _matvec_bug(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    return (o.matvec(o.const(_A), ct),)  # J instead of J^T


_X = np.random.default_rng(12).standard_normal((5, 5))


def _bias_fwd(o: Ops, b: Any) -> Any:
    return o.const(_X) + o.reshape(b, (1, 5))


def _bias_true(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    return (o.sum(ct, axis=0),)


def _bias_bug(o: Ops, xs: tuple[Any, ...], y: Any, ct: Any) -> tuple[Any, ...]:
    return (o.sum(ct, axis=1),)  # reduces over the wrong (same-sized) axis


def _kinds() -> list[Planted]:
    rng = np.random.default_rng(8)
    signs = np.where(np.arange(8) % 2 == 0, 1.0, -1.0)
    return [
        Planted(
            "wrong-sign-one-branch",
            "y = x^2 (x > 0), x^3 (x < 0); the VJP has the wrong sign on the x < 0 branch",
            signs * rng.uniform(0.5, 2.0, 8),
            rng.uniform(0.5, 2.0, 8),
            (8,),
            _branch_fwd,
            _branch_true,
            _branch_bug,
        ),
        Planted(
            "one-wrong-entry-n1000",
            f"log(1 + x^2) over 1000 entries; entry {_ONE_ENTRY} of the VJP is off by 1e-3 "
            "relative",
            2.0 * rng.standard_normal(1000),
            rng.uniform(0.5, 2.0, 1000),
            (1000,),
            _entry_fwd,
            _entry_true,
            _entry_bug,
        ),
        Planted(
            "missing-incoming-gradient",
            "y = x sin x; the VJP ignores the incoming cotangent (weights w != 1)",
            rng.uniform(-2.0, 2.0, 8),
            rng.uniform(0.5, 2.0, 8),
            (8,),
            _xsinx_fwd,
            _xsinx_true,
            _xsinx_bug,
        ),
        Planted(
            "dropped-cotangent-one-input",
            "y = x * sin(z) for two inputs; the VJP returns zeros for z",
            rng.uniform(-2.0, 2.0, 16),
            rng.uniform(0.5, 2.0, 8),
            (8, 8),
            _mul_fwd,
            _mul_true,
            _mul_bug,
        ),
        Planted(
            "transposed-jacobian",
            "y = A x with a 6x6 non-symmetric A; the VJP returns A ct instead of A^T ct",
            rng.standard_normal(6),
            rng.uniform(0.5, 2.0, 6),
            (6,),
            _matvec_fwd,
            _matvec_true,
            _matvec_bug,
        ),
        Planted(
            "wrong-broadcast-reduction",
            "y = X + b broadcast over rows (X 5x5); the VJP of b sums over the wrong axis",
            rng.standard_normal(5),
            rng.uniform(0.5, 2.0, (5, 5)),
            (5,),
            _bias_fwd,
            _bias_true,
            _bias_bug,
        ),
    ]


def kind_cases() -> list[Case]:
    """Each kind of bug in every framework, in float64 and float32."""
    out = []
    for p in _kinds():
        size = p.bug_size()
        for dt in ("float64", "float32"):
            for fw in FRAMEWORKS:
                out.append(_case(p, fw, dt, "bug-kind", size))
    return out


def _case(p: Planted, fw: str, dt: str, family: str, size: float) -> Case:
    return make_case(
        family=family,
        what=p.what,
        framework=fw,
        dtype=dt,
        truth="wrong",
        point=p.point,
        fun=p.fun,
        rule=p.rule,
        exact=p.exact,
        description=p.description,
        bug_size=size,
    )


def cases() -> list[Case]:
    """All planted-bug cases (sizes, then kinds)."""
    return size_cases() + kind_cases()
