"""The backend conformance suite (polygrad.testing.conformance), run for every built-in backend.

Each framework's nox session runs this file; the ``polygrad_backends`` marker
keeps each class to its framework's session (all of them run in ``tests-all``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from polygrad.testing.conformance import BackendConformance


@pytest.mark.polygrad_backends("numpy")
class TestNumpyConformance(BackendConformance):
    backend = "numpy"


@pytest.mark.polygrad_backends("torch")
class TestTorchConformance(BackendConformance):
    backend = "torch"

    def wrong_rule(self) -> Callable[..., Any]:
        import torch

        class WrongSin(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                ctx.save_for_backward(x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx: Any, g: Any) -> Any:
                (x,) = ctx.saved_tensors
                return 2.0 * torch.cos(x) * g  # wrong by a factor 2

        return WrongSin.apply


@pytest.mark.polygrad_backends("jax")
class TestJaxConformance(BackendConformance):
    backend = "jax"

    def wrong_rule(self) -> Callable[..., Any]:
        import jax
        import jax.numpy as jnp

        @jax.custom_vjp
        def wrong_sin(x: Any) -> Any:
            return jnp.sin(x)

        def fwd(x: Any) -> tuple[Any, Any]:
            return jnp.sin(x), x

        def bwd(x: Any, g: Any) -> tuple[Any]:
            return (2.0 * jnp.cos(x) * g,)  # wrong by a factor 2

        wrong_sin.defvjp(fwd, bwd)
        return wrong_sin


@pytest.mark.polygrad_backends("tensorflow")
class TestTensorflowConformance(BackendConformance):
    backend = "tensorflow"

    def wrong_rule(self) -> Callable[..., Any]:
        import tensorflow as tf

        @tf.custom_gradient
        def wrong_sin(x: Any) -> Any:
            def grad(g: Any) -> Any:
                return 2.0 * tf.cos(x) * g  # wrong by a factor 2

            return tf.sin(x), grad

        return wrong_sin
