"""The TensorFlow 2 / Keras backend: reverse mode through ``tf.GradientTape``.

TensorFlow is imported only when a :class:`TensorflowBackend` is created.

Evaluation
    Perturbed points are evaluated in batches with ``tf.vectorized_map``
    (traced once per function in a ``tf.function``, without AutoGraph unless
    that fails), in chunks of the size that runs fastest (at most
    ``batch_size`` rows). A batch of a few rows is evaluated eagerly, one call
    per row, until a larger one has paid for the tracing. When vectorization
    fails (ops without a vectorized rule) or gives values that disagree with a
    plain call, the points are evaluated one call at a time instead.
    ``tf.vectorized_map`` turns a per-example Keras model into one call on a
    stacked batch already, so no separate "stack along the batch axis" path is
    needed.

Derivatives
    * VJP: a ``tf.GradientTape`` records one forward pass at the point; the
      cotangent rows are pulled back with ``tape.gradient(...,
      output_gradients=u)``, vectorized over rows. (Differentiating *through*
      a vectorized forward pass would silently bypass ``tf.custom_gradient``
      rules, which is why the tape is kept outside.)
    * JVP: ``tf.autodiff.ForwardAccumulator``. TensorFlow's forward mode does
      not use ``tf.custom_gradient`` rules; for a function that contains one,
      ``Target.jvp`` is None and the notes say why.

Float64 reference
    ``evaluate64``/``vjp64``/``jvp64`` run the user's own program in float64,
    whichever way it reaches its model and constants: a closure, a module-level
    global, a method reading ``self.model``, a ``functools.partial``, a
    ``tf.function`` (with or without ``jit_compile``), a Keras 3 or tf-keras model
    or layer, a loss object, a ``tfp`` distribution, ``tf.Variable`` s and
    ``tf.constant`` s. The function is traced once into a graph, its variables and
    captured tensors are frozen into constants, and every floating dtype in it is
    rewritten to float64 (:mod:`._tf_promote`; inference-mode fused batch norms,
    which have no float64 kernel, are replaced by their formula). The user's
    objects are read, never changed.

    A function whose graph holds a ``tf.custom_gradient`` rule is first called
    with its arguments promoted (a Keras model given as an argument: a float64
    copy rebuilt from its config), so that the rule itself runs in float64; where
    that fails, the float64 graph gives the reference values and the rule is
    checked in the working dtype only (its Python gradient function belongs to the
    original trace). A function that runs Python inside (``tf.py_function``,
    ``tf.numpy_function``), holds an op without a float64 kernel, or cannot be
    traced, has no float64 evaluation (``Target.evaluate64 is None``): the notes
    name the blocking op, and the reference is computed in the working dtype with
    error bars to match.

mp reference
    ``evaluate_mp`` runs the same captured float64 graph on mpmath numbers,
    node by node (:mod:`polygrad.mpexec.tf_graph`); it is built when a check
    first asks for it. A graph with an op that has no mpmath rule (control
    flow, convolutions...) gets ``evaluate_mp = None`` and a
    ``mp_unavailable_reason`` naming the op types.

Batched execution in float32
    float32 and narrower batches are compiled with XLA first (padded to a
    power-of-two number of rows, so that few shapes are compiled): some of
    TensorFlow's float32 CPU kernels crash the process, which no exception can
    catch, on the batched shapes ``tf.vectorized_map`` creates (oneDNN's batched
    matrix product, as in a Keras ``MultiHeadAttention`` layer called on
    ``x[None]``, in TensorFlow 2.21). Functions XLA cannot compile take the
    plain path.

Parameters
    ``wrt="parameters"`` checks the derivative with respect to the trainable
    weights of a Keras 3 model given as the function (``check(model, x)``) or as
    an argument (``check(lambda model, x: loss(model(x)), model, x)``); layout
    names are the weights' paths. The weights are substituted functionally with
    ``keras.StatelessScope``, so the model is not modified either.

Errors
    Integer, bool and non-finite inputs raise :class:`InputTypeError` /
    :class:`InputValueError`; so does an output that is cut off the gradient
    tape while its values depend on the inputs (``.numpy()`` inside the
    function, ``tf.stop_gradient`` of the output: the message names the
    cause). A function that changes a ``tf.Variable`` input or a model's state
    raises :class:`InputMutationError`; one that returns different values for
    the same input (dropout with ``training=True``) raises
    :class:`NondeterministicFunctionError`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from .._pytree import flatten, tree_map, unflatten
from ..errors import (
    InputMutationError,
    InputTypeError,
    NondeterministicFunctionError,
    ShapeMismatchError,
)
from ._capture_cache import CAPTURES, frozen_state
from ._common import PointFunction, check_not_mutated, output_layout
from ._flow import steps_only
from ._quad_eval import defer_quad, quad_of_mp_program
from ._tf_flow import missing_derivatives
from ._tf_promote import (
    Float64Graph,
    autographed_graph,
    disconnection_cause,
    failed_run_reason,
    narrowest_computed,
    promote_to_float64,
    symmetric_reads,
    variables_written,
)
from ._tf_rule_mp import tf_vjp_mp
from .base import (
    SMALL_BATCH,
    Backend,
    BatchFn,
    ChunkSizer,
    Layout,
    Supplied,
    Target,
    change_under_a_move,
    chunked,
    computed_in_note,
    dtype_eps,
    gradient_target,
    narrowest_input_dtype,
)
from .base import describe_exception as _describe

__all__ = ["TensorflowBackend", "float64_model_copy", "is_keras_model"]

# (leaves) -> flat output tensors, one per output leaf
_FlatCall = Callable[[list[Any]], list[Any]]


def is_keras_model(x: Any) -> bool:
    """Whether ``x`` is a Keras 3 or tf-keras layer or model (imports nothing)."""
    for mod_name in ("keras", "tf_keras"):
        mod = sys.modules.get(mod_name)
        layers = getattr(mod, "layers", None) if mod is not None else None
        if layers is not None and isinstance(x, layers.Layer):
            return True
    return False


def _is_keras_loss(x: Any) -> bool:
    for mod_name in ("keras", "tf_keras"):
        losses = getattr(sys.modules.get(mod_name), "losses", None)
        if losses is not None and isinstance(x, losses.Loss):
            return True
    return False


def _is_keras3(model: Any) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, keras.layers.Layer)


def _rewrite_config(cfg: Any, rule: Callable[[str, Any], Any]) -> Any:
    """A copy of a Keras config (nested dicts and lists) in which every entry for which
    ``rule(key, value)`` returns something other than ``None`` is replaced by that."""
    if isinstance(cfg, list):
        return [_rewrite_config(c, rule) for c in cfg]
    if not isinstance(cfg, dict):
        return cfg
    out = {}
    for key, value in cfg.items():
        new = rule(key, value)
        out[key] = _rewrite_config(value, rule) if new is None else new
    return out


GRAPH_RULE_APART = 1e-3
"""AutoGraph's graph computes another gradient than eager ``f`` where the two differ by
more than this share of the larger (eager and graph kernels of one program differ by
round-off, a few float32 ulps; a cut tape by a whole term)."""


def _as_list(concrete: Any) -> Callable[[list[Any]], list[Any]]:
    """A concrete function of the leaves as a call of the list of leaves."""
    return lambda leaves: list(concrete(*leaves))


def _pulled_back(tf: Any, call: Callable[[list[Any]], list[Any]], leaves: list[Any]) -> np.ndarray:
    """The gradient of the sum of ``call``'s outputs, each weighted by fixed pseudo-random
    numbers (seed 0), with respect to every leaf, flattened (float64)."""
    rng = np.random.default_rng(0)
    with tf.GradientTape() as tape:
        for leaf in leaves:
            tape.watch(leaf)
        outs = call(leaves)
        total = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float64) * rng.standard_normal(o.shape))
                          for o in outs])  # fmt: skip
    grads = tape.gradient(total, leaves, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return np.concatenate([np.ravel(np.asarray(g, dtype=np.float64)) for g in grads])


def _promote_config(cfg: Any) -> Any:
    """Replace every floating ``dtype`` entry of a Keras config by ``"float64"``."""
    return _rewrite_config(
        cfg, lambda k, v: "float64" if k == "dtype" and _is_float_dtype_spec(v) else None
    )


def _zero_initializers(cfg: Any) -> Any:
    """A Keras config with every ``*_initializer`` replaced by zeros (same format)."""

    def zeros(key: str, value: Any) -> Any:
        if key.endswith("_initializer") and isinstance(value, dict) and "class_name" in value:
            return {**value, "class_name": "Zeros", "config": {}}
        return None

    return _rewrite_config(cfg, zeros)


def _is_float_dtype_spec(value: Any) -> bool:
    if isinstance(value, dict):  # a serialized dtype policy
        value = value.get("config", {}).get("name", "")
    if not isinstance(value, str):
        return False
    return any(s in value for s in ("float", "bfloat"))


def float64_model_copy(model: Any) -> Any:
    """A float64 copy of a Keras 3 or tf-keras model; ``model`` is left unchanged.

    The copy is rebuilt from ``model.get_config()`` with every floating dtype
    (policy) replaced by float64, and gets the model's weights cast to float64.

    Raises
    ------
    TypeError
        The model cannot be rebuilt from its config (e.g. a subclassed model
        without ``get_config``) or the copy does not compute in float64.
    """
    try:
        config = _promote_config(model.get_config())
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        try:  # the weights are set below: skip drawing random initial values
            copy = _rebuild(model, _zero_initializers(config), weights)
        except Exception:  # noqa: BLE001 - e.g. a layer that validates its initializers
            copy = _rebuild(model, config, weights)
    except Exception as exc:  # noqa: BLE001 - any failure means: cannot be promoted
        raise TypeError(
            f"the Keras model {getattr(model, 'name', '?')!r} could not be rebuilt in float64 "
            f"from its config ({type(exc).__name__}: {exc})"
        ) from exc
    bad = [w.name for w in copy.weights if np.asarray(w).dtype != np.float64]
    if bad:
        raise TypeError(f"the float64 copy of the model still has non-float64 weights {bad}")
    return copy


def _rebuild(model: Any, config: Any, weights: list[np.ndarray]) -> Any:
    copy = type(model).from_config(config)
    if not copy.built and getattr(model, "built", False):
        copy.build(model.input_shape)
    copy.set_weights(weights)
    return copy


def _numpy(t: Any, dtype: Any = None) -> np.ndarray:
    """A tensor (or array) as a NumPy array; ``.numpy()`` first, since ``np.asarray``
    cannot read bfloat16 tensors."""
    a = t.numpy() if hasattr(t, "numpy") else np.asarray(t)
    return np.asarray(a) if dtype is None else np.asarray(a).astype(dtype)


_WAYS = ((False, False), (False, True))
"""How a vectorized function is traced, ``(jit_compile, autograph)``, in order of trial:
without AutoGraph first (AutoGraph's source conversion dominates the tracing of a Keras
model), with AutoGraph if that fails (Python control flow on tensor values)."""

_NARROW_WAYS = ((True, False), *_WAYS)
"""The same for float32 and narrower dtypes, compiled with XLA first: some of
TensorFlow's float32 CPU kernels (oneDNN's batched matrix product, in TensorFlow 2.21)
crash the process on the batched shapes that ``tf.vectorized_map`` creates (a
``(B, 1, m, k)`` by ``(k, n)`` product, as in a Keras ``MultiHeadAttention`` layer
called on ``x[None]``), which no exception can catch; XLA's kernels do not."""

NAMES = {"evaluate": "function", "vjp": "reverse-mode rule", "jvp": "forward-mode rule"}
"""How the notes name what ``_Program`` vectorizes."""


class _Compiled:
    """What a :class:`_Program` learns by tracing, shared by the checks of one function.

    The ``tf.function`` of each kind (traced once for any batch size), the ways
    still to try, whether vectorization was given up, and the notes that say so
    (repeated in every check that shares them). Cached per function, argument
    signature and frozen state (see :mod:`._capture_cache`).
    """

    def __init__(self, narrow: bool) -> None:
        ways = _NARROW_WAYS if narrow else _WAYS
        self.compiled: dict[str, Any] = {}
        self.vectorized = {"evaluate": True, "vjp": True, "jvp": True}
        self.ways = {kind: list(ways) for kind in ("evaluate", "vjp", "jvp")}
        self.notes: list[str] = []


class _Program:
    """The function as batched NumPy callables, in one set of dtypes.

    Parameters
    ----------
    call : callable
        ``list of tensors (one per checked leaf) -> list of 1-D output tensors``.
    leaves : list of tf.Tensor
        The checked leaves at the point, in the dtypes to evaluate in.
    layout : Layout
        Layout of the checked leaves.
    out_sizes : list of int
        Sizes of the output leaves.
    batch_size : int
        Largest number of rows per batched call.
    notes : list of str, optional
        Where to say that the vectorized evaluation was given up (the target's notes).
    shared : _Compiled, optional
        The traced functions of an earlier program of the same function; new by default.
    """

    def __init__(
        self,
        tf: Any,
        call: _FlatCall,
        leaves: list[Any],
        layout: Layout,
        out_sizes: list[int],
        batch_size: int,
        notes: list[str] | None = None,
        shared: _Compiled | None = None,
    ) -> None:
        self.tf = tf
        self.call = call
        self.leaves = leaves
        self.layout = layout
        self.out_sizes = out_sizes
        self.batch_size = max(1, int(batch_size))
        self.np_dtypes = [np.dtype(leaf.dtype.as_numpy_dtype) for leaf in leaves]
        self.eps = max(dtype_eps(dt) for dt in self.np_dtypes)
        self.notes = notes if notes is not None else []
        self.shared = shared or _Compiled(self.eps > dtype_eps(np.float64))
        self.vectorized = self.shared.vectorized
        self.ways = self.shared.ways
        self._compiled = self.shared.compiled
        self.notes.extend(n for n in self.shared.notes if n not in self.notes)
        self._verified = False
        self._sizer = ChunkSizer(self.batch_size)
        # the probe's VJP (see _probe_reverse), served again when the check asks for it
        self._probed: dict[bytes, np.ndarray] = {}

    # -- helpers --------------------------------------------------------------------------
    def _parts(self, X: np.ndarray) -> list[Any]:
        """``(B, n)`` float64 → one ``(B, *shape)`` tensor per leaf, in the leaf's dtype."""
        return [
            self.tf.constant(part.astype(dt))
            for part, dt in zip(self.layout.split(X), self.np_dtypes, strict=True)
        ]

    def _flat64(self, tensors: Sequence[Any], sources: Sequence[Any]) -> Any:
        """Concatenate tensors (None → zeros shaped like ``sources``) as flat float64;
        ``ShapeMismatchError`` where a tensor's static shape is not its source's."""
        tf = self.tf
        for t, s in zip(tensors, sources, strict=True):
            _same_shape(tf, t, s)
        flat = [
            tf.reshape(tf.cast(tf.zeros_like(s) if t is None else t, tf.float64), [-1])
            for t, s in zip(tensors, sources, strict=True)
        ]
        return tf.concat(flat, 0)

    def _cotangents(self, u: Any, outs: Sequence[Any]) -> list[Any]:
        parts, off = [], 0
        for o, size in zip(outs, self.out_sizes, strict=True):
            parts.append(self.tf.cast(u[off : off + size], o.dtype))
            off += size
        return parts

    def _run(
        self,
        kind: str,
        fn: Callable[..., Any],
        feed: Callable[[Any, np.ndarray], np.ndarray],
        rowwise: BatchFn,
        A: np.ndarray,
    ) -> np.ndarray:
        """Rows of ``A`` through the vectorized ``fn``, or one plain call per row.

        A batch of at most :data:`SMALL_BATCH` rows (while ``fn`` is not traced yet)
        is evaluated row by row: tracing costs more than a few eager calls. Larger
        batches go through ``fn`` in a ``tf.function``, in the first of
        :data:`_WAYS` (float64) or :data:`_NARROW_WAYS` (narrower dtypes) that
        runs, and row by row for good if none does.
        """
        if self.vectorized[kind] and (len(A) > SMALL_BATCH or kind in self._compiled):
            logger = logging.getLogger("tensorflow")
            level = logger.level
            # each new target traces anew (no retracing warnings), and a function that pfor
            # cannot vectorize makes it log the whole graph at ERROR level before raising
            # (the exception is handled below, and a note says so)
            logger.setLevel(logging.CRITICAL)
            try:
                while True:
                    compiled = self._compile(kind, fn)
                    batch_fn = partial(feed, compiled)
                    if self.ways[kind][0][0]:  # XLA compiles once per shape: few shapes
                        batch_fn = partial(_padded_to_power_of_two, batch_fn)
                    try:
                        if kind == "evaluate":
                            out = self._sizer(batch_fn, A)
                        else:
                            out = chunked(batch_fn, A, self.batch_size)
                    except Exception as exc:  # noqa: BLE001 - pfor or graph mode cannot run fn
                        del self._compiled[kind]
                        self.ways[kind].pop(0)
                        if not self.ways[kind]:
                            self.vectorized[kind] = False
                            self._note(
                                f"tf.vectorized_map cannot vectorize the {NAMES[kind]} "
                                f"({_describe(exc)}); its points are evaluated one call at a "
                                "time, which is slower (Python control flow on tensor values, "
                                "e.g. `if tf.reduce_sum(x) > 0`, is a common cause; tf.where "
                                "vectorizes)"
                            )
                            break
                        continue
                    if kind == "evaluate" and not self._verified:
                        self._verify(out[0], A[0], rowwise)
                    if self.vectorized[kind]:
                        return out
                    break
            finally:
                logger.setLevel(level)
        return np.stack([rowwise(a) for a in A]) if len(A) else np.empty((0, 0))

    def _verify(self, batched: np.ndarray, a: np.ndarray, rowwise: BatchFn) -> None:
        """Give up the vectorized evaluation if it changes the function's values."""
        self._verified = True
        plain = rowwise(a)
        scale = float(np.max(np.abs(plain), initial=0.0)) or 1.0
        if plain.shape != batched.shape or not (
            np.max(np.abs(plain - batched), initial=0.0) <= np.sqrt(self.eps) * scale
        ):
            self.vectorized["evaluate"] = False
            self._note(
                "tf.vectorized_map changed the function's values; points are evaluated one "
                "call at a time"
            )

    def _note(self, note: str) -> None:
        """A note for this check and for every later check sharing the traced functions."""
        self.notes.append(note)
        self.shared.notes.append(note)

    def _compile(self, kind: str, fn: Callable[..., Any]) -> Any:
        """``fn`` as a ``tf.function`` traced once for any batch size."""
        if kind not in self._compiled:
            tf = self.tf
            point = [tf.TensorSpec(leaf.shape, leaf.dtype) for leaf in self.leaves]
            batch = [tf.TensorSpec([None, *leaf.shape], leaf.dtype) for leaf in self.leaves]
            cotangents = tf.TensorSpec([None, sum(self.out_sizes)], tf.float64)
            signature = {"evaluate": [batch], "vjp": [point, cotangents], "jvp": [point, batch]}
            jit_compile, autograph = self.ways[kind][0]
            self._compiled[kind] = tf.function(
                fn,
                input_signature=signature[kind],
                autograph=autograph,
                jit_compile=jit_compile,
            )
        return self._compiled[kind]

    # -- evaluate ---------------------------------------------------------------------------
    def evaluate_one(self, x: np.ndarray) -> np.ndarray:
        """One point ``(n,)`` → ``(m,)``, one plain (eager) call."""
        parts = [p[0] for p in self._parts(x[None, :])]
        return self._concat64(self.call(parts))

    def _concat64(self, outs: Sequence[Any]) -> np.ndarray:
        return self.tf.concat([self.tf.cast(o, self.tf.float64) for o in outs], 0).numpy()

    def evaluate(self, X: np.ndarray) -> np.ndarray:
        tf = self.tf
        call = self.call

        def vec(parts: list[Any]) -> Any:
            return tf.vectorized_map(
                lambda ls: tf.concat([tf.cast(o, tf.float64) for o in call(list(ls))], 0), parts
            )

        return self._run(
            "evaluate", vec, lambda c, A: c(self._parts(A)).numpy(), self.evaluate_one, X
        )

    # -- reverse mode -----------------------------------------------------------------------
    def vjp(self, U: np.ndarray) -> np.ndarray:
        tf = self.tf
        call = self.call
        zero = tf.UnconnectedGradients.ZERO

        def vec(leaves: list[Any], U_t: Any) -> Any:
            with tf.GradientTape(persistent=True) as tape:
                for leaf in leaves:
                    tape.watch(leaf)
                outs = call(leaves)

            def one(u: Any) -> Any:
                g = tape.gradient(
                    outs,
                    leaves,
                    output_gradients=self._cotangents(u, outs),
                    unconnected_gradients=zero,
                )
                return self._flat64(g, leaves)

            return tf.vectorized_map(one, U_t)

        state: dict[str, Any] = {}

        def rowwise(u: np.ndarray) -> np.ndarray:
            return self.vjp_one(u, state)

        return self._run(
            "vjp", vec, lambda c, A: c(self.leaves, tf.constant(A)).numpy(), rowwise, U
        )

    def vjp_one(self, u: np.ndarray, state: dict[str, Any] | None = None) -> np.ndarray:
        """One cotangent ``(m,)`` → ``(n,)``, eagerly; ``state`` keeps the tape between rows.

        A call without ``state`` (the probe) keeps its result for a later call with the
        same cotangent."""
        key = np.asarray(u, dtype=np.float64).tobytes()
        if key in self._probed:
            return self._probed[key].copy()
        if state is None:
            self._probed[key] = self._vjp_one(u, {})
            return self._probed[key].copy()
        return self._vjp_one(u, state)

    def _vjp_one(self, u: np.ndarray, state: dict[str, Any]) -> np.ndarray:
        tf = self.tf
        if "tape" not in state:  # one recorded forward pass serves every row
            with tf.GradientTape(persistent=True) as tape:
                for leaf in self.leaves:
                    tape.watch(leaf)
                state["outs"] = self.call(self.leaves)
            state["tape"] = tape
        outs = state["outs"]
        g = state["tape"].gradient(
            outs,
            self.leaves,
            output_gradients=self._cotangents(tf.constant(u), outs),
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return self._flat64(g, self.leaves).numpy()

    # -- forward mode -----------------------------------------------------------------------
    def _jvp_tensor(self, leaves: list[Any], tangents: list[Any]) -> Any:
        tf = self.tf
        with tf.autodiff.ForwardAccumulator(leaves, tangents) as acc:
            outs = self.call(leaves)
        return self._flat64(
            [acc.jvp(o, unconnected_gradients=tf.UnconnectedGradients.ZERO) for o in outs], outs
        )

    def jvp_one(self, v: np.ndarray) -> np.ndarray:
        tangents = [p[0] for p in self._parts(v[None, :])]
        return self._jvp_tensor(self.leaves, tangents).numpy()

    def jvp(self, V: np.ndarray) -> np.ndarray:
        tf = self.tf

        def vec(leaves: list[Any], parts: list[Any]) -> Any:
            return tf.vectorized_map(lambda ts: self._jvp_tensor(leaves, list(ts)), parts)

        return self._run(
            "jvp", vec, lambda c, A: c(self.leaves, self._parts(A)).numpy(), self.jvp_one, V
        )


class TensorflowBackend(Backend):
    """TensorFlow tensors and variables; Keras 3 and tf-keras models."""

    name = "tensorflow"
    module = "tensorflow"
    extra = "tensorflow"
    supports_autodiff = True
    supports_float64 = True
    supports_vmap = True
    arbitrary_precision = False

    def __init__(self) -> None:
        super().__init__()
        import tensorflow as tf

        self.tf = tf

    @classmethod
    def owns(cls, x: Any) -> bool:
        tf = sys.modules.get("tensorflow")
        return tf is not None and isinstance(x, (tf.Tensor, tf.Variable))

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.array(_numpy(x), copy=True)

    def version(self) -> str:
        return str(self.tf.__version__)

    def from_numpy(self, a: np.ndarray) -> Any:
        return self.tf.constant(a)

    def asarray(self, array: Any, dtype: str | None = None) -> Any:
        x = np.array(array, copy=True)
        attr = dtype if dtype is not None else x.dtype.name
        try:
            tf_dtype = self.tf.as_dtype(attr)
        except TypeError as exc:
            raise InputTypeError(f"tensorflow has no dtype {attr!r}") from exc
        return self.tf.constant(x, dtype=tf_dtype)

    def namespace(self) -> Any:
        return self.tf.experimental.numpy  # NumPy-style functions on tf.Tensor, differentiable

    def devices(self) -> list[str]:
        return [
            d.name.replace("/physical_device:", "") for d in self.tf.config.list_physical_devices()
        ]

    def complex_parts(self, x: Any) -> tuple[Any, Any]:
        return self.tf.math.real(x), self.tf.math.imag(x)

    def make_complex(self, re: Any, im: Any) -> Any:
        return self.tf.complex(re, im)

    def stack_pair(self, re: Any, im: Any) -> Any:
        return self.tf.stack([re, im], axis=-1)

    def _pullback(
        self, g: Callable[..., Any], primals: list[Any], cotangent: np.ndarray
    ) -> list[np.ndarray | None]:
        tf = self.tf
        checked = [tf.convert_to_tensor(p) for p in primals]
        with tf.GradientTape() as tape:
            for c in checked:
                tape.watch(c)
            out = tf.convert_to_tensor(g(*checked))
        cot = tf.reshape(tf.constant(cotangent, dtype=out.dtype), tf.shape(out))
        grads = tape.gradient(out, checked, output_gradients=cot)
        return [None if v is None else np.asarray(v) for v in grads]

    # -- helpers ------------------------------------------------------------------------------
    def _flat_outputs(self, out: Any) -> list[Any]:
        """The output pytree as a list of 1-D real tensors.

        A complex output of shape ``S`` enters as its real pairs ``(Re, Im)`` of
        shape ``S + (2,)`` (see :mod:`polygrad.complex`), differentiated through
        ``tf.math.real`` and ``tf.math.imag``.
        """
        tf = self.tf
        flat = []
        for o in flatten(out)[0]:
            t = tf.convert_to_tensor(o)
            if t.dtype.is_complex:
                t = tf.stack([tf.math.real(t), tf.math.imag(t)], axis=-1)
            flat.append(tf.reshape(t, [-1]))
        return flat

    def _promote(self, x: Any, copies: dict[int, Any]) -> Any:
        """``x`` with floating values promoted to float64 (Keras models: a float64 copy)."""
        tf = self.tf
        if is_keras_model(x):
            if id(x) not in copies:
                copies[id(x)] = float64_model_copy(x)
            return copies[id(x)]
        if _is_keras_loss(x):
            return type(x).from_config({**x.get_config(), "dtype": "float64"})
        if isinstance(x, tf.Variable) and x.dtype.is_floating:
            return tf.Variable(tf.cast(x, tf.float64), trainable=x.trainable)
        if isinstance(x, tf.Tensor) and x.dtype.is_floating:
            return tf.cast(x, tf.float64)
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            return x.astype(np.float64)
        return x

    def _has_custom_gradient(self, call: _FlatCall, leaves: list[Any]) -> bool:
        """Whether the traced function contains a ``tf.custom_gradient`` (or gradient override)."""
        tf = self.tf
        specs = [tf.TensorSpec(leaf.shape, leaf.dtype) for leaf in leaves]
        for autograph in (False, True):
            try:
                traced = tf.function(lambda *ls: call(list(ls)), autograph=autograph)
                graph = traced.get_concrete_function(*specs).graph
                break
            except Exception:  # noqa: BLE001 - cannot be traced (this way): cannot tell
                continue
        else:
            return False
        graphs = [graph] + [
            fn.graph for fn in getattr(graph, "_functions", {}).values() if hasattr(fn, "graph")
        ]
        for g in graphs:
            for op in g.get_operations():
                if op.type == "IdentityN" and "_gradient_op_type" in op.node_def.attr:
                    return True
        return False

    def _check_gradient_flows(
        self, call: _FlatCall, leaves: list[Any], y0: np.ndarray, eps: float
    ) -> list[str]:
        """Raise when no output is on the gradient tape of any input, yet the values depend
        on the inputs (a ``.numpy()`` round trip, ``tf.stop_gradient`` of the output).

        Not every such function is the user's error, and which it is is measured: a
        constant function passes (its autodiff gradient, zero, is right); so does a
        piecewise-constant one (``tf.floor``, ``tf.round``) that is constant on both
        sides of the point although the guard's 1% move crosses a step; and an
        operation in the graph whose registered gradient is None for an argument on
        the way (``tf.math.zeta`` with respect to ``x``) is the framework's missing
        derivative, named in a note, whose zero the check judges.

        Returns
        -------
        list of str
            Notes for the report: why a zero gradient is judged instead of refused.

        Raises
        ------
        InputTypeError
            The gradient cannot flow from the output to the inputs; the message
            names the cause when the function's graph shows it.
        """
        if gradient_target():  # order=2: a disconnected gradient's zero derivative is judged
            return []
        tf = self.tf
        try:
            with tf.GradientTape() as tape:
                for leaf in leaves:
                    tape.watch(leaf)
                outs = call(leaves)
            if any(g is not None for g in tape.gradient(outs, leaves)):
                return []
        except Exception:  # noqa: BLE001 - the checks that follow report what fails
            return []
        layout = Layout.from_shapes([""] * len(leaves), [tuple(v.shape) for v in leaves])

        def evaluate(X: np.ndarray) -> np.ndarray:  # (k, n) -> (k, m)
            rows = []
            for row in X:
                parts = layout.split(row)
                moved = [
                    tf.cast(tf.constant(a), v.dtype) for a, v in zip(parts, leaves, strict=True)
                ]
                rows.append(np.concatenate([_numpy(o, np.float64) for o in call(moved)]))
            return np.stack(rows)

        x0 = np.concatenate([_numpy(v, np.float64).ravel() for v in leaves])
        change = change_under_a_move(evaluate, x0, y0, eps)
        if not change:
            return []  # a constant function: autodiff's zero gradient is right
        steps = steps_only(evaluate, x0, y0, eps, change)
        if steps is not None:  # floor, round near a step: zero is right, and judged
            return [steps.note("the gradient tape records no path")]
        specs = [tf.TensorSpec(leaf.shape, leaf.dtype) for leaf in leaves]
        cause = disconnection_cause(tf, call, specs)
        missing = [] if cause else missing_derivatives(tf, call, specs)
        if missing:  # the framework's missing derivative: a finding, for the check to judge
            return [m.note() for m in missing]
        raise InputTypeError(
            "the gradient cannot flow: the function's output is not connected to its inputs "
            "on the gradient tape, although its values change with them (largest change "
            f"{change:.3g} for a 1% move); autodiff would read this as a zero "
            f"gradient. Cause: {cause or _UNSEEN_CUT}. "
            "Compute the output with TensorFlow operations on the input tensors."
        )

    @staticmethod
    def _models_in(f: Any, args: tuple[Any, ...]) -> list[Any]:
        found = [f] if is_keras_model(f) else []
        found += [leaf for leaf in flatten(list(args))[0] if is_keras_model(leaf)]
        return list({id(m): m for m in found}.values())

    # -- the target ---------------------------------------------------------------------------
    def make_target(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        supplied: Supplied,
        batch_size: int,
        wrt: str = "inputs",
    ) -> Target:
        _check_options(supplied, wrt)
        notes: list[str] = []
        models = self._models_in(f, args)
        if wrt == "inputs":
            spec = self._input_spec(f, args, argnums)
        else:
            spec = self._parameter_spec(f, args, models)
        layout, originals, is_var, raw, raw64_factory = spec
        wd = np.dtype(narrowest_input_dtype([a.dtype for a in originals], notes))
        eps = dtype_eps(wd)
        x0 = np.concatenate([a.astype(np.float64).ravel() for a in originals])

        def call(leaves: list[Any]) -> list[Any]:
            return self._flat_outputs(raw(leaves))

        cached = _cache_for(f, args, argnums, wrt, layout, originals, is_var)
        specs = [self.tf.TensorSpec(a.shape, self.tf.as_dtype(a.dtype)) for a in originals]
        written = cached("tf.written", lambda: variables_written(self.tf, call, specs))
        watched = _Watched.of(models, written)
        out_layout, leaves, y0 = self._plain_calls(
            raw, call, originals, is_var, watched, eps, notes
        )
        out_sizes = [leaf.size for leaf in out_layout.leaves]
        narrow = cached("tf.narrowest", lambda: narrowest_computed(self.tf, call, specs))
        if narrow is not None and dtype_eps(narrow[0]) > eps:  # a cast down, a dtype policy
            notes.append(computed_in_note(wd.name, narrow[0].name, narrow[1]))
            wd, eps = narrow[0], dtype_eps(narrow[0])
        shared = cached("tf.compiled", lambda: _Compiled(eps > dtype_eps(np.float64)))
        program = _Program(self.tf, call, leaves, layout, out_sizes, batch_size, notes, shared)
        programs: dict[str, _Program | None] = {"": program, "64": program}
        rules64 = True  # whether the float64 program's VJP/JVP are the user's rules
        if wd != np.float64:
            programs["64"], rules64 = self._float64_program(
                call, raw64_factory, originals, layout, out_sizes, batch_size, notes, cached
            )
        rng = np.random.default_rng(0)
        failed: list[str] = []  # notes on reverse-mode rules that failed their probe
        fns = _rule_functions(programs, rules64, cached, y0.size, notes, failed)
        target = Target(
            x0=x0,
            y0=y0,
            working_dtype=wd.name,
            eps=eps,
            evaluate=program.evaluate,
            evaluate64=fns["evaluate64"],
            vjp=fns["vjp"],
            vjp64=fns["vjp64"],
            jvp=fns["jvp"],
            jvp64=fns["jvp64"],
            input_layout=layout,
            output_layout=out_layout,
            backend=self.name,
            notes=notes,
            mode_notes={"rev": failed} if failed else {},
            deferred=self._deferred(call, leaves, originals, programs, cached, rng, x0.size),
            symmetric_reads=lambda: cached(
                "tf.symmetric", lambda: symmetric_reads(self.tf, call, specs)
            ),
        )
        # built when a check asks for it
        defer_quad(target, partial(quad_of_mp_program, build=_quad_from_graph), interpreted=True)
        return target

    def _plain_calls(
        self,
        raw: Callable[[list[Any]], Any],
        call: _FlatCall,
        originals: list[np.ndarray],
        is_var: list[bool],
        watched: _Watched,
        eps: float,
        notes: list[str],
    ) -> tuple[Any, list[Any], np.ndarray]:
        """Two plain calls at x0: side effects, determinism, output layout, and whether the
        gradient can flow (its notes appended to ``notes``).

        Returns
        -------
        out_layout : Layout
            The output pytree's leaves.
        leaves : list of tf.Tensor
            The inputs as constants.
        y0 : ndarray, shape (m,)
            The flat output at x0, as float64.

        Raises
        ------
        InputMutationError
            A call changed an input, a model's variables or a variable it writes
            (restored).
        NondeterministicFunctionError
            The two calls returned different values.
        """
        tf = self.tf
        state = watched.values()
        first = [
            tf.Variable(a) if v else tf.constant(a) for a, v in zip(originals, is_var, strict=True)
        ]
        try:
            out_tree = raw(first)
            check_not_mutated([_numpy(v) for v in first], originals)
            out_leaves, out_paths, _ = flatten(out_tree)
            out_layout = output_layout([_numpy(o) for o in out_leaves], out_paths)
            leaves = [tf.constant(a) for a in originals]
            y1 = np.concatenate([_numpy(o, np.float64) for o in self._flat_outputs(out_tree)])
            y2 = np.concatenate([_numpy(o, np.float64) for o in call(leaves)])
        finally:
            changed = watched.restore(state)
        scale = float(np.max(np.abs(y1), initial=0.0)) or 1.0
        # a random layer (dropout with training=True) also moves its seed's state: the
        # different values say more than the state
        if y1.shape != y2.shape or np.max(np.abs(y1 - y2), initial=0.0) > 64 * eps * scale:
            raise NondeterministicFunctionError(
                "the function returned different values for the same input (largest change "
                f"{np.max(np.abs(y1 - y2)):.3g}); a gradient check needs a deterministic "
                "function. Call Keras models with training=False (dropout and other random "
                "layers), or fix the randomness inside the function."
            )
        if changed is not None:
            raise InputMutationError(changed)
        notes += self._check_gradient_flows(call, leaves, y1, eps)
        return out_layout, leaves, y1

    def _deferred(
        self,
        call: _FlatCall,
        leaves: list[Any],
        originals: list[np.ndarray],
        programs: dict[str, _Program | None],
        cached: Any,
        rng: np.random.Generator,
        n: int,
    ) -> dict[str, Callable[[Target], None]]:
        """The target's work done only when a check asks for it: forward mode, mp."""

        def probe_forward(target: Target) -> None:
            # deferred until a check asks for forward mode: TensorFlow builds the forward
            # rules of a model's ops on first use, which costs more than a whole reverse check
            if cached("tf.custom_gradient", lambda: self._has_custom_gradient(call, leaves)):
                target.jvp = target.jvp64 = None
                target.note_unavailable(
                    "fwd",
                    "the function uses tf.custom_gradient, which TensorFlow's forward mode "
                    "(ForwardAccumulator) ignores; only reverse mode (GradientTape) is checked",
                )
                return
            for suffix, prog in programs.items():
                if prog is None or getattr(target, "jvp" + suffix) is None:
                    continue
                try:
                    prog.jvp_one(rng.standard_normal(n))
                except Exception as exc:  # noqa: BLE001 - reported in the notes
                    setattr(target, "jvp" + suffix, None)
                    target.note_unavailable("fwd", _mode_failed("forward", suffix, exc))

        def build_mp(target: Target) -> None:
            # deferred: capturing the graph again costs more than a float32 check
            target.evaluate_mp, target.mp_unavailable_reason = cached(
                "tf.mp", lambda: self._mp_evaluator(call, originals)
            )

        def build_rule_mp(target: Target) -> None:
            # deferred: only a check whose entries are still MISMATCH asks for it
            rule = cached("tf.rule_mp", lambda: tf_vjp_mp(self.tf, call, originals, target.m))
            x0 = target.x0
            target.vjp_mp = None if rule is None else (lambda U, dps: rule(x0, U, dps))

        return {"forward": probe_forward, "mp": build_mp, "rule_mp": build_rule_mp}

    def _mp_evaluator(
        self, call: _FlatCall, originals: list[np.ndarray]
    ) -> tuple[Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None, str | None]:
        """``(evaluate_mp, None)`` running the captured float64 graph on mpmath numbers
        (:mod:`polygrad.mpexec.tf_graph`), or ``(None, reason)`` naming what blocks it."""
        from ..mpexec.errors import UnsupportedOperatorError
        from ..mpexec.tf_graph import tf_mp_evaluator

        tf = self.tf
        specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in originals]
        # a capture of its own: the float64 program's concrete function, once run (batched,
        # on a tape), no longer has the graph of the plain function (the mp evaluator built
        # from it is cached instead)
        captured = promote_to_float64(tf, call, specs)
        function: Any = captured.function  # a concrete function: its graph is the program
        if function is None:
            return None, f"{_MP_UNAVAILABLE}: {captured.blocked}"
        inputs = [t.name for t in function.inputs]
        outputs = [t.name for t in function.outputs]
        try:
            evaluate = tf_mp_evaluator(
                function.graph.as_graph_def(), inputs, outputs, [a.shape for a in originals]
            )
        except UnsupportedOperatorError as exc:  # names every op without a rule
            return None, f"{_MP_UNAVAILABLE}: {exc}"
        except Exception as exc:  # noqa: BLE001 - any failure means: no mp reference
            return None, f"{_MP_UNAVAILABLE}: {_describe(exc)}"
        return evaluate, None

    def _input_spec(self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]):
        """Layout, values and callables for ``wrt="inputs"``."""
        tf = self.tf
        pf = PointFunction(f, args, argnums)  # validates dtypes and finiteness
        originals = [np.array(self.to_numpy(leaf)) for i in argnums for leaf in flatten(args[i])[0]]
        is_var = [isinstance(leaf, tf.Variable) for i in argnums for leaf in flatten(args[i])[0]]

        def raw(leaves: list[Any]) -> Any:
            return f(*pf.args_with(leaves))

        def raw64_factory() -> Callable[[list[Any]], Any]:
            copies: dict[int, Any] = {}
            f64 = self._promote(f, copies)
            args64 = tuple(
                a if i in argnums else tree_map(lambda x: self._promote(x, copies), a)
                for i, a in enumerate(args)
            )
            pf64 = PointFunction(f64, args64, argnums)
            return lambda leaves: f64(*pf64.args_with(leaves))

        return pf.layout, originals, is_var, raw, raw64_factory

    def _parameter_spec(self, f: Callable[..., Any], args: tuple[Any, ...], models: list[Any]):
        """Layout, values and callables for ``wrt="parameters"`` (Keras 3 models)."""
        if len(models) != 1 or not _is_keras3(models[0]):
            raise TypeError(
                "wrt='parameters' needs exactly one Keras 3 model, given as the function "
                "(check(model, x, wrt='parameters')) or as an argument (check(lambda model, x: "
                f"loss(model(x)), model, x, wrt='parameters')); found {len(models)} Keras 3 "
                "model(s)"
            )
        import keras

        model = models[0]
        variables = list(model.trainable_variables)
        if not variables:
            raise ValueError(f"the model {model.name!r} has no trainable weights")
        originals = [np.array(v.numpy()) for v in variables]
        layout = Layout.from_shapes([v.path for v in variables], [a.shape for a in originals])

        def stateless(fn: Callable[..., Any], fn_args: tuple[Any, ...], vs: list[Any]):
            def raw(leaves: list[Any]) -> Any:
                with keras.StatelessScope(state_mapping=list(zip(vs, leaves, strict=True))):
                    return fn(*fn_args)

            return raw

        def raw64_factory() -> Callable[[list[Any]], Any]:
            copies: dict[int, Any] = {}
            f64 = self._promote(f, copies)
            args64 = tree_map(lambda x: self._promote(x, copies), tuple(args))
            return stateless(f64, args64, list(copies[id(model)].trainable_variables))

        raw = stateless(f, args, variables)
        return layout, originals, [False] * len(variables), raw, raw64_factory

    def _float64_program(
        self,
        call: _FlatCall,
        raw64_factory: Callable[[], Callable[[list[Any]], Any]],
        originals: list[np.ndarray],
        layout: Layout,
        out_sizes: list[int],
        batch_size: int,
        notes: list[str],
        cached: _Cached,
    ) -> tuple[_Program | None, bool]:
        """The float64 program and whether its rules (VJP, JVP) are the user's.

        The function captured as a graph and promoted (see :mod:`._tf_promote`) is
        the main path. A function whose graph holds a ``tf.custom_gradient`` rule,
        or that cannot be captured, is called with its arguments promoted instead
        (a Keras model or tensor given as an argument: a float64 copy); failing
        that, a captured graph with a custom rule serves the reference values
        alone. Returns ``(None, False)``, with a note naming what blocked
        promotion, when nothing works.
        """
        tf = self.tf
        leaves64 = [tf.constant(a.astype(np.float64)) for a in originals]
        specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in originals]
        captured = cached("tf.float64", lambda: promote_to_float64(tf, call, specs))

        def program(call64: _FlatCall, route: str) -> _Program:
            shared = cached("tf.compiled64" + route, partial(_Compiled, False))
            return _Program(tf, call64, leaves64, layout, out_sizes, batch_size, notes, shared)

        call64, reason = self._captured_call(captured, leaves64, out_sizes)
        if (
            call64 is not None
            and not captured.custom_gradient
            and self._graph_rule_differs(call, specs, originals, notes)
        ):
            return program(call64, "graph"), False
        if call64 is not None and not captured.custom_gradient:
            if captured.widened_draws:
                notes.append(
                    "f draws random numbers (tf.random), and what a seed draws depends on the "
                    "dtype drawn: its float64 graph draws each as f draws it, in f's own "
                    "dtype, and widens it"
                )
            return program(call64, "graph"), True
        by_arguments, arg_reason = self._argument_call(raw64_factory, leaves64, out_sizes)
        if by_arguments is not None:
            return program(by_arguments, "arguments"), True
        if call64 is not None:
            notes.append(
                "the function uses tf.custom_gradient: its float64 graph gives the reference "
                "values, but the rule itself runs only in the working dtype (its Python "
                "gradient function belongs to the original trace), so a wrong rule cannot be "
                "told from round-off in the working dtype (no UNSTABLE verdict)"
            )
            return program(call64, "graph"), False
        notes.append(
            f"the function cannot be promoted to float64: {reason or arg_reason}; the "
            "reference is computed in the working dtype, with error bars to match"
        )
        return None, False

    def _graph_rule_differs(
        self, call: _FlatCall, specs: list[Any], originals: list[np.ndarray], notes: list[str]
    ) -> bool:
        """Whether AutoGraph had to convert ``f`` to trace it and the graph's gradient, in
        the working dtype at the point, is not the one ``f`` computes eagerly (then a note
        says so): ``scale = float(tf.reduce_max(x))`` cuts the tape eagerly, while the
        graph casts, and differentiates through ``scale``. The float64 graph then gives
        the reference values, but its rule is not ``f``'s, and cannot clear a failing
        entry as round-off (UNSTABLE)."""
        tf = self.tf
        concrete = autographed_graph(tf, call, specs)
        if concrete is None:
            return False
        leaves = [tf.constant(a) for a in originals]
        try:
            eager, graph = (_pulled_back(tf, fn, leaves) for fn in (call, _as_list(concrete)))
            scale = float(np.max(np.abs(np.concatenate([eager, graph])), initial=0.0))
            differs = float(np.max(np.abs(eager - graph), initial=0.0)) > GRAPH_RULE_APART * scale
        except Exception:  # noqa: BLE001 - the gradients cannot be compared: nothing said
            return False
        if not differs:
            return False
        notes.append(
            "TensorFlow could trace f only through AutoGraph, which rewrites its Python "
            "(float() or int() of a tensor becomes a cast, which the graph differentiates "
            "and eager code does not), and the graph's gradient differs from the one f "
            "computes eagerly at the point: the float64 graph gives the reference values, "
            "but its rule is not f's, so a wrong rule cannot be told from round-off in the "
            "working dtype (no UNSTABLE verdict)"
        )
        return True

    def _captured_call(
        self, captured: Float64Graph, leaves64: list[Any], out_sizes: list[int]
    ) -> tuple[_FlatCall | None, str | None]:
        """The captured float64 graph as a flat call, after one run at the point."""
        tf = self.tf
        function = captured.function
        if function is None:
            return None, captured.blocked

        def call64(leaves: list[Any]) -> list[Any]:
            return [tf.reshape(o, [-1]) for o in function(*leaves)]

        try:
            outs = call64(leaves64)
        except Exception as exc:  # noqa: BLE001 - e.g. a missing float64 kernel
            return None, failed_run_reason(exc)
        if any(o.dtype != tf.float64 for o in outs) or [o.shape[0] for o in outs] != out_sizes:
            return None, "its float64 graph returns other dtypes or shapes"
        return call64, None

    def _argument_call(
        self,
        raw64_factory: Callable[[], Callable[[list[Any]], Any]],
        leaves64: list[Any],
        out_sizes: list[int],
    ) -> tuple[_FlatCall | None, str | None]:
        """The function called with its arguments promoted, or why it cannot be."""
        tf = self.tf
        try:
            raw64 = raw64_factory()
            outs = self._flat_outputs(raw64(leaves64))
        except Exception as exc:  # noqa: BLE001 - any failure means: no float64 evaluation
            return None, f"it cannot be called with float64 arguments ({_describe(exc)})"
        narrow = sorted({o.dtype.name for o in outs if o.dtype != tf.float64})
        if narrow or [int(o.shape[0]) for o in outs] != out_sizes:
            return None, f"it returns {', '.join(narrow) or 'other shapes'} for float64 input"

        def call64(leaves: list[Any]) -> list[Any]:
            return self._flat_outputs(raw64(leaves))

        return call64, None

    # -- order 2 ------------------------------------------------------------------------------
    def gradient_function(
        self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]
    ) -> Callable[..., Any]:
        """A TF function of the same arguments returning the gradient of ``f``.

        The result is shaped like ``args[argnums[0]]`` (a tuple for several
        argnums). For a non-scalar ``f`` it is the VJP with a fixed
        pseudo-random normal cotangent (seed 0). The function is
        differentiable again (nested ``tf.GradientTape``).
        """
        tf = self.tf

        def grad_f(*a: Any) -> Any:
            treedefs, leaves = [], []
            for i in argnums:
                lv, _, td = flatten(a[i])
                treedefs.append(td)
                leaves += [tf.convert_to_tensor(leaf) for leaf in lv]
            new, off = list(a), 0
            with tf.GradientTape() as tape:
                for leaf in leaves:
                    tape.watch(leaf)
                for i, td in zip(argnums, treedefs, strict=True):
                    new[i] = unflatten(td, leaves[off : off + td.num_leaves])
                    off += td.num_leaves
                outs = self._flat_outputs(f(*new))
            cots = None
            if sum(int(o.shape[0]) for o in outs) != 1:
                rng = np.random.default_rng(0)
                cots = [tf.constant(rng.standard_normal(o.shape), o.dtype) for o in outs]
            grads = tape.gradient(
                outs,
                leaves,
                output_gradients=cots,
                unconnected_gradients=tf.UnconnectedGradients.ZERO,
            )
            result, off = [], 0
            for td in treedefs:
                result.append(unflatten(td, grads[off : off + td.num_leaves]))
                off += td.num_leaves
            return result[0] if len(result) == 1 else tuple(result)

        return grad_f


_Cached = Callable[[str, Callable[[], Any]], Any]
"""``cached(kind, build)``: the capture of one kind for the function being checked."""


@dataclass(frozen=True)
class _Watched:
    """The variables a call must leave unchanged: the weights of the models passed to
    ``check`` and every variable the function writes (see
    :func:`._tf_promote.variables_written`), each with its owner's words."""

    variables: tuple[Any, ...]
    owners: tuple[str, ...]

    @staticmethod
    def of(models: list[Any], written: list[Any]) -> _Watched:
        """The models' weights and the written variables, each variable once."""
        pairs = {id(v): (v, f"of the model {m.name!r} ") for m in models for v in m.weights}
        for v in written:
            pairs.setdefault(id(v), (v, ""))
        return _Watched(tuple(v for v, _ in pairs.values()), tuple(o for _, o in pairs.values()))

    def values(self) -> list[np.ndarray]:
        """Copies of the current values."""
        return [_numpy(v).copy() for v in self.variables]

    def restore(self, before: list[np.ndarray]) -> str | None:
        """Restore every variable if a call changed one; the error message for the first
        one changed, or None where none changed."""
        for var, owner, value in zip(self.variables, self.owners, before, strict=True):
            if np.array_equal(_numpy(var), value, equal_nan=True):
                continue
            for v, val in zip(self.variables, before, strict=True):
                v.assign(val)
            return (
                f"calling the function changed the variable {var.name!r} {owner}(e.g. "
                "BatchNormalization statistics with training=True, or an assign_add); a "
                "gradient check needs a function without side effects. Call the model with "
                "training=False. The variables have been restored."
            )
        return None


def _cache_for(
    f: Any,
    args: tuple[Any, ...],
    argnums: tuple[int, ...],
    wrt: str,
    layout: Layout,
    originals: list[np.ndarray],
    is_var: list[bool],
) -> _Cached:
    """Captures of ``f`` keyed by its argument signature and frozen state (``CAPTURES``)."""
    key = (
        wrt,
        tuple(argnums),
        tuple(leaf.name for leaf in layout.leaves),
        tuple((a.shape, a.dtype.str) for a in originals),
        tuple(is_var),
    )
    state = frozen_state(f, args, argnums if wrt == "inputs" else None)

    def cached(kind: str, build: Callable[[], Any]) -> Any:
        return CAPTURES.get(kind, key, state, build)

    return cached


def _probe_reverse(prog: _Program, u: np.ndarray, suffix: str) -> str | None:
    """None when one VJP runs eagerly, else the note saying why reverse mode is unavailable."""
    try:
        prog.vjp_one(u)
    except ShapeMismatchError:  # the rule's own error, not a mode TensorFlow lacks
        raise
    except Exception as exc:  # noqa: BLE001 - reported in the notes
        return _mode_failed("reverse", suffix, exc)
    return None


def _same_shape(tf: Any, t: Any, source: Any) -> None:
    """``ShapeMismatchError`` where the derivative ``t`` (a tensor) has a static shape other
    than its ``source``'s: TensorFlow passes a custom gradient's wrong shape on (a scalar
    for a vector input), and no comparison of it would mean anything."""
    if not isinstance(t, tf.Tensor):
        return
    ts, ss = t.shape, source.shape
    if ts.is_fully_defined() and ss.is_fully_defined() and ts != ss:
        raise ShapeMismatchError(
            f"a derivative of shape {tuple(ts)} came back for a tensor of shape "
            f"{tuple(ss)}, which TensorFlow passes on unchecked: does a custom gradient "
            "(tf.custom_gradient) return the wrong shape, or does an op lose the static "
            "shape on the way (tf.py_function without set_shape)?"
        )


def _padded_to_power_of_two(fn: BatchFn, A: np.ndarray) -> np.ndarray:
    """``fn(A)``, with ``A`` padded (repeating its first row) to a power-of-two number of rows."""
    rows = len(A)
    size = 1 << max(0, rows - 1).bit_length()
    if size == rows:
        return fn(A)
    return fn(np.concatenate([A, np.repeat(A[:1], size - rows, axis=0)]))[:rows]


#: the cause of a cut-off gradient when the function's graph does not show it
_UNSEEN_CUT = (
    "a computation outside TensorFlow, .numpy(), tf.stop_gradient or an integer cast on the way"
)
_MP_UNAVAILABLE = "high-precision (mpmath) evaluation is unavailable for this function"


def _mode_failed(mode: str, suffix: str, exc: BaseException) -> str:
    """The note for a ``mode`` ("reverse"/"forward") rule that failed on its probe, in
    the working dtype (``suffix ""``) or in its float64 re-run (``"64"``)."""
    if suffix == "":
        return f"{mode} mode failed: {_describe(exc)}"
    return (
        f"the float64 re-run of the {mode}-mode rule failed ({_describe(exc)}); the "
        "working-dtype rule is checked, but without its float64 value a wrong rule cannot be "
        "told from round-off in the working dtype (no UNSTABLE verdict)"
    )


def _check_options(supplied: Supplied, wrt: str) -> None:
    """TensorFlow differentiates by itself, with respect to inputs or parameters.

    Raises
    ------
    TypeError
        A derivative was supplied (``grad=``, ``jac=``, ``vjp=``, ``jvp=``).
    ValueError
        ``wrt`` is neither ``"inputs"`` nor ``"parameters"``.
    """
    if supplied.given():
        raise TypeError(
            "TensorFlow functions are differentiated with tf.GradientTape; grad=, jac=, "
            "vjp= and jvp= are for NumPy functions. Use tf.custom_gradient to supply a rule."
        )
    if wrt not in ("inputs", "parameters"):
        raise ValueError(f"wrt must be 'inputs' or 'parameters', got {wrt!r}")


def _rule_functions(
    programs: dict[str, Any],
    rules64: bool,
    cached: Any,
    m: int,
    notes: list[str],
    failed_notes: list[str],
) -> dict[str, BatchFn | None]:
    """``evaluate``, ``vjp``, ``jvp`` and their ``...64`` twins of the programs.

    A VJP that fails its probe (the cotangent of output 0, of size ``m``) is left out
    with a note, appended to ``notes`` and ``failed_notes``; JVPs are probed
    later, when a check asks for forward mode.
    """
    fns: dict[str, BatchFn | None] = {}
    for suffix, prog in programs.items():
        fns["evaluate" + suffix] = prog.evaluate if prog is not None else None
        fns["vjp" + suffix] = fns["jvp" + suffix] = None
        if prog is None or (suffix == "64" and not rules64):
            continue
        failed = cached(
            "tf.vjp" + suffix,
            # the first row of a full Jacobian: the check's own first VJP reuses it
            partial(_probe_reverse, prog, np.eye(1, m)[0], suffix),
        )
        if failed is None:
            fns["vjp" + suffix] = prog.vjp
        else:
            notes.append(failed)
            failed_notes.append(failed)
        fns["jvp" + suffix] = prog.jvp
    return fns


def _quad_from_graph(evaluate_mp: Any, q: Any) -> Callable[[np.ndarray], np.ndarray]:
    """``evaluate_quad`` from the frozen float64 graph the mp reference runs
    (:mod:`polygrad.mpexec.tf_quad`)."""
    from ..mpexec.tf_quad import quad_tf_evaluator

    return quad_tf_evaluator(evaluate_mp.program, evaluate_mp.shapes, q)
