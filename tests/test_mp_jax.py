"""Re-executing JAX functions on mpmath numbers (polygrad.mpexec.jaxpr).

Each function of the suite is evaluated from its float64 jaxpr at 50 digits and
compared with JAX's own float64 execution (they must agree to a few ULP times the
condition of the output); where its derivative has a closed form, the mp
reference derivative (Richardson on mp central differences) is compared with the
closed form evaluated directly in mpmath, to 1e-25 relative.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from jax import lax
from jax.scipy import special as jsp

import polygrad as pg
from polygrad.backends.base import Supplied
from polygrad.backends.jax import JaxBackend
from polygrad.backends.mpmath import make_context
from polygrad.mpexec.jaxpr import (
    UnsupportedPrimitiveError,
    build_evaluate_mp,
    evaluate_jaxpr_mp,
    unsupported_primitives,
)
from polygrad.reference.mp import mp_directional_derivatives

ROOT = Path(__file__).resolve().parent.parent
EPS64 = float(np.finfo(np.float64).eps)
RNG = np.random.default_rng(20261129)
W32 = RNG.standard_normal((3, 4)).astype(np.float32)  # float32 weights, closed over
W2_32 = RNG.standard_normal((2, 3)).astype(np.float32)
K32 = RNG.standard_normal((2, 1, 3, 3)).astype(np.float32)
IDX = np.array([2, 0, 2, 3])

Jac = Callable[[Any, list[Any]], list[list[Any]]]
"""Closed-form Jacobian: ``(ctx, xs) -> J`` as nested lists ``(m, n)`` of mpf."""


@dataclass
class Case:
    name: str
    f: Callable[[Any], Any]
    x: np.ndarray
    jac: Jac | None = None


def _elementwise(d: Callable[[Any, Any], Any]) -> Jac:
    def jac(ctx: Any, xs: list[Any]) -> list[list[Any]]:
        n = len(xs)
        return [[d(ctx, xs[i]) if i == j else ctx.mpf(0) for j in range(n)] for i in range(n)]

    return jac


def _gradient(g: Callable[[Any, list[Any]], list[Any]]) -> Jac:
    """Jacobian of a scalar function from its gradient."""
    return lambda ctx, xs: [g(ctx, xs)]


@jax.custom_jvp
def softplus_cj(x: Any) -> Any:
    return jnp.logaddexp(x, 0.0)


softplus_cj.defjvp(lambda p, t: (softplus_cj(p[0]), jax.nn.sigmoid(p[0]) * t[0]))


@jax.custom_vjp
def xsinx_cv(x: Any) -> Any:
    return x * jnp.sin(x)


xsinx_cv.defvjp(lambda x: (xsinx_cv(x), x), lambda x, g: (g * (jnp.sin(x) + x * jnp.cos(x)),))


def _mlp(x: Any) -> Any:
    h = jnp.tanh(jnp.asarray(W32).astype(x.dtype) @ x)
    return jnp.asarray(W2_32).astype(x.dtype) @ h


def _mlp_jac(ctx: Any, xs: list[Any]) -> list[list[Any]]:
    W = [[ctx.mpf(float(v)) for v in row] for row in W32]
    V = [[ctx.mpf(float(v)) for v in row] for row in W2_32]
    a = [ctx.fsum(W[k][j] * xs[j] for j in range(4)) for k in range(3)]
    dh = [1 - ctx.tanh(ak) ** 2 for ak in a]
    return [
        [ctx.fsum(V[i][k] * dh[k] * W[k][j] for k in range(3)) for j in range(4)] for i in range(2)
    ]


def _softmax_jac(ctx: Any, xs: list[Any]) -> list[list[Any]]:
    e = [ctx.exp(v) for v in xs]
    s = [v / ctx.fsum(e) for v in e]
    n = len(xs)
    return [[s[i] * ((1 if i == j else 0) - s[j]) for j in range(n)] for i in range(n)]


def _log_softmax_jac(ctx: Any, xs: list[Any]) -> list[list[Any]]:
    e = [ctx.exp(v) for v in xs]
    s = [v / ctx.fsum(e) for v in e]
    n = len(xs)
    return [[(1 if i == j else 0) - s[j] for j in range(n)] for i in range(n)]


def _cnn(x: Any) -> Any:
    img = x.reshape(1, 1, 4, 4)
    y = lax.conv_general_dilated(img, jnp.asarray(K32).astype(x.dtype), (1, 1), "SAME")
    y = jnp.tanh(y)
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    avg = lax.reduce_window(y, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 1, 1), "SAME") / 4
    return jax.nn.logsumexp(y) + avg.mean()


def _scan(x: Any) -> Any:
    def step(c: Any, a: Any) -> tuple[Any, Any]:
        return jnp.tanh(0.5 * c + a), c * a

    c, ys = lax.scan(step, 0.1, x)
    return c + ys.sum()


def _scan_jac(ctx: Any, xs: list[Any]) -> list[list[Any]]:
    """Forward-mode recursion of _scan in mpmath: tangents of c_k and of the sum."""
    n = len(xs)
    c, dc = ctx.mpf(0.1), [ctx.mpf(0)] * n
    total = [ctx.mpf(0)] * n
    for k, a in enumerate(xs):
        # y_k = c * a
        total = [total[j] + dc[j] * a + (c if j == k else 0) for j in range(n)]
        t = ctx.tanh(c / 2 + a)
        dc = [(1 - t**2) * (dc[j] / 2 + (1 if j == k else 0)) for j in range(n)]
        c = t
    return [[dc[j] + total[j] for j in range(n)]]


def _indexing(x: Any) -> Any:
    """The gather/scatter forms jnp indexing produces, on a (3, 4) array."""
    a = x.reshape(3, 4)
    i, j = jnp.array([2, 0, 2]), jnp.array([1, 3, 3])
    parts = [
        a[i][:, 1:3].ravel(),
        a[:, j].ravel(),
        a[i, j],
        a[1, ::-2],
        a[None, :, 2, None].ravel(),
        jnp.take_along_axis(a, jnp.argsort(a, axis=1), axis=1).ravel(),
        a.at[i, j].set(a[0, :3]).ravel(),
        a.at[i[1:], j[1:]].multiply(a[1, :2], unique_indices=True).ravel(),
        a.at[i].min(a[2]).ravel(),
        a.at[:, j].max(a[:, :3]).ravel(),
        a.at[-1, 1:].add(7.0).ravel(),
    ]
    return jnp.concatenate(parts)


def _shapes_and_scans(x: Any) -> Any:
    a = x.reshape(3, 4)
    b, c = jnp.split(a, [1], axis=0)
    parts = [
        jnp.transpose(a).reshape(2, 6)[:, None, :].squeeze(1).ravel(),
        jnp.expand_dims(b, 0).ravel() * jnp.flip(c, 1)[0],
        lax.cumlogsumexp(a, axis=1).ravel(),
        lax.cummax(a, axis=0, reverse=True).ravel(),
        lax.cumprod(a, axis=1).ravel(),
        jnp.prod(a, axis=0) + jnp.min(a, axis=1).sum() + jnp.argmin(a, axis=0),
        jnp.tile(a[0], 2) + jnp.repeat(a[1, :2], 4),
    ]
    return jnp.concatenate(parts)


def _conv_pool(x: Any) -> Any:
    img = x.reshape(1, 6, 6, 2)  # NHWC, two channels
    k = jnp.asarray(np.concatenate([K32, K32[::-1]], axis=1)).astype(x.dtype)  # (2, 2, 3, 3)
    k = jnp.transpose(k, (2, 3, 1, 0))[:, :, :1, :]  # HWIO, one input channel per group
    y = lax.conv_general_dilated(
        img,
        k,
        window_strides=(2, 1),
        padding=((1, 2), (0, 1)),
        rhs_dilation=(1, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=2,
    )
    z = lax.conv_general_dilated(
        img[..., :1],
        k[:, :, :, :1],
        (1, 1),
        "VALID",
        rhs_dilation=(2, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    pad = ((0, 0), (1, 0), (0, 1), (0, 0))
    avg = lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 2, 1), pad)
    mx = lax.reduce_window(z, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    mn = lax.reduce_window(y, jnp.inf, lax.min, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")
    return jnp.concatenate([avg.ravel(), mx.ravel(), mn.ravel()])


def pos(n: int, lo: float = 0.2, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, n)


def sym(n: int, r: float = 0.9) -> np.ndarray:
    return RNG.uniform(-r, r, n)


E = _elementwise
CASES = [
    Case("sin", jnp.sin, sym(3, 3.0), E(lambda c, t: c.cos(t))),
    Case("cos", jnp.cos, sym(3, 3.0), E(lambda c, t: -c.sin(t))),
    Case("tan", jnp.tan, sym(3, 1.2), E(lambda c, t: 1 / c.cos(t) ** 2)),
    Case("exp", jnp.exp, sym(3, 3.0), E(lambda c, t: c.exp(t))),
    Case("exp2", jnp.exp2, sym(3, 3.0), E(lambda c, t: c.ln2 * c.power(2, t))),
    Case("log", jnp.log, pos(3), E(lambda c, t: 1 / t)),
    Case("log1p", jnp.log1p, sym(3), E(lambda c, t: 1 / (1 + t))),
    Case("expm1", jnp.expm1, sym(3), E(lambda c, t: c.exp(t))),
    Case("sqrt", jnp.sqrt, pos(3), E(lambda c, t: 1 / (2 * c.sqrt(t)))),
    Case("rsqrt", lax.rsqrt, pos(3), E(lambda c, t: -c.power(t, -1.5) / 2)),
    Case("cbrt", jnp.cbrt, pos(3), E(lambda c, t: c.power(t, c.mpf(-2) / 3) / 3)),
    Case("arcsin", jnp.arcsin, sym(3), E(lambda c, t: 1 / c.sqrt(1 - t**2))),
    Case("arccos", jnp.arccos, sym(3), E(lambda c, t: -1 / c.sqrt(1 - t**2))),
    Case("arctan", jnp.arctan, sym(3, 3.0), E(lambda c, t: 1 / (1 + t**2))),
    Case("sinh", jnp.sinh, sym(3, 2.0), E(lambda c, t: c.cosh(t))),
    Case("cosh", jnp.cosh, sym(3, 2.0), E(lambda c, t: c.sinh(t))),
    Case("tanh", jnp.tanh, sym(3, 2.0), E(lambda c, t: 1 - c.tanh(t) ** 2)),
    Case("arcsinh", jnp.arcsinh, sym(3, 3.0), E(lambda c, t: 1 / c.sqrt(t**2 + 1))),
    Case("arccosh", jnp.arccosh, 1 + pos(3), E(lambda c, t: 1 / c.sqrt(t**2 - 1))),
    Case("arctanh", jnp.arctanh, sym(3), E(lambda c, t: 1 / (1 - t**2))),
    Case("atan2", lambda x: jnp.arctan2(x, 2.0), sym(3, 3.0), E(lambda c, t: 2 / (t**2 + 4))),
    Case("sigmoid", jax.nn.sigmoid, sym(3, 4.0), E(lambda c, t: c.exp(-t) / (1 + c.exp(-t)) ** 2)),
    Case("erf", jsp.erf, sym(3, 2.0), E(lambda c, t: 2 / c.sqrt(c.pi) * c.exp(-(t**2)))),
    Case("erfc", jsp.erfc, sym(3, 2.0), E(lambda c, t: -2 / c.sqrt(c.pi) * c.exp(-(t**2)))),
    Case("erfinv", jsp.erfinv, sym(3), E(lambda c, t: c.sqrt(c.pi) / 2 * c.exp(c.erfinv(t) ** 2))),
    Case("gammaln", jsp.gammaln, pos(3, 0.3, 5.0), E(lambda c, t: c.digamma(t))),
    Case("digamma", jsp.digamma, pos(3, 0.3, 5.0), E(lambda c, t: c.polygamma(1, t))),
    Case(
        "gammainc",
        lambda x: jsp.gammainc(2.5, x),
        pos(3, 0.5, 4.0),
        E(lambda c, t: c.power(t, 1.5) * c.exp(-t) / c.gamma(2.5)),
    ),
    Case("integer_pow", lambda x: x**3 - 2 / x**2, pos(3), E(lambda c, t: 3 * t**2 + 4 / t**3)),
    Case("pow", lambda x: x**1.7, pos(3), E(lambda c, t: c.mpf(1.7) * c.power(t, c.mpf(1.7) - 1))),
    Case("abs", lambda x: jnp.abs(x) * x, sym(3), E(lambda c, t: 2 * abs(t))),
    Case(
        "bessel_i0e",
        jsp.i0e,
        pos(3),
        E(lambda c, t: (c.besseli(1, t) - c.besseli(0, t)) * c.exp(-t)),
    ),
    Case("softplus custom_jvp", softplus_cj, sym(3, 3.0), E(lambda c, t: 1 / (1 + c.exp(-t)))),
    Case("x sin x custom_vjp", xsinx_cv, sym(3, 3.0), E(lambda c, t: c.sin(t) + t * c.cos(t))),
    Case(
        "sum of squares",
        lambda x: jnp.sum(x**2),
        sym(4, 2.0),
        _gradient(lambda c, xs: [2 * t for t in xs]),
    ),
    Case(
        "prod",
        jnp.prod,
        pos(4),
        _gradient(lambda c, xs: [c.fprod(xs) / t for t in xs]),
    ),
    Case(
        "max",
        lambda x: jnp.max(x) + jnp.min(x),
        np.array([0.3, -1.1, 1.7, 0.2]),
        _gradient(lambda c, xs: [c.mpf(1 if i in (1, 2) else 0) for i in range(4)]),
    ),
    Case(
        "logsumexp",
        jax.nn.logsumexp,
        sym(5, 3.0),
        _gradient(lambda c, xs: [c.exp(t) / c.fsum(c.exp(v) for v in xs) for t in xs]),
    ),
    Case("softmax", jax.nn.softmax, sym(4, 3.0), _softmax_jac),
    Case("log_softmax", jax.nn.log_softmax, sym(4, 3.0), _log_softmax_jac),
    Case(
        "norm",
        jnp.linalg.norm,
        sym(4, 2.0),
        _gradient(lambda c, xs: [t / c.sqrt(c.fsum(v**2 for v in xs)) for t in xs]),
    ),
    Case(
        "matmul float32 weights",
        lambda x: jnp.asarray(W32).astype(x.dtype) @ x,
        sym(4),
        lambda c, xs: [[c.mpf(float(v)) for v in row] for row in W32],
    ),
    Case("MLP", _mlp, sym(4), _mlp_jac),
    Case(
        "cumsum",
        jnp.cumsum,
        sym(4),
        lambda c, xs: [[c.mpf(1 if j <= i else 0) for j in range(4)] for i in range(4)],
    ),
    Case(
        "sort",
        lambda x: jnp.sum(jnp.sort(x) * jnp.arange(1.0, 5.0)),
        np.array([0.4, -0.7, 1.3, 0.1]),
        _gradient(lambda c, xs: [c.mpf(k) for k in (3, 1, 4, 2)]),
    ),
    Case(
        "gather and scatter-add",
        lambda x: jnp.sum(x[IDX] ** 2) + x.at[jnp.array([0, 0, 1])].add(x[1:]).prod(),
        pos(4, 0.5, 1.5),
        None,
    ),
    Case("scan recurrence", _scan, sym(4), _scan_jac),
    Case("CNN with pooling", _cnn, sym(16, 1.0), None),
    Case("fori_loop", lambda x: lax.fori_loop(0, 4, lambda i, v: v * jnp.cos(v), x), sym(3), None),
    Case(
        "while_loop",
        lambda x: lax.while_loop(
            lambda s: s[0] < 5, lambda s: (s[0] + 1, s[1] * 1.5 + 0.1), (0, x)
        )[1],
        sym(3),
        E(lambda c, t: c.mpf(1.5) ** 5),
    ),
    Case("cond", lambda x: lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x), sym(3), None),
    Case(
        "pad concatenate slice",
        lambda x: jnp.concatenate([jnp.pad(x, (2, 1)), x[::-1] ** 3]) @ jnp.arange(9.0),
        sym(3),
        None,
    ),
    Case(
        "dynamic slice and update",
        lambda x: (
            lax.dynamic_update_slice(x, x[:2] * 2, (1,))[:4] + lax.dynamic_slice(x, (1,), (4,))
        ),
        np.array([0.3, -0.2, 0.9, 0.5, 0.1]),
        None,
    ),
    Case("jnp indexing: gather and scatter forms", _indexing, sym(12, 2.0), None),
    Case("reshape split tile and cumulative ops", _shapes_and_scans, pos(12, 0.5, 1.5), None),
    Case("strided dilated grouped conv and pools", _conv_pool, sym(72, 1.0), None),
    Case(
        "einsum", lambda x: jnp.einsum("ij,jk->ik", x.reshape(2, 3), x.reshape(3, 2)), sym(6), None
    ),
    Case(
        "floor round clip",
        lambda x: jnp.floor(3 * x) + jnp.round(2 * x) + jnp.clip(x, -0.5, 0.5) * x,
        np.array([0.31, -0.77, 0.12]),
        None,
    ),
    Case(
        "where and argmax",
        lambda x: jnp.where(x > 0, x**2, -x) + x[jnp.argmax(x)],
        np.array([0.3, -0.8, 0.6]),
        None,
    ),
]


def _evaluator(f: Callable[[Any], Any], x: np.ndarray) -> Any:
    ev, why = build_evaluate_mp(lambda v: [jnp.ravel(o) for o in jax.tree.leaves(f(v))], [x])
    assert why is None, why
    return ev


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mp_agrees_with_float64_execution(case: Case) -> None:
    """mp re-execution at 50 digits vs JAX in float64: a few ULP times the output's condition."""
    ev = _evaluator(case.f, case.x)
    with jax.enable_x64(True):
        x = jnp.asarray(case.x)
        y64 = np.ravel(np.asarray(jax.jit(case.f)(x), np.float64))
        flat = lambda v: jnp.ravel(case.f(v))  # noqa: E731
        try:  # forward mode for loops with dynamic trip counts, reverse for custom_vjp
            J = np.asarray(jax.jit(jax.jacfwd(flat))(x), np.float64)
        except TypeError:
            J = np.asarray(jax.jit(jax.jacrev(flat))(x), np.float64)
    ymp = ev(case.x, np.zeros_like(case.x), 50)
    assert ymp.shape == y64.shape and all(hasattr(v, "_mpf_") for v in ymp)
    y = np.array([float(v) for v in ymp])
    # absolute round-off scale of each output: its value and its sensitivity to the inputs
    scale = np.abs(y64) + np.abs(J) @ np.abs(case.x)
    np.testing.assert_array_less(np.abs(y - y64), 32 * EPS64 * scale + 1e-300)


def test_mp_values_carry_far_more_than_float64_digits() -> None:
    """The mp outputs are not float64 values: they match mpmath itself to ~50 digits."""
    ctx = make_context(50)
    x = np.array([0.3, 1.7])
    ymp = _evaluator(lambda v: jnp.exp(jnp.sin(v)) + jsp.erf(v), x)(x, np.zeros(2), 50)
    for t, v in zip(x, ymp, strict=True):
        want = ctx.exp(ctx.sin(ctx.mpf(t))) + ctx.erf(ctx.mpf(t))
        assert abs(v - want) <= ctx.mpf(10) ** -47 * abs(want)
        assert abs(v - ctx.mpf(float(v))) > ctx.mpf(10) ** -40  # not representable in float64


WITH_JAC = [c for c in CASES if c.jac is not None]


@pytest.mark.parametrize("case", WITH_JAC, ids=[c.name for c in WITH_JAC])
def test_mp_derivatives_match_closed_forms(case: Case) -> None:
    """The mp reference Jacobian (through the JAX backend's Target) to 1e-25 relative."""
    with jax.enable_x64(True):
        x = jnp.asarray(case.x)
    t = JaxBackend().make_target(case.f, (x,), (0,), Supplied(), 16)
    assert t.evaluate_mp is not None and t.mp_unavailable_reason is None
    n = case.x.size
    dd = mp_directional_derivatives(t.evaluate_mp, t.x0, np.eye(n), dps=50)
    ctx = make_context(60)
    J = case.jac(ctx, [ctx.mpf(float(v)) for v in case.x])
    scale = max(abs(J[i][j]) for i in range(len(J)) for j in range(n))
    worst = max(
        abs(dd.central.value_mp[j, i] - J[i][j]) / (abs(J[i][j]) + 1e-30 * scale)
        for i in range(len(J))
        for j in range(n)
    )
    assert worst <= 1e-25, f"{case.name}: relative error {mpmath.nstr(worst, 3)}"


def test_suite_size() -> None:
    assert len(CASES) >= 40 and len(WITH_JAC) >= 30


def test_float32_constants_enter_exactly_and_casts_are_not_applied() -> None:
    """Captured float32 weights are used exactly; casts to float32 are the identity."""
    ctx = make_context(50)
    x = np.array([0.1, 0.2, 0.3, 0.4])

    def f(v: Any) -> Any:
        return (jnp.asarray(W32) @ v.astype(jnp.float32)).astype(v.dtype)

    y = _evaluator(f, x)(x, np.zeros(4), 50)
    want = [
        ctx.fsum(ctx.mpf(float(w)) * ctx.mpf(t) for w, t in zip(row, x, strict=True)) for row in W32
    ]
    for a, b in zip(y, want, strict=True):
        assert abs(a - b) <= ctx.mpf(10) ** -45 * abs(b)


def test_scatter_add_with_repeated_indices() -> None:
    x = np.array([1.5, -2.0, 0.25])

    def f(v: Any) -> Any:
        return v.at[jnp.array([0, 2, 0, 5])].add(jnp.array([1.0, 2.0, 3.0, 4.0]) * v[1])

    y = _evaluator(f, x)(x, np.zeros(3), 30)
    assert [float(v) for v in y] == [1.5 - 8.0, -2.0, 0.25 - 4.0]  # index 5 is dropped


def test_float_dependent_while_loop_converges_at_mp_precision() -> None:
    """Newton's iteration for sqrt stops on a float test; on mp numbers it converges too."""

    def newton_sqrt(v: Any) -> Any:
        def body(s: Any) -> Any:
            return (s[0] + v / s[0]) / 2, s[0]

        return lax.while_loop(lambda s: jnp.all(jnp.abs(s[0] - s[1]) > 1e-30), body, (v, 2 * v))[0]

    x = np.array([2.0])
    y = _evaluator(newton_sqrt, x)(x, np.zeros(1), 50)
    assert abs(y[0] - make_context(50).sqrt(2)) < 1e-45


def test_unsupported_primitive_is_named() -> None:
    with jax.enable_x64(True):
        closed = jax.make_jaxpr(lambda v: jnp.linalg.cholesky(jnp.outer(v, v) + jnp.eye(3)))(
            jnp.ones(3)
        )
    bad = unsupported_primitives(closed)
    assert [b.primitive for b in bad] == ["cholesky"]
    with pytest.raises(UnsupportedPrimitiveError, match="'cholesky'"):
        evaluate_jaxpr_mp(closed, [np.ones(3)], make_context(30))


def test_unsupported_primitive_falls_back_to_float64_and_says_so() -> None:
    with jax.enable_x64(True):
        x = jnp.asarray([0.3, -1.2, 2.0])

    def f(v: Any) -> Any:
        return jnp.sum(jnp.linalg.cholesky(jnp.outer(v, v) + jnp.eye(3)))

    report = pg.check(f, x, reference="mp")
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.details["reference"]["method"] == "float64"
    assert report.details["reference"]["seconds"] > 0
    text = str(report)
    assert "mp reference unavailable" in text and "'cholesky'" in text
    assert "float64 central differences" in text


def _custom_vjp_with_error(primal: Callable[[Any], Any], grad: Callable[[Any], Any]) -> Any:
    @jax.custom_vjp
    def f(x: Any) -> Any:
        return primal(x)

    f.defvjp(lambda x: (f(x), x), lambda x, g: (g * grad(x) * (1 + 1e-9),))
    return f


def test_float64_rule_wrong_by_1e9_is_mismatch_with_mp_reference() -> None:
    f = _custom_vjp_with_error(
        lambda x: jnp.sin(x) * jnp.exp(-x / 2),
        lambda x: (jnp.cos(x) - jnp.sin(x) / 2) * jnp.exp(-x / 2),
    )
    with jax.enable_x64(True):
        x = jnp.asarray([0.3, -1.2, 2.0, 0.7])
    for reference in ("mp", "auto"):
        report = pg.check(f, x, reference=reference)
        assert report.verdict == pg.Verdict.MISMATCH, str(report)
        # "auto" takes the quad tier: the jaxpr runs on binary128 arrays
        high = "mp" if reference == "mp" else "quad"
        assert report.details["reference"]["method"] == high
        assert ("mpmath at 50 digits" in str(report)) == (high == "mp")
        assert report.details["reference"]["seconds"] > 0
        e = report.entries
        diagonal = e.reference != 0
        assert diagonal.sum() == 4 and np.all(e.autodiff[~diagonal] == 0)
        rel = e.autodiff[diagonal] / e.reference[diagonal] - 1
        assert np.all(np.abs(rel - 1e-9) < 1e-12)  # the mp reference measures the bug


def test_float64_rule_wrong_by_1e9_is_below_float64_resolution_when_ill_conditioned() -> None:
    """(x + 1e7)^2 - 1e14 - 2e7 x = x^2: float64 differences drown in cancellation noise
    (f rounds at ulp(1e14) ~ 0.016), so they cannot judge the diagonal (INCONCLUSIVE,
    never PASS or MISMATCH); the exactly zero off-diagonal entries still PASS."""
    f = _custom_vjp_with_error(lambda x: (x + 1e7) ** 2 - 1e14 - 2e7 * x, lambda x: 2 * x)
    with jax.enable_x64(True):
        x = jnp.asarray([0.7345612893, -1.2718354427])
    report = pg.check(f, x, reference="float64")
    assert report.verdict == pg.Verdict.INCONCLUSIVE, str(report)
    assert report.counts() == {"INCONCLUSIVE": 2, "PASS": 2}
    assert 1e-3 < report.details["reference"]["noise"] < 0.1
    report = pg.check(f, x, reference="mp")
    assert report.verdict == pg.Verdict.MISMATCH, str(report)
    assert "cannot resolve" not in str(report)


def test_digamma_gradient_at_minus_16_5_is_mismatch_with_mp_reference() -> None:
    with jax.enable_x64(True):
        x = jnp.asarray(-16.5)
    true = mpmath.psi(1, -16.5)
    for reference in ("mp", "auto"):
        report = pg.check(jsp.digamma, x, reference=reference)
        assert report.details["reference"]["method"] == "mp"
        assert report.verdict == pg.Verdict.MISMATCH, str(report)
        assert report.entries.reference[0] == pytest.approx(float(true), rel=1e-15)
        assert abs(report.entries.autodiff[0] - float(true)) > 1.0


def test_float32_function_with_mp_reference() -> None:
    x = jnp.asarray([0.3, -0.4, 0.8], jnp.float32)
    report = pg.check(lambda v: jnp.tanh(jnp.asarray(W32[:, :3]) @ v), x, reference="mp")
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.details["reference"]["method"] == "mp"


def test_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "mp.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.mp_reexecution", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["results"]
    assert {r["dps"] for r in rows} == {30, 50}
    assert all(r["applications_per_evaluation"] > 0 for r in rows)
    assert all(r["seconds_per_1000_applications"] > 0 for r in rows)


def test_function_that_rejects_float64_input_is_traced_in_its_own_dtype() -> None:
    """lax.conv with float32 weights refuses float64 input; mp runs its float32 jaxpr."""

    def f(v: Any) -> Any:
        return jnp.sum(jnp.tanh(lax.conv_general_dilated(v, jnp.asarray(K32), (1, 1), "SAME")))

    x = jnp.asarray(RNG.standard_normal((1, 1, 4, 4)), jnp.float32)
    t = JaxBackend().make_target(f, (x,), (0,), Supplied(), 16)
    assert t.evaluate64 is not None and t.evaluate_mp is not None, t.mp_unavailable_reason
    y = float(t.evaluate_mp(t.x0, np.zeros_like(t.x0), 30)[0])
    assert abs(y - t.evaluate64(t.x0[None])[0, 0]) <= 1e-13 * 16
    report = pg.check(f, x, reference="mp")
    assert report.verdict == pg.Verdict.PASS and report.details["reference"]["method"] == "mp"


def test_untraceable_function_has_no_mp_reference_and_says_why() -> None:
    with jax.enable_x64(True):
        x = jnp.asarray([0.3, 0.5])

    def f(v: Any) -> Any:  # NumPy inside: cannot be traced
        return jnp.asarray(np.sin(np.asarray(v)))

    t = JaxBackend().make_target(f, (x,), (0,), Supplied(), 16)
    assert t.evaluate_mp is None
    assert "could not be traced" in str(t.mp_unavailable_reason)
    assert "TracerArrayConversionError" in str(t.mp_unavailable_reason)


@pytest.mark.parametrize("reference", ["mp", "auto"])
@pytest.mark.parametrize("offset", [1e3, 1e4, 1e5, 1e6])
def test_mp_reference_of_a_periodic_function_at_large_inputs(offset, reference) -> None:
    """sum(sin(x)) at x ~ 1e3 .. 1e6, float64, mp reference: the mp ladder's steps are
    scaled to |x|, far beyond sin's period; it grows finer steps until the finest ones
    confirm the estimate, and cross-checks its one-sided error bars (they claimed 1e-8
    where they were off by 1e-6, a false NONSMOOTH). Every entry PASSes with a reference
    within its error bar of the truth; "auto" takes the quad tier, with the same result."""
    with jax.enable_x64(True):
        x = jnp.asarray(offset + np.random.default_rng(0).uniform(0.0, 7.0, 6))
    report = pg.check(lambda v: jnp.sum(jnp.sin(v)), x, reference=reference)
    # "auto": quad first; its steps, scaled to |x|, do not settle sin's directions there,
    # and mp estimates every one, so the reference is mp's (a note says why)
    assert report.details["reference"]["method"] == "mp"
    if reference == "auto":
        assert any("did not settle 6 of 6" in n for n in report.notes), report.notes
    assert report.verdict == pg.Verdict.PASS, report.counts()
    true = np.cos(np.asarray(x))
    e = report.entries
    assert np.all(np.abs(e.reference - true) <= e.reference_error)


def test_float64_differences_at_a_million_are_inconclusive_not_mismatch() -> None:
    """sin at x = 1e6 with float64 differences: ECnoise sampled 3 apart read sin itself
    as noise of size 1, the ladder moved up to steps of 1.6e7 where the quotients
    average to 0, and a right gradient was a MISMATCH. Noise above sqrt(eps) of the
    values now means "step too large"; the finest steps float64 allows here (relative
    2^-24, 0.06) cannot reach the target, so the verdict is INCONCLUSIVE, with a
    reference that covers the truth."""
    with jax.enable_x64(True):
        x = jnp.asarray([1000000.3217])
    report = pg.check(lambda v: jnp.sum(jnp.sin(v)), x, reference="float64")
    assert report.verdict == pg.Verdict.INCONCLUSIVE
    e = report.entries
    assert abs(e.reference[0] - np.cos(1000000.3217)) <= e.reference_error[0] < 0.01
    assert report.details["reference"]["noise"] < 1e-12


def test_jnp_stack_runs_on_mpmath_numbers() -> None:
    """``jnp.stack`` is a primitive of its own (``stack``) in current JAX; it moves
    elements only, so the mp reference runs it by its index map."""
    with jax.enable_x64(True):
        x = jnp.asarray([0.3, -1.2, 2.0])
    report = pg.check(lambda v: jnp.sum(jnp.stack([v.sum(), v.max(), v[0]]) ** 2), x,
                      reference="mp", cache=False)  # fmt: skip
    assert report.details["reference"]["method"] == "mp"
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    xs = np.array([0.3, -1.2, 2.0])
    true = 2 * xs.sum() + 2 * xs.max() * np.array([0.0, 0.0, 1.0]) + 2 * xs[0] * np.eye(3)[0]
    assert np.allclose(report.entries.reference, true, rtol=1e-14)
