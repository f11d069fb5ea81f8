"""Localization of a framework primitive whose own gradient is wrong, inside a larger
function: the op and the user's source line that called it, with its error against its
tolerance. Each bug is measured against mpmath first, in the installed framework."""

from __future__ import annotations

import inspect

import mpmath
import numpy as np
import pytest

import polygrad as pg

HERE = "test_localize_ops.py"


def _line_of(fn, text):
    """The line number of the first source line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _relative(value, exact):
    return abs(value - exact) / abs(exact)


# ---------------------------------------------------------------- JAX


def _jax_loss():
    import jax

    jnp = jax.numpy
    from jax.scipy.special import digamma

    def loss(x):
        h = 2.0 * x - 11.0  # -10.3, -9.8, -9.3: digamma far left of 0
        return jnp.sum(jnp.tanh(x) + digamma(h))

    return loss, jnp.asarray([0.35, 0.6, 0.85], jnp.float32)


def test_jax_digamma_gradient_is_wrong_below_minus_8():
    """The installed JAX's derivative of digamma (``polygamma(1, x)``) is wrong for
    x < -8 or so, while digamma itself is right: the bug the walk must find."""
    import jax
    from jax.scipy.special import digamma

    with jax.enable_x64(True):
        x = jax.numpy.float64(-10.3)
        value, grad = float(digamma(x)), float(jax.grad(digamma)(x))
    assert _relative(value, float(mpmath.digamma(-10.3))) < 1e-14
    exact = float(mpmath.polygamma(1, -10.3))  # 14.99
    assert _relative(grad, exact) > 1e6, (
        f"JAX {jax.__version__} computes digamma's derivative at -10.3 right ({grad}): "
        "this module's JAX program no longer holds a wrong primitive"
    )


def test_jax_digamma_in_a_composite_is_located_to_the_primitive():
    loss, x = _jax_loss()
    report = pg.check(loss, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    c = loc.located
    assert c is not None and c.wrong
    assert (c.site.op, c.site.kind) == ("digamma", "primitive")
    line = _line_of(loss, "digamma(h)")
    assert f"{HERE}:{line} in _jax_loss.<locals>.loss" in c.site.source
    assert c.arithmetic == "float64"  # the float32 program's node, promoted
    assert c.error > 1e6 * c.tolerance and c.relative > 1e6
    # mul, sub and tanh ran before it and are right
    assert [k.site.op for k in loc.checked if not k.wrong] == ["mul", "sub", "tanh"]
    assert any("x its tolerance" in t for t in str(report).splitlines())


# ---------------------------------------------------------------- TensorFlow


def _keras_zeta():
    """A Keras layer whose activation is the Hurwitz zeta function of its input:
    TensorFlow registers no gradient of Zeta with respect to x (its rule gives None)."""
    import keras
    import tensorflow as tf

    class ZetaAct(keras.layers.Layer):
        def call(self, h):
            return tf.math.zeta(2.0 + tf.nn.softplus(h), tf.constant(2.0, h.dtype))

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), ZetaAct(name="zeta_act"),
                              keras.layers.Dense(1)])  # fmt: skip
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 3)), tf.float32)
    return (lambda x: tf.reduce_sum(model(x))), x, ZetaAct.call


def test_tf_zeta_has_no_gradient_with_respect_to_x():
    import tensorflow as tf

    s = tf.constant(3.0, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(s)
        y = tf.math.zeta(s, tf.constant(2.0, tf.float64))
    assert tape.gradient(y, s) is None  # d/ds zeta(s, 2) at 3 is -0.198
    assert float(mpmath.diff(lambda s: mpmath.zeta(s, 2), 3)) == pytest.approx(-0.19812624)


def test_tf_zeta_in_a_keras_layer_is_located_to_the_primitive():
    f, x, call = _keras_zeta()
    report = pg.check(f, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    c = loc.located
    assert c is not None and c.wrong
    assert (c.site.op, c.site.kind) == ("Zeta", "primitive")
    assert c.site.path.split("/")[-1] == "zeta_act"  # the Keras layer
    assert f"{HERE}:{_line_of(call, 'tf.math.zeta(')} in call" in c.site.source
    assert c.arithmetic == "float64"  # Zeta has a float64 kernel: promoted
    assert c.autodiff == 0.0 and abs(c.reference) > 1e-3  # the rule gives nothing
    assert c.error > 1e9 * c.tolerance
    # the Dense layer's ops, softplus and the add ran first and are right
    before = [k.site.op for k in loc.checked[:-1]]
    assert {"MatMul", "BiasAdd", "Softplus", "AddV2"} <= set(before)
    assert not any(k.wrong for k in loc.checked[:-1])


def _xlogy_loss(p):
    import tensorflow as tf

    q = tf.nn.softmax(tf.constant([0.3, -0.2, 1.1, 0.4], p.dtype))
    return tf.reduce_sum(tf.math.xlogy(p, q)) + tf.reduce_sum(p**2)


def _xlogy_point():
    import tensorflow as tf

    return tf.constant([0.0, 0.25, 0.0, 0.75], tf.float32)


def test_tf_xlogy_at_x_zero_is_located_to_the_primitive():
    """d/dx xlogy(x, y) = log(y) also at x = 0 (x log y is smooth there); TensorFlow's
    rule gives 0 at x = 0: MISMATCH, and the walk names the op (it was NONSMOOTH while
    the square's power at a base of 0 was taken for a kink of an intermediate)."""
    report = pg.check(_xlogy_loss, _xlogy_point(), localize=True)
    assert report.verdict is pg.Verdict.MISMATCH and not report.ok
    loc = report.localize()
    c = loc.located
    assert c is not None and (c.site.op, c.site.kind) == ("Xlogy", "primitive")
    assert f"{HERE}:{_line_of(_xlogy_loss, 'tf.math.xlogy')}" in c.site.source
    assert c.arithmetic == "float64" and c.error > 1e9 * c.tolerance
    assert [k.site.op for k in loc.checked] == ["Xlogy"]  # the softmax reads no argument


# ---------------------------------------------------------------- PyTorch


def _torch_loss(x):
    import torch

    h = 2.0 * x + 1.0
    return (torch.tanh(x) + torch.digamma(h)).sum()


def test_torch_digamma_gradient_loses_digits_in_float64():
    """The installed torch's CPU trigamma (digamma's derivative) is accurate to about
    1e-10 relative in float64, far beyond float64's round-off."""
    import torch

    errors = []
    for v in (-0.5, 0.3, 1.0, 2.0):
        x = torch.tensor(v, dtype=torch.float64, requires_grad=True)
        torch.digamma(x).backward()
        errors.append(_relative(float(x.grad), float(mpmath.polygamma(1, v))))
    assert max(errors) > 1e-10, (
        f"torch {torch.__version__} computes digamma's derivative to {max(errors):.1e}: "
        "this module's PyTorch program no longer holds a wrong primitive"
    )


def test_torch_digamma_in_a_composite_is_located_to_the_primitive():
    import torch

    x = torch.tensor([0.35, 0.6, 0.85], dtype=torch.float64)
    report = pg.check(_torch_loss, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    c = loc.located
    assert c is not None and c.wrong
    assert (c.site.op, c.site.kind) == ("torch.digamma", "primitive")
    assert f"{HERE}:{_line_of(_torch_loss, 'torch.digamma(h)')}" in c.site.source
    assert c.arithmetic == "float64"
    assert c.error > 10 * c.tolerance and 1e-11 < c.relative < 1e-8
    assert not any(k.wrong for k in loc.checked[:-1])


def test_torch_digamma_in_float32_is_within_round_off():
    """The same program in float32: trigamma's 1e-10 is far below float32's round-off."""
    import torch

    report = pg.check(_torch_loss, torch.tensor([0.35, 0.6, 0.85], dtype=torch.float32))
    assert report.verdict is pg.Verdict.PASS
