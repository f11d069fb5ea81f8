"""Correct gradients that fixed-step checkers get wrong.

Every function here is smooth at its point and its gradient under test is
right: framework autodiff, or for NumPy the closed form evaluated in the
working dtype. What makes them hard for a fixed-step central difference is
round-off: low precision (float32, bfloat16, float16), long reductions, large
and tiny magnitudes, ill-conditioned compositions and deep compositions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .case import Case, make_case
from .ops import FRAMEWORKS, Ops

__all__ = ["cases"]

FAMILY = "smooth"


@dataclass(frozen=True)
class Smooth:
    what: str
    description: str
    point: np.ndarray
    fun: Callable[[Ops, Any], Any]
    grad: Callable[[Ops, Any], Any]
    halves: tuple[str, ...]  # low-precision dtypes in which the function is representable
    frameworks: tuple[str, ...] = FRAMEWORKS
    only: tuple[tuple[str, str], ...] = ()  # if given: the (framework, dtype) pairs to run


def _functions() -> list[Smooth]:
    rng = np.random.default_rng(20240601)
    out: list[Smooth] = []

    # Case 1 of USERS.md: a normal log-density summed over n dimensions
    scale = rng.uniform(0.5, 1.5, 100)
    for at, halves in ((1.0, ("bfloat16", "float16")), (100.0, ("bfloat16",))):

        def fun(o: Ops, x: Any, s: np.ndarray = scale) -> Any:
            return o.sum(-(x**2) / (2 * o.const(s) ** 2))

        def grad(o: Ops, x: Any, s: np.ndarray = scale) -> Any:
            return -x / o.const(s) ** 2

        out.append(
            Smooth(
                f"normal-logpdf-n100-at{at:g}",
                f"sum of N(0, s_i^2) log-densities at x = {at:g} (USERS.md case 1)",
                np.full(100, at),
                fun,
                grad,
                halves,
            )
        )

    # log-sum-exp of large values (the framework's stable implementation)
    out.append(
        Smooth(
            "logsumexp-n1000-large",
            "log-sum-exp of 1000 values around 500 (gradient: softmax, entries ~1e-3..1e-40)",
            500.0 + 30.0 * rng.standard_normal(1000),
            lambda o, x: o.logsumexp(x),
            lambda o, x: o.softmax(x),
            ("bfloat16",),
        )
    )

    # softmax cross-entropy
    label = np.zeros(10)
    label[3] = 1.0

    def xent(o: Ops, z: Any) -> Any:
        return o.logsumexp(z) - o.sum(z * o.const(label))

    def xent_grad(o: Ops, z: Any) -> Any:
        return o.softmax(z) - o.const(label)

    out.append(
        Smooth(
            "softmax-xent-10",
            "softmax cross-entropy of 10 logits of size ~10",
            10.0 * rng.standard_normal(10),
            xent,
            xent_grad,
            ("bfloat16", "float16"),
        )
    )

    # 2-norm of large entries
    out.append(
        Smooth(
            "norm-n1000-large",
            "2-norm of 1000 entries of size ~1e3",
            1e3 * rng.standard_normal(1000),
            lambda o, x: o.norm(x),
            lambda o, x: x / o.norm(x),
            ("bfloat16",),
        )
    )

    # polynomial with large, cancelling coefficients
    coef = (1e4, -3e4, 2.5e4, -8e3, 1e3)

    def poly(o: Ops, x: Any) -> Any:
        c0, c1, c2, c3, c4 = coef
        return o.sum(c0 + x * (c1 + x * (c2 + x * (c3 + x * c4))))

    def poly_grad(o: Ops, x: Any) -> Any:
        _, c1, c2, c3, c4 = coef
        return c1 + x * (2 * c2 + x * (3 * c3 + x * 4 * c4))

    out.append(
        Smooth(
            "polynomial-large-coefficients",
            "sum of a quartic with coefficients up to 3e4 that cancel, at x in [0.5, 2.5]",
            rng.uniform(0.5, 2.5, 8),
            poly,
            poly_grad,
            ("bfloat16",),
        )
    )

    # long reductions
    def l1p(o: Ops, x: Any) -> Any:
        return o.sum(o.log1p(x * x))

    def l1p_grad(o: Ops, x: Any) -> Any:
        return 2 * x / (1 + x * x)

    out.append(
        Smooth(
            "log1p-square-sum-n10000",
            "sum of log(1 + x_i^2) over 1e4 entries (a long reduction)",
            2.0 * rng.standard_normal(10_000),
            l1p,
            l1p_grad,
            (),
            # a full check at n = 1e4 takes a minute per tool: float64 everywhere (also the
            # cost table's n = 1e4 row), float32 where the checkers are batched
            only=tuple((fw, "float64") for fw in FRAMEWORKS)
            + (("torch", "float32"), ("jax", "float32")),
        )
    )
    out.append(
        Smooth(
            "log1p-square-sum-n100000",
            "sum of log(1 + x_i^2) over 1e5 entries (a long reduction)",
            2.0 * rng.standard_normal(100_000),
            l1p,
            l1p_grad,
            (),
            only=(("torch", "float32"),),
        )
    )

    # tiny magnitudes
    out.append(
        Smooth(
            "half-square-tiny",
            "0.5 * sum(x^2) at x ~ 1e-12 (f ~ 1e-23)",
            1e-12 * rng.standard_normal(50),
            lambda o, x: 0.5 * o.sum(x * x),
            lambda o, x: x,
            ("bfloat16",),
        )
    )

    # deep composition
    depth = 20

    def deep(o: Ops, x: Any) -> Any:
        for _ in range(depth):
            x = o.tanh(1.5 * x + 0.3 * o.sin(x))
        return o.sum(x)

    def deep_grad(o: Ops, x: Any) -> Any:
        d = 1.0 + 0 * x
        for _ in range(depth):
            t = o.tanh(1.5 * x + 0.3 * o.sin(x))
            d = d * (1 - t * t) * (1.5 + 0.3 * o.cos(x))
            x = t
        return d

    out.append(
        Smooth(
            "deep-tanh-sin-20",
            "20 nested layers x <- tanh(1.5 x + 0.3 sin x), summed",
            rng.standard_normal(16),
            deep,
            deep_grad,
            ("bfloat16", "float16"),
        )
    )

    # softplus far from the origin
    out.append(
        Smooth(
            "softplus-wide",
            "sum of softplus(x) at x ~ N(0, 20^2): gradients from ~1e-30 to 1",
            20.0 * rng.standard_normal(32),
            lambda o, x: o.sum(o.softplus(x)),
            lambda o, x: o.sigmoid(x),
            ("bfloat16",),
        )
    )
    return out


def cases() -> list[Case]:
    """Every correct-gradient case: each function × framework × dtype.

    Returns
    -------
    list of Case
        ``truth == "correct"``; float64 and float32 everywhere, plus the
        low-precision dtypes each function is representable in (NumPy has no
        bfloat16 arithmetic, so it gets float16 only).
    """
    out = []
    for s in _functions():
        for fw in s.frameworks:
            dtypes = ["float64", "float32"] + [
                h for h in s.halves if not (fw == "numpy" and h == "bfloat16")
            ]
            for dt in dtypes:
                if s.only and (fw, dt) not in s.only:
                    continue
                out.append(
                    make_case(
                        family=FAMILY,
                        what=s.what,
                        framework=fw,
                        dtype=dt,
                        truth="correct",
                        point=s.point,
                        fun=s.fun,
                        rule=s.grad,
                        exact=s.grad,
                        description=s.description,
                    )
                )
    return out
