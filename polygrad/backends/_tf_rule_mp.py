"""A TensorFlow function's own VJP, captured as a graph and re-executed on mpmath numbers.

The function's gradient on a ``tf.GradientTape`` (its ops' registered gradients
and any ``tf.custom_gradient``, as the code defines them) is traced with the
cotangent as an input, frozen and rewritten to float64 like the function itself
(:func:`polygrad.backends._tf_promote.promote_to_float64`), and run on mpmath
numbers (:func:`polygrad.mpexec.tf_graph.tf_mp_evaluator`): the rule the code
computes, in exact arithmetic (see ``Target.vjp_mp``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..mpexec.values import vjp_rows
from ._tf_promote import promote_to_float64

__all__ = ["tf_vjp_mp"]


def _vjp_call(tf: Any, call: Callable[[list[Any]], list[Any]], k: int) -> Callable[..., Any]:
    """``leaves + [u] -> [U @ J flattened]`` of ``call`` on a gradient tape."""

    def vjp(leaves: list[Any]) -> list[Any]:
        xs, u = list(leaves[:k]), leaves[k]
        with tf.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            y = tf.concat([tf.reshape(o, [-1]) for o in call(xs)], 0)
        zero = tf.UnconnectedGradients.ZERO
        grads = tape.gradient(y, xs, output_gradients=u, unconnected_gradients=zero)
        return [tf.concat([tf.reshape(g, [-1]) for g in grads], 0)]

    return vjp


def tf_vjp_mp(
    tf: Any, call: Callable[[list[Any]], list[Any]], originals: list[np.ndarray], m: int
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None:
    """``call``'s VJP on mpmath numbers, or None where its graph cannot run there.

    Parameters
    ----------
    tf : module
        TensorFlow.
    call : callable
        ``list of tensors (one per checked leaf) -> list of 1-D tensors``.
    originals : list of ndarray
        The checked leaves (their shapes and dtypes are traced).
    m : int
        Number of outputs.

    Returns
    -------
    callable or None
        ``(x0: ndarray (n,), U: ndarray (k, m), dps: int) -> object ndarray (k, n)``.
    """
    from ..mpexec.tf_graph import tf_mp_evaluator

    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in originals]
    like = tf.as_dtype(originals[0].dtype) if originals else tf.float64
    captured = promote_to_float64(
        tf, _vjp_call(tf, call, len(specs)), [*specs, tf.TensorSpec((m,), like)]
    )
    function: Any = captured.function
    if function is None:
        return None
    shapes = [tuple(a.shape) for a in originals] + [(m,)]
    try:
        ev = tf_mp_evaluator(
            function.graph.as_graph_def(),
            [t.name for t in function.inputs],
            [t.name for t in function.outputs],
            shapes,
        )
    except Exception:  # noqa: BLE001 - an op without an mpmath rule: no mp evaluation
        return None

    return vjp_rows(ev)
