"""Localization after NONFINITE: the first node whose VJP turns finite values into NaN or
Inf, the masking op it feeds, and the fix (the "double where")."""

from __future__ import annotations

import inspect

import numpy as np

import polygrad as pg
from polygrad.localize import NONFINITE_VJP, locate

HERE = "test_localize_nonfinite.py"


def _line_of(fn, text):
    """The line number of the first source line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------- PyTorch


def _torch_net(safe):
    """A linear layer and a square-root activation, masked by a where: the trap
    (``safe=False``) or the double where (``safe=True``)."""
    import torch

    class SqrtNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 4)

        def forward(self, x):
            h = self.lin(x)
            if safe:
                return torch.where(h > 0, torch.sqrt(torch.where(h > 0, h, 1.0)), 0.0)
            return torch.where(h > 0, torch.sqrt(h), 0.0)

    torch.manual_seed(0)
    net = SqrtNet()
    x = torch.tensor(np.random.default_rng(0).standard_normal((2, 3)), dtype=torch.float32)
    return (lambda x: (net(x) ** 2).mean()), x, net, SqrtNet.forward


def test_torch_where_sqrt_names_the_sqrt_the_where_and_the_line():
    f, x, net, forward = _torch_net(safe=False)
    assert (net.lin(x) <= 0).any()  # the untaken branch is there
    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.NONFINITE
    loc = report.localize()
    assert loc.searched == NONFINITE_VJP
    c = loc.located
    assert c is not None and c.wrong and c.site.op == "torch.sqrt"
    assert c.site.kind == "primitive" and c.site.path == "net (SqrtNet)"
    line = _line_of(forward, "torch.sqrt(h)")
    assert f"{HERE}:{line} in forward" in c.site.source
    assert c.arithmetic == "float32"  # evaluated as the program ran it
    assert "NaN" in c.nonfinite and "input[" in c.nonfinite
    assert c.feeds is not None and c.feeds.op == "torch.where"
    assert f"{HERE}:{line} in forward" in c.feeds.source
    assert "double where" in c.hint and "sqrt(where(c, x, s))" in c.hint
    # the linear layer ran before it, but its cotangent in the backward pass is the NaN
    # that sqrt's VJP made: not evaluated, not blamed
    assert [k.site.op for k in loc.checked] == ["torch.sqrt"]
    text = str(report).splitlines()
    assert text[1] == "Localized: the first node whose VJP turns finite values into NaN or Inf"
    assert any(t.startswith("  feeds:  torch.where") for t in text)
    assert any(t.startswith("  fix:    the torch.where discards") for t in text)


def test_check_with_localize_runs_the_nonfinite_walk():
    """``check(..., localize=True)`` localizes a NONFINITE as it does a MISMATCH: the
    report's text shows the located node first."""
    f, x, _, _ = _torch_net(safe=False)
    report = pg.check(f, x, localize=True)
    assert report.verdict is pg.Verdict.NONFINITE
    assert report.to_dict()["localization"]["located"]["op"] == "torch.sqrt"
    assert str(report).splitlines()[1].startswith("Localized: the first node whose VJP")


def test_torch_double_where_passes_and_flags_nothing():
    f, x, _, _ = _torch_net(safe=True)
    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS
    assert "not run" in report.localize().notes[0]
    loc = locate(report.checked_call, report, nonfinite=True)
    assert loc.located is None and loc.searched == NONFINITE_VJP
    ops = [c.site.op for c in loc.checked]
    assert "torch.sqrt" in ops and ops.count("torch.where") == 2
    assert not any(c.nonfinite or c.wrong for c in loc.checked)
    assert str(loc).startswith("Localized: no node's VJP turns finite values into NaN")


def _masked_mean(x, mask):
    import torch

    count = mask.sum(1)
    total = (x * mask).sum(1)
    return torch.where(count > 0, total / count, 0.0).sum()


def test_torch_masked_mean_division_by_a_zero_count():
    import torch

    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    report = pg.check(_masked_mean, x, mask)
    assert report.verdict is pg.Verdict.NONFINITE
    c = report.localize().located
    assert c is not None and c.site.op == "torch.Tensor.div"
    assert f"{HERE}:{_line_of(_masked_mean, 'total / count')}" in c.site.source
    # the empty row's total: its cotangent is 0 (the where) and 0 / 0 is NaN
    assert c.nonfinite == "input[1] = 0: NaN"
    assert c.feeds is not None and c.feeds.op == "torch.where"
    assert "1 / where(c, x, s)" in c.hint


def _softplus(x):
    import torch

    return torch.where(x < 20, torch.log1p(torch.exp(x)), x).sum()


def test_torch_float32_overflow_is_found_in_the_programs_dtype():
    """exp(100) overflows in float32 only: a node evaluated in float64 would pass."""
    import torch

    x = torch.tensor([1.0, 100.0, -3.0])
    report = pg.check(_softplus, x)
    assert report.verdict is pg.Verdict.NONFINITE
    c = report.localize().located
    assert c is not None and c.site.op == "torch.exp" and c.arithmetic == "float32"
    assert c.nonfinite == "input[1] = 100: NaN"  # cotangent 0 (the where) x exp(100) = inf
    assert c.feeds is not None and c.feeds.op == "torch.where"
    assert f"{HERE}:{_line_of(_softplus, 'torch.exp(x)')}" in c.feeds.source


def test_torch_a_node_the_output_does_not_depend_on_is_not_blamed():
    import torch

    def f(x):
        unused = torch.sqrt(x)  # NaN derivative at x < 0, but nothing reads it
        del unused
        return torch.where(x > 0, torch.log(x), 0.0).sum()

    x = torch.tensor([0.5, -1.0, 0.0, 2.0], dtype=torch.float64)
    report = pg.check(f, x)
    loc = locate(report.checked_call, report, nonfinite=True)
    assert loc.located is not None and loc.located.site.op == "torch.log"
    assert "torch.sqrt" not in [c.site.op for c in loc.checked]


# ---------------------------------------------------------------- JAX


def _jax_loss(safe):
    import jax

    jnp = jax.numpy

    def loss(w, x):
        h = x @ w
        if safe:
            act = jnp.where(h > 0, jnp.sqrt(jnp.where(h > 0, h, 1.0)), 0.0)
        else:
            act = jnp.where(h > 0, jnp.sqrt(h), 0.0)
        return jnp.mean(act**2)

    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((3, 4)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((2, 3)), jnp.float32)
    return loss, w, x


def test_jax_where_sqrt_names_the_sqrt_the_where_and_the_line():
    loss, w, x = _jax_loss(safe=False)
    assert bool(((x @ w) <= 0).any())
    report = pg.check(loss, w, x)
    assert report.verdict is pg.Verdict.NONFINITE
    loc = report.localize()
    c = loc.located
    assert c is not None and c.wrong and c.site.op == "sqrt" and c.site.kind == "primitive"
    line = _line_of(loss, "jnp.sqrt(h)")
    assert f"{HERE}:{line} in _jax_loss.<locals>.loss" in c.site.source
    assert c.arithmetic == "float32" and "NaN" in c.nonfinite
    assert c.feeds is not None and c.feeds.op == "select_n (in jit _where)"
    assert f"{HERE}:{line}" in c.feeds.source  # the where's line, not JAX's own
    assert "double where" in c.hint and "sqrt(where(c, x, s))" in c.hint
    # x @ w ran first, but its cotangent is the NaN sqrt's VJP made: not blamed
    assert [k.site.op for k in loc.checked] == ["sqrt"]


def test_jax_double_where_passes_and_flags_nothing():
    loss, w, x = _jax_loss(safe=True)
    report = pg.check(loss, w, x)
    assert report.verdict is pg.Verdict.PASS
    loc = locate(report.checked_call, report, nonfinite=True)
    assert loc.located is None
    ops = [c.site.op for c in loc.checked]
    assert "sqrt" in ops and ops.count("select_n (in jit _where)") == 2
    assert not any(c.nonfinite for c in loc.checked)


def test_jax_a_node_the_output_does_not_depend_on_is_not_blamed():
    """JAX gives a value no derivative flows from a zero cotangent, and sqrt's VJP of 0
    at x < 0 is NaN: the data flow (sqrt is read only through a comparison), not the
    cotangent, says that it is not on the gradient's path."""
    import jax

    jnp = jax.numpy

    def f(x):
        unused = jnp.sqrt(x)
        return jnp.sum(jnp.where(x > 0, jnp.log(x), 0.0)) + 0.0 * jnp.sum(unused > 0)

    x = jnp.asarray([0.5, -1.0, 0.0, 2.0], jnp.float32)
    report = pg.check(f, x)
    loc = locate(report.checked_call, report, nonfinite=True)
    assert loc.located is not None and loc.located.site.op == "log"
    assert "sqrt" not in [c.site.op for c in loc.checked]


# ---------------------------------------------------------------- NumPy and notes


def test_numpy_supplied_rule_with_nan_is_the_node():
    def f(x):
        return np.sum(np.where(x > 0, np.sqrt(np.abs(x)), 0.0))

    def grad(x):
        return 0.5 / np.sqrt(x) * (x > 0)  # NaN x 0 at x < 0: NaN

    x = np.array([1.0, -2.0, 4.0])
    with np.errstate(all="ignore"):
        report = pg.check(f, x, grad=grad)
        assert report.verdict is pg.Verdict.NONFINITE
        c = report.localize().located
    assert c is not None and c.site.op == "the supplied grad= rule"
    assert c.nonfinite.startswith("the Jacobian entries") and "nan" in c.nonfinite


def test_nonfinite_walk_is_not_run_where_autodiff_is_finite():
    layer = lambda x: np.sum(x**2)  # noqa: E731
    x = np.array([1.0, 2.0])
    report = pg.check(layer, x, grad=lambda x: 2 * x)
    report.verdict = pg.Verdict.NONFINITE  # as if the reference were the non-finite side
    loc = report.localize()
    assert loc.located is None and "autodiff is finite at every entry" in loc.notes[0]


# ---------------------------------------------------------------- TensorFlow (Keras)


def _keras_model(activation):
    import keras
    import tensorflow as tf

    class Act(keras.layers.Layer):
        def call(self, h):
            if activation == "pow":
                return tf.where(h > 0, tf.pow(h, 0.5), 0.0)
            if activation == "double where":
                return tf.where(h > 0, tf.pow(tf.where(h > 0, h, 1.0), 0.5), 0.0)
            return tf.where(h > 0, tf.sqrt(h), 0.0)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), Act(name="act"),
                              keras.layers.Dense(1)])  # fmt: skip
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 3)), tf.float32)
    assert bool(tf.reduce_any(model.layers[0](x) <= 0))
    return (lambda x: tf.reduce_sum(model(x))), x, Act.call


def test_tf_where_pow_in_a_keras_layer_names_the_pow_the_select_and_the_line():
    f, x, call = _keras_model("pow")
    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.NONFINITE
    loc = report.localize()
    c = loc.located
    assert c is not None and c.site.op == "Pow" and c.site.kind == "primitive"
    assert c.site.path.split("/")[-1] == "act"  # the Keras layer
    line = _line_of(call, "tf.pow(h, 0.5)")
    assert f"{HERE}:{line} in call" in c.site.source
    assert c.arithmetic == "float32" and "NaN" in c.nonfinite
    assert "the cotangent it received in the backward pass" in c.compared
    assert c.feeds is not None and c.feeds.op == "SelectV2"
    assert f"{HERE}:{line} in call" in c.feeds.source
    assert "where(c, x, s) ** p" in c.hint
    assert not any("not recorded" in n for n in loc.notes)


def test_tf_double_where_passes_and_flags_nothing():
    f, x, _ = _keras_model("double where")
    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS
    loc = locate(report.checked_call, report, nonfinite=True)
    assert loc.located is None
    ops = [c.site.op for c in loc.checked]
    assert "Pow" in ops and ops.count("SelectV2") == 2
    assert not any(c.nonfinite for c in loc.checked)


def test_tf_sqrt_gradient_of_a_zero_cotangent_is_zero_and_not_blamed():
    """TensorFlow's Sqrt gradient returns 0 for a zero cotangent, so where(h > 0,
    sqrt(h), 0) has a finite gradient there; its VJP at h < 0 for a random cotangent is
    NaN, and only the cotangent the node really received keeps it from being blamed."""
    f, x, _ = _keras_model("sqrt")
    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS
    loc = locate(report.checked_call, report, nonfinite=True)
    sqrt = [c for c in loc.checked if c.site.op == "Sqrt"]
    assert loc.located is None and len(sqrt) == 1 and not sqrt[0].nonfinite
