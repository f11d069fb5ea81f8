"""The MLX backend as users meet it: picked from mx.array arguments, listed by the CLI,
closures, methods, mx.compile, mlx.nn layers, and MLX's float32-accurate float64."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from polygrad_mlx import MlxBackend
from polygrad_mlx._batched import Rows

import polygrad as pg
from polygrad.backends import select_backend
from polygrad.backends.base import Supplied

X0 = np.array([0.3, -0.7, 1.1, 0.45])


def test_selected_automatically_from_mx_arrays() -> None:
    report = pg.check(lambda x: mx.sum(mx.tanh(x) ** 2), mx.array(X0, dtype=mx.float32))
    assert report.details["backend"] == "mlx"
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.ok
    assert select_backend(({"w": mx.array(X0)}, 2.0)).name == "mlx"  # inside a pytree too


def test_cli_lists_mlx_with_its_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "polygrad", "backends", "--no-devices"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = next(line for line in out.splitlines() if line.startswith("mlx "))
    assert "yes" in row.split()[1]
    assert row.split()[2] == importlib.metadata.version("mlx")
    assert "[entry point polygrad-mlx]" in row


def test_numpy_arguments_do_not_import_mlx() -> None:
    code = (
        "import sys, numpy as np, polygrad as pg\n"
        "r = pg.check(lambda x: np.sum(x**2), np.ones(3), grad=lambda x: 2*x)\n"
        "assert r.ok and r.details['backend'] == 'numpy'\n"
        "assert 'mlx' not in sys.modules, sorted(m for m in sys.modules if 'mlx' in m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float64_sin_is_float32_inside_and_the_report_says_so() -> None:
    """MLX's CPU float64 sin is computed in float32: a move of 2^-36 does not move it."""
    x = mx.array(X0, dtype=mx.float64)
    err = np.max(np.abs(np.array(mx.sin(x)) - np.sin(X0)) / np.abs(np.sin(X0)))
    assert 1e-9 < err < 2e-7
    report = pg.check(lambda x: mx.sum(mx.sin(x) * mx.exp(x)), x)
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.ok
    assert any("less than float64 precision" in n for n in report.details["notes"])


def test_float64_arithmetic_is_promoted() -> None:
    """+, * and sums are float64 in MLX: the float32 check gets a float64 reference."""
    t = MlxBackend().make_target(
        lambda x: x * x * x - 2.0 * x, (mx.array(X0, dtype=mx.float32),), (0,), Supplied(), 64
    )
    assert t.evaluate64 is not None and t.vjp64 is not None
    x = X0.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(t.evaluate64(x[None]), (x**3 - 2 * x)[None], rtol=1e-15)
    np.testing.assert_allclose(t.vjp64(np.eye(4)), np.diag(3 * x**2 - 2), rtol=1e-15)
    assert not any("less than float64" in n for n in t.notes)


A32 = mx.array(np.array([[0.5, -1.0, 2.0, 0.25], [1.5, 0.25, -0.75, 1.0]]), dtype=mx.float32)


def closure_loss(x: Any) -> Any:
    return mx.sum((A32 @ x) ** 2)  # A32: a float32 global, as users write it


def test_closure_over_float32_arrays_passes_with_a_note() -> None:
    report = pg.check(closure_loss, mx.array(X0, dtype=mx.float32))
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.ok
    assert any("closes over narrower MLX arrays (A32)" in n for n in report.details["notes"])


class Model:
    def __init__(self) -> None:
        mx.random.seed(0)
        self.layer = nn.Linear(4, 3)

    def loss(self, x: Any) -> Any:
        return mx.sum(nn.gelu(self.layer(x)) ** 2)


def test_method_over_an_nn_layer_passes_and_leaves_the_layer_unchanged() -> None:
    model = Model()
    w = np.array(model.layer.weight)
    report = pg.check(model.loss, mx.array(X0, dtype=mx.float32))
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.ok
    np.testing.assert_array_equal(np.array(model.layer.weight), w)


def test_compiled_function_passes() -> None:
    f = mx.compile(lambda x: mx.logsumexp(x * x))
    report = pg.check(f, mx.array(X0, dtype=mx.float32))
    assert report.verdict == pg.Verdict.PASS, str(report)
    assert report.ok


def test_rows_falls_back_to_one_call_per_row_when_vmap_fails() -> None:
    calls: list[bool] = []

    def method(A: np.ndarray, x0: np.ndarray, mode: str, vmap: bool) -> np.ndarray:
        calls.append(vmap)
        if vmap:
            raise ValueError("no batching rule")
        return 2.0 * A

    rows = Rows(method, np.zeros(2), "working")
    np.testing.assert_array_equal(rows(np.ones((3, 2))), 2.0 * np.ones((3, 2)))
    np.testing.assert_array_equal(rows(np.ones((1, 2))), 2.0 * np.ones((1, 2)))
    assert calls == [True, False, False]  # vmap is not tried again
