"""Mutable state a JAX function reads: Flax NNX variables and Keras variables.

JAX arrays are immutable, but a function can close over objects that hold them and
write new ones on every call: a Flax NNX ``BatchNorm`` in training mode updates its
running statistics, a Keras layer (JAX backend) its ``moving_mean``, a dropout layer
its random-key counter. A gradient check calls the function many times, and under
JAX's tracing such a write leaks a tracer into the object. :func:`guarded` saves
these variables before the first calls, and where a call changed one (or failed
after writing a tracer into one) it puts every changed variable back and raises
:class:`~polygrad.errors.InputMutationError`, as the TensorFlow backend does for the
variables a function assigns.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputMutationError
from ._capture_cache import code_globals

__all__ = ["StateCell", "guarded", "state_cells"]


@dataclass(frozen=True)
class StateCell:
    """One variable of the function's state and its value before the check.

    Attributes
    ----------
    name : str
        Its kind and path in its model (``"BatchStat bn.mean"``).
    get, put : callable
        Read its value; write a value back.
    saved : object
        Its value (an array) when it was saved.
    """

    name: str
    get: Callable[[], Any]
    put: Callable[[Any], None]
    saved: Any

    def changed(self) -> bool:
        """Whether the value now differs from the saved one (a leaked tracer does)."""
        now = self.get()
        if now is self.saved:
            return False
        try:
            return not np.array_equal(np.asarray(now), np.asarray(self.saved), equal_nan=True)
        except Exception:  # noqa: BLE001 - not concrete: a tracer left behind
            return True


def _cell(obj: Any, path: str) -> StateCell | None:
    """The cell of ``obj`` (at ``path`` in its model) if it is a Flax NNX variable or a
    Keras variable on JAX."""
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(obj, nnx.Variable):
        value = obj.get_raw_value()
        name = f"{type(obj).__name__} {path}".rstrip()
        return StateCell(name, obj.get_raw_value, obj.set_raw_value, value)
    keras: Any = sys.modules.get("keras")
    kind = getattr(keras, "Variable", None)
    if isinstance(kind, type) and isinstance(obj, kind) and keras.backend.backend() == "jax":
        var: Any = obj

        def get() -> Any:
            return var._value  # noqa: SLF001 - .value would convert a leaked tracer

        def put(v: Any) -> None:
            var._value = v  # noqa: SLF001 - assign() would trace a leaked tracer's value

        return StateCell(f"Keras variable {path}".rstrip(), get, put, get())
    return None


MAX_VISITS = 5000
"""Most objects visited while looking for the models a function reads."""


def _models(objects: Sequence[Any]) -> list[Any]:
    """The NNX modules and Keras layers reachable from ``objects``: through closures, the
    globals a function's code reads, bound methods, partials, wrapped functions,
    containers and object attributes (not into the models themselves)."""
    nnx, keras = sys.modules.get("flax.nnx"), sys.modules.get("keras")
    kinds = tuple(
        k
        for k in (
            getattr(nnx, "Module", None),
            getattr(getattr(keras, "layers", None), "Layer", None),
        )
        if isinstance(k, type)
    )
    found: list[Any] = []
    seen: set[int] = set()
    stack = list(objects)
    while stack and len(seen) < MAX_VISITS:
        v = stack.pop()
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes, type, np.ndarray)):
            continue
        if id(v) in seen or isinstance(v, types.ModuleType):
            continue
        seen.add(id(v))
        if kinds and isinstance(v, kinds):
            found.append(v)
            continue
        stack.extend(_parts(v))
    return found


def _parts(v: Any) -> list[Any]:
    """What ``v`` holds that a call of it, or of a function reading it, may read."""
    if isinstance(v, types.FunctionType):
        cells = []
        for c in v.__closure__ or ():
            with contextlib.suppress(ValueError):  # an empty cell
                cells.append(c.cell_contents)
        reads = code_globals(v.__code__) & v.__globals__.keys()
        return cells + [v.__globals__[k] for k in reads] + list(v.__defaults__ or ())
    if isinstance(v, types.MethodType):
        return [v.__func__, v.__self__]
    if isinstance(v, (list, tuple, set, frozenset)):
        return list(v)
    if isinstance(v, dict):
        return list(v.values())
    if isinstance(v, functools.partial):
        return [v.func, *v.args, *v.keywords.values()]
    parts = [getattr(v, "__wrapped__", None)]
    with contextlib.suppress(TypeError):
        parts.extend(vars(v).values())
    return parts


def _variables(model: Any) -> list[tuple[str, Any]]:
    """(path, variable) of every variable of an NNX module or a Keras layer."""
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(model, nnx.Module):
        return [
            (".".join(map(str, path)), node)
            for path, node in nnx.iter_graph(model)
            if isinstance(node, nnx.Variable)
        ]
    return [(str(getattr(v, "path", "")), v) for v in getattr(model, "variables", []) or []]


def state_cells(objects: Sequence[Any]) -> list[StateCell]:
    """The NNX and Keras (JAX backend) variables of the models reachable from ``objects``
    (the function, its closure, the globals it reads and its arguments), with their
    values now; none when neither library is loaded."""
    if sys.modules.get("flax.nnx") is None and sys.modules.get("keras") is None:
        return []
    cells = {}
    for model in _models(objects):
        for path, var in _variables(model):
            cell = _cell(var, path)
            if cell is not None:
                cells[id(var)] = cell
    return list(cells.values())


@contextlib.contextmanager
def guarded(cells: Sequence[StateCell]) -> Iterator[None]:
    """Run the block; where it changed a cell, put the changed cells back and raise.

    Raises
    ------
    InputMutationError
        The block changed a variable of the function's state (chained to the block's
        own exception, where it raised one).
    """
    try:
        yield
    except Exception as exc:
        _restore_and_raise(cells, exc)
        raise
    _restore_and_raise(cells, None)


def _restore_and_raise(cells: Sequence[StateCell], cause: BaseException | None) -> None:
    changed = [c for c in cells if c.changed()]
    if not changed:
        return
    for c in changed:
        c.put(c.saved)
    names = ", ".join(c.name for c in changed[:4]) + (
        f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    )
    raise InputMutationError(
        f"the function changed state it reads ({names}), e.g. a batch norm's running "
        "statistics in training mode or a dropout layer's random-key counter; polygrad put "
        "the values back. A gradient check needs a function that leaves its state alone: "
        "call the model in inference mode (model.eval() in Flax NNX, training=False in "
        "Keras), or pass the state as an argument."
    ) from cause
