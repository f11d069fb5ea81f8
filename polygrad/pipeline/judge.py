"""The verdict rule: one entry's evidence in, one verdict out.

:func:`judge` takes a :class:`JudgeInput` (the autodiff values, the reference
with its error bars and one-sided estimates, and the scales that set the
round-off allowed), works out the :class:`Findings` of every entry
(:func:`findings`), and applies the precedence table of :func:`verdict_rule`.
The same function judges every implementation in :func:`polygrad.check` and
:func:`polygrad.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..policy import DEFAULT_POLICY, Policy
from ..reference.steps import F64_EPS
from ..report import SEVERITY, Entries, Verdict

__all__ = [
    "DOUBT",
    "Expected",
    "Findings",
    "NOTHING_EXPECTED",
    "JudgeInput",
    "concat_entries",
    "split_entries",
    "findings",
    "judge",
    "overall",
    "too_coarse",
    "verdict_rule",
]

DOUBT = (Verdict.MISMATCH, Verdict.UNSTABLE, Verdict.INCONCLUSIVE)
"""Verdicts that an entry gets only after the strongest available reference agrees."""


@dataclass(frozen=True)
class Expected:
    """The accuracy the user expects of a rule, and whether it is a surrogate by design.

    Attributes
    ----------
    rtol, atol : float
        An entry passes where ``|autodiff - reference| <= atol + rtol * |reference|``
        (as in :func:`numpy.testing.assert_allclose`), or within the check's own
        tolerance, whichever is wider; 0 (the default) asks for nothing beyond the
        check's own.
    surrogate : bool
        The rule is not the derivative of ``f`` by design (a straight-through
        estimator, clipped or reversed gradients): differences from the reference
        are reported, not judged (INCONCLUSIVE entries); finiteness still is.
    """

    rtol: float = 0.0
    atol: float = 0.0
    surrogate: bool = False

    def allowed(self, ref: np.ndarray) -> np.ndarray:
        """``atol + rtol * |ref|`` per entry (0 where the reference is not finite)."""
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(ref), self.atol + self.rtol * np.abs(ref), 0.0)


NOTHING_EXPECTED = Expected()
"""No accuracy asked for beyond the check's own, and no surrogate."""


@dataclass(frozen=True)
class JudgeInput:
    """Everything the verdict rule reads, per entry (all arrays ``(K,)``, float64).

    Attributes
    ----------
    names : list of str
        Entry names.
    ad, ad64 : ndarray
        Autodiff in the working dtype, and evaluated in float64 (NaN without one).
    have64 : bool
        Whether ``ad64`` holds a float64 evaluation of the rule.
    ref, ref_err, left, left_err, right, right_err : ndarray
        Central, left and right reference estimates and their error bars.
    jumps : ndarray of bool
        A one-sided difference table saw a jump.
    scale : ndarray
        Size of each entry (see :func:`polygrad.pipeline.autodiff.jacobian_scale`).
    fscale : ndarray
        The function's size per input scale (``|f_i| / s_j``).
    eps_w, ref_eps : float
        Machine epsilon of the working dtype and of the reference's arithmetic.
    vouched : float
        Relative accuracy the reference was aimed at (0 for mp).
    allowance_w, allowance_64 : ndarray or None
        Measured autodiff round-off (see :mod:`polygrad.dither`), or None.
    policy : Policy
        ``c_ad``, ``c_lost`` and ``tolerance_factor``.
    lost_w : ndarray or None
        The relative accuracy ``rho`` (at most 1) to which the entry's output of
        ``f`` itself is computed in a narrow working dtype (see
        :func:`polygrad.pipeline.autodiff.f_accuracy`), or None where not known.
    lost_64 : ndarray or None
        The same for the float64 evaluation of ``f`` that stands beside the
        float64 evaluation of the rule, in a narrow working dtype only (see
        :func:`polygrad.pipeline.autodiff.f64_accuracy`), or None.
    ad_mp : ndarray or None
        The rule re-executed on mpmath numbers (NaN where not evaluated), or None:
        in float64 code, where it agrees with the reference the rule is right, and
        what remains of the float64 value's difference is round-off (see
        :meth:`_Rule.exact`).
    rule_roundoff : ndarray or None
        Where ``ad_mp`` is known: how far the same rule moves when evaluated on mpmath
        numbers in float64's 53-bit arithmetic and at 50 bits (kernels a few ulps from
        correctly rounded): the round-off of evaluating it in float64 (see
        :func:`polygrad.pipeline.autodiff.rule_roundoff`); NaN elsewhere, or None.
    expected : Expected
        The accuracy the user asked for (``rtol``/``atol``) and ``surrogate``.
    """

    names: list[str]
    ad: np.ndarray
    ad64: np.ndarray
    have64: bool
    ref: np.ndarray
    ref_err: np.ndarray
    left: np.ndarray
    left_err: np.ndarray
    right: np.ndarray
    right_err: np.ndarray
    jumps: np.ndarray
    scale: np.ndarray
    fscale: np.ndarray
    eps_w: float
    ref_eps: float
    vouched: float = 0.0
    allowance_w: np.ndarray | None = None
    allowance_64: np.ndarray | None = None
    policy: Policy = DEFAULT_POLICY
    lost_w: np.ndarray | None = None
    lost_64: np.ndarray | None = None
    ad_mp: np.ndarray | None = None
    rule_roundoff: np.ndarray | None = None
    expected: Expected = NOTHING_EXPECTED


@dataclass(frozen=True)
class Findings:
    """What the evidence says about each entry (boolean arrays ``(K,)``), before precedence.

    Attributes
    ----------
    nonsmooth : left/right/central estimates disagree, or a side jumps.
    ad_finite : the autodiff values (and the float64 ones, where present) are finite.
    ref_finite : the reference value is finite.
    bad_64 : the rule (float64 evaluation, else the working one) is outside tolerance.
    bad_w : the working-dtype value is outside tolerance.
    have64 : a float64 evaluation of the rule exists (one bool for all entries).
    coarse : the reference error bar is too wide to decide.
    unresolved : the rule's own tolerance is of the size of the entry.
    by_design : the rule is a surrogate by design (``surrogate=True``).
    leaning : the rule passes only by the round-off a right rule can inherit from
        intermediates of the size of ``f``, and its own was not measured (it did not run
        on mpmath numbers): undecided until it does.
    """

    nonsmooth: np.ndarray
    ad_finite: np.ndarray
    ref_finite: np.ndarray
    bad_64: np.ndarray
    bad_w: np.ndarray
    have64: bool
    coarse: np.ndarray
    unresolved: np.ndarray | bool = False
    by_design: np.ndarray | bool = False
    leaning: np.ndarray | bool = False


def verdict_rule(fd: Findings) -> np.ndarray:
    """Per entry, the severity code (:data:`polygrad.report.SEVERITY`) of its verdict.

    The first row whose condition holds decides (rows in this order)::

        row  condition                                      verdict
        ---  ---------------------------------------------  ------------
         1   nonsmooth and autodiff not finite              NONSMOOTH
         2   reference and autodiff both not finite         INCONCLUSIVE
         3   reference finite != autodiff finite            NONFINITE
         4   nonsmooth                                      NONSMOOTH
         5   the rule is off, and a surrogate by design     INCONCLUSIVE
         6   the rule (float64, else working) is off        MISMATCH
         7   only the working-dtype value is off (have64)   UNSTABLE
         8   the rule passes only by unmeasured round-off   INCONCLUSIVE
         9   the reference error bar is too coarse          INCONCLUSIVE
        10   the tolerance is of the size of the entry      INCONCLUSIVE
        11   otherwise                                      PASS

    NaN/Inf from autodiff where ``f`` has a kink (the norm at 0) is a kink
    first (row 1); at a smooth point it is NONFINITE (row 3).

    Parameters
    ----------
    fd : Findings
        Boolean arrays of one shape ``(K,)``.

    Returns
    -------
    ndarray of int64, shape (K,)
    """
    rows = [
        (fd.nonsmooth & ~fd.ad_finite, Verdict.NONSMOOTH),
        (~fd.ref_finite & ~fd.ad_finite, Verdict.INCONCLUSIVE),
        (fd.ref_finite != fd.ad_finite, Verdict.NONFINITE),
        (fd.nonsmooth, Verdict.NONSMOOTH),
        (np.asarray(fd.by_design) & fd.bad_64, Verdict.INCONCLUSIVE),
        (fd.bad_64, Verdict.MISMATCH),
        (fd.bad_w & fd.have64, Verdict.UNSTABLE),
        (fd.leaning, Verdict.INCONCLUSIVE),
        (fd.coarse, Verdict.INCONCLUSIVE),
        (fd.unresolved, Verdict.INCONCLUSIVE),
    ]
    shape = np.shape(fd.nonsmooth)
    conditions = [np.broadcast_to(np.asarray(c, dtype=bool), shape) for c, _ in rows]
    choices = [SEVERITY[v] for _, v in rows]
    return np.select(conditions, choices, default=SEVERITY[Verdict.PASS]).astype(np.int64)


def too_coarse(
    ref_err: np.ndarray, scale: np.ndarray, eps_w: float, policy: Policy = DEFAULT_POLICY
) -> np.ndarray:
    """Where the reference's error bar is too wide to decide: ``2 e > sqrt(eps) scale``.

    Where nothing sets a scale (``scale == 0``: ``f`` and its Jacobian are both
    exactly 0, e.g. a squared residual at its zero), the error bar is its own
    scale, and only an infinite one is too wide.
    """
    with np.errstate(all="ignore"):
        relative = ~(policy.tolerance_factor * ref_err <= np.sqrt(eps_w) * scale)
        return np.where(scale > 0, relative, ~np.isfinite(ref_err))


@dataclass(frozen=True)
class _Evidence:
    """The reference chosen per entry, its tolerances, and the findings."""

    ref: np.ndarray
    ref_err: np.ndarray
    tol_w: np.ndarray
    tol_64: np.ndarray
    within: np.ndarray
    findings: Findings


def judge(inp: JudgeInput) -> Entries:
    """Apply the decision rule (see :mod:`polygrad.pipeline.check`) to every entry.

    Parameters
    ----------
    inp : JudgeInput
        The evidence, ``(K,)`` arrays.

    Returns
    -------
    Entries
        Per entry: values, the reference used, tolerances and the verdict code.
    """
    ev = findings(inp)
    fd = ev.findings
    status = verdict_rule(fd)
    return Entries(
        names=inp.names,
        autodiff=inp.ad,
        autodiff64=inp.ad64,
        reference=ev.ref,
        reference_error=ev.ref_err,
        left=inp.left,
        left_error=inp.left_err,
        right=inp.right,
        right_error=inp.right_err,
        tolerance=ev.tol_w,
        tolerance64=np.where(inp.have64, ev.tol_64, np.nan),
        status=status,
        within_one_sided=np.where(fd.nonsmooth, ev.within, True),
        leaning=np.broadcast_to(np.asarray(fd.leaning, dtype=bool), status.shape).copy(),
    )


_TINY = {
    float(np.finfo(t).eps): float(np.finfo(t).tiny) for t in (np.float16, np.float32, np.float64)
}
_TINY[2.0**-7] = 2.0**-126  # bfloat16: float32's exponent range


def underflow_floor(eps: float) -> float:
    """The smallest normal number of the dtype whose machine epsilon is ``eps`` (0 for a
    dtype not known here).

    Below it a value keeps only absolute digits, and XLA and TensorFlow flush it to
    zero (flush-to-zero): an autodiff value there can be wrong by about this much
    whatever the rule.
    """
    return _TINY.get(float(eps), 0.0)


class _Rule:
    """The tolerances of one :class:`JudgeInput` (helpers of :func:`findings`)."""

    def __init__(self, inp: JudgeInput, scale: np.ndarray, fscale: np.ndarray) -> None:
        self.inp, self.scale, self.p = inp, scale, inp.policy
        self.least = inp.vouched * scale
        none = np.zeros_like(inp.ad)
        self.extra_w = none if inp.allowance_w is None else np.nan_to_num(inp.allowance_w)
        self.extra_64 = none if inp.allowance_64 is None else np.nan_to_num(inp.allowance_64)
        # (a float64 working dtype has nothing narrower to excuse)
        narrow = inp.have64 and inp.eps_w > F64_EPS
        self.scale_w = np.maximum(scale, fscale) if narrow else scale

    def hidden(self) -> np.ndarray:
        """Round-off from ``f``'s own hidden cancellation in the working dtype, per entry.

        Where ``f`` itself keeps only a relative accuracy ``rho`` in the working
        dtype (its value made from intermediates far larger than itself), a right
        rule computed from the same intermediates can lose as much: ``c_lost * rho``
        times the entry's scale. In a narrow dtype it only tells round-off from
        instability (UNSTABLE), never a wrong rule: the gradient of a sum inherits
        none of the sum's cancellation, and an exact rule of an ill-conditioned ``f``
        with a small error looks the same from outside as a rule that inherits f's.
        Float64 code gets it only where its rule on mpmath numbers agrees with the
        reference (:meth:`exact`), which tells the two apart.
        """
        return self._lost(self.inp.lost_w)

    def hidden64(self) -> np.ndarray:
        """Round-off from ``f``'s own hidden cancellation in float64, per entry, for the
        float64 evaluation of the rule in a narrow working dtype.

        A float32 cross-entropy whose target logit dominates (``1 - p`` with ``p``
        within 1e-12 of 1) loses digits in float64 too, in ``f`` and in the rule
        alike; the float64 evaluation only stands in for the rule to tell a wrong
        rule from an unstable one, and it resolves no more than the digits ``f``
        keeps in the same arithmetic: ``c_lost * rho_64`` times the scale. Unlike
        :meth:`hidden` this widens the MISMATCH tolerance, so a rule wrong by less
        than that passes; its float64 tolerance states it. A float64 working dtype
        gets none: there the float64 rule is the user's own, judged to its last
        digits (an ill-conditioned ``f`` with a slightly wrong exact rule must stay
        MISMATCH).
        """
        return self._lost(self.inp.lost_64)

    def exact(self, ref: np.ndarray, ref_err: np.ndarray) -> np.ndarray:
        """Where the rule, re-executed on mpmath numbers, agrees with the reference.

        There the rule is right in exact arithmetic, and its float64 value (float64
        code's own, or a narrower check's float64 evaluation) differs from it by the
        round-off of evaluating it: a log-softmax whose largest logit dominates
        computes ``1 - p`` with ``p`` within 1e-9 of 1, from ``f``'s own
        ``log(1 + tiny)``; ``1 - tanh(u)^2`` at a saturated ``u`` rounds ``tanh`` at
        ulp(1). Such an entry is not MISMATCH where that value is within what the
        working dtype allows anyway (float64 code: what ``f`` itself lost there, see
        :meth:`hidden`). A rule wrong in exact arithmetic (1e-6 off where its float64
        round-off is 1e-4) disagrees here too; and since the mp evaluation computes
        each primitive exactly, a wrong kernel (JAX's digamma gradient below 0) agrees
        here but not within that allowance: both stay MISMATCH.
        """
        a = self.inp.ad_mp
        if a is None:
            return np.zeros(np.shape(self.inp.ad), dtype=bool)
        # within the plain float64 tolerance (its value is rounded to float64 once)
        plain = self.p.tolerance_factor * self.vouch(ref_err) + self.p.c_ad * F64_EPS * self.scale
        return np.isfinite(a) & (np.abs(a - ref) <= plain)

    def rounded(self) -> np.ndarray:
        """The round-off of evaluating the rule in float64, measured, per entry.

        Where the rule on mpmath numbers is right (:meth:`exact`), the same rule
        evaluated in 53-bit arithmetic shows what float64 arithmetic makes of it,
        rounding every intermediate once: ``cos(u)`` at ``u = 256.4`` computed from a
        rounded ``u`` where ``cos`` is small, or ``1 - tanh(u)^2`` at a saturated
        ``u``, which moves of the input by whole ulps do not re-round. ``c_lost``
        times that; 0 where it was not measured.
        """
        r = self.inp.rule_roundoff
        if r is None:
            return np.zeros_like(self.inp.ad)
        return self.p.c_lost * np.nan_to_num(r)

    def _lost(self, rho: np.ndarray | None) -> np.ndarray:
        if rho is None:
            return np.zeros_like(self.inp.ad)
        return self.p.c_lost * np.nan_to_num(rho) * self.scale

    def vouch(self, e: np.ndarray) -> np.ndarray:
        return np.where(e < self.least, self.least, e)  # NaN stays NaN

    def tolerances(self, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(working dtype, float64) tolerances around a reference with error bar ``e``.

        The round-off allowed is ``c_ad`` ulps of the scale plus twice the dtype's
        :func:`underflow_floor`, where round-off is absolute.
        """
        k, c = self.p.tolerance_factor, self.p.c_ad
        two_e = k * self.vouch(e)
        floor_w, floor_64 = k * underflow_floor(self.inp.eps_w), k * underflow_floor(F64_EPS)
        return (
            two_e + c * self.inp.eps_w * self.scale + floor_w + self.extra_w,
            two_e + c * F64_EPS * self.scale + floor_64 + self.extra_64,
        )

    def agree(self, a: np.ndarray, ea: np.ndarray, b: np.ndarray, eb: np.ndarray) -> np.ndarray:
        slack = self.p.c_ad * self.inp.ref_eps * self.scale
        return np.abs(a - b) <= self.p.tolerance_factor * (self.vouch(ea) + self.vouch(eb)) + slack

    def fits_a_side(self, a: np.ndarray, eps: float, coarse: np.ndarray) -> np.ndarray:
        # a coarse central estimate is only as good as its error bar, which can be
        # wrong where the steps are far beyond the function's length scale; where the
        # left or right estimate (each with its own bar) still admits the value, the
        # evidence of a wrong rule is not conclusive
        inp, k = self.inp, self.p.tolerance_factor
        room = self.p.c_ad * eps * self.scale
        fit_l = np.abs(a - inp.left) <= k * self.vouch(inp.left_err) + room
        fit_r = np.abs(a - inp.right) <= k * self.vouch(inp.right_err) + room
        return coarse & (fit_l | fit_r)


def _central_or_a_side(inp: JudgeInput) -> tuple[np.ndarray, np.ndarray]:
    """The central reference, or where it is missing (``f`` not finite on one side) a side."""
    central_ok = np.isfinite(inp.ref) & np.isfinite(inp.ref_err)
    right_ok = np.isfinite(inp.right) & np.isfinite(inp.right_err)
    use_r = ~central_ok & right_ok & ~inp.jumps
    use_l = ~central_ok & ~use_r & np.isfinite(inp.left) & np.isfinite(inp.left_err) & ~inp.jumps
    ref = np.where(use_r, inp.right, np.where(use_l, inp.left, inp.ref))
    ref_err = np.where(use_r, inp.right_err, np.where(use_l, inp.left_err, inp.ref_err))
    return ref, ref_err


def _smoothness(
    inp: JudgeInput, rule: _Rule, ref: np.ndarray, ref_err: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(nonsmooth, consistent): do the central, left and right estimates share one limit?"""
    left, le, right, re = inp.left, inp.left_err, inp.right, inp.right_err
    ref_finite = np.isfinite(ref) & np.isfinite(ref_err)
    sides_finite = np.isfinite(left) & np.isfinite(right)
    consistent = (
        rule.agree(left, le, right, re)
        & rule.agree(ref, ref_err, left, le)
        & rule.agree(ref, ref_err, right, re)
    )
    kink = sides_finite & ref_finite & ~consistent
    kink |= sides_finite & ~ref_finite & ~rule.agree(left, le, right, re)
    return kink | inp.jumps, consistent & sides_finite


def _chosen_reference(
    inp: JudgeInput,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, _Rule, np.ndarray]:
    """The reference per entry (central, or a consistent one-sided estimate where the
    central one is too coarse), its error, the entry's scale, the rule's evidence and
    where ``f`` is not smooth."""
    ref, ref_err = _central_or_a_side(inp)
    scale = np.where(np.isfinite(inp.scale), inp.scale, 0.0)
    scale = np.where(scale > 0, scale, inp.fscale)  # an exactly-0 Jacobian: f's size
    rule = _Rule(inp, scale, inp.fscale)
    nonsmooth, candidate = _smoothness(inp, rule, ref, ref_err)
    # only where the central estimate is too coarse does a consistent, more accurate
    # one-sided estimate take its place (one-sided tableaus converge at first order)
    candidate &= too_coarse(ref_err, scale, inp.eps_w, inp.policy)
    pick_r = candidate & (inp.right_err < ref_err) & (inp.right_err <= inp.left_err)
    pick_l = candidate & ~pick_r & (inp.left_err < ref_err)
    ref = np.where(pick_r, inp.right, np.where(pick_l, inp.left, ref))
    ref_err = np.where(pick_r, inp.right_err, np.where(pick_l, inp.left_err, ref_err))
    return ref, ref_err, scale, rule, nonsmooth


def findings(inp: JudgeInput) -> _Evidence:
    """The reference per entry, its tolerances and the :class:`Findings` of the rule.

    ``vouched`` (the relative accuracy the reference was aimed at) is a floor on
    the reference's error; ``allowance_*`` add measured autodiff round-off;
    ``fscale`` sets the scale where the Jacobian is exactly 0 and the round-off
    a right rule inherits from intermediates of the size of ``f``
    (``1 - tanh(x)^2`` from a ``tanh(x)`` one ulp below 1, ``s (1 - s)`` of a
    saturated sigmoid, the VJP of a layer norm whose O(1) terms cancel): the
    float64 evaluation of the rule (or a float64 working dtype) is MISMATCH,
    and the working-dtype value UNSTABLE, only beyond ``c_ad eps`` times it.
    An entry far smaller than ``f`` per input scale is thus resolved only to
    that round-off, which its tolerance states.
    """
    p = inp.policy
    with np.errstate(all="ignore"):
        ref, ref_err, scale, rule, nonsmooth = _chosen_reference(inp)
        # a finite reference with an infinite error bar is undecided, not non-finite
        ref_value_finite = np.isfinite(ref)
        tol_w, tol_64 = rule.tolerances(ref_err)
        # the accuracy the user asked for widens the tolerances, never narrows them
        asked = inp.expected.allowed(ref)
        tol_w, tol_64 = np.fmax(tol_w, asked), np.fmax(tol_64, asked)
        # the rule's own allowance, before what it inherits from intermediates of the
        # size of f (an entry far below f per input scale is resolved to that on purpose)
        own_tolerance = tol_64 if inp.have64 else tol_w
        lo, hi = np.fmin(inp.left, inp.right), np.fmax(inp.left, inp.right)
        within = (inp.ad >= lo - tol_w) & (inp.ad <= hi + tol_w)
        ad_finite = np.isfinite(inp.ad) & (np.isfinite(inp.ad64) | ~inp.have64)
        # an entry far below the round-off its rule inherits from intermediates of the
        # size of f is decided only to that round-off (the tolerances below), which is
        # all its reference needs to resolve (erf or a softmax saturated to 1e-100)
        resolvable = np.maximum(scale, p.c_ad * F64_EPS * np.maximum(inp.fscale - scale, 0.0))
        coarse = too_coarse(ref_err, resolvable, inp.eps_w, p)
        bad_w = ~(np.abs(inp.ad - ref) <= tol_w) & ~rule.fits_a_side(inp.ad, inp.eps_w, coarse)
        bad_64, tol_f, tol_64, leaning = _rule_findings(
            inp, rule, ref, ref_err, (tol_w, tol_64), bad_w, coarse
        )
        excused = bad_w & ~bad_64 & (np.abs(inp.ad - ref) <= tol_f)
        unresolved = _unresolved(own_tolerance, resolvable, asked, p)
        fd = Findings(
            nonsmooth=nonsmooth,
            ad_finite=ad_finite,
            ref_finite=ref_value_finite,
            bad_64=bad_64,
            bad_w=bad_w & ~excused,
            have64=inp.have64,
            coarse=coarse,
            unresolved=unresolved,
            by_design=np.full(np.shape(inp.ad), inp.expected.surrogate),
            leaning=leaning,
        )
    shown = np.where(excused, tol_f, tol_w)
    if inp.eps_w <= F64_EPS:  # float64 code: the tolerance that decided MISMATCH is shown
        shown = np.fmax(shown, tol_64 if inp.have64 else tol_f)
    return _Evidence(ref, ref_err, shown, tol_64, within, fd)


def _inherited(
    inp: JudgeInput, scale: np.ndarray, exact: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The round-off a right rule inherits from intermediates of the size of ``f`` (in
    units of ``scale``: ``fscale`` beyond it), and where it is not measured.

    It is what a rule computed from ``f``-sized terms can lose (``1 - tanh(u)^2`` at a
    saturated ``u``), an allowance, not a measurement: at an input far below ``f``'s own
    length scale (``expm1(x) / x`` at ``x = 1e-9``, ``|f| / |x|`` = 1e9) it is wide
    enough to pass a rule wrong by 2e-5. ``c_lost`` roundings of it are granted always;
    the rest, up to ``c_ad``, where the rule on mpmath numbers agrees with the reference
    (then it is right in exact arithmetic, and only rounds), never where it disagrees
    (wrong in exact arithmetic), and where the rule did not run on mpmath numbers
    (``unmeasured``) only until it does (see :func:`_rule_findings`).
    """
    inherited = np.maximum(inp.fscale - scale, 0.0)
    known = np.zeros(np.shape(inp.ad), bool) if inp.ad_mp is None else np.isfinite(inp.ad_mp)
    # (a few roundings, c_lost, stay granted where mp disagrees: the reference of an f that
    # is 0 in exact arithmetic, a sum of a layer norm, can be the derivative of its own
    # mp round-off, and the rule's 0 the right value)
    p = inp.policy
    share = np.where(known & ~exact, p.c_lost / p.c_ad, 1.0)
    return inherited * share, ~known


def _rule_findings(
    inp: JudgeInput, rule: _Rule, ref: np.ndarray, ref_err: np.ndarray,
    tols: tuple[np.ndarray, np.ndarray], bad_w: np.ndarray, coarse: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Whether the rule (its float64 evaluation, or float64 code's own) is wrong, the
    working and float64 tolerances with what a right rule inherits and loses, and where
    the rule passes only by an inherited round-off not measured (``leaning``): beyond
    ``c_lost`` roundings of terms of the size of ``f`` (a few, which a right rule loses
    as a matter of course), up to ``c_ad``.

    A right rule is wrong by no more than the round-off it inherits from intermediates of
    the size of f (:func:`_inherited`): in the float64 evaluation (or a float64 working
    dtype) that decides MISMATCH, and in the working dtype that decides UNSTABLE; the
    entries it excuses show that tolerance (and, in a narrow dtype, the digits f itself
    lost: see :meth:`_Rule.hidden`).
    """
    p, (tol_w, tol_64) = inp.policy, tols
    exact = rule.exact(ref, ref_err)
    inherited, unmeasured = _inherited(inp, rule.scale, exact)
    # a float64 evaluation of the rule (float64 code's own, or a narrow check's)
    # is allowed its own measured round-off only where the rule is exact
    rounded64 = np.where(exact, rule.rounded(), 0.0)
    # float64 code inherits f's own lost digits only where its rule is exact
    if inp.eps_w <= F64_EPS:  # its own measured round-off too (see _Rule.rounded)
        hidden = np.maximum(np.where(exact, rule.hidden(), 0.0), rounded64)
    else:
        hidden = rule.hidden()
    tol_f = tol_w + p.c_ad * inp.eps_w * inherited + hidden
    # the exact rule clears an entry only where its value is within what the working
    # dtype allows anyway: the mp evaluation runs each primitive exactly, so a wrong
    # kernel (JAX's digamma gradient below 0, off by more than 1) looks right there
    value64 = inp.ad64 if inp.have64 else inp.ad
    diff64 = np.abs(value64 - ref)
    cleared = exact & (diff64 <= tol_f)
    if inp.have64:  # (float64 code evaluates its own rule in float64)
        own = hidden if inp.eps_w <= F64_EPS else rounded64
        lent = (p.c_ad - p.c_lost) * F64_EPS * inherited  # beyond a few roundings
        tol_64 = tol_64 + p.c_ad * F64_EPS * inherited + rule.hidden64() + own
        fits = rule.fits_a_side(inp.ad64, F64_EPS, coarse)
        passes = (diff64 <= tol_64) | fits | cleared
        leaning = (diff64 <= tol_64) & ~(diff64 <= tol_64 - lent) & ~fits & ~cleared
        return ~passes, tol_f, tol_64, leaning & unmeasured
    if inp.eps_w <= F64_EPS:  # float64 code: its own evaluation is the float64 one
        lent = (p.c_ad - p.c_lost) * inp.eps_w * inherited
        leaning = bad_w & (diff64 <= tol_f) & ~(diff64 <= tol_f - lent) & ~cleared
        return bad_w & ~(diff64 <= tol_f) & ~cleared, tol_f, tol_64, leaning & unmeasured
    # a narrow dtype with no float64 evaluation of the rule: f's size says nothing of the
    # rule's own intermediates (the gradient of a sum inherits none of the sum's
    # round-off), so nothing is excused
    return bad_w & ~cleared, tol_f, tol_64, np.zeros(np.shape(bad_w), bool)


def _unresolved(
    deciding: np.ndarray, scale: np.ndarray, asked: np.ndarray, policy: Policy
) -> np.ndarray:
    """Where the rule's own tolerance (the one that decides MISMATCH, before the round-off
    a right rule inherits from intermediates of the size of ``f``) is of the size of
    what the entry is resolved to: its scale, or, for an entry far below ``f`` per input
    scale, the float64 round-off of ``f``-sized terms (``scale`` here).

    Wider than ``policy.widest_tolerance`` times the entry's scale (64 bfloat16
    epsilons are half of it), the comparison would pass a rule wrong by a share of
    its value as large: nothing tells a wrong rule from round-off, and the entry is
    INCONCLUSIVE, never PASS. A tolerance the user asked for (``rtol``/``atol``) at
    least as wide is theirs to make, and is not counted.
    """
    with np.errstate(invalid="ignore"):
        wide = ~(deciding <= policy.widest_tolerance * scale) & np.isfinite(deciding)
        return wide & (scale > 0) & ~(asked >= deciding)


def overall(entries: Entries, nonsmooth: str, surrogate: bool = False) -> tuple[Verdict, bool]:
    """The worst verdict of ``entries`` and whether the check passes under ``nonsmooth``.

    ``nonsmooth`` is ``check``'s option: ``"allow"`` passes NONSMOOTH,
    ``"within"`` passes it when every entry at a kink lies within its one-sided
    derivatives, anything else passes PASS only. ``surrogate`` (``check``'s option):
    INCONCLUSIVE entries, the rule's differences by design, pass too; the verdict
    stays INCONCLUSIVE (the rule was not judged), ``ok`` is True.
    """
    if surrogate:
        undecided = entries.status == SEVERITY[Verdict.INCONCLUSIVE]
        status = np.where(undecided, SEVERITY[Verdict.PASS], entries.status)
        verdict, ok = overall(replace(entries, status=status), nonsmooth)
        return (Verdict.INCONCLUSIVE if ok and np.any(undecided) else verdict), ok
    worst = int(entries.status.max()) if entries.status.size else 0
    verdict = {v: k for k, v in SEVERITY.items()}[worst]
    if nonsmooth == "allow":
        return verdict, verdict in (Verdict.PASS, Verdict.NONSMOOTH)
    if nonsmooth == "within":
        at_kink = entries.status == SEVERITY[Verdict.NONSMOOTH]
        within = bool(np.all(entries.within_one_sided[at_kink]))
        return verdict, verdict == Verdict.PASS or (verdict == Verdict.NONSMOOTH and within)
    return verdict, verdict == Verdict.PASS


_FIELDS = (
    "autodiff",
    "autodiff64",
    "reference",
    "reference_error",
    "left",
    "left_error",
    "right",
    "right_error",
    "tolerance",
    "tolerance64",
    "status",
    "within_one_sided",
)


def concat_entries(blocks: list[Entries], modes: list[str]) -> Entries:
    """One :class:`Entries` from one block per mode (names prefixed VJP/JVP when several)."""
    if len(blocks) == 1:
        return blocks[0]
    names = []
    for md, b in zip(modes, blocks, strict=True):
        tag = "VJP" if md == "rev" else "JVP"
        names += [f"{tag} {nm}" for nm in b.names]
    fields = {name: np.concatenate([getattr(b, name) for b in blocks]) for name in _FIELDS}
    return Entries(names=names, **fields, leaning=np.concatenate([leaning(b) for b in blocks]))


def leaning(e: Entries) -> np.ndarray:
    """``(K,)`` bool: the entries :attr:`Entries.leaning` marks (none where it is None)."""
    return np.zeros(e.status.shape, bool) if e.leaning is None else np.asarray(e.leaning)


def split_entries(e: Entries, modes: int) -> list[Entries]:
    """The per-mode blocks of :func:`concat_entries`'s entries (names kept as they are)."""
    k = e.status.size // modes
    return [
        Entries(names=e.names[i * k : (i + 1) * k],
                **{f: getattr(e, f)[i * k : (i + 1) * k] for f in _FIELDS},
                leaning=leaning(e)[i * k : (i + 1) * k])
        for i in range(modes)
    ]  # fmt: skip
