"""A float64 run of ``f`` that is the odd one out: code that depends on the dtype.

The float64 reference, and the float64 evaluation of the rule, run the user's code again
on float64 inputs (PyTorch, JAX, NumPy). Code that reads its dtype computes another
function there: ``-log(p + finfo(p.dtype).eps)`` adds 1.2e-7 in float32 and 2.2e-16 in
float64, and at ``p = 1e-7`` the two derivatives differ by a factor of two. Judged
against the float64 run, the right float32 rule looks wrong (MISMATCH, or UNSTABLE).

Where ``f``'s values measure the float64 run to be another function (its value far from
the working one, and the working program on mpmath numbers at the working value, see
:func:`measured_apart`), the check is judged on the working dtype alone whatever its
entries' verdicts: a rule that is the float64 run's derivative (an RMS norm's rule that
forgets ``finfo(x.dtype).eps``) agrees with the float64 reference, and is not passed on it.

Otherwise, where entries fail against the float64 reference (or against mp), the check
runs again on the working dtype alone: its own finite differences, escalated to mp only
where the mp program is the working one (PyTorch captures the program it
differentiates). When,
at a failing entry, autodiff agrees with the working-dtype check, and the float64 run
is another function there (the two references disagree beyond both error bars and the
working tolerance, or the float64 evaluation of the rule differs from autodiff by more
than that tolerance while autodiff agrees with the reference), the working-dtype check
is the verdict, with a note that says so. A wrong rule is as wrong in both dtypes and
stays wrong; a rule that lost digits in the working dtype (UNSTABLE) is rechecked, but
both references are of one function there and agree, so it stays UNSTABLE. The float64
rule's own round-off at an entry that is exactly 0 (a layer norm's sum, cancelling to
1e-15), with the working rule exactly 0, is the odd one out in the same way, and its
entries pass on the working dtype too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..backends.base import Target
from ..reference.mp import expected_mp_evaluations, mp_seconds_at_least
from ..report import SEVERITY, Entries, Verdict
from .assess import Assessment, assess
from .autodiff import Setting
from .plan import Plan, make_plan
from .prepare import Options, Prepared
from .reference import Reference, compute_reference

__all__ = ["WorkingRecheck", "recheck_in_working_dtype", "working_only", "wrong_in_both"]

_AGREE = (SEVERITY[Verdict.PASS], SEVERITY[Verdict.NONSMOOTH])
_FLOAT64 = ("evaluate64", "vjp64", "jvp64")
_MP = ("evaluate_mp", "vjp_mp")
_MP_DIGITS = 30


@dataclass(frozen=True)
class WorkingRecheck:
    """The check run again on the working dtype alone, ready for the report; ``measured``:
    adopted because ``f``'s values measure the float64 run to be another function
    (:func:`measured_apart`), not only at failing entries."""

    prep: Prepared
    plan: Plan
    ref: Reference
    judged: Assessment
    measured: bool = False


def working_only(target: Target, mp_can_serve: bool = True) -> Target:
    """A copy of ``target`` without its float64 evaluations, and without its mp ones
    unless they are of the working-dtype program (see :func:`mp_follows_working`) and
    ``mp_can_serve`` (the working-dtype check could use them: else the mp evaluation
    that tells is not run, which at n = 1e6 takes a minute)."""
    keep_mp = mp_can_serve and mp_follows_working(target)
    dropped = {"forward"} | (set() if keep_mp else {"mp", "rule_mp"})
    out = replace(target, deferred={k: v for k, v in target.deferred.items() if k not in dropped})
    for name in _FLOAT64 + (() if keep_mp else _MP):
        setattr(out, name, None)
    return out


def mp_follows_working(target: Target) -> bool:
    """Whether ``f`` on mpmath numbers at the point is closer to its working-dtype value
    than to its float64 run at every output, and strictly at one: the mp program is the
    working one (PyTorch captures the program it differentiates), not the float64 run's."""
    try:
        if target.evaluate64 is None or not target.mp_mode():
            return False
        assert target.evaluate_mp is not None
        y_mp = np.array([float(v) for v in target.evaluate_mp(
            target.x0, np.zeros_like(target.x0), _MP_DIGITS)])  # fmt: skip
        y64 = np.asarray(target.evaluate64(target.x0[None, :])[0], dtype=np.float64)
    except Exception:  # noqa: BLE001 - no mp evaluation here: none kept
        return False
    with np.errstate(invalid="ignore"):
        to_working, to_64 = np.abs(y_mp - target.y0), np.abs(y_mp - y64)
    return bool(np.all(to_working <= to_64) and np.any(to_working < to_64))


APART_ULPS = 64.0
"""The float64 run of ``f`` is a candidate for another function where its value differs
from the working program's by more than this many of the working dtype's ulps of
``|f|`` (far beyond the rounding of a literal to the working dtype, a few ulps)."""

CLOSER = 8.0
"""... and it is another function where the working program run on mpmath numbers is
this many times closer to the working value than to the float64 run, at every output
where they are apart (a working value that is only round-off of the same function is as
far from mp as the float64 run is close to it)."""


def measured_apart(target: Target, plan: Plan, opts: Options) -> str | None:
    """The note saying that the float64 run of ``f`` computes another function at ``x``
    (code that reads its dtype: ``finfo(x.dtype).eps``, a branch on the dtype), or None.

    Measured on ``f``'s values at ``x``, not on any entry's verdict, so that a rule that
    is the float64 run's derivative is not passed on it: the float64 value lies more
    than :data:`APART_ULPS` working ulps from the working one, and the working program on
    mpmath numbers (``target.working_mp_value``, which PyTorch and JAX run) is
    :data:`CLOSER` times closer to the working value than to the
    float64 run there, and resolved (:data:`RESOLVED`). Where the values agree this
    costs nothing; the mp evaluations run only where they are apart, within the mp
    budget (``opts.policy.mp_auto_seconds``).

    Parameters
    ----------
    target : Target
        The implementation; ``target.evaluate64`` is not None and its working dtype is
        narrower than float64.
    plan : Plan
        The plan of the check as run (``plan.f0`` is ``f``'s float64 value at ``x`` where
        its method is ``"float64"``).
    opts : Options
        The check's options (its policy's mp budget).

    Returns
    -------
    str or None
        The note (it gives the float64, working and mp values of the first output apart),
        or None where nothing was measured apart. It raises nothing of its own: an mp
        evaluation that fails measures nothing.
    """
    assert target.evaluate64 is not None
    # the float64 reference's plan holds f's float64 value at x already
    y64 = plan.f0 if plan.method == "float64" else target.evaluate64(target.x0[None, :])[0]
    y64, yw = np.asarray(y64, dtype=np.float64), np.asarray(target.y0, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        far = np.abs(y64 - yw) > APART_ULPS * target.eps * np.maximum(np.abs(yw), np.abs(y64))
    if not np.any(far) or mp_seconds_at_least(target.n, 1) > opts.policy.mp_auto_seconds:
        return None
    y_mp = _working_program_on_mp(target, _MP_DIGITS)
    if y_mp is None:
        return None
    with np.errstate(invalid="ignore"):
        closer = CLOSER * np.abs(y_mp - yw) < np.abs(y_mp - y64)
    if not np.all(closer[far]) or not _resolved(target, y_mp):
        return None
    i = int(np.flatnonzero(far)[0])
    dtype = target.working_dtype
    return (
        f"the float64 run of f computes another function at x: its value is {y64[i]:.9g} "
        f"where the {dtype} program gives {yw[i]:.9g} (output {i}), and the {dtype} program "
        f"on mpmath numbers gives {y_mp[i]:.9g}. Code that reads the dtype (a constant "
        "such as finfo(x.dtype).eps, a branch on the dtype) does this; the float64 "
        f"reference is no reference for the {dtype} code, which was judged on the {dtype} "
        f"program alone: {dtype} differences, with their wider error bars, and mp where "
        f"the {dtype} program runs on mpmath numbers"
    )


RESOLVED = 1e-10
"""The working program's value on mpmath numbers is a value where it agrees at
:data:`_MP_DIGITS` digits and at twice as many to this relative amount: a value that
cancels to 0 (a sum of a layer norm) is its round-off at any number of digits (1.9e-28
at 30, 1e-58 at 60), and under a ReLU the working program's 0 sits closer to it than the
float64 run's 1.6e-13 does without being another function."""


def _working_program_on_mp(target: Target, dps: int) -> np.ndarray | None:
    """``f`` at ``x0`` on mpmath numbers at ``dps`` digits as the working program, in
    float64, or None where the backend runs no such program (``target.working_mp_value``)."""
    if target.working_mp_value is None:
        return None
    try:
        y = target.working_mp_value(dps)
    except Exception:  # noqa: BLE001 - no mp evaluation: nothing measured
        return None
    return None if y is None else np.array([float(v) for v in np.ravel(y)])


def _resolved(target: Target, y: np.ndarray) -> bool:
    """Whether ``y``, the working program at :data:`_MP_DIGITS` digits, agrees with its
    value at twice as many (:data:`RESOLVED`)."""
    y2 = _working_program_on_mp(target, 2 * _MP_DIGITS)
    if y2 is None or y2.shape != y.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(y - y2) <= RESOLVED * np.maximum(np.abs(y), np.abs(y2))))


def recheck_in_working_dtype(
    prep: Prepared, plan: Plan, ref: Reference, judged: Assessment, opts: Options
) -> WorkingRecheck | None:
    """The check on the working dtype alone, where the float64 run is another function.

    Parameters
    ----------
    prep, plan, ref : Prepared, Plan, Reference
        The check as run (a float64 or mp reference).
    judged : Assessment
        Its judged entries.
    opts : Options
        The options; only ``reference="auto"`` is rechecked.

    Returns
    -------
    WorkingRecheck or None
        The working-dtype check, whose verdict is the check's, wherever ``f``'s values
        measure the float64 run to be another function (:func:`measured_apart`),
        whatever the entries' verdicts. Otherwise None when no failing entry could be
        explained so (see :func:`_explicable`), when some entry is wrong in both dtypes
        alike (:func:`wrong_in_both`: then the rule is wrong whatever the float64 run
        computes, and the check is decided), when the reference already is the working
        dtype's (or the working dtype is float64, or the user chose the reference), or
        when the working-dtype check does not show another function; else the
        working-dtype check.
    """
    target = prep.target
    failing = _explicable(judged.entries)
    if (
        opts.reference != "auto"
        or ref.method == "working"
        or target.working_dtype == "float64"
        or target.evaluate64 is None
    ):
        return None
    apart = measured_apart(target, plan, opts)
    if apart is None and (not np.any(failing) or np.any(wrong_in_both(judged.entries))):
        return None
    # mp serves the working-dtype check only as its reference (a small check) or to
    # re-examine entries in doubt, which a wide input's cost rules out before it runs
    along_all = mp_seconds_at_least(target.n, expected_mp_evaluations(plan.d))
    w_target = working_only(target, plan.small or along_all <= opts.policy.mp_auto_seconds)
    w_prep = replace(prep, target=w_target)
    # working-dtype differences, escalated to mp where that is the working program's
    w_opts = replace(opts, reference="auto" if w_target.evaluate_mp is not None else "working")
    w_plan = make_plan(w_prep.target, w_opts)
    w_ref = compute_reference(w_prep.target, w_plan, w_opts, w_prep)
    st = Setting(w_ref.dd, w_plan.full, w_plan.s, w_plan.W, w_plan.rng_state, w_plan.ref_eps,
                 w_ref.vouched, w_plan.f0)  # fmt: skip
    w_judged = assess(w_prep, st, w_ref.method, w_opts)
    if apart is not None:  # the float64 run is measured to be another function: not a judge
        note = apart
    else:
        split = another_function(judged.entries, w_judged.entries, failing)
        if not np.any(split):
            return None
        note = _note(judged.entries, w_judged.entries, split, target.working_dtype)
    judged_w = replace(w_judged, notes=(note, *w_judged.notes))
    return WorkingRecheck(w_prep, w_plan, w_ref, judged_w, measured=apart is not None)


def _explicable(e: Entries) -> np.ndarray:
    """``(K,)`` bool: failing entries that another float64 function could explain: an
    UNSTABLE entry (the float64 rule agrees with the reference, autodiff does not), or a
    MISMATCH at which autodiff agrees with the reference but the float64 evaluation of
    the rule does not. A MISMATCH of both is a wrong rule, and is not rechecked."""
    with np.errstate(invalid="ignore"):
        agrees = np.abs(e.autodiff - e.reference) <= e.tolerance
    unstable = e.status == SEVERITY[Verdict.UNSTABLE]
    return unstable | ((e.status == SEVERITY[Verdict.MISMATCH]) & agrees)


def wrong_in_both(e: Entries) -> np.ndarray:
    """``(K,)`` bool: MISMATCH entries at which the working-dtype and the float64
    evaluations of the rule agree with each other (within the working tolerance) and
    both lie beyond it from the reference.

    Code that reads its dtype computes another function in float64, so its two
    evaluations of a right rule differ from each other where the float64 reference
    differs from the working program's; two evaluations that agree and are both wrong
    are a wrong rule in both programs. One such entry decides the check (MISMATCH):
    no frame that changes the reference can make the rule right there.
    """
    with np.errstate(invalid="ignore"):
        both_far = (e.difference > e.tolerance) & (np.abs(e.autodiff64 - e.reference) > e.tolerance)
        alike = np.abs(e.autodiff64 - e.autodiff) <= e.tolerance
    return (e.status == SEVERITY[Verdict.MISMATCH]) & both_far & alike


def another_function(wide: Entries, working: Entries, failing: np.ndarray) -> np.ndarray:
    """``(K,)`` bool: failing entries that the float64 run of ``f`` explains, and at
    which autodiff agrees with the working-dtype check (``working``).

    The float64 run is another function at an entry where the float64 (or mp)
    reference of ``wide`` and the working-dtype reference differ by more than both
    error bars and the working tolerance, or where autodiff agrees with the reference
    but the float64 evaluation of the rule differs from autodiff by more than that
    tolerance (a wrong rule is as wrong in both dtypes). Autodiff agrees with the
    working-dtype check where that check is PASS, or NONSMOOTH with autodiff within its
    tolerance of the central difference: a NONSMOOTH entry whose working-dtype
    differences crossed a kink that the float64 ones did not says nothing of another
    function.
    """
    if wide.status.shape != working.status.shape:
        return np.zeros(failing.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        gap = np.abs(wide.reference - working.reference)
        bars = 2.0 * (wide.reference_error + working.reference_error) + working.tolerance
        refs_apart = gap > bars
        agrees = np.abs(wide.autodiff - wide.reference) <= wide.tolerance
        rule_apart = agrees & (np.abs(wide.autodiff64 - wide.autodiff) > wide.tolerance)
        # autodiff agrees with the working-dtype check: PASS there, or NONSMOOTH with its
        # value within the tolerance of the central difference (a working-dtype
        # difference that crossed a kink the float64 one did not is no other function)
        near = np.abs(working.autodiff - working.reference) <= working.tolerance
        agrees_w = (working.status == _AGREE[0]) | ((working.status == _AGREE[1]) & near)
    return failing & (refs_apart | rule_apart) & agrees_w


def _note(wide: Entries, working: Entries, split: np.ndarray, dtype: str) -> str:
    i = int(np.flatnonzero(split)[0])
    k = int(np.sum(split))
    rule = wide.autodiff64[i]
    in64 = f"reference {wide.reference[i]:.7g} ± {wide.reference_error[i]:.2g}" + (
        f", rule {rule:.7g}" if np.isfinite(rule) else ""
    )
    return (
        f"at {k} entr{'y' if k == 1 else 'ies'} the float64 run of f is the odd one out: "
        f"autodiff agrees with the {dtype} check, and the float64 reference or the float64 "
        f"evaluation of the rule does not (worst {wide.names[i]}: in float64, {in64}; in "
        f"{dtype}, differences {working.reference[i]:.7g} ± "
        f"{working.reference_error[i]:.2g}, autodiff {working.autodiff[i]:.7g}). Code that "
        "reads the dtype computes another function in float64 (a constant such as "
        "finfo(x.dtype).eps, a branch on the dtype); a float64 rule's own round-off at an "
        f"entry that is exactly 0 looks the same. The entries were judged on the {dtype} "
        f"program alone: {dtype} differences, with their wider error bars, and mp where "
        f"the {dtype} program runs on mpmath numbers"
    )
