"""The capture cache: a second check of the same function pays no tracing, and a capture is
never reused once anything it froze has changed (weights updated in place, a closure cell
rebound, other shapes)."""

from __future__ import annotations

import numpy as np
import pytest

import polygrad as pg
from polygrad.backends._capture_cache import CAPTURES, CaptureCache, state_signature


def builds(kind: str) -> int:
    return CAPTURES.builds.get(kind, 0)


def assert_right(report: pg.Report, grad: np.ndarray) -> None:
    """PASS, ok, and both sides equal to the hand-written gradient."""
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    np.testing.assert_allclose(report.entries.reference, grad, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(report.entries.autodiff, grad, rtol=1e-9, atol=1e-12)


# -- the signature ------------------------------------------------------------------------------
def test_signature_follows_in_place_changes_of_what_a_closure_reads():
    w = np.array([1.0, 2.0])
    scale = {"s": 3.0}

    def f(x):
        return np.sum(w * x) * scale["s"]

    first, _ = state_signature(f)
    assert state_signature(f)[0] == first
    w[0] = 5.0
    second, _ = state_signature(f)
    assert second != first
    scale["s"] = 4.0
    assert state_signature(f)[0] != second


def test_signature_follows_tensors_a_tf_module_keeps_privately_and_torch_data_swaps():
    import tensorflow as tf
    import torch

    class Scaled(tf.Module):  # keeps its tensor as _scale, as tfp distributions do
        def __init__(self) -> None:
            super().__init__()
            self._scale = tf.constant(2.0)

    m = Scaled()
    p = torch.nn.Parameter(torch.ones(2))
    f = lambda x: m._scale * x * float(p.sum())  # noqa: E731
    first, _ = state_signature(f)
    m._scale = tf.constant(3.0)
    second, _ = state_signature(f)
    assert second != first
    p.data = torch.zeros(2)  # swaps the storage without an in-place operation
    assert state_signature(f)[0] != second


def test_an_unchanged_entry_is_reused_and_a_changed_one_rebuilt():
    cache = CaptureCache(maxsize=2)
    w = np.ones(3)
    f = lambda x: w * x  # noqa: E731
    made = []

    def build():
        made.append(1)
        return len(made)

    assert cache.get("k", ("shape",), (f,), build) == 1
    assert cache.get("k", ("shape",), (f,), build) == 1
    assert cache.get("k", ("other shape",), (f,), build) == 2
    w += 1.0  # in place: the frozen value changed
    assert cache.get("k", ("shape",), (f,), build) == 3
    assert cache.builds == {"k": 3}


def test_new_function_objects_over_equal_values_share_one_entry():
    """A parametrization's new lambda over new, equal arrays finds the first's capture;
    over other values it does not."""
    cache = CaptureCache()
    made = []

    def build():
        made.append(1)
        return len(made)

    def make(w):
        return lambda x: w * x

    assert cache.get("k", ("shape",), (make(np.array([1.0, 2.0])),), build) == 1
    assert cache.get("k", ("shape",), (make(np.array([1.0, 2.0])),), build) == 1
    assert cache.get("k", ("shape",), (make(np.array([1.0, 3.0])),), build) == 2
    assert cache.builds == {"k": 2}


def test_a_shared_entry_is_not_served_once_its_own_function_changed():
    """The entry was built from ``first``; ``second`` looks the same. Once ``first``'s
    array is changed in place, the entry (which may call ``first``) is not served to
    ``second`` but rebuilt."""
    cache = CaptureCache()
    w1, w2 = np.array([1.0, 2.0]), np.array([1.0, 2.0])

    def make(w):
        return lambda x: w * x

    first, second = make(w1), make(w2)
    made = []

    def build():
        made.append(1)
        return len(made)

    assert cache.get("k", (), (first,), build) == 1
    assert cache.get("k", (), (second,), build) == 1
    w1 += 1.0
    assert cache.get("k", (), (second,), build) == 2
    assert cache.get("k", (), (first,), build) == 3
    assert cache.get("k", (), (second,), build) == 2


def test_the_cache_is_bounded():
    cache = CaptureCache(maxsize=2)
    fs = [lambda x, i=i: x + i for i in range(4)]
    for g in fs:
        cache.get("k", (), (g,), lambda: None)
    assert len(cache._entries) == 2


def test_a_module_of_twenty_functions_finds_each_ones_captures_on_its_next_point():
    # a parametrized test module cycles through its functions (op 0, 1, ..., 19, then
    # op 0 at its next point): each check asks for about seven kinds of capture
    cache = CaptureCache()
    fs = [lambda x, i=i: x * i for i in range(20)]
    kinds = [f"kind{k}" for k in range(7)]
    for _ in range(2):
        for g in fs:
            for kind in kinds:
                cache.get(kind, (), (g,), lambda: None)
    assert sum(cache.builds.values()) == len(fs) * len(kinds)  # none built twice


def test_the_cache_is_bounded_by_the_bytes_of_the_arrays_it_keeps_alive():
    cache = CaptureCache(maxsize=100, max_bytes=3 * 8000)
    arrays = [np.full(1000, float(i)) for i in range(5)]  # 8000 bytes each
    own = [lambda x, a=a: x + a for a in arrays]
    for g in own:
        cache.get("k", (), (g,), lambda: None)
    assert len(cache._entries) == 3 and cache.kept_bytes() == 3 * 8000
    shared = np.zeros(1000)
    for i in range(5):  # one array kept by five entries counts once
        cache.get("s", (), (lambda x, a=shared, i=i: x + a + i,), lambda: None)
    assert sum(key[0] == "s" for key in cache._entries) == 5
    big = CaptureCache(maxsize=100, max_bytes=10)
    big.get("k", (), (own[0],), lambda: None)  # the newest entry stays, whatever its size
    assert len(big._entries) == 1


# -- PyTorch ------------------------------------------------------------------------------------
def test_torch_second_check_reuses_the_captured_graph():
    import torch

    w = torch.tensor([0.5, 1.5, -1.0], dtype=torch.float64)

    def f(x):
        return (w * torch.sin(x)).sum()

    x = torch.tensor([0.1, -0.7, 1.2], dtype=torch.float64)
    before = builds("torch.mp")
    for point in (x, x + 0.25):
        report = pg.check(f, point)
        assert_right(report, (w * torch.cos(point)).numpy())
    assert builds("torch.mp") == before + 1


def test_torch_model_updated_in_place_is_captured_again():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    x = torch.tensor([0.3, -0.2, 0.9], dtype=torch.float64)

    def loss(x):  # closes over the model, as users write it
        return torch.tanh(model(x)).sum()

    def hand(x):
        with torch.no_grad():
            z = model(x)
            return ((1 - torch.tanh(z) ** 2) * model.weight[0]).numpy()

    before = builds("torch.mp")
    assert_right(pg.check(loss, x), hand(x))
    with torch.no_grad():  # an optimizer step, in place
        model.weight.add_(1.0)
        model.bias.mul_(-3.0)
    assert_right(pg.check(loss, x), hand(x))  # a stale graph would be a MISMATCH
    assert builds("torch.mp") == before + 2


def test_torch_other_shapes_get_other_captures():
    import torch

    def f(x):
        return torch.exp(x / 3).sum()

    before = builds("torch.mp")
    for n in (3, 4, 3):
        x = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
        assert_right(pg.check(f, x), (torch.exp(x / 3) / 3).numpy())
    assert builds("torch.mp") == before + 2


def test_torch_float32_check_leaves_the_model_unchanged():
    import torch

    torch.manual_seed(1)
    model = torch.nn.Linear(4, 2)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4)
    for _ in range(2):
        report = pg.check(lambda x: model(x).pow(2).sum(), x)
        assert report.verdict is pg.Verdict.PASS and report.ok
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]) and v.dtype == torch.float32


# -- JAX ----------------------------------------------------------------------------------------
def test_jax_second_check_reuses_the_compiled_callables():
    import jax.numpy as jnp

    w = jnp.asarray([0.5, 1.5, -1.0], dtype=jnp.float32)

    def f(x):
        return jnp.sum(w * jnp.sin(x))

    before = builds("jax.jit")
    for start in (0.1, -0.4):
        x = jnp.asarray([start, start + 0.3, start - 0.6], dtype=jnp.float32)
        report = pg.check(f, x)
        assert report.verdict is pg.Verdict.PASS and report.ok
        want = np.asarray(w, np.float64) * np.cos(np.asarray(x, np.float64))
        np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6)
    assert builds("jax.jit") == before + 2  # working dtype and float64, once each


def test_jax_closure_over_a_new_array_is_compiled_again():
    import jax.numpy as jnp

    w = jnp.asarray([1.0, 2.0, 3.0], dtype=jnp.float32)

    def f(x):
        return jnp.sum(jnp.tanh(w * x))

    x = jnp.asarray([0.2, -0.1, 0.05], dtype=jnp.float32)
    xs = np.asarray(x, np.float64)
    before = builds("jax.jit")
    for _ in range(2):
        report = pg.check(f, x)
        ws = np.asarray(w, np.float64)
        want = ws * (1 - np.tanh(ws * xs) ** 2)
        assert report.verdict is pg.Verdict.PASS and report.ok, report
        # a stale compilation would give the old weights' values on both sides
        np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6)
        np.testing.assert_allclose(report.entries.autodiff, want, rtol=1e-5)
        w = w * -2.0  # the closure cell now holds a new array
    assert builds("jax.jit") == before + 4


def test_jax_new_function_objects_with_one_jaxpr_share_one_compilation():
    """A parametrized test builds a new lambda per case, over new arrays: one compilation
    per precision serves them all, each bound to its own arrays (the values are each
    case's own closed form)."""
    import jax.numpy as jnp

    from polygrad.backends._jax_programs import PROGRAMS

    x = jnp.asarray([0.3, -1.2, 0.7, 2.0], dtype=jnp.float32)
    xs = np.asarray(x, np.float64)
    before = PROGRAMS.builds.get("jax.program", 0)
    for scale in (1.0, -3.0, 0.25):
        w = jnp.asarray([scale, 2.0 * scale, -scale, 0.5], dtype=jnp.float32)
        report = pg.check(lambda x: jnp.sum(w * jnp.sin(x) * jnp.exp(x / 3)), x)  # noqa: B023
        ws = np.asarray(w, np.float64)
        want = ws * np.exp(xs / 3) * (np.cos(xs) + np.sin(xs) / 3)
        assert report.verdict is pg.Verdict.PASS and report.ok, report
        np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6)
        np.testing.assert_allclose(report.entries.autodiff, want, rtol=1e-5)
    assert PROGRAMS.builds.get("jax.program", 0) - before <= 2  # working and float64, once


def _scaled_sin(factor: float):
    """sin with a custom VJP ``factor * cos``: the same jaxpr for every factor."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (factor * g * jnp.cos(x),))
    return lambda x: jnp.sum(f(x))


def test_jax_custom_rules_with_one_printed_jaxpr_are_not_shared():
    """Two custom VJPs whose jaxprs print the same (their rules are Python code the jaxpr
    does not show): the right one PASS, the one 1e-3 off MISMATCH, in either order."""
    import jax
    import jax.numpy as jnp

    from polygrad.backends._jax_programs import structure_key

    x = jnp.asarray([0.3, -1.2, 0.7], dtype=jnp.float32)
    right, wrong = _scaled_sin(1.0), _scaled_sin(1.001)
    assert structure_key(jax.make_jaxpr(right)(x)) is None
    for fn, verdict in ((right, "PASS"), (wrong, "MISMATCH"), (right, "PASS")):
        assert pg.check(fn, x).verdict.name == verdict


@pytest.mark.parametrize("committed", [False, True])
def test_jax_a_jitted_function_is_not_compiled_again_for_its_own_input(committed, caplog):
    """The user's @jax.jit function, already called on x: polygrad calls it with inputs
    placed as x is (committed to a device or not), so the user's compilation serves its
    plain calls; only the float64 call compiles it once more."""
    import logging

    import jax
    import jax.numpy as jnp

    @jax.jit
    def f(x):  # type: ignore[no-untyped-def]
        return jnp.sum(jnp.sin(x) * x)

    x = jnp.linspace(-1.0, 2.0, 10, dtype=jnp.float32)
    if committed:
        x = jax.device_put(x, jax.devices()[0])
    f(x)
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles():
        report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS and report.ok
    mine = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Compiling jit(f)")]
    assert len(mine) == 1 and "float64[10]" in mine[0], mine


# -- TensorFlow / Keras -------------------------------------------------------------------------
def test_keras_kernel_assigned_is_captured_again():
    import keras
    import tensorflow as tf

    layer = keras.layers.Dense(1, activation="tanh", dtype="float64")
    layer.build((None, 3))
    x = tf.constant([0.3, -0.2, 0.9], dtype=tf.float64)

    def loss(x):  # a global-style closure over the layer
        return tf.reduce_sum(layer(tf.reshape(x, (1, 3))))

    def hand() -> np.ndarray:
        k = layer.kernel.numpy()[:, 0]
        z = float(x.numpy() @ k + layer.bias.numpy()[0])
        return (1 - np.tanh(z) ** 2) * k

    # a float64 layer runs as it is: its compiled program is the capture that freezes it
    before = builds("tf.compiled")
    assert_right(pg.check(loss, x), hand())
    again = builds("tf.compiled")
    assert_right(pg.check(loss, x), hand())
    assert builds("tf.compiled") == again  # the same weights: reused
    layer.kernel.assign(layer.kernel * -2.0 + 0.25)
    assert_right(pg.check(loss, x), hand())  # a stale graph would be a MISMATCH
    assert builds("tf.compiled") == again + 1
    assert again <= before + 1


@pytest.mark.parametrize("n", [2, 5])
def test_tensorflow_parametrized_checks_share_captures_per_shape(n):
    import tensorflow as tf

    x = tf.constant(np.linspace(-1.0, 1.0, n), dtype=tf.float32)
    w = tf.constant(np.arange(1.0, n + 1.0), dtype=tf.float32)

    def f(x):
        return tf.reduce_sum(w * tf.sin(x))

    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS and report.ok
    want = np.arange(1.0, n + 1.0) * np.cos(np.linspace(-1.0, 1.0, n).astype(np.float32))
    np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6)
    compiled = builds("tf.compiled")
    pg.check(f, x + 0.5)
    assert builds("tf.compiled") == compiled


def test_tensorflow_new_lambdas_over_new_equal_constants_share_captures():
    """As a parametrized test writes it: a new lambda over a new ``tf.constant`` per
    case. Equal weights share the traced programs; other weights are traced again, and
    each check has its own closed form."""
    import tensorflow as tf

    x = tf.constant([0.3, -1.2, 0.7, 2.0], dtype=tf.float32)
    xs = x.numpy().astype(np.float64)
    counts = []
    for scale in (1.0, 1.0, -3.0):
        w = tf.constant([scale, 2.0 * scale, -scale, 0.5], dtype=tf.float32)
        report = pg.check(lambda x: tf.reduce_sum(w * tf.sin(x)), x)  # noqa: B023
        want = w.numpy().astype(np.float64) * np.cos(xs)
        assert report.verdict is pg.Verdict.PASS and report.ok, report
        np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6)
        np.testing.assert_allclose(report.entries.autodiff, want, rtol=1e-5)
        counts.append(builds("tf.compiled"))
    assert counts[1] == counts[0]  # equal weights: the first lambda's capture
    assert counts[2] == counts[1] + 1  # other weights: traced again


# -- explanations computed on first read --------------------------------------------------------
def test_deferred_details_compute_once_on_first_read_and_pickle_as_a_value():
    import pickle

    from polygrad.details import Deferred

    calls = []
    taylor = Deferred(lambda: calls.append(1) or {"slope": 2.0})
    absent = Deferred(lambda: None)
    assert calls == [] and taylor.pending
    assert taylor.get() == {"slope": 2.0} and taylor.get() == {"slope": 2.0}
    assert absent.get() is None and calls == [1]
    assert pickle.loads(pickle.dumps(taylor)).get() == {"slope": 2.0}


def test_a_passing_report_explains_round_off_when_read():
    w = np.array([0.5, 1.5, -1.0], dtype=np.float32)
    x = np.array([0.3, -1.1, 2.0], dtype=np.float32)

    def f(x):
        return np.sum(w * np.sin(x))

    report = pg.check(f, x, grad=lambda x: w * np.cos(x))
    assert report.verdict is pg.Verdict.PASS and report.ok
    naive = report.details["naive_central_difference"]
    assert naive["noise"] > 0
    assert report.details["taylor"]
    assert "taylor" in report.to_dict()["details"]
