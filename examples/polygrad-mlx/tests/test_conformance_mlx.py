"""polygrad's backend conformance suite, run against the MLX backend (entry point)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polygrad.backends import backend_entries
from polygrad.testing.conformance import BackendConformance


class TestMlxConformance(BackendConformance):
    backend = "mlx"
    selected_from_arrays = True  # an mx.array argument picks the backend without backend=
    complex_inputs = False  # MLX has complex64 only; the suite's complex case is complex128
    # MLX's CPU float64 sin, exp, cos... run in float32 (float32-size errors, see
    # test_mlx_backend.py): the float64 Target reproduces a hand Jacobian to that accuracy
    rtol = 1e-6

    def wrong_rule(self) -> Callable[..., Any]:
        import mlx.core as mx

        @mx.custom_function
        def wrong_sin(x: Any) -> Any:
            return mx.sin(x)

        @wrong_sin.vjp
        def wrong_sin_vjp(x: Any, cotangent: Any, output: Any) -> Any:
            return 2.0 * mx.cos(x) * cotangent  # wrong by a factor 2

        @wrong_sin.jvp
        def wrong_sin_jvp(x: Any, tangent: Any) -> Any:
            return 2.0 * mx.cos(x) * tangent  # the same wrong rule in forward mode

        return wrong_sin


def test_found_through_the_entry_point() -> None:
    entry = backend_entries(load=True)["mlx"]
    assert entry.origin == "entry point polygrad-mlx"
    assert entry.module == "mlx"
    assert entry.installed
