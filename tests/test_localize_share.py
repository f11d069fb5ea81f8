"""The located node's share of the function's error: 1 where it is the whole bug, 1/2
where a second rule of the same size is wrong too, in every framework with a program.

Each model is a chain of linear layers under ``tanh`` whose input gradient goes through a
custom rule scaled by ``scales[k]``: a rule ``1 + d`` too large scales the whole input
gradient by ``1 + d``, so two of them make an error ``(1 + d)^2 - 1`` of which the
first's part is ``d`` (to first order, which the share is).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import polygrad as pg
from polygrad.localize import CheckedCall
from polygrad.localize import _torch as torch_recorder

pytestmark = pytest.mark.polygrad_backends("torch", "jax", "tensorflow")

D = 1e-3
SHAPES = [(3, 5), (5, 4), (4, 2)]


def _weights():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s) / np.sqrt(s[0]) for s in SHAPES]


def _x():
    return np.random.default_rng(1).standard_normal((2, 3))


def torch_chain(scales):
    import torch

    def make(scale):
        class Lin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                return x @ w

            @staticmethod
            def backward(ctx, g):
                x, w = ctx.saved_tensors
                return g @ w.T * scale, x.T @ g

        return Lin

    ws = [torch.tensor(w) for w in _weights()]
    fns = [make(s) for s in scales]

    def f(x):
        for fn, w in zip(fns, ws, strict=True):
            x = torch.tanh(fn.apply(torch.sin(x), w))
        return x.sum()

    return f, torch.tensor(_x())


def jax_chain(scales):
    import jax

    jnp = jax.numpy

    def make(scale):
        @jax.custom_vjp
        def lin(x, w):
            return x @ w

        lin.defvjp(lambda x, w: (x @ w, (x, w)),
                   lambda res, g: (g @ res[1].T * scale, res[0].T @ g))  # fmt: skip
        return lin

    ws = [jnp.asarray(w, jnp.float32) for w in _weights()]
    fns = [make(s) for s in scales]

    def f(x):
        for fn, w in zip(fns, ws, strict=True):
            x = jnp.tanh(fn(jnp.sin(x), w))
        return x.sum()

    return f, jnp.asarray(_x(), jnp.float32)


def tf_chain(scales):
    import tensorflow as tf

    def make(scale):
        @tf.custom_gradient
        def lin(x, w):
            def grad(g):
                return tf.matmul(g, w, transpose_b=True) * scale, tf.matmul(x, g, transpose_a=True)

            return tf.matmul(x, w), grad

        return lin

    ws = [tf.constant(w, tf.float32) for w in _weights()]
    fns = [make(s) for s in scales]

    def f(x):
        for fn, w in zip(fns, ws, strict=True):
            x = tf.tanh(fn(tf.sin(x), w))
        return tf.reduce_sum(x)

    return f, tf.constant(_x(), tf.float32)


CHAINS = {"torch": torch_chain, "jax": jax_chain, "tensorflow": tf_chain}


@pytest.mark.parametrize("framework", sorted(CHAINS))
@pytest.mark.parametrize(
    ("scales", "share"),
    [((1.0, 1 + D, 1.0), 1.0), ((1 + D, 1.0, 1 + D), 0.5), ((1.0, 1 + D, 1 + D), 0.5)],
)
def test_the_located_rule_explains_its_share_of_the_error(framework, scales, share):
    f, x = CHAINS[framework](scales)
    report = pg.check(f, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    assert loc.located is not None and loc.located.site.kind == "custom rule"
    # the first wrong rule in forward order is located
    first = scales.index(1 + D)
    assert loc.checked[-1] is loc.located and len(loc.checked) == first + 1
    assert loc.share is not None, loc.notes
    # (1 + D) of the error over (1 + D)^2 - 1 for two: 1/(2 + D) to first order
    expected = 1.0 if share == 1.0 else 1 / (2 + D)
    assert abs(loc.share.fraction - expected) < 0.02, loc.share
    assert abs(loc.share.function) > 10 * loc.share.tolerance
    text = str(report)
    assert f"share:  {100 * loc.share.fraction:.0f}% of the function's error" in text
    assert ("the rest comes from elsewhere" in text) == (share < 1)
    d = json.loads(report.to_json())["localization"]["share"]
    assert d["fraction"] == pytest.approx(loc.share.fraction)


def test_a_share_that_cannot_be_measured_is_a_note():
    """A check of projections has no Jacobian entries to sum: the walk still names the
    node, and a note says why its share is not given."""
    f, x = torch_chain((1.0, 1 + D, 1.0))
    report = pg.check(f, x, localize=True, strategy="projections", projections=4)
    loc = report.localization
    assert loc.located is not None and loc.share is None
    assert any("share of the function's error is not measured: measured on a full check"
               in n for n in loc.notes)  # fmt: skip


def test_torch_recorder_numbers_custom_rules_in_forward_order():
    """A Function's position counts the primitives before it (it counted 2 whatever ran
    before it, which gave a later primitive the same position and mixed their cotangents
    in the NONFINITE walk)."""
    f, x = torch_chain((1.0, 1.0, 1.0))
    report = pg.check(f, x)
    call = CheckedCall(f, (x,), (0,), "torch")
    rec = torch_recorder.record(call, report, as_run=True)
    ops = [s.site.op.split(" ")[-1] for s in rec.steps]
    assert ops == ["torch.sin", "Lin", "torch.tanh"] * 3 + ["torch.Tensor.sum"]
    nodes = sorted((*rec.custom, *rec.primitives), key=lambda n: n.index)
    assert [n.index for n in nodes] == list(range(len(ops)))
    for n in rec.custom:  # each Function's cotangent is its own output's: 2 x 5, 2 x 4, 2 x 2
        assert n.cotangent is not None and n.cotangent.size == n.forward(list(n.inputs)).size
