"""The on-disk reference cache: a hit gives the verdict a fresh check gives; any change
of the function, its closed-over weights, the point or the dtype is a miss; damaged
files are ignored."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import polygrad as pg
from polygrad import refcache
from polygrad.report import Entries

pytest_plugins = ["pytester"]

W = np.linspace(0.5, 1.5, 6)


def weighted(x):  # reads the global W
    return np.sum(W * np.sin(x) ** 2)


def weighted_grad(x):
    return W * 2 * np.sin(x) * np.cos(x)


X = np.linspace(-1.0, 1.0, 6)


def _same_entries(a: Entries, b: Entries) -> None:
    for name in ("reference", "reference_error", "left", "right", "tolerance", "status"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def _cached(report: pg.Report) -> bool:
    return bool(report.details["reference"]["cached"])


def test_hit_gives_the_same_verdict_and_reference(tmp_path: Path) -> None:
    fresh = pg.check(weighted, X, grad=weighted_grad)
    first = pg.check(weighted, X, grad=weighted_grad, cache=tmp_path)
    second = pg.check(weighted, X, grad=weighted_grad, cache=tmp_path)
    assert not _cached(first) and _cached(second)
    for r in (fresh, first, second):
        assert r.verdict == pg.Verdict.PASS and r.ok
    _same_entries(fresh.entries, second.entries)
    # the closed form d/dx_i sum W sin^2 = W_i sin(2 x_i) lies within the cached error bars
    expected = W * np.sin(2 * X)
    assert np.all(
        np.abs(second.entries.reference.ravel() - expected)
        <= second.entries.reference_error.ravel() + 1e-15
    )
    assert refcache.info(tmp_path)["entries"] == 1


def test_hit_keeps_a_mismatch(tmp_path: Path) -> None:
    def wrong(x):
        return W * np.sin(x) * np.cos(x)  # half the gradient

    for _ in range(2):
        r = pg.check(weighted, X, grad=wrong, cache=tmp_path)
        assert r.verdict == pg.Verdict.MISMATCH and not r.ok
    assert _cached(r)


def _from_source(body: str):
    namespace: dict[str, object] = {"np": np}
    exec(textwrap.dedent(body), namespace)  # noqa: S102 - a function whose body changes
    return namespace["f"]


def test_changed_body_is_a_miss(tmp_path: Path) -> None:
    f1 = _from_source("def f(x):\n    return np.sum(np.sin(x))\n")
    f2 = _from_source("def f(x):\n    return np.sum(np.sin(2 * x))\n")
    r1 = pg.check(f1, X, grad=lambda x: np.cos(x), cache=tmp_path)
    r2 = pg.check(f2, X, grad=lambda x: 2 * np.cos(2 * x), cache=tmp_path)
    assert not _cached(r2)
    assert r1.verdict == r2.verdict == pg.Verdict.PASS and r1.ok and r2.ok
    np.testing.assert_allclose(r2.entries.reference.ravel(), 2 * np.cos(2 * X), rtol=1e-9)


def test_changed_closed_over_weights_are_a_miss(tmp_path: Path) -> None:
    w = np.array([1.0, 2.0, 3.0])

    def f(x):
        return np.sum(w * x**3)

    old = w.copy()

    def grad_with_old_weights(x):
        return 3 * old * x**2

    x = np.array([0.5, -1.0, 2.0])
    assert pg.check(f, x, grad=grad_with_old_weights, cache=tmp_path).verdict == pg.Verdict.PASS
    w[1] = 5.0  # the closed-over array changes in place: the old reference would say PASS
    r = pg.check(f, x, grad=grad_with_old_weights, cache=tmp_path)
    assert not _cached(r)
    assert r.verdict == pg.Verdict.MISMATCH and not r.ok


def test_changed_point_or_dtype_is_a_miss(tmp_path: Path) -> None:
    pg.check(weighted, X, grad=weighted_grad, cache=tmp_path)
    moved = X.copy()
    moved[2] = np.nextafter(moved[2], 1.0)  # one ulp
    r_point = pg.check(weighted, moved, grad=weighted_grad, cache=tmp_path)
    r_dtype = pg.check(weighted, X.astype(np.float32), grad=weighted_grad, cache=tmp_path)
    r_option = pg.check(weighted, X, grad=weighted_grad, cache=tmp_path, reference="float64")
    for r in (r_point, r_dtype, r_option):
        assert not _cached(r)
        assert r.verdict == pg.Verdict.PASS and r.ok
    assert r_dtype.details["working_dtype"] == "float32"
    assert refcache.info(tmp_path)["entries"] == 4


@pytest.mark.parametrize(
    "damage", ["garbage", "truncate", "flipped-bit", "empty-json", "other-key"]
)
def test_damaged_entries_are_ignored(tmp_path: Path, damage: str) -> None:
    first = pg.check(weighted, X, grad=weighted_grad, cache=tmp_path)
    (blob,) = tmp_path.glob("*/*.bin")
    meta = blob.with_suffix(".json")
    if damage == "garbage":
        blob.write_bytes(b"not the arrays")
    elif damage == "truncate":
        blob.write_bytes(blob.read_bytes()[:200])
    elif damage == "flipped-bit":  # same size, one value changed: the digest tells
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 1
        blob.write_bytes(bytes(data))
    elif damage == "empty-json":
        meta.write_text("", encoding="utf-8")
    else:
        meta.write_text(meta.read_text(encoding="utf-8").replace('"key": "', '"key": "0'))
    r = pg.check(weighted, X, grad=weighted_grad, cache=tmp_path)
    assert not _cached(r)
    assert r.verdict == pg.Verdict.PASS and r.ok
    _same_entries(first.entries, r.entries)
    assert _cached(pg.check(weighted, X, grad=weighted_grad, cache=tmp_path))  # rewritten


def test_unfingerprintable_closure_runs_without_cache(tmp_path: Path) -> None:
    lock = threading.Lock()

    def f(x):
        with lock:
            return np.sum(x**2)

    r = pg.check(f, X, grad=lambda x: 2 * x, cache=tmp_path)
    assert r.verdict == pg.Verdict.PASS and r.ok
    assert any("not cached" in n for n in r.details["notes"])
    assert refcache.info(tmp_path)["entries"] == 0


def test_torch_model_closure_hit_and_weight_change(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    model = model.double()
    x = torch.linspace(-1, 1, 4, dtype=torch.float64)

    def loss(x):
        return model(x).sum()

    fresh = pg.check(loss, x)
    pg.check(loss, x, cache=tmp_path)
    hit = pg.check(loss, x, cache=tmp_path)
    assert _cached(hit) and hit.verdict == fresh.verdict == pg.Verdict.PASS and hit.ok
    _same_entries(fresh.entries, hit.entries)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        model[0].weight[0, 0] += 0.25
    changed = pg.check(loss, x, cache=tmp_path)
    assert not _cached(changed) and changed.verdict == pg.Verdict.PASS and changed.ok
    assert not np.allclose(changed.entries.reference, hit.entries.reference)
    # the check did not touch the model
    assert torch.equal(model[0].weight[1:], before[0][1:])
    assert model.training


def test_jax_jit_closure_hit(tmp_path: Path) -> None:
    import jax
    import jax.numpy as jnp

    w = jnp.linspace(0.5, 1.5, 5, dtype=jnp.float32)

    @jax.jit
    def f(x):
        return jnp.sum(w * jnp.tanh(x))

    x = jnp.linspace(-1, 1, 5, dtype=jnp.float32)
    first = pg.check(f, x, cache=tmp_path)
    second = pg.check(f, x, cache=tmp_path)
    assert not _cached(first) and _cached(second)
    assert first.verdict == second.verdict == pg.Verdict.PASS and second.ok
    _same_entries(first.entries, second.entries)


def test_cli_cache_info_and_clear(tmp_path: Path) -> None:
    pg.check(weighted, X, grad=weighted_grad, cache=tmp_path)
    run = [sys.executable, "-m", "polygrad", "cache"]
    out = subprocess.run([*run, "info", "--dir", str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert str(tmp_path) in out and "entries: 1" in out
    out = subprocess.run([*run, "clear", "--dir", str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert "removed 1" in out
    assert refcache.info(tmp_path)["entries"] == 0


def test_cli_cache_info_names_the_projects_plugin_folder(tmp_path: Path) -> None:
    """Run in a project whose pytest plugin keeps references in .pytest_cache, `polygrad
    cache info` names that folder too, with its entries."""
    plugin = tmp_path / ".pytest_cache" / "d" / "polygrad" / "references"
    pg.check(weighted, X, grad=weighted_grad, cache=plugin)
    env = {k: v for k, v in os.environ.items() if k != refcache.CACHE_ENV}
    out = subprocess.run([sys.executable, "-m", "polygrad", "cache", "info"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "this project's pytest plugin cache: .pytest_cache/d/polygrad/references" in out
    assert "(1 entry," in out


def test_default_dir_follows_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(refcache.CACHE_ENV, str(tmp_path))
    assert refcache.default_dir() == tmp_path / "references"
    r1 = pg.check(weighted, X, grad=weighted_grad, cache=True)
    r2 = pg.check(weighted, X, grad=weighted_grad, cache=True)
    assert not _cached(r1) and _cached(r2)
    assert refcache.info()["entries"] == 1


PLUGIN_TEST = """
import numpy as np

def f(x):
    return np.sum(np.exp(x) * np.cos(x))

def g(x):
    return np.exp(x) * (np.cos(x) - np.sin(x))

def test_grad(backend, pytestconfig):
    x = np.linspace(-1.0, 1.0, 5)
    report = backend.assert_gradients(f, x, grad=g)
    with open(pytestconfig.rootpath / "cached.txt", "a") as fh:
        fh.write(f"{report.details['reference']['cached']}\\n")
"""


def test_plugin_caches_by_default(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.delenv(refcache.CACHE_ENV, raising=False)
    pytester.makeini("[pytest]\n")
    outer = refcache.session_default()
    pytester.makepyfile(test_cached=PLUGIN_TEST)
    for _ in range(2):
        pytester.runpytest("--polygrad-backends=numpy").assert_outcomes(passed=1)
    pytester.runpytest("--polygrad-backends=numpy", "--polygrad-no-cache").assert_outcomes(passed=1)
    cached = (pytester.path / "cached.txt").read_text().split()
    assert cached == ["False", "True", "False"]
    assert list((pytester.path / ".pytest_cache").rglob("*.bin"))
    assert refcache.session_default() is outer  # the inner sessions ended


def test_keras_model_and_loss_object_closure(tmp_path: Path) -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)]
    )
    mse = keras.losses.MeanSquaredError()
    y = tf.constant([[0.5]])

    def loss(x):  # model, y and the loss object are globals/closure, as users write it
        return mse(y, model(tf.reshape(x, (1, 4))))

    x = tf.constant(np.linspace(-1.0, 1.0, 4), tf.float32)
    first = pg.check(loss, x, cache=tmp_path)
    second = pg.check(loss, x, cache=tmp_path)
    assert not _cached(first) and _cached(second)
    assert first.verdict == second.verdict == pg.Verdict.PASS and second.ok
    _same_entries(first.entries, second.entries)
    kernel = model.layers[0].kernel
    kernel.assign(kernel + 0.125)
    changed = pg.check(loss, x, cache=tmp_path)
    assert not _cached(changed) and changed.verdict == pg.Verdict.PASS and changed.ok
