# ruff: noqa: NPY002 - the legacy global generator is what these tests watch
"""A check leaves the global random generators of Python, NumPy and PyTorch as it found
them, whether the function is refused (it draws from them) or passes (it reseeds them)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import polygrad as pg
from polygrad.errors import NondeterministicFunctionError


def _states() -> tuple[object, ...]:
    return (random.getstate(), np.random.get_state()[1].tobytes(), torch.random.get_rng_state())


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


def test_a_refused_function_that_draws_leaves_the_generators_as_they_were():
    """A torch Dropout left in training mode draws from torch's global generator."""
    drop = torch.nn.Dropout(0.5)
    x = torch.linspace(-1.0, 1.0, 8)
    torch.manual_seed(3)
    before = _states()
    with pytest.raises(NondeterministicFunctionError):
        pg.check(lambda x: (drop(x) * x).sum(), x)
    assert _same(before, _states())


def _reseeding(framework: str):
    """(f, x, closed-form gradient): f reseeds the global generators and adds fixed noise."""
    if framework == "numpy":

        def f(x):
            np.random.seed(0)
            random.seed(0)
            return np.sum(np.sin(x + np.random.normal(size=x.shape) * random.random()))

        np.random.seed(0)
        random.seed(0)
        noise = np.random.normal(size=4) * random.random()
        return f, np.array([0.1, -0.4, 0.9, 1.3]), lambda x: np.cos(x + noise)

    def g(x):
        torch.manual_seed(0)
        return torch.sin(x + torch.randn(x.shape, dtype=x.dtype)).sum()

    torch.manual_seed(0)
    noise_t = torch.randn(4, dtype=torch.float64).numpy()
    x = torch.tensor([0.1, -0.4, 0.9, 1.3], dtype=torch.float64)
    return g, x, lambda x: np.cos(np.asarray(x) + noise_t)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_passing_function_that_reseeds_leaves_the_generators_as_they_were(framework):
    """f reseeds the global generators and draws a fixed noise: deterministic, PASS on its
    closed form, and the user's next draws are the ones they would make without the check."""
    f, x, grad = _reseeding(framework)
    np.random.seed(11)
    random.seed(11)
    torch.manual_seed(11)
    before = _states()
    supplied = {"grad": grad} if framework == "numpy" else {}
    report = pg.check(f, x, **supplied)
    assert _same(before, _states())
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    np.testing.assert_allclose(report.entries.reference, grad(np.asarray(x)), rtol=1e-9)
