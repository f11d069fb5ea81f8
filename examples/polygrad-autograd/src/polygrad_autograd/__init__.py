"""A polygrad backend for HIPS autograd, registered through the ``polygrad.backends`` entry point.

autograd is imported when a backend instance is created, never when this
module is imported (polygrad may import it to read the class's ``module``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from polygrad.backends.base import Supplied, Target
from polygrad.backends.numpy import NumpyBackend

__all__ = ["AutogradBackend"]


def _of_checked(
    f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]
) -> Callable[[tuple[Any, ...]], Any]:
    """``f`` as a function of the tuple of its checked arguments."""

    def g(checked: tuple[Any, ...]) -> Any:
        new = list(args)
        for i, c in zip(argnums, checked, strict=True):
            new[i] = c
        return f(*new)

    return g


class AutogradBackend(NumpyBackend):
    """NumPy code differentiated by autograd (``import autograd.numpy as np`` in ``f``).

    Selected by name only, ``backend="autograd"``: its arrays are NumPy's.
    """

    name = "autograd"
    module = "autograd"
    distribution = "autograd"
    label = "autograd"
    extra = ""
    supports_autodiff = True
    complex_convention = "wirtinger"

    def __init__(self) -> None:
        super().__init__()
        import autograd

        self.autograd = autograd

    @classmethod
    def owns(cls, x: Any) -> bool:
        return False  # NumPy arrays belong to the NumPy backend; name this one

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("autograd")

    def namespace(self) -> Any:
        import autograd.numpy as anp

        return anp

    def stack_pair(self, re: Any, im: Any) -> Any:
        import autograd.numpy as anp

        return anp.stack([re, im], axis=-1)

    def make_target(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        supplied: Supplied,
        batch_size: int,
        wrt: str = "inputs",
    ) -> Target:
        """The NumPy backend's target, with autograd's VJP and JVP as the derivatives.

        Raises
        ------
        TypeError
            A derivative was supplied (autograd's own is what is checked).
        ValueError
            ``wrt="parameters"``: plain functions have no parameters.
        """
        if supplied.given():
            raise TypeError("the autograd backend checks autograd's own derivative; pass no grad=")
        if wrt != "inputs":
            raise ValueError("autograd functions have no parameters to check; use wrt='inputs'")
        make_vjp = self.autograd.make_vjp
        single = len(argnums) == 1

        def vjp(cotangent: np.ndarray, *call_args: Any) -> Any:
            g = _of_checked(f, call_args, argnums)
            pullback, _ = make_vjp(g)(tuple(call_args[i] for i in argnums))
            out = pullback(cotangent)
            return out[0] if single else tuple(out)

        target = super().make_target(f, args, argnums, Supplied(vjp=vjp), batch_size, wrt)
        target.backend = self.name
        return target
