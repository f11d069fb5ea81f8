"""Autodiff stage: the user's VJPs/JVPs beside the reference, ready for the verdict rule.

:func:`gather` evaluates one mode's autodiff quantities (full Jacobian rows or
random projections ``uᵀJw``), brings the reference to the same quantities and
units, and sets each entry's scale: a :class:`~polygrad.pipeline.judge.JudgeInput`.
:func:`autodiff_roundoff` measures the round-off of the autodiff values by
evaluating them again at inputs moved by a few ulps (see :mod:`polygrad.dither`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.base import Backend, Supplied, Target, describe_exception, numpy_dtype
from ..backends.mpmath import mp_to_float
from ..dither import GROWTH, MOVED_DTYPES, dithered_args, move_sizes, spread
from ..policy import DEFAULT_POLICY, Policy
from ..reference.differences import DirectionalDerivatives
from ..reference.steps import F64_EPS, RademacherDirections, pow2_scales
from ..report import SEVERITY, Entries, Verdict
from .judge import NOTHING_EXPECTED, Expected, JudgeInput
from .plan import RULE_RESOLUTION

__all__ = [
    "Setting",
    "autodiff_roundoff",
    "digits_lost",
    "f_accuracy",
    "function_scale",
    "gather",
    "jacobian_scale",
    "kinks_at_the_point",
]


@dataclass(frozen=True)
class Setting:
    """What every target is judged against: one reference and its directions.

    Attributes
    ----------
    dd : DirectionalDerivatives
        The reference along every direction, ``(d, m)`` arrays.
    full : bool
        The directions are the scaled coordinate directions (full Jacobian).
    s : ndarray, shape (n,)
        Direction scales (powers of two).
    W : RademacherDirections or ndarray, shape (d, n), or None
        The projection directions (None for a full check); rows are generated as they
        are needed.
    rng_state : dict
        Random state the cotangents of every mode are drawn from.
    ref_eps : float
        Machine epsilon of the reference's arithmetic.
    vouched : float
        Relative accuracy the reference vouches for (0 for mp).
    f0 : ndarray, shape (m,), or None
        ``f`` at the point in the reference's arithmetic (float64 where it has one).
    f0_mp : ndarray, shape (m,), or None
        ``f`` at the point on mpmath numbers, rounded to float64, where computed.
    """

    dd: DirectionalDerivatives
    full: bool
    s: np.ndarray
    W: RademacherDirections | np.ndarray | None
    rng_state: Any
    ref_eps: float
    vouched: float
    f0: np.ndarray | None = None
    f0_mp: np.ndarray | None = None


def _rows(
    fn: Callable[[np.ndarray], np.ndarray] | None,
    M: np.ndarray | RademacherDirections,
    chunk: int = 256,
) -> Any:
    assert fn is not None
    return np.concatenate(
        [np.asarray(fn(M[a : a + chunk]), dtype=np.float64) for a in range(0, M.shape[0], chunk)]
    )


def _rows64(target: Target, md: str, M: np.ndarray | RademacherDirections) -> Any:
    """The float64 evaluation of the rule along the rows of ``M``, or None.

    It is optional evidence: where it fails (a custom rule whose backward mixes a
    closed-over float32 tensor with the float64 cotangent), the rule is judged in the
    working dtype alone, the failure is noted, and later calls skip it.
    """
    fn64 = target.vjp64 if md == "rev" else target.jvp64
    if fn64 is None:
        return None
    try:
        return _rows(fn64, M)
    except Exception as exc:  # noqa: BLE001 - any failure: no float64 evaluation
        if md == "rev":
            target.vjp64 = None
        else:
            target.jvp64 = None
        target.notes.append(
            f"the float64 evaluation of the rule failed ({describe_exception(exc)}); the "
            "rule is judged in the working dtype only"
        )
        return None


def accurate_sum(t: np.ndarray) -> float:
    """The sum of the float64 values ``t`` (shape ``(n,)``), nearly exact and fast.

    A cascade of pairwise sums in which every addition's rounding error is recovered
    exactly (Knuth's TwoSum) and the errors of each level are summed in plain float64.
    The result is the exact sum rounded once, up to an error of at most about
    ``log2(n)^2 eps^2 sum|t|`` (the rounding of the recovered errors, each of which is
    at most ``eps/2`` times a partial sum): 1e-29 ``sum|t|`` at ``n = 1e6``, far below
    the ``eps |uᵀJw|`` of an exact sum rounded once, so no tolerance needs to allow for
    it. About ten passes over ``n`` values in NumPy, where ``math.fsum`` takes a Python
    loop (0.05 s per 1e6 values).

    Parameters
    ----------
    t : ndarray, shape (n,), float64

    Returns
    -------
    float
        NaN or ±inf where a value is (as ``sum`` would give).
    """
    t = whole = np.asarray(t, dtype=np.float64).ravel()
    parts: list[float] = []
    with np.errstate(all="ignore"):
        while t.size > 1:
            if t.size % 2:  # the odd one out is kept whole
                parts.append(float(t[-1]))
                t = t[:-1]
            a, b = t[0::2], t[1::2]
            s = a + b
            bb = s - a
            parts.append(float(np.sum((a - (s - bb)) + (b - bb))))
            t = s
        if not (np.isfinite(parts).all() and np.isfinite(t).all()):  # NaN, ±inf, overflow
            return float(np.sum(whole))
    return math.fsum([float(t[0]) if t.size else 0.0, *parts])


def _dots(
    W: np.ndarray | RademacherDirections, *As: np.ndarray | None
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per ``A`` of ``As``, row-wise ``uᵀJw`` and the 2-norm of its terms, ``(k, 1)`` each.

    Each ``A`` is ``(k, n)`` or one row for all directions (None gives None). Each
    direction is built once (generated, for :class:`RademacherDirections`) and
    dropped; its products are exact (``w`` holds ±powers of two) and summed by
    :func:`accurate_sum`.
    """
    k = W.shape[0]
    out = [None if A is None else (np.empty((k, 1)), np.empty((k, 1))) for A in As]
    for i in range(k):
        w = W[i]
        for A, o in zip(As, out, strict=True):
            if A is None or o is None:
                continue
            terms = A[i if A.shape[0] > 1 else 0] * w
            o[0][i, 0] = accurate_sum(terms)
            o[1][i, 0] = np.sqrt(np.dot(terms, terms))
    return out


def jacobian_scale(J: np.ndarray, error: np.ndarray | None = None) -> np.ndarray:
    """``(n, m)`` scale of each entry of a Jacobian ``J`` (``(n, m)``, rows are inputs).

    ``|J_ji|`` plus the RMS of output ``i``'s entries; an output whose entries are all
    0 (at a stationary point) takes the RMS of the whole Jacobian: on its own scale, 0,
    every error bar would be too coarse. Non-finite entries count as absent. With
    ``error`` (the error bars of a reference ``J``), an entry within its error bar of 0
    counts as 0: an output that is constant (the minimum of a min-max normalisation is
    always 0) has an mp reference of round-off, ``1e-48``, which is no scale.
    """
    if error is not None:
        with np.errstate(invalid="ignore"):
            J = np.where(np.abs(J) <= error, 0.0, J)
    finite = np.where(np.isfinite(J), J, np.nan)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column
        rms = np.sqrt(np.nanmean(finite**2, axis=0))
        overall = float(np.sqrt(np.nanmean(finite**2))) if np.any(np.isfinite(J)) else 0.0
    rms = np.where(np.isfinite(rms), rms, 0.0)
    rms = np.where(rms > 0, rms, overall if np.isfinite(overall) else 0.0)
    return np.abs(np.where(np.isfinite(J), J, 0.0)) + rms[None, :]


def function_scale(y0: np.ndarray) -> np.ndarray:
    """``(m,)`` size of each output: ``|f_i|``, or the RMS of ``f`` where ``f_i = 0``.

    Divided by an input's scale ``s_j``, it is the size of a derivative that
    changes ``f_i`` by its own size over a move of the input's size: the scale
    of an entry whose Jacobian is exactly 0 (nothing else sets one), and of the
    round-off that a rule inherits from intermediates of the size of ``f``.
    """
    a = np.abs(np.where(np.isfinite(y0), y0, 0.0))
    rms = float(np.sqrt(np.mean(a**2))) if a.size else 0.0
    return np.where(a > 0, a, rms)


def digits_lost(value: np.ndarray, accurate: np.ndarray) -> np.ndarray:
    """``(m,)`` relative accuracy of ``value`` against ``accurate``, between 0 and 1.

    ``|value - accurate| / max(|value|, |accurate|)``: 1 where one of them is 0
    and the other not (every digit lost), 0 where both are 0 or either is not
    finite (nothing measured).
    """
    v = np.ravel(np.asarray(value, dtype=np.float64))
    a = np.ravel(np.asarray(accurate, dtype=np.float64))
    with np.errstate(all="ignore"):
        rho = np.abs(v - a) / np.maximum(np.abs(v), np.abs(a))
    return np.where(np.isfinite(rho), rho, 0.0)


def f_accuracy(target: Target, st: Setting) -> np.ndarray | None:
    """``(m,)`` relative accuracy of ``f``'s own value in a narrow working dtype, or None.

    Measured against the most accurate value known (mp, else float64) with
    :func:`digits_lost`; None for a float64 working dtype or where no such value
    is known.
    """
    y0 = np.ravel(np.asarray(target.y0, dtype=np.float64))
    best = st.f0_mp if st.f0_mp is not None else st.f0
    if target.eps <= F64_EPS or best is None or np.size(best) != y0.size:
        return None
    return digits_lost(y0, best)


F64_LOST_AT_MOST = 0.01
""":func:`f64_accuracy` counts an output only where ``f`` keeps at least two digits in
float64. Where it keeps none, its true value is 0 or nearly (a sum of terms that cancel
exactly, the mean of a layer norm), its relative error is 1 whatever the terms' size,
and it says nothing of what a rule loses: the gradient of such a sum inherits none of
its cancellation."""


def f64_accuracy(target: Target, st: Setting) -> np.ndarray | None:
    """``(m,)`` relative accuracy of ``f``'s float64 value, in a narrow working dtype.

    The float64 value is the one the reference's arithmetic computed at the
    point (``st.f0``), measured against ``f`` on mpmath numbers (``st.f0_mp``)
    with :func:`digits_lost`; 0 for an output that keeps fewer than two digits
    (see :data:`F64_LOST_AT_MOST`). None for a float64 working dtype, without a
    float64 evaluation of the rule, or where either value is not known.
    """
    narrow = target.eps > F64_EPS and st.ref_eps <= F64_EPS
    has_rule64 = target.vjp64 is not None or target.jvp64 is not None
    if not (narrow and has_rule64) or st.f0_mp is None or st.f0 is None:
        return None
    if np.size(st.f0) != np.size(st.f0_mp) or np.size(st.f0) != target.m:
        return None
    return _counted(digits_lost(st.f0, st.f0_mp))


def _counted(rho: np.ndarray) -> np.ndarray:
    """``rho`` where ``f`` keeps at least two digits, 0 elsewhere (:data:`F64_LOST_AT_MOST`)."""
    return np.where(rho <= F64_LOST_AT_MOST, rho, 0.0)


def _per_entry(lost: np.ndarray | None, st: Setting, md: str, shape: tuple[int, ...]) -> Any:
    """An output's relative accuracy on each of its entries (a projection mixing
    outputs: the worst)."""
    if lost is None:
        return None
    if not st.full and md == "rev":
        return np.full(shape, float(np.max(lost)) if lost.size else 0.0).ravel()
    return np.broadcast_to(lost[None, :], shape).ravel()


def _output_names(target: Target) -> list[str]:
    return target.output_layout.names()


def _sides(dd: DirectionalDerivatives) -> dict[str, Any]:
    return {
        "ref": dd.central.value,
        "ref_err": dd.central.error,
        "right": dd.right.value,
        "right_err": dd.right.error,
        "left": dd.left.value,
        "left_err": dd.left.error,
    }


def _full(target: Target, st: Setting, md: str) -> tuple[dict[str, Any], Any, Any]:
    """Autodiff along the unit directions, the reference divided back by ``s_j``."""
    n, m, s = target.n, target.m, st.s
    # a scaled direction (s_j subnormal or huge) would underflow in the working dtype
    I = np.eye(m if md == "rev" else n)
    fn = target.vjp if md == "rev" else target.jvp
    ad = _rows(fn, I)
    ad64 = _rows64(target, md, I)
    if md == "rev":
        ad, ad64 = ad.T, (ad64.T if ad64 is not None else None)
    with np.errstate(over="ignore"):
        q = {k: v / s[:, None] for k, v in _sides(st.dd).items()}
        fscale = function_scale(target.y0)[None, :] / s[:, None]
    scale = jacobian_scale(q["ref"], q["ref_err"])
    # a reference Jacobian that is exactly 0 takes its scale from autodiff's: a nonzero
    # autodiff value within a wide error bar is then undecided, never agreement with 0
    scale = np.where(scale > 0, scale, jacobian_scale(ad64 if ad64 is not None else ad))
    out = _output_names(target)
    q.update(scale=scale, fscale=fscale, jumps=st.dd.jump_left | st.dd.jump_right)
    ins = target.input_layout.names()
    q["names"] = [f"{o} / {x}" for x in ins for o in out] if m > 1 else ins
    return q, ad, ad64


def _projected_rev(
    target: Target, st: Setting, rng: np.random.Generator
) -> tuple[dict[str, Any], Any, Any]:
    """``uᵀJw`` with random cotangents ``u``; the reference summed against ``u``."""
    W, m = st.W, target.m
    assert W is not None
    k = W.shape[0]
    U = np.ones((k, m)) if m == 1 else rng.choice([-1.0, 1.0], size=(k, m))
    # one output: every cotangent is 1, and one VJP serves all directions
    rows = U[:1] if m == 1 else U
    work, wide = _dots(W, _rows(target.vjp, rows), _rows64(target, "rev", rows))
    assert work is not None
    ad, norms = work
    ad64 = None if wide is None else wide[0]
    norms = norms if wide is None else wide[1]
    q: dict[str, Any] = {}
    for key, v in _sides(st.dd).items():
        q[key] = np.sum((np.abs(U) if key.endswith("_err") else U) * v, axis=1, keepdims=True)
    q["jumps"] = np.any(st.dd.jump_left | st.dd.jump_right, axis=1, keepdims=True)
    q["scale"] = np.abs(ad64 if ad64 is not None else ad) + norms
    fs = function_scale(target.y0)
    q["fscale"] = np.sqrt(np.sum((U * fs) ** 2, axis=1, keepdims=True))
    q["names"] = [f"uᵀJw[{i}]" for i in range(k)]
    q["cotangents"] = U
    return q, ad, ad64


def _projected_fwd(target: Target, st: Setting) -> tuple[dict[str, Any], Any, Any]:
    """``Jw`` for the random directions ``w``."""
    W, m = st.W, target.m
    assert W is not None
    ad = _rows(target.jvp, W)  # (k, m)
    ad64 = _rows64(target, "fwd", W)
    q: dict[str, Any] = dict(_sides(st.dd))
    scale = jacobian_scale(q["ref"], q["ref_err"])
    q["scale"] = np.where(scale > 0, scale, jacobian_scale(ad64 if ad64 is not None else ad))
    q["fscale"] = np.broadcast_to(function_scale(target.y0), q["ref"].shape)
    q["jumps"] = st.dd.jump_left | st.dd.jump_right
    out = _output_names(target)
    q["names"] = [
        f"Jw[{i}]" + (f" {out[o]}" if m > 1 else "") for i in range(W.shape[0]) for o in range(m)
    ]
    return q, ad, ad64


def _rule_mp(
    target: Target, st: Setting, md: str, q: dict[str, Any], entries: np.ndarray | None, dps: int
) -> np.ndarray | None:
    """The rule on mpmath numbers (``target.vjp_mp``) for the reverse-mode ``entries``
    (flat indices), rounded to float64 once, NaN at the other entries; None where not
    asked for or not available.

    A full check evaluates the rows of the outputs those entries belong to; a
    projection ``uᵀJw`` its cotangent's row, summed against ``w`` at ``dps`` digits.
    """
    if entries is None or md != "rev" or target.vjp_mp is None:
        return None
    n, m = target.n, target.m
    if st.full:
        out = np.full((n, m), np.nan)
        rows = np.unique(np.asarray(entries) % max(m, 1))
        out[:, rows] = mp_to_float(target.vjp_mp(np.eye(m)[rows], dps)).T
        return out.ravel()
    U, W = q["cotangents"], st.W
    assert W is not None
    out = np.full(U.shape[0], np.nan)
    shared = target.vjp_mp(U[:1], dps)[0] if m == 1 else None  # one cotangent serves all
    for r in np.unique(entries):
        vals = shared if shared is not None else target.vjp_mp(U[r : r + 1], dps)[0]
        out[r] = float(sum(v * float(w) for v, w in zip(vals, W[r], strict=True)))
    return out


ROUNDOFF_DIGITS = (14, 15)
"""Decimal digits of mpmath contexts at 50 and 53 bits: the rule evaluated there shows
the round-off of evaluating it in float64 (53 bits, every operation correctly rounded)
and with kernels a few ulps from correctly rounded (50 bits: each rounding up to 8 times
float64's half ulp), as libm and the frameworks' kernels are."""


def rule_roundoff(
    target: Target, st: Setting, md: str, q: dict[str, Any], entries: np.ndarray | None,
    ad_mp: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """How far the rule moves from ``ad_mp`` when evaluated on mpmath numbers in float64's
    precision, per entry (NaN where not evaluated).

    Each operation of the rule is rounded once to the bits of :data:`ROUNDOFF_DIGITS`;
    the largest change is the round-off of the rule in float64, including what moves of
    the input by whole ulps do not re-round (an intermediate rounded where a later
    operation magnifies its rounding: ``1 - tanh(u)^2`` at a saturated ``u``, whose
    ``tanh`` TensorFlow's float64 kernel returns as exactly 1, 3 ulps from the
    truth). A rule wrong in exact arithmetic is wrong at every precision: this
    measures only how its value scatters.

    Parameters
    ----------
    target, st, md, q, entries
        As for ``_rule_mp``: the target, its reference setting, ``"rev"``, the gathered
        quantities and the flat indices of the reverse-mode entries evaluated.
    ad_mp : ndarray of float64, shape (K,)
        The rule at the check's digits (NaN where not evaluated).

    Returns
    -------
    ndarray of float64, shape (K,)
        ``max_p |rule_p - ad_mp|`` over the precisions, in the entries' units; NaN where
        ``ad_mp`` is NaN.
    """
    out = np.zeros_like(ad_mp)
    for d in ROUNDOFF_DIGITS:
        low = _rule_mp(target, st, md, q, entries, d)
        assert low is not None  # evaluated where ad_mp was
        out = np.fmax(out, np.abs(low - ad_mp))
    return np.where(np.isnan(ad_mp), np.nan, out)


def _lost_in_float64(target: Target, st: Setting, ad_mp: np.ndarray | None) -> Any:
    """``(m,)`` relative accuracy of a float64 ``f`` against ``f`` on mpmath numbers, where
    the rule has been evaluated on mpmath numbers too (see :func:`f64_accuracy` for the
    outputs that keep no digit); None otherwise."""
    if ad_mp is None or target.eps > F64_EPS or st.f0_mp is None:
        return None
    if np.size(st.f0_mp) != target.m:
        return None
    return _counted(digits_lost(target.y0, st.f0_mp))


def gather(
    target: Target,
    st: Setting,
    md: str,
    rng: np.random.Generator,
    allowance: tuple[np.ndarray, np.ndarray] | None = None,
    policy: Policy = DEFAULT_POLICY,
    mp_entries: np.ndarray | None = None,
    dps: int = 50,
    expected: Expected = NOTHING_EXPECTED,
) -> JudgeInput:
    """One mode's autodiff quantities beside the reference, as a :class:`JudgeInput`.

    Parameters
    ----------
    target : Target
        The implementation judged.
    st : Setting
        The reference and its directions.
    md : {"rev", "fwd"}
        VJP or JVP.
    rng : numpy.random.Generator
        Source of the cotangents (projections, reverse mode).
    allowance : (ndarray, ndarray), optional
        Measured (working, float64) autodiff round-off per entry.
    policy : Policy
        Tolerance constants.
    mp_entries : ndarray of int, optional
        Reverse-mode entries (flat indices) whose rule is also evaluated on mpmath
        numbers (``target.vjp_mp``), at ``dps`` digits.
    dps : int
        Digits of that evaluation.
    expected : Expected
        The accuracy the user asked for and whether the rule is a surrogate (see
        :class:`polygrad.pipeline.judge.Expected`).
    """
    if st.full:
        q, ad, ad64 = _full(target, st, md)
    elif md == "rev":
        q, ad, ad64 = _projected_rev(target, st, rng)
    else:
        q, ad, ad64 = _projected_fwd(target, st)
    ad = np.ravel(ad)
    flat = {k: np.ravel(q[k]) for k in ("ref", "ref_err", "left", "left_err", "right")}
    fscale = np.ravel(q["fscale"])
    lost_w, lost_64 = f_accuracy(target, st), f64_accuracy(target, st)
    ad_mp = _rule_mp(target, st, md, q, mp_entries, dps)
    roundoff = None if ad_mp is None else rule_roundoff(target, st, md, q, mp_entries, ad_mp)
    lost_w = _lost_in_float64(target, st, ad_mp) if lost_w is None else lost_w
    shape = np.shape(q["ref"])
    return JudgeInput(
        names=q["names"],
        ad=ad,
        ad64=np.ravel(ad64) if ad64 is not None else np.full(ad.shape, np.nan),
        have64=ad64 is not None,
        right_err=np.ravel(q["right_err"]),
        jumps=np.ravel(q["jumps"]),
        scale=np.ravel(q["scale"]),
        fscale=np.where(np.isfinite(fscale), fscale, 0.0),
        eps_w=target.eps,
        ref_eps=st.ref_eps,
        vouched=st.vouched,
        allowance_w=None if allowance is None else allowance[0],
        allowance_64=None if allowance is None else allowance[1],
        policy=policy,
        lost_w=_per_entry(lost_w, st, md, shape),
        lost_64=_per_entry(lost_64, st, md, shape),
        ad_mp=ad_mp,
        rule_roundoff=roundoff,
        expected=expected,
        **flat,
    )


def _moved_dtype(target: Target, blocks: list[Entries], wd64: bool) -> np.dtype | None:
    """The dtype whose ulps the inputs move by, or None when no allowance can be measured."""
    if not wd64 and any(np.all(np.isnan(b.autodiff64)) for b in blocks):
        return None
    if target.working_dtype not in MOVED_DTYPES:
        return None
    try:
        return numpy_dtype(target.working_dtype)  # bfloat16 through ml_dtypes
    except ImportError:  # pragma: no cover - ml_dtypes ships with every framework
        return None


def _allow(
    allow: np.ndarray, b: Entries, others: list[Entries], wd64: bool, factor: float,
    pending: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """One block's allowance after one size of move: entries not yet moved, and the
    ``pending`` ones, get theirs (never less than before)."""
    with np.errstate(invalid="ignore"):  # an infinite autodiff value moves by NaN
        moves = [o.autodiff - b.autodiff for o in others]
        # per entry, the smallest size of move that moved its value at all
        new = (np.isnan(allow) | pending) & (spread(moves) > 0)
        new &= ~displaced_at_the_point(moves, b.tolerance)
        if wd64:  # the even part of each pair: the derivative's linear change cancels
            moves = [(moves[2 * i] + moves[2 * i + 1]) / 2 for i in range(len(moves) // 2)]
        else:  # the derivative's own change, from the float64 rule, taken out
            pairs = zip(moves, others, strict=True)
            moves = [mv - (o.autodiff64 - b.autodiff64) for mv, o in pairs]
        return np.where(new, np.fmax(allow, factor * spread(moves)), allow)


DISPLACED_TOLERANCES = 1e3
"""A value at the point that every moved input's value leaves by more than this many
times the entry's tolerance, alike, is no round-off (see :func:`displaced_at_the_point`)."""


def displaced_at_the_point(moves: list[np.ndarray], tolerance: np.ndarray) -> np.ndarray:
    """Entries whose value at the point stands apart from the moved inputs' values.

    ``moves`` are the changes of the autodiff values at inputs moved in pairs of
    opposites (``x + d``, ``x - d``, in that order). Round-off scatters: the point's
    value is one more draw among its neighbours', and the moves from it differ from
    one another by about as much as they are large. A rule that takes another value at
    the point alone (``np.where(x == 0, 0.0, np.cos(x))``, a backward that
    special-cases an exact input) moves every neighbour, on both sides, by the same
    amount, far beyond round-off: at least two moves exceed
    :data:`DISPLACED_TOLERANCES` tolerances, they agree to 1%, and no pair has one
    such move without the other (the other pairs left the entry's input where it
    was). A jump on one side (another input at the threshold of a ``where``) moves
    one member of each pair only: that is a kink of f, not the point's own value.
    Such a move is no allowance; whether the point sits at a kink of an intermediate
    is for :func:`kinks_at_the_point` to say.
    """
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no large move: an all-NaN slice
        stack = np.array(moves)
        big = np.abs(stack) > DISPLACED_TOLERANCES * tolerance
        one_sided = np.any(big[0::2] != big[1::2], axis=0)
        large = np.where(big, stack, np.nan)
        lo, hi = np.nanmin(large, axis=0), np.nanmax(large, axis=0)
        alike = (np.sign(lo) == np.sign(hi)) & (hi - lo <= 0.01 * np.minimum(abs(lo), abs(hi)))
        return (np.sum(big, axis=0) >= 2) & alike & ~one_sided


def _rule64_allowance(b: Entries, others: list[Entries], factor: float, cap: float) -> np.ndarray:
    """A narrower working dtype's allowance for the round-off of the float64 evaluation
    of its rule: ``factor`` times the largest even part of its paired moves.

    Moves of a few ulps of the working dtype re-round every float64 intermediate (they
    are far beyond float64's ulps), and the even part of a pair,
    ``(a(x + d) + a(x - d)) / 2 - a(x)``, keeps that round-off without the derivative's
    linear change: ``1 - t^2`` with ``t = tanh(15.2)`` one float64 ulp below 1 (off by
    2e-3 of the entry in float64) shows it. A rule wrong by a factor is wrong by the
    same factor at every move, which no even part shows. An entry whose even part
    exceeds ``cap`` (``c_ad`` float32 epsilons times f's size per unit of the inputs'
    scale: the float64 rule resolves rule errors to float32's precision) gets none: the
    moves crossed a kink (a stable BCE at ``z = 0`` moved to ``z = ±k tiny`` takes the
    same side of ``max(z, 0)`` and ``|z|`` either way, unlike ``z = 0`` itself), or
    carried the derivative's curvature (a bfloat16 move of 1.6e-2), and what moved is
    not round-off. The odd part, the derivative's change, is not bounded: a
    derivative far from 0 changes by far more than float32's precision of f over a
    few ulps (``var`` of inputs near 1e4, each move of ``x_i`` by 1e-3 changing its
    derivative by 8e-5 against a cap of 8e-10), and a jump that is odd (autodiff's
    0.5 at a tie of ``max``, 1 and 0 on either side) has no even part to allow.
    """
    with np.errstate(invalid="ignore"):
        moves = [o.autodiff64 - b.autodiff64 for o in others]
        even = [(moves[2 * i] + moves[2 * i + 1]) / 2 for i in range(len(moves) // 2)]
        allowance = np.nan_to_num(factor * spread(even))
        return np.where(spread(even) > cap, 0.0, allowance)


def _unexplained(
    al: np.ndarray, b: Entries, failing: np.ndarray, wd64: bool, reach: float = np.inf
) -> np.ndarray:
    """The failing entries of a block that the moves so far have not explained.

    Not moved at all, or, in a float64 working dtype, still beyond their tolerance
    with the allowance so far: a move of a few ulps of the input can leave an
    intermediate far larger than the entry on the same rounding (``cos(u)`` near its
    zero at ``u = 0.5 x_0 + ... ~ -89.5``: moves of ``x_0`` by whole ulps move ``u``
    by whole ulps of its own), and only a larger move re-rounds it; a float64 entry
    not explained is called a wrong rule. In a narrower working dtype the float64
    rule decides that, and a working value that a few ulps do not explain stays
    UNSTABLE: larger moves would excuse a rule's cancellation of its own making
    (``sin x / x^2 - 2 (1 - cos x) / x^3`` at ``x ~ 1e-2``), which UNSTABLE names.

    ``reach`` bounds what the larger moves still to come can add: the even part of a
    pair of opposite moves (the round-off and the derivative's curvature; its linear
    change cancels) grows at most like the square of the move, ``GROWTH^2`` per size.
    An entry that moved (allowance above 0) and fails by more than ``reach`` times its
    allowance is beyond what any larger move can explain: it is decided, and the moves
    stop growing for it (a wrong rule is decided at the first size, not the last). So
    is an entry that fails by more than float32's resolution of its values: the moves
    stay far below it (:data:`polygrad.dither.LARGEST_MOVE`), so that no error at that
    level is excused as a float64 rule's round-off. (A narrower working dtype's value
    that did not move still gets the larger moves where its float64 rule fails far
    beyond its tolerance: its allowance also bounds what the rule re-executed on mpmath
    numbers may clear, as at ``logsumexp(log_softmax(x))``, exactly 0, whose right
    float32 rule is off by 9e-9.)
    """
    if not wd64:
        return failing & np.isnan(al)
    with np.errstate(invalid="ignore"):
        gap = np.abs(b.autodiff - b.reference) - b.tolerance
        beyond = gap > np.nan_to_num(al)
        decided = (al > 0) & (gap > reach * al)
        decided |= gap > FLOAT32_LEVEL * (np.abs(b.reference) + np.abs(b.autodiff))
    return failing & (np.isnan(al) | beyond) & ~decided


def autodiff_roundoff(
    be: Backend,
    call: tuple[Callable[..., Any], tuple[Any, ...], tuple[int, ...], Supplied, int],
    seed: int,
    blocks: list[Entries],
    failing: list[np.ndarray],
    judge_target: Callable[[Target], list[Entries]],
    target: Target,
    policy: Policy = DEFAULT_POLICY,
) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per block, the (working, float64) allowance for autodiff round-off, or None.

    The autodiff values are evaluated again at inputs moved by a few ulps of
    the working dtype (``call`` is ``(f, args, argnums, supplied, batch_size)``),
    and, while some ``failing`` entry's value did not move at all (or, in a
    float64 working dtype, still fails with its allowance so far), by larger moves
    (:func:`polygrad.dither.move_sizes`); each entry gets
    ``policy.dither_allowance`` times the largest move at the smallest size
    that moved it (a failing entry: the largest over the sizes tried). Part of
    each move is the true change of the derivative over the move, which is not
    round-off: moves come in pairs of opposites; for a narrower working dtype the
    change is measured by the float64 evaluation of the rule at the same moved
    inputs and taken out, and that float64 evaluation is allowed the even part of
    its own pairs at the smallest moves (:func:`_rule64_allowance`); in float64
    only the even part of each pair counts. None without a
    float64 evaluation of a narrower rule, or when the inputs cannot be moved
    (not float16, bfloat16, float32 or float64). Where the function fails at moved
    inputs, the moves stop.
    """
    wd64 = target.working_dtype == "float64"
    dtype = _moved_dtype(target, blocks, wd64)
    if dtype is None:
        return None
    f, args, argnums, supplied, batch_size = call
    allow = [np.full(b.autodiff.shape, np.nan) for b in blocks]
    rule64: list[np.ndarray | None] = [None] * len(blocks)
    f_size = float(np.max(np.abs(target.y0), initial=0.0) / np.min(pow2_scales(target.x0)))
    # the float64 rule of a narrow check resolves rule errors to float32's precision
    # (RULE_RESOLUTION): no allowance goes beyond that round-off of f-sized terms
    # (bfloat16 moves of 1.6e-2 carry the derivative's curvature with them)
    cap = policy.c_ad * RULE_RESOLUTION * f_size
    rng = np.random.default_rng([seed, 3])
    sizes = move_sizes(dtype, policy.dither_ulps)
    for k, ulps in enumerate(sizes):
        moved = dithered_args(be, args, argnums, rng, ulps, paired=True, copies=policy.dithers)
        if moved is None:
            return None
        try:
            others = [judge_target(be.make_target(f, a, argnums, supplied, batch_size))
                      for a in moved]  # fmt: skip
        except Exception:  # noqa: BLE001 - the allowance is optional: keep the verdicts
            break
        grown = []
        for j, (al, b, fl) in enumerate(zip(allow, blocks, failing, strict=True)):
            pending = _unexplained(al, b, fl, wd64) & ~np.isnan(al)
            moves = [o[j] for o in others]
            grown.append(_allow(al, b, moves, wd64, policy.dither_allowance, pending))
            if not wd64 and rule64[j] is None:  # the float64 rule's, at the smallest moves
                rule64[j] = _rule64_allowance(b, moves, policy.dither_allowance, cap)
        allow = grown
        reach = float(GROWTH) ** (2 * (len(sizes) - 1 - k))  # what the larger moves can add
        if not any(np.any(_unexplained(al, b, fl, wd64, reach))
                   for al, b, fl in zip(allow, blocks, failing, strict=True)):  # fmt: skip
            break
    out = []
    for al, al64 in zip(allow, rule64, strict=True):
        al = np.nan_to_num(al)
        out.append((al, al) if wd64 else (al, np.zeros_like(al) if al64 is None else al64))
    return out


FLOAT32_LEVEL = 2.0**-24
"""A float64 entry failing by more than this share of its values is beyond what moving
its inputs (by at most 2^-33 of themselves) can explain as round-off."""

AT_THE_POINT_ONLY = 0.01
"""An entry's difference from the reference must shrink below this share of itself at
an input moved by a few ulps for its MISMATCH to belong to the point alone (the
reference is the point's: what remains there is the derivative's true change over the
move, which can be large next to such a kink)."""


def kinks_at_the_point(
    be: Backend,
    call: tuple[Callable[..., Any], tuple[Any, ...], tuple[int, ...], Supplied, int],
    seed: int,
    blocks: list[Entries],
    judge_target: Callable[[Target], list[Entries]],
    target: Target,
    policy: Policy = DEFAULT_POLICY,
) -> list[np.ndarray] | None:
    """Per block, the MISMATCH entries that a move of a few ulps of the input resolves.

    At a point where an intermediate of ``f`` sits exactly at a kink (two entries of a
    tie that a layer norm maps to exactly 0, then a leaky ReLU), autodiff takes one side
    of the kink for it, while ``f`` itself can be differentiable there (the kink cancels
    in the composition): autodiff returns an element of a conservative gradient that is
    not the derivative (Bolte & Pauwels, 2020). A few ulps away the tie is broken and
    the same rule agrees with the reference; a wrong rule does not. An entry is
    returned when, at most of the inputs moved by up to ``policy.dither_ulps`` ulps,
    its difference from the point's reference (float64 rule where there is one)
    shrank below :data:`AT_THE_POINT_ONLY` of what it was and of the reference itself
    (round-off of a rule at an exact zero moves a few ulps away too, but stays far
    from the reference in relative terms). None where the inputs cannot be moved.
    """
    wd64 = target.working_dtype == "float64"
    dtype = _moved_dtype(target, blocks, wd64)
    if dtype is None:
        return None
    f, args, argnums, supplied, batch_size = call
    rng = np.random.default_rng([seed, 5])
    moved = dithered_args(be, args, argnums, rng, policy.dither_ulps, paired=False,
                          copies=policy.dithers)  # fmt: skip
    if moved is None:
        return None
    try:
        others = [judge_target(be.make_target(f, a, argnums, supplied, batch_size))
                  for a in moved]  # fmt: skip
    except Exception:  # noqa: BLE001 - optional evidence: keep the verdicts
        return None
    return [_resolved_nearby(b, [o[j] for o in others], wd64) for j, b in enumerate(blocks)]


def _resolved_nearby(b: Entries, others: list[Entries], wd64: bool) -> np.ndarray:
    """MISMATCH entries of ``b`` whose difference most moved copies all but remove, alike."""
    mismatch = SEVERITY[Verdict.MISMATCH]

    def value_of(e: Entries) -> np.ndarray:
        return e.autodiff if wd64 or np.all(np.isnan(e.autodiff64)) else e.autodiff64

    near = AT_THE_POINT_ONLY * np.abs(b.reference)  # a branch taken, not round-off
    with np.errstate(invalid="ignore"):
        here = np.abs(value_of(b) - b.reference)
        values = np.array([value_of(o) for o in others])  # (copies, entries)
        gaps = np.abs(values - b.reference)
        # (an exact 0 lands on a reference of exactly 0: the derivative of a flat stretch)
        hit = (gaps < AT_THE_POINT_ONLY * here) & (gaps <= near)
        # most moved copies resolve it, and agree among themselves: where the derivative
        # itself changes over a move by more than the test resolves (a few ulps of
        # float16 are 1e-3 of x), one copy can land on the point's reference by chance,
        # a wrong rule's too
        lo = np.min(np.where(hit, values, np.inf), axis=0)
        hi = np.max(np.where(hit, values, -np.inf), axis=0)
        found = (2 * hit.sum(axis=0) >= len(others)) & (hi - lo <= AT_THE_POINT_ONLY * here)
    return (b.status == mismatch) & found
