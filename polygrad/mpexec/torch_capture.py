"""Capturing a PyTorch function as an ATen graph, and checking that it can be re-executed.

:func:`capture_graph` traces with ``make_fx`` (real tensors, below autograd);
:func:`unsupported_operators` looks every node up in the rule table before
anything runs; :func:`_decompositions_for` finds PyTorch's own decompositions
of uncovered operators; :func:`_same_graph` and :func:`_perturbed` check that
one trace is valid at other points.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import torch_elementwise, torch_indexing, torch_nn, torch_reductions, torch_special  # noqa: F401
from .errors import GraphCaptureError
from .torch_env import RULES, _base_rule

__all__ = [
    "NO_GRAD",
    "SYMMETRIC_INPUT_OPERATORS",
    "capture_graph",
    "covered_operators",
    "marks_no_grad",
    "symmetric_reads",
    "unsupported_operators",
]

NO_GRAD = "polygrad_no_grad"
"""Meta key of the traced nodes that ran with gradients disabled: the forward of a
``torch.autograd.Function`` (whose rule replaces their derivative), or a
``torch.no_grad()`` block. Autodiff does not differentiate them."""


SYMMETRIC_INPUT_OPERATORS = frozenset({
    "cholesky", "linalg_cholesky", "linalg_cholesky_ex", "_linalg_eigh", "linalg_eigh",
    "linalg_eigvalsh", "linalg_ldl_factor", "linalg_ldl_factor_ex",
})  # fmt: skip
"""ATen operators documented to read a symmetric (Hermitian) matrix: a Cholesky or LDLᵀ
factorization, a symmetric eigen-decomposition. Each reads one triangle of its input."""


def covered_operators() -> list[str]:
    """Names of the ATen overloads with an mpmath rule (in-place ``op_`` forms not listed).

    Returns
    -------
    list of str
        Sorted names such as ``"aten.add.Tensor"``.
    """
    return sorted(RULES)


def capture_graph(
    fn: Callable[..., Any], primals: Sequence[Any], decompositions: dict[Any, Any] | None = None
) -> Any:
    """Trace ``fn(*primals)`` to an ATen-level ``torch.fx.GraphModule``.

    Parameters
    ----------
    fn : callable
        Takes tensors shaped like ``primals`` and returns one tensor.
    primals : sequence of Tensor
        Example inputs; the trace runs the function on copies of them.
    decompositions : dict, optional
        ``{OpOverload: python function}``: operators to decompose while
        tracing (see :func:`_decompositions_for`).

    Returns
    -------
    torch.fx.GraphModule
        Traced with ``make_fx(fn, tracing_mode="real")``.

    Raises
    ------
    GraphCaptureError
        The trace failed (data-dependent Python control flow, ``.item()``...).
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            marked = _marking_no_grad(fn)
            traced = make_fx(marked, decomposition_table=decompositions, tracing_mode="real")
            return traced(*[p.detach().clone() for p in primals])
    except Exception as exc:  # noqa: BLE001 - any tracing failure is reported the same way
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        hint = ""
        if "_local_scalar_dense" in str(exc):
            hint = (
                " (a tensor value is read by Python: .item(), float(), bool(), or an `if` on a "
                "tensor; the graph would be valid only at the traced point)"
            )
        raise GraphCaptureError(
            f"the function could not be traced to an ATen graph{hint}: "
            f"{type(exc).__name__}: {text[:200]}"
        ) from exc


def marks_no_grad() -> bool:
    """Whether this PyTorch lets :func:`capture_graph` mark the nodes traced with gradients
    disabled (:data:`NO_GRAD`; the proxy-mode helpers it uses are PyTorch's own)."""
    try:
        from torch.fx.experimental.proxy_tensor import get_innermost_proxy_mode  # noqa: F401
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401
    except ImportError:  # pragma: no cover - present in the tested PyTorch
        return False
    return True


def _marking_no_grad(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, traced under a dispatch mode that marks (:data:`NO_GRAD`) each node whose
    operation runs with gradients disabled; ``fn`` itself where that cannot be done."""
    if not marks_no_grad():  # pragma: no cover - present in the tested PyTorch
        return fn
    import torch
    from torch.fx.experimental.proxy_tensor import get_innermost_proxy_mode
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Marks(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            mode = None if torch.is_grad_enabled() else get_innermost_proxy_mode()
            if mode is None:
                return func(*args, **(kwargs or {}))
            graph = mode.tracer.graph
            before = len(graph.nodes)
            out = func(*args, **(kwargs or {}))
            # every node the call made (a decomposition makes several)
            made = len(graph.nodes) - before
            for node, _ in zip(reversed(graph.nodes), range(made), strict=False):
                node.meta[NO_GRAD] = True
            return out

    @functools.wraps(fn)
    def traced(*args: Any) -> Any:
        with torch.enable_grad(), _Marks():
            return fn(*args)

    return traced


def _decompositions_for(gm: Any, known: dict[Any, Any]) -> dict[Any, Any]:
    """PyTorch's own decompositions of the graph's operators that have no mpmath rule.

    ``torch._decomp.decomposition_table`` rewrites many composite and
    backward operators (``tanh_backward``, ``_log_softmax_backward_data``,
    ``select_backward``...) into core ones; a graph re-traced with them can
    then be covered. Random operators are left alone.
    """
    import torch

    try:
        from torch._decomp import decomposition_table
    except ImportError:  # pragma: no cover - present in every supported torch
        return {}
    out = {}
    for node in gm.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
            continue
        if op in known or _base_rule(str(op))[0] is not None:
            continue
        if torch.Tag.nondeterministic_seeded in op.tags:
            continue
        if op in decomposition_table:
            out[op] = decomposition_table[op]
    return out


def unsupported_operators(gm: Any) -> list[str]:
    """Operators of a captured graph that the mp interpreter cannot evaluate.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        From :func:`capture_graph`.

    Returns
    -------
    list of str
        Each entry names an operator and why (no rule, random, complex
        values, transposed convolution...); empty when all are covered.
    """
    import torch

    bad: list[str] = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            val = getattr(gm, node.target, None) if node.op == "get_attr" else None
            if isinstance(val, torch.Tensor) and val.is_complex():
                bad.append(f"{node.target} (a complex constant)")
            continue
        if node.op != "call_function":
            bad.append(f"{node.op} {node.target}")
            continue
        if node.target is operator.getitem:
            continue
        if not isinstance(node.target, torch._ops.OpOverload):
            bad.append(f"{node.target} (not an ATen operator)")
            continue
        name = str(node.target)
        bound = _bind(node.target, node.args, node.kwargs)
        if torch.Tag.nondeterministic_seeded in node.target.tags and bound.get("dropout_p", 1):
            bad.append(f"{name} (random)")
            continue
        rule, _ = _base_rule(name)
        if rule is None:
            bad.append(name)
            continue
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        if any(isinstance(v, torch.Tensor) and v.is_complex() for v in vals):
            bad.append(f"{name} (complex values)")
        elif bound.get("transposed"):
            bad.append(f"{name} (transposed)")
    return list(dict.fromkeys(bad))


def _bind(op: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Arguments of an ATen overload by name, with the schema's defaults filled in."""
    out: dict[str, Any] = {}
    schema_args = op._schema.arguments
    for i, arg in enumerate(schema_args):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _graph_signature(gm: Any) -> tuple[str, list[Any]]:
    import torch

    consts = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            v = getattr(gm, node.target)
            consts.append(v.detach() if isinstance(v, torch.Tensor) else v)
    return gm.code, consts


def _same_graph(a: Any, b: Any) -> bool:
    import torch

    code_a, ca = _graph_signature(a)
    code_b, cb = _graph_signature(b)
    if code_a != code_b or len(ca) != len(cb):
        return False
    for u, v in zip(ca, cb, strict=True):
        if isinstance(u, torch.Tensor):
            if not (isinstance(v, torch.Tensor) and u.shape == v.shape and u.dtype == v.dtype):
                return False
            same = torch.equal(u, v) or (
                u.is_floating_point() and torch.allclose(u, v, rtol=0, atol=0, equal_nan=True)
            )
            if not same:  # (NaN constants are the same constant)
                return False
        elif u != v and not (isinstance(u, float) and isinstance(v, float) and u != u and v != v):
            return False
    return True


def _perturbed(primals: Sequence[Any]) -> list[Any]:
    """Every checked input moved by about 2^-6 of its size, with pseudo-random signs."""
    import torch

    out = []
    rng = np.random.default_rng(12345)
    for p in primals:
        x = p.detach().to(torch.float64).cpu().numpy()
        typical = float(np.mean(np.abs(x))) if x.size and np.any(x) else 1.0
        step = 2.0**-6 * np.maximum(np.abs(x), typical)
        signs = rng.choice([-1.0, 1.0], size=x.shape)
        out.append(torch.as_tensor(x + signs * step).to(device=p.device, dtype=p.dtype))
    return out


def symmetric_reads(gm: Any, n_inputs: int) -> dict[int, tuple[str, ...]]:
    """Which inputs of a captured graph reach an operator that reads a symmetric matrix.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        From :func:`capture_graph`; its first ``n_inputs`` placeholders are the checked
        tensors, in order.
    n_inputs : int
        How many placeholders are checked tensors.

    Returns
    -------
    dict of int to tuple of str
        Placeholder position -> names of the :data:`SYMMETRIC_INPUT_OPERATORS` whose
        matrix operand depends on it (``"linalg_cholesky_ex"``...); positions without
        one are absent.
    """
    reach: dict[Any, frozenset[int]] = {}
    found: dict[int, list[str]] = {}
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            reach[node] = frozenset({position}) if position < n_inputs else frozenset()
            position += 1
            continue
        ins = frozenset().union(*(reach.get(a, frozenset()) for a in node.all_input_nodes))
        reach[node] = ins
        name = str(node.target).split(".")[1] if str(node.target).startswith("aten.") else ""
        if name in SYMMETRIC_INPUT_OPERATORS:
            for i in ins:
                found.setdefault(i, []).append(name)
    return {i: tuple(dict.fromkeys(names)) for i, names in found.items()}
