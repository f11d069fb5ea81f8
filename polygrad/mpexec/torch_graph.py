"""Evaluate a PyTorch function on mpmath numbers by re-executing its ATen graph.

A float64 finite difference is a good reference for a float32 gradient but a
weak one for a float64 gradient (its error bar is about 1e-10 relative at
best). This module gives the PyTorch backend an ``evaluate_mp``: the user's own
function, evaluated at 50 (or ``dps``) decimal digits.

How
---
1. **Capture.** :func:`torch.fx.experimental.proxy_tensor.make_fx` traces the
   function with real tensors (``tracing_mode="real"``) at the dispatcher
   level below autograd. The graph holds ATen operator overloads
   (``aten.add.Tensor``, ``aten.convolution.default``...); composite operators
   (``linear``, ``matmul``, ``conv2d``, ``cross_entropy``, ``einsum``...) are
   already decomposed into core ones. The forward of a
   ``torch.autograd.Function`` is traced through (its ``backward`` is not part
   of a forward graph), and so is ``nn.Module.forward``: parameters and
   buffers become graph constants. This was preferred to
   ``torch.export``, which needs a module, re-traces with fake tensors and
   handles ``autograd.Function`` and closures less directly.
2. **Coverage.** Every node is looked up in a dispatch table, one rule per
   overload, before anything is evaluated. Operators without a rule that
   PyTorch itself can decompose (``torch._decomp.decomposition_table``:
   most backward operators such as ``tanh_backward`` or
   ``_log_softmax_backward_data``, ``im2col``, ``mish``...) are decomposed by
   tracing again with those decompositions; this is what lets a second-
   derivative check (``check(order=2)``, whose function is a gradient) use the
   mp reference. An operator that is still not covered raises
   :class:`UnsupportedOperatorError` naming it, and the backend then leaves
   ``evaluate_mp`` unset (the check uses a float64 reference and the report
   names the operator).
3. **Interpretation.** Floating tensors become NumPy object arrays of mpmath
   numbers (a private context at ``dps`` digits, see
   :mod:`polygrad.backends.mpmath`); integer and bool tensors stay NumPy
   ``int64``/``bool`` arrays. Each rule reads the overload's arguments by
   name with the schema's defaults (strides, padding, dims, keepdim,
   dtype...). After each node the value's shape is compared with the shape
   PyTorch produced while tracing, and its kind (floating, integer, bool) is
   set from the traced dtype.

Precision
---------
The mp reference computes the mathematical function the code expresses, with
no rounding to the working dtype: float32 parameters, buffers and captured
constants enter exactly (every binary float is an exact mpmath number),
Python float literals enter as the float64 values they are, and a cast to
another floating dtype (``x.float()``, ``x.half()``) is the identity. Casts to
integer or bool types are applied (truncation toward zero, ``!= 0``).
Library-defined approximations that are part of a function's definition are
kept as PyTorch defines them: ``softplus`` switches to the identity above its
``threshold``; ``gelu(approximate="tanh")`` is the tanh formula.

Validity of one trace
---------------------
The graph is traced at ``x0`` and re-executed at ``x0 + dx``. A trace is
valid at other points only if no tensor value decides the graph:

* Python control flow on tensor values (``if x.sum() > 0``, ``.item()``,
  ``float(x)``, ``bool(x)``) makes the trace fail
  (``aten._local_scalar_dense`` cannot be traced); no mp reference is built.
* Values that leave torch (``x.numpy()``, ``x.tolist()``) and come back as
  constants are caught by re-tracing at a perturbed point (a relative change
  of about 2^-6 in every checked input): if the graph's code or any of its
  constants differ, no mp reference is built.
* Branches inside the graph (``where``, ``relu``, ``max``, ``clamp``, pooling,
  ``sort``) are evaluated at every point, so the mp function switches
  branches exactly where the mathematical function does; a kink near ``x0``
  is then seen by the reference like in float64 (NONSMOOTH).
* Random operators (any overload tagged ``nondeterministic_seeded``:
  dropout in training mode, ``rand``, ``bernoulli``...) are refused.

Covered operators
-----------------
(``covered_operators()`` lists the exact overloads.)

* Elementwise: ``add sub rsub mul div`` (with ``rounding_mode``)
  ``floor_divide neg reciprocal pow square exp exp2 expm1 log log2 log10 log1p
  sqrt rsqrt sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh
  sigmoid logit erf erfc erfinv lgamma digamma polygamma abs sign sgn floor ceil round
  trunc frac clamp clamp_min clamp_max hardtanh where maximum minimum fmax fmin
  hypot fmod remainder xlogy``, comparisons ``eq ne lt le gt ge``,
  ``logical_*`` and ``bitwise_*`` on bool/int tensors, ``isnan isinf
  masked_fill``.
* Special functions (:mod:`.torch_special`): ``i0 special_i0e special_i1
  special_i1e special_log_ndtr special_ndtri special_xlog1py special_entr sinc
  special_zeta mvlgamma`` and ``special_erfcx``.
* Activations: ``relu gelu`` (exact and tanh) ``silu softplus elu celu
  leaky_relu mish hardsigmoid hardswish softshrink hardshrink
  log_sigmoid_forward``.
* Conversions and creation: ``_to_copy clone alias detach lift_fresh_copy
  empty zeros ones full scalar_tensor arange linspace`` and the ``*_like`` /
  ``new_*`` forms (``empty`` is filled with zeros).
* Shapes and indexing: ``view _unsafe_view reshape permute transpose t expand
  squeeze unsqueeze cat stack slice select narrow index index_select gather
  index_put scatter scatter_add slice_scatter select_scatter split
  split_with_sizes unsafe_split unbind flip roll repeat constant_pad_nd
  diagonal diag_embed tril triu embedding upsample_nearest2d``.
* Reductions: ``sum mean prod amax amin max min argmax argmin logsumexp
  _softmax _safe_softmax _log_softmax cumsum cumprod var std
  linalg_vector_norm trace sort topk``.
* Linear algebra: ``mm bmm matmul mv dot addmm addmv baddbmm linear``.
* Layers and losses: ``convolution`` and ``convolution_backward`` (1-D/2-D/
  3-D; stride, padding, dilation, groups; not transposed),
  ``max_pool2d_with_indices avg_pool2d
  _adaptive_avg_pool2d native_layer_norm native_batch_norm
  _native_batch_norm_legit_no_training native_group_norm
  _scaled_dot_product_flash_attention_for_cpu`` (without dropout; with it
  ``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``, ``nn.LSTM`` and
  ``nn.GRU`` in eval mode are covered) ``nll_loss_forward mse_loss
  huber_loss smooth_l1_loss binary_cross_entropy_with_logits``.
* In-place forms (``add_``, ``relu_``, ``copy_``, ``fill_``, ``zero_``,
  ``index_put_``, ``squeeze_``...): the write goes into the NumPy array, whose
  views alias like PyTorch's. When a graph mutates tensors, aliasing is
  checked while it runs: a write into a view that NumPy had to copy raises
  (and the check falls back to float64) instead of being lost.

Not covered (the check falls back to float64 and the report names the
operator): complex tensors, transposed convolution, ``im2col``/``unfold``,
other pooling, upsampling and normalisation kernels, linear-algebra
decompositions and ``det``, ``cdist``, FFTs, sparse and quantized tensors,
``as_strided``, higher-order operators (``torch.cond``, ``while_loop``), and
anything else not listed.

Cost
----
Every node runs elementwise in Python on mpmath numbers, a few microseconds
per scalar operation at 50 digits; ``evaluate_mp.scalar_ops`` estimates the
operations of one evaluation. The mp reference makes ``2 * levels + 1``
evaluations per checked direction (29 by default), so it is meant for small
inputs and models: a 1x1x4x4 CNN takes about 1.5 ms per evaluation and its
16-entry Jacobian check about 2 s.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import GraphCaptureError, UnsupportedOperatorError
from .kinks import is_recording, note_operation, region_at_kink
from .torch_capture import (
    NO_GRAD,
    _bind,
    _decompositions_for,
    _perturbed,
    _same_graph,
    capture_graph,
    covered_operators,
    unsupported_operators,
)
from .torch_env import _WRITES_ITSELF, _arr, _base_rule, _Env, _env
from .torch_kinks import kink_test
from .values import leaves_at

__all__ = [
    "GraphCaptureError",
    "GraphProgram",
    "UnsupportedOperatorError",
    "capture_graph",
    "covered_operators",
    "torch_mp_evaluator",
    "unsupported_operators",
]

# ------------------------------------------------------------------ the interpreter


class GraphProgram:
    """A captured graph, re-executed on mpmath numbers.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        From :func:`capture_graph`; must have no unsupported operators.
    shapes : list of tuple
        Shapes of the graph's inputs (the checked tensors).

    Attributes
    ----------
    scalar_ops : int
        Estimated number of scalar mpmath operations per evaluation (output
        elements of every node; multiply-adds for matrix products and
        convolutions): the cost of one evaluation is about this many times a
        few microseconds at 50 digits.

    Notes
    -----
    When the graph mutates tensors in place, aliasing is checked as it runs:
    an in-place write into the result of a view operator that NumPy had to
    copy (where PyTorch has a view) raises instead of being lost, and the
    result of a non-view operator never shares memory with its inputs.
    """

    def __init__(self, gm: Any, shapes: Sequence[tuple[int, ...]]):
        import torch

        self.shapes = [tuple(int(s) for s in sh) for sh in shapes]
        self._node, self._tensor = torch.fx.Node, torch.Tensor
        self.steps: list[tuple[Any, ...]] = []
        self.constants: dict[str, Any] = {}
        self._const_mp: dict[int, dict[str, np.ndarray]] = {}
        self.output: Any = None
        self.mutates = False
        self.scalar_ops = 0
        n_inputs = 0
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                v = getattr(gm, node.target)
                if isinstance(v, torch.Tensor):
                    self.constants[node.name] = v  # converted on first use (see _constants)
                self.steps.append(("const", node.name, node.target))
            elif node.op == "placeholder":
                self.steps.append(("input", node.name, n_inputs))
                n_inputs += 1
            elif node.op == "call_function":
                val = node.meta.get("val")
                if node.target is operator.getitem:
                    self.steps.append(("getitem", node.name, node.args, val))
                    continue
                name = str(node.target)
                rule, inplace = _base_rule(name)
                if rule is None:
                    raise UnsupportedOperatorError(f"{name} has no mpmath rule")
                bound = _bind(node.target, node.args, node.kwargs)
                writes = name in _WRITES_ITSELF or inplace
                if name in _WRITES_ITSELF:
                    bound["_inplace"] = True
                self.mutates |= bool(node.target._schema.is_mutable)
                self.scalar_ops += _node_cost(name, node, val)
                is_view = bool(getattr(node.target, "is_view", False))
                step = ("call", node.name, name, rule, bound, inplace, val, is_view, writes)
                self.steps.append(step)
            elif node.op == "output":
                self.output = node.args[0]
            else:
                raise UnsupportedOperatorError(f"graph node {node.op} {node.target}")
        steps = {step[1]: step for step in self.steps}
        regions = _no_grad_regions(gm)
        self._inside = {m: r for r in regions for m in r.members}
        self._closing = {r.members[-1]: (r, tuple(steps[m] for m in r.members)) for r in regions}

    def _constants(self, E: _Env, dps: int) -> dict[str, np.ndarray]:
        """The graph's tensor constants as mp (floating) or int64/bool arrays, fresh copies."""
        import torch

        cached = self._const_mp.get(dps)
        if cached is None:
            cached = {}
            for k, v in self.constants.items():
                t = v.detach().cpu()
                if t.is_floating_point():  # float32/float16/bfloat16 -> float64 is exact
                    cached[k] = E.F(t.to(torch.float64).numpy())
                elif t.dtype == torch.bool:
                    cached[k] = t.numpy().astype(bool)
                else:
                    cached[k] = t.to(torch.int64).numpy().copy()
            self._const_mp[dps] = cached
        return {k: v.copy() for k, v in cached.items()}

    def run(self, inputs: Sequence[np.ndarray], dps: int) -> Any:
        """Evaluate on input leaves (object arrays of mpf) at ``dps`` digits; return the output.

        While kinks are recorded (:mod:`.kinks`), the operations that ran with gradients
        disabled (a ``torch.autograd.Function``'s forward) are not noted: each connected
        region of them counts as at a kink only where its own one-sided difference
        quotients differ.

        Raises
        ------
        RuntimeError
            A rule produced a shape other than the traced one, or an in-place
            write would not reach the tensor PyTorch writes into.
        """
        E = _env(dps)
        env: dict[str, Any] = {}
        copied: set[str] = set()  # view results that NumPy had to copy (and views of them)
        consts = self._constants(E, dps)
        recording = is_recording()
        for step in self.steps:
            name = step[1]
            if step[0] == "input":
                env[name] = inputs[step[2]]
            elif step[0] == "const":
                env[name] = consts.get(name)
            else:
                self._step(E, step, env, copied, recording and name not in self._inside)
            if recording and name in self._closing:
                self._note_region(E, *self._closing[name], env, copied)
        return _look(env, self.output, self._node)

    def _step(
        self, E: _Env, step: tuple[Any, ...], env: dict[str, Any], copied: set[str], note: bool
    ) -> None:
        """Run one ``getitem`` or ``call`` step into ``env`` (noting its kink if ``note``)."""
        name, node = step[1], self._node
        if step[0] == "getitem":
            src, idx = step[2]
            v = env[src.name][idx]
            env[name] = self._settle(E, v, step[3], name) if step[3] is not None else v
            if src.name in copied:
                copied.add(name)
            return
        _, _, op, rule, bound, inplace, val, is_view, writes = step
        a = {k: _look(env, v, node) for k, v in bound.items()}
        E.val = val
        src = bound.get("self", bound.get("input"))
        src_name = src.name if isinstance(src, node) else None
        if self.mutates and writes and src_name in copied:
            raise RuntimeError(f"{op} writes into a view that the mp interpreter holds as a copy")
        if note:
            note_operation(op, kink_test(op, a))
        out = rule(E, a)
        if inplace:
            dst = a["self"]
            dst[...] = E.coerce(_arr(out), val.dtype) if val is not None else out
            out = dst
        if isinstance(val, self._tensor):
            out = self._settle(E, out, val, f"{name} ({op})")
        if self.mutates and not writes:
            guarded = self._alias_guard(out, a.get("self", a.get("input")), is_view)
            if not is_view:
                out = guarded
            elif guarded is None or src_name in copied:
                copied.add(name)
        if self.mutates and writes and src_name in copied:
            copied.add(name)
        env[name] = out

    def _note_region(
        self,
        E: _Env,
        region: _Region,
        steps: tuple[tuple[Any, ...], ...],
        env: dict[str, Any],
        copied: set[str],
    ) -> None:
        """Note a region of operations that ran with gradients disabled, as one operation
        at a kink where its own one-sided difference quotients differ."""

        def outputs(values: list[Any]) -> np.ndarray:
            local = dict(env)
            for n in region.inputs:  # fresh copies: the region may write in place
                local[n] = _copied(env[n])
            for n, v in zip(region.moving, values, strict=True):
                local[n] = _copied(v)
            seen = set(copied)
            for step in steps:
                self._step(E, step, local, seen, False)
            kept = [a for n in region.outputs for a in _floating_leaves(local[n])]
            return np.concatenate(kept) if kept else np.empty(0, dtype=object)

        values = [env[n] for n in region.moving]
        note_operation("autograd.Function", lambda: region_at_kink(E.ctx, outputs, values))

    @staticmethod
    def _alias_guard(out: Any, src: Any, is_view: bool) -> Any:
        """For a view op: ``out``, or None when NumPy copied; else ``out`` not aliasing ``src``."""
        if not isinstance(out, np.ndarray) or not isinstance(src, np.ndarray):
            return out
        shares = out.size > 0 and np.may_share_memory(out, src)
        if is_view:
            return out if (shares or out.size == 0) else None
        return out.copy() if shares else out

    @staticmethod
    def _settle(E: _Env, v: Any, val: Any, where: str) -> Any:
        """Set the kind from the traced dtype; check the shape against the trace."""
        import torch

        if not isinstance(val, torch.Tensor):
            return v
        v = E.coerce(v, val.dtype)
        if tuple(v.shape) != tuple(val.shape):
            raise RuntimeError(
                f"mp evaluation of {where} gave shape {tuple(v.shape)}, the trace "
                f"{tuple(val.shape)}"
            )
        return v


def _look(env: dict[str, Any], v: Any, node: Any) -> Any:
    """``v`` with every graph node (of type ``node``) replaced by its value in ``env``."""
    if isinstance(v, node):
        return env[v.name]
    if isinstance(v, (list, tuple)):
        return type(v)(_look(env, u, node) for u in v)
    return v


def _copied(v: Any) -> Any:
    return np.array(v, dtype=v.dtype, copy=True) if isinstance(v, np.ndarray) else v


def _floating_leaves(v: Any) -> list[np.ndarray]:
    """The object arrays (mpmath numbers) in a value, flattened."""
    if isinstance(v, (list, tuple)):
        return [a for u in v for a in _floating_leaves(u)]
    if isinstance(v, np.ndarray) and v.dtype == object:
        return [v.ravel()]
    return []


@dataclass(frozen=True)
class _Region:
    """Connected operations that ran with gradients disabled (node names in graph order),
    the nodes they read from outside, those of them that vary with the inputs, and the
    nodes whose values leave the region."""

    members: tuple[str, ...]
    inputs: tuple[str, ...]
    moving: tuple[str, ...]
    outputs: tuple[str, ...]


def _no_grad_regions(gm: Any) -> list[_Region]:
    """The regions of a graph's nodes marked :data:`~.torch_capture.NO_GRAD`: the
    forwards of ``torch.autograd.Function``, whose rules replace their derivatives."""
    nodes = list(gm.graph.nodes)
    marked = {n.name for n in nodes if n.op == "call_function" and n.meta.get(NO_GRAD)}
    if not marked:
        return []
    root = {n: n for n in marked}

    def find(a: str) -> str:
        while root[a] != a:
            root[a] = root[root[a]]
            a = root[a]
        return a

    varying: set[str] = set()
    for n in nodes:
        if n.op == "placeholder" or any(m.name in varying for m in n.all_input_nodes):
            varying.add(n.name)
        if n.name in marked:
            for m in n.all_input_nodes:
                if m.name in marked:
                    root[find(m.name)] = find(n.name)
    groups: dict[str, list[Any]] = {}
    for n in nodes:
        if n.name in marked:
            groups.setdefault(find(n.name), []).append(n)
    regions = []
    for members in groups.values():
        inside = {n.name for n in members}
        ins = list(dict.fromkeys(m.name for n in members for m in n.all_input_nodes))
        ins = [m for m in ins if m not in inside]
        outs = [n.name for n in members if any(u.name not in inside for u in n.users)]
        moving = tuple(m for m in ins if m in varying)
        regions.append(_Region(tuple(n.name for n in members), tuple(ins), moving, tuple(outs)))
    return regions


def _node_cost(name: str, node: Any, val: Any) -> int:
    """Estimated scalar operations of one node (see ``GraphProgram.scalar_ops``)."""
    import torch

    vals = val if isinstance(val, (tuple, list)) else [val]
    out = sum(int(v.numel()) for v in vals if isinstance(v, torch.Tensor))
    ins = [a.meta.get("val") for a in node.all_input_nodes]
    ins = [v for v in ins if isinstance(v, torch.Tensor)]
    if any(k in name for k in ("mm", "matmul", "linear", "mv.", "dot.")) and ins:
        return out * int(ins[0].shape[-1]) if ins[0].dim() else out
    if "convolution" in name and len(ins) >= 2:
        w = ins[1]
        return out * int(np.prod(tuple(w.shape[1:]), dtype=np.int64))
    return max(out, max((int(v.numel()) for v in ins), default=0))


def torch_mp_evaluator(
    call: Callable[..., Any], primals: Sequence[Any]
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """Build ``evaluate_mp`` for a torch function of the checked tensors.

    Parameters
    ----------
    call : callable
        ``call(*leaves) -> Tensor``: the function as a function of the
        checked tensors, returning its outputs flattened to one 1-D floating
        tensor.
    primals : sequence of Tensor
        The checked tensors at ``x0`` (their shapes and dtypes are used to
        trace).

    Returns
    -------
    callable
        ``(x0, dx, dps) -> y``: the function at ``x0 + dx`` (float64 ``(n,)``
        each, summed exactly) evaluated on mpmath numbers at ``dps`` decimal
        digits; ``y`` is an object array ``(m,)`` of mpf.

    Raises
    ------
    GraphCaptureError
        The function could not be traced, or a trace at a perturbed point
        differs (values left torch and came back as constants).
    UnsupportedOperatorError
        The graph has operators without an mpmath rule; the message names
        them.
    """
    gm = capture_graph(call, primals)
    table: dict[Any, Any] = {}
    bad = unsupported_operators(gm)
    for _ in range(4):  # decompositions may bring in further uncovered operators
        extra = _decompositions_for(gm, table)
        if not bad or not extra:
            break
        table.update(extra)
        gm = capture_graph(call, primals, table)
        bad = unsupported_operators(gm)
    if bad:
        raise UnsupportedOperatorError(
            "operators not covered by the mp interpreter: "
            + ", ".join(bad[:8])
            + (f" (+{len(bad) - 8} more)" if len(bad) > 8 else "")
        )
    try:
        gm2 = capture_graph(call, _perturbed(primals), table or None)
        same = _same_graph(gm, gm2)
    except GraphCaptureError:
        same = False
    if not same:
        raise GraphCaptureError(
            "the traced graph changes with the input values (a tensor value leaves torch, "
            "e.g. through .numpy() or .tolist(), and comes back as a constant), so one trace "
            "is not valid at other points"
        )
    shapes = [tuple(p.shape) for p in primals]
    program = GraphProgram(gm, shapes)

    def evaluate_mp(x0: np.ndarray, dx: np.ndarray, dps: int) -> np.ndarray:
        E = _env(int(dps))
        out = program.run(leaves_at(E.ctx, x0, dx, shapes), int(dps))
        return E.F(_arr(out)).reshape(-1)

    evaluate_mp.program = program  # type: ignore[attr-defined]
    evaluate_mp.scalar_ops = program.scalar_ops  # type: ignore[attr-defined]
    return evaluate_mp
