"""Tests of the JAX backend: its Target against hand-computed derivatives, then end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import mpmath
import numpy as np
import pytest
from jax.scipy.special import digamma

import polygrad as pg
from polygrad.backends.base import Supplied, Target
from polygrad.backends.jax import JaxBackend
from polygrad.errors import InputTypeError, InputValueError

BACKEND = JaxBackend()
W_NP = (np.arange(6.0).reshape(2, 3) - 2.5) / 7.0
X_NP = np.array([0.1, 0.2, -0.3])


def target(f, *args, argnums=(0,), batch_size=64) -> Target:
    return BACKEND.make_target(f, args, argnums, Supplied(), batch_size)


def tanh_layer(W):
    """f(x) = tanh(W x), closing over W; returns f and its Jacobian at x (float64 NumPy)."""
    Wj = jnp.asarray(W)
    W64 = np.asarray(Wj).astype(np.float64)

    def f(x):
        return jnp.tanh(Wj @ x)

    def jac(x):
        return (1 - np.tanh(W64 @ x) ** 2)[:, None] * W64

    return f, jac


@pytest.fixture(autouse=True)
def x64_untouched():
    before = jax.config.jax_enable_x64
    yield
    assert jax.config.jax_enable_x64 == before


def test_import_polygrad_does_not_import_jax():
    code = (
        "import sys, numpy as np, polygrad, polygrad.backends.jax as bj\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
        "assert not bj.JaxBackend.owns(1.0)\n"
        "r = polygrad.check(lambda x: np.sum(np.sin(x)), np.array([0.3, 0.4]), grad=np.cos)\n"
        "assert r.ok, r\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=root)


def test_flags_and_owns():
    assert (BACKEND.name, BACKEND.module, BACKEND.extra) == ("jax", "jax", "jax")
    assert BACKEND.supports_autodiff and BACKEND.supports_vmap and BACKEND.supports_float64
    assert JaxBackend.owns(jnp.ones(2))
    assert not JaxBackend.owns(np.ones(2))
    a = BACKEND.to_numpy(jnp.arange(3.0, dtype=jnp.float32))
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0])
    assert BACKEND.version() == jax.__version__


def test_float32_evaluate_vjp_jvp_against_hand_jacobian():
    W32 = W_NP.astype(np.float32)
    f, jac = tanh_layer(W32)
    t = target(f, jnp.asarray(X_NP, jnp.float32))
    x0 = X_NP.astype(np.float32).astype(np.float64)
    assert t.working_dtype == "float32" and t.eps == 2.0**-23
    np.testing.assert_array_equal(t.x0, x0)
    assert (t.n, t.m) == (3, 2)
    assert [lf.name for lf in t.input_layout.leaves] == ["x"]
    assert [lf.name for lf in t.output_layout.leaves] == ["f"]
    J = jac(x0)
    X = x0 + np.linspace(-0.5, 0.5, 15)[:, None] * np.array([1.0, -2.0, 0.5])
    want = np.tanh(X @ W32.astype(np.float64).T)
    np.testing.assert_allclose(t.evaluate(X), want, rtol=0, atol=3e-7)
    np.testing.assert_allclose(t.y0, want[7], rtol=0, atol=3e-7)
    assert t.evaluate(X).dtype == np.float64
    # the working dtype rounds: the float32 result is not the float64 one
    assert np.abs(t.evaluate(X) - want).max() > 1e-10
    U = np.array([[1.0, 0.0], [0.0, 1.0], [0.3, -2.0]])
    np.testing.assert_allclose(t.vjp(U), U @ J, rtol=0, atol=1e-6)
    V = np.eye(3)
    np.testing.assert_allclose(t.jvp(V), V @ J.T, rtol=0, atol=1e-6)
    # float64 versions: the closed-over float32 weights are promoted by JAX's type promotion
    np.testing.assert_allclose(t.evaluate64(X), want, rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(t.vjp64(U), U @ J, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(t.jvp64(V), V @ J.T, rtol=1e-13, atol=1e-16)
    assert t.evaluate_mp is not None and t.mp_unavailable_reason is None
    y_mp = t.evaluate_mp(t.x0, np.zeros_like(t.x0), 30)
    np.testing.assert_allclose([float(v) for v in y_mp], want[7], rtol=1e-14)
    assert t.notes == []


def test_batched_equals_unbatched():
    f, _ = tanh_layer(W_NP.astype(np.float32))
    x = jnp.asarray(X_NP, jnp.float32)
    X = np.asarray(x, np.float64) + np.random.default_rng(1).normal(size=(10, 3))
    big, one = target(f, x, batch_size=64), target(f, x, batch_size=1)
    # a point's value does not depend on the other points of its call (XLA may round a
    # (1, 3) batch differently from a (64, 3) one: every call runs the same batch shape)
    row_by_row = np.stack([big.evaluate(row[None])[0] for row in X])
    np.testing.assert_array_equal(big.evaluate(X), row_by_row)
    np.testing.assert_array_equal(big.evaluate(X[::-1]), row_by_row[::-1])
    np.testing.assert_array_equal(big.y0, big.evaluate(big.x0[None])[0])
    np.testing.assert_allclose(one.evaluate(X), row_by_row, rtol=0, atol=4 * big.eps)
    small = target(f, x, batch_size=3)
    np.testing.assert_allclose(small.evaluate64(X), big.evaluate64(X), rtol=1e-15)
    assert big.evaluate(X[:0]).shape == (0, 2)
    U = np.random.default_rng(2).normal(size=(7, 2))
    np.testing.assert_allclose(one.vjp(U), big.vjp(U), rtol=1e-6)
    np.testing.assert_allclose(one.jvp64(X), big.jvp64(X), rtol=1e-14)


def test_float64_working_dtype_without_global_x64():
    assert not jax.config.jax_enable_x64
    with jax.enable_x64(True):
        f, jac = tanh_layer(W_NP)
        x = jnp.asarray(X_NP, jnp.float64)
    t = target(f, x)
    assert t.working_dtype == "float64" and t.eps == 2.0**-52
    J = jac(X_NP)
    np.testing.assert_allclose(t.evaluate(X_NP[None]), np.tanh(W_NP @ X_NP)[None], rtol=1e-15)
    np.testing.assert_allclose(t.vjp(np.eye(2)), J, rtol=1e-14)
    np.testing.assert_allclose(t.jvp(np.eye(3)), J.T, rtol=1e-14)
    assert t.evaluate64 is t.evaluate and t.vjp64 is t.vjp


def test_global_x64_setting_is_respected_and_kept():
    jax.config.update("jax_enable_x64", True)
    try:
        f, jac = tanh_layer(W_NP.astype(np.float32))
        t = target(f, jnp.asarray(X_NP, jnp.float32))
        assert t.working_dtype == "float32"
        assert jax.config.jax_enable_x64
        np.testing.assert_allclose(t.vjp64(np.eye(2)), jac(t.x0), rtol=1e-13)
        assert jax.config.jax_enable_x64
    finally:
        jax.config.update("jax_enable_x64", False)


def test_internal_cast_is_promoted_through_the_jaxpr():
    w = jnp.asarray([0.7, -1.3, 0.4], jnp.float32)
    w64 = np.asarray(w, np.float64)

    def f(x):  # casts its input down, as code written for float32 does
        return jnp.sum(jnp.sin(x.astype(jnp.float32)) * w) + jnp.float32(0.5)

    t = target(f, jnp.asarray(X_NP, jnp.float32))
    X = t.x0 + np.array([[0.0, 0.0, 0.0], [1e-3, 0, 0], [0, -2e-3, 1e-3]])
    want = np.sin(X) @ w64 + 0.5
    np.testing.assert_allclose(t.evaluate64(X)[:, 0], want, rtol=1e-15)
    assert np.abs(t.evaluate(X)[:, 0] - want).max() > 1e-10
    np.testing.assert_allclose(t.vjp64(np.ones((1, 1)))[0], np.cos(t.x0) * w64, rtol=1e-14)
    np.testing.assert_allclose(t.jvp64(np.eye(3))[:, 0], np.cos(t.x0) * w64, rtol=1e-14)
    assert any("jaxpr" in note for note in t.notes)


def test_float64_output_with_float32_inside_is_promoted():
    w = jnp.asarray([0.7, -1.3, 0.4], jnp.float32)

    def f(x):  # float64 out for float64 in, but half of it computed in float32
        return jnp.sum(jnp.sin(x.astype(jnp.float32)) * w) + jnp.sum(x)

    t = target(f, jnp.asarray(X_NP, jnp.float32))
    X = t.x0 + np.array([[0.0, 0.0, 0.0], [1e-3, -1e-3, 2e-3]])
    w64 = np.asarray(w, np.float64)
    want = np.sin(X) @ w64 + X.sum(axis=1)
    np.testing.assert_allclose(t.evaluate64(X)[:, 0], want, rtol=1e-15)
    np.testing.assert_allclose(t.vjp64(np.ones((1, 1)))[0], np.cos(t.x0) * w64 + 1, rtol=1e-14)


def test_control_flow_and_jit_are_promoted():
    w = jnp.float32(0.25)

    @jax.jit
    def f(x):
        y = jax.lax.cond(x[0] > 0, lambda z: jnp.exp(z).astype(jnp.float32), jnp.sin, x)
        return y + jax.lax.scan(lambda c, z: (c + z * w, c), jnp.float32(0), x)[1]

    t = target(f, jnp.asarray(X_NP, jnp.float32))
    x0 = t.x0
    want = np.exp(x0) + np.array([0.0, x0[0], x0[0] + x0[1]]) * 0.25
    np.testing.assert_allclose(t.evaluate64(x0[None])[0], want, rtol=1e-15)
    J = np.diag(np.exp(x0)) + np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0]]) * 0.25
    np.testing.assert_allclose(t.vjp64(np.eye(3)), J, rtol=1e-14)


def test_custom_rule_inside_a_cast_gives_no_float64_autodiff():
    @jax.custom_jvp
    def my_sin(x):
        return jnp.sin(x)

    my_sin.defjvp(lambda p, t: (my_sin(p[0]), jnp.cos(p[0]) * t[0]))

    def f(x):
        return jnp.sum(my_sin(x.astype(jnp.float32)))

    t = target(f, jnp.asarray(X_NP, jnp.float32))
    np.testing.assert_allclose(t.evaluate64(t.x0[None])[0, 0], np.sin(t.x0).sum(), rtol=1e-15)
    assert t.vjp64 is None and t.jvp64 is None
    assert any("my_sin" in note for note in t.notes)
    np.testing.assert_allclose(t.vjp(np.ones((1, 1)))[0], np.cos(t.x0), rtol=1e-6)


def test_unpromotable_function_has_no_evaluate64():
    def f(x):
        y = jax.pure_callback(
            lambda a: np.sin(np.asarray(a)).astype(np.float32),
            jax.ShapeDtypeStruct(x.shape, jnp.float32),
            x.astype(jnp.float32),
            vmap_method="sequential",
        )
        return y * 2

    t = target(f, jnp.asarray(X_NP, jnp.float32))
    assert t.evaluate64 is None and t.vjp64 is None and t.jvp64 is None
    assert any("working dtype" in note for note in t.notes)
    np.testing.assert_allclose(t.evaluate(t.x0[None])[0], 2 * np.sin(t.x0), rtol=1e-6)


def test_pytree_arguments_and_names():
    params = {"w": jnp.asarray(W_NP, jnp.float32), "b": [jnp.ones(2, jnp.float32)]}
    x = jnp.asarray(X_NP, jnp.float32)

    def f(p, x, scale):
        return scale * jnp.tanh(p["w"] @ x + p["b"][0])

    t = target(f, params, x, 2.0, argnums=(0, 1))
    names = [lf.name for lf in t.input_layout.leaves]
    assert set(names) == {"p['w']", "p['b'][0]", "x"}
    leaf_w = next(lf for lf in t.input_layout.leaves if lf.name == "p['w']")
    assert t.input_layout.name_of(leaf_w.offset + 2) == "p['w'][0, 2]"
    assert t.n == 11 and t.m == 2
    u = np.array([0.5, -1.0])
    gp, gx = jax.grad(lambda p, x: jnp.dot(jnp.asarray(u, jnp.float32), f(p, x, 2.0)), (0, 1))(
        params, x
    )
    want = np.zeros(11)
    for leaf, g in (
        (leaf_w, gp["w"]),
        (next(lf for lf in t.input_layout.leaves if lf.name == "p['b'][0]"), gp["b"][0]),
        (next(lf for lf in t.input_layout.leaves if lf.name == "x"), gx),
    ):
        want[leaf.offset : leaf.offset + leaf.size] = np.asarray(g).ravel()
    np.testing.assert_allclose(t.vjp(u[None])[0], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(t.vjp64(u[None])[0], want, rtol=1e-6, atol=1e-7)
    # the JVP is the transpose of the VJP
    V = np.random.default_rng(3).normal(size=(4, 11))
    np.testing.assert_allclose(V @ t.vjp64(np.eye(2)).T, t.jvp64(V), rtol=1e-12)
    # several outputs in a dict
    t2 = target(lambda x: {"a": jnp.sin(x), "b": jnp.sum(x**2)}, x)
    assert [lf.name for lf in t2.output_layout.leaves] == ["f['a']", "f['b']"]
    assert t2.m == 4


def test_bfloat16_working_dtype():
    x = jnp.asarray(X_NP, jnp.bfloat16)
    t = target(lambda x: jnp.sum(x * x), x)
    assert t.working_dtype == "bfloat16" and t.eps == 2.0**-7
    x0 = np.asarray(x).astype(np.float64)
    np.testing.assert_array_equal(t.x0, x0)
    shifted = x0 + 1e-4  # rounds back to x0 in bfloat16
    assert t.evaluate(shifted[None])[0, 0] == t.evaluate(x0[None])[0, 0]
    np.testing.assert_allclose(t.evaluate64(shifted[None])[0, 0], np.sum(shifted**2), rtol=1e-15)
    np.testing.assert_allclose(t.vjp64(np.ones((1, 1)))[0], 2 * x0, rtol=1e-15)
    assert np.asarray(x).dtype == ml_dtypes.bfloat16  # the user's array is untouched


def test_vmap_failure_falls_back_to_rows():
    def f(x):  # NumPy inside: cannot be traced by vmap or jit
        return jnp.asarray(np.sin(np.asarray(x)))

    t = target(f, jnp.asarray(X_NP, jnp.float32))
    X = t.x0 + np.arange(6.0)[:, None] * 0.1
    np.testing.assert_allclose(t.evaluate(X), np.sin(X), rtol=1e-6)
    assert any("one row at a time" in note for note in t.notes)


def test_custom_vjp_bwd_without_vmap_support_falls_back_to_rows():
    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    def bwd(x, g):
        assert not isinstance(g, jax.core.Tracer), "concrete cotangent expected"
        return (jnp.cos(x) * g,)

    f.defvjp(lambda x: (jnp.sin(x), x), bwd)
    t = target(f, jnp.asarray(X_NP, jnp.float32))
    U = np.eye(3)
    np.testing.assert_allclose(t.vjp(U), np.diag(np.cos(t.x0)), rtol=1e-6)
    assert any("VJP" in note for note in t.notes)


@pytest.mark.parametrize(
    ("arg", "error"),
    [
        (jnp.arange(3), InputTypeError),
        (jnp.array([True, False]), InputTypeError),
        (jnp.array([1.0, jnp.nan], jnp.float32), InputValueError),
        (jnp.array([1.0, jnp.inf], jnp.float32), InputValueError),
    ],
)
def test_bad_inputs_raise(arg, error):
    with pytest.raises(error):
        target(lambda x: x * 2, arg)


def test_wrt_parameters_and_supplied_are_rejected():
    x = jnp.ones(3)
    with pytest.raises(ValueError, match="argnums"):
        BACKEND.make_target(jnp.sin, (x,), (0,), Supplied(), 8, wrt="parameters")
    with pytest.raises(ValueError, match="custom_vjp"):
        BACKEND.make_target(jnp.sin, (x,), (0,), Supplied(grad=jnp.cos), 8)


def test_gradient_function():
    x = jnp.asarray(X_NP, jnp.float32)
    g = BACKEND.gradient_function(lambda x: jnp.sum(jnp.sin(x)), (x,), (0,))
    np.testing.assert_allclose(g(x), np.cos(np.asarray(x, np.float64)), rtol=1e-6)
    # non-scalar: a VJP with a fixed cotangent, promoted along with the input
    h = BACKEND.gradient_function(jnp.sin, (x,), (0,))
    u = np.random.default_rng(0).standard_normal(3)
    np.testing.assert_allclose(h(x), u * np.cos(np.asarray(x, np.float64)), rtol=1e-6)
    with jax.enable_x64(True):
        out = h(jnp.asarray(X_NP))
        assert out.dtype == jnp.float64
        np.testing.assert_allclose(out, u * np.cos(X_NP), rtol=1e-15)
    two = BACKEND.gradient_function(lambda a, b: jnp.sum(a * b), (x, 2 * x), (0, 1))
    ga, gb = two(x, 2 * x)
    np.testing.assert_allclose(ga, 2 * np.asarray(x), rtol=1e-6)
    np.testing.assert_allclose(gb, np.asarray(x), rtol=1e-6)


# -- end to end: polygrad.check on JAX functions -------------------------------------------

X_E2E = [0.3, -0.7, 1.2, -0.4]
Y_E2E = [1.1, 0.5, -0.8, 2.0]
WRONG_RULES = ["no_incoming_factor", "sign_on_one_branch", "dropped_input", "relative_1e-3"]


def branchy_parts(x, y):
    """f(x, y) = sin(x) y for x > 0, x² y otherwise, and its partial derivatives."""
    value = jnp.where(x > 0, jnp.sin(x) * y, x * x * y)
    dx = jnp.where(x > 0, jnp.cos(x) * y, 2 * x * y)
    dy = jnp.where(x > 0, jnp.sin(x), x * x)
    return value, dx, dy


def with_custom_vjp(bug):
    @jax.custom_vjp
    def f(x, y):
        return branchy_parts(x, y)[0]

    def fwd(x, y):
        return f(x, y), (x, y)

    def bwd(res, g):
        _, dx, dy = branchy_parts(*res)
        if bug == "no_incoming_factor":
            return dx, dy * g
        if bug == "sign_on_one_branch":
            dx = jnp.where(res[0] > 0, dx, -dx)
        if bug == "dropped_input":
            return dx * g, jnp.zeros_like(dy)
        if bug == "relative_1e-3":
            dx = dx * (1 + 1e-3)
        return dx * g, dy * g

    f.defvjp(fwd, bwd)
    return lambda x, y: jnp.sum(f(x, y) ** 2)  # the cotangent reaching f is not 1


def with_custom_jvp(bug):
    @jax.custom_jvp
    def f(x, y):
        return branchy_parts(x, y)[0]

    @f.defjvp
    def rule(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        _, dx, dy = branchy_parts(x, y)
        if bug == "no_incoming_factor":
            return f(x, y), dx + dy
        if bug == "sign_on_one_branch":
            dx = jnp.where(x > 0, dx, -dx)
        if bug == "dropped_input":
            return f(x, y), dx * tx
        if bug == "relative_1e-3":
            dx = dx * (1 + 1e-3)
        return f(x, y), dx * tx + dy * ty

    return lambda x, y: jnp.sum(f(x, y) ** 2)


def e2e_args(dtype):
    with jax.enable_x64(dtype == "float64"):
        return jnp.asarray(X_E2E, dtype), jnp.asarray(Y_E2E, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [with_custom_vjp, with_custom_jvp])
def test_custom_rules_end_to_end(make, dtype):
    x, y = e2e_args(dtype)
    report = pg.check(make(None), x, y, argnums=(0, 1))
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.ok
    for bug in WRONG_RULES:
        report = pg.check(make(bug), x, y, argnums=(0, 1))
        assert report.verdict == pg.Verdict.MISMATCH, f"{bug}:\n{report}"
        assert not report.ok
    # forward mode goes through the JVP (the custom_jvp rule itself, not its transpose)
    if make is with_custom_jvp:
        assert pg.check(make(None), x, y, argnums=(0, 1), mode="fwd").verdict == pg.Verdict.PASS
        report = pg.check(make("relative_1e-3"), x, y, argnums=(0, 1), mode="fwd")
        assert report.verdict == pg.Verdict.MISMATCH, str(report)


def test_known_jax_bug_digamma_gradient_at_negative_half_integer():
    x = jnp.float32(-16.5)
    true = float(mpmath.psi(1, -16.5))  # trigamma(-16.5)
    assert true == pytest.approx(9.8108, abs=1e-4)
    raw = float(jax.grad(digamma)(x))
    assert abs(raw - true) > 1.0, (
        f"JAX's d/dx digamma(-16.5) is now {raw!r}, matching trigamma = {true!r}: the JAX bug "
        "is fixed; this test should now expect PASS"
    )
    report = pg.check(digamma, x)
    assert report.verdict == pg.Verdict.MISMATCH, str(report)
    assert report.entries.reference[0] == pytest.approx(true, rel=1e-6)
    assert report.entries.autodiff[0] == pytest.approx(raw, rel=1e-6)


def test_second_order_on_a_smooth_function():
    x = jnp.asarray([0.3, -0.2, 0.5], jnp.float32)
    report = pg.check(lambda x: jnp.sum(jnp.sin(x) * jnp.exp(x)), x, order=2)
    assert report.verdict == pg.Verdict.PASS, str(report)
    # a non-scalar function: the VJP with a fixed cotangent is differentiated again
    report = pg.check(lambda x: jnp.tanh(x) * x[0], x, order=2)
    assert report.verdict == pg.Verdict.PASS, str(report)


def test_closure_over_float32_weights_end_to_end():
    w = jnp.asarray([0.7, -1.3, 0.4], jnp.float32)

    def loss(x):  # written for float32: casts its input
        return jnp.sum(jnp.tanh(x.astype(jnp.float32) * w) ** 2)

    report = pg.check(loss, jnp.asarray(X_NP, jnp.float32))
    assert report.verdict == pg.Verdict.PASS, str(report)


def test_forward_mode_on_custom_vjp_is_a_clear_error():
    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))
    x = jnp.array([0.5, 1.0])
    assert pg.check(lambda x: jnp.sum(f(x)), x).verdict == pg.Verdict.PASS
    with pytest.raises(ValueError, match="custom_vjp.*mode='rev'"):
        pg.check(lambda x: jnp.sum(f(x)), x, mode="both")


def test_round_off_allowance_does_not_hide_a_wrong_rule_where_the_derivative_moves_fast():
    """sin at x ~ 1000 in float32: two float32 ulps move cos(x) by ~1e-4, far more than
    its round-off. That change is the derivative's own (the float64 rule moves with
    it) and must not widen the tolerance: a rule wrong by 1e-3 or 1e-4 is caught on
    every diagonal entry."""
    for error in (1e-3, 1e-4):

        @jax.custom_vjp
        def s(x):
            return jnp.sin(x)

        s.defvjp(lambda x: (jnp.sin(x), x), lambda x, g, e=error: (g * jnp.cos(x) * (1 + e),))
        x = jnp.asarray(np.random.default_rng(0).uniform(1000, 1010, 10), jnp.float32)
        report = pg.check(s, x)
        assert report.counts() == {"MISMATCH": 10, "PASS": 90}, (error, report.counts())


def test_an_output_cut_off_by_stop_gradient_is_a_clear_error_a_constant_is_not():
    """stop_gradient of the whole output (also under jax.jit) would read as a zero
    gradient: a clear InputTypeError naming the cause, as in PyTorch and TensorFlow. A
    function constant in its input, and one at a stationary point (cos at 0), have the
    right zero gradient: PASS."""
    x = jnp.array([1.0, 2.0])

    def cut(x):
        return jax.lax.stop_gradient(jnp.sum(x**3))

    for f in (cut, jax.jit(cut)):
        with pytest.raises(InputTypeError, match="gradient cannot flow.*stop_gradient"):
            pg.check(f, x)
    constant = pg.check(lambda x: jnp.ones(3) * 2.0, x)
    assert constant.verdict == pg.Verdict.PASS and constant.ok
    stationary = pg.check(lambda x: jnp.sum(jnp.cos(x)), jnp.zeros(2))
    assert stationary.verdict == pg.Verdict.PASS and stationary.ok
    assert np.all(stationary.entries.reference == 0.0)


def test_to_backend_keeps_complex128_and_leaves_the_x64_flag_alone():
    """A complex128 test input has float64 parts: made under enable_x64 like float64."""
    from polygrad.testing import to_backend

    flag = jax.config.jax_enable_x64
    z = to_backend(np.array([0.1 + 0.2j, -1.0 + 1e-12j]), "jax", "complex128")
    assert z.dtype == jnp.complex128 and jax.config.jax_enable_x64 == flag
    assert complex(np.asarray(z)[1]) == -1.0 + 1e-12j  # not rounded to complex64


# -- random draws inside f -----------------------------------------------------------------------
def _noisy(key_fn, factor: float = 1.0):
    """tanh(x + 0.5 z), z drawn inside f from a fixed key (a dropout-style fixed draw),
    with a custom VJP ``factor`` times the right one."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def t(u):
        return jnp.tanh(u)

    t.defvjp(lambda u: (jnp.tanh(u), u), lambda u, g: (factor * g * (1 - jnp.tanh(u) ** 2),))

    def f(x):
        z = jax.random.normal(key_fn(42), x.shape)
        return jnp.sum(t(x + 0.5 * z))

    return f


@pytest.mark.parametrize("key", ["PRNGKey", "key"])
def test_random_draws_inside_f_are_drawn_as_f_draws_them(key):
    """jax.random draws other numbers in float64 than in float32 (the same key): the
    float64 reference draws in f's dtype and widens, so it is the derivative of f itself
    (the closed form with f's own float32 draw); a rule 1e-3 off is MISMATCH."""
    import jax
    import jax.numpy as jnp

    key_fn = getattr(jax.random, key)
    x = jnp.linspace(-1.5, 1.5, 8, dtype=jnp.float32)
    z = np.asarray(jax.random.normal(key_fn(42), (8,)), np.float64)
    want = 1 - np.tanh(np.asarray(x, np.float64) + 0.5 * z) ** 2
    report = pg.check(_noisy(key_fn), x)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6)
    assert any("draws random numbers" in n for n in report.notes)
    assert pg.check(_noisy(key_fn, 1.001), x).verdict is pg.Verdict.MISMATCH


# -- NumPy constants with x64 off ----------------------------------------------------------------
def _numpy_constant_case():
    """A float32 loss closing over a float64 NumPy array, as users write a mask or labels."""
    weights = np.linspace(0.5, 1.5, 3)
    return weights, (lambda z: jnp.sum(jnp.sin(z) * weights))


def test_a_numpy_float64_constant_with_x64_off_is_checked_in_the_users_own_mode():
    """JAX converts the array to float32 with x64 off and caches that conversion across
    modes, so the trace under jax.enable_x64 left f failing: the check clears JAX's caches
    and traces f in the user's mode only. PASS on the closed form (the weights as f uses
    them, in float32), a plant found, and f and jax.jit(f) still run after the check;
    through jnp.asarray the weights enter exactly, in the float64 trace."""
    assert not jax.config.read("jax_enable_x64")
    weights, f = _numpy_constant_case()
    z = jnp.asarray([0.1, 0.2, 0.3], jnp.float32)
    report = pg.check(f, z)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    want = weights.astype(np.float32).astype(np.float64) * np.cos(np.asarray(z, np.float64))
    np.testing.assert_allclose(report.entries.reference, want, rtol=1e-9)
    assert float(f(z)) == pytest.approx(float(jax.jit(f)(z)), rel=1e-6)
    assert any("traced in your mode only" in n for n in report.notes)
    exact = pg.check(lambda z: jnp.sum(jnp.sin(z) * jnp.asarray(weights)), z)
    assert exact.verdict is pg.Verdict.PASS and exact.ok, exact
    want = weights * np.cos(np.asarray(z, np.float64))  # jnp.asarray keeps x64's reading
    np.testing.assert_allclose(exact.entries.reference, want, rtol=1e-9)

    @jax.custom_vjp
    def scaled_sin(u):
        return jnp.sin(u)

    scaled_sin.defvjp(lambda u: (jnp.sin(u), u), lambda u, g: (1.001 * g * jnp.cos(u),))
    planted = pg.check(lambda z: jnp.sum(scaled_sin(z) * weights), z)
    assert not planted.ok and planted.verdict is not pg.Verdict.PASS, planted


def test_a_numpy_integer_index_with_x64_off_is_checked_in_the_users_own_mode():
    """Labels as a NumPy int64 array (z[labels, 0], x64 off): after the trace under x64,
    JAX's cached conversion meets its own int32 in lax.add and raised a dtype TypeError out
    of the check. Now the check clears the caches and traces f in the user's mode: PASS on
    the closed form (2 z at the picked entries), and f and jax.grad(f) still run after."""
    assert not jax.config.read("jax_enable_x64")
    labels = np.array([0, 1, 2])

    def loss(z):
        return jnp.sum(z[labels, 0] ** 2)

    z = jnp.asarray(np.linspace(0.1, 1.2, 12).reshape(3, 4), jnp.float32)
    report = pg.check(loss, z)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    want = np.zeros((3, 4))
    want[labels, 0] = 2 * np.asarray(z, np.float64)[labels, 0]
    np.testing.assert_allclose(report.entries.reference, want.ravel(), rtol=1e-6, atol=1e-12)
    assert float(loss(z)) == pytest.approx(float(np.sum(np.asarray(z)[labels, 0] ** 2)))
    np.testing.assert_allclose(np.asarray(jax.grad(loss)(z)), want, rtol=1e-6)


def test_while_loop_checks_forward_mode_under_auto():
    """lax.while_loop has no transpose: JAX cannot differentiate it in reverse mode.
    mode='auto' finds that out (abstractly, before any reference is computed) and checks
    forward mode, saying why; mode='rev' raises with JAX's reason."""

    def f(x):
        def body(c):
            return c[0] + 1, jnp.sin(c[1])

        return jnp.sum(jax.lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1])

    x = jnp.linspace(-1.0, 1.0, 4)
    report = pg.check(f, x)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert "mode fwd" in str(report)
    assert any("reverse mode failed" in n and "while_loop" in n for n in report.notes)
    x64 = np.asarray(x, np.float64)
    d = np.cos(np.sin(np.sin(x64))) * np.cos(np.sin(x64)) * np.cos(x64)  # of sin(sin(sin(x)))
    np.testing.assert_allclose(report.entries.reference, d, rtol=1e-6)
    with pytest.raises(ValueError, match="reverse mode failed.*while_loop"):
        pg.check(f, x, mode="rev")


def test_vjp_batches_of_a_wide_input_stay_within_the_byte_budget():
    """A VJP of a scalar function returns rows as wide as its input: its padded batches
    are sized by that width, as batches of points are (128 rows of 1e6 float64 were
    1 GB before the conversions)."""
    import contextlib

    from polygrad.backends.jax import _Batched
    from polygrad.reference.differences import rows_per_batch

    n = 1 << 20
    seen = []

    def batch(U):  # (B, 1) cotangents -> (B, n) rows
        seen.append(U.shape[0])
        return np.zeros((U.shape[0], n))

    vjp = _Batched(batch, batch, 128, contextlib.nullcontext, [], "VJP", out_width=n)
    out = vjp(np.ones((8, 1)))
    assert out.shape == (8, n)
    assert max(seen) == rows_per_batch(n, 128) < 8
