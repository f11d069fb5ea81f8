"""check() and compare() judge alike: an implementation that gets verdict V from
check() gets V from compare(), in every built-in backend, the round-off allowances
included: float32 variance at an offset of 1e4 (and the float64 one written as a
difference of large terms) needs the allowance measured a few ulps away; float32
tanh at saturating inputs the one inherited from the size of f."""

from __future__ import annotations

import numpy as np
import pytest

import polygrad as pg

OFFSET = np.random.default_rng(2).normal(size=24) + 1e4
NEAR_100 = np.random.default_rng(0).normal(size=50) + 100  # a float64 difference of terms
SATURATING = np.array([0.5, 5.0, 8.0, 9.5])


def _numpy():
    def var(x):
        return np.mean(x**2) - np.mean(x) ** 2

    def var_grad(x):
        return 2 * x / len(x) - 2 * np.mean(x) / len(x)

    def tanh_sum(x):
        return np.sum(np.tanh(x))

    def tanh_grad(x):
        return 1 - np.tanh(x) ** 2

    def wrong_grad(x):
        return (1 - np.tanh(x) ** 2) * 1.01

    return [
        ("variance", (var, var_grad), NEAR_100),
        ("tanh", (tanh_sum, tanh_grad), SATURATING.astype(np.float32)),
        ("wrong", (tanh_sum, wrong_grad), SATURATING[:1]),
    ]


def _torch():
    import torch

    return [
        ("variance", lambda x: x.var(unbiased=False), OFFSET.astype(np.float32)),
        ("tanh", lambda x: torch.tanh(x).sum(), SATURATING.astype(np.float32)),
    ]


def _jax():
    import jax.numpy as jnp

    return [
        ("variance", jnp.var, OFFSET.astype(np.float32)),
        ("tanh", lambda x: jnp.sum(jnp.tanh(x)), SATURATING.astype(np.float32)),
    ]


def _tensorflow():
    import tensorflow as tf

    return [
        ("variance", tf.math.reduce_variance, OFFSET.astype(np.float32)),
        ("tanh", lambda x: tf.reduce_sum(tf.tanh(x)), SATURATING.astype(np.float32)),
    ]


CASES = {"numpy": _numpy, "torch": _torch, "jax": _jax, "tensorflow": _tensorflow}
EXPECTED = {"variance": pg.Verdict.PASS, "tanh": pg.Verdict.PASS, "wrong": pg.Verdict.MISMATCH}


def _check(backend, impl, x):
    if backend == "numpy":
        f, g = impl
        return pg.check(f, x, grad=g)
    import polygrad.backends as backends

    return pg.check(impl, backends.get_backend(backend).from_numpy(x))


@pytest.mark.parametrize("backend", list(CASES))
def test_compare_gives_each_implementation_its_check_verdict(backend):
    """The second implementation of each pair is judged on the first one's reference,
    through the same stages as check(): same verdict, same ok."""
    for name, impl, x in CASES[backend]():
        report = _check(backend, impl, x)
        assert report.verdict == EXPECTED[name], (backend, name, report.counts())
        assert report.ok == (EXPECTED[name] == pg.Verdict.PASS)
        c = pg.compare({f"{backend}-a": impl, f"{backend}-b": impl}, x)
        for key in (f"{backend}-a", f"{backend}-b"):
            assert c[key].gradient == report.verdict, (backend, name, key)
            assert c[key].report.ok == report.ok, (backend, name, key)
        # where check needed the round-off measured a few ulps away, so does compare
        moved = any("moved by up to" in n for n in report.notes)
        assert moved == any("moved by up to" in n for n in c[f"{backend}-b"].report.notes)
