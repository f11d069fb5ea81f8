"""Explain stage: the notes and the ``details`` dict of a :class:`~polygrad.Report`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..backends.base import Target
from ..details import (
    Details,
    DetectionPower,
    NaiveCentralDifference,
    ReferenceInfo,
    Rules,
    TaylorSummary,
)
from ..policy import Policy
from ..reference import estimate_noise
from ..reference.curvature import derivative_coefficients, rounding_noise
from ..reference.steps import F64_EPS, RademacherDirections, ecnoise_step
from ..report import SEVERITY, Entries, Verdict
from ..your_terms import your_terms_result
from .assess import Assessment
from .plan import Plan, raising_points_as_nan
from .prepare import Options, Prepared
from .reference import Reference, raised_note

__all__ = ["edge_notes", "explain", "naive_roundoff"]


def edge_notes(entries: Entries, f0: np.ndarray) -> list[str]:
    """Notes on entries decided at the edges: NaN at a kink, an unbounded reference.

    Parameters
    ----------
    entries : Entries
        The judged entries (``(K,)`` arrays).
    f0 : ndarray, shape (m,)
        The function at the point, in the reference's arithmetic.

    Returns
    -------
    list of str
    """
    notes = []
    kink = entries.status == SEVERITY[Verdict.NONSMOOTH]
    nan_at_kink = kink & ~np.isfinite(entries.autodiff)
    if np.any(nan_at_kink):
        k = int(np.sum(nan_at_kink))
        notes.append(
            f"autodiff returned NaN/Inf at {k} entr{'y' if k == 1 else 'ies'} where f is not "
            "differentiable (left and right derivatives differ, or one is infinite): a kink, "
            "not a NaN trap at a smooth point; a NaN lies within no one-sided derivative, so "
            "nonsmooth='within' fails it"
        )
    unbounded = np.isfinite(entries.reference) & ~np.isfinite(entries.reference_error)
    unbounded &= entries.status == SEVERITY[Verdict.INCONCLUSIVE]
    if np.any(unbounded):
        k = int(np.sum(unbounded))
        size = float(np.max(np.abs(f0))) if f0.size else 0.0
        notes.append(
            f"{k} entr{'y is' if k == 1 else 'ies are'} INCONCLUSIVE with an unbounded reference "
            f"error bar: f (of size {size:.3g}) does not change measurably under steps scaled "
            "to those inputs (magnitudes too far from f's for differences to bound their "
            "derivatives); both sides are finite, so this is not NONFINITE"
        )
    return notes


LARGEST_NAIVE_STEP = 2.0**-2
"""The explanation's best step of a plain central difference is at most this (in units of
s), the largest step of the reference's ladder."""

NOISE_STEP_SHRINKS = (0, 4, 8)
"""The explanation's working-dtype noise is sampled at ECnoise's step divided by these
powers of two, and the least counts (see :func:`naive_roundoff`)."""


def naive_roundoff(
    target: Target, direction: np.ndarray, ref_fn: Callable[[np.ndarray], np.ndarray] | None
) -> NaiveCentralDifference | None:
    """Predict the error of a plain fixed-step central difference in the working dtype.

    The same estimators as :func:`polygrad.sweep` (one random direction): the
    working-dtype noise and, from float64 evaluations, the third derivative.
    """
    W = direction[None, :]
    try:
        # the noise does not depend on the sampling step, the differences of a smooth f
        # do: at a step near f's length scale (inputs near 1000 of a log-sum-exp, whose
        # length scale is 1) they read as noise, so the least over three steps counts
        sig = np.min(
            [rounding_noise(target.evaluate, target.x0, W, target.y0, target.eps,
                            ecnoise_step(target.eps) * 2.0**-k)[0]
             for k in NOISE_STEP_SHRINKS],
            axis=0,
        )  # fmt: skip
    except Exception:  # noqa: BLE001 - only an explanation; never fail the check on it
        return None
    i = int(np.argmax(sig))
    sigma = float(sig[i])
    out: dict[str, Any] = {
        "noise": sigma,
        "noise_ulps": sigma / max(target.eps * abs(target.y0[i]), 1e-300),
    }
    if ref_fn is not None:
        f0 = ref_fn(target.x0[None, :])[0]
        noise64 = estimate_noise(ref_fn, target.x0, W, f0, F64_EPS, ecnoise_step(F64_EPS))
        _, _, g3, g3_err = derivative_coefficients(
            ref_fn, target.x0, W, f0, noise64.sigma, F64_EPS, 4096
        )
        # a third derivative within its own error bar is no evidence of curvature
        third = float(abs(g3[0, i])) if abs(g3[0, i]) > g3_err[0, i] else 0.0
        out["third_derivative"] = third
        if third > 0 and sigma > 0:
            # the third derivative is measured at x: a step beyond the largest the
            # reference samples leaves the region it describes (a saturated loss is
            # nearly linear at x and bends a few units away), so the best step stops there
            h_opt = min((3 * sigma / third) ** (1 / 3), LARGEST_NAIVE_STEP)
            out["optimal_step"] = h_opt
            out["optimal_error"] = third * h_opt**2 / 6 + sigma / h_opt
    return NaiveCentralDifference(**out, example_step=2.0**-13, example_error=sigma / 2.0**-13)


def median_relative(value: np.ndarray, error: np.ndarray) -> float:
    """Median of error / (|value| + RMS of the values): relative error bars robust to zeros."""
    v = np.where(np.isfinite(value), value, 0.0)
    with np.errstate(all="ignore"):
        scale = np.abs(v) + np.sqrt(np.mean(v**2, axis=0, keepdims=True))
        rel = np.where(error == 0, 0.0, error / scale)  # an exact 0 bar on a 0 value is 0
    rel = rel[np.isfinite(rel)]
    return float(np.median(rel)) if rel.size else float("nan")


def detection_power(
    entries: Entries, k: int, W: np.ndarray | RademacherDirections | None, s: np.ndarray
) -> DetectionPower:
    """What size of gradient error the projections would have caught."""
    tol = np.where(np.isfinite(entries.tolerance64), entries.tolerance64, entries.tolerance)
    tau = float(np.nanmin(tol)) if tol.size else float("nan")
    # one wrong entry j shifts every projection by |delta_j| s_j / 2 at least (its
    # entries are s_j / 2, s_j or 2 s_j)
    single = 2.0 * tau / s
    # an error spread over many entries: delta·w is about N(0, |delta ⊙ s|²); all k
    # projections miss with probability (sqrt(2/pi) tau / |delta ⊙ s|)^k
    spread = float(np.sqrt(2 / np.pi) * tau / 0.01 ** (1.0 / k))
    return DetectionPower(
        count=k,
        threshold=tau,
        single_entry_error_caught=float(np.median(single)),
        spread_error_norm_caught_99=spread,
    )


def _noise_measured_along(plan: Plan, info: dict[str, Any], p: Policy) -> str:
    """Where the noise of the finite-difference reference was measured, in words."""
    if plan.shared_noise_dirs is not None:
        return (
            f"{plan.shared_noise_dirs.shape[0]} sampled directions "
            f"({p.shared_noise_margin:g} x the smallest, at most the largest, used for all)"
        )
    probes = info.get("noise_probes", 0)
    if not probes:
        return "each direction"
    again = info.get("noise_remeasured", 0)
    return (
        f"{probes} random sign directions ({p.shared_noise_margin:g} x the largest, used "
        f"for all; {again} direction{'s' if again != 1 else ''} measured again on "
        "their own)"
    )


def _reference_details(plan: Plan, ref: Reference, dd: Any, opts: Options) -> ReferenceInfo:
    p, info = opts.policy, ref.noise
    size = max(np.max(np.abs(plan.f0)), 1e-300)
    return ReferenceInfo(
        method=ref.method,
        dps=int(info.get("mp_digits", opts.dps)) if ref.method == "mp" else None,
        noise=float(np.median(dd.central.noise)),
        noise_max=float(np.max(dd.central.noise)),
        noise_detected_fraction=info["detected"] / max(info["total"], 1),
        noise_measured_along=_noise_measured_along(plan, info, p),
        target_accuracy=plan.accuracy,
        noise_relative=float(np.median(np.max(dd.central.noise, axis=1) / size)),
        median_step=float(np.median(dd.central.step)),
        median_scale=float(np.median(plan.s)),  # steps are relative to these powers of two
        f_abs=float(np.max(np.abs(plan.f0))),
        median_relative_error=median_relative(dd.central.value, dd.central.error),
        evaluations=int(dd.central.evaluations + info["evaluations"]),
        seconds=ref.seconds,
        cached=ref.cached,
    )


def _resolution_note(target: Target, method: str, small: bool, resolution: float) -> str:
    """Why a float64 rule can be wrong by less than a difference quotient resolves."""
    why = target.mp_unavailable_reason or "the function cannot run on mpmath numbers"
    if not small and "mp" in target.deferred:  # not worth capturing to say so
        hint = "reference='mp' (if the function runs on mpmath numbers) resolves far smaller ones"
    elif target.mp_mode():
        hint = "reference='mp' resolves far smaller ones"
    else:
        hint = f"an mp reference would resolve far smaller ones, but it is unavailable ({why})"
    return (
        f"the reference is {method} central differences: this check cannot resolve "
        f"gradient errors below about {resolution:.1g} relative; " + hint
    )


def _summary(
    prep: Prepared, plan: Plan, ref: Reference, a: Assessment, opts: Options, notes: list[str]
) -> Details:
    t, modes = prep.target, prep.modes
    has64 = (t.vjp64 is not None) if "rev" in modes else (t.jvp64 is not None)
    return Details(
        notes=tuple(notes),
        escalation=a.escalation,
        hidden_cancellation=a.hidden,
        nonsmooth=opts.nonsmooth,  # the option, for the report's explanation of NONSMOOTH
        backend=t.backend,
        working_dtype=t.working_dtype,
        eps=t.eps,
        inputs=t.n,
        outputs=t.m,
        input_names=tuple(leaf.name for leaf in t.input_layout.leaves),
        modes=tuple(modes),
        strategy="full" if plan.full else "projections",
        reference=_reference_details(plan, ref, ref.dd, opts),
        rules=Rules(
            tolerance=f"2 x reference error bar + {opts.policy.c_ad:g} x eps x scale",
            has_float64_autodiff=bool(has64),
        ),
    )


def _taylor(
    target: Target, mode: str, seed: int, subspace: dict[str, Any] | None = None
) -> TaylorSummary | None:
    try:  # supporting evidence only: never fails a check
        from .. import taylor

        direction = None
        if subspace is not None:  # checked on the symmetric subspace: a direction within it
            from .subspace import symmetric_direction

            direction = symmetric_direction(target, subspace["arguments"], seed)
        result = taylor.taylor_target(target, mode=mode, direction=direction, seed=seed)
        return TaylorSummary.from_dict(result.to_dict())
    except Exception:  # noqa: BLE001
        return None


def explain(
    prep: Prepared,
    plan: Plan,
    ref: Reference,
    a: Assessment,
    verdict: Verdict,
    ok: bool,
    opts: Options,
) -> Details:
    """The report's ``details``: notes, the reference, the rules, supporting evidence
    (``ok``: whether the check passes, which defers the evidence)."""
    t = prep.target
    notes = prep.notes + plan.notes + ref.notes + list(a.notes) + edge_notes(a.entries, plan.f0)
    details = _summary(prep, plan, ref, a, opts, notes)
    details = replace(details, convention=a.convention, subspace=a.subspace)
    if not plan.full and a.subspace is None:
        details = replace(
            details, projections=detection_power(a.entries, opts.projections, plan.W, plan.s)
        )
    strong = ref.method in ("mp", "quad")  # error bars far below float64's resolution
    resolution = opts.policy.tolerance_factor * details.reference.median_relative_error
    # (no relative resolution where every reference value is 0: floor's, a constant's)
    if (
        not strong
        and t.working_dtype == "float64"
        and verdict == Verdict.PASS
        and np.isfinite(resolution)
    ):
        details = replace(details, reference=replace(details.reference, resolution=resolution))
        notes.append(_resolution_note(t, ref.method, plan.small, resolution))
    if plan.raised:
        notes.append(raised_note(plan.raised))
    details = replace(details, notes=tuple(dict.fromkeys(notes + list(t.notes))))
    return _supporting_evidence(details, prep, plan, a.entries, ok, opts)


def _supporting_evidence(
    details: Details,
    prep: Prepared,
    plan: Plan,
    entries: Entries,
    ok: bool,
    opts: Options,
) -> Details:
    """``details`` with the naive central difference's predicted error (working dtypes
    narrower than float64) and the Taylor-remainder test.

    Neither decides a verdict. For a check that passes (``ok``: a PASS, or kinks
    within tolerance) they are computed when first read (printed, serialised,
    indexed); for one that fails, now, while the function is as it was checked.
    """
    t = prep.target
    naive: Callable[[], NaiveCentralDifference | None] | None = None
    if t.working_dtype != "float64":

        def naive() -> NaiveCentralDifference | None:
            g64 = None if t.evaluate64 is None else raising_points_as_nan(t.evaluate64, t.m, {})
            return naive_roundoff(t, plan.noise_dir, g64)

    sub = details.subspace
    details = details.with_evidence(naive, lambda: _taylor(t, prep.modes[0], opts.seed, sub))
    if opts.tool is not None:  # asked for: computed now
        terms = your_terms_result(t, opts.tool, opts.tool_step, entries, plan.full, opts.seed)
        details = replace(details, your_terms=terms)
    if not ok:
        details.force()
    return details
