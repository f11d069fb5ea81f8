"""The reference sharded over an Executor: a real local Dask cluster (two worker
processes), a process pool and a thread pool give the verdict and the reference
of one process."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import threading

import numpy as np
import pytest

import polygrad as pg
from polygrad.sharding import UnpicklableFunctionError

N = 200
SPAWN = multiprocessing.get_context("spawn")  # no fork of a process that runs JAX's threads
RNG = np.random.default_rng(7)
A = RNG.standard_normal((N, N)) / np.sqrt(N)
X = RNG.uniform(-1.0, 1.0, N)


def energy(x):
    return np.sum(np.tanh(A @ x) ** 2) + np.sum(np.cos(x))


def energy_grad(x):
    t = np.tanh(A @ x)
    return A.T @ (2 * t * (1 - t**2)) - np.sin(x)


@pytest.fixture(scope="module")
def dask_executor():
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    )
    client = Client(cluster)
    try:
        yield client.get_executor()
    finally:
        client.close()
        cluster.close()


def _same_reference(a: pg.Report, b: pg.Report) -> None:
    ea, eb = a.entries, b.entries
    assert a.verdict == b.verdict
    assert np.array_equal(ea.status, eb.status)
    gap = np.abs(ea.reference - eb.reference)
    assert np.all(gap <= ea.reference_error + eb.reference_error)


def test_dask_numpy_function(dask_executor) -> None:
    alone = pg.check(energy, X, grad=energy_grad, strategy="full")
    sharded = pg.check(energy, X, grad=energy_grad, strategy="full", executor=dask_executor)
    assert alone.verdict == pg.Verdict.PASS and alone.ok
    assert sharded.verdict == pg.Verdict.PASS and sharded.ok
    assert sharded.entries.reference.size == N
    _same_reference(alone, sharded)
    np.testing.assert_allclose(sharded.entries.reference.ravel(), energy_grad(X), rtol=0, atol=1e-6)


def test_dask_torch_model_closure(dask_executor) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(N, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    ).double()
    x = torch.as_tensor(X)

    def loss(x):  # the model is closed over, as users write it
        return model(x).sum()

    alone = pg.check(loss, x, strategy="full")
    sharded = pg.check(loss, x, strategy="full", executor=dask_executor)
    assert alone.verdict == pg.Verdict.PASS and alone.ok
    assert sharded.verdict == pg.Verdict.PASS and sharded.ok
    _same_reference(alone, sharded)
    expected = torch.func.grad(loss)(x).detach().numpy()
    err = np.abs(sharded.entries.reference.ravel() - expected)
    assert np.all(err <= 2 * sharded.entries.reference_error.ravel() + 1e-12)


def test_process_pool_with_a_lambda() -> None:
    f = lambda x: np.sum(np.sin(x) * x)  # noqa: E731 - a lambda needs cloudpickle
    g = lambda x: np.cos(x) * x + np.sin(x)  # noqa: E731
    x = np.linspace(-1.0, 1.0, 12)
    alone = pg.check(f, x, grad=g, reference="float64")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=SPAWN) as ex:
        sharded = pg.check(f, x, grad=g, reference="float64", executor=ex)
    assert sharded.verdict == alone.verdict == pg.Verdict.PASS and sharded.ok
    _same_reference(alone, sharded)


def test_thread_pool_keeps_a_mismatch() -> None:
    x = np.linspace(-1.0, 1.0, 12)
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as ex:
        r = pg.check(lambda x: np.sum(x**3), x, grad=lambda x: 3 * x, executor=ex)
    assert r.verdict == pg.Verdict.MISMATCH and not r.ok


def test_unpicklable_function_is_a_clear_error() -> None:
    lock = threading.Lock()

    def f(x):
        with lock:
            return np.sum(x**2)

    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=SPAWN) as ex:
        with pytest.raises(UnpicklableFunctionError, match="cannot be serialised"):
            pg.check(f, np.ones(3), grad=lambda x: 2 * x, executor=ex)
