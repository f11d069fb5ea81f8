"""Fingerprints of functions and values for the on-disk reference cache.

A fingerprint is a BLAKE2b digest of everything a function's values can depend
on, as far as Python lets one see it:

* user code (functions whose module is not installed library code): the
  bytecode, constants and names of the code object and of the code objects
  nested in it, default arguments, the values in its closure cells and the
  values of the globals it names; recursively for the functions, classes and
  objects those values are;
* library code (the standard library, installed packages, polygrad): the
  qualified name and the version of its distribution (the cache key also
  carries polygrad's own source state);
* arrays (NumPy, and framework tensors, variables and parameters, read through
  their NumPy view): dtype, shape and bytes;
* other objects: their class and their attribute values (``__dict__`` and
  ``__slots__``), recursively; objects that hold weights through
  ``get_weights``/``get_config`` (a Keras model: locks and resource handles in
  its attributes cannot be hashed) are fingerprinted by those.

What cannot be fingerprinted this way (a lock, a file handle, an object with
neither attributes nor a known value, or more than :data:`MAX_OBJECTS`
objects) raises :class:`Unfingerprintable`: the check then runs without the
cache and says so. Names a function looks up at run time by string
(``getattr(obj, name)``, ``eval``) are out of sight; so is state held outside
Python objects (a C extension's globals).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
import sysconfig
import types
from collections.abc import Iterable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from .backends._capture_cache import code_globals

__all__ = ["Unfingerprintable", "fingerprint", "framework_version", "MAX_OBJECTS"]

MAX_OBJECTS = 200_000
"""Objects visited before a fingerprint gives up (a huge object graph)."""

_SKIP_CLASS_ATTRS = {"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"}
_FRAMEWORK_ROOTS = {"torch", "tensorflow", "jax", "jaxlib", "keras", "tf_keras"}
_ATOMS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))


class Unfingerprintable(Exception):
    """The function or its arguments hold something whose value cannot be hashed."""


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    polygrad_dir = str(Path(__file__).resolve().parent)
    return tuple(sorted({os.path.realpath(r) for r in roots} | {polygrad_dir}))


@lru_cache(maxsize=4096)
def _is_library_module(name: str) -> bool:
    if name in sys.builtin_module_names or name.split(".")[0] in ("builtins", "polygrad"):
        return True
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None or path is None:
        return False  # __main__ of ``python -c``, a notebook: user code
    real = os.path.realpath(path)
    return any(real.startswith(root + os.sep) for root in _library_roots())


@lru_cache(maxsize=1024)
def _version(module_name: str) -> str:
    root = module_name.split(".")[0]
    module = sys.modules.get(root)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(root)
    except Exception:  # noqa: BLE001 - no distribution: the Python version stands for it
        return sys.version


def framework_version(name: str) -> str:
    """Version of the distribution that provides module ``name`` (``"torch"``...)."""
    return _version(name)


def _array_view(obj: Any) -> np.ndarray | None:
    """The values of a framework array as NumPy (None if ``obj`` is not one)."""
    root = type(obj).__module__.split(".")[0]
    if root not in _FRAMEWORK_ROOTS or not hasattr(obj, "dtype") or not hasattr(obj, "shape"):
        return None
    try:
        if hasattr(obj, "detach"):  # torch: a tensor or parameter
            t = obj.detach().cpu()
            if not t.dtype.is_floating_point and not t.dtype.is_complex:
                return np.asarray(t.numpy())
            return np.asarray(t.double().numpy() if not t.dtype.is_complex else t.numpy())
        if hasattr(obj, "numpy"):  # tensorflow tensor or variable
            return np.asarray(obj.numpy())
        return np.asarray(obj)
    except Exception as exc:  # noqa: BLE001 - a tracer, a symbolic tensor
        raise Unfingerprintable(f"a {type(obj).__name__} without concrete values") from exc


class _Hasher:
    """Feeds values into one digest; objects are memoised by id (cycles included)."""

    def __init__(self) -> None:
        self.memo: dict[int, bytes] = {}
        self.keep: list[Any] = []  # ids stay valid while hashing
        self.count = 0

    def digest(self, obj: Any) -> bytes:
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        self.count += 1
        if self.count > MAX_OBJECTS:
            raise Unfingerprintable(f"more than {MAX_OBJECTS} objects reachable")
        self.memo[key] = b"cycle:" + str(len(self.memo)).encode()
        self.keep.append(obj)
        h = hashlib.blake2b(digest_size=20)
        for part in self._parts(obj):
            h.update(part if isinstance(part, bytes) else self.digest(part))
        self.memo[key] = h.digest()
        return self.memo[key]

    def _parts(self, obj: Any) -> Iterable[Any]:
        if isinstance(obj, _ATOMS):
            return [f"{type(obj).__name__}:{obj!r}".encode()]
        if isinstance(obj, (np.ndarray, np.generic)):
            return _ndarray_parts(np.asarray(obj))
        if isinstance(obj, types.ModuleType):
            return [f"module:{obj.__name__}:{_version(obj.__name__)}".encode()]
        view = _array_view(obj)
        if view is not None:
            return [f"{type(obj).__name__}:{obj.dtype}".encode(), *_ndarray_parts(view)]
        for kind, parts in _KINDS:
            if isinstance(obj, kind):
                return parts(obj)
        return _object_parts(obj)


def _ndarray_parts(a: np.ndarray) -> list[Any]:
    head = f"ndarray:{a.dtype.str}:{a.shape}".encode()
    if a.dtype == object:
        return [head, *a.ravel().tolist()]
    return [head, np.ascontiguousarray(a).tobytes()]


def _library_name(obj: Any) -> bytes | None:
    module = getattr(obj, "__module__", None) or ""
    if not isinstance(module, str) or not _is_library_module(module):
        return None
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", type(obj).__name__))
    return f"lib:{module}:{name}:{_version(module)}".encode()


def _code_parts(code: types.CodeType) -> list[Any]:
    consts = [c for c in code.co_consts if not isinstance(c, types.CodeType)]
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [b"code", code.co_code, repr(code.co_names).encode(), repr(consts).encode(), *nested]


def _function_parts(fn: types.FunctionType) -> list[Any]:
    lib = _library_name(fn)
    if lib is not None:
        return [lib]
    parts: list[Any] = [b"function", fn.__code__, fn.__defaults__, fn.__kwdefaults__]
    for cell in fn.__closure__ or ():
        try:
            parts.append(cell.cell_contents)
        except ValueError:  # an empty cell (a name assigned later)
            parts.append(b"empty-cell")
    g = fn.__globals__
    for name in sorted(code_globals(fn.__code__)):
        if name in g:
            parts += [name.encode(), g[name]]
    parts.append(dict(getattr(fn, "__dict__", {})))
    return parts


def _class_parts(cls: type) -> list[Any]:
    lib = _library_name(cls)
    if lib is not None:
        return [lib]
    attrs = {k: v for k, v in vars(cls).items() if k not in _SKIP_CLASS_ATTRS}
    return [f"class:{cls.__qualname__}".encode(), *cls.__bases__, attrs]


def _object_parts(obj: Any) -> list[Any]:
    cls = type(obj)
    wrapped = getattr(obj, "__wrapped__", None) or getattr(obj, "python_function", None)
    if callable(wrapped) and wrapped is not obj:  # jax.jit, tf.function, functools.wraps
        return [f"wrapper:{cls.__module__}.{cls.__qualname__}".encode(), wrapped]
    state: dict[str, Any] = {}
    for klass in cls.__mro__:
        for slot in getattr(klass, "__slots__", ()):
            if isinstance(slot, str) and hasattr(obj, slot) and slot != "__weakref__":
                state[slot] = getattr(obj, slot)
    has_dict = hasattr(obj, "__dict__")
    if not has_dict and not state:
        raise Unfingerprintable(f"a {cls.__module__}.{cls.__qualname__} object")
    if has_dict:
        state.update(vars(obj))
    return [cls, state]


def _weights_parts(obj: Any) -> list[Any]:
    """A Keras-style object by its class, configuration and weights."""
    return [type(obj), repr(obj.get_config()).encode(), list(obj.get_weights())]


def _dict_parts(d: dict[Any, Any]) -> list[Any]:
    return [f"{type(d).__name__}".encode(), *[x for kv in d.items() for x in kv]]


def _set_parts(s: set[Any] | frozenset[Any]) -> list[Any]:
    h = _Hasher()
    return [b"set", *sorted(h.digest(x) for x in s)]


_KINDS: list[tuple[Any, Any]] = [
    (types.CodeType, _code_parts),
    (types.FunctionType, _function_parts),
    (types.MethodType, lambda m: [b"method", m.__func__, m.__self__]),
    (
        types.BuiltinFunctionType,
        lambda f: [
            f"builtin:{getattr(f, '__module__', '')}:{f.__qualname__}".encode(),
            f.__self__ if not isinstance(f.__self__, (types.ModuleType, type(None))) else b"",
        ],
    ),
    (np.ufunc, lambda u: [f"ufunc:{u.__name__}".encode()]),
    (type, _class_parts),
    (partial, lambda p: [b"partial", p.func, p.args, p.keywords]),
    ((tuple, list), lambda s: [f"{type(s).__name__}:{len(s)}".encode(), *s]),
    (dict, _dict_parts),
    ((set, frozenset), _set_parts),
    (types.CellType, lambda c: [b"cell", c.cell_contents]),
]


def fingerprint(*objs: Any) -> str:
    """Hex digest of ``objs`` (functions, arrays, options), stable across processes.

    Parameters
    ----------
    *objs
        Anything: functions and their closures/globals, arrays of any framework,
        nested containers, objects.

    Returns
    -------
    str
        40 hexadecimal digits.

    Raises
    ------
    Unfingerprintable
        Something reachable from ``objs`` has a value that cannot be hashed
        (see the module docstring).
    """
    h = hashlib.blake2b(digest_size=20)
    for obj in objs:
        h.update(_hash_one(obj))
    return h.hexdigest()


def _hash_one(obj: Any) -> bytes:
    try:
        return _Hasher().digest(obj)
    except Unfingerprintable:
        pass
    # the fallback: one object (a model) known by its configuration and weights, reached
    # directly or through a function's closure or globals
    return _WeightsHasher().digest(obj)


class _WeightsHasher(_Hasher):
    def _parts(self, obj: Any) -> Iterable[Any]:
        if not isinstance(obj, type) and hasattr(obj, "get_weights") and hasattr(obj, "get_config"):
            try:
                return _weights_parts(obj)
            except Exception as exc:  # noqa: BLE001 - a model without a config
                raise Unfingerprintable(f"a {type(obj).__qualname__} without get_config") from exc
        return super()._parts(obj)
