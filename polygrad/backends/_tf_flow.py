"""TensorFlow operations whose registered derivative is missing for an argument.

``tf.math.zeta(x, q)`` registers a gradient for ``q`` and returns None for ``x``
(``tf.math.betainc`` does so for ``a`` and ``b``, ``tf.math.polygamma`` for
``n``): the gradient tape reads that None as "not connected", and a function
whose every path to an input runs through such an argument looks exactly like
one the user cut off (``.numpy()``, ``tf.stop_gradient``). It is not the user's
error but the framework's missing derivative, which the check judges
(autodiff's zero against the reference): :func:`missing_derivatives` finds
these operations in the function's graph.

An operation counts when its gradient function, called in the graph, returns
None for a floating input that depends on the checked inputs while it returns
a gradient for another input: an operation none of whose inputs has a
gradient (``Floor``, ``StopGradient``, a cast to an integer dtype) declares
itself not differentiable, which is another matter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._tf_promote import _trace_once

__all__ = ["MissingDerivative", "missing_derivatives"]

#: the deepest nesting of function calls (``tf.function`` inside ``tf.function``) walked
_DEPTH = 8


@dataclass(frozen=True)
class MissingDerivative:
    """One argument of one operation whose registered derivative is missing.

    Attributes
    ----------
    op : str
        The operation's type (``"Zeta"``).
    name : str
        The operation's name in the graph.
    argument : str
        The argument's name in the operation's definition (``"x"``).
    index : int
        The argument's position among the operation's inputs.
    """

    op: str
    name: str
    argument: str
    index: int

    def note(self) -> str:
        """The report's note naming the operation and the argument."""
        return (
            f"TensorFlow's registered gradient of op {self.op} returns None for its argument "
            f"{self.argument} (input {self.index}, node {self.name!r}): the framework has "
            f"no derivative of {self.op} with respect to {self.argument}, and autodiff reads "
            "a zero gradient through it; the check compares that zero with the reference"
        )


def missing_derivatives(
    tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]
) -> list[MissingDerivative]:
    """The operations between the inputs and the outputs of ``call`` whose registered
    gradient is None for an input that depends on the checked inputs.

    Parameters
    ----------
    tf : module
        TensorFlow.
    call : callable
        ``call(leaves) -> list of 1-D tensors``, the function of the checked leaves.
    specs : list of tf.TensorSpec
        The leaves' shapes and dtypes.

    Returns
    -------
    list of MissingDerivative
        In graph order, each (operation, argument) once; empty when the function
        cannot be traced or its graph shows none.
    """
    try:
        concrete = _trace_once(tf, call, specs)  # a fresh graph: gradient ops are added to it
    except Exception:  # noqa: BLE001 - untraceable: the caller's error names the cause
        return []
    graph = concrete.graph
    library = _functions(graph)
    found = _walk(graph, list(graph.inputs[: len(specs)]), list(graph.outputs), library, 0)
    return list(dict.fromkeys(found))


def _functions(graph: Any) -> dict[str, Any]:
    """Every function graph the traced graph calls, by name, nested ones included."""
    found: dict[str, Any] = {}
    stack = [graph]
    while stack:
        for name, fn in getattr(stack.pop(), "_functions", {}).items():
            inner = getattr(fn, "graph", None)
            if inner is not None and name not in found:
                found[name] = inner
                stack.append(inner)
    return found


def _walk(
    graph: Any, sources: list[Any], sinks: list[Any], library: dict[str, Any], depth: int
) -> list[MissingDerivative]:
    """The missing derivatives on a path from ``sources`` to ``sinks`` in one graph,
    and, through calls of nested functions, in theirs."""
    ops = graph.get_operations()  # in creation order, which is topological
    reached = {t.ref() for t in sources}
    for op in ops:
        if any(t.ref() in reached for t in op.inputs):
            reached.update(o.ref() for o in op.outputs)
    needed = {t.ref() for t in sinks}
    for op in reversed(ops):
        if any(o.ref() in needed for o in op.outputs):
            needed.update(t.ref() for t in op.inputs)
    found: list[MissingDerivative] = []
    for op in ops:
        ins = [i for i, t in enumerate(op.inputs) if t.ref() in reached and _floating(t)]
        if not ins or not any(o.ref() in needed for o in op.outputs):
            continue
        inner = _called(op, library)
        if inner is not None and depth < _DEPTH:
            outs = [j for j, t in enumerate(op.outputs) if t.ref() in needed]
            sinks_in = [inner.outputs[j] for j in outs if j < len(inner.outputs)]
            found += _walk(inner, [inner.inputs[i] for i in ins], sinks_in, library, depth + 1)
        else:
            found += _missing_in(graph, op, ins)
    return found


def _floating(t: Any) -> bool:
    return bool(t.dtype.is_floating or t.dtype.is_complex)


def _called(op: Any, library: dict[str, Any]) -> Any:
    """The graph of the function ``op`` calls (``PartitionedCall``), or None."""
    try:
        name = op.get_attr("f").name
    except Exception:  # noqa: BLE001 - not a function call
        return None
    return library.get(name)


def _missing_in(graph: Any, op: Any, ins: list[int]) -> list[MissingDerivative]:
    """The inputs among ``ins`` for which ``op``'s gradient function returns None,
    when it returns a gradient for some other input (none at all: not differentiable)."""
    from tensorflow.python.framework import ops as tf_ops

    try:
        fn = tf_ops.get_gradient_function(op)
        if fn is None:
            return []  # declared not differentiable (StopGradient and the like)
        with graph.as_default():
            grads = fn(op, *[_zeros(o) for o in op.outputs])
    except Exception:  # noqa: BLE001 - no registered gradient (the tape raises) or unusable
        return []
    grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
    if all(g is None for g in grads):
        return []
    args = _argument_names(op)
    return [
        MissingDerivative(op.type, op.name, args[i] if i < len(args) else f"#{i}", i)
        for i in ins
        if i < len(grads) and grads[i] is None
    ]


def _zeros(t: Any) -> Any:
    import tensorflow as tf

    return tf.zeros_like(t) if _floating(t) else None


def _argument_names(op: Any) -> list[str]:
    """One name per input of ``op``, from its definition (a list argument repeats)."""
    names: list[str] = []
    try:
        for arg in op.op_def.input_arg:
            count = 1
            if arg.number_attr:
                count = int(op.get_attr(arg.number_attr))
            elif arg.type_list_attr:
                count = len(op.get_attr(arg.type_list_attr))
            names += [arg.name] * count
    except Exception:  # noqa: BLE001 - no definition: positions only
        return []
    return names
