"""Checked inputs of several floating dtypes: each gradient is rounded to its own input's
dtype, so round-off is judged at the narrowest; a wrong rule is still MISMATCH (the rule
evaluated in float64 is judged at float64's round-off).

f(a, c) = sum(a * sin(c)), a float32 and c float64: df/da = sin(c), df/dc = a cos(c).
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

import polygrad as pg  # noqa: E402

A = np.array([0.6, -1.2, 0.3], np.float32)
C = np.array([0.5, 1.3, -0.7], np.float64)
EXPECTED = np.concatenate([np.sin(C), A.astype(np.float64) * np.cos(C)])


def _torch(wrong: float):
    class Product(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, c):
            ctx.save_for_backward(a, c)
            return a * c.sin()

        @staticmethod
        def backward(ctx, g):
            a, c = ctx.saved_tensors
            return (g * c.sin() * wrong).to(a.dtype), g * a * c.cos()

    return (lambda a, c: Product.apply(a, c).sum()), (torch.tensor(A), torch.tensor(C))


def _jax(wrong: float):
    @jax.custom_vjp
    def product(a, c):
        return jnp.sum(a * jnp.sin(c))

    def fwd(a, c):
        return product(a, c), (a, c)

    def bwd(res, g):
        a, c = res
        return (g * jnp.sin(c) * wrong).astype(a.dtype), g * a * jnp.cos(c)

    product.defvjp(fwd, bwd)
    return product, (jnp.asarray(A), jnp.asarray(C))


def _tensorflow(wrong: float):
    @tf.custom_gradient
    def product(a, c):
        def grad(g):
            return tf.cast(g * tf.sin(c) * wrong, tf.float32), g * tf.cast(a, tf.float64) * tf.cos(
                c
            )

        return tf.reduce_sum(tf.cast(a, tf.float64) * tf.sin(c)), grad

    return product, (tf.constant(A), tf.constant(C))


def _numpy(wrong: float):
    def f(a, c):
        return np.sum(a * np.sin(c))

    def grad(a, c):
        return (np.sin(c) * wrong).astype(np.float32), a * np.cos(c)

    return f, (A, C), {"grad": grad}


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _case(framework: str, wrong: float):
    made = {"torch": _torch, "jax": _jax, "tensorflow": _tensorflow, "numpy": _numpy}[framework](
        wrong
    )
    return made if len(made) == 3 else (*made, {})


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax", "tensorflow"])
def test_inputs_of_two_dtypes_pass_at_the_narrowest_round_off(framework):
    f, args, kw = _case(framework, 1.0)
    report = pg.check(f, *args, argnums=(0, 1), **kw)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details["working_dtype"] == "float32"
    assert any("several dtypes (float32, float64)" in n for n in report.notes), report.notes
    gap = np.abs(report.entries.reference - EXPECTED)
    assert np.all(gap <= report.entries.reference_error), (gap, report.entries.reference_error)


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax", "tensorflow"])
def test_a_rule_off_by_1e_4_on_the_float32_input_is_mismatch(framework):
    f, args, kw = _case(framework, 1.0 + 1e-4)
    report = pg.check(f, *args, argnums=(0, 1), **kw)
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok, str(report)
