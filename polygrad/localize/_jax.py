"""JAX: the jaxpr's equations, each with the values it saw in one forward pass.

The function is traced once (``jax.make_jaxpr`` at the checked arguments) and the jaxpr
is interpreted equation by equation (the bodies of ``pjit``/``closed_call`` entered),
each equation bound on the values it reads and recorded with them. A
``custom_vjp_call`` / ``custom_jvp_call`` equation is a custom node (the user's rule
replaces the derivative of its body); every other equation is a primitive node. A node
re-binds its one equation on float64 copies of its floating inputs under
``jax.enable_x64`` (the working dtype where the equation does not run in float64), and
its VJP is ``jax.vjp`` of that binding: the custom rule for a custom node. The layer
path is the equation's ``name_stack`` (Flax module names, ``jax.named_scope``; the
transformations wrapped around them left out), the source line
its ``source_info`` (the innermost frame outside JAX).
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ._core import Flow, Node, Site, Step, with_cotangents
from ._names import format_place

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report
    from . import CheckedCall, Recording

_CUSTOM = {"custom_vjp_call", "custom_vjp_call_jaxpr", "custom_jvp_call"}
_ENTERED = {"pjit", "jit", "closed_call", "core_call", "checkpoint", "remat", "remat2"}


@dataclass(frozen=True)
class _Eqn:
    """One equation with the values it read, where it sits, and its position in the
    forward pass."""

    eqn: Any
    invals: tuple[Any, ...]
    site: Site
    index: int = -1


@dataclass
class _Tape:
    """What one interpretation records: custom and primitive equations, the data flow;
    ``eps``: values added to each equation's floating outputs (by position), whose
    cotangents are the equations' own in the program's backward pass."""

    custom: list[_Eqn]
    prims: list[_Eqn]
    steps: list[Step]
    flow: Flow
    eps: dict[int, list[Any]] | None = None


def record(call: CheckedCall, report: Report, as_run: bool = False) -> Recording:
    """Trace ``call`` and interpret its jaxpr, recording every equation as a node: on
    float64 copies of the floating arguments under ``jax.enable_x64`` (so that the
    program's custom rules are traced in float64 too), else (or ``as_run``) as the user
    runs it."""
    import contextlib

    import jax

    from . import Recording

    for wide in (False,) if as_run else (True, False):
        tape = _Tape([], [], [], Flow())
        with jax.enable_x64(True) if wide else contextlib.nullcontext():
            args = jax.tree_util.tree_map(_widened, call.args) if wide else call.args
            try:
                closed = jax.make_jaxpr(call.f)(*args)
                leaves = jax.tree_util.tree_leaves(args)
                results = _run(closed.jaxpr, closed.consts, leaves, ("", "", ""), tape)
            except Exception:  # noqa: BLE001 - not traceable in float64: as the user runs it
                if not wide:
                    raise
                continue
        break
    cts = _cotangents(closed, leaves, tape) if as_run else None
    nodes = [[n for n in (_node(e, as_run) for e in group) if n]
             for group in (tape.custom, tape.prims)]  # fmt: skip
    return Recording(with_cotangents(nodes[0], cts), with_cotangents(nodes[1], cts),
                     steps=tuple(tape.steps), outputs=tape.flow.reads(results))  # fmt: skip


_TRANSFORM = re.compile(r"^[A-Za-z_]\w*\((.*)\)$")


def _scopes(name_stack: Any) -> str:
    """The module and scope names of a name stack, without the transformations wrapped
    around them (``vmap(blk)`` is ``blk``; an unnamed ``vmap()`` is nothing)."""
    parts = []
    for part in str(name_stack).split("/"):
        while (m := _TRANSFORM.match(part)) is not None:
            part = m.group(1)
        if part:
            parts.append(part)
    return "/".join(parts)


def _cotangents(closed: Any, leaves: list[Any], tape: _Tape) -> dict[int, np.ndarray] | None:
    """The cotangent of each equation's floating outputs (flattened, by position) in one
    backward pass of the program from cotangents of ones on its floating outputs: the
    gradient at 0 of values added to those outputs (:attr:`_Tape.eps`); None where it
    cannot be taken."""
    import jax

    jnp = jax.numpy
    zeros = {i: [jnp.zeros_like(v) for v in vs if _floating(v)]
             for i, vs in tape.flow.outputs().items()}  # fmt: skip

    def program(eps: dict[int, list[Any]]) -> list[Any]:
        again = _Tape([], [], [], Flow(), eps)
        outs = _run(closed.jaxpr, closed.consts, leaves, ("", "", ""), again)
        return [o for o in outs if _floating(o)]

    try:
        outs, pull = jax.vjp(program, {i: z for i, z in zeros.items() if z})
        (cts,) = pull([jnp.ones_like(o) for o in outs])
    except Exception:  # noqa: BLE001 - no backward pass here: cotangents unknown
        return None
    return {i: np.concatenate([np.asarray(c, np.float64).ravel() for c in cs])
            for i, cs in cts.items()}  # fmt: skip


def _widened(v: Any) -> Any:
    """A float64 copy of a narrow floating array; anything else as it is."""
    if _floating(v) and np.dtype(v.dtype).itemsize < 8:
        import jax

        return jax.numpy.asarray(v, np.float64)
    return v


def _bind(eqn: Any, vals: Sequence[Any]) -> list[Any]:
    """One equation on ``vals`` (as ``jax.core.eval_jaxpr`` binds it)."""
    params = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(params, tuple):  # older JAX: (subfuns, params)
        subfuns, params = params
        vals = [*subfuns, *vals]
    with eqn.ctx.manager:
        out = eqn.primitive.bind(*vals, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _run(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], outer: tuple[str, str, str],
         tape: _Tape) -> list[Any]:  # fmt: skip
    """Evaluate ``jaxpr``, recording each equation on ``tape``; ``outer`` is the name
    stack, the name and the source line of the call whose body this is (``""``: none)."""
    from jax.extend.core import Literal

    env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))

    def read(v: Any) -> Any:
        return v.val if isinstance(v, Literal) else env[v]

    prefix, within, place = outer
    for eqn in jaxpr.eqns:
        vals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        stack = "/".join(p for p in (prefix, _scopes(eqn.source_info.name_stack)) if p)
        inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
        if name in _ENTERED and inner is not None and name not in _CUSTOM:
            body = getattr(inner, "jaxpr", inner)
            called = str(eqn.params.get("name", "")) or within
            results = _run(body, getattr(inner, "consts", ()), vals,
                           (stack, called, _place(eqn) or place), tape)  # fmt: skip
        else:
            kind = "custom rule" if name in _CUSTOM else "primitive"
            op = f"{_op_name(eqn)} (in jit {within})" if within else _op_name(eqn)
            index = len(tape.steps)
            site = Site(op, kind, stack, _place(eqn) or place)
            reads = tape.flow.reads(vals)
            (tape.custom if name in _CUSTOM else tape.prims).append(
                _Eqn(eqn, tuple(vals), site, index)
            )
            results = _bind(eqn, vals)
            tape.steps.append(Step(site, reads, any(_floating(r) for r in results)))
            if tape.eps is not None and tape.eps.get(index):
                add = iter(tape.eps[index])
                results = [r + next(add) if _floating(r) else r for r in results]
            tape.flow.made_by(index, results)
        env.update(zip(eqn.outvars, results, strict=True))
    return [read(v) for v in jaxpr.outvars]


def _op_name(eqn: Any) -> str:
    """The primitive's name; for a custom call, also the Python function it wraps."""
    name = eqn.primitive.name
    if name not in _CUSTOM:
        return name
    inner = eqn.params.get("call_jaxpr")
    body = getattr(inner, "jaxpr", inner)
    for e in getattr(body, "eqns", ()):
        frame = _frame(e)
        if frame is not None:
            return f"{name} of {frame.function_name}"
    return name


def _frame(eqn: Any) -> Any:
    from jax._src import source_info_util

    return source_info_util.user_frame(eqn.source_info.traceback)


def _place(eqn: Any) -> str:
    frame = _frame(eqn)
    if frame is None:
        return ""
    code = linecache.getline(frame.file_name, frame.start_line)
    return format_place(frame.file_name, frame.start_line, frame.function_name, code)


def _moving(e: _Eqn) -> list[int]:
    """Positions of the equation's floating inputs (a custom call's constants excluded)."""
    start = int(e.eqn.params.get("num_consts", 0)) if e.eqn.primitive.name in _CUSTOM else 0
    return [i for i, v in enumerate(e.invals) if i >= start and _floating(v)]


def _floating(v: Any) -> bool:
    dtype = getattr(v, "dtype", None)
    return dtype is not None and bool(np.issubdtype(np.dtype(dtype), np.floating))


def _node(e: _Eqn, as_run: bool = False) -> Node | None:
    """The equation as a node, in float64 where it runs in float64, else (or ``as_run``)
    in the dtype the program ran it in."""
    moving = _moving(e)
    if not moving:
        return None
    inputs = tuple(np.asarray(e.invals[i], dtype=np.float64) for i in moving)
    for wide in (False,) if as_run else (True, False):
        node = _try_node(e, moving, inputs, wide)
        if node is not None:
            return node
    return None


def _try_node(
    e: _Eqn, moving: list[int], inputs: tuple[np.ndarray, ...], wide: bool
) -> Node | None:
    """The node with every floating value in float64 (``wide``, under ``jax.enable_x64``)
    or in the working dtype; None where the equation fails or leaves that dtype."""
    import contextlib

    import jax

    dtype = np.dtype(np.float64) if wide else np.dtype(jax.numpy.asarray(e.invals[moving[0]]).dtype)
    if not wide and dtype in (np.float64, np.complex128) and not jax.config.read("jax_enable_x64"):
        return None  # a float64 value of the float64 trace, which this mode cannot run

    def mode() -> Any:
        return jax.enable_x64(True) if wide else contextlib.nullcontext()

    def fn(*xs: Any) -> list[Any]:
        vals = [jax.numpy.asarray(v, dtype) if _floating(v) else v for v in e.invals]
        for i, x in zip(moving, xs, strict=True):
            vals[i] = x
        return [o for o in _bind(e.eqn, vals) if _floating(o)]

    def cast(xs: Sequence[np.ndarray]) -> list[Any]:
        return [jax.numpy.asarray(np.asarray(x).astype(dtype)) for x in xs]

    def forward(xs: Sequence[np.ndarray]) -> np.ndarray:
        with mode():
            outs = fn(*cast(xs))
        return np.concatenate([np.asarray(o, np.float64).ravel() for o in outs])

    def vjp(xs: Sequence[np.ndarray], u: np.ndarray) -> list[np.ndarray]:
        with mode():
            outs, pull = jax.vjp(fn, *cast(xs))
            us, off = [], 0
            for o in outs:
                us.append(jax.numpy.asarray(u[off : off + o.size].reshape(o.shape), o.dtype))
                off += o.size
            gs = pull(us)
        return [np.asarray(g, np.float64) for g in gs]

    try:
        with mode():
            outs = fn(*cast(inputs))
    except Exception:  # noqa: BLE001 - this dtype does not run: try the next
        return None
    if not outs or any(np.dtype(o.dtype) != dtype for o in outs):
        return None
    return Node(e.site, inputs, forward, vjp, str(dtype), float(np.finfo(dtype).eps), e.index)
