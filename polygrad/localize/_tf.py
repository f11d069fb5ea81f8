"""TensorFlow: record the ``tf.custom_gradient`` functions called in one eager run.

The user's function runs once, eagerly (``tf.config.run_functions_eagerly(True)`` for
the run, restored after), while TensorFlow's eager entry of ``tf.custom_gradient``
(``custom_gradient._eager_mode_decorator``, called by every decorated function) is
wrapped to record the user's undecorated function, its arguments, the name scope it ran
in (Keras layer names) and its call site. Each record is a custom node: the forward is
the function's first result, the VJP its returned gradient function, both on float64
copies of its floating arguments (the working dtype where it does not run in float64).
TensorFlow's own primitives are not checked (a note says so).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._core import Node, RecordedCall, Site
from ._names import source_line

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report
    from . import CheckedCall, Recording


def record(call: CheckedCall, report: Report, as_run: bool = False) -> Recording:
    """Run ``call`` eagerly once, recording its ``tf.custom_gradient`` calls as nodes (in
    float64 where they run in it; ``as_run``: in the dtypes the program ran them in)."""
    import tensorflow as tf

    from . import Recording

    calls: list[RecordedCall] = []
    with _recording(tf, calls):
        call.f(*call.args)
    nodes = [_node(tf, c, as_run) for c in calls]
    note = "TensorFlow: only tf.custom_gradient functions are checked alone, not primitives"
    if as_run:
        note = ("TensorFlow: the primitives are not recorded, so the op whose VJP makes the "
                "NaN or Inf could not be looked for among them; only tf.custom_gradient "
                "functions were evaluated alone")  # fmt: skip
    return Recording(tuple(n for n in nodes if n), (), (note,))


@contextlib.contextmanager
def _recording(tf: Any, calls: list[RecordedCall]) -> Iterator[None]:
    from tensorflow.python.ops import custom_gradient as cg

    original = cg._eager_mode_decorator
    skip = (os.path.dirname(os.path.abspath(tf.__file__)),
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            os.path.dirname(os.path.dirname(os.path.abspath(cg.__file__))))  # fmt: skip

    def wrapper(f: Any, args: Any, kwargs: Any) -> Any:
        keras = _keras_dirs()
        site = Site(f"tf.custom_gradient {getattr(f, '__name__', '?')}", "custom rule",
                    tf.get_current_name_scope(),
                    source_line(traceback.extract_stack()[:-1], skip + keras))  # fmt: skip
        calls.append(RecordedCall(f, tuple(args), dict(kwargs), site))
        return original(f, args, kwargs)

    eager = tf.config.functions_run_eagerly()
    cg._eager_mode_decorator = wrapper
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        cg._eager_mode_decorator = original
        tf.config.run_functions_eagerly(eager)


def _keras_dirs() -> tuple[str, ...]:
    import sys

    return tuple(os.path.dirname(os.path.abspath(m.__file__)) for name in ("keras", "tf_keras")
                 if (m := sys.modules.get(name)) is not None and m.__file__)  # fmt: skip


def _floating(tf: Any, v: Any) -> bool:
    return isinstance(v, (tf.Tensor, tf.Variable)) and v.dtype.is_floating


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
    return Node(c.site, inputs, forward, vjp, dtype.name, float(np.finfo(dtype.as_numpy_dtype).eps))
