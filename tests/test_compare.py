"""Tests of polygrad.compare: one function in several frameworks against one reference."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
import torch

import polygrad as pg
from polygrad.compare import ComparisonEntry
from polygrad.errors import InputTypeError, ShapeMismatchError

ROOT = Path(__file__).resolve().parent.parent


# ---- a numerically stable softplus, log(1 + exp(x)) = log1p(exp(-|x|)) + max(x, 0) ----------
@tf.custom_gradient
def softplus_tf_wrong(x):
    """The rule is wrong on the negative branch: exp(x) instead of sigmoid(x)."""
    y = tf.math.log1p(tf.exp(-tf.abs(x))) + tf.maximum(x, tf.zeros_like(x))

    def grad(g):
        return g * tf.where(x >= 0, tf.sigmoid(x), tf.exp(x))

    return y, grad


@jax.custom_jvp
def softplus_jax(x):
    return jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(x, 0.0)


@softplus_jax.defjvp
def _softplus_jax_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return softplus_jax(x), jax.nn.sigmoid(x) * dx


X = np.array([-1.5, -0.3, 0.7, 2.0])


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_wrong_custom_gradient_in_tf_against_correct_jax(dtype):
    c = pg.compare({"tf": softplus_tf_wrong, "jax": softplus_jax}, X, dtype=dtype)
    assert c.verdicts() == {"tf": pg.Verdict.MISMATCH, "jax": pg.Verdict.PASS}
    assert not c.ok
    tf_e, jax_e = c["tf"], c["jax"]
    assert tf_e.forward == jax_e.forward == pg.Verdict.PASS  # the function values agree
    assert tf_e.working_dtype == jax_e.working_dtype == dtype
    # the wrong entries are exactly the negative inputs, off by exp(x) - sigmoid(x)
    e = tf_e.report.entries
    bad = [n for n, v in zip(e.names, e.verdicts(), strict=True) if v == pg.Verdict.MISMATCH]
    assert bad == ["f[0] / x[0]", "f[1] / x[1]"]  # the other 14 entries pass
    expected = np.max(np.exp(X[:2]) - sigmoid(X[:2]))
    assert tf_e.max_error == pytest.approx(expected, rel=1e-5)
    assert jax_e.max_error < 64 * np.finfo(dtype).eps
    x_w = X.astype(dtype).astype(np.float64)  # the point, rounded to the working dtype
    expected_jac = np.diag(sigmoid(x_w)).ravel()
    ref = jax_e.report.entries
    # the reference is chosen by check's rule: mp for float64 implementations; float64
    # differences aimed at float32's accuracy for float32 ones, whose error bars hold
    if dtype == "float64":
        np.testing.assert_allclose(ref.reference, expected_jac, rtol=1e-12, atol=1e-15)
    else:
        assert np.all(np.abs(ref.reference - expected_jac) <= ref.reference_error)
    text = str(c)
    assert re.search(r"^\s+tf\s+tensorflow .*MISMATCH", text, re.M)
    assert re.search(r"^\s+jax\s+jax .*PASS", text, re.M)


def test_xlogy_at_zero_across_frameworks():
    """d/dx xlogy(x, 2) = log 2 everywhere; TensorFlow's rule returns 0 at x = 0."""
    impls = {
        "tf": lambda x, y: tf.math.xlogy(x, y),
        "jax": lambda x, y: jax.scipy.special.xlogy(x, y),
        "torch": lambda x, y: torch.xlogy(x, y),
    }
    c = pg.compare(impls, np.array(0.0), np.array(2.0))
    assert c.verdicts() == {
        "tf": pg.Verdict.MISMATCH,
        "jax": pg.Verdict.PASS,
        "torch": pg.Verdict.PASS,
    }
    assert c["tf"].report.entries.autodiff[0] == 0.0
    assert c["tf"].max_error == pytest.approx(math.log(2), rel=1e-12)
    for name in ("jax", "torch"):
        assert c[name].report.entries.autodiff[0] == pytest.approx(math.log(2), rel=1e-15)
    assert all(e.forward == pg.Verdict.PASS for e in c.entries.values())
    ref = c["jax"].report.entries
    assert ref.reference[0] == pytest.approx(math.log(2), rel=1e-14)
    assert ref.reference_error[0] < 1e-14


@pytest.mark.parametrize("x", [0.0, np.zeros(3)])
def test_maximum_and_relu_at_zero_are_nonsmooth_and_within(x):
    impls = {
        "torch-maximum": lambda x: torch.maximum(x, torch.zeros_like(x)),
        "tf-maximum": lambda x: tf.maximum(x, tf.zeros_like(x)),
        "jax-maximum": lambda x: jnp.maximum(x, 0.0),
        "torch-relu": torch.relu,
        "tf-relu": tf.nn.relu,
        "jax-relu": jax.nn.relu,
    }
    c = pg.compare(impls, np.asarray(x))
    assert set(c.verdicts().values()) == {pg.Verdict.NONSMOOTH}
    assert c.ok  # nonsmooth="allow"
    expected = {
        "torch-maximum": 0.5,
        "tf-maximum": 1.0,
        "jax-maximum": 0.5,
        "torch-relu": 0.0,
        "tf-relu": 0.0,
        "jax-relu": 0.0,
    }
    size = np.asarray(x).size
    for name, value in expected.items():
        kinks = c[name].kinks
        assert len(kinks) == size  # the diagonal entries; off-diagonal ones are smooth zeros
        for k in kinks:
            assert k["autodiff"] == value
            assert k["left"] == pytest.approx(0.0, abs=1e-12)
            assert k["right"] == pytest.approx(1.0, rel=1e-12)
            assert k["within"]
    text = str(c)
    assert re.search(r"tf-maximum: .*: autodiff 1, left 0, right 1 -> within", text)
    strict = pg.compare(impls, np.asarray(x), nonsmooth="fail")
    assert not strict.ok


def test_forward_mismatch_is_reported_as_forward():
    """An implementation of a different function is a forward mismatch, and the reference
    comes from the implementations that agree."""
    x = np.array([0.3, -1.2, 2.0])
    impls = {
        "torch": lambda x: torch.sum(torch.tanh(x) ** 2),
        "jax-typo": lambda x: jnp.sum(jnp.tanh(x) ** 3),
        "tf": lambda x: tf.reduce_sum(tf.tanh(x) ** 2),
    }
    c = pg.compare(impls, x)
    assert c["jax-typo"].forward == pg.Verdict.MISMATCH
    assert c["jax-typo"].verdict == pg.Verdict.MISMATCH
    assert not c["jax-typo"].ok
    assert c.reference["source"] in ("torch", "tf")
    for name in ("torch", "tf"):
        assert c[name].forward == pg.Verdict.PASS and c[name].verdict == pg.Verdict.PASS
    expected = abs(np.sum(np.tanh(x) ** 3) - np.sum(np.tanh(x) ** 2))
    assert c["jax-typo"].forward_error == pytest.approx(expected, rel=1e-9)
    assert "forward mismatch" in str(c)


def test_numpy_implementations_and_explicit_backend():
    x = np.array([0.5, 1.5])

    def f_np(x):
        return np.sum(np.sin(x) * x)

    def grad_np(x):
        return np.cos(x) * x + np.sin(x)

    def wrong_vjp(u, x):
        return u * np.cos(x) * x

    impls = {
        "numpy": (f_np, grad_np),
        "by-hand": {"f": f_np, "vjp": wrong_vjp},
        "mine": {"f": lambda x: jnp.sum(jnp.sin(x) * x), "backend": "jax"},
        "inferred": lambda x: torch.sum(torch.sin(x) * x),  # framework found by calling it
    }
    c = pg.compare(impls, x)
    assert c.verdicts() == {
        "numpy": pg.Verdict.PASS,
        "by-hand": pg.Verdict.MISMATCH,
        "mine": pg.Verdict.PASS,
        "inferred": pg.Verdict.PASS,
    }
    assert [e.backend for e in c.entries.values()] == ["numpy", "numpy", "jax", "torch"]
    assert c["by-hand"].max_error == pytest.approx(np.max(np.abs(np.sin(x))), rel=1e-9)


def test_framework_arrays_as_the_point_and_same_cotangents_in_projections():
    W = np.linspace(-1.0, 1.0, 60).reshape(3, 20)
    x = torch.linspace(-0.5, 0.5, 20, dtype=torch.float64)
    impls = {
        "torch": lambda x: torch.tanh(torch.as_tensor(W) @ x),
        "jax": lambda x: jnp.tanh(jnp.asarray(W) @ x),
        "jax-wrong": jax.custom_jvp(lambda x: jnp.tanh(jnp.asarray(W) @ x)),
    }
    impls["jax-wrong"].defjvp(
        lambda p, t: (
            jnp.tanh(jnp.asarray(W) @ p[0]),
            jnp.asarray(W) @ t[0],  # missing the 1 - tanh² factor
        )
    )
    c = pg.compare(impls, x, strategy="projections", projections=6)
    assert c.details["strategy"] == "projections"
    assert c.verdicts() == {
        "torch": pg.Verdict.PASS,
        "jax": pg.Verdict.PASS,
        "jax-wrong": pg.Verdict.MISMATCH,
    }
    # the same cotangents and directions for every implementation: equal projections
    a, b = c["torch"].report.entries, c["jax"].report.entries
    assert a.names == b.names and len(a.names) == 6
    np.testing.assert_allclose(a.autodiff, b.autodiff, rtol=1e-12)
    np.testing.assert_array_equal(a.reference, b.reference)


def test_to_dict_is_json_and_table_has_every_implementation():
    c = pg.compare({"tf": softplus_tf_wrong, "jax": softplus_jax}, X[:2], dtype="float32")
    d = json.loads(c.to_json())
    assert d["ok"] is False
    assert d["verdicts"] == {"tf": "MISMATCH", "jax": "PASS"}
    assert d["implementations"]["tf"]["report"]["verdict"] == "MISMATCH"
    assert d["implementations"]["jax"]["working_dtype"] == "float32"
    assert d["reference"]["source"] == c.reference["source"]
    assert d["reference"]["method"] in ("mp", "float64")
    assert isinstance(c["jax"], ComparisonEntry)
    header = str(c).splitlines()[3]
    for col in ("implementation", "forward", "verdict", "max |AD-ref|", "error bar"):
        assert col in header
    assert repr(c) == "<polygrad.Comparison ok=False (tf=MISMATCH, jax=PASS)>"


def test_errors_are_clear():
    x = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="at least one implementation"):
        pg.compare({}, x)
    with pytest.raises(ShapeMismatchError, match="differ in input/output sizes"):
        pg.compare({"jax": lambda x: x**2, "torch": lambda x: torch.sum(x**2)}, x)
    with pytest.raises(InputTypeError, match="cannot tell the framework"):
        pg.compare({"mystery": lambda x: 3.0}, x)
    with pytest.raises(TypeError, match="a tuple must be"):
        pg.compare({"numpy": (np.sin,)}, x)
    with pytest.raises(pg.InputTypeError, match="integer"):
        pg.compare({"jax": jnp.sin}, np.array([1, 2]))
    with pytest.raises(ValueError, match="real floating dtype"):
        pg.compare({"jax": jnp.sin}, x, dtype="complex64")
    with pytest.raises(ZeroDivisionError) as info:
        pg.compare({"jax": lambda x: 1 / 0}, x)
    assert "implementation 'jax'" in "".join(getattr(info.value, "__notes__", []))


def test_docs_examples_run():
    """Every python block of docs/compare.md runs, in order, in one namespace."""
    text = (ROOT / "docs" / "compare.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "docs/compare.md", "exec"), ns)  # noqa: S102


# ---- localization: the op of the failing implementation -----------------------------------
W_LOC = np.random.default_rng(3).standard_normal((3, 2))


class _LinearFn(torch.autograd.Function):
    """x @ W with a rule wrong by a factor 1 + 1e-3."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x @ w

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g @ w.T * (1 + 1e-3), None


def _torch_layer(x):
    return torch.tanh(_LinearFn.apply(x, torch.as_tensor(W_LOC, dtype=x.dtype))).sum()


def _jax_layer(x):
    return jnp.tanh(x @ jnp.asarray(W_LOC, x.dtype)).sum()


def _line_in(fn, text):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("order", [("torch", "jax"), ("jax", "torch")])
def test_compare_localize_names_the_op_of_the_failing_implementation(order):
    impls = {"torch": _torch_layer, "jax": _jax_layer}
    x = np.random.default_rng(4).standard_normal((2, 3))
    c = pg.compare({k: impls[k] for k in order}, x, localize=True)
    assert c.verdicts() == {"torch": pg.Verdict.MISMATCH, "jax": pg.Verdict.PASS}
    loc = c["torch"].report.localization
    node = loc.located
    assert node is not None and node.site.op == "torch.autograd.Function _LinearFn"
    assert f"test_compare.py:{_line_in(_torch_layer, '_LinearFn.apply')}" in node.site.source
    assert node.arithmetic == "float64" and node.error > 1e3 * node.tolerance
    assert node.relative == pytest.approx(1e-3, rel=0.2)  # the planted factor
    assert c["jax"].report.localization is None  # a passing implementation: nothing ran
    text = str(c).splitlines()
    at = text.index("  torch: Localized: the first node whose own rule is wrong")
    assert text[at + 1] == "    op:     torch.autograd.Function _LinearFn (custom rule)"
    assert not any(t.startswith("  jax: Localized") for t in text)
    d = c.to_dict()["implementations"]
    assert d["torch"]["report"]["localization"]["located"]["op"] == node.site.op
    assert "localization" not in d["jax"]["report"]


def test_compare_reports_keep_their_own_call_for_localize():
    x = np.random.default_rng(4).standard_normal((2, 3))
    c = pg.compare({"torch": _torch_layer, "jax": _jax_layer}, x, localize=False)
    assert str(c).count("Localized") == 0  # localize=False: nothing ran
    by_default = pg.compare({"torch": _torch_layer, "jax": _jax_layer}, x)
    assert str(by_default).count("Localized: the first node") == 1  # the failing one
    assert by_default["jax"].report.localization is None
    torch_r, jax_r = c["torch"].report, c["jax"].report
    assert (torch_r.checked_call.backend, jax_r.checked_call.backend) == ("torch", "jax")
    assert torch_r.checked_call.f is _torch_layer and jax_r.checked_call.f is _jax_layer
    found = torch_r.localize().located
    assert found is not None and found.site.op == "torch.autograd.Function _LinearFn"
    assert "not run: the check's verdict is PASS" in jax_r.localize().notes[0]
    # the passing implementation's program, walked anyway: no node of it is wrong
    from polygrad.localize import locate

    walk = locate(jax_r.checked_call, jax_r)
    assert walk.located is None and [k.site.op for k in walk.checked] == [
        "dot_general", "tanh", "reduce_sum"]  # fmt: skip
    assert not any(k.wrong for k in walk.checked)


def test_a_python_number_that_is_not_checked_reaches_each_implementation_as_written():
    """``x / t`` with ``t = 3``: compare used to hand each implementation ``t`` as an int
    tensor, and TensorFlow refused ``float64 / int64``. Each gets the Python ``3`` its code
    is written for (as ``pg.check`` gives it), and every right gradient is PASS, its
    reference the closed form ``softmax(x / t)``."""
    x = np.array([0.1, -0.7, 1.3, 0.4])
    c = pg.compare(
        {
            "torch": lambda v, t: torch.logsumexp(v / t, 0) * t,
            "jax": lambda v, t: jax.scipy.special.logsumexp(v / t) * t,
            "tf": lambda v, t: tf.reduce_logsumexp(v / t) * t,
        },
        x,
        3,
    )
    softmax = np.exp(x / 3) / np.sum(np.exp(x / 3))
    for name in ("torch", "jax", "tf"):
        report = c[name].report
        assert report.verdict is pg.Verdict.PASS and report.ok, (name, str(report))
        np.testing.assert_allclose(report.entries.reference, softmax, rtol=1e-12)


def test_a_dict_argument_lines_up_across_frameworks_whatever_its_key_order():
    """``{"w": ..., "b": ...}``: JAX flattens a dict in sorted key order, polygrad's own
    pytrees (PyTorch, TensorFlow, NumPy) used the insertion order, and compare set the
    reference of ``w[0]`` against JAX's ``b`` (a right JAX gradient was MISMATCH). Every
    framework now lines a dict's leaves up in sorted key order: each implementation is
    PASS, each entry's reference the closed form of its own name."""
    p = {"w": np.array([0.3, -0.2]), "b": np.array(0.5)}
    x = np.array([1.0, 2.0])

    def np_grad(q, v):
        t = np.tanh(q["w"] @ v + q["b"])
        return {"w": 2 * t * (1 - t * t) * v, "b": 2 * t * (1 - t * t)}

    c = pg.compare(
        {
            "torch": lambda q, v: torch.tanh(q["w"] @ v + q["b"]) ** 2,
            "jax": lambda q, v: jnp.tanh(q["w"] @ v + q["b"]) ** 2,
            "tf": lambda q, v: tf.tanh(tf.reduce_sum(q["w"] * v) + q["b"]) ** 2,
            "numpy": (lambda q, v: np.tanh(q["w"] @ v + q["b"]) ** 2, np_grad),
        },
        p,
        x,
    )
    d = 2 * np.tanh(0.4) * (1 - np.tanh(0.4) ** 2)
    closed = {"q['b']": d, "q['w'][0]": d * 1.0, "q['w'][1]": d * 2.0}
    for name in ("torch", "jax", "tf", "numpy"):
        report = c[name].report
        assert report.verdict is pg.Verdict.PASS and report.ok, (name, str(report))
        expected = [closed[n] for n in report.entries.names]
        np.testing.assert_allclose(report.entries.reference, expected, rtol=1e-12)
