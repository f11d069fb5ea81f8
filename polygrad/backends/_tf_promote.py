"""A TensorFlow function captured once as a graph and re-run in float64.

The user's function (a closure, a global, a method reading ``self.model``, a
``functools.partial``, a ``tf.function``, a Keras 3 or tf-keras model or layer
called inside, a ``tfp`` distribution...) is traced once into a concrete
function of the checked leaves in their working dtype. Everything it computes
with is then part of that graph: captured ``tf.Variable`` s are frozen into
constants, and captured tensors already are constants. The graph is rewritten
so that every floating dtype (float16, bfloat16, float32) becomes float64:
type attributes, constant values, casts, placeholders, and the signatures of
the functions in its library (``tf.cond``/``tf.while_loop`` branches, nested
``tf.function`` s). Imported back, it is a concrete function of float64 leaves
that ``tf.GradientTape``, ``tf.autodiff.ForwardAccumulator`` and
``tf.vectorized_map`` handle like any other. The user's objects are read,
never changed.

Inference-mode fused batch norms (tf-keras ``BatchNormalization`` on images),
which have no float64 kernel, are first replaced by their formula. Promotion
is refused, with the blocking operation named, when the graph runs
Python (``tf.py_function``, ``tf.numpy_function``), when an operation has no
float64 kernel, or when the promoted graph fails to run. A function that
cannot be traced at all (Python control flow on tensor values, ``.numpy()``
inside) is refused with the tracing error.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import describe_exception, dtype_eps

__all__ = [
    "SYMMETRIC_INPUT_OPS",
    "Float64Graph",
    "narrowest_computed",
    "promote_to_float64",
    "symmetric_reads",
    "variables_written",
]

SYMMETRIC_INPUT_OPS = frozenset({
    "Cholesky", "BatchCholesky", "SelfAdjointEig", "SelfAdjointEigV2", "BatchSelfAdjointEig",
    "BatchSelfAdjointEigV2", "XlaSelfAdjointEig",
})  # fmt: skip
"""TensorFlow op types documented to read a symmetric (Hermitian) matrix
(``tf.linalg.cholesky``, ``logdet``, ``eigh``, ``eigvalsh``): each reads one triangle."""

_PYTHON_OPS = {
    "EagerPyFunc": "tf.py_function",
    "PyFunc": "tf.numpy_function",
    "PyFuncStateless": "tf.numpy_function",
}
_CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
# attributes that keep a function call from being inlined (XLA clusters, noinline)
_NO_INLINE_ATTRS = (
    "_XlaMustCompile",
    "_XlaCompile",
    "_XlaScope",
    "_noinline",
    "_XlaSeparateCompiledGradients",
)
_UNIQUE = itertools.count()


@dataclass(frozen=True)
class Float64Graph:
    """The outcome of promoting a traced function to float64.

    Attributes
    ----------
    function : callable or None
        ``(*leaves) -> list of tensors``: the promoted program, taking one
        float64 tensor per checked leaf (shapes as traced) and returning the
        function's flat outputs, as float64; None when promotion was refused.
    blocked : str or None
        Why promotion was refused ("op EagerPyFunc (tf.py_function) runs
        Python code..."); None when it succeeded.
    custom_gradient : bool
        Whether the graph contains a ``tf.custom_gradient`` rule. Its Python
        gradient function belongs to the original trace and cannot run on the
        promoted graph, so the promoted program serves values only.
    widened_draws : bool
        Whether the graph draws random numbers in a narrow float: the promoted
        program draws them in that dtype, as ``f`` does, and widens them.
    """

    function: Callable[..., Any] | None
    blocked: str | None
    custom_gradient: bool = False
    widened_draws: bool = False


def promote_to_float64(
    tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]
) -> Float64Graph:
    """Capture ``call`` once and return its float64 program.

    Parameters
    ----------
    tf : module
        TensorFlow.
    call : callable
        ``list of tensors (one per checked leaf) -> list of 1-D tensors``.
    specs : list of tf.TensorSpec
        The checked leaves' shapes and working dtypes.

    Returns
    -------
    Float64Graph
        Never raises for a function that cannot be promoted: the reason is in
        ``blocked``.
    """
    try:
        concrete = _trace(tf, call, specs)
    except Exception as exc:  # noqa: BLE001 - any tracing failure: cannot be captured
        return Float64Graph(None, f"it cannot be traced into a graph ({describe_exception(exc)})")
    try:
        frozen, inputs, outputs = _frozen(tf, concrete)
        graph_def = type(frozen)()
        graph_def.CopyFrom(frozen)  # rewritten below; the frozen one serves narrowest_computed
    except Exception as exc:  # noqa: BLE001 - e.g. resources that are not variables
        return Float64Graph(
            None, f"its graph cannot be frozen into constants ({describe_exception(exc)})"
        )
    custom = _has_custom_gradient(graph_def)
    _unfuse_batch_norms(tf, graph_def)
    blocked = _python_ops(graph_def) or _missing_float64_kernels(graph_def)
    if blocked:
        return Float64Graph(None, blocked, custom)
    draws = bool(_narrow_draws(graph_def))
    try:
        function = _import(tf, _promote_graph_def(tf, graph_def), inputs, outputs)
        if _nodes_of(_graph_def_of(function), _CALL_OPS):  # nested functions not inlined
            graph_def, inputs, outputs = _freeze(tf, function)
            function = _import(tf, graph_def, inputs, outputs)
    except Exception as exc:  # noqa: BLE001 - the rewritten graph does not import
        return Float64Graph(
            None, f"its float64 graph cannot be built ({describe_exception(exc)})", custom
        )
    return Float64Graph(function, None, custom, draws)


def narrowest_computed(
    tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]
) -> tuple[np.dtype, str] | None:
    """The widest-eps floating dtype among the values ``call`` computes from its checked
    leaves (a complex one as its real part's), with the type of the first op that
    produced it; None when nothing does, or when ``call`` cannot be captured.

    Only values that depend on a checked leaf count (a float32 constant that the code
    widens before use rounds nothing of the computation). The dependence is followed
    op by op through the captured graph with nested ``tf.function`` calls inlined; a
    ``tf.cond``/``tf.while_loop`` counts by its outputs.

    Parameters
    ----------
    tf : module
        TensorFlow.
    call : callable
        ``list of tensors (one per checked leaf) -> list of 1-D tensors``.
    specs : list of tf.TensorSpec
        The checked leaves' shapes and dtypes.

    Returns
    -------
    (numpy.dtype, str) or None
        Never raises: a function that cannot be traced or frozen gives None.
    """
    try:
        graph_def, inputs, outputs = _frozen(tf, _trace(tf, call, specs))
        graph = _import(tf, graph_def, inputs, outputs).graph
    except Exception:  # noqa: BLE001 - not capturable: nothing is known
        return None
    dependent = {graph.get_tensor_by_name(n).ref() for n in inputs[: len(specs)]}
    reached: set[str] = set()
    found: tuple[float, np.dtype, str] | None = None
    grew = True
    while grew:  # until no op is added (an imported graph need not be in topological order)
        grew = False
        for op in graph.get_operations():
            if op.name in reached or not any(t.ref() in dependent for t in op.inputs):
                continue
            reached.add(op.name)
            grew = True
            for t in op.outputs:
                dependent.add(t.ref())
                dt = t.dtype.real_dtype if t.dtype.is_complex else t.dtype
                if dt.is_floating:
                    eps = dtype_eps(dt.as_numpy_dtype)
                    if found is None or eps > found[0]:
                        found = (eps, np.dtype(dt.as_numpy_dtype), op.type)
    return None if found is None else (found[1], found[2])


def symmetric_reads(
    tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]
) -> dict[int, tuple[str, ...]] | None:
    """Which checked leaves reach an op that reads a symmetric matrix.

    The dependence is followed node by node through the frozen graph (nested
    ``tf.function`` calls inlined); a control-flow op (``If``, ``While``...) whose
    function body holds such an op counts as one, by its inputs.

    Returns
    -------
    dict of int to tuple of str, or None
        Leaf position -> the :data:`SYMMETRIC_INPUT_OPS` types its value reaches (absent
        where none); None when ``call`` cannot be traced or frozen.
    """
    try:
        graph_def, inputs, _ = _frozen(tf, _trace(tf, call, specs))
    except Exception:  # noqa: BLE001 - not capturable: nothing is known
        return None
    leaf_of = {name.split(":")[0]: i for i, name in enumerate(inputs[: len(specs)])}
    reach = _reaching(graph_def, leaf_of)
    bodies = _bodies_reading_symmetric(graph_def)
    found: dict[int, list[str]] = {}
    for node in graph_def.node:
        called = [f for f in _called_functions(node) if f in bodies]
        if node.op in SYMMETRIC_INPUT_OPS or called:
            label = node.op if not called else f"{bodies[called[0]]} (inside {node.op})"
            ins = [reach.get(i, frozenset()) for i in _data_inputs(node)]
            for i in frozenset().union(*ins):
                found.setdefault(i, []).append(label)
    return {i: tuple(dict.fromkeys(names)) for i, names in found.items()}


def _data_inputs(node: Any) -> list[str]:
    return [i.split(":")[0] for i in node.input if not i.startswith("^")]


def _reaching(graph_def: Any, leaf_of: dict[str, int]) -> dict[str, frozenset[int]]:
    """Node name -> the checked leaves its value depends on (to a fixed point: an imported
    graph need not be in topological order)."""
    reach = {name: frozenset({i}) for name, i in leaf_of.items()}
    changed = True
    while changed:
        changed = False
        for node in graph_def.node:
            if node.name in leaf_of:
                continue
            new = frozenset().union(*(reach.get(i, frozenset()) for i in _data_inputs(node)))
            if new != reach.get(node.name, frozenset()):
                reach[node.name], changed = new, True
    return reach


def _called_functions(node: Any) -> list[str]:
    """Names of the library functions a node calls (branches, loop bodies, calls)."""
    out = []
    for attr in node.attr.values():
        if attr.HasField("func"):
            out.append(attr.func.name)
        elif attr.HasField("list"):
            out += [f.name for f in attr.list.func]
    return out


def _bodies_reading_symmetric(graph_def: Any) -> dict[str, str]:
    """Library function name -> a symmetric-input op type it runs (directly or in a call)."""
    fdefs = {f.signature.name: f for f in graph_def.library.function}
    found: dict[str, str] = {}
    grew = True
    while grew:
        grew = False
        for name, fdef in fdefs.items():
            if name in found:
                continue
            for node in fdef.node_def:
                inner = [found[f] for f in _called_functions(node) if f in found]
                if node.op in SYMMETRIC_INPUT_OPS or inner:
                    found[name], grew = (node.op if not inner else inner[0]), True
                    break
    return found


_WRITES = re.compile(
    r"^(Assign\w*VariableOp|ResourceScatter\w+|Resource\w*Apply\w+|"
    r"ResourceStridedSliceAssign)$"
)
"""Op types that write a resource variable (``v.assign``, ``assign_add``, scatters,
optimizer updates)."""


def variables_written(
    tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]
) -> list[Any]:
    """The ``tf.Variable`` s a call of ``call`` may change: every variable it captures, where
    its traced graph (nested ``tf.function`` s included) writes any variable; else none.

    A Keras ``BatchNormalization`` called with ``training=True`` updates its moving
    statistics on every call, a counter ``assign_add`` s, wherever the layer or variable
    lives (closed over, a global, ``self.model``). A function that cannot be traced
    gives none: its calls are then only checked on the models passed to ``check``.

    Parameters
    ----------
    tf : module
    call : callable
        ``list of tensors (one per checked leaf) -> list of 1-D tensors``.
    specs : list of tf.TensorSpec
        The checked leaves' shapes and dtypes.

    Returns
    -------
    list of tf.Variable
    """
    try:
        concrete = _trace(tf, call, specs)
    except Exception:  # noqa: BLE001 - untraceable: nothing is known
        return []
    graph_def = concrete.graph.as_graph_def()
    if not any(_WRITES.match(node.op) for node in _all_nodes(graph_def)):
        return []
    return list(concrete.variables)


def failed_run_reason(exc: BaseException) -> str:
    """Why the promoted program failed on its first run, naming the op when TF does."""
    text = str(exc)
    missing = re.search(r"No registered '(\w+)' OpKernel", text)
    if missing:
        return f"op {missing.group(1)} has no float64 kernel"
    return f"its float64 graph fails to run ({describe_exception(exc)})"


# -- stages -----------------------------------------------------------------------------------


_TRACES: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()
"""Concrete functions already traced, per ``call`` object and specs: one target's
promotion, narrowest dtype and written variables read one trace."""


def _trace(tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]) -> Any:
    """The concrete function of ``call`` (traced once per ``call`` object and specs)."""
    key = tuple((tuple(spec.shape.as_list()), spec.dtype.name) for spec in specs)
    seen = _TRACES.setdefault(call, {})
    if key not in seen:
        seen[key] = _trace_once(tf, call, specs)
    return seen[key]


_AUTOGRAPHED: weakref.WeakSet[Any] = weakref.WeakSet()
"""Concrete functions that only AutoGraph could trace (its conversion of ``f``'s Python)."""


def autographed_graph(tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]) -> Any:
    """The concrete function of ``call`` in the working dtypes where only AutoGraph could
    trace it, else None: AutoGraph rewrites Python (``float(t)`` becomes a cast, which
    the graph differentiates, while eager code cuts the tape there), so its graph's rule
    need not be ``f``'s."""
    try:
        concrete = _trace(tf, call, specs)
    except Exception:  # noqa: BLE001 - not traceable: no graph to compare
        return None
    return concrete if concrete in _AUTOGRAPHED else None


def _trace_once(tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]) -> Any:
    """The concrete function of ``call``: without AutoGraph first, with it if that fails.

    TensorFlow's log is silenced meanwhile: AutoGraph warns about every lambda whose
    source it cannot parse, and the failure that matters is raised.
    """
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    error: Exception | None = None
    try:
        for autograph in (False, True):
            try:
                traced = tf.function(lambda *leaves: call(list(leaves)), autograph=autograph)
                concrete = traced.get_concrete_function(*specs)
                if autograph:
                    _AUTOGRAPHED.add(concrete)
                return concrete
            except Exception as exc:  # noqa: BLE001 - retried with AutoGraph, then re-raised
                error = exc
    finally:
        logger.setLevel(level)
    assert error is not None
    raise error


_FROZEN: weakref.WeakKeyDictionary[Any, tuple[Any, list[str], list[str]]] = (
    weakref.WeakKeyDictionary()
)
"""Frozen graphs already made, per concrete function: the promotion and the narrowest
dtype read one (neither changes it)."""


def _frozen(tf: Any, concrete: Any) -> tuple[Any, list[str], list[str]]:
    """:func:`_freeze` of ``concrete``, once per concrete function (do not modify it)."""
    if concrete not in _FROZEN:
        _FROZEN[concrete] = _freeze(tf, concrete)
    return _FROZEN[concrete]


def _freeze(tf: Any, concrete: Any) -> tuple[Any, list[str], list[str]]:
    """Graph with variables and captures frozen into constants; input and output names.

    Control flow is kept functional (``If``/``While``, whose gradients TensorFlow
    rebuilds from the function library); calls of nested functions are inlined,
    including those marked for XLA (those attributes are dropped on a copy).
    """
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    frozen = convert_variables_to_constants_v2(
        concrete, lower_control_flow=False, aggressive_inlining=True
    )
    graph_def = frozen.graph.as_graph_def()
    for node in _all_nodes(graph_def):
        for key in _NO_INLINE_ATTRS:
            if key in node.attr:
                del node.attr[key]
    for fdef in graph_def.library.function:
        for key in _NO_INLINE_ATTRS:
            if key in fdef.attr:
                del fdef.attr[key]
    inputs = [t.name for t in frozen.inputs]
    outputs = [t.name for t in frozen.outputs]
    return graph_def, inputs, outputs


def _import(tf: Any, graph_def: Any, inputs: list[str], outputs: list[str]) -> Any:
    """A concrete function of the graph, fed at ``inputs`` and fetched at ``outputs``."""

    def body() -> None:
        tf.graph_util.import_graph_def(graph_def, name="")

    wrapped = tf.compat.v1.wrap_function(body, [])
    get = wrapped.graph.get_tensor_by_name
    return wrapped.prune([get(n) for n in inputs], [get(n) for n in outputs])


def _graph_def_of(function: Any) -> Any:
    return function.graph.as_graph_def()


# -- the float64 rewrite ------------------------------------------------------------------------


def _narrow_types() -> set[int]:
    from tensorflow.core.framework import types_pb2

    return {types_pb2.DT_FLOAT, types_pb2.DT_HALF, types_pb2.DT_BFLOAT16}


@functools.lru_cache(maxsize=1)
def _wide_types() -> dict[int, int]:
    """Each narrow floating or complex type and its 64-bit-per-part counterpart (a
    complex64 FFT of a float64 input would not match its signature)."""
    from tensorflow.core.framework import types_pb2

    wide = {t: types_pb2.DT_DOUBLE for t in _narrow_types()}
    wide[types_pb2.DT_COMPLEX64] = types_pb2.DT_COMPLEX128
    return wide


def _promote_graph_def(tf: Any, graph_def: Any) -> Any:
    """A copy of ``graph_def`` with every narrow floating dtype turned into float64.

    Library functions are renamed (the originals may already be registered in the
    running program under their names, in their original dtypes).
    """

    out = type(graph_def)()
    out.CopyFrom(graph_def)
    suffix = f"_polygrad_float64_{next(_UNIQUE)}"
    names = {f.signature.name: f.signature.name + suffix for f in out.library.function}
    draws = _narrow_draws(out)
    for node in out.node:
        _promote_attrs(tf, node.attr, names)
    _widen_draws(out, draws)
    for fdef in out.library.function:
        fdef.signature.name = names[fdef.signature.name]
        for arg in [*fdef.signature.input_arg, *fdef.signature.output_arg]:
            arg.type = _wide_types().get(arg.type, arg.type)
        for node in fdef.node_def:
            _promote_attrs(tf, node.attr, names)
    for grad in out.library.gradient:
        grad.function_name = names.get(grad.function_name, grad.function_name)
    return out


# Random ops whose only floating type is that of the numbers they draw (their inputs are
# shapes, seeds, keys and counters): what they draw depends on that dtype
_DRAWS = {
    "RandomUniform", "RandomStandardNormal", "TruncatedNormal",
    "StatelessRandomUniform", "StatelessRandomUniformV2", "StatelessRandomNormal",
    "StatelessRandomNormalV2", "StatelessTruncatedNormal", "StatelessTruncatedNormalV2",
    "StatefulUniform", "StatefulStandardNormalV2", "StatefulTruncatedNormal",
}  # fmt: skip


def _narrow_draws(graph_def: Any) -> dict[str, int]:
    """The main graph's random ops that draw in a narrow float: name -> that dtype."""
    narrow = _narrow_types()
    return {
        node.name: node.attr["dtype"].type
        for node in graph_def.node
        if node.op in _DRAWS and node.attr["dtype"].type in narrow
    }


def _widen_draws(graph_def: Any, draws: dict[str, int]) -> None:
    """Each random op draws in its own dtype again, and a cast widens what it drew for
    the (promoted) ops that read it, in place: the same seed draws other numbers in
    float64, and the promoted function must compute with the numbers ``f`` draws."""
    from tensorflow.core.framework import types_pb2

    widened = {}
    for name, dtype in draws.items():
        node = next(n for n in graph_def.node if n.name == name)
        node.attr["dtype"].type = dtype
        cast = graph_def.node.add()
        cast.name, cast.op = f"{name}/polygrad_widened", "Cast"
        cast.input.append(name)
        cast.attr["SrcT"].type = dtype
        cast.attr["DstT"].type = types_pb2.DT_DOUBLE
        cast.attr["Truncate"].b = False
        widened[name] = widened[f"{name}:0"] = cast.name
    for node in graph_def.node:
        if node.name.endswith("/polygrad_widened"):
            continue
        inputs = [widened.get(i, i) for i in node.input]
        if inputs != list(node.input):
            del node.input[:]
            node.input.extend(inputs)


def _promote_attrs(tf: Any, attrs: Any, names: dict[str, str]) -> list[str]:
    """Promote one node's attributes in place; return the names of those changed."""
    wide = _wide_types()
    changed = []
    for key, value in attrs.items():
        if value.HasField("type") and value.type in wide:
            value.type = wide[value.type]
            changed.append(key)
        elif value.HasField("list") and any(t in wide for t in value.list.type):
            types = [wide.get(t, t) for t in value.list.type]
            del value.list.type[:]
            value.list.type.extend(types)
            changed.append(key)
        elif value.HasField("tensor") and value.tensor.dtype in wide:
            array = tf.make_ndarray(value.tensor)
            array = array.astype(np.complex128 if np.iscomplexobj(array) else np.float64)
            value.tensor.CopyFrom(tf.make_tensor_proto(array))
        if value.HasField("func"):
            value.func.name = names.get(value.func.name, value.func.name)
        if value.HasField("list"):
            for fn in value.list.func:
                fn.name = names.get(fn.name, fn.name)
    return changed


# -- ops rewritten before promotion ------------------------------------------------------------

_FUSED_BATCH_NORMS = {"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"}


def _unfuse_batch_norms(tf: Any, graph_def: Any) -> None:
    """Replace inference-mode fused batch norms (no float64 kernel; tf-keras uses them in
    every ``BatchNormalization`` of images) by their formula, in place.

    Only nodes of the main graph, in channels-last layout, whose other outputs (batch
    statistics) nothing reads, are rewritten; any other stays, and blocks promotion.
    """
    read = {name for node in graph_def.node for name in node.input}
    for node in list(graph_def.node):
        if node.op not in _FUSED_BATCH_NORMS or node.attr["is_training"].b:
            continue
        if node.attr["data_format"].s.decode() not in ("NHWC", "NDHWC", ""):
            continue
        if not any(f"{node.name}:{k}" in read for k in range(1, 6)):
            _unfuse(tf, graph_def, node)


def _unfuse(tf: Any, graph_def: Any, node: Any) -> None:
    """``node`` (a fused batch norm) becomes the last of the nodes computing
    ``y = (x - mean) * (rsqrt(variance + epsilon) * scale) + offset``."""
    x, scale, offset, mean, variance = node.input[:5]
    controls = list(node.input[5:])
    t = node.attr["T"].type
    u = node.attr["U"].type if "U" in node.attr else t
    prefix = f"{node.name}/polygrad_unfused/"
    epsilon = np.asarray(node.attr["epsilon"].f, tf.as_dtype(u).as_numpy_dtype)
    eps = graph_def.node.add()
    eps.name, eps.op = prefix + "epsilon", "Const"
    eps.attr["dtype"].type = u
    eps.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(epsilon))
    plus = _add_node(graph_def, prefix + "plus_epsilon", "AddV2", [variance, eps.name], u)
    inverse = _add_node(graph_def, prefix + "inverse", "Rsqrt", [plus], u)
    factor = _add_node(graph_def, prefix + "factor", "Mul", [inverse, scale], u)
    shifted = _add_node(graph_def, prefix + "shifted", "Sub", [x, mean, *controls], t)
    scaled = _add_node(graph_def, prefix + "scaled", "Mul", [shifted, factor], t)
    node.op = "AddV2"
    del node.input[:]
    node.input.extend([scaled, offset])
    for key in list(node.attr):
        if key != "T":
            del node.attr[key]


def _add_node(graph_def: Any, name: str, op: str, inputs: list[str], dtype: int) -> str:
    """Add a node with one type attribute ``T`` to ``graph_def``; return its name."""
    node = graph_def.node.add()
    node.name, node.op = name, op
    node.input.extend(inputs)
    node.attr["T"].type = dtype
    return str(node.name)


# -- what blocks promotion ----------------------------------------------------------------------


def _all_nodes(graph_def: Any) -> list[Any]:
    nodes = list(graph_def.node)
    for fdef in graph_def.library.function:
        nodes += list(fdef.node_def)
    return nodes


def _nodes_of(graph_def: Any, ops: set[str] | dict[str, str]) -> list[Any]:
    return [node for node in _all_nodes(graph_def) if node.op in ops]


def _has_custom_gradient(graph_def: Any) -> bool:
    return any(
        node.op == "IdentityN" and "_gradient_op_type" in node.attr
        for node in _all_nodes(graph_def)
    )


def _python_ops(graph_def: Any) -> str | None:
    found = _nodes_of(graph_def, _PYTHON_OPS)
    if not found:
        return None
    op = found[0].op
    return (
        f"op {op} ({_PYTHON_OPS[op]}) runs Python code, whose dtypes a graph rewrite cannot change"
    )


def _missing_float64_kernels(graph_def: Any) -> str | None:
    """``"op X has no float64 kernel"`` for the first op whose promoted type attributes
    no registered kernel accepts; None when every op has one (or is not listed)."""
    from tensorflow.core.framework import types_pb2

    narrow = _narrow_types()
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for node in _all_nodes(graph_def):
        keys = tuple(
            sorted(
                k
                for k, v in node.attr.items()
                if (v.HasField("type") and v.type in narrow)
                or (v.HasField("list") and any(t in narrow for t in v.list.type))
            )
        )
        if not keys or (node.op, keys) in seen:
            continue
        seen.add((node.op, keys))
        if not _has_double_kernel(node.op, keys, types_pb2.DT_DOUBLE):
            return f"op {node.op} has no float64 kernel"
    return None


def _has_double_kernel(op: str, keys: tuple[str, ...], double: int) -> bool:
    from tensorflow.python.framework import kernels

    try:
        registered = kernels.get_registered_kernels_for_op(op).kernel
    except Exception:  # noqa: BLE001 - not a registered op (a function): cannot tell here
        return True
    if not registered:
        return True  # ops without kernels of their own (functions, composites)
    for kernel in registered:
        allowed = {
            c.name: set(c.allowed_values.list.type) for c in kernel.constraint if c.name in keys
        }
        if all(double in types for types in allowed.values()):
            return True
    return False


def disconnection_cause(
    tf: Any, call: Callable[[list[Any]], list[Any]], specs: list[Any]
) -> str | None:
    """What cuts a function's output off the gradient tape, when its graph shows it.

    Returns
    -------
    str or None
        A phrase naming the cause (a NumPy round trip, ``tf.stop_gradient``, a
        cast to an integer dtype), or None when the graph does not tell.
    """
    try:
        concrete = _trace(tf, call, specs)
    except Exception as exc:  # noqa: BLE001 - the tracing error itself names the cause
        if "numpy" in str(exc).lower():
            return (
                ".numpy() (or another conversion to NumPy) inside the function: the values "
                "leave TensorFlow and come back as constants"
            )
        return None
    ops = {op.type: op for op in concrete.graph.get_operations()}
    if "StopGradient" in ops or "PreventGradient" in ops:
        return "tf.stop_gradient inside the function"
    for op in concrete.graph.get_operations():
        if op.type == "Cast" and op.get_attr("DstT") in (tf.int32, tf.int64):
            return "a cast to an integer dtype inside the function"
    return None
