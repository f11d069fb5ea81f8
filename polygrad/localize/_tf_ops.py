"""TensorFlow primitives: every eager op of one run, with the inputs it saw.

While the user's function runs eagerly, an op callback (``op_callbacks``, the hook
``tf.debugging.enable_check_numerics`` uses) sees every op TensorFlow executes: its
type, inputs, attributes and outputs. An op is recorded when one of its floating inputs
is a checked argument or the output of a recorded op (what a gradient tape would
watch), outside ``tf.custom_gradient`` functions (recorded as custom rules). A node
re-executes its one op (``execute.execute``): after a MISMATCH in float64 where the op
has a float64 kernel (its narrower floating inputs cast, its floating type attributes,
read from the op's registered definition, set to ``float64``), else (and for the
NONFINITE walk) in the dtype the program ran it in with the same attributes. Its VJP is
that op's registered gradient under a ``tf.GradientTape`` (zeros where the gradient
function returns None, as for ``Zeta`` with respect to ``x``). The op is named by its
type (``Sqrt``, ``SelectV2``), with the name scope (Keras layer names) and the user's
source line.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._core import Flow, Node, Site
from ._names import source_line

__all__ = ["RecordedOp", "op_node", "recording_ops"]


@dataclass(frozen=True)
class RecordedOp:
    """One eager op: its type, attributes, inputs (``moving``: the positions of those
    that are differentiated), number of outputs, site, position and reads."""

    op_type: str
    attrs: tuple[Any, ...]
    inputs: tuple[Any, ...]
    moving: tuple[int, ...]
    outputs: int
    site: Site
    index: int
    reads: tuple[int, ...]


@contextlib.contextmanager
def recording_ops(tf: Any, ops: list[RecordedOp], position: Callable[[], int],
                  inside: Callable[[], bool], flow: Flow,
                  skip: tuple[str, ...]) -> Iterator[None]:  # fmt: skip
    """Record the eager ops of one run in ``ops`` (``position()``: the next position;
    ``inside()``: a custom rule runs, whose ops are not recorded)."""
    from tensorflow.python.framework import op_callbacks

    def callback(op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
                 graph: Any = None) -> None:  # fmt: skip
        if graph is not None or inside() or not outputs:
            return None
        op_type = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
        inputs = tuple(inputs)
        moving = tuple(i for i, t in enumerate(inputs) if _floating(tf, t) and
                       flow.reads([t]))  # fmt: skip
        if not moving or not any(_floating(tf, o) for o in outputs):
            return None
        site = Site(op_type, "primitive", tf.get_current_name_scope(),
                    source_line(traceback.extract_stack()[:-1], skip))  # fmt: skip
        index = position()
        reads = tuple(r for r in flow.reads(inputs) if r >= 0)
        ops.append(RecordedOp(op_type, tuple(attrs or ()), inputs, moving,
                              len(outputs), site, index, reads))  # fmt: skip
        flow.made_by(index, outputs)
        return None

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(callback)


def _floating(tf: Any, v: Any) -> bool:
    return isinstance(v, tf.Tensor) and v.dtype.is_floating


def op_node(tf: Any, op: RecordedOp, as_run: bool = False) -> Node | None:
    """The op as a node: in float64 where it runs in float64 (its narrower floating inputs
    and type attributes widened), else (or ``as_run``) in the dtype it ran in; None where
    it does not run again alone."""
    for wide in (False,) if as_run else (True, False):
        node = _try_op_node(tf, op, wide)
        if node is not None:
            return node
    return None


def _widen(tf: Any, dtype: Any, wide: bool) -> Any:
    """``float64`` for a floating dtype narrower than it when ``wide``; else ``dtype``."""
    return tf.float64 if wide and dtype.is_floating and dtype.size < 8 else dtype


def _attrs(tf: Any, op: RecordedOp, wide: bool) -> tuple[Any, ...]:
    """The op's attributes (``name, value, ...``; one recorded as None given its
    registered default), its floating type attributes widened to float64 when ``wide``
    (both read from the op's registered definition)."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op.op_type)
    defs = {a.name: a for a in op_def.attr} if op_def else {}
    out = list(op.attrs)
    for k in range(0, len(out) - 1, 2):  # None (Conv2D's use_cudnn_on_gpu): its default
        if out[k + 1] is None and out[k] in defs:
            which = defs[out[k]].default_value.WhichOneof("value")
            if which in ("b", "i", "f", "s", "type"):
                out[k + 1] = getattr(defs[out[k]].default_value, which)
    if not wide:
        return tuple(out)
    types = {n for n, a in defs.items() if a.type in ("type", "list(type)")}
    for k in range(0, len(out) - 1, 2):
        if out[k] not in types:
            continue
        value = out[k + 1]
        if isinstance(value, (list, tuple)):
            out[k + 1] = type(value)(_widen_type(tf, v) for v in value)
        else:
            out[k + 1] = _widen_type(tf, value)
    return tuple(out)


def _widen_type(tf: Any, value: Any) -> Any:
    """A type attribute's value (a ``DType`` or its enum) widened to float64, same form."""
    dtype = tf.as_dtype(value)
    if not (dtype.is_floating and dtype.size < 8):
        return value
    return tf.float64 if isinstance(value, tf.DType) else tf.float64.as_datatype_enum


def _try_op_node(tf: Any, op: RecordedOp, wide: bool) -> Node | None:
    """The op re-executed alone, in float64 (``wide``) or as it ran; its VJP the op's
    registered gradient on a tape. None where it fails or (``wide``) leaves float64."""
    from tensorflow.python.eager import context, execute

    inputs = tuple(np.asarray(op.inputs[i].numpy(), np.float64) for i in op.moving)
    attrs = _attrs(tf, op, wide)
    fixed = [tf.cast(t, _widen(tf, t.dtype, wide)) if _floating(tf, t) else t
             for t in op.inputs]  # fmt: skip

    def run(xs: Sequence[np.ndarray], tape: Any = None) -> tuple[list[Any], list[Any]]:
        vals = list(fixed)
        for i, x in zip(op.moving, xs, strict=True):
            vals[i] = tf.constant(x, fixed[i].dtype)
            if tape is not None:
                tape.watch(vals[i])
        outs = execute.execute(op.op_type, op.outputs, vals, attrs, context.context())
        if tape is not None:
            execute.record_gradient(op.op_type, vals, attrs, outs)
        return [vals[i] for i in op.moving], [o for o in outs if _floating(tf, o)]

    def forward(xs: Sequence[np.ndarray]) -> np.ndarray:
        _, outs = run(xs)
        return np.concatenate([np.asarray(o.numpy(), np.float64).ravel() for o in outs])

    def vjp(xs: Sequence[np.ndarray], u: np.ndarray) -> list[np.ndarray]:
        with tf.GradientTape() as tape:
            ts, outs = run(xs, tape)
        us, off = [], 0
        for o in outs:
            size = int(np.prod(o.shape))
            us.append(tf.constant(u[off : off + size].reshape(o.shape), o.dtype))
            off += size
        gs = tape.gradient(outs, ts, output_gradients=us)
        return [np.zeros(x.shape) if g is None else
                np.asarray(tf.convert_to_tensor(g).numpy(), np.float64).reshape(x.shape)
                for g, x in zip(gs, xs, strict=True)]  # fmt: skip

    try:
        _, outs = run(inputs)
    except Exception:  # noqa: BLE001 - the op does not run again alone (in this dtype)
        return None
    if not outs or (wide and any(o.dtype != tf.float64 for o in outs)):
        return None
    dtype = outs[0].dtype
    return Node(op.site, inputs, forward, vjp, dtype.name,
                float(np.finfo(dtype.as_numpy_dtype).eps), op.index)  # fmt: skip
