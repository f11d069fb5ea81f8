"""Framework backends: a registry, chosen from the arrays a user passes.

Backends are registered by name with :func:`register_backend`; the built-in
ones (NumPy, PyTorch, JAX, TensorFlow) through the same call as any other.
Other packages add theirs through the ``polygrad.backends`` entry-point group::

    [project.entry-points."polygrad.backends"]
    autograd = "polygrad_autograd:AutogradBackend"

The entry point names the backend and points at its :class:`Backend`
subclass; it is loaded the first time polygrad needs a backend it has not
found yet, and the module it points at must not import its framework (as
polygrad's own backend modules do not).

No framework is imported to recognise arrays: a backend's arrays are looked
for only when its framework's module is already in ``sys.modules`` (if the
user has not imported torch, nothing they pass can be a ``torch.Tensor``),
or by the backend's own ``owns`` test, which must not import it either.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._args import normalize_argnums
from .._install import pip_install
from .._names import argument_names
from .._pytree import flatten
from ..errors import InputTypeError, MissingBackendError
from .base import Backend

__all__ = [
    "BACKEND_MODULES",
    "DEFAULT_BACKEND",
    "ENTRY_POINT_GROUP",
    "BackendEntry",
    "available_backends",
    "backend_class",
    "backend_entries",
    "canonical_name",
    "front_door",
    "get_backend",
    "owning_backend",
    "register_backend",
    "reject_number_lists",
    "select_backend",
    "unregister_backend",
]

ENTRY_POINT_GROUP = "polygrad.backends"
"""The entry-point group through which other packages add backends."""

DEFAULT_BACKEND = "numpy"
"""The backend of arguments that no registered backend owns (NumPy arrays, floats)."""

Factory = type[Backend] | Callable[[], Backend] | str
"""A :class:`Backend` subclass, a callable returning a backend, or ``"module:attribute"``."""


@dataclass(frozen=True)
class BackendEntry:
    """One registered backend.

    Attributes
    ----------
    name : str
        The name used with ``backend=``.
    factory : Backend subclass, callable or str
        What makes the backend: a class, a zero-argument callable, or an import
        string ``"package.module:Class"`` loaded on first use.
    owns : callable or None
        ``owns(obj) -> bool``: whether ``obj`` is one of this backend's arrays,
        without importing the framework. None: the backend class's
        :meth:`Backend.owns`, asked only when ``module`` is already imported.
    module : str
        The framework's top-level module (``"torch"``); empty when none.
    extra : str
        The pip extra (of polygrad) that installs the framework; empty when none.
    origin : str
        ``"polygrad"``, ``"entry point <distribution>"`` or ``"register_backend"``.
    error : str or None
        Why a discovered entry point could not be loaded.
    """

    name: str
    factory: Factory
    owns: Callable[[Any], bool] | None = None
    module: str = ""
    extra: str = ""
    origin: str = "register_backend"
    error: str | None = None

    @property
    def installed(self) -> bool:
        """Whether the backend and its framework can be imported (nothing is imported)."""
        if self.error is not None:
            return False
        return not self.module or importlib.util.find_spec(self.module) is not None


_REGISTRY: dict[str, BackendEntry] = {}
_ALIASES: dict[str, str] = {}
BACKEND_MODULES: dict[str, tuple[str, str, str]] = {}
"""Read-only view kept for older callers: name -> (``"module:Class"``, extra, framework module)."""
_DISCOVERED = False


def _spec_string(factory: Factory) -> str:
    if isinstance(factory, str):
        return factory
    return f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', '?')}"


def register_backend(
    name: str,
    factory: Factory,
    *,
    owns: Callable[[Any], bool] | None = None,
    module: str | None = None,
    extra: str | None = None,
    aliases: tuple[str, ...] = (),
    replace_existing: bool = False,
    origin: str = "register_backend",
) -> BackendEntry:
    """Register a backend under ``name``.

    Parameters
    ----------
    name : str
        The name used with ``backend=`` (lower-cased).
    factory : Backend subclass, callable or str
        A :class:`Backend` subclass, a zero-argument callable returning a
        backend instance, or an import string ``"package.module:Class"``
        (imported the first time the backend is needed).
    owns : callable, optional
        ``owns(obj) -> bool``, recognising the backend's arrays. It must not
        import the framework (test ``type(obj).__module__`` or ``sys.modules``).
        Default: the class's :meth:`Backend.owns`, asked only when ``module``
        is in ``sys.modules``.
    module : str, optional
        The framework's top-level module; default: the class's ``module``
        when ``factory`` is a class, else none.
    extra : str, optional
        The pip extra that installs the framework; default: the class's ``extra``.
    aliases : tuple of str
        Other names for the backend (``"tf"`` for ``"tensorflow"``).
    replace_existing : bool
        Allow replacing a backend registered under the same name.

    Returns
    -------
    BackendEntry

    Raises
    ------
    ValueError
        ``name`` (or an alias) is already registered and ``replace_existing`` is false.
    TypeError
        ``factory`` is not a class, callable or import string, or ``owns`` is not callable.
    """
    key = name.strip().lower()
    if not (isinstance(factory, str) or callable(factory)):
        raise TypeError(f"backend {name!r}: factory must be a Backend class, callable or string")
    if owns is not None and not callable(owns):
        raise TypeError(f"backend {name!r}: owns must be a callable obj -> bool")
    taken = [n for n in (key, *aliases) if n in _REGISTRY or n in _ALIASES]
    if taken and not replace_existing:
        raise ValueError(f"backend name {taken[0]!r} is already registered")
    cls = factory if isinstance(factory, type) else None
    entry = BackendEntry(
        key,
        factory,
        owns,
        getattr(cls, "module", "") if module is None else module,
        getattr(cls, "extra", "") if extra is None else extra,
        origin,
    )
    _REGISTRY[key] = entry
    for alias in aliases:
        _ALIASES[alias.strip().lower()] = key
    BACKEND_MODULES[key] = (_spec_string(factory), entry.extra, entry.module)
    return entry


def unregister_backend(name: str) -> None:
    """Remove backend ``name`` and its aliases from the registry.

    Raises
    ------
    KeyError
        No backend of that name is registered.
    """
    key = name.strip().lower()
    del _REGISTRY[key]
    BACKEND_MODULES.pop(key, None)
    for alias in [a for a, target in _ALIASES.items() if target == key]:
        del _ALIASES[alias]


def _discover() -> None:
    """Register the ``polygrad.backends`` entry points not yet known, unloaded."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = ep.name.strip().lower()
        if key in _REGISTRY or key in _ALIASES:
            continue
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        register_backend(key, ep.value, origin=f"entry point {dist}", module="", extra="")


def _load(entry: BackendEntry) -> BackendEntry:
    """A discovered entry point imported, with its class's module and extra read.

    Other entries are returned as they are: their framework module was given
    when they were registered, and their class is imported only when needed.
    """
    discovered = entry.origin.startswith("entry point")
    if not (discovered and isinstance(entry.factory, str)) or entry.error is not None:
        return entry
    mod_name, _, attr = entry.factory.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, not fatal
        bad = replace(entry, error=f"{type(exc).__name__}: {exc}")
        _REGISTRY[entry.name] = bad
        return bad
    loaded = replace(
        entry,
        factory=obj,
        module=entry.module or getattr(obj, "module", ""),
        extra=entry.extra or getattr(obj, "extra", ""),
    )
    _REGISTRY[entry.name] = loaded
    BACKEND_MODULES[entry.name] = (entry.factory, loaded.extra, loaded.module)
    return loaded


def canonical_name(name: str) -> str | None:
    """The registered name that ``name`` (or an alias such as ``"tf"``) stands for, or None."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _REGISTRY:
        _discover()
    return key if key in _REGISTRY else None


def backend_entries(load: bool = False) -> dict[str, BackendEntry]:
    """Every registered and discovered backend, by name.

    Parameters
    ----------
    load : bool
        Import the modules that discovered entry points name (never a
        framework), so that their ``module`` and ``installed`` are known.
        Default: entry points are listed without being imported.

    Returns
    -------
    dict of str to BackendEntry
        In registration order: the built-in backends first.
    """
    _discover()
    if load:
        for entry in list(_REGISTRY.values()):
            _load(entry)
    return dict(_REGISTRY)


def _entry(name: str) -> BackendEntry:
    key = canonical_name(name)
    if key is None:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(backend_entries())}")
    return _load(_REGISTRY[key])


def backend_class(name: str) -> type[Backend]:
    """The :class:`Backend` subclass of backend ``name`` (its framework is not imported).

    Raises
    ------
    ValueError
        Unknown name.
    MissingBackendError
        The backend's own module cannot be imported.
    """
    entry = _entry(name)
    if entry.error is not None:
        raise MissingBackendError(f"backend {entry.name!r} is not available: {entry.error}")
    factory = entry.factory
    if isinstance(factory, str):
        mod_name, _, attr = factory.partition(":")
        try:
            return getattr(importlib.import_module(mod_name), attr)  # type: ignore[no-any-return]
        except ModuleNotFoundError as exc:
            raise MissingBackendError(f"backend {entry.name!r} is not available: {exc}") from exc
    if isinstance(factory, type):
        return factory
    return type(factory())


_backend_class = backend_class  # the name older callers import


def get_backend(name: str) -> Backend:
    """Instantiate a backend by name (``"numpy"``, ``"torch"``, ``"jax"``, ``"tensorflow"``...).

    Raises
    ------
    ValueError
        Unknown name.
    MissingBackendError
        The framework is not installed; the message names the extra to install.
    """
    entry = _entry(name)
    if entry.module and importlib.util.find_spec(entry.module) is None:
        how = pip_install(entry.extra) if entry.extra else f"pip install {entry.module}"
        raise MissingBackendError(
            f"backend {entry.name!r} needs {entry.module!r}, which is not installed; install "
            f"it with: {how}"
        )
    factory = entry.factory
    if isinstance(factory, str) or isinstance(factory, type):
        return backend_class(entry.name)()
    return factory()


def _owns(entry: BackendEntry, obj: Any) -> bool:
    if entry.owns is not None:
        return bool(entry.owns(obj))
    if not entry.module or entry.module not in sys.modules:
        return False
    return backend_class(entry.name).owns(obj)


def owning_backend(obj: Any) -> str | None:
    """The name of the backend whose array ``obj`` is, or None (NumPy arrays and numbers).

    Only backends whose framework is imported, or that test ownership themselves,
    are asked; nothing is imported but backends' own (framework-free) modules.
    """
    for entry in list(backend_entries().values()):
        entry = _load(entry)
        if entry.name == DEFAULT_BACKEND or entry.error is not None:
            continue
        if _owns(entry, obj):
            return entry.name
    return None


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


def front_door(
    caller: str, f: Any, args: tuple[Any, ...], argnums: int | tuple[int, ...], backend: str | None
) -> tuple[Backend, tuple[int, ...]]:
    """What every entry point (``check``, ``sweep``, ``taylor_test``) does first: the
    point given, ``argnums`` normalized, no list of numbers checked, the backend chosen.

    Parameters
    ----------
    caller : str
        The entry point's name, for the error message (``"check"``).
    f, args, argnums, backend
        As passed to it.

    Returns
    -------
    (Backend, tuple of int)
        The backend and the checked argument positions.

    Raises
    ------
    TypeError
        No arguments, or arrays of several frameworks.
    ValueError, InputTypeError, MissingBackendError
        As :func:`polygrad._args.normalize_argnums`, :func:`reject_number_lists` and
        :func:`select_backend` raise them.
    """
    if not args:
        raise TypeError(f"{caller}(f, *args): pass the point at which to {_VERBS[caller]}")
    argnums_t = normalize_argnums(argnums, len(args))
    reject_number_lists(f, args, argnums_t)
    return select_backend(args, backend), argnums_t


_VERBS = {
    "check": "check the derivative",
    "sweep": "sweep",
    "taylor_test": "test",
}


def select_backend(args: tuple[Any, ...], name: str | None = None) -> Backend:
    """Pick the backend from the array types in ``args`` (or by ``name``).

    Frameworks the user has not imported are never imported here. Mixing
    arrays of two frameworks is an error.

    Raises
    ------
    TypeError
        The arguments hold arrays of several backends.
    ValueError, MissingBackendError
        As :func:`get_backend`, for ``name``.
    """
    if name is not None:
        return get_backend(name)
    leaves, _, _ = flatten(list(args))
    found = {owner for leaf in leaves if (owner := owning_backend(leaf)) is not None}
    if len(found) > 1:
        raise TypeError(
            f"the arguments mix arrays of several frameworks ({', '.join(sorted(found))}); "
            "pass arrays of one framework, or name it with backend="
        )
    return get_backend(found.pop() if found else DEFAULT_BACKEND)


def available_backends() -> dict[str, bool]:
    """Which registered and discovered backends are installed (no framework is imported)."""
    return {key: entry.installed for key, entry in backend_entries(load=True).items()}


def _register_builtins() -> None:
    builtins = (
        ("numpy", "NumpyBackend", "", ("np",)),
        ("torch", "TorchBackend", "torch", ("pytorch",)),
        ("jax", "JaxBackend", "jax", ()),
        ("tensorflow", "TensorflowBackend", "tensorflow", ("tf", "keras")),
    )
    for key, cls_name, framework, aliases in builtins:
        register_backend(
            key,
            f"polygrad.backends.{key}:{cls_name}",
            module=framework,
            extra=framework,
            aliases=aliases,
            origin="polygrad",
        )


_register_builtins()
