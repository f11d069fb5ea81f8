"""polygrad's backend conformance suite, run against the autograd backend (entry point)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polygrad.backends import backend_entries
from polygrad.testing.conformance import BackendConformance


class TestAutogradConformance(BackendConformance):
    backend = "autograd"
    selected_from_arrays = False  # autograd works on NumPy arrays: named with backend=

    def wrong_rule(self) -> Callable[..., Any]:
        import autograd.numpy as anp
        from autograd.extend import defvjp, primitive

        @primitive
        def wrong_sin(x: Any) -> Any:
            return anp.sin(x)

        defvjp(wrong_sin, lambda ans, x: lambda g: 2.0 * anp.cos(x) * g)  # wrong by a factor 2
        return wrong_sin


def test_found_through_the_entry_point() -> None:
    entry = backend_entries()["autograd"]
    assert entry.origin == "entry point polygrad-autograd"
    assert entry.installed
