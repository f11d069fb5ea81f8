"""The reference of one check, sharded over a ``concurrent.futures.Executor``.

A full check needs central differences along every coordinate direction; the
directions are independent (each has its own noise estimate, ladder and
Richardson tableau), so they can be computed anywhere. ``check(...,
executor=ex)`` splits the directions into shards, submits one task per shard
to ``ex`` (a ``ProcessPoolExecutor``, Dask's ``Client.get_executor()``, Ray's
executor, a ``ThreadPoolExecutor``) and concatenates the results in order: the
same reference, hence the same verdict, as in one process.

For an executor that runs tasks in other processes, the function, its
arguments and the supplied derivatives travel serialised with cloudpickle
(which handles closures, lambdas and locally defined classes); each task
rebuilds the backend's target from them and evaluates its shard there. A
``ThreadPoolExecutor`` shares the target of the calling process instead.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .reference.differences import DirectionalDerivatives
from .reference.richardson import Estimate

__all__ = ["ShardSpec", "UnpicklableFunctionError", "sharded_reference", "SHARDS_PER_WORKER"]

SHARDS_PER_WORKER = 2
"""Shards per worker of the executor (a slow worker then holds back less)."""
DEFAULT_WORKERS = 4
"""Workers assumed when the executor does not say how many it has."""


class UnpicklableFunctionError(TypeError):
    """The function or its arguments cannot be sent to another process."""


@dataclass(frozen=True)
class ShardSpec:
    """What a worker needs to rebuild the check's target and compute a shard.

    Attributes
    ----------
    f : callable
        The function as the check sees it (after complex realification or the
        gradient function of ``order=2``).
    args : tuple
        Its arguments.
    argnums : tuple of int
    backend : str
        Name of the backend that built the target in the calling process.
    supplied : Supplied
        The user's derivatives (NumPy functions need one to build a target).
    batch_size, wrt
        As given to :func:`polygrad.check`.
    use64 : bool
        Whether the reference evaluates ``evaluate64`` (else ``evaluate``).
    """

    f: Callable[..., Any]
    args: tuple[Any, ...]
    argnums: tuple[int, ...]
    backend: str
    supplied: Any
    batch_size: int
    wrt: str
    use64: bool


@dataclass(frozen=True)
class _ShardWork:
    """The reference parameters shared by every shard: the check's plan and options
    without what cannot travel (the evaluation closure, the cache, the executor)."""

    method: str
    plan: Any
    opts: Any
    shared: np.ndarray | None
    resolution: np.ndarray | float
    along: Callable[..., DirectionalDerivatives]
    guard: Callable[..., Callable[[np.ndarray], np.ndarray]]


def shard_spec(prep: Any, opts: Any) -> ShardSpec | None:
    """How a worker rebuilds the target of a check, or None when ``opts`` has no executor.

    ``prep`` is the check's :class:`~polygrad.pipeline.prepare.Prepared` (the function
    as the check sees it, after realification or ``order=2``).
    """
    if opts.executor is None:
        return None
    t = prep.target
    use64 = t.evaluate64 is not None and opts.reference != "working"
    return ShardSpec(prep.f, prep.args, prep.argnums, t.backend, prep.supplied,
                     opts.batch_size, opts.wrt, use64)  # fmt: skip


def _dumps(obj: Any) -> bytes:
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - the `distributed` extra installs it
        return pickle.dumps(obj)
    return bytes(cloudpickle.dumps(obj))


def _serialise(spec: ShardSpec, work: _ShardWork) -> bytes:
    try:
        return _dumps((spec, work))
    except Exception as exc:  # noqa: BLE001 - anything the pickler refuses
        raise UnpicklableFunctionError(
            "check(..., executor=...): the function, its arguments or what it closes over "
            f"cannot be serialised for another process ({type(exc).__name__}: {exc}). "
            "Pass a ThreadPoolExecutor, or make it picklable (a module-level function, "
            "no open files, locks or device handles in its closure)"
        ) from exc


_WORKER_TARGETS: dict[bytes, tuple[Any, Any]] = {}
"""The last check's (spec and work, target) on this worker: its other shards reuse them."""


def _run_shard(payload: bytes, W: np.ndarray) -> tuple[DirectionalDerivatives, dict[str, int]]:
    """Worker side: rebuild the target (once per check) and compute the reference along
    the rows of ``W``."""
    digest = hashlib.blake2b(payload, digest_size=16).digest()
    if digest not in _WORKER_TARGETS:
        spec, work = pickle.loads(payload)
        from .backends import select_backend

        be = select_backend(spec.args, spec.backend)
        target = be.make_target(
            spec.f, spec.args, spec.argnums, spec.supplied, spec.batch_size, spec.wrt
        )
        if work.method == "mp" and not target.mp_mode():
            raise RuntimeError("the mp evaluation could not be rebuilt on the worker")
        _WORKER_TARGETS.clear()
        _WORKER_TARGETS[digest] = ((spec, work), target)
    (spec, work), target = _WORKER_TARGETS[digest]
    fn = target.evaluate64 if spec.use64 else target.evaluate
    assert fn is not None
    return _shard(target, fn, work, W)


def _shard(
    target: Any, fn: Callable[[np.ndarray], np.ndarray], work: _ShardWork, W: np.ndarray
) -> tuple[DirectionalDerivatives, dict[str, int]]:
    guarded = work.guard(fn, target.m, {})
    info: dict[str, Any] = {"evaluations": 0, "detected": 0, "total": 0,
                            "_resolution": work.resolution}  # fmt: skip
    dd = work.along(work.method, guarded, target, W, work.plan, work.opts, info, work.shared)
    info.pop("_resolution")
    return dd, info


def _pieces(plan: Any, shards: int) -> list[np.ndarray]:
    W = np.concatenate(list(plan.chunks()), axis=0)
    size = max(1, math.ceil(W.shape[0] / shards))
    return [W[a : a + size] for a in range(0, W.shape[0], size)]


def _workers(executor: concurrent.futures.Executor) -> int:
    n = getattr(executor, "_max_workers", None)
    if isinstance(n, int) and n > 0:
        return n
    client = getattr(executor, "_client", None)  # dask.distributed's ClientExecutor
    try:
        return max(1, sum(client.nthreads().values()))  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - unknown executor
        return DEFAULT_WORKERS


def sharded_reference(
    executor: concurrent.futures.Executor,
    spec: ShardSpec | None,
    target: Any,
    fn: Callable[[np.ndarray], np.ndarray],
    method: str,
    plan: Any,
    opts: Any,
    info: dict[str, Any],
    shared: np.ndarray | None,
    along: Callable[..., DirectionalDerivatives],
    guard: Callable[..., Callable[[np.ndarray], np.ndarray]],
) -> DirectionalDerivatives:
    """The reference along every direction of ``plan``, computed in shards on ``executor``.

    Parameters
    ----------
    executor : concurrent.futures.Executor
        Where the shards run.
    spec : ShardSpec or None
        How a worker in another process rebuilds the target (None: threads only).
    target, fn
        The calling process's target and reference evaluation (``ThreadPoolExecutor``).
    method : {"mp", "float64", "working"}
    plan, opts
        The check's :class:`~polygrad.pipeline.plan.Plan` and options.
    info : dict
        The noise counts, updated in place; ``info["_resolution"]`` is f's grid.
    shared : ndarray or None
        Noise measured once for every direction, if so.
    along, guard : callable
        The reference stage's functions a shard runs (module-level, so a process pool
        pickles them by name): the reference along rows of ``W``
        (:func:`polygrad.pipeline.reference.along`), and ``fn`` with the rows at which
        it raises as NaN (:func:`polygrad.pipeline.plan.raising_points_as_nan`).

    Returns
    -------
    DirectionalDerivatives
        Arrays ``(d, m)``, directions in the order of ``plan.chunks()``.

    Raises
    ------
    UnpicklableFunctionError
        A process-based executor and a function (or arguments) that cannot be
        serialised.
    """
    light_plan = replace(plan, ref_fn=None, W=None, cached=None, cache_slot=None, raised={})
    light_opts = replace(opts, executor=None, cache=None)
    work = _ShardWork(method, light_plan, light_opts, shared, info["_resolution"], along, guard)
    pieces = _pieces(plan, SHARDS_PER_WORKER * _workers(executor))
    if isinstance(executor, concurrent.futures.ThreadPoolExecutor) or spec is None:
        futures = [executor.submit(_shard, target, fn, work, W) for W in pieces]
    else:
        payload = _serialise(spec, work)
        futures = [executor.submit(_run_shard, payload, W) for W in pieces]
    results = [fut.result() for fut in futures]
    for _, counts in results:
        for k in ("evaluations", "detected", "total"):
            info[k] = info.get(k, 0) + counts[k]
    return concat([dd for dd, _ in results])


def _cat_estimates(es: list[Estimate]) -> Estimate:
    def mp(name: str) -> np.ndarray | None:
        parts = [getattr(e, name) for e in es]
        if any(p is None for p in parts):
            return None
        return np.concatenate([np.asarray(p) for p in parts])

    return Estimate(
        value=np.concatenate([e.value for e in es]),
        error=np.concatenate([e.error for e in es]),
        step=np.concatenate([e.step for e in es]),
        noise=np.concatenate([e.noise for e in es]),
        method=es[0].method,
        evaluations=sum(e.evaluations for e in es),
        value_mp=mp("value_mp"),
        error_mp=mp("error_mp"),
    )


def concat(parts: list[DirectionalDerivatives]) -> DirectionalDerivatives:
    """Directional derivatives of consecutive direction blocks, joined along directions."""
    if len(parts) == 1:
        return parts[0]
    return DirectionalDerivatives(
        _cat_estimates([p.central for p in parts]),
        _cat_estimates([p.right for p in parts]),
        _cat_estimates([p.left for p in parts]),
        np.concatenate([p.jump_right for p in parts]),
        np.concatenate([p.jump_left for p in parts]),
    )
