"""Plan stage: the reference's arithmetic, full Jacobian or projections, mp or not, directions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._timing import probe_seconds
from ..backends.base import Target
from ..policy import Policy
from ..reference.differences import rows_per_batch
from ..reference.mp import expected_mp_evaluations
from ..reference.steps import F64_EPS, RademacherDirections, ladder, pow2_scales, rademacher
from .prepare import Options

if TYPE_CHECKING:
    from ..refcache import CachedReference
    from .cache import CacheRequest, CacheSlot

__all__ = ["Plan", "coordinate_directions", "make_plan", "raising_points_as_nan"]


@dataclass(frozen=True)
class Plan:
    """How the reference is computed.

    Attributes
    ----------
    ref_fn : callable ``(B, n) -> (B, m)``
        The evaluation the reference differentiates (raising points give NaN).
    ref_eps : float
        Its machine epsilon.
    method : {"quad", "mp", "float64", "working"}
        The reference's source.
    f0 : ndarray, shape (m,)
        ``ref_fn`` at ``x0``.
    raised : dict
        Filled while the reference runs: the first exception of ``f`` and how many
        points raised (see :func:`raising_points_as_nan`).
    s : ndarray, shape (n,)
        Direction scales.
    accuracy : float
        Relative accuracy the finite-difference reference aims at.
    ladder : (float, int)
        Largest step and number of levels.
    t_row : float
        Seconds per evaluated point (timed).
    full : bool
        Compare every Jacobian entry (else random projections).
    small : bool
        Small enough for ``reference="auto"`` to consider mp.
    W : RademacherDirections or ndarray, shape (projections, n), or None
        Projection directions: generated on demand (see
        :class:`~polygrad.reference.steps.RademacherDirections`), or given (symmetric
        directions, see :mod:`polygrad.pipeline.subspace`); None for a full check.
    noise_dir : ndarray, shape (n,)
        A random direction for the explanation of a naive difference.
    shared_noise_dirs : ndarray or RademacherDirections or None
        The sample of directions the noise is measured along, for large full checks
        and projections of a large input.
    rng_state : dict
        Random state for the cotangents.
    notes : list of str
    cached : CachedReference or None
        The reference read from the cache (see :mod:`polygrad.pipeline.cache`).
    cache_slot : CacheSlot or None
        Where a newly computed reference is stored.
    strict_accuracy : float or None
        The accuracy a small check would aim at, where a large full check aims at a
        looser one (``policy.large_full_accuracy``): directions that miss the loose
        aim are estimated again at this one.
    """

    ref_fn: Callable[[np.ndarray], np.ndarray]
    ref_eps: float
    method: str
    f0: np.ndarray
    raised: dict[str, Any]
    s: np.ndarray
    accuracy: float
    ladder: tuple[float, int]
    t_row: float
    full: bool
    small: bool
    W: RademacherDirections | np.ndarray | None
    noise_dir: np.ndarray
    shared_noise_dirs: np.ndarray | RademacherDirections | None
    rng_state: Any
    notes: list[str]
    cached: CachedReference | None = None
    cache_slot: CacheSlot | None = None
    strict_accuracy: float | None = None

    @property
    def d(self) -> int:
        """Number of directions."""
        return self.s.size if self.full else int(self.W.shape[0])  # type: ignore[union-attr]

    def chunks(self) -> Iterator[np.ndarray]:
        """The directions ``(k, n)``, in chunks of bounded memory."""
        if self.W is not None:  # a few directions: one chunk, built here, dropped after
            yield np.asarray(self.W)
            return
        n = self.s.size
        chunk = max(1, min(n, (1 << 22) // max(n, 1)))
        for a in range(0, n, chunk):
            yield coordinate_directions(self.s, np.arange(a, min(n, a + chunk)))

    def directions(self) -> np.ndarray:
        """All directions ``(d, n)``."""
        return np.diag(self.s) if self.W is None else np.asarray(self.W)


def coordinate_directions(s: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The coordinate directions ``idx`` scaled by ``s``: ``(len(idx), n)`` float64, row
    ``r`` holding ``s[idx[r]]`` at column ``idx[r]`` and zeros elsewhere."""
    W = np.zeros((idx.size, s.size))
    W[np.arange(idx.size), idx] = s[idx]
    return W


def raising_points_as_nan(
    fn: Callable[[np.ndarray], np.ndarray], m: int, raised: dict[str, Any]
) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` with the rows at which it raises returned as NaN (``(B, n) -> (B, m)``).

    A batch that raises is split in halves until the rows that raise are
    found; ``raised`` records the first exception and how many rows raised.
    """

    return functools.partial(_nan_where_raising, fn, m, raised)


def _nan_where_raising(
    fn: Callable[[np.ndarray], np.ndarray], m: int, raised: dict[str, Any], X: np.ndarray
) -> np.ndarray:
    """The body of :func:`raising_points_as_nan` (a module-level function: a closure that
    calls itself is a reference cycle, which keeps ``fn``'s target alive after the check
    until the garbage collector runs)."""
    try:
        return fn(X)
    except Exception as exc:  # noqa: BLE001 - the user's function, at a point away from x
        if X.shape[0] <= 1:
            raised.setdefault("first", exc.with_traceback(None))  # its frames hold batches
            raised["count"] = raised.get("count", 0) + X.shape[0]
            return np.full((X.shape[0], m), np.nan)
        half = X.shape[0] // 2
        return np.concatenate([
            _nan_where_raising(fn, m, raised, X[:half]),
            _nan_where_raising(fn, m, raised, X[half:]),
        ])  # fmt: skip


def _arithmetic(target: Target, reference: str, notes: list[str]) -> tuple[Any, float, str]:
    """(evaluation, eps, method) of the finite-difference reference."""
    fn, eps, method = target.evaluate, target.eps, "working"
    if target.evaluate64 is not None and reference != "working":
        fn, eps, method = target.evaluate64, F64_EPS, "float64"
    elif reference in ("float64", "mp") and target.evaluate64 is None:
        notes.append("a float64 evaluation is not available; the reference uses the working dtype")
    if target.working_dtype == "float64":
        method = "float64"
    return fn, eps, method


def _use_quad(target: Target, opts: Options, small: bool, notes: list[str]) -> bool:
    """Whether the reference is quad (see :mod:`polygrad.reference.quad`): under
    ``"auto"`` where mp would be considered (a small float64 check, one process), when
    the target runs on quad arrays; a note says why where its backend has a quad tier
    that this function cannot use."""
    wd64 = target.working_dtype == "float64"
    if not (opts.reference == "auto" and wd64 and small and opts.executor is None):
        return False
    if target.quad_mode():
        return True
    if target.quad_unavailable_reason is not None:
        notes.append(
            f"the quad-precision reference is unavailable ({target.quad_unavailable_reason})"
            "; the next in line (mp, or float64 differences) is used"
        )
    return False


def _use_mp(target: Target, opts: Options, small: bool, d: int, notes: list[str]) -> bool:
    """Whether the reference is mp: asked for, or affordable under ``"auto"``."""
    wd64 = target.working_dtype == "float64"
    if not (opts.reference == "mp" or (opts.reference == "auto" and wd64 and small)):
        return False
    if not target.mp_mode():
        if opts.reference == "mp":
            why = target.mp_unavailable_reason or "the function cannot run on mpmath numbers"
            notes.append(f"mp reference unavailable ({why}); a float64 reference was used instead")
        return False
    if opts.reference == "mp":
        return True
    # "auto": mp when its estimated cost is modest (one timed evaluation)
    evaluate_mp = target.evaluate_mp
    assert evaluate_mp is not None  # mp_mode() said so
    try:
        per_eval = probe_seconds(lambda: evaluate_mp(target.x0, np.zeros_like(target.x0), opts.dps))
    except Exception as exc:  # noqa: BLE001 - mp evaluation failed: float64 it is
        per_eval = np.inf
        notes.append(
            f"the mp reference failed ({type(exc).__name__}: {exc}); float64 differences used"
        )
    mp_seconds = per_eval * expected_mp_evaluations(d)
    if np.isfinite(mp_seconds) and mp_seconds > opts.policy.mp_auto_seconds:
        notes.append(
            f"an mp reference would take about {mp_seconds:.0f} s here; float64 "
            "differences were used (pass reference='mp' to use it anyway)"
        )
    return bool(mp_seconds <= opts.policy.mp_auto_seconds)


def _shared_noise_dirs(
    n: int, s: np.ndarray, levels: int, opts: Options, W: RademacherDirections | None
) -> np.ndarray | RademacherDirections | None:
    """A full check of many entries against a loose target measures the noise along a
    sample of the coordinate directions only (it costs more than the short ladder);
    projections of a large input along the first ``policy.shared_noise_projections``
    of their directions."""
    if W is not None:
        k = opts.policy.shared_noise_projections
        if levels > 4 or n < opts.policy.large_full_inputs or W.k <= k:
            return None
        return RademacherDirections(W.seed, k, W.s)  # the first k rows of W
    k = opts.policy.shared_noise_directions
    if levels > 4 or n < 8 * k:
        return None
    pick = np.random.default_rng([opts.seed, 1]).choice(n, k, replace=False)
    dirs = np.zeros((k, n))
    dirs[np.arange(k), pick] = s[pick]
    return dirs


RULE_RESOLUTION = float(np.finfo(np.float32).eps)
"""Relative accuracy a reference is aimed at, at least, where a float64 evaluation of
the rule is compared (a wrong rule in float16 or bfloat16 code is found by it)."""


def target_accuracy(target: Target, ref_eps: float) -> float:
    """Relative accuracy the finite-difference reference aims at.

    A fraction of the working dtype's round-off suffices to judge the working-dtype
    values; where a float64 evaluation of the rule exists (promotion), that evaluation
    decides MISMATCH and is judged at least to float32's resolution, so that a rule
    wrong by 1e-3 in float16 or bfloat16 code is not hidden by a reference aimed at
    their 1e-3 round-off.
    """
    working = target.eps
    if target.vjp64 is not None or target.jvp64 is not None:
        working = min(working, RULE_RESOLUTION)
    return max(1e-12, 30 * ref_eps, working)


def _ladder(target: Target, ref_eps: float, d: int, p: Policy) -> tuple[float, float, int]:
    """(accuracy, largest step, levels) of the finite-difference reference along ``d``
    directions.

    The accuracy is a fraction of the working dtype's round-off; a large full check
    (``policy.large_full_inputs``) aims at ``policy.large_full_accuracy`` at least, on
    the short ladder of ``policy.large_full_condition_allowance`` (about a fifth of the
    evaluations of the long one).
    """
    accuracy, allowance = target_accuracy(target, ref_eps), p.condition_allowance
    if d >= p.large_full_inputs:
        accuracy = max(accuracy, p.large_full_accuracy)
        allowance = p.large_full_condition_allowance
    h_max, levels = ladder(ref_eps, accuracy, allowance)
    return accuracy, h_max, levels


def _time_per_row(ref_fn: Callable[[np.ndarray], np.ndarray], x0: np.ndarray) -> float:
    """Seconds per evaluated point, timed on a batch of copies of ``x0`` (at most 64,
    and at most :data:`~polygrad.reference.differences.BATCH_BYTES` of points), on its
    second call: the first pays once for what a batch of that size costs the first
    time (a TensorFlow graph vectorized, a JAX program compiled: 20 times a warm
    batch of the case-2 CNN, which made a 3 s full check look like 67 s)."""
    probe = min(x0.size, rows_per_batch(x0.size, 64))
    batch = np.repeat(x0[None, :], probe, axis=0)
    ref_fn(batch)
    return probe_seconds(lambda: ref_fn(batch)) / probe


def _seconds(t: float) -> str:
    return f"{t:.0f} s" if t >= 10 else f"{t:.2g} s"


def _strategy(
    target: Target,
    ref_fn: Callable[[np.ndarray], np.ndarray],
    ref_eps: float,
    t_one: float,
    opts: Options,
    notes: list[str],
) -> tuple[float, bool]:
    """(seconds per evaluated point, full Jacobian or not); a note where ``"auto"``
    chose projections for the time a full check would take.

    A batch of evaluations is timed only where it decides the strategy (``"auto"``
    beyond ``policy.full_auto_inputs`` inputs); otherwise the time of the one
    evaluation at ``x0``, ``t_one``, an upper bound of a batched point's, serves the
    progress display.
    """
    n, p = target.n, opts.policy
    if opts.strategy != "auto":
        return t_one, opts.strategy == "full"
    if n <= p.full_auto_inputs:
        return t_one, True
    t_row = _time_per_row(ref_fn, target.x0)
    full_cost = n * 2 * _ladder(target, ref_eps, n, p)[2] * t_row * 1.5
    if full_cost > opts.budget:
        notes.append(
            f"strategy='auto' checks {opts.projections} random projections: the full "
            f"Jacobian of {n} inputs would take about {_seconds(full_cost)} at this run's "
            f"speed, beyond budget={opts.budget:g} s; the choice follows the machine's "
            "speed, so pass strategy='full' or strategy='projections' for reports that "
            "do not change with its load"
        )
    return t_row, full_cost <= opts.budget


def make_plan(target: Target, opts: Options, cache: CacheRequest | None = None) -> Plan:
    """Choose the reference's arithmetic, the strategy, mp or not, and the directions.

    With a ``cache`` request, a stored reference for this strategy is looked up
    (and the mp decision, which costs an mp evaluation, is taken from it).
    """
    notes: list[str] = []
    n, p = target.n, opts.policy
    ref_fn, ref_eps, method = _arithmetic(target, opts.reference, notes)
    at_x0: list[np.ndarray] = []
    t_one = probe_seconds(lambda: at_x0.append(ref_fn(target.x0[None, :])[0]))
    f0 = at_x0[0]
    # away from x, a point where f raises is a point where f is not finite
    raised: dict[str, Any] = {}
    ref_fn = raising_points_as_nan(ref_fn, target.m, raised)
    rng = np.random.default_rng(opts.seed)
    s = pow2_scales(target.x0)
    t_row, full = _strategy(target, ref_fn, ref_eps, t_one, opts, notes)
    accuracy, h_max, levels = _ladder(target, ref_eps, n if full else opts.projections, p)
    strict = _ladder(target, ref_eps, 0, p)[0]
    d = n if full else opts.projections
    small = d * n <= p.mp_auto_size  # "auto" considers mp only then: the graph is captured
    slot, hit = cache.lookup(full, notes) if cache is not None else (None, None)
    if hit is not None:
        method = hit.method
    elif _use_quad(target, opts, small, notes):
        method = "quad"
    elif _use_mp(target, opts, small, d, notes):
        method = "mp"
    noise_dir = (rademacher(rng, 1, n) * s[None, :])[0]
    W = None if full else RademacherDirections((opts.seed, 4), opts.projections, s)
    shared = _shared_noise_dirs(n, s, levels, opts, W)
    return Plan(ref_fn, ref_eps, method, f0, raised, s, accuracy, (h_max, levels), t_row, full,
                small, W, noise_dir, shared, rng.bit_generator.state, notes, hit,
                slot, strict if strict < accuracy else None)  # fmt: skip
