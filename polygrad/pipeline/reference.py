"""Reference stage: derivatives along every direction, with fallback and mp escalation."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._timing import probe_seconds
from ..backends.base import Target, describe_exception
from ..progress import progress
from ..reference import directional_derivatives, estimate_noise, mp_directional_derivatives
from ..reference.differences import DirectionalDerivatives, UnseenNoise
from ..reference.differences import merge_rows as merge_directions
from ..reference.mp import expected_mp_evaluations, mp_seconds_at_least
from ..reference.noise import (
    NOISE_DETECTED,
    NOISE_NOT_DETECTED,
    NoiseEstimate,
    jittered_noise,
    output_resolution,
    tread_noise,
)
from ..reference.quad import quad_directional_derivatives
from ..reference.richardson import Estimate
from ..reference.staircase import COARSE_ULPS, covering_both_readings
from ..reference.steps import F64_EPS, ecnoise_step, ladder, rademacher
from ..report import SEVERITY, Entries, Verdict
from .judge import DOUBT
from .plan import Plan, coordinate_directions, raising_points_as_nan
from .prepare import Options

__all__ = [
    "Reference",
    "along",
    "compute_reference",
    "directions_in_doubt",
    "escalate",
    "name_deciders",
    "raised_note",
]


@dataclass(frozen=True)
class Reference:
    """The reference derivatives and how they were obtained.

    Attributes
    ----------
    dd : DirectionalDerivatives
        Central, left and right estimates along every direction, ``(d, m)``.
    method : {"quad", "mp", "float64", "working"}
        The source actually used (quad or mp falls back to differences when it fails).
    vouched : float
        Relative accuracy the reference vouches for (0 for quad and mp: their error
        bars).
    noise : dict
        ``evaluations``, ``detected`` and ``total`` of the noise estimates.
    seconds : float
        Time the reference took.
    notes : list of str
    cached : bool
        Read from the reference cache (see :mod:`polygrad.refcache`).
    """

    dd: DirectionalDerivatives
    method: str
    vouched: float
    noise: dict[str, int]
    seconds: float
    notes: list[str]
    cached: bool = False


def raised_note(raised: dict[str, Any]) -> str:
    """The note on points near x where the function raised (see ``Plan.raised``)."""
    return (
        f"the function raised {describe_exception(raised['first'])} at {raised['count']} "
        "of the points near x that the reference needed; they count as points where it "
        "is not finite"
    )


def _count(noise_info: dict[str, Any], noise: Any) -> None:
    noise_info["evaluations"] += noise.evaluations
    noise_info["detected"] += int(np.sum(noise.inform == 1))
    noise_info["total"] += int(noise.inform.size)


def _shared_noise(
    fn: Callable[..., Any], target: Target, plan: Plan, opts: Options, info: dict[str, Any]
) -> np.ndarray:
    """Per output, the noise measured along the sampled directions, for every direction.

    ECnoise reads a kink as noise, and inputs at ties (a flat image background)
    can be most of the sample; so the smallest noise detected, times
    ``policy.shared_noise_margin``, serves all (directions along which ``f`` is
    constant to the last bit, code 2, say nothing). The margin covers the scatter
    of the estimates, and never goes beyond the largest noise detected: where every
    sampled direction measures the same noise (the rounding grid of a large sum,
    the same along every coordinate), that noise serves all, and the directions
    that a tenfold noise would send to the long ladder stay on the short one.
    """
    eps, res = plan.ref_eps, info["_resolution"]
    assert plan.shared_noise_dirs is not None
    dirs = np.asarray(plan.shared_noise_dirs)
    noise = estimate_noise(fn, target.x0, dirs, plan.f0, eps,
                           ecnoise_step(eps), resolution=res)  # fmt: skip
    _count(info, noise)
    seen = noise.inform == 1
    low = np.min(np.where(seen, noise.sigma, np.inf), axis=0)
    high = np.max(np.where(seen, noise.sigma, -np.inf), axis=0)
    low = np.where(np.isfinite(low), low, noise.sigma.min(axis=0))
    high = np.where(np.isfinite(high), np.maximum(high, low), np.inf)
    return np.minimum(opts.policy.shared_noise_margin * low, high)


PROBED_ROUNDOFF_ULPS = 16.0
"""Probed noise serves every direction only up to this many times the rounding of ``f``
at ``x`` (its ``eps |f|``, or its value grid where cancelling terms set it)."""


def _probed_noise(
    fn: Callable[..., Any], target: Target, plan: Plan, opts: Options, info: dict[str, Any]
) -> np.ndarray | None:
    """Per output, the noise that serves every direction of a small full check whose
    reference aims far above float64's round-off (``policy.probe_noise_directions``):
    the largest measured along a few random sign directions, times
    ``policy.shared_noise_margin``. None where the check does not qualify, where a
    probe detects no clean noise (a kink or a flat output along it), or where the noise
    is beyond :data:`PROBED_ROUNDOFF_ULPS` roundings of ``f``'s value (cancelling terms:
    a coordinate that enters through them has far more noise than the others, which the
    probe's noise would send to long steps): then each direction's own is measured."""
    p = opts.policy
    k = p.probe_noise_directions
    qualifies = plan.full and opts.executor is None and plan.accuracy >= p.probe_noise_accuracy
    if not qualifies or k <= 0 or plan.d <= 2 * k:
        return None
    signs = rademacher(np.random.default_rng([opts.seed, 3]), k, target.n)
    noise = estimate_noise(fn, target.x0, signs * plan.s[None, :], plan.f0, plan.ref_eps,
                           ecnoise_step(plan.ref_eps), resolution=info["_resolution"])  # fmt: skip
    _count(info, noise)
    ordinary = noise.sigma <= PROBED_ROUNDOFF_ULPS * noise.floor[None, :]
    if not np.all((noise.inform == NOISE_DETECTED) & ordinary):
        return None
    info["noise_probes"] = k
    return p.shared_noise_margin * np.max(noise.sigma, axis=0)


def _own_noise_where_missed(
    dd: DirectionalDerivatives, fn: Callable[..., Any], target: Target, plan: Plan,
    method: str, opts: Options, info: dict[str, Any],
) -> DirectionalDerivatives:  # fmt: skip
    """``dd`` (estimated with probed noise) with the directions whose error bar misses
    the aim estimated again, each with its own noise measured: the probe's margin, or a
    kink it read as noise, must not cost an entry its verdict."""
    idx = _missed(dd, plan.s, plan.accuracy)
    if idx.size == 0:
        return dd
    W = coordinate_directions(plan.s, idx)
    info["noise_remeasured"] = int(idx.size)
    own = _differences(fn, target, W, plan, method, opts, info, None)
    return merge_directions(dd, own, idx)


def borrow_unseen_noise(
    sigma: np.ndarray, inform: np.ndarray, floor: np.ndarray, share: float = 0.25
) -> np.ndarray:
    """``(d, m)`` noise, where a direction saw none, raised to the least seen elsewhere.

    A direction can miss the rounding noise (its samples change ``f`` by a
    near-whole number of ulps and the noise it reports is at the floor
    ``eps |f|``). Such a direction gets, per output, the smallest noise detected
    above the floor along the others, provided at least a ``share`` of the
    directions (and two) detected some: ECnoise also reads a kink at ``x`` as
    noise, and a single kinked coordinate must not lend its kink to the smooth
    ones. A direction along which ``f`` did not change at all over the samples
    (code 2) gets it too: its samples can all fall on one tread of the staircase that
    ``f``'s rounding makes (``log(erf(P))`` with ``erf(P)`` 1.5e-8 below 1, rounded at
    ulp(1) about every 0.01 of an input that barely moves ``P``), and the reference's
    longer steps cross treads; where ``f`` truly does not depend on the input, its
    difference quotients are 0 at every step, and a wider error bar changes nothing.
    """
    seen = (inform == 1) & (sigma > floor[None, :])
    drift = ((inform == 1) & ~seen) | (inform == 2)
    drift &= np.sum(seen, axis=0)[None, :] >= max(2, share * sigma.shape[0])
    with np.errstate(invalid="ignore"):
        least = np.min(np.where(seen, sigma, np.inf), axis=0)
    least = np.where(np.isfinite(least), least, 0.0)
    return np.where(drift, np.maximum(sigma, least[None, :]), sigma)


def _differences(
    fn: Callable[..., Any], target: Target, W: np.ndarray, plan: Plan, method: str,
    opts: Options, info: dict[str, Any], shared: np.ndarray | None,
) -> DirectionalDerivatives:  # fmt: skip
    """Finite-difference reference along the rows of ``W`` (noise measured first)."""
    eps, res, p = plan.ref_eps, info["_resolution"], opts.policy
    unseen = None
    if shared is not None:
        sigma = np.broadcast_to(shared, (W.shape[0], plan.f0.size))
    else:
        noise = estimate_noise(fn, target.x0, W, plan.f0, eps, ecnoise_step(eps), resolution=res)
        _count(info, noise)
        sigma = borrow_unseen_noise(noise.sigma, noise.inform, noise.floor, p.borrow_share)
        unseen = _unseen(fn, target.x0, noise, res, eps)
    h_max, levels = plan.ladder
    dd = directional_derivatives(
        fn, target.x0, W, plan.f0, sigma, eps, method,
        h_max, levels, max_rows=opts.batch_size, target_relative_error=plan.accuracy,
        # a short ladder starts with a pair of its steps; a long one is evaluated whole
        first_levels=p.first_levels if levels <= 4 else 0, resolution=target.eps,
        first_start=p.first_start, unseen=unseen,
        verify=functools.partial(jittered_noise, fn, target.x0, eps=eps, step=ecnoise_step(eps)),
    )  # fmt: skip
    dd, ambiguous = covering_both_readings(dd, res, plan.f0, eps)
    info["staircase"] = info.get("staircase", 0) + ambiguous
    return dd


def _unseen(
    fn: Callable[..., Any], x0: np.ndarray, noise: NoiseEstimate, resolution: np.ndarray,
    eps: float,
) -> UnseenNoise | None:  # fmt: skip
    """The outputs along which ECnoise saw ``f`` constant (code 2) and whose values are
    no exact staircase (a grid, :func:`~polygrad.reference.noise.output_resolution`), with
    the measurement of their noise should the ladder see them move."""
    mask = (noise.inform == NOISE_NOT_DETECTED) & (np.asarray(resolution) > 0)
    if not np.any(mask):
        return None
    return UnseenNoise(mask, functools.partial(tread_noise, fn, x0, eps=eps))


def _concat(parts: list[DirectionalDerivatives]) -> DirectionalDerivatives:
    if len(parts) == 1:
        return parts[0]

    def cat(name: str) -> Estimate:
        es = [getattr(p, name) for p in parts]
        return Estimate(
            value=np.concatenate([e.value for e in es]),
            error=np.concatenate([e.error for e in es]),
            step=np.concatenate([e.step for e in es]),
            noise=np.concatenate([e.noise for e in es]),
            method=es[0].method,
            evaluations=sum(e.evaluations for e in es),
        )

    return DirectionalDerivatives(
        cat("central"), cat("right"), cat("left"),
        np.concatenate([p.jump_right for p in parts]),
        np.concatenate([p.jump_left for p in parts]),
    )  # fmt: skip


def along(
    method: str, fn: Callable[..., Any], target: Target, W: np.ndarray, plan: Plan,
    opts: Options, info: dict[str, Any], shared: np.ndarray | None,
) -> DirectionalDerivatives:  # fmt: skip
    """The reference along the rows of ``W`` (``(k, n)``) by ``method``."""
    if method == "quad":
        return _quad_along(fn, target, W, plan, opts, info)
    if method == "mp":
        assert target.evaluate_mp is not None
        levels = opts.policy.mp_levels
        dd = mp_directional_derivatives(
            target.evaluate_mp, target.x0, W, dps=opts.dps, levels=levels
        )
        return _digits_noted(dd, info)
    return _differences(fn, target, W, plan, method, opts, info, shared)


def _digits_noted(dd: DirectionalDerivatives, info: dict[str, Any]) -> DirectionalDerivatives:
    """``dd``, its mp digits kept in ``info["mp_digits"]`` (the most of any part), which
    the report states."""
    if dd.digits is not None:
        info["mp_digits"] = max(int(info.get("mp_digits", 0)), dd.digits)
    return dd


STRONG = ("mp", "quad")
"""References whose error bars come from high-precision arithmetic: no noise model, no
resolution read, nothing to tighten; they vouch for their error bars only."""


def _quad_along(
    fn: Callable[..., Any], target: Target, W: np.ndarray, plan: Plan, opts: Options,
    info: dict[str, Any],
) -> DirectionalDerivatives:  # fmt: skip
    """The quad reference along the rows of ``W``; the directions it does not settle
    (a kink, a jump, a short length scale) go to mp, or to float64 differences where
    the function does not run on mpmath numbers."""
    assert target.evaluate_quad is not None

    def rest(Wr: np.ndarray) -> DirectionalDerivatives:
        info["quad_unsettled"] = info.get("quad_unsettled", 0) + Wr.shape[0]
        if target.mp_mode():
            assert target.evaluate_mp is not None
            dd = mp_directional_derivatives(target.evaluate_mp, target.x0, Wr, dps=opts.dps,
                                            levels=opts.policy.mp_levels)  # fmt: skip
            return _digits_noted(dd, info)
        if "_resolution" not in info:
            _read_resolution(fn, target, plan, opts, info)
        method64 = "float64" if target.evaluate64 is not None else "working"
        return _differences(fn, target, Wr, plan, method64, opts, info, None)

    return quad_directional_derivatives(target.evaluate_quad, target.x0, W, rest)


def _directional(
    method: str, fn: Callable[..., Any], target: Target, plan: Plan, opts: Options,
    info: dict[str, Any], prep: Any = None,
) -> DirectionalDerivatives:  # fmt: skip
    """The reference along every direction of ``plan`` by ``method`` (on
    ``opts.executor`` in shards when one is given)."""
    shared, probed = None, False
    if method not in STRONG and plan.shared_noise_dirs is not None:
        shared = _shared_noise(fn, target, plan, opts, info)
    elif method not in STRONG:
        shared = _probed_noise(fn, target, plan, opts, info)
        probed = shared is not None
    if opts.executor is not None:
        from ..sharding import shard_spec, sharded_reference

        spec = shard_spec(prep, opts) if prep is not None else None
        return sharded_reference(opts.executor, spec, target, fn, method, plan, opts, info,
                                 shared, along, raising_points_as_nan)  # fmt: skip
    dd = _concat([along(method, fn, target, W, plan, opts, info, shared)
                  for W in plan.chunks()])  # fmt: skip
    if probed:
        dd = _own_noise_where_missed(dd, fn, target, plan, method, opts, info)
    return _tighten(dd, method, fn, target, plan, opts, info) if method not in STRONG else dd


def _missed(dd: DirectionalDerivatives, s: np.ndarray, accuracy: float) -> np.ndarray:
    """Indices of the coordinate directions whose error bar exceeds ``accuracy``
    relative to the entry plus the RMS of its output's entries (the scale of the
    verdict rule, see :func:`polygrad.pipeline.autodiff.jacobian_scale`)."""
    with np.errstate(all="ignore"):
        v = np.abs(dd.central.value) / s[:, None]
        err = dd.central.error / s[:, None]
        rms = np.sqrt(np.nanmean(np.where(np.isfinite(v), v, np.nan) ** 2, axis=0))
        miss = err > accuracy * (np.nan_to_num(v) + np.nan_to_num(rms)[None, :])
    return np.flatnonzero(np.any(miss, axis=1))


def _tighten(
    dd: DirectionalDerivatives, method: str, fn: Callable[..., Any], target: Target,
    plan: Plan, opts: Options, info: dict[str, Any],
) -> DirectionalDerivatives:  # fmt: skip
    """A large full check's reference (aimed at a loose accuracy, see
    ``Plan.strict_accuracy``) with the directions that missed that aim estimated again
    by the long ladder, the noise measured along each: precision paid only there."""
    if not plan.full or plan.strict_accuracy is None:
        return dd
    # half the widest error bar that still decides (``2 e <= sqrt(eps) scale``), or
    # ten times the aim, whichever is less
    p = opts.policy
    bound = min(10.0 * plan.accuracy, np.sqrt(target.eps) / (2.0 * p.tolerance_factor))
    idx = _missed(dd, plan.s, bound)
    if idx.size == 0:
        return dd
    W = coordinate_directions(plan.s, idx)
    acc = plan.strict_accuracy
    strict = replace(plan, accuracy=acc,
                     ladder=ladder(plan.ref_eps, acc, p.condition_allowance))  # fmt: skip
    info["tightened"] = int(idx.size)
    return merge_directions(dd, _differences(fn, target, W, strict, method, opts, info,
                                             None), idx)  # fmt: skip


def _read_resolution(
    fn: Callable[..., Any], target: Target, plan: Plan, opts: Options, info: dict[str, Any]
) -> None:
    """``info["_resolution"]``: the grid of f's values, which the noise model of finite
    differences needs (a small result of cancelling terms rounds at their size); an mp
    reference has no noise model and does without it."""
    info["_resolution"], info["evaluations"] = output_resolution(
        fn, target.x0, plan.f0, plan.s, ecnoise_step(plan.ref_eps),
        np.random.default_rng([opts.seed, 2]),
    )  # fmt: skip


def _next_in_line(
    failed: str, exc: Exception, fn: Callable[..., Any], target: Target, plan: Plan,
    opts: Options, info: dict[str, Any], prep: Any, notes: list[str],
) -> tuple[DirectionalDerivatives, str]:  # fmt: skip
    """The reference after ``failed`` (quad or mp) raised ``exc``: mp after quad where
    the function runs on mpmath numbers, then float64 differences (the working dtype's
    where there is no float64 evaluation); a note says which and why."""
    last = "float64" if target.evaluate64 is not None else "working"
    chain = (["mp"] if failed == "quad" and target.mp_mode() else []) + [last]
    for method in chain:
        used = "mp" if method == "mp" else f"{method} differences"
        notes.append(f"the {failed} reference failed ({type(exc).__name__}: {exc}); {used} used")
        if method not in STRONG and "_resolution" not in info:
            _read_resolution(fn, target, plan, opts, info)
        try:
            return _directional(method, fn, target, plan, opts, info, prep), method
        except Exception as again:  # noqa: BLE001 - mp failed too: differences next
            if method not in STRONG:
                raise
            failed, exc = method, again
    raise AssertionError("unreachable: the chain ends in differences")  # pragma: no cover


def compute_reference(target: Target, plan: Plan, opts: Options, prep: Any = None) -> Reference:
    """The reference along every direction of ``plan``; mp falls back to differences.

    A reference read from the cache (``plan.cached``) is returned as stored.
    """
    if plan.cached is not None:
        hit = plan.cached
        vouched = 0.0 if hit.method in STRONG else plan.accuracy
        return Reference(hit.dd, hit.method, vouched, dict(hit.noise_info), 0.0,
                         list(hit.notes), cached=True)  # fmt: skip
    t0, notes = time.perf_counter(), list[str]()
    info: dict[str, Any] = {"evaluations": 0, "detected": 0, "total": 0}
    rows = plan.d * (2 * plan.ladder[1] + (9 if plan.shared_noise_dirs is None else 0))
    show = rows * plan.t_row > opts.policy.progress_after_seconds
    with progress(rows, "polygrad check", enabled=show) as bar:

        def counted(X: np.ndarray) -> np.ndarray:
            out = plan.ref_fn(X)
            bar.update(X.shape[0])
            return out

        method = plan.method
        if method not in STRONG or opts.executor is not None:
            _read_resolution(counted, target, plan, opts, info)
        try:
            dd = _directional(method, counted, target, plan, opts, info, prep)
        except Exception as exc:  # noqa: BLE001 - any failure of quad or mp: the next in line
            if method not in STRONG:
                raise
            dd, method = _next_in_line(method, exc, counted, target, plan, opts, info, prep, notes)
    info.pop("_resolution", None)
    if method == "quad" and info.get("quad_unsettled", 0) >= plan.d and target.mp_mode():
        method = "mp"  # quad settled no direction: every estimate is mp's, and so is its name
    if info.get("quad_unsettled"):
        why = None if target.mp_mode() else target.mp_unavailable_reason
        notes.append(_quad_note(info["quad_unsettled"], plan.d, why))
    if info.get("staircase"):
        notes.append(_staircase_note(info["staircase"], plan.ref_eps))
    # finite differences vouch for the accuracy they were aimed at; mp for its error bars
    vouched = 0.0 if method in STRONG else plan.accuracy
    ref = Reference(dd, method, vouched, info, time.perf_counter() - t0, notes)
    if plan.cache_slot is not None:  # a hit has no raised points of its own: store the note
        stored = notes + ([raised_note(plan.raised)] if plan.raised else [])
        plan.cache_slot.store(ref.dd, ref.method, ref.noise, stored, ref.seconds)
    return ref


def _staircase_note(directions: int, eps: float) -> str:
    """Why the error bars along ``directions`` directions cover 0 and the slope read."""
    arithmetic = "float64" if eps <= F64_EPS else "working-dtype"
    return (
        f"along {directions} direction(s) f's {arithmetic} values are a staircase: rounded "
        f"to a grid of at least {COARSE_ULPS:.0f} ulps of the values near x, constant on "
        f"treads at least {COARSE_ULPS:.0f} ulps of the input wide; a step function (floor, a "
        "quantizer: derivative 0) and a smooth function rounded that coarsely give the same "
        "values there, so those estimates have no error bar (float64 bounds neither the "
        "staircase's slope nor 0), and only a reference of more digits (mp) decides them"
    )


def _quad_note(unsettled: int, d: int, mp_missing: str | None) -> str:
    """What the quad reference left to another arithmetic (``mp_missing``: why not mp)."""
    other = "mp" if mp_missing is None else f"float64 differences (no mp: {mp_missing})"
    return (
        f"quad-precision differences did not settle {unsettled} of {d} direction(s) (a "
        f"kink, a jump or a length scale near x shorter than their steps reach); {other} "
        "estimated those"
    )


def directions_in_doubt(blocks: list[Entries], d: int, kinks: bool = False) -> list[int]:
    """The directions (of ``d``) along which some entry is MISMATCH, UNSTABLE or
    INCONCLUSIVE (with ``kinks``, NONSMOOTH too), in increasing order."""
    codes = [SEVERITY[v] for v in DOUBT] + ([SEVERITY[Verdict.NONSMOOTH]] if kinks else [])
    return sorted({int(i) // (b.status.size // d) for b in blocks
                   for i in np.flatnonzero(np.isin(b.status, codes))})  # fmt: skip


def escalate(
    target: Target, dd: DirectionalDerivatives, blocks: list[Entries],
    directions: tuple[int, Callable[[np.ndarray], np.ndarray]], opts: Options,
    details: dict[str, Any], kinks: bool = False, only: list[int] | None = None,
) -> DirectionalDerivatives | None:  # fmt: skip
    """``dd`` with the directions of the entries in doubt re-estimated by mp, or None.

    ``directions`` is ``(d, rows)``: the number of directions and a function that
    returns the rows ``(k, n)`` of the given indices (a full check's ``(n, n)``
    diagonal is never built). Only the directions that hold a MISMATCH, UNSTABLE
    or INCONCLUSIVE entry are re-estimated, so a passing check costs nothing
    more; None when there are none, when the function does not run on mpmath
    numbers, or when mp along them would take more than
    ``policy.mp_auto_seconds`` (a note says so). ``details["escalation"]``
    records what was done; notes go to ``details["notes"]``. With ``kinks``
    (``f`` itself lost digits to hidden cancellation, so that its float64 values
    can form a staircase whose one-sided differences look like a kink), the
    directions of NONSMOOTH entries are re-estimated too. ``only``: re-estimate these
    directions instead (a stage of :func:`polygrad.pipeline.assess.assess`).
    """
    d, rows = directions
    dirs = directions_in_doubt(blocks, d, kinks) if only is None else only
    if not dirs:
        return None
    p = opts.policy
    at_least = mp_seconds_at_least(target.n, expected_mp_evaluations(len(dirs)))
    if at_least > p.mp_auto_seconds:  # a wide input: not even one evaluation is timed
        details["notes"].append(_mp_skipped_note(at_least, len(dirs), "at least "))
        return None
    try:
        if not target.mp_mode():
            return None
        assert target.evaluate_mp is not None
        evaluate_mp = target.evaluate_mp
        at_x0: list[Any] = []  # f at the point on mpmath numbers, kept for the judge
        once = probe_seconds(
            lambda: at_x0.append(evaluate_mp(target.x0, np.zeros_like(target.x0), opts.dps))
        )
        details["f0_mp"] = at_x0[0]  # read by the assessment (hidden cancellation)
        seconds = once * expected_mp_evaluations(len(dirs))
        if seconds > p.mp_auto_seconds:
            details["notes"].append(_mp_skipped_note(seconds, len(dirs)))
            return None
        sub = mp_directional_derivatives(target.evaluate_mp, target.x0, rows(np.asarray(dirs)),
                                         dps=opts.dps, levels=p.mp_levels)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the escalation is optional: keep the verdicts
        details["notes"].append(
            f"entries in doubt could not be re-examined with mp ({describe_exception(exc)})"
        )
        return None
    details["escalation"] = {"reference": "mp", "dps": opts.dps, "directions": dirs,
                             "d": d}  # fmt: skip
    return merge_directions(dd, sub, np.asarray(dirs))


def _mp_skipped_note(seconds: float, directions: int, bound: str = "") -> str:
    return (
        f"entries in doubt were not re-examined with mp: it would take {bound}about "
        f"{seconds:.0f} s along their {directions} direction(s), beyond "
        "policy.mp_auto_seconds (pass reference='mp')"
    )


def name_deciders(
    blocks: list[Entries], details: dict[str, Any], method: str, modes: list[str] | None = None
) -> None:
    """Record, and say in a note, which reference decided each entry still in doubt.

    After :func:`escalate`: an entry along a re-examined direction was decided
    by mp, any other by ``method`` (the first reference's arithmetic). With
    several ``modes`` (one block each), names carry the block's VJP/JVP tag, as
    in the report's entries.
    """
    esc = details["escalation"]
    redone = set(esc["directions"])
    codes = [SEVERITY[v] for v in DOUBT]
    by: dict[str, list[str]] = {"mp": [], method: []}
    tags = [""] * len(blocks)
    if modes is not None and len(blocks) > 1:
        tags = ["VJP " if md == "rev" else "JVP " for md in modes]
    for b, tag in zip(blocks, tags, strict=True):
        per = b.status.size // esc["d"]  # entries per direction
        for i in np.flatnonzero(np.isin(b.status, codes)):
            by["mp" if int(i) // per in redone else method].append(tag + b.names[i])
    esc["decided_by"] = by
    deferred = int(esc.get("deferred") or 0)
    why = ""
    if deferred:
        why = (
            f" (those of the worst entries first: mp confirmed a MISMATCH there, which "
            f"decides the check, so the other {deferred} direction(s) in doubt were not "
            f"re-examined and their entries rest on the {method} reference; pass "
            "reference='mp' to have every entry decided by mp)"
        )
    elif not by[method]:
        why = " (no entry fails on finite differences alone)"
    text = (
        f"entries that did not pass on the {method} reference were re-examined with mp at "
        f"{esc['dps']} digits along {len(redone)} direction(s){why}"
    )
    for who, names in by.items():
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            text += f"; not passing after it, decided by {who}: {shown}"
    details["notes"].append(text)
