"""Time to verdict: polygrad beside each framework's own checker, in one run.

Usage::

    python -m benchmarks latency [--quick] [--out-json PATH] [--docs DIR]
                                 [--jobs JOB,JOB...] [--shared] [--render]

Rows (one smooth function per row, written the way users write it: a closure over
float32 weights; see :func:`_problem`):

* n = 10, every framework, float32 and float64: ``torch.autograd.gradcheck``,
  ``jax.test_util.check_grads``, ``tf.test.compute_gradient`` (then
  ``np.testing.assert_allclose`` at rtol = atol = 1e-3), ``scipy.optimize.check_grad``
  for NumPy (with the hand-written gradient polygrad gets too); polygrad's
  ``check`` at its defaults. *first* is the first call on a new function object
  (tracing included), *warm* the median of 9 further calls.
* n = 1e4, PyTorch float64, full Jacobian: polygrad against slow ``gradcheck``.
* a pytest-style suite of 200 checks (50 per framework, n = 10, parametrized over
  ten elementwise functions, float32 and float64 and points: 20 programs per
  framework, a new point and new function objects per test): once under each
  framework's own checker, then twice under polygrad with one reference-cache
  folder (empty, then a rerun as on CI), each run in a new process
  (:func:`_suite_row`).
* n = 1e6, PyTorch float32, random projections: polygrad against one
  forward+backward pass, with polygrad's extra peak memory (resident set, measured
  in a fresh process).
* the case-2 CNN (784 pixels, float32, model closed over), Keras and PyTorch, full
  check: polygrad against ``tf.test.compute_gradient`` / ``gradcheck`` (one call each)
  and against its floor, the float64 model evaluations of two central differences per
  pixel evaluated in the model's own batches (:func:`_cnn_row`).

* scalar losses (n = 10, every framework, float32 and float64): a small MLP's
  log-softmax loss and a linear model's mean squared error, each against the
  framework's checker (``loss:`` jobs, :mod:`benchmarks.latency_shapes`).
* failing twins: polygrad's check of a function with a right custom rule against the
  same check with the rule planted ``x (1 + 1e-3)``: the MLP loss and a 20x20 clamp
  (``twin:`` jobs; a table of their own, "cost of a failing check").

Each framework runs in its own worker process, so that no framework's threads or
caches slow another's. The tables go to stdout and into ``benchmarks/results/latency.json``
(each row with the UTC date it was measured, ``measured``; the machine's core count and
the number of warm calls beside them), and from there into the blocks of the docs
(:mod:`benchmarks.pages`): ``latency`` and ``latency-failing`` on ``docs/speed.md``,
``latency-large`` (n = 1e4 and n = 1e6) on ``docs/scale.md``. The sentence above each
table, its date included, is made from the results file (:func:`caption`), so a rerun of
some jobs states the dates of the rows it kept. ``--quick`` runs the n = 10 NumPy and
PyTorch rows only (the smoke test), with :data:`QUICK_REPEATS` warm calls, and writes no
page; ``--jobs`` reruns the named jobs (see :func:`jobs`) and keeps the other rows;
``--shared`` says in the tables' notes that the machine was shared while measuring;
``--render`` runs nothing and rewrites the pages' tables from ``--out-json``.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import pages

HERE = Path(__file__).resolve().parent
OUT_JSON = HERE / "results" / "latency.json"
WARM_REPEATS = int(os.environ.get("LATENCY_WARM_REPEATS", "9"))
"""Warm calls per tool (``--quick`` sets ``LATENCY_WARM_REPEATS`` lower for its workers)."""
FRAMEWORKS = ("numpy", "torch", "jax", "tensorflow")


def _weights(n: int, dtype: str) -> np.ndarray:
    return np.random.default_rng(1).uniform(0.5, 1.5, n).astype(dtype)


def _point(n: int, dtype: str) -> np.ndarray:
    return np.random.default_rng(0).uniform(-2.0, 2.0, n).astype(dtype)


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _interleaved_warm(tool: Callable[[], Any], ours: Callable[[], Any]) -> tuple[float, float]:
    """Medians of warm calls of the two, alternated call by call: a machine whose speed
    drifts (a shared one) moves both alike, and their ratio stays put."""
    tool(), ours()
    pairs = [(_timed(tool), _timed(ours)) for _ in range(WARM_REPEATS)]
    return statistics.median(t for t, _ in pairs), statistics.median(o for _, o in pairs)


def _numpy_row(n: int, dtype: str) -> dict[str, Any]:
    import scipy.optimize

    import polygrad as pg

    w, x = _weights(n, dtype), _point(n, dtype)

    def make_pg() -> Callable[[], Any]:
        def f(x: np.ndarray) -> np.ndarray:  # a closure over w, as users write it
            return np.sum(w * np.sin(x) * np.exp(x / 3))

        def grad(x: np.ndarray) -> np.ndarray:
            return w * np.exp(x / 3) * (np.cos(x) + np.sin(x) / 3)

        return lambda: pg.check(f, x, grad=grad)

    def make_tool() -> Callable[[], Any]:
        def f(x: np.ndarray) -> float:
            return float(np.sum(w * np.sin(x) * np.exp(x / 3)))

        def grad(x: np.ndarray) -> np.ndarray:
            return w * np.exp(x / 3) * (np.cos(x) + np.sin(x) / 3)

        return lambda: scipy.optimize.check_grad(f, grad, x.astype(np.float64))

    return _compare("scipy check_grad", make_tool, make_pg)


def _torch_row(n: int, dtype: str) -> dict[str, Any]:
    import torch

    import polygrad as pg

    w = torch.tensor(_weights(n, dtype))
    x = torch.tensor(_point(n, dtype))

    def f(x: Any) -> Any:  # closes over float32/float64 weights
        return (w * torch.sin(x) * torch.exp(x / 3)).sum()

    def make_pg() -> Callable[[], Any]:
        g = lambda x: f(x)  # noqa: E731 - a new function object
        return lambda: pg.check(g, x)

    def make_tool() -> Callable[[], Any]:
        g = lambda x: f(x)  # noqa: E731
        x64 = x.double().requires_grad_()
        return lambda: torch.autograd.gradcheck(g, (x64,))

    return _compare("torch.autograd.gradcheck (float64)", make_tool, make_pg)


def _jax_row(n: int, dtype: str) -> dict[str, Any]:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.test_util import check_grads

    import polygrad as pg

    w = jnp.asarray(_weights(n, dtype))
    x = jnp.asarray(_point(n, dtype))

    def make_pg() -> Callable[[], Any]:
        g = lambda x: jnp.sum(w * jnp.sin(x) * jnp.exp(x / 3))  # noqa: E731
        return lambda: pg.check(g, x)

    def make_tool() -> Callable[[], Any]:
        g = lambda x: jnp.sum(w * jnp.sin(x) * jnp.exp(x / 3))  # noqa: E731
        return lambda: check_grads(g, (x,), order=1, modes=["rev"])

    return _compare("jax check_grads", make_tool, make_pg)


def _tensorflow_row(n: int, dtype: str) -> dict[str, Any]:
    import tensorflow as tf

    import polygrad as pg

    w = tf.constant(_weights(n, dtype))
    x = tf.constant(_point(n, dtype))

    def make_pg() -> Callable[[], Any]:
        g = lambda x: tf.reduce_sum(w * tf.sin(x) * tf.exp(x / 3))  # noqa: E731
        return lambda: pg.check(g, x)

    def make_tool() -> Callable[[], Any]:
        g = lambda x: tf.reduce_sum(w * tf.sin(x) * tf.exp(x / 3))  # noqa: E731

        def go() -> None:
            theo, num = tf.test.compute_gradient(g, [x])
            np.testing.assert_allclose(theo[0], num[0], rtol=1e-3, atol=1e-3)

        return go

    return _compare("tf.test.compute_gradient", make_tool, make_pg)


def _compare(
    tool: str, make_tool: Callable[[], Callable[[], Any]], make_pg: Callable[[], Callable[[], Any]]
) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tool_first, pg_first = _timed(make_tool()), _timed(make_pg())
        tool_warm, pg_warm = _interleaved_warm(make_tool(), make_pg())
        verdict = make_pg()().verdict.name
    return {
        "tool": tool,
        "tool_first": tool_first,
        "tool_warm": tool_warm,
        "polygrad_first": pg_first,
        "polygrad_warm": pg_warm,
        "verdict": verdict,
    }


ROWS: dict[str, Callable[[int, str], dict[str, Any]]] = {
    "numpy": _numpy_row,
    "torch": _torch_row,
    "jax": _jax_row,
    "tensorflow": _tensorflow_row,
}


def _large_full_functions(n: int) -> dict[str, Callable[[Any], Any]]:
    """The n = 1e4 full-check functions: elementwise + reduction, and a dense coupling."""
    import torch

    w = torch.tensor(_weights(n, "float64"))

    def elementwise(x: Any) -> Any:
        return (x.sin() * x).sum() + (x**2).mean()

    def coupled(x: Any) -> Any:  # every entry of the gradient depends on every input
        return torch.logsumexp(w * x, 0) + x.sum() ** 2 / n

    return {"(sin x · x).sum() + mean(x²)": elementwise, "logsumexp(w x) + (Σx)²/n": coupled}


def _gradcheck(f: Callable[[Any], Any], x: Any) -> None:
    import torch

    torch.autograd.gradcheck(f, (x.clone().requires_grad_(),))


def _torch_large_full(n: int) -> list[dict[str, Any]]:
    import torch

    import polygrad as pg

    x = torch.tensor(_point(n, "float64"))
    pg.check(lambda v: (v**2).sum(), x[:10], strategy="full")  # one-time imports
    rows = []
    for name, f in _large_full_functions(n).items():
        t_tool = _timed(functools.partial(_gradcheck, f, x))
        t0 = time.perf_counter()
        report = pg.check(f, x, strategy="full")
        ref = report.details["reference"]
        rows.append({
            "function": name,
            "tool": "torch.autograd.gradcheck (float64)",
            "tool_warm": t_tool,
            "polygrad_warm": time.perf_counter() - t0,
            "verdict": report.verdict.name,
            "evaluations_per_input": ref["evaluations"] / n,
        })  # fmt: skip
    return rows


def _torch_projections(n: int) -> dict[str, Any]:
    import resource

    import torch

    import polygrad as pg

    w = torch.tensor(_weights(n, "float32"))
    x = torch.tensor(_point(n, "float32"))

    def f(x: Any) -> Any:
        return (w * torch.tanh(x) + torch.roll(x, 1) ** 2 / 4).sum()

    def fwd_bwd() -> None:
        xr = x.clone().requires_grad_()
        f(xr).backward()

    fwd_bwd()
    t_fb = statistics.median(_timed(fwd_bwd) for _ in range(WARM_REPEATS))
    pg.check(lambda v: (v**2).sum(), x[:10], strategy="projections")  # one-time imports
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    report = pg.check(f, x, strategy="projections")
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "tool": "one forward+backward",
        "tool_warm": t_fb,
        "polygrad_warm": seconds,
        "verdict": report.verdict.name,
        "extra_peak_mb": (after - before) / 1024.0,
    }


CNN_SIZE = 28
CNN_WARM_REPEATS = 3


Thunk = Callable[[], Any]


def _cnn_problem(framework: str) -> tuple[Thunk, Thunk, Callable[[], float]]:
    """The case-2 CNN as the user wrote it (model closed over): (polygrad's check, the
    framework's checker, the floor's timing), each a function of no arguments."""
    import polygrad as pg

    from . import cnn_input_gradient as cnn

    image, label = cnn.digit_image(CNN_SIZE)
    if framework == "tensorflow":
        import keras
        import tensorflow as tf

        model = cnn.keras_cnn(CNN_SIZE)
        onehot = tf.one_hot([label], 10)
        x = tf.constant(image[None, :, :, None])

        def loss(m: Any, x: Any) -> Any:
            probabilities = m(x, training=False)
            return tf.reduce_sum(keras.losses.categorical_crossentropy(onehot, probabilities))

        loss(model, x)  # builds the weights
        tool = lambda: tf.test.compute_gradient(lambda x: loss(model, x), [x])  # noqa: E731
        floor = functools.partial(cnn.keras_floor, model, image, label)
    else:
        import torch
        import torch.nn.functional as F

        model = cnn.torch_cnn(CNN_SIZE)
        target = torch.tensor([label])
        x = torch.tensor(image)[None, None]
        loss = lambda m, x: F.cross_entropy(m(x), target)  # noqa: E731
        model64, x64 = copy.deepcopy(model).double(), x.double().requires_grad_()
        tool = lambda: torch.autograd.gradcheck(  # noqa: E731
            lambda v: loss(model64, v), (x64,), eps=1e-3, atol=1e-2, rtol=1e-2
        )
        floor = functools.partial(cnn.torch_floor, model, image, label)
    ours = lambda: pg.check(lambda x: loss(model, x), x, strategy="full")  # noqa: E731
    return ours, tool, floor


def _cnn_row(framework: str) -> dict[str, Any]:
    """polygrad's full check of the case-2 CNN against the framework's checker and
    against its floor: the float64 model evaluations of two central differences per
    pixel (the fewest that give an error estimate), natively batched."""
    from . import cnn_input_gradient as cnn

    ours, tool, floor = _cnn_problem(framework)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_first = _timed(ours)
        report = ours()  # the same code again: its captured program is reused
        t_warm = statistics.median(_timed(ours) for _ in range(CNN_WARM_REPEATS))
        t_tool = _timed(tool)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(report.counts().items()))
    return {
        "n": CNN_SIZE * CNN_SIZE,
        "framework": framework,
        "dtype": "float32",
        "strategy": "full, case-2 CNN (model closed over)",
        "job": f"cnn:{framework}",
        "tool": "tf.test.compute_gradient" if framework == "tensorflow"
        else "torch.autograd.gradcheck (float64 copy)",
        "tool_first": t_tool,
        "tool_warm": t_tool,
        "polygrad_first": t_first,
        "polygrad_warm": t_warm,
        "verdict": f"{report.verdict.name} ok={report.ok} ({counts})",
        "evaluations": int(report.details["reference"]["evaluations"]),
        "floor_evaluations": len(cnn.FLOOR_STEPS) * 2 * CNN_SIZE * CNN_SIZE,
        "floor_seconds": floor(),
    }  # fmt: skip


SUITE_SIZE = 200


SUITE_OPS = (
    "sin", "cos", "tanh", "sigmoid", "softplus", "atan", "log1p_sq", "sqrt1p_sq", "exp_third",
    "sin_sq",
)  # fmt: skip
"""The elementwise functions the suite is parametrized over: each test checks
``sum(w * op(x))`` for one of them, in one dtype, at its own point."""


def _numpy_ops() -> dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]:
    """Each suite op in NumPy with its hand-written derivative (what ``check_grad`` and
    polygrad's ``grad=`` get)."""

    def sigmoid(x: Any) -> Any:
        return 1 / (1 + np.exp(-x))

    return {
        "sin": (np.sin, np.cos),
        "cos": (np.cos, lambda x: -np.sin(x)),
        "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
        "sigmoid": (sigmoid, lambda x: sigmoid(x) * (1 - sigmoid(x))),
        "softplus": (lambda x: np.log1p(np.exp(x)), sigmoid),
        "atan": (np.arctan, lambda x: 1 / (1 + x**2)),
        "log1p_sq": (lambda x: np.log1p(x**2), lambda x: 2 * x / (1 + x**2)),
        "sqrt1p_sq": (lambda x: np.sqrt(1 + x**2), lambda x: x / np.sqrt(1 + x**2)),
        "exp_third": (lambda x: np.exp(x / 3), lambda x: np.exp(x / 3) / 3),
        "sin_sq": (lambda x: np.sin(x) ** 2, lambda x: 2 * np.sin(x) * np.cos(x)),
    }


def _framework_ops(framework: str) -> dict[str, Callable[[Any], Any]]:
    """Each suite op in ``framework`` (``"torch"``, ``"jax"`` or ``"tensorflow"``)."""
    if framework == "torch":
        import torch

        return {
            "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
            "softplus": torch.nn.functional.softplus, "atan": torch.atan,
            "log1p_sq": lambda x: torch.log1p(x**2), "sqrt1p_sq": lambda x: torch.sqrt(1 + x**2),
            "exp_third": lambda x: torch.exp(x / 3), "sin_sq": lambda x: torch.sin(x) ** 2,
        }  # fmt: skip
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        return {
            "sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid,
            "softplus": jax.nn.softplus, "atan": jnp.arctan,
            "log1p_sq": lambda x: jnp.log1p(x**2), "sqrt1p_sq": lambda x: jnp.sqrt(1 + x**2),
            "exp_third": lambda x: jnp.exp(x / 3), "sin_sq": lambda x: jnp.sin(x) ** 2,
        }  # fmt: skip
    import tensorflow as tf

    return {
        "sin": tf.sin, "cos": tf.cos, "tanh": tf.tanh, "sigmoid": tf.sigmoid,
        "softplus": tf.nn.softplus, "atan": tf.atan,
        "log1p_sq": lambda x: tf.math.log1p(x**2), "sqrt1p_sq": lambda x: tf.sqrt(1 + x**2),
        "exp_third": lambda x: tf.exp(x / 3), "sin_sq": lambda x: tf.sin(x) ** 2,
    }  # fmt: skip


def _suite_case(framework: str, i: int) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """Test ``i`` of a framework in the suite: (its own checker, ``polygrad`` with a cache).

    As a test module parametrized over ops, dtypes and points makes them: the op is
    ``SUITE_OPS[i % 10]``, the dtype float32 or float64 (alternating every ten tests),
    the point drawn anew per test; so 50 tests check 20 different (function, dtype)
    programs, each at two or three points, with new function objects per test.
    """
    import polygrad as pg

    op_name = SUITE_OPS[i % len(SUITE_OPS)]
    dtype = "float32" if (i // len(SUITE_OPS)) % 2 == 0 else "float64"
    w = _weights(10, dtype)
    x = np.random.default_rng(100 + i).uniform(-2.0, 2.0, 10).astype(dtype)
    if framework == "numpy":
        import scipy.optimize

        op, dop = _numpy_ops()[op_name]
        f = lambda x: np.sum(w * op(x))  # noqa: E731
        g = lambda x: w * dop(x)  # noqa: E731
        x64 = x.astype(np.float64)
        return (lambda: scipy.optimize.check_grad(lambda v: float(f(v)), g, x64),
                lambda cache: pg.check(f, x, grad=g, cache=cache))  # fmt: skip
    op = _framework_ops(framework)[op_name]
    if framework == "torch":
        import torch

        wt, xt = torch.tensor(w), torch.tensor(x)
        f = lambda x: (wt * op(x)).sum()  # noqa: E731
        xt64 = xt.double().requires_grad_()
        w64 = wt.double()
        f64 = lambda x: (w64 * op(x)).sum()  # noqa: E731 - gradcheck's float64 copy
        return (lambda: torch.autograd.gradcheck(f64, (xt64,)),
                lambda cache: pg.check(f, xt, cache=cache))  # fmt: skip
    if framework == "jax":
        import jax.numpy as jnp
        from jax.test_util import check_grads

        wj, xj = jnp.asarray(w), jnp.asarray(x)
        f = lambda x: jnp.sum(wj * op(x))  # noqa: E731
        return (lambda: check_grads(f, (xj,), order=1, modes=["rev"]),
                lambda cache: pg.check(f, xj, cache=cache))  # fmt: skip
    import tensorflow as tf

    wf, xf = tf.constant(w), tf.constant(x)
    f = lambda x: tf.reduce_sum(wf * op(x))  # noqa: E731

    def tool() -> None:
        theo, num = tf.test.compute_gradient(f, [xf])
        np.testing.assert_allclose(theo[0], num[0], rtol=1e-3, atol=1e-3)

    return tool, lambda cache: pg.check(f, xf, cache=cache)


def _suite_run(which: str, size: int) -> dict[str, Any]:
    """One run of the suite in this (fresh) process: frameworks imported first, then the
    ``size`` checks timed as a test session runs them (first calls and tracing included).
    ``which`` is ``"tool"`` or a cache folder for polygrad."""
    import jax

    jax.config.update("jax_enable_x64", True)
    for name in FRAMEWORKS[1:]:
        __import__(name)
    verdicts: dict[str, int] = {}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(size):
            tool, ours = _suite_case(FRAMEWORKS[i % len(FRAMEWORKS)], i // len(FRAMEWORKS))
            if which == "tool":
                tool()
                continue
            verdict = ours(which).verdict.name
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return {"seconds": time.perf_counter() - t0, "verdicts": verdicts}


def _suite_row(size: int) -> dict[str, Any]:
    """The suite under the frameworks' checkers, then twice under polygrad with one cache
    folder (first run: the cache is empty; second run: a CI rerun), each a new process."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        runs = [_run(f"suite:{which}:{size}") for which in ("tool", cache, cache)]
    for r in runs:
        if "error" in r[0]:
            return r[0]
    tool, first, second = (r[0] for r in runs)
    verdicts = ", ".join(f"{v} {k}" for k, v in sorted(second["verdicts"].items()))
    return {
        "job": f"suite:{size}",
        "framework": "all four",
        "n": 10,
        "dtype": "float32+float64",
        "strategy": f"{size}-check suite, reference cache (first = empty cache, warm = rerun)",
        "tool": "each framework's checker",
        "tool_first": tool["seconds"],
        "tool_warm": tool["seconds"],
        "polygrad_first": first["seconds"],
        "polygrad_warm": second["seconds"],
        "verdict": verdicts,
    }


def _worker(job: str) -> None:
    """Run one job in this process and print its JSON (used through a subprocess)."""
    kind, _, arg = job.partition(":")
    if kind == "suite":
        which, _, size = arg.rpartition(":")
        print(json.dumps([_suite_run(which, int(size))]))
        return
    if kind == "small":
        framework, dtype = arg.split(",")
        rows = [{"n": 10, "framework": framework, "dtype": dtype, **ROWS[framework](10, dtype)}]
    elif kind in ("loss", "twin"):
        from . import latency_shapes

        framework, dtype, *only = arg.split(",")  # only: the shapes or problems to run
        make = latency_shapes.loss_rows if kind == "loss" else latency_shapes.twin_rows
        rows = [{**r, "job": job} for r in make(framework, dtype, *only)]
    elif kind == "cnn":
        rows = [_cnn_row(arg)]
    elif kind == "full":
        rows = [
            {"n": int(arg), "framework": "torch", "dtype": "float64", "strategy": "full", **r}
            for r in _torch_large_full(int(arg))
        ]
    else:
        rows = [
            {
                "n": int(arg),
                "framework": "torch",
                "dtype": "float32",
                "strategy": "projections",
                **_torch_projections(int(arg)),
            }
        ]
    print(json.dumps(rows))


def _run(job: str, timeout: float = 1800.0, repeats: int | None = None) -> list[dict[str, Any]]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if repeats is not None:
        env["LATENCY_WARM_REPEATS"] = str(repeats)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.latency", "--worker", job],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=HERE.parent,
    )
    if proc.returncode != 0:
        return [{"job": job, "error": proc.stderr.strip().splitlines()[-1:]}]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def jobs(quick: bool) -> list[str]:
    """The worker jobs of a run (see the module docstring)."""
    frameworks = ("numpy", "torch") if quick else FRAMEWORKS
    small = [f"small:{fw},{dt}" for fw in frameworks for dt in ("float32", "float64")]
    large = ["full:10000", "projections:1000000", "cnn:tensorflow", "cnn:torch"]
    shapes = [job.replace("small:", kind + ":") for kind in ("loss", "twin") for job in small]
    return small if quick else [*small, *large, f"suite:{SUITE_SIZE}", *shapes]


def split_jobs(text: str) -> list[str]:
    """``--jobs`` text as jobs: split at the commas that start a new ``kind:`` (a job's
    own argument may hold commas: ``small:torch,float32,loss:jax,float64``)."""
    return [j for j in re.split(r",(?=[a-z]+:)", text) if j]


TWIN_REPEATS = 3
"""Warm calls per check in the ``twin:`` jobs (a failing 20x20 check takes seconds)."""
QUICK_REPEATS = 2
"""Warm calls per tool in ``--quick`` runs (the smoke tests)."""


def _ratio(row: dict[str, Any], key: str) -> str:
    tool = row.get(f"tool_{key}")
    ours = row.get(f"polygrad_{key}")
    if not tool or ours is None:
        return ""
    r = ours / tool
    return f"{r:.2g}x" if r < 1 else f"{r:.1f}x"  # 0.087x, not 0.1x


def _ms(v: float | None) -> str:
    return "" if v is None else (f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s")


def shape_label(row: dict[str, Any]) -> str:
    """What a row checks, in a user's terms (the rows stored before labels are told by
    their job, strategy and size)."""
    if "shape" in row:
        return str(row["shape"])
    job = str(row.get("job", ""))
    if job.startswith("suite:"):
        return "suite of elementwise sums"
    if job.startswith("cnn:"):
        return "CNN input gradient (cross-entropy loss)"
    if row.get("strategy") == "full":
        return "scalar sum over a large input"
    if row.get("strategy") == "projections":
        return "elementwise sum over a large input"
    return "elementwise sum: Σ w·sin(x)·exp(x/3)"


def _what(r: dict[str, Any]) -> str:
    """The first cell of a row: what is checked, and what the row measured besides."""
    what = f"{shape_label(r)}; {r['framework']}, n = {r['n']:g}, {r['dtype']}"
    if "strategy" in r and r["strategy"] != r.get("shape"):
        what += f", {r['strategy']}"
    if "function" in r:
        what += f", {r['function']}"
    if "evaluations_per_input" in r:
        what += f" ({r['evaluations_per_input']:.1f} evaluations per input)"
    if "floor_seconds" in r:
        what += (
            f" ({r['evaluations']} evaluations; floor: {r['floor_evaluations']} float64 "
            f"model evaluations, natively batched, {_ms(r['floor_seconds'])}: polygrad "
            f"{r['polygrad_first'] / r['floor_seconds']:.1f}x it first, "
            f"{r['polygrad_warm'] / r['floor_seconds']:.1f}x warm)"
        )
    if "extra_peak_mb" in r:
        what += f" (+{r['extra_peak_mb']:.0f} MB peak)"
    return what


def render(rows: list[dict[str, Any]], first: bool = True) -> str:
    """The Markdown table of a run (``first=False``: without the first-call columns, for
    rows measured warm only)."""
    calls = ("warm", "first") if first else ("warm",)
    head = ["check", "tool"] + [
        part for c in calls for part in (f"tool {c}", f"polygrad {c}", f"ratio {c}")
    ]
    out = ["| " + " | ".join([*head, "verdict"]) + " |", "|" + "---|" * (len(head) + 1)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['job']} | error: {r['error']} |" + " |" * (len(head) - 1))
            continue
        cells = [_what(r), r["tool"]]
        for c in calls:
            cells += [_ms(r.get(f"tool_{c}")), _ms(r.get(f"polygrad_{c}")), _ratio(r, c)]
        out.append("| " + " | ".join([*cells, r["verdict"]]) + " |")
    return "\n".join(out) + "\n"


def render_errors(rows: list[dict[str, Any]]) -> str:
    """The checks that raised instead of giving a verdict (no timing row), as a list."""
    if not rows:
        return ""
    lines = [f"- {shape_label(r)}; {r['framework']}, n = {r['n']}, {r['dtype']}: polygrad "
             f"raised `{r['error']}`" for r in rows]  # fmt: skip
    return (
        "\nChecks that raised an error instead of giving a verdict:\n\n" + "\n".join(lines) + "\n"
    )


def _fail_pass(row: dict[str, Any], call: str) -> str:
    return f"{row[f'fail_{call}'] / row[f'pass_{call}']:.1f}x"


def render_failing(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of the failing twins: polygrad's check with the right rule and
    with the rule planted x (1 + 1e-3)."""
    out = [
        "| check | rule | right rule, warm | planted, warm | fail/pass warm | right rule, first "
        "| planted, first | fail/pass first | verdicts (right / planted) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "problem" not in r:  # the job's process failed
            out.append(f"| {r['job']} | | error: {r['error']} | | | | | | |")
            continue
        what = f"{r['problem']}; {r['framework']}, {r['dtype']}"
        if "error" in r:
            out.append(f"| {what} | {r['rule']} | error: {r['error']} | | | | | | |")
            continue
        out.append(
            f"| {what} | {r['rule']} | {_ms(r['pass_warm'])} | {_ms(r['fail_warm'])} "
            f"| {_fail_pass(r, 'warm')} | {_ms(r['pass_first'])} | {_ms(r['fail_first'])} "
            f"| {_fail_pass(r, 'first')} | {r['pass_verdict']} / {r['fail_verdict']} |"
        )
    return "\n".join(out) + "\n"


LARGE_JOBS = ("full", "projections")
"""Jobs whose rows (n = 1e4 and n = 1e6) go to the scale page; the others' to the speed page."""
HEADINGS = {
    "latency": "## Time to verdict against the frameworks' checkers",
    "latency-large": "## Large inputs: full checks at n = 1e4, projections at n = 1e6",
    "latency-failing": "## Cost of a failing check",
}
"""The heading put above each block on a page that does not have it yet."""


def large_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the large inputs (n = 1e4 full, n = 1e6 projections)."""
    return [r for r in rows if _row_job(r).split(":")[0] in LARGE_JOBS]


def speed_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The other rows: n = 10, the case-2 CNN, the suite, the scalar losses."""
    return [r for r in rows if _row_job(r).split(":")[0] not in LARGE_JOBS]


def _row_job(row: dict[str, Any]) -> str:
    """The job a stored row came from (``full:10000``), where it can be told."""
    if "job" in row:
        return str(row["job"])
    if row.get("strategy") in ("full", "projections"):
        return f"{row['strategy']}:{row['n']}"
    if row.get("n") == 10 and "framework" in row and "dtype" in row:
        return f"small:{row['framework']},{row['dtype']}"
    return row.get("job", "")


def _kept_rows(path: Path, rerun: list[str], key: str = "rows") -> list[dict[str, Any]]:
    """The rows (under ``key``) of the last run at ``path`` that ``rerun`` does not replace."""
    if not path.exists():
        return []
    old = json.loads(path.read_text()).get(key, [])
    return [r for r in old if _row_job(r) not in rerun]


SHARED_NOTE = (
    "; the machine was shared with other work while these rows were measured, so their "
    "absolute times are inflated"
)
ALTERNATED = ": read the ratios, whose two sides were alternated call by call"
JOB_KINDS = {
    "small": "the n = 10 elementwise rows",
    "loss": "the scalar-loss rows",
    "twin": "the failing twins",
}


def _rows_label(rows: list[dict[str, Any]], block: list[dict[str, Any]]) -> str:
    """Which of the ``block``'s rows ``rows`` are: every row of some kinds of job, or by
    their jobs."""
    kinds = list(dict.fromkeys(_row_job(r).split(":")[0] for r in rows))

    def whole(kind: str) -> bool:
        return kind in JOB_KINDS and all(
            r in rows for r in block if _row_job(r).startswith(kind + ":")
        )

    if all(whole(k) for k in kinds):
        return " and ".join(JOB_KINDS[k] for k in kinds)
    return "the rows of " + ", ".join(dict.fromkeys(_row_job(r) for r in rows))


def measured(rows: list[dict[str, Any]]) -> str:
    """``Measured <date>`` of a block: the date (``measured``, UTC) of its first row, and
    those of its rows measured on another day, named by their jobs.

    Parameters
    ----------
    rows : list of dict
        The block's rows, as stored in ``latency.json``.

    Returns
    -------
    str
        For example ``Measured 2026-12-03 (the scalar-loss rows: 2026-12-06)``.
    """
    if not rows:
        return "No rows measured"
    first = _date(rows[0])
    later: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if _date(r) != first:
            later.setdefault(_date(r), []).append(r)
    parts = [f"{_rows_label(rs, rows)}: {date}" for date, rs in later.items()]
    head = f"Measured on {first}" if first == UNDATED else f"Measured {first}"
    return head + (f" ({'; '.join(parts)})" if parts else "")


UNDATED = "an unrecorded date"
"""The date of a row stored before rows kept the date they were measured."""


def _date(row: dict[str, Any]) -> str:
    return str(row.get("measured", UNDATED))


def _machine(payload: dict[str, Any]) -> str:
    threads = payload.get("omp_num_threads")
    return f"on {payload.get('cpu_count', '?')} CPU cores by `python -m benchmarks latency`" + (
        f" with OMP_NUM_THREADS={threads} (a shared, loaded machine)" if threads else ""
    )


def caption(payload: dict[str, Any], name: str) -> str:
    """The sentence above a latency table: when, on what machine and how it was measured,
    all of it from the results (``latency.json``).

    Parameters
    ----------
    payload : dict
        The contents of ``latency.json``.
    name : str
        The block: ``"latency"`` (the speed page's table), ``"latency-large"`` (the
        scale page's) or ``"latency-failing"`` (the failing twins).

    Returns
    -------
    str
        Markdown.
    """
    shared = payload.get("shared", False)
    if name == "latency-failing":
        return (
            f"{measured(payload['failing'])} {_machine(payload)} (the `twin:` jobs): polygrad's "
            "check of a function whose custom rule is right, and of its twin, the same "
            "function with the rule multiplied by 1 + 1e-3 (MISMATCH); warm = median of "
            f"{payload.get('twin_repeats', TWIN_REPEATS)} calls, the right and the planted "
            "check alternated call by call, first = first call on new function objects"
            + (SHARED_NOTE + ALTERNATED if shared else "")
            + "."
        )
    if name == "latency-large":
        return (
            f"{measured(large_rows(payload['rows']))} {_machine(payload)}: one call of each "
            "check, polygrad's and `gradcheck`'s, after a check of a small input has paid the "
            "one-time imports, against the median of "
            f"{payload.get('warm_repeats', WARM_REPEATS)} forward+backward passes at n = 1e6"
            + (SHARED_NOTE if shared else "")
            + "."
        )
    return (
        f"{measured(speed_rows(payload['rows']))} {_machine(payload)}; warm = median of "
        f"{payload.get('warm_repeats', WARM_REPEATS)} calls, each alternated with one of the "
        "tool's (a drift of the machine's speed moves both alike), first = first call on a "
        "new function object"
        + (SHARED_NOTE + ALTERNATED if shared else "")
        + ". The CNN rows: the tool is one call; polygrad's first is the first check, its "
        f"warm the median of {CNN_WARM_REPEATS} more checks of the same code (a new lambda "
        "each, its capture reused)."
    )


def blocks(payload: dict[str, Any]) -> dict[str, str]:
    """The Markdown of the latency blocks of the docs (see :mod:`benchmarks.pages`).

    Parameters
    ----------
    payload : dict
        The contents of ``latency.json``.

    Returns
    -------
    dict of str to str
        Block name (``latency``, ``latency-large``, ``latency-failing``) → its caption
        and table.
    """
    rows = payload["rows"]
    tables = {
        "latency": render(speed_rows(rows)) + render_errors(payload.get("errors", [])),
        "latency-large": render(large_rows(rows), first=False),
        "latency-failing": render_failing(payload["failing"]),
    }
    return {name: f"{caption(payload, name)}\n\n{table}" for name, table in tables.items()}


def _run_jobs(selected: list[str], quick: bool, today: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for job in selected:
        if job.startswith("suite:"):
            rows.append(_suite_row(int(job.split(":")[1])))
        else:
            twin = job.startswith("twin:")
            rows.extend(
                _run(job, repeats=QUICK_REPEATS if quick else TWIN_REPEATS if twin else None)
            )
        done = rows[-1:]
        table = render_failing if job.startswith("twin:") else render
        print(table(done).splitlines()[-1], file=sys.stderr, flush=True)
    return [{**r, "measured": today} for r in rows]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks latency")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out-json", type=Path, default=OUT_JSON)
    parser.add_argument(
        "--docs",
        type=Path,
        default=pages.DOCS,
        help="the folder of the pages the tables are written into (speed.md, scale.md)",
    )
    parser.add_argument(
        "--jobs",
        help="comma-separated jobs to run again (e.g. full:10000,loss:jax,float32); "
        "the other rows are kept from --out-json",
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="say in the tables' notes that the machine was shared while measuring",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="run nothing: rewrite the pages' tables from --out-json",
    )
    return parser


def write_pages(docs: Path, payload: dict[str, Any]) -> None:
    """Write the latency blocks (:func:`blocks`) into the pages in ``docs``."""
    for name, content in blocks(payload).items():
        pages.write_block(docs / pages.BLOCKS[name], name, content, HEADINGS[name])


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        _worker(args.worker)
        return 0
    if args.render:
        write_pages(args.docs, json.loads(args.out_json.read_text()))
        return 0
    today = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    selected = split_jobs(args.jobs) if args.jobs else jobs(args.quick)
    new = _run_jobs(selected, args.quick, today)
    failing = [r for r in new if _row_job(r).startswith("twin:")]
    errors = [r for r in new if "shape" in r and "error" in r]  # a check raised
    rows = [r for r in new if r not in failing and r not in errors]
    shared = args.shared
    if args.jobs:
        rows = _kept_rows(args.out_json, selected) + rows
        failing = _kept_rows(args.out_json, selected, "failing") + failing
        errors = _kept_rows(args.out_json, selected, "errors") + errors
        old = json.loads(args.out_json.read_text()) if args.out_json.exists() else {}
        shared = shared or bool(old.get("shared"))  # some kept rows were measured so
    print(render(rows) + render_errors(errors) + "\n" + render_failing(failing))
    payload = {
        "quick": args.quick,
        "cpu_count": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "shared": shared,
        "warm_repeats": QUICK_REPEATS if args.quick else WARM_REPEATS,
        "twin_repeats": QUICK_REPEATS if args.quick else TWIN_REPEATS,
        "rows": rows,
        "failing": failing,
        "errors": errors,
    }
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(payload, indent=1) + "\n")
    if not args.quick:
        write_pages(args.docs, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
