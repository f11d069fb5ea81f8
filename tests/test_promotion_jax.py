"""Float64 references for JAX code as people write it.

JAX functions reach their weights however the user wrote them (closure,
``jax.jit``, ``functools.partial``, a method, a Flax linen/NNX or Equinox model
closed over); the float64 program lifts the float32 constants exactly
(JAX's type promotion, or the re-executed jaxpr), so:

* ``evaluate64`` equals the same model with its parameters cast to float64 by
  hand, to float64 round-off, and differs from the float32 evaluation;
* the check has a float64 reference and says PASS;
* where promotion is impossible (a NumPy round trip through
  ``jax.pure_callback``), the note names the primitive that blocked it.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import cyclic_garbage_after
from flax import linen, nnx

import polygrad as pg
from polygrad.backends.base import Supplied
from polygrad.backends.jax import JaxBackend

BE = JaxBackend()
KEYS = jax.random.split(jax.random.PRNGKey(0), 4)
X = jax.random.normal(KEYS[3], (6,), dtype=jnp.float32)


def target(f, *args, argnums=(0,)):
    return BE.make_target(f, args, argnums, Supplied(), 64)


def to64(tree):
    """The tree with every array cast to float64 by hand (the trusted float64 model)."""
    with jax.enable_x64(True):
        return jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), tree)


def assert_promoted_exactly(f, f64) -> None:
    """``f``'s float64 program equals ``f64`` (the model cast by hand) at nearby points;
    ``check(f)`` has a float64 reference and passes."""
    t = target(f, X)
    rows = t.x0 + np.random.default_rng(0).uniform(-1e-3, 1e-3, (3, t.n))
    with jax.enable_x64(True):
        want = np.stack([np.atleast_1d(np.asarray(f64(jnp.asarray(r)))) for r in rows])
    np.testing.assert_allclose(t.evaluate64(rows), want, rtol=1e-14, atol=1e-15)
    assert np.abs(t.evaluate(rows) - want).max() > 1e-12  # the float32 program is float32
    report = pg.check(f, X)
    assert report.details["reference"]["method"] == "float64", report.notes
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)


# ---------------------------------------------- plain JAX: every way of reaching W

W = jax.random.normal(KEYS[0], (3, 6), dtype=jnp.float32) / 2
B = jnp.asarray([0.1, -0.2, 0.3], jnp.float32)


def mlp(params, x):
    w, b = params
    return jax.nn.logsumexp(jnp.tanh(w @ x + b) * 1.7)


def global_loss(x):
    return mlp((W, B), x)


class Model:
    """Reads its parameters from ``self``."""

    def __init__(self, params):
        self.params = params

    def loss(self, x):
        return mlp(self.params, x)


def test_every_way_of_reaching_float32_weights_is_promoted():
    f64 = functools.partial(mlp, to64((W, B)))
    ways = [
        lambda x: mlp((W, B), x),
        global_loss,
        jax.jit(lambda x: mlp((W, B), x)),
        functools.partial(mlp, (W, B)),
        Model((W, B)).loss,
        jax.jit(Model((W, B)).loss),
    ]
    for f in ways:
        assert_promoted_exactly(f, f64)
    assert W.dtype == jnp.float32 and B.dtype == jnp.float32


# ------------------------------------------------------------ model libraries


class LinenMLP(linen.Module):
    @linen.compact
    def __call__(self, x):
        return linen.Dense(3)(jnp.tanh(linen.Dense(8)(x)))


def test_flax_linen_model_closed_over():
    model = LinenMLP()
    params = model.init(KEYS[1], X)
    params64 = to64(params)
    assert_promoted_exactly(
        lambda x: jax.nn.logsumexp(model.apply(params, x)),
        lambda x: jax.nn.logsumexp(model.apply(params64, x)),
    )
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(params))


def test_flax_nnx_model_closed_over():
    model = nnx.Sequential(
        nnx.Linear(6, 8, rngs=nnx.Rngs(0)),
        nnx.LayerNorm(8, rngs=nnx.Rngs(1)),
        nnx.gelu,
        nnx.Linear(8, 3, rngs=nnx.Rngs(2)),
    )
    graphdef, state = nnx.split(model)
    model64 = nnx.merge(graphdef, to64(state))
    assert_promoted_exactly(
        lambda x: jax.nn.logsumexp(model(x)), lambda x: jax.nn.logsumexp(model64(x))
    )
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(nnx.state(model)))


def test_equinox_mlp_closed_over_and_filter_jit():
    model = eqx.nn.MLP(6, 3, 8, 2, key=KEYS[2])
    with jax.enable_x64(True):
        model64 = jax.tree.map(lambda a: a.astype(jnp.float64) if eqx.is_array(a) else a, model)

    def f64(x):
        return jax.nn.logsumexp(model64(x))

    assert_promoted_exactly(lambda x: jax.nn.logsumexp(model(x)), f64)
    assert_promoted_exactly(eqx.filter_jit(lambda x: jax.nn.logsumexp(model(x))), f64)
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(eqx.filter(model, eqx.is_array)))


# ------------------------------------------------------------ no promotion


def test_a_numpy_round_trip_names_the_blocking_primitive():
    def f(x):
        y = jax.pure_callback(
            lambda a: np.tanh(np.asarray(a)).astype(np.float32),
            jax.ShapeDtypeStruct(x.shape, jnp.float32),
            x.astype(jnp.float32),
            vmap_method="sequential",
        )
        return jnp.sum(y * W[0])

    t = target(f, X)
    assert t.evaluate64 is None
    assert any("at pure_callback" in n for n in t.notes), t.notes


# -- float64 inputs that the function computes with in float32 --------------------------------


@jax.custom_vjp
def _planted_tanh(x):
    return jnp.tanh(x)


def _planted_fwd(x):
    y = jnp.tanh(x)
    return y, y


def _planted_bwd(y, g):
    return (g * (1 - y * y) * (1 + 1e-3),)  # a wrong rule: off by 1e-3


_planted_tanh.defvjp(_planted_fwd, _planted_bwd)


def _x64_point(seed, shape):
    with jax.enable_x64(True):
        return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float64)


W32 = jax.random.normal(KEYS[0], (5, 4), dtype=jnp.float32)


def test_float64_input_computed_in_float32_is_judged_at_float32():
    x = _x64_point(3, (2, 5))
    report = pg.check(jax.jit(lambda v: jnp.tanh(v.astype(jnp.float32) @ W32)), x)
    assert report.verdict == pg.Verdict.PASS and report.ok, report
    assert report.details["working_dtype"] == "float32"
    assert any("computes in float32 inside" in n for n in report.notes), report.notes


def test_float64_input_computed_in_float32_still_catches_a_wrong_rule():
    x = _x64_point(3, (2, 5))
    report = pg.check(lambda v: _planted_tanh(v.astype(jnp.float32) @ W32), x)
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok, report


def test_float32_constant_does_not_narrow_a_float64_check():
    x = _x64_point(4, (6,))
    c = jnp.float32(0.1)
    report = pg.check(lambda v: jnp.sum(jnp.sin(v * c.astype(jnp.float64))), x)
    assert report.details["working_dtype"] == "float64"
    assert report.verdict == pg.Verdict.PASS and report.ok, report


def test_an_equinox_module_passed_as_the_checked_argument():
    """The equinox pattern: the module is an argument of the loss (as eqx.filter_grad
    takes it). Its activation functions are pytree leaves that are no arrays; they are
    held fixed, as eqx.partition(model, eqx.is_inexact_array) would, with a note, and
    the check equals the one on the partitioned parameters. Another activation is
    another function (no capture is reused across them)."""
    x = jax.random.normal(KEYS[3], (6, 5), jnp.float64)

    def loss(model, x):
        return jnp.mean(jax.vmap(model)(x) ** 2)

    model = eqx.nn.MLP(5, 1, 8, 2, activation=jax.nn.tanh, key=KEYS[0])
    model = jax.tree.map(lambda a: a.astype(jnp.float64) if eqx.is_array(a) else a, model)
    report = pg.check(loss, model, x)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert len(report.entries.names) == 5 * 8 + 8 + 8 * 8 + 8 + 8 + 1
    assert any("held fixed" in n and "model.activation" in n for n in report.notes)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    split = pg.check(lambda p, x: loss(eqx.combine(p, static), x), params, x)
    np.testing.assert_array_equal(report.entries.autodiff, split.entries.autodiff)
    np.testing.assert_allclose(report.entries.reference, split.entries.reference, rtol=1e-12)
    softplus_model = eqx.tree_at(lambda m: m.activation, model, jax.nn.softplus)
    other = pg.check(loss, softplus_model, x)
    assert other.ok and not np.allclose(other.entries.reference, report.entries.reference)


def test_integer_leaves_of_a_checked_module_are_held_fixed():
    """An index buffer inside a module passed as the checked argument is held fixed, as
    eqx.partition(model, eqx.is_inexact_array) holds it; the check is the one on the
    partitioned parameters, against the closed form (the gradient with respect to w is
    the sum, per weight, of 2 tanh(w[idx] x) sech^2(w[idx] x) x over the entries that
    read it). A bare integer argument stays an error."""

    class Gather(eqx.Module):
        w: jax.Array
        idx: jax.Array

        def __call__(self, x):
            return jnp.tanh(self.w[self.idx] * x)

    w = jnp.array([0.5, -1.0, 2.0], jnp.float32)
    idx = jnp.array([2, 0, 1, 1])
    x = jnp.array([-1.3, 0.4, 2.1, 0.7], jnp.float32)
    report = pg.check(lambda m, x: jnp.sum(m(x) ** 2), Gather(w, idx), x, argnums=0)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert any("held fixed" in n and "idx" in n for n in report.notes)
    w64, x64 = np.asarray(w, np.float64), np.asarray(x, np.float64)  # the float32 values
    t = np.tanh(w64[np.asarray(idx)] * x64)
    per_entry = 2 * t * (1 - t**2) * x64
    expected = np.bincount(np.asarray(idx), weights=per_entry, minlength=3)
    # within the reference's error bars (float64 differences for a float32 check)
    gap = np.abs(report.entries.reference - expected)
    assert np.all(gap <= report.entries.reference_error), (gap, report.entries.reference_error)
    np.testing.assert_allclose(report.entries.reference, expected, rtol=1e-6)
    with pytest.raises(pg.InputTypeError, match="integer dtype"):
        pg.check(lambda i, x: jnp.sum(x[i] ** 2), idx, x, argnums=0)


class _BatchNormNet(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(4, 5, rngs=rngs)
        self.bn = nnx.BatchNorm(5, rngs=rngs)

    def __call__(self, x):
        return jnp.tanh(self.bn(self.lin(x)))


def test_a_closed_over_nnx_batch_norm_in_training_mode_is_refused_and_put_back():
    """A closed-over NNX model whose BatchNorm updates its running statistics on every
    call: a clear InputMutationError naming them, and the statistics as they were (not
    moved by the calls made before the error, nor left holding a tracer); the same model
    in inference mode passes."""
    model = _BatchNormNet(nnx.Rngs(0))
    x = jax.random.normal(KEYS[1], (3, 4))
    with pytest.raises(pg.InputMutationError, match=r"bn\.mean.*inference mode"):
        pg.check(lambda x: jnp.sum(model(x) ** 2), x)
    np.testing.assert_array_equal(np.asarray(model.bn.mean[...]), np.zeros(5))
    np.testing.assert_array_equal(np.asarray(model.bn.var[...]), np.ones(5))
    model.eval()
    report = pg.check(lambda x: jnp.sum(model(x) ** 2), x)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)


def test_a_check_leaves_no_array_to_the_cyclic_garbage_collector():
    # the batched callables of a check hold its primals; in a reference cycle they
    # would stay in memory after the check until the collector runs
    n = 2_000
    w = jnp.asarray(np.random.default_rng(3).uniform(0.5, 1.5, n), dtype=jnp.float32)
    x = jnp.linspace(-1.0, 2.0, n, dtype=jnp.float32)
    check = lambda: pg.check(lambda v: jnp.sum(w * jnp.tanh(v)), x, strategy="projections")  # noqa: E731
    check()  # one-time imports and compilation
    garbage = cyclic_garbage_after(check)
    assert not [o for o in garbage if isinstance(o, (jax.Array, np.ndarray))]
