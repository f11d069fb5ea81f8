"""PyTorch: record ``autograd.Function`` calls and top-level torch calls of one forward pass.

The user's function runs once on detached copies of the checked arguments (requiring
gradients). While it runs, and only then: ``torch.autograd.Function.apply`` is wrapped
to record each call (its class, arguments, call site), global module hooks keep the
stack of running ``nn.Module`` objects (their names from the modules reachable from the
function: itself, its closure, its globals, ``self`` of a method), and a
``TorchFunctionMode`` records every top-level torch call made with gradients on (the
primitives). Each record becomes a :class:`~polygrad.localize._core.Node` that re-runs
that one call on float64 copies of its inputs (the working dtype where the call does not
run in float64) and gives autograd's VJP of it.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends._torch_promote import replaced_function_apply
from ._core import Flow, Node, RecordedCall, Site, Step, with_cotangents
from ._names import reachable_roots, source_line

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report
    from . import CheckedCall, Recording


def record(call: CheckedCall, report: Report, as_run: bool = False) -> Recording:
    """Run ``call`` once, recording its custom Functions and primitives as nodes, in
    float64 where they run in it; ``as_run`` (the NONFINITE walk): in the dtypes the
    program ran them in, each with the cotangent it received in one backward pass."""
    import torch

    from . import Recording

    args = [_fresh(torch, a) if i in call.argnums else a for i, a in enumerate(call.args)]
    custom: list[RecordedCall] = []
    prims: list[RecordedCall] = []
    flow = Flow()
    bypasses: list[Site] = []
    with _recording(torch, _names(torch, call.f, args), custom, (prims, bypasses), flow):
        result = call.f(*args)
    outputs = flow.reads(_tensors(torch, _flat(result)))
    steps = sorted(((c.index, Step(c.site, c.reads)) for c in (*custom, *prims)),
                   key=lambda p: p[0])  # fmt: skip
    cts = _cotangents(torch, flow, result, [args[i] for i in call.argnums]) if as_run else None
    nodes = [[n for n in (_node(torch, c, as_run) for c in group) if n]
             for group in (custom, prims)]  # fmt: skip
    return Recording(with_cotangents(nodes[0], cts), with_cotangents(nodes[1], cts),
                     suspects=_bypass_notes(bypasses), steps=tuple(s for _, s in steps),
                     outputs=outputs)  # fmt: skip


BYPASSES = {
    "torch.Tensor.detach": "no gradient flows through it",
    "torch.detach": "no gradient flows through it",
    "torch.Tensor.item": "its result, a Python number, is outside autograd",
    "torch.Tensor.tolist": "its result, Python numbers, is outside autograd",
    "torch.Tensor.register_hook": "a hook can change the gradient in the backward pass",
    "torch.nn.Module.register_full_backward_hook": "a module's backward hook can change the "
    "gradient its inputs receive in the backward pass",
}
"""Calls on a tensor requiring gradients that change what autodiff computes without a node
whose rule a check could compare: no gradient flows through a detach, nor from a Python
number, and a hook rewrites the gradient in the backward pass."""


MODULE_HOOK = "torch.nn.Module.register_full_backward_hook"
"""How a module with backward hooks (or backward pre-hooks) is named among the bypasses."""


def _bypass_notes(bypasses: list[Site]) -> tuple[str, ...]:
    """One note per kind of call in :data:`BYPASSES` that the function made, the first
    named: where it drops or changes a derivative the function needs, it is the bug."""
    notes = []
    for op in dict.fromkeys(b.op for b in bypasses):
        sites = [b for b in bypasses if b.op == op]
        notes.append(f"{len(sites)} call(s) of {op} ({BYPASSES[op]}) not checked: no rule to "
                     "compare; where one drops or changes a derivative the function needs, "
                     f"it is the bug (the first: {sites[0].where()})")  # fmt: skip
    return tuple(notes)


def _cotangents(
    torch: Any, flow: Flow, result: Any, args: list[Any]
) -> dict[int, np.ndarray] | None:
    """The cotangent each recorded call's outputs received (flattened, by position) in
    one backward pass of the program from cotangents of ones on its outputs; None where
    that pass does not run."""
    outs = [t for t in _tensors(torch, _flat(result)) if t.requires_grad]
    leaves = [a for a in _tensors(torch, args) if a.requires_grad]
    made = {
        i: [t for t in _tensors(torch, v) if t.requires_grad] for i, v in flow.outputs().items()
    }
    got: dict[int, dict[int, np.ndarray]] = {}

    def keep(i: int, k: int) -> Callable[[Any], None]:
        def hook(g: Any) -> None:
            got.setdefault(i, {})[k] = g.detach().double().numpy().copy()

        return hook

    hooks = [t.register_hook(keep(i, k)) for i, ts in made.items() for k, t in enumerate(ts)]
    try:
        torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs], allow_unused=True)
    except RuntimeError:  # no backward pass (nothing requires gradients): cotangents unknown
        return None
    finally:
        for h in hooks:
            h.remove()
    return {i: np.concatenate([got[i].get(k, np.zeros(tuple(t.shape))).ravel()
                               for k, t in enumerate(made[i])]) for i in got}  # fmt: skip


def _flat(a: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts."""
    if isinstance(a, dict):
        return [x for v in a.values() for x in _flat(v)]
    if isinstance(a, (list, tuple)):
        return [x for v in a for x in _flat(v)]
    return [a]


def _fresh(torch: Any, a: Any) -> Any:
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().clone().requires_grad_()
    return a


def _names(torch: Any, f: Callable[..., Any], args: Sequence[Any] = ()) -> dict[int, str]:
    """``id(module) -> "root.sub.2"`` for every module reachable from ``f`` or passed to
    it as an argument (``wrt="parameters"``: ``f(model, x)``), named as the code names
    it."""
    from .._names import argument_names

    is_module = lambda o: isinstance(o, torch.nn.Module)  # noqa: E731
    params = argument_names(f, len(args))
    passed = [(params[i] or f"arg{i}", a) for i, a in enumerate(args) if is_module(a)]
    out: dict[int, str] = {}
    for label, obj in [*passed, *reachable_roots(f, is_module)]:
        for name, m in obj.named_modules():
            out.setdefault(id(m), f"{label}.{name}" if name else label)
    return out


@dataclass
class _State:
    depth: int = 0


@contextlib.contextmanager
def _recording(
    torch: Any,
    names: dict[int, str],
    custom: list[RecordedCall],
    prims: tuple[list[RecordedCall], list[Site]],
    flow: Flow,
) -> Iterator[None]:
    """Wrap ``Function.apply``, hook modules and enter a TorchFunctionMode, for one run;
    ``flow`` learns which call made each tensor; ``prims``: the primitives, and the calls
    of :data:`BYPASSES`."""
    from torch.nn.modules import module as mod

    stack: list[Any] = []
    state = _State()

    def path() -> str:
        if not stack:
            return ""
        m = stack[-1]
        return f"{names.get(id(m), '?')} ({type(m).__name__})" if id(m) in names else \
            " > ".join(type(s).__name__ for s in stack)  # fmt: skip

    def recorded(original: Callable[..., Any]) -> Callable[..., Any]:
        def apply(cls: Any, *a: Any, **k: Any) -> Any:
            index = -1
            if state.depth == 0 and not _internal(cls):
                site = Site(
                    f"torch.autograd.Function {cls.__name__}",
                    "custom rule",
                    path(),
                    source_line(traceback.extract_stack()[:-1], _skip_dirs(torch)),
                )
                index = len(custom) + len(prims[0])
                state.depth += 1  # the copy's detach is polygrad's call, not the function's
                try:
                    saved = _clone(torch, a)
                finally:
                    state.depth -= 1
                custom.append(RecordedCall(lambda *x, **y: original(cls, *x, **y), saved,
                                           dict(k), site, index,
                                           flow.reads(_tensors(torch, a))))  # fmt: skip
            state.depth += 1
            try:
                out = original(cls, *a, **k)
            finally:
                state.depth -= 1
            if index >= 0:
                flow.made_by(index, _tensors(torch, _flat(out)))
            return out

        return apply

    def enter(m: Any, i: Any) -> None:
        stack.append(m)
        if getattr(m, "_backward_hooks", None) or getattr(m, "_backward_pre_hooks", None):
            prims[1].append(Site(MODULE_HOOK, "primitive", path()))

    def leave(m: Any, i: Any, o: Any) -> None:  # returns None: the output is kept
        if stack:
            stack.pop()

    pre = mod.register_module_forward_pre_hook(enter)
    post = mod.register_module_forward_hook(leave)
    try:
        with (
            replaced_function_apply(torch, recorded),
            _PrimitiveMode(torch, state, (custom, *prims), path, flow),
        ):
            yield
    finally:
        pre.remove()
        post.remove()


def _internal(cls: type) -> bool:
    """A Function of PyTorch's own (the ``BackwardHookFunction`` of module hooks): not a
    user's rule."""
    return cls.__module__ == "torch" or cls.__module__.startswith("torch.")


def _skip_dirs(torch: Any) -> tuple[str, ...]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return (os.path.dirname(os.path.abspath(torch.__file__)), here)


def _clone(torch: Any, a: Any) -> Any:
    if isinstance(a, torch.Tensor):  # requires_grad kept: it marks the node's inputs
        return a.detach().clone().requires_grad_(a.requires_grad and a.is_floating_point())
    if isinstance(a, (list, tuple)):
        return type(a)(_clone(torch, x) for x in a)
    return a


def _PrimitiveMode(
    torch: Any,
    state: _State,
    calls: tuple[list[RecordedCall], list[RecordedCall], list[Site]],
    path: Callable[[], str],
    flow: Flow,
) -> Any:
    """A TorchFunctionMode recording top-level calls on tensors requiring gradients in
    ``calls[1]`` (``calls[0]``, the custom rules, counted in their positions), and the
    sites of those in :data:`BYPASSES` in ``calls[2]``."""
    from torch.overrides import TorchFunctionMode, resolve_name

    skip = _skip_dirs(torch)

    class Mode(TorchFunctionMode):  # type: ignore[misc]
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            name = resolve_name(func) or getattr(func, "__name__", str(func))
            keep = state.depth == 0 and torch.is_grad_enabled() and _differentiable(
                torch, name, args)  # fmt: skip
            saved = _clone(torch, args) if keep else ()
            out = func(*args, **kwargs)
            if keep and name in BYPASSES:
                line = source_line(traceback.extract_stack()[:-1], skip)
                calls[2].append(Site(name, "primitive", path(), line))
            elif keep and isinstance(out, torch.Tensor) and out.grad_fn is not None:
                site = Site(name, "primitive", path(),
                            source_line(traceback.extract_stack()[:-1], skip))  # fmt: skip
                index = len(calls[0]) + len(calls[1])
                reads = flow.reads(_tensors(torch, [args, list(kwargs.values())]))
                calls[1].append(RecordedCall(func, saved, dict(kwargs), site, index, reads))
                flow.made_by(index, [out])
            return out

    return Mode()


def _differentiable(torch: Any, name: str, args: Sequence[Any]) -> bool:
    """A call that is not in place and reads a floating tensor requiring gradients."""
    last = name.rsplit(".", 1)[-1]
    if (last.endswith("_") and not last.endswith("__")) or last.startswith("__i") or \
            last in ("__setitem__", "__get__", "__set__"):  # fmt: skip
        return False
    return any(a.requires_grad for a in _tensors(torch, args))


def _tensors(torch: Any, a: Any) -> list[Any]:
    if isinstance(a, torch.Tensor):
        return [a] if a.is_floating_point() else []
    if isinstance(a, (list, tuple)):
        return [t for x in a for t in _tensors(torch, x)]
    return []


def _node(torch: Any, c: RecordedCall, as_run: bool = False) -> Node | None:
    """The call as a node: its floating inputs that required gradients are the inputs;
    in float64 where it runs in it, else (or ``as_run``) in the dtype the program used."""
    moving = [t for t in _tensors(torch, c.args) if t.requires_grad]
    inputs = [t.detach().double().numpy().copy() for t in moving]
    if not inputs:
        return None
    for dtype in (moving[0].dtype,) if as_run else (torch.float64, moving[0].dtype):
        node = _try_node(torch, c, inputs, dtype)
        if node is not None:
            return node
    return None


def _try_node(torch: Any, c: RecordedCall, inputs: list[np.ndarray], dtype: Any) -> Node | None:
    """The node in ``dtype``, or None where the call fails or leaves that dtype."""

    def run(xs: Sequence[np.ndarray]) -> tuple[list[Any], list[Any]]:
        ts = [torch.tensor(x, dtype=dtype).requires_grad_() for x in xs]
        it = iter(ts)
        with torch.enable_grad():
            out = c.fn(*_substitute(torch, c.args, it, dtype), **c.kwargs)
        return ts, [o for o in _tensors(torch, out) if o.requires_grad]

    def forward(xs: Sequence[np.ndarray]) -> np.ndarray:
        _, outs = run(xs)
        return np.concatenate([o.detach().double().numpy().ravel() for o in outs])

    def vjp(xs: Sequence[np.ndarray], u: np.ndarray) -> list[np.ndarray]:
        ts, outs = run(xs)
        us, off = [], 0
        for o in outs:
            us.append(torch.tensor(u[off : off + o.numel()], dtype=o.dtype).reshape(o.shape))
            off += o.numel()
        gs = torch.autograd.grad(outs, ts, us, allow_unused=True)
        return [
            np.zeros(t.shape) if g is None else g.double().numpy()
            for g, t in zip(gs, ts, strict=True)
        ]

    try:
        _, outs = run(inputs)
    except Exception:  # noqa: BLE001 - this dtype does not run: try the next
        return None
    if not outs or any(o.dtype != dtype for o in outs):
        return None
    arith = str(dtype).replace("torch.", "")
    eps = float(torch.finfo(dtype).eps)
    return Node(c.site, tuple(inputs), forward, vjp, arith, eps, c.index)


def _substitute(torch: Any, a: Any, it: Iterator[Any], dtype: Any) -> Any:
    """``a`` with each tensor requiring gradients replaced by the next of ``it``, the other
    floating tensors (constants of the node) cast to ``dtype``."""
    if isinstance(a, torch.Tensor):
        if not a.is_floating_point():
            return a
        return next(it) if a.requires_grad else a.to(dtype)
    if isinstance(a, (list, tuple)):
        return type(a)(_substitute(torch, x, it, dtype) for x in a)
    return a
