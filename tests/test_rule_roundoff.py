"""A right float64 rule whose value inherits a rounding no move of the input re-rounds.

``f(x) = exp(exp(exp(tanh(exp(exp(x))))))`` at ``x = 1``: ``tanh(15.15)`` rounds to one
float64 ulp below 1, and the rule's ``1 - tanh^2`` keeps 4 of its 16 digits (1.7e-4 of
the entry), while moves of ``x`` by whole ulps change ``tanh``'s argument by far less
than its own ulp, so they measure nothing. The rule evaluated on mpmath numbers rounded
to 53 bits (and 50, 56) measures it: the framework's own ``tanh`` is PASS. A custom rule
wrong by 1e-2 in exact arithmetic, beyond that round-off, is wrong on mpmath numbers too
and gets no such allowance: MISMATCH. (A plant below the rule's own round-off at this
point, 1e-5 in a custom ``tanh``, is within what the float64 value can show: PASS.)
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict


def _truth() -> float:
    with mpmath.workdps(60):
        f = lambda x: mpmath.exp(mpmath.exp(mpmath.exp(mpmath.tanh(mpmath.exp(mpmath.exp(x))))))  # noqa: E731
        return float(mpmath.diff(f, mpmath.mpf(1)))


PLANTED = 1.0 + 1e-2


def _torch(factor: float | None):
    import torch

    x = torch.tensor([1.0], dtype=torch.float64)
    if factor is None:
        return lambda v: torch.exp(
            torch.exp(torch.exp(torch.tanh(torch.exp(torch.exp(v)))))
        ).sum(), x

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, u):
            t = torch.tanh(u)
            ctx.save_for_backward(t)
            return t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * (1 - t * t) * factor

    return lambda v: torch.exp(torch.exp(torch.exp(Tanh.apply(torch.exp(torch.exp(v)))))).sum(), x


def _jax(factor: float | None):
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        x = jnp.asarray(np.array([1.0]))
    if factor is None:
        return lambda v: jnp.sum(jnp.exp(jnp.exp(jnp.exp(jnp.tanh(jnp.exp(jnp.exp(v))))))), x

    @jax.custom_vjp
    def tanh(u):
        return jnp.tanh(u)

    tanh.defvjp(lambda u: (jnp.tanh(u), jnp.tanh(u)), lambda t, g: (g * (1 - t * t) * factor,))
    return lambda v: jnp.sum(jnp.exp(jnp.exp(jnp.exp(tanh(jnp.exp(jnp.exp(v))))))), x


def _tensorflow(factor: float | None):
    import tensorflow as tf

    x = tf.constant([1.0], dtype=tf.float64)
    if factor is None:
        return lambda v: tf.reduce_sum(tf.exp(tf.exp(tf.exp(tf.tanh(tf.exp(tf.exp(v))))))), x

    @tf.custom_gradient
    def tanh(u):
        t = tf.tanh(u)
        return t, lambda g: g * (1 - t * t) * factor

    return lambda v: tf.reduce_sum(tf.exp(tf.exp(tf.exp(tanh(tf.exp(tf.exp(v))))))), x


BUILDERS = {"torch": _torch, "jax": _jax, "tensorflow": _tensorflow}


FRAMEWORKS = [pytest.param(fw, marks=pytest.mark.polygrad_backends(fw)) for fw in BUILDERS]


def _check(framework: str, factor: float | None) -> pg.Report:
    f, x = BUILDERS[framework](factor)
    if framework != "jax":
        return pg.check(f, x)
    import jax

    with jax.enable_x64(True):
        return pg.check(f, x)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_frameworks_own_rule_with_hidden_round_off_passes(framework):
    report = _check(framework, None)
    truth = _truth()
    np.testing.assert_allclose(report.entries.reference, [truth], rtol=1e-12)
    assert report.details["reference"]["method"] in ("quad", "mp")  # high precision
    # the float64 rule keeps about 4 digits: it is off by far more than 64 ulps
    assert abs(report.entries.autodiff[0] - truth) > 1e-6 * abs(truth)
    assert report.verdict == Verdict.PASS and report.ok, str(report)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_custom_rule_wrong_in_exact_arithmetic_is_a_mismatch(framework):
    report = _check(framework, PLANTED)
    np.testing.assert_allclose(report.entries.reference, [_truth()], rtol=1e-12)
    assert report.verdict == Verdict.MISMATCH and not report.ok, str(report)
