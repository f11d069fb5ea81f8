"""Kinks hidden from every axis (:mod:`polygrad.pipeline.kinks`): the directions tried,
and compare() judging every implementation the same way."""

from __future__ import annotations

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict
from polygrad.pipeline.kinks import along_w, disagreement_directions
from polygrad.report import SEVERITY, Entries


def _entries(autodiff: list[float], reference: list[float], status: list[Verdict]) -> Entries:
    k = len(autodiff)
    z = np.zeros(k)
    return Entries(
        names=[f"x[{j}]" for j in range(k)], autodiff=np.array(autodiff, float),
        autodiff64=np.array(autodiff, float), reference=np.array(reference, float),
        reference_error=z, left=z, left_error=z, right=z, right_error=z,
        tolerance=np.full(k, 1e-6), tolerance64=np.full(k, 1e-12),
        status=np.array([SEVERITY[v] for v in status]), within_one_sided=np.ones(k, bool),
    )  # fmt: skip


def test_directions_follow_the_disagreement_and_the_ties():
    """Inputs 0 and 1 fail (autodiff above and below the reference); input 2 holds the same
    value as input 0 (a tie), input 3 does not: the disagreement direction, then it plus
    and minus the tied input, each scaled by s."""
    P, M = Verdict.PASS, Verdict.MISMATCH
    e = _entries([0.5, -0.5, 0.0, 2.0], [0.0, 0.0, 0.0, 2.0], [M, M, P, P])
    x0 = np.array([1.0, 3.0, 1.0, 5.0])
    s = np.array([1.0, 2.0, 1.0, 4.0])
    W, outputs, members = disagreement_directions(e, x0, s, 1)
    np.testing.assert_array_equal(W, [[1, -2, 0, 0], [1, -2, 1, 0], [1, -2, -1, 0]])
    assert outputs == [0, 0, 0] and [m.tolist() for m in members] == [[0, 1]] * 3
    np.testing.assert_allclose(along_w(e, W[1], 0, 1), [0.5 * 1 + 0.5 * 2 + 0.0])


def test_a_single_failing_axis_without_ties_adds_no_direction():
    """Its coordinate direction was measured already (its one-sided derivatives agreed)."""
    P, M = Verdict.PASS, Verdict.MISMATCH
    e = _entries([1.001, 2.0], [1.0, 2.0], [M, P])
    W, outputs, _ = disagreement_directions(e, np.array([0.3, 0.7]), np.ones(2), 1)
    assert W.shape == (0, 2) and outputs == []


def test_compare_finds_the_hidden_kink_in_every_implementation():
    """clip(max(x), -2, 1) at the tie (1, 1) in torch (autodiff (0.5, 0.5)) and JAX
    ((0.5, 0.5) or (0.25, 0.25)): NONSMOOTH for both, ok, against one reference."""
    import jax.numpy as jnp
    import torch

    x = np.array([1.0, 1.0], np.float32)
    comparison = pg.compare(
        {
            "torch": lambda x: torch.clamp(torch.max(x), -2.0, 1.0),
            "jax": lambda x: jnp.clip(jnp.max(x), -2.0, 1.0),
        },
        x,
    )
    for name in ("torch", "jax"):
        entry = comparison.entries[name]
        assert entry.report.verdict == Verdict.NONSMOOTH, str(comparison)
        assert entry.report.ok


def test_a_kink_of_an_intermediate_that_cancels_is_nonsmooth_not_mismatch():
    """Two torch LayerNorms around a leaky ReLU (slope 1/32) at the tie x = (1, 1): the
    inner norm is exactly 0, autodiff takes the leaky ReLU's 1/32 side for both entries
    and gives 1562.5, while the composition is differentiable there, with derivative
    0.5 (33/64) / eps = 25781.25 (each side of the kink takes one branch per entry).
    A few ulps away autodiff agrees: NONSMOOTH (ok), with the reason named; away from
    the tie the same model is PASS."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    inner, outer = (
        nn.LayerNorm(2, elementwise_affine=False),
        nn.LayerNorm(2, elementwise_affine=False),
    )

    def f(x):
        return outer(F.leaky_relu(inner(x), 1 / 32))[0, 0]

    report = pg.check(f, torch.tensor([[1.0, 1.0]]))
    assert report.verdict == Verdict.NONSMOOTH and report.ok, str(report)
    assert any("conservative gradient" in n for n in report.notes)
    truth = 0.5 * (33 / 64) / inner.eps
    np.testing.assert_allclose(report.entries.reference, [truth, -truth], rtol=1e-6)
    np.testing.assert_allclose(report.entries.autodiff, [truth / 16.5, -truth / 16.5], rtol=1e-6)
    away = pg.check(f, torch.tensor([[1.0, 1.5]]))
    assert away.verdict == Verdict.PASS and away.ok, str(away)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_rule_wrong_only_at_the_exact_input_is_a_mismatch(dtype):
    """grad = 100 where x == 0, cos(x) elsewhere, for sum(sin(x)): a few ulps away the rule
    is right, and every move of the input changes it by the same 99. That is no round-off
    (it would scatter): no allowance makes it PASS. Nor is it a side of a kink: sum(sin(x))
    run on mpmath numbers at the point has no operation at a kink, so it is MISMATCH (it was
    PASS in float64, NONSMOOTH ok in float32), and the note says why."""
    x = np.array([0.0, 0.5, 0.0, -1.0], dtype=dtype)

    def grad(v):
        return np.where(v == 0, 100.0, np.cos(v)).astype(v.dtype)

    report = pg.check(lambda v: np.sum(np.sin(v)), x, grad=grad)
    assert report.verdict == Verdict.MISMATCH and not report.ok, str(report)
    assert report.counts() == {"MISMATCH": 2, "PASS": 2}
    np.testing.assert_allclose(report.entries.reference, np.cos(x.astype(np.float64)), rtol=1e-6)
    assert any("no operation at its kink here" in n for n in report.notes)


def test_a_numpy_relu_at_zero_inside_a_differentiable_function_is_nonsmooth():
    """f = relu(x) - relu(-x) = x, written with np.maximum, and the rule that autodiff would
    give (relu' = 1 where u > 0, else 0): at x = 0 the rule says 0, the derivative is 1,
    and a few ulps away the rule agrees. Here np.maximum sits at its kink (0 against 0):
    NONSMOOTH (ok), as for a framework's ReLU."""
    x = np.array([0.0, 0.5, -1.0])

    def f(v):
        return np.sum(np.maximum(v, 0.0) - np.maximum(-v, 0.0))

    def grad(v):
        return (v > 0).astype(v.dtype) + (-v > 0).astype(v.dtype)

    report = pg.check(f, x, grad=grad)
    assert report.verdict == Verdict.NONSMOOTH and report.ok, str(report)
    assert report.counts() == {"NONSMOOTH": 1, "PASS": 2}
    np.testing.assert_allclose(report.entries.reference, [1.0, 1.0, 1.0], rtol=1e-9)
    assert any("has an operation exactly at its kink here" in n for n in report.notes)
    taylor = next(ln for ln in str(report).splitlines() if "Taylor test" in ln)
    assert "autodiff's value at the point is not the derivative" in taylor


def _custom_sin(framework: str):
    """sin with a hand-written rule that returns 100 where x == 0 (cos(x) elsewhere), in the
    framework's own custom-gradient mechanism, as a user writes one."""
    if framework == "torch":
        import torch

        class Sin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * torch.where(x == 0, torch.full_like(x, 100.0), torch.cos(x))

        return lambda v: Sin.apply(v).sum()
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        @jax.custom_vjp
        def sin(x):
            return jnp.sin(x)

        sin.defvjp(
            lambda x: (jnp.sin(x), x),
            lambda x, g: (g * jnp.where(x == 0, 100.0, jnp.cos(x)),),
        )
        return lambda v: jnp.sum(sin(v))
    import tensorflow as tf

    @tf.custom_gradient
    def tf_sin(x):
        def grad(g):
            return g * tf.where(
                x == 0, tf.fill(tf.shape(x), tf.constant(100.0, x.dtype)), tf.cos(x)
            )

        return tf.sin(x), grad

    return lambda v: tf.reduce_sum(tf_sin(v))


def _relu_difference(framework: str):
    """relu(x) - relu(-x) = x, with the framework's ReLU."""
    if framework == "torch":
        import torch

        return lambda v: (torch.relu(v) - torch.relu(-v)).sum()
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        return lambda v: jnp.sum(jax.nn.relu(v) - jax.nn.relu(-v))
    import tensorflow as tf

    return lambda v: tf.reduce_sum(tf.nn.relu(v) - tf.nn.relu(-v))


def _array(framework: str, values: list[float], dtype: str):
    if framework == "torch":
        import torch

        return torch.tensor(values, dtype=getattr(torch, dtype))
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(np.array(values, dtype=dtype))
    import tensorflow as tf

    return tf.constant(values, dtype=getattr(tf, dtype))


FRAMEWORK_DTYPES = [
    pytest.param(fw, dt, marks=pytest.mark.polygrad_backends(fw), id=f"{fw}-{dt}")
    for fw in ("torch", "jax", "tensorflow")
    for dt in ("float32", "float64")
]


@pytest.mark.parametrize(("framework", "dtype"), FRAMEWORK_DTYPES)
def test_a_custom_rule_wrong_only_at_the_exact_input_is_a_mismatch(framework, dtype):
    """The framework's custom-gradient mechanism with a backward that returns 100 at x == 0
    (cos(x) elsewhere) for sum(sin(x)): a few ulps away the rule is right, so the entries
    at 0 look like a kink of an intermediate from outside; f's captured program, run on
    mpmath numbers at the point, has no operation at a kink (the backward's x == 0 is not
    part of f), so they are MISMATCH, not NONSMOOTH ok."""
    x = [0.0, 0.5, 0.0, -1.0]
    report = pg.check(_custom_sin(framework), _array(framework, x, dtype))
    assert report.verdict == Verdict.MISMATCH and not report.ok, str(report)
    assert report.counts() == {"MISMATCH": 2, "PASS": 2}
    np.testing.assert_allclose(report.entries.reference, np.cos(x), rtol=1e-6)
    np.testing.assert_array_equal(report.entries.autodiff[[0, 2]], [100.0, 100.0])
    assert any("no operation at its kink here" in n for n in report.notes)


def _lse_with_a_tie_bug(framework: str):
    """logaddexp(a, b) (smooth everywhere; computed stably with a max inside) under a
    custom rule that sends the whole cotangent to b where a == b (right: half each)."""
    w = [1.0, 2.0, 3.0]
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        @jax.custom_jvp
        def lse(a, b):
            return jnp.logaddexp(a, b)

        @lse.defjvp
        def _(primals, tangents):
            (a, b), (da, db) = primals, tangents
            s = jax.nn.sigmoid(a - b)
            return lse(a, b), jnp.where(a == b, db, s * da + (1 - s) * db)

        return lambda a, b: jnp.sum(jnp.asarray(w, a.dtype) * lse(a, b))
    if framework == "torch":
        import torch

        class LSE(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                ctx.save_for_backward(a, b)
                return torch.logaddexp(a, b)

            @staticmethod
            def backward(ctx, g):
                a, b = ctx.saved_tensors
                s = torch.sigmoid(a - b)
                tie = a == b
                return g * torch.where(tie, 0 * s, s), g * torch.where(tie, 1 + 0 * s, 1 - s)

        return lambda a, b: (torch.tensor(w, dtype=a.dtype) * LSE.apply(a, b)).sum()
    import tensorflow as tf

    @tf.custom_gradient
    def lse_tf(a, b):
        def grad(g):
            s = tf.sigmoid(a - b)
            tie = tf.equal(a, b)
            return g * tf.where(tie, 0 * s, s), g * tf.where(tie, 1 + 0 * s, 1 - s)

        return tf.math.reduce_logsumexp(tf.stack([a, b]), axis=0), grad

    return lambda a, b: tf.reduce_sum(tf.constant(w, a.dtype) * lse_tf(a, b))


@pytest.mark.parametrize(("framework", "dtype"), FRAMEWORK_DTYPES)
def test_a_custom_rule_wrong_at_a_tie_of_a_smooth_function_is_a_mismatch(framework, dtype):
    """At a == b the derivative of w * logaddexp(a, b) is w / 2 for each; the rule gives 0
    and w. The max inside logaddexp sits at its tie, but the custom rule replaces its
    derivative: JAX's custom_jvp region, TensorFlow's custom_gradient region (bounded by
    its IdentityN) and PyTorch's Function forward (its operations traced with gradients
    off) are looked into as a whole (their one-sided difference quotients on mpmath
    numbers agree), so no kink of them is autodiff's."""
    a, b = [0.3, 1.0, -2.0], [0.3, 0.0, -2.0]
    f = _lse_with_a_tie_bug(framework)
    report = pg.check(f, _array(framework, a, dtype), _array(framework, b, dtype), argnums=(0, 1))
    assert report.verdict == Verdict.MISMATCH and not report.ok, str(report)
    assert report.counts() == {"MISMATCH": 4, "PASS": 2}
    s = 1 / (1 + np.exp(-(np.array(a) - np.array(b))))
    w = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(report.entries.reference, np.concatenate([w * s, w * (1 - s)]),
                               rtol=1e-6)  # fmt: skip


def _custom_relu_difference(framework: str):
    """relu(x) - relu(-x) = x, with a ReLU written under the framework's custom-gradient
    mechanism (rule: g where x > 0, else 0)."""
    if framework == "torch":
        import torch

        class ReLU(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.clamp(x, min=0)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * (x > 0).to(g.dtype)

        return lambda v: (ReLU.apply(v) - ReLU.apply(-v)).sum()
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        @jax.custom_vjp
        def relu(x):
            return jnp.maximum(x, 0)

        relu.defvjp(lambda x: (relu(x), x), lambda x, g: (g * (x > 0).astype(g.dtype),))
        return lambda v: jnp.sum(relu(v) - relu(-v))
    import tensorflow as tf

    @tf.custom_gradient
    def relu_tf(x):
        def grad(g):
            return g * tf.cast(x > 0, g.dtype)

        return tf.maximum(x, tf.zeros_like(x)), grad

    return lambda v: tf.reduce_sum(relu_tf(v) - relu_tf(-v))


@pytest.mark.parametrize("make", [_relu_difference, _custom_relu_difference],
                         ids=["framework-relu", "custom-rule-relu"])  # fmt: skip
@pytest.mark.parametrize(("framework", "dtype"), FRAMEWORK_DTYPES)
def test_a_relu_at_zero_inside_a_differentiable_function_is_nonsmooth(make, framework, dtype):
    """relu(x) - relu(-x) = x at x = 0, with the framework's ReLU or a ReLU written as a
    custom rule (g where x > 0): the rule gives 0 + 0 there, the derivative is 1, and a
    few ulps away the rule agrees (moves of 0 are by the smallest normal number, since
    XLA and TensorFlow flush subnormals to zero). The captured program has a ReLU at its
    kink, or a custom region whose own one-sided difference quotients on mpmath numbers
    are 1 and 0: NONSMOOTH (ok), in float64 as in float32 (float64 was MISMATCH in JAX
    and TensorFlow)."""
    x = [0.0, 0.5, 0.0, -1.0]
    report = pg.check(make(framework), _array(framework, x, dtype))
    assert report.verdict == Verdict.NONSMOOTH and report.ok, str(report)
    assert report.counts() == {"NONSMOOTH": 2, "PASS": 2}
    np.testing.assert_allclose(report.entries.reference, np.ones(4), rtol=1e-6)
    np.testing.assert_array_equal(report.entries.autodiff, [0.0, 1.0, 0.0, 1.0])
    assert any("has an operation exactly at its kink here" in n for n in report.notes)
