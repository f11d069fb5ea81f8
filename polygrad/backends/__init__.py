"""Framework backends, chosen from the arrays a user passes.

Backend modules import their framework only when a backend instance is
created, so ``import polygrad`` imports no ML framework. A framework's arrays
are recognised by looking its module up in ``sys.modules``: if the user has
not imported torch, nothing they pass can be a ``torch.Tensor``.
"""

from __future__ import annotations

import importlib
import importlib.util
import numbers
import sys
from typing import Any

import numpy as np

from .._install import pip_install
from .._names import argument_names
from .._pytree import flatten
from ..errors import InputTypeError, MissingBackendError
from .base import Backend

__all__ = [
    "BACKEND_MODULES",
    "available_backends",
    "get_backend",
    "reject_number_lists",
    "select_backend",
]

# name -> (module:class, extra, framework module)
BACKEND_MODULES: dict[str, tuple[str, str, str]] = {
    "numpy": ("polygrad.backends.numpy:NumpyBackend", "", ""),
    "torch": ("polygrad.backends.torch:TorchBackend", "torch", "torch"),
    "jax": ("polygrad.backends.jax:JaxBackend", "jax", "jax"),
    "tensorflow": ("polygrad.backends.tensorflow:TensorflowBackend", "tensorflow", "tensorflow"),
}
_ALIASES = {"tf": "tensorflow", "keras": "tensorflow", "pytorch": "torch", "np": "numpy"}


def _backend_class(name: str) -> type[Backend]:
    spec = BACKEND_MODULES[name][0]
    mod_name, cls_name = spec.split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:  # the polygrad module itself is missing
        raise MissingBackendError(f"backend {name!r} is not available: {exc}") from exc
    return getattr(mod, cls_name)


def get_backend(name: str) -> Backend:
    """Instantiate a backend by name (``"numpy"``, ``"torch"``, ``"jax"``, ``"tensorflow"``).

    Raises
    ------
    ValueError
        Unknown name.
    MissingBackendError
        The framework is not installed; the message names the extra to install.
    """
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in BACKEND_MODULES:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKEND_MODULES)}")
    _, extra, module = BACKEND_MODULES[key]
    if module and importlib.util.find_spec(module) is None:
        raise MissingBackendError(
            f"backend {key!r} needs {module!r}, which is not installed; install it with: "
            + pip_install(extra)
        )
    return _backend_class(key)()


def reject_number_lists(f: Any, args: tuple[Any, ...], argnums: tuple[int, ...]) -> None:
    """Refuse a checked argument that is a Python list (or tuple) of numbers.

    Lists, tuples and dicts are containers (pytrees) whose leaves are separate
    inputs, so ``[1.0, 2.0]`` would be checked as two scalar arguments, not as
    a vector, and no framework's array type would pick the backend.

    Raises
    ------
    InputTypeError
        Names the argument and the array constructors that fix it.
    """
    names = argument_names(f, len(args))
    for i in argnums:
        a = args[i]
        if not isinstance(a, (list, tuple)) or not a:
            continue
        leaves = flatten(a)[0]
        if all(isinstance(v, (numbers.Number, np.generic)) for v in leaves):
            name = names[i] or str(i)
            raise InputTypeError(
                f"argument {name} is a Python {type(a).__name__} of numbers; polygrad takes arrays "
                "(lists, tuples and dicts are containers whose leaves are checked as separate "
                "inputs). Pass an array of your framework, e.g. np.asarray(x), jnp.asarray(x), "
                "torch.tensor(x, dtype=torch.float64) or tf.constant(x, tf.float64)."
            )


def select_backend(args: tuple[Any, ...], name: str | None = None) -> Backend:
    """Pick the backend from the array types in ``args`` (or by ``name``).

    Frameworks the user has not imported are never imported here. Mixing
    arrays of two frameworks is an error.
    """
    if name is not None:
        return get_backend(name)
    leaves, _, _ = flatten(list(args))
    found: set[str] = set()
    for leaf in leaves:
        for key, (_, _, module) in BACKEND_MODULES.items():
            if key == "numpy" or module not in sys.modules:
                continue
            if _backend_class(key).owns(leaf):
                found.add(key)
    if len(found) > 1:
        raise TypeError(
            f"the arguments mix arrays of several frameworks ({', '.join(sorted(found))}); "
            "pass arrays of one framework, or name it with backend="
        )
    return get_backend(found.pop() if found else "numpy")


def available_backends() -> dict[str, bool]:
    """Which backends' frameworks are installed (nothing is imported)."""
    out = {}
    for key, (_, _, module) in BACKEND_MODULES.items():
        out[key] = not module or importlib.util.find_spec(module) is not None
    return out
