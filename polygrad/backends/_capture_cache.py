"""A bounded cache of captured programs, keyed by the function and everything it froze.

Capturing a function (``make_fx`` in PyTorch, a jaxpr or ``jax.jit`` compilation
in JAX, a ``tf.function`` trace in TensorFlow) costs far more than checking a
small function, and a test suite checks the same function again and again (a
parametrization, a loop over points). A backend asks :data:`CAPTURES` for a
captured program with a key naming the function, the checked inputs' shapes and
dtypes and what was captured, and a builder to call on a miss.

A capture freezes more than the function's code: the values of closed-over
tensors, of globals it reads, of the arguments that are not checked, of the
weights of the models it calls. A hit therefore also requires the *state
signature* of all of these (:func:`state_signature`) to be unchanged:

* a PyTorch tensor by identity, ``_version`` (bumped by every in-place
  operation, an optimizer step included) and storage address;
* a TensorFlow variable (Keras weights included) by identity and a hash of its
  value (``assign`` leaves no cheaper trace);
* a NumPy array by its shape, dtype and a hash of its bytes;
* immutable arrays (``jax.Array``, eager ``tf.Tensor``) by value (shape, dtype and
  a hash of their bytes) up to :data:`VALUE_HASH_SIZE` entries, by identity beyond;
* numbers and strings by value;
* functions by their code, their closure cells, defaults and the globals their
  code reads, recursively; other objects by identity and their attributes,
  recursively.

So a new function object with the same code over equal values (a pytest
parametrization builds a new lambda over new constants for every case) finds the
capture of the first: a test suite traces each function once, not once per test.
Such a hit is taken only while the state of the function the entry was built from
still has the signature it had (the capture may call that function, or read its
arrays), so a value changed in place since is never served to an equal-looking
newcomer.

Every object whose identity enters a signature is kept alive by the entry, so an
identity cannot be reused by another object while the entry lives. When a
signature cannot be formed with confidence (too deep, too large, an attribute
that cannot be read), the function is not cached at all.

The cache is bounded twice: by entries (:data:`MAX_ENTRIES`; one function's check
makes up to about seven, one per kind of capture, so a test module over a few dozen
functions finds each one's captures again on its next point), and by the bytes of
the arrays the entries keep alive (:data:`MAX_KEPT_BYTES`, each array counted once),
so that the models of finished tests are not held for the rest of a test run.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "CAPTURES",
    "CaptureCache",
    "Uncacheable",
    "code_globals",
    "frozen_state",
    "kept_arrays",
    "state_signature",
]

T = TypeVar("T")

MAX_DEPTH = 16
"""Deepest nesting of containers, attributes and closures followed."""

MAX_ITEMS = 20000
"""Most objects visited for one signature; a larger state is not cached."""

MAX_ENTRIES = 256
"""Most captures kept by :data:`CAPTURES` (least recently used dropped first)."""

MAX_KEPT_BYTES = 1 << 29
"""Most bytes of arrays (tensors, variables) that :data:`CAPTURES`' entries keep alive,
each array counted once (512 MiB); beyond it the least recently used entries go,
though never the newest."""

VALUE_HASH_SIZE = 1 << 16
"""Largest immutable array (entries) summarised by value; larger ones by identity (a
hash per check would cost more than it saves)."""


class Uncacheable(Exception):
    """The state a capture depends on cannot be summarised with confidence."""


@dataclass
class _Walk:
    """Objects kept alive by a signature, and the ids already visited."""

    keep: list[Any] = field(default_factory=list)
    seen: dict[int, int] = field(default_factory=dict)  # id -> order of first visit


def _array_hash(a: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest()


def _framework_leaf(v: Any) -> tuple[Any, ...] | None:
    """The signature of a tensor, variable or array; None for other objects."""
    if isinstance(v, np.ndarray):
        return ("ndarray", v.shape, v.dtype.str, _array_hash(v))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        ptr = v.data_ptr() if v.layout == torch.strided and not v.is_meta else 0
        return ("tensor", id(v), v._version, ptr, tuple(v.shape), str(v.dtype), v.requires_grad)
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(v, jax.Array):
        return ("jax", *_immutable(v, lambda: np.asarray(v)))
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(v, tf.Variable):
        return ("tfvar", id(v), v.dtype.name, _array_hash(np.asarray(v.numpy())), v.trainable)
    if tf is not None and isinstance(v, tf.Tensor) and hasattr(v, "numpy"):
        return ("tftensor", *_immutable(v, v.numpy))
    return None


def _array_bytes(v: Any) -> int | None:
    """Bytes of a framework array, tensor or variable; None for other objects."""
    if not _framework_leaf_kind(v):
        return None
    if isinstance(v, np.ndarray):
        return int(v.nbytes)
    size = getattr(v, "nbytes", None)  # jax.Array
    if isinstance(size, int):
        return size
    numel = getattr(v, "numel", None)  # torch.Tensor
    if callable(numel) and hasattr(v, "element_size"):
        return int(numel()) * int(v.element_size())
    shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)  # TensorFlow
    try:
        return int(np.prod(tuple(shape or ()))) * int(getattr(dtype, "size", 8))
    except (TypeError, ValueError):  # an unknown dimension
        return 0


def kept_arrays(keep: list[Any]) -> dict[int, int]:
    """``{id: bytes}`` of the framework arrays among the objects a signature keeps alive.

    Parameters
    ----------
    keep : list
        The ``keep`` list of :func:`state_signature`.

    Returns
    -------
    dict of int to int
        The id and size in bytes of each array, tensor or variable in ``keep``.
    """
    out: dict[int, int] = {}
    for v in keep:
        size = _array_bytes(v)
        if size is not None:
            out[id(v)] = size
    return out


def _immutable(v: Any, values: Callable[[], np.ndarray]) -> tuple[Any, ...]:
    """An immutable array's signature: by value when small, else by identity."""
    size = int(np.prod(getattr(v, "shape", ()) or (1,)))
    if size > VALUE_HASH_SIZE:
        return ("id", id(v))
    try:
        a = np.asarray(values())
    except Exception:  # noqa: BLE001 - not concrete (a tracer), on a device that will not copy
        return ("id", id(v))
    return (a.shape, a.dtype.str, _array_hash(a))


def _framework_leaf_kind(v: Any) -> bool:
    """Whether ``v`` is an array, a tensor or a variable of a loaded framework."""
    if isinstance(v, np.ndarray):
        return True
    kinds = [
        getattr(sys.modules.get("torch"), "Tensor", None),
        getattr(sys.modules.get("jax"), "Array", None),
        getattr(sys.modules.get("tensorflow"), "Tensor", None),
        getattr(sys.modules.get("tensorflow"), "Variable", None),
    ]
    return any(isinstance(k, type) and isinstance(v, k) for k in kinds)


def _variables_of(v: Any) -> list[Any] | None:
    """The variables of a Keras layer or ``tf.Module``, or None for other objects."""
    tf = sys.modules.get("tensorflow")
    keras = sys.modules.get("keras")
    kinds = tuple(
        k
        for k in (
            getattr(tf, "Module", None),
            getattr(getattr(keras, "layers", None), "Layer", None),
        )
        if isinstance(k, type)
    )
    if not kinds or not isinstance(v, kinds):
        return None
    try:
        return list(getattr(v, "variables", []) or [])
    except Exception as exc:  # noqa: BLE001 - a layer that is not built, a broken property
        raise Uncacheable(f"cannot list the variables of {type(v).__name__}") from exc


def code_globals(code: types.CodeType) -> set[str]:
    """Names a code object (and the code nested in it) may read as globals.

    Parameters
    ----------
    code : types.CodeType
        A function's ``__code__``.

    Returns
    -------
    set of str
        Its ``co_names`` and those of the code objects among its constants (nested
        functions, lambdas, comprehensions), recursively: a superset of the globals
        it reads (attribute names are among them).
    """
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= code_globals(const)
    return names


def _function(fn: types.FunctionType, walk: _Walk, depth: int) -> tuple[Any, ...]:
    cells = tuple(_cell(c, walk, depth) for c in fn.__closure__ or ())
    reads = sorted(code_globals(fn.__code__) & fn.__globals__.keys())
    glob = tuple((name, _sig(fn.__globals__[name], walk, depth + 1)) for name in reads)
    defaults = _sig((fn.__defaults__, fn.__kwdefaults__), walk, depth + 1)
    return ("function", id(fn.__code__), id(fn.__globals__), cells, glob, defaults)


def _cell(cell: Any, walk: _Walk, depth: int) -> Any:
    try:
        content = cell.cell_contents
    except ValueError:  # an empty cell (a name assigned later)
        return ("empty",)
    return _sig(content, walk, depth + 1)


def _sig(v: Any, walk: _Walk, depth: int) -> Any:  # noqa: C901, PLR0911 - one case per kind
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return v if not isinstance(v, float) or v == v else ("nan",)
    if isinstance(v, (types.ModuleType, type, types.BuiltinFunctionType)):
        walk.keep.append(v)
        return ("id", id(v))
    if depth > MAX_DEPTH or len(walk.seen) > MAX_ITEMS:
        raise Uncacheable("the state the function reads is too deep or too large")
    if id(v) in walk.seen:
        return ("again", walk.seen[id(v)])
    walk.seen[id(v)] = len(walk.seen)
    walk.keep.append(v)
    leaf = _framework_leaf(v)
    if leaf is not None:
        return leaf
    if isinstance(v, np.generic):
        return ("scalar", v.dtype.str, v.tobytes())
    if isinstance(v, (tuple, list, set, frozenset)):
        items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
        return (type(v).__name__, tuple(_sig(x, walk, depth + 1) for x in items))
    if isinstance(v, dict):
        return (
            "dict",
            tuple((_sig(k, walk, depth + 1), _sig(x, walk, depth + 1)) for k, x in v.items()),
        )
    if isinstance(v, types.FunctionType):
        return _function(v, walk, depth)
    if isinstance(v, types.MethodType):
        return ("method", _sig(v.__func__, walk, depth + 1), _sig(v.__self__, walk, depth + 1))
    wrapped = getattr(v, "__wrapped__", None)
    if callable(v) and wrapped is not None:  # jax.jit, tf.function, functools.wraps
        return ("wrapped", id(v), type(v).__qualname__, _sig(wrapped, walk, depth + 1))
    variables = _variables_of(v)
    if variables is not None:
        # its variables, the tensors and arrays it holds (private ones too: a tfp
        # distribution keeps loc and scale as _loc, _scale), and its public settings
        own = tuple(
            (k, _sig(x, walk, depth + 1))
            for k, x in vars(v).items()
            if _framework_leaf_kind(x)
            or (not k.startswith("_") and isinstance(x, (bool, int, float, str)))
        )
        return ("layer", id(v), tuple(_sig(x, walk, depth + 1) for x in variables), own)
    return _object(v, walk, depth)


def _object(v: Any, walk: _Walk, depth: int) -> tuple[Any, ...]:
    """Any other object: its identity and its attributes (``__dict__``, ``__slots__``)."""
    attrs: dict[str, Any] = {}
    try:
        attrs.update(vars(v))
    except TypeError:
        pass
    for name in getattr(type(v), "__slots__", ()):
        if isinstance(name, str) and hasattr(v, name):
            attrs[name] = getattr(v, name)
    if isinstance(v, functools.partial):  # keeps its parts in C slots
        attrs.update(func=v.func, args=v.args, keywords=v.keywords)
    return (
        "object",
        id(v),
        type(v).__qualname__,
        tuple((k, _sig(x, walk, depth + 1)) for k, x in attrs.items()),
    )


def state_signature(*objects: Any) -> tuple[Hashable, list[Any]]:
    """A hashable summary of everything ``objects`` hold that a capture may freeze.

    Parameters
    ----------
    *objects
        The function, the arguments that are not checked, and anything else the
        capture read.

    Returns
    -------
    signature : tuple
        Equal for two calls exactly when nothing the capture froze can have
        changed (see the module docstring for what is compared, per kind).
    keep : list
        The objects whose identities the signature names; the cache holds them
        so that their ids stay unique while the entry lives.

    Raises
    ------
    Uncacheable
        The state is too deep or too large to summarise (then do not cache).
    """
    walk = _Walk()
    try:
        sig = tuple(_sig(o, walk, 0) for o in objects)
    except Uncacheable:
        raise
    except RecursionError as exc:
        raise Uncacheable("the state the function reads is too deep") from exc
    return sig, walk.keep


def frozen_state(f: Any, args: tuple[Any, ...], argnums: tuple[int, ...] | None) -> tuple[Any, ...]:
    """What a capture of ``f`` at ``args`` freezes: ``f`` and the arguments not checked.

    Parameters
    ----------
    f : callable
        The user's function (its closure and globals are followed).
    args : tuple
        Its arguments.
    argnums : tuple of int or None
        The checked arguments, whose values a capture does not freeze (only
        their shapes and dtypes, which belong in the key); None when all the
        arguments are frozen (checks with respect to a model's parameters).

    Returns
    -------
    tuple
        ``(f, *frozen_args)``, the ``state`` for :meth:`CaptureCache.get`.
    """
    checked = {i % len(args) for i in argnums} if argnums is not None and args else set()
    return (f, *(a for i, a in enumerate(args) if i not in checked))


@dataclass
class _Entry:
    signature: Hashable
    keep: list[Any]
    value: Any
    state: tuple[Any, ...]
    owner: Hashable  # (kind, key, id of the function it was built from)
    arrays: dict[int, int] = field(default_factory=dict)  # id -> bytes of what it keeps

    def still_valid(self, state: tuple[Any, ...]) -> bool:
        """Whether a hit for ``state`` may be served: the same objects, or the objects
        this entry was built from still have the signature they had then."""
        if len(state) == len(self.state) and all(
            a is b for a, b in zip(state, self.state, strict=True)
        ):
            return True
        try:
            return state_signature(*self.state)[0] == self.signature
        except (Uncacheable, TypeError):
            return False


class CaptureCache:
    """A least-recently-used cache of captured programs.

    Parameters
    ----------
    maxsize : int
        Most entries kept; the least recently used is dropped first.
    max_bytes : int
        Most bytes of arrays the entries keep alive (each array counted once); the
        least recently used entries are dropped until the rest fit, but never the
        newest.

    Attributes
    ----------
    builds : dict of str to int
        How many times each kind of capture was built (a miss), for tests and
        benchmarks.
    """

    def __init__(self, maxsize: int = MAX_ENTRIES, max_bytes: int = MAX_KEPT_BYTES) -> None:
        self.maxsize = int(maxsize)
        self.max_bytes = int(max_bytes)
        self.builds: dict[str, int] = {}
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._owned: dict[Hashable, Hashable] = {}  # owner -> slot of its latest entry
        self._lock = threading.Lock()

    def get(self, kind: str, key: Hashable, state: tuple[Any, ...], build: Callable[[], T]) -> T:
        """The cached capture for ``(kind, key)``, or ``build()`` (then cached).

        Parameters
        ----------
        kind : str
            What is captured, e.g. ``"torch.mp"``.
        key : hashable
            Shapes, dtypes, argnums and anything else that selects the capture.
        state : tuple
            The objects whose state the capture froze (the function first); see
            :func:`state_signature`. A hit needs an equal signature.
        build : callable
            Makes the capture; called on a miss, and whenever the state cannot
            be summarised (then nothing is cached).

        Returns
        -------
        object
            What ``build`` returned, now or on an earlier call.
        """
        try:
            signature, keep = state_signature(*state)
            slot = (kind, key, signature)
            owner = (kind, key, id(state[0]) if state else None)
            hash(slot)
        except (Uncacheable, TypeError):
            return self._build(kind, build)
        with self._lock:
            entry = self._entries.get(slot)
        if entry is not None and entry.still_valid(state):
            with self._lock:
                if slot in self._entries:
                    self._entries.move_to_end(slot)
            return entry.value  # type: ignore[no-any-return]
        value = self._build(kind, build)  # a miss, or a stale entry replaced
        with self._lock:
            # the function's previous capture (its state has changed since) is dropped
            stale = self._owned.pop(owner, None)
            if stale is not None:
                self._drop(stale)
            self._drop(slot)
            arrays = kept_arrays(keep)
            self._entries[slot] = _Entry(signature, keep, value, tuple(state), owner, arrays)
            self._owned[owner] = slot
            while len(self._entries) > self.maxsize or (
                len(self._entries) > 1 and self.kept_bytes() > self.max_bytes
            ):
                self._drop(next(iter(self._entries)))
        return value

    def kept_bytes(self) -> int:
        """Bytes of the arrays the entries keep alive, each array counted once."""
        seen: dict[int, int] = {}
        for entry in self._entries.values():
            seen.update(entry.arrays)
        return sum(seen.values())

    def _drop(self, slot: Hashable) -> None:
        """Remove an entry and its owner's record of it (with the lock held)."""
        entry = self._entries.pop(slot, None)
        if entry is not None and self._owned.get(entry.owner) == slot:
            del self._owned[entry.owner]

    def _build(self, kind: str, build: Callable[[], T]) -> T:
        self.builds[kind] = self.builds.get(kind, 0) + 1
        return build()

    def clear(self) -> None:
        """Drop every entry (the build counters are kept)."""
        with self._lock:
            self._entries.clear()
            self._owned.clear()


CAPTURES = CaptureCache()
"""The process-wide cache the backends share."""
