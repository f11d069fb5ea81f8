"""Bound the ``while`` loops of a JAX function, so that no evaluation of a check hangs.

A loop that iterates to a tolerance (a fixed-point solver, Newton's method) stops at the
user's point, but at the other points a check evaluates (long steps of a difference
ladder, random directions of a Taylor test) its stopping test may never be met: the
iteration diverges, cycles, or the tolerance is below what the arithmetic can reach.
``jax.lax.while_loop`` runs inside XLA, and a batched (``vmap``) loop runs until every
row has stopped, so one such point would hang the whole check.

:func:`bounded` re-executes the function's jaxpr with every ``while`` (nested in calls,
custom-derivative primitives, ``cond``, ``scan`` and other loops too) given an
iteration counter: a loop that has not stopped after ``cap`` trips stops, and its
floating results become NaN, so the point reads as not finite (as a point outside the
function's domain does). The number of loops cut short is counted on the host
(``jax.debug.callback``), and :func:`loop_trips` measures the trips the loops take at
the user's point, from which a check sets the cap.

Only evaluations are bounded: the function's derivatives are taken at the user's point,
where its loops stop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .jaxpr_coverage import _CALLS, _CUSTOM

__all__ = ["LoopBound", "bounded", "has_while", "loop_trips"]

UNBOUNDED = 2**31 - 1
"""The cap that measures without cutting (the counter is int32)."""


class LoopBound:
    """The cap of a bounded function's loops, and what its runs have seen.

    Attributes
    ----------
    cap : int
        Most trips of one loop.
    cut : int
        Loop runs (rows of a batch counted one by one) stopped at ``cap``.
    most : int
        Most trips any loop has taken in a run that stopped by itself.
    """

    def __init__(self, cap: int = UNBOUNDED) -> None:
        self.cap, self.cut, self.most = int(cap), 0, 0

    def record(self, trips: Any, hit: Any) -> None:
        """Host side of the callback: one loop's trips and whether it was cut short."""
        trips, hit = np.asarray(trips), np.asarray(hit, dtype=bool)
        self.cut += int(np.sum(hit))
        done = trips[~hit]
        if done.size:
            self.most = max(self.most, int(np.max(done)))


def has_while(closed: Any) -> bool:
    """Whether a (closed) jaxpr holds a ``while`` equation at any depth."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    jaxpr = closed.jaxpr if isinstance(closed, ClosedJaxpr) else closed
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "while":
            return True
        for v in eqn.params.values():
            subs = v if isinstance(v, (tuple, list)) else (v,)
            if any(isinstance(s, (Jaxpr, ClosedJaxpr)) and has_while(s) for s in subs):
                return True
    return False


def bounded(closed: Any, bound: LoopBound) -> Callable[..., list[Any]]:
    """A function of the jaxpr's inputs computing its outputs with every loop bounded.

    Parameters
    ----------
    closed : jax.extend.core.ClosedJaxpr
        The function's jaxpr (``jax.make_jaxpr``).
    bound : LoopBound
        The cap (read when the function is traced) and the counts it updates.

    Returns
    -------
    callable
        ``(*inputs) -> list of outputs``, traceable (``jit``, ``vmap``).
    """

    def run(*args: Any) -> list[Any]:
        return _Interpreter(bound).run(closed, list(args))

    return run


def loop_trips(closed: Any, args: Sequence[Any]) -> int:
    """Most trips any loop of the jaxpr takes at ``args`` (unbounded: it must stop there)."""
    bound = LoopBound()
    import jax

    jax.block_until_ready(bounded(closed, bound)(*args))
    jax.effects_barrier()
    return bound.most


class _Interpreter:
    """Evaluates a jaxpr equation by equation, rebuilding each ``while`` with a counter."""

    def __init__(self, bound: LoopBound) -> None:
        self.bound = bound

    def run(self, closed: Any, args: list[Any]) -> list[Any]:
        from jax.extend.core import ClosedJaxpr, DropVar, Literal

        if not isinstance(closed, ClosedJaxpr):
            closed = ClosedJaxpr(closed, [])
        env: dict[Any, Any] = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True))
        env.update(zip(closed.jaxpr.invars, args, strict=True))

        def read(v: Any) -> Any:
            return v.val if isinstance(v, Literal) else env[v]

        for eqn in closed.jaxpr.eqns:
            outs = self._apply(eqn, [read(v) for v in eqn.invars])
            for var, out in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, DropVar):
                    env[var] = out
        return [read(v) for v in closed.jaxpr.outvars]

    def _apply(self, eqn: Any, invals: list[Any]) -> list[Any]:
        name = eqn.primitive.name
        if name == "while":
            return self._while(eqn, invals)
        if name in _CALLS or name in _CUSTOM:  # evaluation only: the primal computation
            sub = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
            if sub is not None and has_while(sub):
                return self.run(sub, invals)
        params = {k: self._param(v) for k, v in eqn.params.items()}
        outs = eqn.primitive.bind(*invals, **params)
        return list(outs) if eqn.primitive.multiple_results else [outs]

    def _param(self, v: Any) -> Any:
        """A sub-jaxpr (of ``cond``, ``scan``...) with its loops bounded, same signature."""
        import jax
        from jax.extend.core import ClosedJaxpr

        if isinstance(v, ClosedJaxpr) and has_while(v):
            avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in v.in_avals]
            return jax.make_jaxpr(lambda *a: self.run(v, list(a)))(*avals)
        if isinstance(v, tuple) and any(isinstance(e, ClosedJaxpr) for e in v):
            return tuple(self._param(e) for e in v)
        return v

    def _while(self, eqn: Any, invals: list[Any]) -> list[Any]:
        import jax
        import jax.numpy as jnp

        p = eqn.params
        cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
        cconsts, bconsts, carry = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
        cap = self.bound.cap

        def cond(state: tuple[Any, list[Any]]) -> Any:
            i, c = state
            return jnp.logical_and(i < cap, self.run(p["cond_jaxpr"], [*cconsts, *c])[0])

        def body(state: tuple[Any, list[Any]]) -> tuple[Any, list[Any]]:
            i, c = state
            return i + 1, self.run(p["body_jaxpr"], [*bconsts, *c])

        trips, out = jax.lax.while_loop(cond, body, (jnp.int32(0), list(carry)))
        # stopped by the cap, not by its own test: still running at the last state
        hit = jnp.logical_and(trips >= cap, self.run(p["cond_jaxpr"], [*cconsts, *out])[0])
        jax.debug.callback(self.bound.record, trips, hit)
        return [
            jnp.where(hit, jnp.nan, o) if jnp.issubdtype(o.dtype, jnp.inexact) else o for o in out
        ]
