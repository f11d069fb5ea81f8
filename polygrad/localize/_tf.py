"""TensorFlow: record the ``tf.custom_gradient`` functions and the eager ops of one run.

The user's function runs once, eagerly (``tf.config.run_functions_eagerly(True)`` for
the run, restored after), while TensorFlow's eager entry of ``tf.custom_gradient``
(``custom_gradient._eager_mode_decorator``, called by every decorated function) is
wrapped to record the user's undecorated function, its arguments, the name scope it ran
in (Keras layer names) and its call site. Each record is a custom node: the forward is
the function's first result, the VJP its returned gradient function, both on float64
copies of its floating arguments (the working dtype where it does not run in float64).
TensorFlow's own primitives are recorded as they ran by an op callback
(:mod:`._tf_ops`), outside the custom functions; after a MISMATCH each is checked in
float64 where it has a float64 kernel. For the NONFINITE walk the run is also taped,
every node is evaluated in the dtype the program ran it in, and each gets the cotangent
it received in the tape's backward pass.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._core import Flow, Node, RecordedCall, Site, Step, with_cotangents
from ._names import source_line

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report
    from . import CheckedCall, Recording
    from ._tf_ops import RecordedOp


def record(call: CheckedCall, report: Report, as_run: bool = False) -> Recording:
    """Run ``call`` eagerly once, recording its ``tf.custom_gradient`` calls and its
    primitives (:mod:`._tf_ops`) as nodes, in float64 where they run in it; ``as_run``
    (the NONFINITE walk): in the dtypes the program ran them in, each with the cotangent
    it received in the run's backward pass."""
    import tensorflow as tf

    from . import Recording
    from ._tf_ops import op_node

    calls: list[RecordedCall] = []
    ops: list[RecordedOp] = []
    flow = Flow()
    checked = [a for i, a in enumerate(call.args) if i in call.argnums]
    flow.made_by(-1, checked)
    # the NONFINITE walk takes the program's own backward pass: a tape around the run
    with tf.GradientTape(persistent=True) if as_run else contextlib.nullcontext() as tape:
        if tape is not None:
            tape.watch([a for a in checked if _floating(tf, a)])
        with _recording(tf, calls, ops, flow):
            result = call.f(*call.args)
    cts = _cotangents(tf, tape, flow, result) if as_run else None
    nodes = with_cotangents([n for n in (_node(tf, c, as_run) for c in calls) if n], cts)
    built = [(o, op_node(tf, o, as_run)) for o in ops]
    prims = with_cotangents([n for _, n in built if n], cts)
    lost = sorted({o.op_type for o, n in built if n is None})
    notes = (f"op(s) that do not run again alone, not checked: {', '.join(lost)}",) if lost else ()
    steps = sorted([(c.index, Step(c.site, c.reads)) for c in calls] +
                   [(o.index, Step(o.site, o.reads)) for o in ops], key=lambda p: p[0])  # fmt: skip
    outputs = tuple(r for r in flow.reads(tf.nest.flatten(result)) if r >= 0)
    return Recording(tuple(nodes), tuple(prims), notes, steps=tuple(s for _, s in steps),
                     outputs=outputs)  # fmt: skip


def _cotangents(tf: Any, tape: Any, flow: Flow, result: Any) -> dict[int, np.ndarray] | None:
    """The cotangent each recorded call's floating outputs received (flattened, by
    position) in one backward pass from cotangents of ones on the function's floating
    outputs (the tape's gradient with respect to those outputs); None where it fails."""
    made = {i: [t for t in vs if _floating(tf, t)] for i, vs in flow.outputs().items()}
    made = {i: ts for i, ts in made.items() if ts}
    outs = [o for o in tf.nest.flatten(result) if _floating(tf, o)]
    sources = [t for ts in made.values() for t in ts]
    try:
        grads = tape.gradient(outs, sources, output_gradients=[tf.ones_like(o) for o in outs])
    except Exception:  # noqa: BLE001 - no backward pass here: cotangents unknown
        return None
    it = iter(grads)
    got = {i: [next(it) for _ in ts] for i, ts in made.items()}
    return {i: np.concatenate([np.asarray(tf.convert_to_tensor(g).numpy(), np.float64).ravel()
                               for g in gs]) for i, gs in got.items()
            if all(g is not None for g in gs)}  # fmt: skip


@contextlib.contextmanager
def _recording(tf: Any, calls: list[RecordedCall], ops: list[RecordedOp],
               flow: Flow) -> Iterator[None]:  # fmt: skip
    """Wrap the eager entry of ``tf.custom_gradient``, run functions eagerly and record
    the primitives in ``ops``, for one run."""
    from tensorflow.python.ops import custom_gradient as cg

    from ._tf_ops import recording_ops

    original = cg._eager_mode_decorator
    skip = (os.path.dirname(os.path.abspath(tf.__file__)),
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            os.path.dirname(os.path.dirname(os.path.abspath(cg.__file__))))  # fmt: skip
    depth = [0]

    def position() -> int:
        return len(calls) + len(ops)

    def wrapper(f: Any, args: Any, kwargs: Any) -> Any:
        keras = _keras_dirs()
        site = Site(f"tf.custom_gradient {getattr(f, '__name__', '?')}", "custom rule",
                    tf.get_current_name_scope(),
                    source_line(traceback.extract_stack()[:-1], skip + keras))  # fmt: skip
        index = position()
        reads = tuple(r for r in flow.reads(tf.nest.flatten(args)) if r >= 0)
        calls.append(RecordedCall(f, tuple(args), dict(kwargs), site, index, reads))
        depth[0] += 1
        try:
            out = original(f, args, kwargs)
        finally:
            depth[0] -= 1
        flow.made_by(index, tf.nest.flatten(out))
        return out

    eager = tf.config.functions_run_eagerly()
    cg._eager_mode_decorator = wrapper
    tf.config.run_functions_eagerly(True)
    try:
        with recording_ops(tf, ops, position, lambda: depth[0] > 0, flow, skip + _keras_dirs()):
            yield
    finally:
        cg._eager_mode_decorator = original
        tf.config.run_functions_eagerly(eager)


def _keras_dirs() -> tuple[str, ...]:
    import sys

    return tuple(os.path.dirname(os.path.abspath(m.__file__)) for name in ("keras", "tf_keras")
                 if (m := sys.modules.get(name)) is not None and m.__file__)  # fmt: skip


def _floating(tf: Any, v: Any) -> bool:
    return isinstance(v, (tf.Tensor, tf.Variable)) and bool(v.dtype.is_floating)


def _node(tf: Any, c: RecordedCall, as_run: bool = False) -> Node | None:
    moving = [i for i, a in enumerate(c.args) if _floating(tf, a)]
    if not moving:
        return None
    inputs = tuple(np.asarray(c.args[i].numpy(), np.float64) for i in moving)
    working = c.args[moving[0]].dtype
    for dtype in (working,) if as_run else (tf.float64, working):
        node = _try_node(tf, c, moving, inputs, dtype)
        if node is not None:
            return node
    return None


def _try_node(tf: Any, c: RecordedCall, moving: list[int], inputs: tuple[np.ndarray, ...],
              dtype: Any) -> Node | None:  # fmt: skip
    """The node in ``dtype``: the forward is ``f``'s result, the VJP its gradient function."""

    def run(xs: Sequence[np.ndarray]) -> tuple[list[Any], Callable[..., Any]]:
        vals = [tf.cast(a, dtype) if _floating(tf, a) else a for a in c.args]
        for i, x in zip(moving, xs, strict=True):
            vals[i] = tf.constant(x, dtype)
        y, grad_fn = c.fn(*vals, **c.kwargs)
        return list(tf.nest.flatten(y)), grad_fn

    def forward(xs: Sequence[np.ndarray]) -> np.ndarray:
        ys, _ = run(xs)
        return np.concatenate([np.asarray(y.numpy(), np.float64).ravel() for y in ys])

    def vjp(xs: Sequence[np.ndarray], u: np.ndarray) -> list[np.ndarray]:
        ys, grad_fn = run(xs)
        us, off = [], 0
        for y in ys:
            size = int(np.prod(y.shape))
            us.append(tf.constant(u[off : off + size].reshape(y.shape), y.dtype))
            off += size
        wants = "variables" in inspect.signature(grad_fn).parameters
        extra: dict[str, Any] = {"variables": []} if wants else {}
        out = grad_fn(*us, **extra)
        grads = out[0] if extra else out
        grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
        return [np.zeros(x.shape) if grads[i] is None else
                np.asarray(tf.convert_to_tensor(grads[i]).numpy(), np.float64).reshape(x.shape)
                for i, x in zip(moving, xs, strict=True)]  # fmt: skip

    try:
        ys, _ = run(inputs)
    except Exception:  # noqa: BLE001 - this dtype does not run: try the next
        return None
    if not ys or any(y.dtype != dtype for y in ys):
        return None
    eps = float(np.finfo(dtype.as_numpy_dtype).eps)
    return Node(c.site, inputs, forward, vjp, dtype.name, eps, c.index)
