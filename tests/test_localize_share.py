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

    def make(k, scale, wscale=1.0):
        return type(f"Lin{k}", (_one_torch_rule(scale, wscale),), {})

    ws = [torch.tensor(w, requires_grad=True) for w in _weights()]  # a model's parameters
    fns = [make(k, *s) if isinstance(s, tuple) else make(k, s) for k, s in enumerate(scales)]

    def f(x):
        for fn, w in zip(fns, ws, strict=True):
            x = torch.tanh(fn.apply(torch.sin(x), w))
        return x.sum()

    return f, torch.tensor(_x())


def jax_chain(scales):
    import jax

    jnp = jax.numpy

    def make(k, scale, wscale=1.0):
        def matmul(x, w):
            return x @ w

        # each layer its own rule, by name too (JAX names it by the code object)
        matmul.__code__ = matmul.__code__.replace(co_name=f"lin{k}", co_qualname=f"lin{k}")
        matmul.__name__ = matmul.__qualname__ = f"lin{k}"
        lin = jax.custom_vjp(matmul)
        lin.defvjp(lambda x, w: (x @ w, (x, w)),
                   lambda res, g: (g @ res[1].T * scale, res[0].T @ g * wscale))  # fmt: skip
        return lin

    ws = [jnp.asarray(w, jnp.float32) for w in _weights()]
    fns = [make(k, *s) if isinstance(s, tuple) else make(k, s) for k, s in enumerate(scales)]

    def f(x):
        for fn, w in zip(fns, ws, strict=True):
            x = jnp.tanh(fn(jnp.sin(x), w))
        return x.sum()

    return f, jnp.asarray(_x(), jnp.float32)


def tf_chain(scales):
    import tensorflow as tf

    def make(k, scale, wscale=1.0):
        def lin(x, w):
            def grad(g):
                gx = tf.matmul(g, w, transpose_b=True) * scale
                return gx, tf.matmul(x, g, transpose_a=True) * wscale

            return tf.matmul(x, w), grad

        lin.__name__ = lin.__qualname__ = f"lin{k}"
        return tf.custom_gradient(lin)

    ws = [tf.Variable(w, dtype=tf.float32) for w in _weights()]  # a model's weights
    fns = [make(k, *s) if isinstance(s, tuple) else make(k, s) for k, s in enumerate(scales)]

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
    assert ops == [op for k in range(3) for op in ("torch.sin", f"Lin{k}", "torch.tanh")] + [
        "torch.Tensor.sum"
    ]
    nodes = sorted((*rec.custom, *rec.primitives), key=lambda n: n.index)
    assert [n.index for n in nodes] == list(range(len(ops)))
    for n in rec.custom:  # each Function's cotangent is its own output's: 2 x 5, 2 x 4, 2 x 2
        assert n.cotangent is not None and n.cotangent.size == n.forward(list(n.inputs)).size


@pytest.mark.parametrize("framework", sorted(CHAINS))
def test_a_rule_wrong_off_the_checked_path_is_passed_over(framework):
    """The first layer's rule is wrong for its weight only, which a check of the input does
    not measure (its share is 0); the walk goes on to the second layer's rule, wrong for
    its input, which explains the whole error, and names the first in a note."""
    f, x = CHAINS[framework](((1.0, 1 + D), (1 + D, 1.0), 1.0))
    loc = pg.check(f, x, localize=True).localization
    custom = [c for c in loc.checked if c.site.kind == "custom rule"]
    assert len(custom) == 2 and custom[0].wrong and custom[1] is loc.located
    assert loc.share is not None and abs(loc.share.fraction - 1) < 0.02
    passed = [n for n in loc.notes if n.startswith("also wrong, passed over")]
    assert len(passed) == 1 and "explain 0% of this check's error" in passed[0]


def test_a_rule_called_at_three_places_explains_the_error_together():
    f, x = torch_chain((1 + D, 1 + D, 1 + D))
    loc = pg.check(f, x, localize=True).localization
    # one class per layer here: a third each, the rest from elsewhere
    assert loc.share is not None and loc.share.calls == 1 and loc.share.fraction < 0.4
    assert "the rest comes from elsewhere" in str(loc)

    import torch

    ws = [torch.tensor(w) for w in _weights()]
    Lin = _one_torch_rule(1 + D)

    def g(x):
        for w in ws:
            x = torch.tanh(Lin.apply(torch.sin(x), w))
        return x.sum()

    loc = pg.check(g, torch.tensor(_x()), localize=True).localization
    s = loc.share
    assert s is not None and s.calls == 3
    assert abs(s.same_op_fraction - 1) < 0.02 and s.fraction < 0.9
    text = str(loc)
    assert "with the 2 other call(s) of the same op, 100%: together they explain it" in text
    assert "the rest comes from elsewhere" not in text


def _one_torch_rule(scale, wscale=1.0):
    """A linear ``autograd.Function`` whose rule scales the input's gradient by ``scale``
    and the weight's by ``wscale``."""
    import torch

    class Lin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g @ w.T * scale, x.T @ g * wscale

    return Lin


def test_an_identity_after_the_rule_keeps_its_cotangent():
    """An eval-mode dropout returns its input: the rule's output keeps its maker, so its
    cotangent is recorded and its share measured."""
    import torch

    torch.manual_seed(0)
    Lin = _one_torch_rule(1 + D)
    w = torch.tensor(_weights()[0])
    drop = torch.nn.Dropout(0.2).eval()

    def f(x):
        return torch.tanh(drop(Lin.apply(torch.sin(x), w))).sum()

    loc = pg.check(f, torch.tensor(_x()), localize=True).localization
    assert loc.share is not None, loc.notes
    assert abs(loc.share.fraction - 1) < 0.02


def test_a_module_backward_hook_is_named():
    """A hook that rewrites a module's input gradient has no rule to compare: the walk finds
    no wrong node, and a note names the hooked module (PyTorch's own Function behind the
    hook is not counted as a custom rule)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    model.double()
    handle = model[2].register_full_backward_hook(lambda m, gi, go: (gi[0] * (1 - D),))
    try:
        report = pg.check(lambda x: model(x).sum(), torch.tensor(_x()), localize=True)
    finally:
        handle.remove()
    loc = report.localization
    assert report.verdict is pg.Verdict.MISMATCH and loc.located is None
    assert not any(c.site.kind == "custom rule" for c in loc.checked)
    hook = [n for n in loc.notes if "register_full_backward_hook" in n]
    assert len(hook) == 1 and "in model.2 (Linear)" in hook[0]


def test_a_check_of_parameters_says_why_it_has_no_share():
    import torch

    Lin = _one_torch_rule(1.0)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor(_weights()[0]))

        def forward(self, x):
            return torch.tanh(Lin.apply(x, self.w * (1 + D))).sum()

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, w):
            return w.clone()

        @staticmethod
        def backward(ctx, g):
            return g * (1 + D)

    class Net(Layer):
        def forward(self, x):
            return torch.tanh(Lin.apply(x, Wrong.apply(self.w))).sum()

    report = pg.check(Net(), torch.tensor(_x()), wrt="parameters", localize=True)
    loc = report.localization
    assert loc.located is not None and loc.share is None
    assert any('not measured: measured where the checked inputs are real arrays passed to '
               'the function (here: wrt="parameters"' in n for n in loc.notes)  # fmt: skip
