"""The inputs of ``polygrad check | sweep | taylor``: expressions, array files, factories.

The command line reads the point at which a function is checked in one of
three ways:

* ``--arg EXPR``, once per positional argument of the function, in order.
  ``EXPR`` is a Python expression evaluated with ``np`` (NumPy) and ``math``
  in scope (``"np.full(1000, 100.0)"``, ``"[1.0, 2.0]"``, ``"0.5"``), or
  ``@file.npy`` / ``@file.npz:key`` for an array saved with NumPy.
* ``--at "1.0, 2.0"``, the older form for one argument: numbers or a JSON
  nested list.
* a factory, ``make()`` in the user's file, which returns ``(f, args)`` or
  ``(f, args, options)``: the function (a closure over a model, say), its
  arguments in the user's own framework and dtype, and keyword options of
  :func:`polygrad.check`. Models and loss objects are built by the user's
  code, the way they are built for training.

Dtypes: a value without a dtype of its own (a number, a list, ``--at``) gets
``--dtype`` (default float32); a NumPy array keeps its dtype unless ``--dtype``
is given; an integer array at a differentiated position becomes floating in the
same way. Only floating arrays are cast. The arrays are then converted into
the backend's arrays (``torch.tensor``, ``jnp.asarray``, ``tf.constant``).
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputTypeError

__all__ = [
    "FLOAT_DTYPES",
    "Call",
    "UsageError",
    "call_factory",
    "convert_arguments",
    "parse_argnums",
    "parse_point",
    "read_argument",
]

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
DEFAULT_DTYPE = "float32"


class UsageError(Exception):
    """Bad command-line usage: reported on stderr, exit status 2."""


@dataclass(frozen=True)
class Call:
    """What a command checks: ``f(*args)`` with keyword ``options`` for check/sweep/taylor.

    Attributes
    ----------
    f : callable
        The user's function.
    args : tuple
        Its positional arguments, arrays of the backend (or what a factory returned).
    options : dict
        Keyword options (``argnums``, ``backend``, ``grad``, ``reference``, ...).
    """

    f: Callable[..., Any]
    args: tuple[Any, ...]
    options: dict[str, Any]


def parse_point(text: str) -> np.ndarray:
    """``"1.0, 2.0"`` → ``array([1., 2.])``; JSON nested lists give arrays of that shape.

    Parameters
    ----------
    text : str
        Comma-separated numbers, or a JSON array (nested for several dimensions).

    Returns
    -------
    ndarray of float64
        The point, shaped as written.

    Raises
    ------
    UsageError
        The text is not a comma-separated list of numbers or a JSON array.
    """
    t = text.strip()
    if not t.startswith("["):
        t = "[" + t + "]"
    try:
        arr = np.asarray(json.loads(t), dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise UsageError(f'--at {text!r}: expected numbers such as "1.0, 2.0" ({exc})') from exc
    if arr.size == 0:
        raise UsageError("--at: the point is empty")
    return arr


def parse_argnums(text: str | None) -> int | tuple[int, ...] | None:
    """``"1"`` → ``1``; ``"0,2"`` → ``(0, 2)``; ``None`` → ``None``.

    Raises
    ------
    UsageError
        A part is not an integer.
    """
    if text is None:
        return None
    try:
        parts = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise UsageError(f'--argnums {text!r}: expected positions such as "0" or "0,2"') from None
    if not parts:
        raise UsageError("--argnums: no position given")
    return parts[0] if len(parts) == 1 and "," not in text else parts


def _load_array_file(spec: str) -> np.ndarray:
    """``file.npy`` or ``file.npz[:key]`` → the array (no pickles are loaded)."""
    path, key = spec, None
    if ".npz:" in spec:
        path, _, key = spec.rpartition(":")
    p = Path(path)
    if p.suffix not in (".npy", ".npz"):
        raise UsageError(f"--arg @{spec}: expected a .npy file or file.npz:key")
    if not p.is_file():
        raise UsageError(f"--arg @{spec}: no such file: {path}")
    try:
        data = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--arg @{spec}: cannot read {path} as a NumPy array ({exc})") from exc
    if isinstance(data, np.ndarray):
        return data
    with data:
        keys = list(data.keys())
        if key is None and len(keys) == 1:
            key = keys[0]
        if key not in keys:
            wanted = "name one with file.npz:key" if key is None else f"it has no array {key!r}"
            raise UsageError(f"--arg @{spec}: {path} holds {', '.join(keys)}; {wanted}")
        return np.asarray(data[key])


def _evaluate(text: str) -> Any:
    """A Python expression with ``np``, ``numpy`` and ``math`` in scope."""
    scope = {"np": np, "numpy": np, "math": math}
    try:
        return eval(text, scope)  # noqa: S307 - the user's own expression, as in python -c
    except SyntaxError as exc:
        raise UsageError(f"--arg {text!r}: not a Python expression ({exc.msg})") from exc
    except Exception as exc:  # noqa: BLE001 - any error of the user's expression is usage
        raise UsageError(
            f"--arg {text!r}: evaluating it raised {type(exc).__name__}: {exc} "
            "(np, numpy and math are available)"
        ) from exc


def read_argument(kind: str, text: str) -> Any:
    """One argument as written on the command line.

    Parameters
    ----------
    kind : {"at", "arg"}
        ``--at`` (numbers, JSON list) or ``--arg`` (expression or ``@file``).
    text : str
        What followed the option.

    Returns
    -------
    object
        Nested lists of floats for ``--at``; an ndarray for a file; the value of
        the expression otherwise (a number, a list, an ndarray, a string).

    Raises
    ------
    UsageError
        A bad expression, a missing or unreadable file, an unknown ``.npz`` key.
    """
    if kind == "at":
        return parse_point(text).tolist()  # numbers without a dtype of their own
    t = text.strip()
    if t.startswith("@"):
        return _load_array_file(t[1:])
    return _evaluate(t)


def _as_array(value: Any) -> np.ndarray | None:
    """``value`` as a numeric ndarray (with a flag for "had no dtype"), or None."""
    if isinstance(value, (str, bytes, dict)) or value is None:
        return None
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        return None
    return arr if arr.dtype.kind in "fiub" else None


def _target_dtype(arr: np.ndarray, typed: bool, dtype: str | None, diff: bool) -> str | None:
    """The floating dtype ``arr`` becomes, or None to leave it as it is."""
    if arr.dtype.kind == "f":
        return dtype if dtype is not None else (None if typed else DEFAULT_DTYPE)
    if diff and arr.dtype.kind in "iub":
        return dtype or DEFAULT_DTYPE
    return None


def _to_backend(arr: np.ndarray, backend: str, dtype: str | None) -> Any:
    """``arr`` (cast to ``dtype`` when given) as an array of ``backend`` (its ``asarray`` hook)."""
    from .backends import get_backend

    try:
        return get_backend(backend).asarray(arr, dtype)
    except ValueError as exc:  # unknown backend name
        raise UsageError(str(exc)) from None
    except InputTypeError as exc:  # the framework has no such dtype
        raise UsageError(str(exc)) from None


def convert_arguments(
    values: Sequence[Any], backend: str, dtype: str | None, argnums: tuple[int, ...]
) -> tuple[Any, ...]:
    """The command line's values as the backend's arrays, floating ones cast to ``dtype``.

    Parameters
    ----------
    values : sequence
        What :func:`read_argument` returned, one per positional argument.
    backend : str
        A registered backend's name (``"numpy"``, ``"torch"``, ``"jax"``, ``"tensorflow"``...).
    dtype : str or None
        ``--dtype``; None keeps a NumPy array's dtype (values without one get float32).
    argnums : tuple of int
        Differentiated positions (non-negative): their integer arrays become floating.

    Returns
    -------
    tuple
        One converted argument per value; Python ints and non-numeric values at
        other positions are passed through unchanged.
    """
    out = []
    for i, value in enumerate(values):
        arr = _as_array(value)
        diff = i in argnums
        if arr is None or (isinstance(value, (int, bool)) and not diff):
            out.append(value)
            continue
        typed = isinstance(value, (np.ndarray, np.generic))
        out.append(_to_backend(arr, backend, _target_dtype(arr, typed, dtype, diff)))
    return tuple(out)


def _factory_result(result: Any, name: str) -> tuple[Callable[..., Any], tuple[Any, ...], dict]:
    shape = "(f, args) or (f, args, options)"
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        got = f"a {type(result).__name__}" + (
            f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
        )
        raise UsageError(f"the factory {name}() must return {shape}; it returned {got}")
    f, args = result[0], result[1]
    options = result[2] if len(result) == 3 else {}
    if not callable(f):
        raise UsageError(f"{name}() returned {type(f).__name__} as f; expected the function")
    if not isinstance(args, (tuple, list)):
        raise UsageError(
            f"{name}() returned {type(args).__name__} as args; expected a tuple of the "
            "function's arguments, e.g. (x,) for one argument"
        )
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise UsageError(
            f"{name}() returned {type(options).__name__} as options; expected a dict of "
            "keyword options of polygrad.check"
        )
    return f, tuple(args), dict(options)


def call_factory(
    make: Callable[..., Any], name: str, accepted: Callable[..., Any]
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """Call ``make()`` and check that it returned ``(f, args[, options])``.

    Parameters
    ----------
    make : callable
        The factory, called without arguments.
    name : str
        Its name, for messages.
    accepted : callable
        The command's function (``check``, ``sweep``, ``taylor_test``); options
        it does not take are dropped, unless no command takes them (a typo).

    Returns
    -------
    f, args, options

    Raises
    ------
    UsageError
        The factory returned something else, or an option no command knows.
    """
    f, args, options = _factory_result(make(), name)
    from . import check, sweep, taylor_test

    known: set[str] = set()
    for fn in (check, sweep, taylor_test):
        known |= _keyword_options(fn)
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"{name}() returned options polygrad does not know: {', '.join(unknown)}")
    params = _keyword_options(accepted)
    return f, args, {k: v for k, v in options.items() if k in params}


def _keyword_options(fn: Callable[..., Any]) -> set[str]:
    """Public keyword options of ``fn`` (not ``f``, ``*args`` or private ones)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind in kinds and name != "f" and not name.startswith("_")
    }
