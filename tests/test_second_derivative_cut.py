"""``order=2`` on a custom backward that cuts its own graph (a detach, a stop_gradient).

The first derivative is right, but autodiff cannot differentiate it again: its second
derivative, as autodiff reads it, is 0, where that of ``sum(tanh(x))`` is
``-2 tanh(x) (1 - tanh(x)^2)``. The check judges it (MISMATCH), rather than raising an
error about a gradient that cannot flow, which is about the user's function.
"""

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict

X = [0.5, -1.0]


def _cut_tanh(framework):
    if framework == "torch":
        import torch

        class Tanh(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.tanh()

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * (1 - torch.tanh(x).detach() ** 2)

        return lambda x: Tanh.apply(x).sum(), torch.tensor(X, dtype=torch.float64)
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        @jax.custom_vjp
        def tanh(x):
            return jnp.tanh(x)

        tanh.defvjp(
            lambda x: (jnp.tanh(x), x),
            lambda x, g: (g * (1 - jax.lax.stop_gradient(jnp.tanh(x)) ** 2),),
        )
        return lambda x: jnp.sum(tanh(x)), jnp.asarray(np.array(X))
    import tensorflow as tf

    @tf.custom_gradient
    def tanh_tf(x):
        def grad(g):
            return g * (1 - tf.stop_gradient(tf.tanh(x)) ** 2)

        return tf.tanh(x), grad

    return lambda x: tf.reduce_sum(tanh_tf(x)), tf.constant(X, tf.float64)


@pytest.mark.parametrize(
    "framework",
    [pytest.param(fw, marks=pytest.mark.polygrad_backends(fw)) for fw in ("torch", "jax",
                                                                         "tensorflow")],
)  # fmt: skip
def test_a_backward_that_cuts_its_graph_has_a_wrong_second_derivative(framework):
    f, x = _cut_tanh(framework)
    first = pg.check(f, x)
    assert first.verdict == Verdict.PASS and first.ok, str(first)
    report = pg.check(f, x, order=2)
    assert report.verdict == Verdict.MISMATCH and not report.ok, str(report)
    t = np.tanh(np.array(X))
    hessian = np.diag(-2 * t * (1 - t**2))
    np.testing.assert_allclose(report.entries.reference, hessian.ravel(), atol=1e-12)
    np.testing.assert_array_equal(report.entries.autodiff, np.zeros(4))


def test_order_2_with_respect_to_parameters_is_a_clear_error():
    """order=2 differentiates the gradient with respect to the checked inputs; with
    wrt='parameters' it says so (it raised an AttributeError from inside, or checked a
    mixed derivative)."""
    import torch

    model = torch.nn.Linear(3, 1).double()
    x = torch.ones(2, 3, dtype=torch.float64)
    for f, args in [(lambda m, x: torch.tanh(m(x)).pow(2).sum(), (model, x)), (model, (x,))]:
        with pytest.raises(ValueError, match="order=2.*wrt='parameters'"):
            pg.check(f, *args, wrt="parameters", order=2)
