"""The quad tier for JAX: the jaxpr vmapped over a check's points, run on binary128 arrays.

Each primitive rule is checked against JAX's own float64 result at the same points, each
reference against a closed form evaluated with mpmath, and each verdict against the
truth (a right rule PASS, a rule wrong by 1e-9 MISMATCH); where the quad tier cannot run
(a primitive without a quad loop) or cannot settle a direction (a kink), the check goes
on to mpmath and says so.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import mlp_loss_grad_mp
from jax import lax

import polygrad as pg
from polygrad.backends.base import Supplied
from polygrad.backends.jax import JaxBackend
from polygrad.mpexec.jaxpr_quad import quad_jaxpr_evaluator, quad_unsupported
from polygrad.mpexec.quad_ops import NoQuadRuleError
from polygrad.reference.quad import quad_dtype

pytestmark = pytest.mark.polygrad_backends("jax")

RNG = np.random.default_rng(11)
W1 = RNG.normal(size=(8, 6)) / np.sqrt(6)
B1 = RNG.uniform(-0.5, 0.5, 8)
W2 = RNG.normal(size=(5, 8)) / np.sqrt(8)
X6 = RNG.uniform(-1.5, 1.5, 6)


def _x64(a: Any) -> Any:
    with jax.enable_x64(True):
        return jnp.asarray(a, dtype=jnp.float64)


def mlp_loss(x: Any) -> Any:
    return jax.nn.log_softmax(_x64(W2) @ jnp.tanh(_x64(W1) @ x + _x64(B1)))[3]


# programs covering every rule of the quad interpreter, each checked against JAX float64
PROGRAMS = {
    "dot_general batched": lambda x: jnp.einsum("ij,jk->ik", x.reshape(2, 3), x.reshape(3, 2)),
    "matvec transposed": lambda x: _x64(W1).T @ jnp.sin(_x64(W1) @ x),
    "reductions": lambda x: jnp.stack([x.sum(), x.max(), x.min(), x.prod(), x.mean()]),
    "cumulative": lambda x: jnp.concatenate([jnp.cumsum(x), jnp.cumprod(x[::-1])]),
    "indexing": lambda x: x[jnp.array([4, 0, 2])] * x[1:4] + x[::2].sum(),
    "where clamp": lambda x: jnp.where(x > 0.1, jnp.clip(x, -0.7, 0.7), x**3),
    "integer_pow": lambda x: x**5 - 1 / x**2 + lax.integer_pow(x, 3),
    "transcendental": lambda x: jnp.concatenate(
        [
            jnp.exp(x),
            jnp.log1p(x**2),
            jnp.expm1(x),
            jnp.arctan(x),
            jnp.sinh(x),
            jnp.cosh(x),
            jnp.arcsinh(x),
            jax.nn.sigmoid(x),
            lax.rsqrt(1 + x**2),
            jnp.cbrt(x),
            jnp.tanh(x),
            jnp.arctan2(x, x[::-1]),
            jnp.power(1.5 + x, 0.3 + x[::-1] ** 2),
        ]
    ),  # fmt: skip
    "custom rules": lambda x: jax.nn.softplus(x) + jax.nn.gelu(x) + jax.nn.silu(x),
    "logsumexp": lambda x: jax.scipy.special.logsumexp(x.reshape(2, 3), axis=1),
    "rounding": lambda x: jnp.round(3 * x) + jnp.floor(2 * x) * jnp.ceil(x) + jnp.sign(x),
    "argmax": lambda x: x[jnp.argmax(x)] * x[jnp.argmin(x)],
    "jit": jax.jit(lambda x: jnp.sort(x) * jnp.linspace(0.0, 1.0, 6)),
}


def _quad_and_float64(fn: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shapes = [(X.shape[1],)]

    def trace(B: int) -> Any:
        with jax.enable_x64(True):
            return jax.make_jaxpr(jax.vmap(lambda x: [fn(x)]))(
                jax.ShapeDtypeStruct((B, X.shape[1]), np.float64)
            )

    q = quad_dtype()
    evaluate = quad_jaxpr_evaluator(trace, shapes, q)
    got = evaluate(X.astype(q)).astype(np.float64)
    with jax.enable_x64(True):
        want = np.stack([np.ravel(fn(jnp.asarray(row))) for row in X])
    return got, want


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_rule_agrees_with_jax_in_float64(name: str) -> None:
    X = np.stack([X6, -0.5 * X6[::-1], X6 + 0.25])
    got, want = _quad_and_float64(PROGRAMS[name], X)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_a_primitive_without_a_quad_loop_is_named() -> None:
    with jax.enable_x64(True):
        closed = jax.make_jaxpr(lambda x: jax.scipy.special.erf(x) * 2)(jnp.ones(3))
    assert quad_unsupported(closed) == [b for b in quad_unsupported(closed) if "erf" in b]
    assert len(quad_unsupported(closed)) == 1

    def trace(B: int) -> Any:
        with jax.enable_x64(True):
            return jax.make_jaxpr(jax.vmap(lambda x: [jax.scipy.special.erf(x)]))(
                jax.ShapeDtypeStruct((B, 3), np.float64)
            )

    evaluate = quad_jaxpr_evaluator(trace, [(3,)], quad_dtype())
    with pytest.raises(NoQuadRuleError, match="erf"):
        evaluate(np.ones((2, 3)).astype(quad_dtype()))


def test_the_loss_of_a_model_has_a_quad_reference_matching_the_closed_form() -> None:
    x = _x64(X6)
    report = pg.check(mlp_loss, x, cache=False)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details.reference.method == "quad"
    true = np.array([float(v) for v in mlp_loss_grad_mp(W1, B1, W2, X6)])
    e = report.entries
    assert np.all(np.abs(e.reference - true) <= 4e-16 * np.abs(true))
    assert np.all(e.reference_error <= 1e-15 * np.max(np.abs(true)))


def _tanh_with_rule(scale: float) -> Any:
    @jax.custom_vjp
    def tanh(v: Any) -> Any:
        return jnp.tanh(v)

    tanh.defvjp(lambda v: (jnp.tanh(v), v), lambda v, g: (g * (1 - jnp.tanh(v) ** 2) * scale,))
    return tanh


@pytest.mark.parametrize("scale", [1.0, 1 + 1e-9])
def test_a_rule_wrong_by_1e9_is_caught_and_a_right_one_passes(scale: float) -> None:
    tanh = _tanh_with_rule(scale)

    def loss(x: Any) -> Any:
        return jax.nn.log_softmax(_x64(W2) @ tanh(_x64(W1) @ x + _x64(B1)))[3]

    report = pg.check(loss, _x64(X6), cache=False)
    assert report.details.reference.method == "quad"
    if scale == 1.0:
        assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    else:
        assert report.verdict == pg.Verdict.MISMATCH and not report.ok, str(report)


def test_a_kink_at_the_point_goes_on_to_mp_and_is_nonsmooth() -> None:
    x = _x64([0.0, 0.7, -0.4])
    report = pg.check(lambda v: jnp.sum(jax.nn.relu(v) * jnp.cos(v)), x, cache=False)
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok, str(report)
    assert report.details.reference.method == "quad"
    assert any("quad-precision differences did not settle 1 of 3" in n for n in report.notes)


def test_without_a_quad_loop_the_check_uses_mp_and_says_why() -> None:
    x = _x64([0.3, -0.8, 1.1])
    report = pg.check(lambda v: jnp.sum(jax.scipy.special.erf(v) * v), x, cache=False)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details.reference.method == "mp"
    assert any("quad-precision reference is unavailable (no quad rule for erf" in n
               for n in report.notes), report.notes  # fmt: skip


def test_the_quad_evaluator_is_built_once_per_function() -> None:
    x = _x64(X6)
    t1 = JaxBackend().make_target(mlp_loss, (x,), (0,), Supplied(), 64)
    t2 = JaxBackend().make_target(mlp_loss, (x,), (0,), Supplied(), 64)
    assert t1.quad_mode() and t2.quad_mode()
    assert t1.evaluate_quad is t2.evaluate_quad


def _masked_softmax_loss(scale: float) -> Any:
    """A masked softmax (a -inf logit) beside a softplus with a rule planted
    ``x (1 + scale)``: the quad points step across the -inf."""

    @jax.custom_vjp
    def softplus(v: Any) -> Any:
        return jnp.logaddexp(0.0, v)

    softplus.defvjp(lambda v: (softplus(v), v), lambda v, g: (g * jax.nn.sigmoid(v) * (1 + scale),))
    mask = jnp.array([True, True, False, True])

    def f(x: Any) -> Any:
        p = jax.nn.softmax(jnp.where(mask, x, -jnp.inf))
        return jnp.sum(softplus(x) * 2.0) + jnp.sum(p * jnp.arange(4.0))

    return f


def test_warnings_as_errors_change_no_verdict() -> None:
    """Under ``warnings.simplefilter("error")`` (pytest's ``-W error``) the quad
    interpreter's floating-point warnings at -inf used to make the quad reference fail,
    and float64 differences, which cannot see a 3e-12 plant, passed it."""
    import warnings

    x = _x64([0.3, -1.2, 0.5, 2.0])
    for scale, verdict in ((0.0, pg.Verdict.PASS), (3e-12, pg.Verdict.MISMATCH)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            report = pg.check(_masked_softmax_loss(scale), x, cache=False)
        assert report.verdict == verdict, str(report)
        assert report.details.reference.method == "quad"


def test_a_quad_reference_that_fails_hands_over_to_mp(monkeypatch: Any) -> None:
    from polygrad.pipeline import reference

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise FloatingPointError("invalid value")

    monkeypatch.setattr(reference, "_quad_along", failing)
    report = pg.check(_masked_softmax_loss(3e-12), _x64([0.3, -1.2, 0.5, 2.0]), cache=False)
    assert report.verdict == pg.Verdict.MISMATCH, str(report)
    assert report.details.reference.method == "mp"
    assert any("the quad reference failed (FloatingPointError: invalid value); mp used" in n
               for n in report.notes), report.notes  # fmt: skip
