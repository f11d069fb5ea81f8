"""Localization: after a MISMATCH, the op, the layer and the line whose own rule is wrong."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import numpy as np
import pytest
from conftest import torch_planted_tanh

import polygrad as pg
from polygrad.localize import CheckedCall, locate
from polygrad.policy import DEFAULT_POLICY


def _line_of(fn, text):
    """The line number of the first source line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------- PyTorch


def _torch_model(bug):
    import torch

    class LinearFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return x @ w.T + b

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            gx = g @ (w.T if bug == "transposed" else w)
            return gx * (1 + 1e-3 if bug == "scaled" else 1.0), g.T @ x, g.sum(0)

    class MyLinear(torch.nn.Linear):
        def forward(self, x):
            return LinearFn.apply(x, self.weight, self.bias)

    torch.manual_seed(0)
    L, T = torch.nn.Linear, torch.nn.Tanh
    model = torch.nn.Sequential(L(4, 8), T(), L(8, 8), T(), MyLinear(8, 8), T(),
                                L(8, 8), T(), L(8, 8), T(), L(8, 1))  # fmt: skip
    return model, MyLinear.forward


@pytest.mark.parametrize("bug", ["scaled", "transposed"])
def test_torch_function_in_mlp_is_located(bug):
    import torch

    model, forward = _torch_model(bug)
    x = torch.randn(3, 4, dtype=torch.float32)
    report = pg.check(lambda x: model(x).sum(), x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    c = report.localization.located
    assert c is not None and c.wrong and c.site.kind == "custom rule"
    assert c.site.op == "torch.autograd.Function LinearFn"
    assert c.site.path == "model.4 (MyLinear)"
    assert f"test_localize.py:{_line_of(forward, 'LinearFn.apply')} in forward" in c.site.source
    assert c.arithmetic == "float64"
    assert c.error > 1e3 * c.tolerance  # a 1e-3 bug against float64 differences
    # the node is named first in the text report, after the headline
    assert str(report).splitlines()[1].startswith("Localized: the first node")


def test_torch_function_in_mlp_is_located_by_parameters_with_its_layer_path():
    """wrt="parameters" with the model passed as an argument, f(net, x): the layer is
    named by the argument, as on the input (it read "Sequential > MyLinear", which does
    not say which layer of the model)."""
    import torch

    model, _ = _torch_model("transposed")
    x = torch.randn(3, 4, dtype=torch.float32)
    report = pg.check(lambda net, x: net(x).sum(), model, x, wrt="parameters", localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    c = report.localization.located
    assert c is not None and c.wrong and c.site.op == "torch.autograd.Function LinearFn"
    assert c.site.path == "net.4 (MyLinear)"


def test_torch_correct_mlp_flags_no_node():
    import torch

    model, _ = _torch_model(None)
    x = torch.randn(3, 4, dtype=torch.float32)
    f = lambda x: model(x).sum()  # noqa: E731
    report = pg.check(f, x, localize=True)
    assert report.ok and report.localization is None  # nothing runs for a passing check
    loc = locate(CheckedCall(f, (x,), (0,), "torch"), report)
    assert loc.located is None
    kinds = [c.site.kind for c in loc.checked]
    assert kinds.count("custom rule") == 1 and kinds.count("primitive") >= 11
    assert not any(c.wrong for c in loc.checked)


# ---------------------------------------------------------------- JAX (Flax)


def _flax_model(scale):
    import flax.linen as nn
    import jax

    jnp = jax.numpy

    @jax.custom_vjp
    def matmul(x, w):
        return x @ w

    def fwd(x, w):
        return x @ w, (x, w)

    def bwd(res, g):
        x, w = res
        return (g @ w.T * scale, x.T @ g)

    matmul.defvjp(fwd, bwd)

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            w = self.param("w", nn.initializers.normal(1.0), (x.shape[-1], 4))
            return jnp.tanh(matmul(x, w))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = jnp.tanh(nn.Dense(4)(x))
            return nn.Dense(1)(Block()(x)).sum()

    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3)), jnp.float32)
    m = Net()
    params = m.init(jax.random.key(0), x)
    return (lambda x: m.apply(params, x)), x, Block.__call__


def test_jax_custom_vjp_in_flax_is_located():
    f, x, block_call = _flax_model(1 + 1e-3)
    report = pg.check(f, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    c = report.localization.located
    assert c is not None and c.site.kind == "custom rule"
    assert c.site.op == "custom_vjp_call of _flax_model.<locals>.matmul"
    assert c.site.path == "Net/Block_0"
    line = _line_of(block_call, "matmul(x, w)")
    assert f"test_localize.py:{line} in _flax_model.<locals>.Block.__call__" in c.site.source
    assert c.arithmetic == "float64" and c.error > 1e3 * c.tolerance


def test_jax_correct_flax_flags_no_node():
    f, x, _ = _flax_model(1.0)
    report = pg.check(f, x)
    assert report.ok
    loc = locate(CheckedCall(f, (x,), (0,), "jax"), report)
    assert loc.located is None and len(loc.checked) >= 10
    assert loc.checked[0].site.kind == "custom rule"
    assert not any(c.wrong for c in loc.checked)


# ---------------------------------------------------------------- TensorFlow (Keras)


def _keras_model(scale):
    import keras
    import tensorflow as tf

    @tf.custom_gradient
    def dense_op(x, w):
        def grad(g):
            return tf.matmul(g, w, transpose_b=True) * scale, tf.matmul(x, g, transpose_a=True)

        return tf.matmul(x, w), grad

    class MyDense(keras.layers.Layer):
        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1], 4), initializer="random_normal")

        def call(self, x):
            return tf.tanh(dense_op(x, tf.convert_to_tensor(self.w)))

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                              MyDense(name="my_dense"), keras.layers.Dense(1)])  # fmt: skip
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 3)), tf.float32)
    return (lambda x: tf.reduce_sum(model(x))), x, MyDense.call


def test_tf_custom_gradient_in_keras_layer_is_located():
    f, x, call = _keras_model(1 + 1e-3)
    report = pg.check(f, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    c = report.localization.located
    assert c is not None and c.site.op == "tf.custom_gradient dense_op"
    assert c.site.path.split("/")[-1] == "my_dense"
    assert f"test_localize.py:{_line_of(call, 'dense_op(x')} in call" in c.site.source
    assert c.arithmetic == "float64" and c.error > 1e3 * c.tolerance


def test_tf_correct_keras_flags_no_node():
    f, x, _ = _keras_model(1.0)
    report = pg.check(f, x)
    assert report.ok
    loc = locate(CheckedCall(f, (x,), (0,), "tensorflow"), report)
    assert loc.located is None and loc.notes == ()
    # the custom rule first, then every eager op the argument reaches, in float64
    assert loc.checked[0].site.op == "tf.custom_gradient dense_op"
    ops = [c.site.op for c in loc.checked[1:]]
    assert ops == ["MatMul", "BiasAdd", "Tanh", "Tanh", "MatMul", "AddV2", "Sum"]
    assert {c.arithmetic for c in loc.checked} == {"float64"}
    assert not any(c.wrong for c in loc.checked)


# ---------------------------------------------------------------- NumPy


def _numpy_layer(scale):
    W = np.random.default_rng(0).standard_normal((3, 4))

    def layer(x):
        return np.tanh(x @ W)

    def layer_vjp(g, x):
        return (g * (1 - np.tanh(x @ W) ** 2)) @ W.T * scale

    return layer, layer_vjp, np.random.default_rng(1).standard_normal((2, 3))


def test_numpy_supplied_rule_is_the_node():
    layer, layer_vjp, x = _numpy_layer(1 + 1e-3)
    report = pg.check(layer, x, vjp=layer_vjp, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    c = report.localization.located
    assert c is not None and c.site.op == "the supplied vjp= rule"
    assert f"test_localize.py:{_line_of(layer_vjp, 'def layer_vjp')}" in c.site.source
    assert c.relative == pytest.approx(1e-3, rel=1e-6)  # the planted factor, closed form


def test_numpy_correct_rule_flags_nothing():
    layer, layer_vjp, x = _numpy_layer(1.0)
    report = pg.check(layer, x, vjp=layer_vjp)
    assert report.ok
    loc = locate(CheckedCall(layer, (x,), (0,), "numpy", report.checked_call.supplied), report)
    assert loc.located is None


# ---------------------------------------------------------------- limits and notes


def test_localize_is_a_note_when_it_cannot_run():
    layer, layer_vjp, x = _numpy_layer(1.0)
    report = pg.check(layer, x, vjp=layer_vjp)
    loc = report.localize()
    assert loc.located is None and "not run" in loc.notes[0] and "PASS" in loc.notes[0]
    report.verdict = pg.Verdict.MISMATCH
    report.checked_call = None
    assert "does not hold the checked call" in report.localize().notes[0]
    report.checked_call = CheckedCall(layer, (x,), (0,), "elsewhere")
    assert "cannot be captured" in report.localize().notes[0]


def test_a_recording_that_fails_is_a_note():
    import torch

    x = torch.ones(3)
    report = pg.check(lambda x: (x * x).sum(), x)

    def broken(x):
        raise RuntimeError("boom")

    loc = locate(CheckedCall(broken, (x,), (0,), "torch"), report)
    assert loc.located is None and "unavailable: RuntimeError: boom" in loc.notes[0]


def test_budget_cuts_the_walk_short_with_a_note():
    import torch

    model, _ = _torch_model(None)
    x = torch.randn(3, 4)
    f = lambda x: model(x).sum()  # noqa: E731
    report = pg.check(f, x)
    loc = locate(CheckedCall(f, (x,), (0,), "torch"), report, budget=0.0)
    # the custom rule is checked whatever the budget, the primitives are not
    assert [c.site.kind for c in loc.checked] == ["custom rule"]
    assert any("cut short" in n for n in loc.notes)
    loc = locate(CheckedCall(f, (x,), (0,), "torch"), report, max_size=10)
    assert any("more than 10 input entries not checked" in n for n in loc.notes)
    assert all(c.site.op == "torch.Tensor.sum" or c.site.path.startswith("model.1")
               or "tanh" in c.site.op for c in loc.checked)  # fmt: skip


def test_a_custom_rule_is_located_with_no_budget_left():
    """A first localization in a process can spend a short budget compiling: the first
    custom rule regions are checked whatever the budget."""
    import torch

    model, _ = _torch_model("scaled")
    x = torch.randn(3, 4)
    f = lambda x: model(x).sum()  # noqa: E731
    report = pg.check(f, x, localize=False)
    loc = locate(CheckedCall(f, (x,), (0,), "torch"), report, budget=0.0)
    assert loc.located is not None and loc.located.site.op == "torch.autograd.Function LinearFn"


# ---------------------------------------------------------------- the report's JSON


def test_to_dict_holds_the_localization_and_round_trips_through_json():
    import json

    import torch

    model, forward = _torch_model("scaled")
    x = torch.randn(3, 4, dtype=torch.float32)
    report = pg.check(lambda x: model(x).sum(), x, localize=False)
    assert "localization" not in report.to_dict()  # not computed yet
    report.localize()
    d = report.to_dict()
    assert json.loads(report.to_json()) == d == json.loads(json.dumps(d))
    loc = d["localization"]
    assert loc["searched"] == "wrong rule" and loc["checked"] == 1
    node = loc["located"]
    assert node["op"] == "torch.autograd.Function LinearFn" and node["kind"] == "custom rule"
    assert node["path"] == "model.4 (MyLinear)"
    assert f"test_localize.py:{_line_of(forward, 'LinearFn.apply')} in forward" in node["source"]
    assert node["wrong"] is True and node["error"] > 1e3 * node["tolerance"] > 0
    c = report.localization.located
    assert (node["autodiff"], node["reference"], node["arithmetic"]) == (
        c.autodiff, c.reference, "float64")  # fmt: skip
    assert "nonfinite" not in node
    assert loc["by_default"] is None  # asked for
    assert pg.check(lambda x: model(x).sum(), x).to_dict()["localization"]["by_default"] > 0


def test_to_dict_of_a_nonfinite_localization_and_of_none_found():
    import json

    import torch

    def f(x):
        return torch.where(x > 0, torch.sqrt(x), 0.0).sum()

    report = pg.check(f, torch.tensor([1.0, -2.0, 4.0]))
    report.localize()
    d = json.loads(report.to_json())
    node = d["localization"]["located"]
    assert d["localization"]["searched"] == "non-finite VJP"
    assert node["op"] == "torch.sqrt" and node["error"] == "inf" and node["reference"] is None
    assert node["nonfinite"] == "input[1] = -2: NaN" and node["feeds"]["op"] == "torch.where"
    assert f"test_localize.py:{_line_of(f, 'torch.sqrt')}" in node["feeds"]["source"]
    assert "double where" in node["hint"]
    layer, layer_vjp, x = _numpy_layer(1.0)
    passed = pg.check(layer, x, vjp=layer_vjp)
    passed.localize()
    none = json.loads(passed.to_json())["localization"]
    assert none["located"] is None and none["checked"] == 0
    assert none["notes"][0].startswith("not run: the check's verdict is PASS")


# ---------------------------------------------------------------- the node check itself


def _cancelling(seed):
    """Entries of mixed sign whose sum is near 0, of random size."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 5)) * 10.0 ** rng.uniform(-3, 3)
    return x - x.mean()


@pytest.mark.parametrize("seed", [1, 4, 5, 8, 11, 14])
def test_a_sum_whose_terms_cancel_is_not_flagged(seed):
    """The differences of a sum round like its terms, not like its small result: the
    rounding of the moved inputs is in the error bar (it was not, and the sum's node was
    flagged in 25 of 40 such programs in PyTorch and in JAX)."""
    import jax
    import torch

    x = _cancelling(seed)
    for backend, f, a in (
        ("torch", lambda x: (torch.sin(x) * 0 + x).sum(), torch.tensor(x)),
        ("jax", lambda x: jax.numpy.sum(jax.numpy.sin(x) * 0 + x), jax.numpy.asarray(x)),
    ):
        report = pg.check(f, a)
        loc = locate(CheckedCall(f, (a,), (0,), backend), report)
        sums = [c for c in loc.checked if "sum" in c.site.op]
        assert len(sums) == 1 and loc.located is None, (backend, sums)


def test_a_count_beside_large_values_is_moved_by_its_own_size():
    """``jnp.var`` divides a sum of squares near 1e6 by the count 5 (a floating input of
    the div): each input is moved relative to its own size, not the count by a step
    sized for the sum."""
    import jax

    jnp = jax.numpy
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 5)) * 1e3, jnp.float32)

    def f(x):
        return jnp.sum(jnp.sqrt(x.var(1)))

    report = pg.check(f, x)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loc = locate(report.checked_call, report)
    divs = [c for c in loc.checked if c.site.op.startswith("div")]
    assert divs and loc.located is None
    assert all(c.error < c.tolerance for c in divs)
    # a float64 value of the float64 trace is not run in float32 mode (JAX warned, and
    # truncated it, beside a report that says float64)
    assert not [w for w in seen if "requested in asarray is not available" in str(w.message)]


def test_a_stop_gradient_is_not_blamed_before_the_wrong_op():
    """logsumexp shifts by a stop_gradient of the max (a zero rule by declaration); the
    walk passes it by, with a note, and names the primitive whose rule is wrong."""
    import jax

    jnp = jax.numpy
    from jax.scipy.special import digamma

    def f(x):
        return jax.nn.logsumexp(x) + jnp.sum(digamma(2.0 * x - 11.0))

    x = jnp.asarray([0.35, 0.6, 0.85], jnp.float32)
    report = pg.check(f, x, localize=True)
    c = report.localization.located
    assert c is not None and c.site.op == "digamma"
    assert "stop_gradient" not in [k.site.op for k in report.localization.checked]
    # digamma explains the whole error: the stop_gradient is no suspect, and not named
    loc = report.localization
    assert loc.share is not None and abs(loc.share.fraction - 1) < 0.1
    assert not any("stop_gradient node(s) not checked" in n for n in loc.notes)

    def g(x):
        return jax.nn.logsumexp(x) + jnp.sum(x**2)

    # where no wrong rule is found, it is named (it may be what drops a derivative)
    loc = locate(CheckedCall(g, (x,), (0,), "jax"), pg.check(g, x))
    line = _line_of(g, "jax.nn.logsumexp")
    assert loc.located is None
    assert any(n.startswith("1 stop_gradient node(s) not checked") and
               f"test_localize.py:{line}" in n for n in loc.notes)  # fmt: skip


def test_tf_every_op_of_a_keras_conv_model_is_checked_and_none_is_flagged():
    """Keras's Conv1D runs Conv2D with an attribute recorded as None (use_cudnn_on_gpu),
    which re-executes with its registered default; every op runs in float64 alone."""
    import keras
    import tensorflow as tf

    layers = keras.layers
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 2)), layers.Conv1D(3, 3, activation="relu"),
                              layers.GlobalAveragePooling1D(), layers.Dense(2)])  # fmt: skip
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 8, 2)), tf.float32)
    f = lambda x: tf.reduce_sum(model(x) ** 2)  # noqa: E731
    report = pg.check(f, x)
    assert report.ok
    loc = locate(CheckedCall(f, (x,), (0,), "tensorflow"), report)
    assert loc.located is None and loc.notes == ()
    ops = [c.site.op for c in loc.checked]
    assert ops[:5] == ["ExpandDims", "Conv2D", "Squeeze", "BiasAdd", "Relu"]
    assert {c.arithmetic for c in loc.checked} == {"float64"}
    assert not any(c.wrong for c in loc.checked)


# ---------------------------------------------------------------- by default


def _planted(framework):
    """The four planted models above, each with its wrong custom rule, as ``(f, x)``."""
    if framework == "torch":
        import torch

        model, _ = _torch_model("scaled")
        return (lambda x: model(x).sum()), torch.randn(3, 4, dtype=torch.float32)
    if framework == "jax":
        f, x, _ = _flax_model(1 + 1e-3)
        return f, x
    if framework == "tensorflow":
        f, x, _ = _keras_model(1 + 1e-3)
        return f, x
    layer, layer_vjp, x = _numpy_layer(1 + 1e-3)
    return (lambda v: pg.check(layer, v, vjp=layer_vjp, localize=None)), x


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow", "numpy"])
def test_a_failing_check_is_localized_by_default_within_its_own_time(framework):
    """Without ``localize=``, a MISMATCH names the wrong custom rule first, within a budget
    of the check's own time (at least the policy's floor); ``localize=False`` runs
    nothing; a budget too short for the walk is a line at the end, not a verdict. NumPy
    has no program to walk: nothing runs by default there."""
    f, x = _planted(framework)
    report = f(x) if framework == "numpy" else pg.check(f, x)
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    if framework == "numpy":  # no program: the node would be the rule the check judged
        assert loc is None and report.localize().located is not None
        return
    assert loc is not None and loc.located is not None and loc.located.wrong, str(report)
    budget = max(DEFAULT_POLICY.localize_floor_seconds, report.details.seconds)
    assert loc.by_default == pytest.approx(budget)
    assert str(report).splitlines()[1].startswith("Localized: the first node")
    assert pg.check(f, x, localize=False).localization is None
    tight = dataclasses.replace(DEFAULT_POLICY, localize_share=1e-9,
                                localize_floor_seconds=1e-9)  # fmt: skip
    # the first custom rules are checked whatever the budget: the planted one is found
    tight_loc = pg.check(f, x, policy=tight).localization
    assert tight_loc is not None and tight_loc.located is not None
    assert tight_loc.located.site.kind == "custom rule"


def test_a_walk_cut_short_by_default_is_a_line_at_the_end():
    """A budget too short for the primitives (no custom rule here: a hook scales the
    gradient) is a line at the end of the report, not a verdict."""
    import torch

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3).double()

    def f(x):
        h = lin(x)
        h.register_hook(lambda g: g * 1.001)
        return torch.tanh(h).sum()

    x = torch.randn(2, 4, dtype=torch.float64)
    tight = dataclasses.replace(DEFAULT_POLICY, localize_share=1e-9,
                                localize_floor_seconds=1e-9)  # fmt: skip
    report = pg.check(f, x, policy=tight)
    assert report.verdict is pg.Verdict.MISMATCH
    cut = report.localization
    assert cut is not None and cut.located is None and not cut.shown_first
    text = str(report)
    at = text.index("localization (run by default")
    assert at > text.index("worst entries:") and "cut short" in text[at:], text
    assert "Localized:" not in text, text


def test_a_passing_check_is_not_localized_by_default():
    import torch

    model, _ = _torch_model(None)
    report = pg.check(lambda x: model(x).sum(), torch.randn(3, 4, dtype=torch.float32))
    assert report.ok and report.localization is None


def _cube_after_relu(framework):
    """``sum(cube(relu(x) + 0.1))`` with a right ReLU rule (a custom one, as users and
    ``jax.nn.relu`` write it) and a cube rule 1% too large, at inputs with exact zeros."""
    x = np.array([0.0, 0.5, -0.7, 1.3, 0.0, 2.0])
    if framework == "torch":
        import torch

        class MyReLU(torch.autograd.Function):
            @staticmethod
            def forward(ctx, v):
                ctx.save_for_backward(v)
                return v.clamp(min=0)

            @staticmethod
            def backward(ctx, g):
                (v,) = ctx.saved_tensors
                return g * (v > 0)

        class Cube(torch.autograd.Function):
            @staticmethod
            def forward(ctx, v):
                ctx.save_for_backward(v)
                return v**3

            @staticmethod
            def backward(ctx, g):
                (v,) = ctx.saved_tensors
                return g * 3 * v**2 * 1.01

        return (lambda v: Cube.apply(MyReLU.apply(v) + 0.1).sum()), torch.tensor(x), "Cube"
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def cube(v):
        return v**3

    cube.defvjp(lambda v: (v**3, v), lambda v, g: (g * 3 * v**2 * 1.01,))
    return (lambda v: jnp.sum(cube(jax.nn.relu(v) + 0.1))), jnp.asarray(x), "cube"


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_right_rule_at_its_kink_is_not_blamed_before_the_wrong_one(framework):
    """A ReLU's rule at an input exactly 0 (its own kink) against central differences,
    which read the mean of its sides (1/2), looked wrong, and the walk stopped there; the
    ReLU is now noted as at its kink, not judged, and the cube after it is named."""
    f, x, name = _cube_after_relu(framework)
    report = pg.check(f, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    assert loc.located is not None and loc.located.site.op.endswith(name), str(loc)
    assert loc.located.relative == pytest.approx(1e-2, rel=1e-3)
    kinked = [c for c in loc.checked if c.at_kink]
    assert len(kinked) == 1 and not kinked[0].wrong and kinked[0].to_dict()["at_kink"]
    assert "1 at a kink of their own" in str(loc)


def test_torch_detach_and_item_are_named_as_the_jax_and_tf_stop_gradient_is():
    """``x * x.detach()`` drops half the derivative, with no node whose rule is wrong: the
    walk names the detach (and an ``.item()``) with its line, as it names a
    ``stop_gradient`` in JAX and TensorFlow."""
    import torch

    x = torch.tensor([0.3, -1.2, 0.7, 2.1], dtype=torch.float64)
    f = lambda v: (v * v.detach()).sum() * v.sum().item()  # noqa: E731
    report = pg.check(f, x, localize=True)
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    assert loc.located is None
    line = inspect.currentframe().f_lineno - 5
    for op in ("torch.Tensor.detach", "torch.Tensor.item"):
        note = next(n for n in loc.notes if n.startswith(f"1 call(s) of {op}"))
        assert f"test_localize.py:{line}" in note, note
    plain = pg.check(lambda v: (v * v).sum(), x * 1.0)
    assert plain.ok and plain.localization is None


@pytest.mark.polygrad_backends("torch")
def test_a_gradient_hook_is_checked_with_the_rule_and_named_by_the_walk():
    """``Tensor.register_hook`` on an intermediate: polygrad evaluates ``f`` without
    gradients too (its values, the mutation check), where PyTorch refuses to register a
    hook; it used to raise that error. The hook acts in the backward pass only: an
    identity hook is PASS, one that scales the gradient by 1.01 is MISMATCH (as far off as
    the hook makes it), and the walk names the hook's line."""
    import torch

    x = torch.tensor([0.3, -1.2, 0.7, 2.1], dtype=torch.float64)

    def f(v, scale):
        y = torch.tanh(v)
        y.register_hook(lambda g: g * scale)
        return (y * y).sum()

    right = pg.check(lambda v: f(v, 1.0), x)
    assert right.verdict is pg.Verdict.PASS and right.ok, str(right)
    t = np.tanh(x.numpy())
    np.testing.assert_allclose(right.entries.reference, 2 * t * (1 - t * t), rtol=1e-12)
    wrong = pg.check(lambda v: f(v, 1.01), x)
    assert wrong.verdict is pg.Verdict.MISMATCH and not wrong.ok, str(wrong)
    np.testing.assert_allclose(wrong.entries.autodiff, 1.01 * wrong.entries.reference, rtol=1e-12)
    line = f.__code__.co_firstlineno + 2
    note = next(n for n in wrong.localization.notes if "torch.Tensor.register_hook" in n)
    assert f"test_localize.py:{line}" in note, note


@pytest.mark.polygrad_backends("torch")
def test_a_custom_function_is_named_without_a_detach_the_user_never_wrote():
    """The walk copies a custom ``Function``'s inputs (a detach) while it records: that
    detach is polygrad's, and the localization used to name it at the user's line as a
    possible bug."""
    import torch

    planted = torch_planted_tanh(0.2)
    report = pg.check(lambda v: planted.apply(v).sum(), torch.tensor([0.3, -1.2, 0.8]))
    assert report.verdict is pg.Verdict.MISMATCH
    loc = report.localization
    assert loc.located is not None
    assert loc.located.site.op == "torch.autograd.Function PlantedTanh"
    assert not any("detach" in n for n in loc.notes), loc.notes


def test_a_second_order_check_is_not_localized_on_first_order_rules():
    """order=2 with a backward that is not itself differentiable (a detach inside it):
    MISMATCH, and the walk, which checks first-order rules, says that it cannot see this
    instead of finding no wrong node; nothing runs by default."""
    import torch

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, v):
            ctx.save_for_backward(v)
            return torch.sin(v)

        @staticmethod
        def backward(ctx, g):
            (v,) = ctx.saved_tensors
            return g * torch.cos(v.detach())

    x = torch.tensor([0.3, -1.2, 0.7, 2.1], dtype=torch.float64)
    report = pg.check(lambda v: (Sin.apply(v) ** 2).sum(), x, order=2)
    assert report.verdict is pg.Verdict.MISMATCH and report.localization is None
    loc = report.localize()
    assert loc.located is None and loc.notes[0].startswith("not run: order=2"), loc.notes


def test_jax_a_scope_under_vmap_is_named_without_the_transformation():
    """The name stack of an equation under ``jax.vmap`` is ``vmap(blk)``: the path is the
    scope, ``blk``."""
    import jax

    jnp = jax.numpy

    @jax.custom_vjp
    def mm(x, w):
        return x @ w

    mm.defvjp(lambda x, w: (x @ w, (x, w)),
              lambda r, g: (g @ r[1].T * 1.001, jnp.outer(r[0], g)))  # fmt: skip
    w = jnp.asarray(np.random.default_rng(0).standard_normal((3, 2)), jnp.float32)

    def block(row):
        with jax.named_scope("blk"):
            return jnp.tanh(mm(row, w))

    x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 3)), jnp.float32)
    report = pg.check(lambda x: jax.vmap(block)(x).sum(), x, localize=True)
    site = report.localization.located.site
    assert site.op.endswith(".mm") and site.path == "blk"


def test_jax_a_custom_rule_inside_a_rematerialized_block_is_located():
    """``nn.remat`` (``jax.checkpoint``) wraps its block in a ``remat`` equation: the walk
    enters it and names the custom rule inside, not the ``remat`` as a primitive."""
    import flax.linen as nn
    import jax

    jnp = jax.numpy

    @jax.custom_vjp
    def act(h):
        return jnp.tanh(h)

    def bwd(y, g):
        return (g * (1 - y * y) * 1.001,)

    act.defvjp(lambda h: (jnp.tanh(h), jnp.tanh(h)), bwd)

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + act(nn.Dense(x.shape[-1])(x))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(nn.remat(Block)()(nn.Dense(6)(x)))

    m = Net()
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 4)), jnp.float32)
    params = m.init(jax.random.key(0), x)
    loc = pg.check(lambda x: jnp.sum(m.apply(params, x) ** 2), x, localize=True).localization
    c = loc.located
    assert c is not None and c.site.kind == "custom rule" and c.site.op.endswith("act")
    assert c.site.path == "Net/CheckpointBlock_0"
    assert loc.share is not None and abs(loc.share.fraction - 1) < 0.05
