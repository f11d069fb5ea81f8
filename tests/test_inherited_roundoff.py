"""A rule that passes only by the round-off it could inherit is judged on what it loses.

``f(x) = expm1(x) / x`` at ``x`` = 1e-9, 2e-9, 5e-9 (float64): ``f`` is about 1 and
perfectly conditioned, its derivative ``1/2 + x/3 + ...``. The textbook quotient rule
``(x e^x - expm1(x)) / x^2`` cancels terms of size ``x`` to ``x^2 / 2`` and keeps about 8
digits (it is off by 7.4e-8 at 1e-9). A right rule computed from terms of the size of
``f`` can lose ``c_ad`` ulps of ``|f|`` per input scale, here 1.5e-5 to 4.6e-5: that
allowance passed the same rule with a planted error of 1e-5 (2e-5 of the entry). Such an
entry is decided by the rule re-executed on mpmath numbers: right in exact arithmetic,
the unstable rule PASSes; the planted one is MISMATCH, in every framework, the PyTorch
rule an ``autograd.Function`` without ``setup_context`` (the common style).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict

POINTS = np.array([1e-9, 2e-9, 5e-9])
PLANTED = 1e-5


def _truth() -> np.ndarray:
    """f'(x) = (x e^x - expm1(x)) / x^2 at 50 digits."""
    with mpmath.workdps(50):
        d = [(x * mpmath.exp(x) - mpmath.expm1(x)) / x**2 for x in map(mpmath.mpf, POINTS)]
        return np.array([float(v) for v in d])


def _numpy(bug: float):
    return (
        (lambda x: np.sum(np.expm1(x) / x)),
        POINTS.copy(),
        {"grad": lambda x: (x * np.exp(x) - np.expm1(x)) / x**2 + bug},
    )


def _torch(bug: float):
    import torch

    class ExpRel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.expm1(x) / x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * ((x * torch.exp(x) - torch.expm1(x)) / x**2 + bug)

    return (lambda x: ExpRel.apply(x).sum()), torch.tensor(POINTS, dtype=torch.float64), {}


def _jax(bug: float):
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def exprel(x):
        return jnp.expm1(x) / x

    def bwd(x, g):
        return (g * ((x * jnp.exp(x) - jnp.expm1(x)) / x**2 + bug),)

    exprel.defvjp(lambda x: (exprel(x), x), bwd)
    with jax.enable_x64(True):
        x = jnp.asarray(POINTS)
    return (lambda x: jnp.sum(exprel(x))), x, {}


def _tensorflow(bug: float):
    import tensorflow as tf

    @tf.custom_gradient
    def exprel(x):
        def grad(g):
            return g * ((x * tf.exp(x) - tf.math.expm1(x)) / x**2 + bug)

        return tf.math.expm1(x) / x, grad

    return (lambda x: tf.reduce_sum(exprel(x))), tf.constant(POINTS, tf.float64), {}


BUILDERS = {"numpy": _numpy, "torch": _torch, "jax": _jax, "tensorflow": _tensorflow}
FRAMEWORKS = [
    pytest.param(fw, marks=pytest.mark.polygrad_backends(fw)) if fw != "numpy" else fw
    for fw in BUILDERS
]


def _check(framework: str, bug: float) -> pg.Report:
    f, x, kw = BUILDERS[framework](bug)
    if framework != "jax":
        return pg.check(f, x, **kw)
    import jax

    with jax.enable_x64(True):
        return pg.check(f, x, **kw)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_unstable_right_rule_passes_on_its_measured_round_off(framework):
    report = _check(framework, 0.0)
    truth = _truth()
    np.testing.assert_allclose(report.entries.reference, truth, rtol=1e-13)
    # the rule keeps about 8 digits: far beyond 64 ulps of its own scale
    assert np.max(np.abs(report.entries.autodiff - truth)) > 1e-8
    assert report.verdict == Verdict.PASS and report.ok, str(report)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_unstable_rule_wrong_by_2e_5_is_a_mismatch(framework):
    report = _check(framework, PLANTED)
    np.testing.assert_allclose(report.entries.reference, _truth(), rtol=1e-13)
    assert report.verdict == Verdict.MISMATCH and not report.ok, str(report)
    assert report.counts() == {"MISMATCH": 3}
    # only a few roundings of f-sized terms are allowed (4 eps |f| / |x|), not the 64
    assert np.all(report.entries.tolerance < PLANTED / 3)


def test_a_rule_that_cannot_run_on_mpmath_numbers_is_undecided_and_says_why():
    """The planted rule through ``math.exp`` (no mpmath evaluation): its round-off cannot
    be measured, so it is INCONCLUSIVE with the reason, never PASS."""
    exp = np.vectorize(math.exp)
    report = pg.check(lambda x: np.sum(np.expm1(x) / x), POINTS,
                      grad=lambda x: (x * exp(x) - np.expm1(x)) / x**2 + PLANTED)  # fmt: skip
    assert report.verdict == Verdict.INCONCLUSIVE and not report.ok, str(report)
    text = str(report)
    assert "within what a rule computed from terms of the size of f can lose" in text
    assert any("could not run here" in n for n in report.notes)
