"""A rule wrong by 1e-3 in float16 or bfloat16 code is MISMATCH; the right rule PASSes.

The working dtype's round-off (1e-3 in float16, 8e-3 in bfloat16) hides such an
error from the working-dtype values, but not from the float64 evaluation of the
same rule at the same point, which the reference must then be accurate enough to
judge (see ``polygrad.pipeline.plan.target_accuracy``). Each framework's custom
gradient is written the way users write it; the truth is cos(x).
"""

from __future__ import annotations

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict

POINTS = np.linspace(0.1, 2.0, 6)
FACTORS = {"right": 1.0, "planted": 1.0 + 1e-3}
LOW = ("float16", "bfloat16")


def _expect(report: pg.Report, which: str) -> None:
    if which == "right":
        assert report.verdict == Verdict.PASS and report.ok, report
    else:
        assert report.verdict == Verdict.MISMATCH and not report.ok, report
    assert report.details["reference"]["method"] in ("float64", "mp")


def _torch_sin(factor: float):
    import torch

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sin(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * torch.cos(x) * factor

    return Sin.apply


@pytest.mark.polygrad_backends("torch")
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("which", sorted(FACTORS))
def test_torch_custom_rule_in_low_precision(dtype: str, which: str) -> None:
    import torch

    sin = _torch_sin(FACTORS[which])
    x = torch.tensor(POINTS, dtype=getattr(torch, dtype))
    _expect(pg.check(lambda x: sin(x).sum(), x), which)


@pytest.mark.polygrad_backends("jax")
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("which", sorted(FACTORS))
def test_jax_custom_vjp_in_low_precision(dtype: str, which: str) -> None:
    import jax
    import jax.numpy as jnp

    factor = FACTORS[which]

    @jax.custom_vjp
    def sin(x):
        return jnp.sin(x)

    def fwd(x):
        return jnp.sin(x), x

    def bwd(x, g):
        return (g * jnp.cos(x) * factor,)

    sin.defvjp(fwd, bwd)
    x = jnp.asarray(POINTS, dtype=getattr(jnp, dtype))
    _expect(pg.check(lambda x: jnp.sum(sin(x)), x), which)


@pytest.mark.polygrad_backends("tensorflow")
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("which", sorted(FACTORS))
def test_tensorflow_custom_gradient_in_low_precision(dtype: str, which: str) -> None:
    import tensorflow as tf

    factor = FACTORS[which]

    @tf.custom_gradient
    def sin(x):
        def grad(g):
            return g * tf.cos(x) * tf.cast(factor, x.dtype)

        return tf.sin(x), grad

    x = tf.constant(POINTS, dtype=getattr(tf, dtype))
    _expect(pg.check(lambda x: tf.reduce_sum(sin(x)), x), which)
