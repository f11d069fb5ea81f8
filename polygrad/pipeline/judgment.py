"""One judgment: what is compared, the evidence gathered on it, and the one rule that decides.

:func:`polygrad.check` and :func:`polygrad.compare` reach a verdict the same way,
through :func:`judgment`:

1. **Assess.** The implementation's autodiff against the reference, entry by entry
   (:func:`~polygrad.pipeline.assess.assess`: the verdict table of
   :mod:`polygrad.pipeline.judge`, with the round-off allowance and mp for entries in
   doubt).
2. **Frames** (:data:`FRAMES`) change *what* is compared, each only on a measured or
   declared precondition, which its note states:

   * ``symmetric-subspace``: failures inside a symmetric matrix argument that an
     operation defined on symmetric matrices reads (or that ``symmetric=`` declares),
     checked along symmetric directions (:mod:`polygrad.pipeline.subspace`);
   * ``working-dtype``: the whole check where ``f``'s values measure the float64 run
     to be another function than the working-dtype program, or failures that such a
     function explains (:mod:`polygrad.pipeline.dtype_dependence`).

3. **Evidence** (:data:`EVIDENCE`): passes that measure a fact about some entries of
   the framed comparison and never change a verdict themselves. Each reads the same
   framed state, so none sees another's result:

   * ``kinks-off-the-axes``: a kink of ``f`` along a direction between the axes, at
     entries that fail (:func:`polygrad.pipeline.kinks.hidden_kinks`);
   * ``kinks-at-the-point``: an intermediate of ``f`` exactly at a kink, where the rule
     agrees a few ulps away (:func:`polygrad.pipeline.kinks.kinks_of_intermediates`).

4. **Decide** (:func:`decide`): one rule reads all the evidence at once. An entry with
   a kink measured by any pass is NONSMOOTH; a note that an entry is *not* at a kink
   is dropped where another pass measured one. The rule is a union, so the order of
   the evidence passes cannot change a verdict (a test runs them in every order).

Every step leaves a :class:`PassRecord` in the state. In :func:`polygrad.compare`
each implementation runs the same loop, the reference along new directions coming
from the implementation the comparison's reference was computed from (``ref_prep``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..report import SEVERITY, Verdict
from .assess import Assessment, assess, mismatch_along
from .autodiff import Setting
from .dtype_dependence import recheck_in_working_dtype
from .judge import split_entries
from .kinks import hidden_kinks, kinks_of_intermediates
from .plan import Plan
from .prepare import Options, Prepared
from .reference import Reference
from .subspace import recheck_on_subspace

__all__ = [
    "EVIDENCE",
    "FRAMES",
    "CheckState",
    "Evidence",
    "PassRecord",
    "decide",
    "judgment",
    "rests_on_deferred",
    "setting_of",
]

_NONSMOOTH = SEVERITY[Verdict.NONSMOOTH]


@dataclass(frozen=True)
class PassRecord:
    """What one frame or evidence pass of the judgment did.

    Attributes
    ----------
    name : str
        The pass (``"symmetric-subspace"``, ``"kinks-off-the-axes"``, ...).
    changed : bool
        A frame: whether its precondition held and it changed what is compared. An
        evidence pass: whether it measured anything.
    """

    name: str
    changed: bool


@dataclass(frozen=True)
class Evidence:
    """A fact an evidence pass measured about the entries of the framed comparison.

    Attributes
    ----------
    source : str
        The pass that measured it.
    kink : ndarray of bool, shape (K,)
        Entries at which a kink of ``f`` (or of an intermediate) was measured.
    not_a_kink : ndarray of bool, shape (K,)
        Entries the pass looked at and found at no kink (its notes say why they fail).
    notes : tuple of str
        What the pass measured, in words, with its numbers.
    """

    source: str
    kink: np.ndarray
    not_a_kink: np.ndarray
    notes: tuple[str, ...]


@dataclass(frozen=True)
class CheckState:
    """Everything the verdict of one implementation rests on.

    Attributes
    ----------
    prep : Prepared
        The implementation judged.
    plan : Plan
        The directions and arithmetic of the reference.
    ref : Reference
        The reference.
    judged : Assessment
        The judged entries, with their notes (after :func:`decide`, the verdicts).
    ref_prep : Prepared
        The implementation the reference comes from (``prep`` itself in
        :func:`polygrad.check`).
    passes : tuple of PassRecord
        The frames and evidence passes run, in order.
    float64_apart : bool
        The working-dtype frame measured the float64 run of ``f`` to be another function
        (:func:`~polygrad.pipeline.dtype_dependence.measured_apart`): ``ref`` is then the
        working program's, and :func:`polygrad.compare` judges every implementation
        against it.
    """

    prep: Prepared
    plan: Plan
    ref: Reference
    judged: Assessment
    ref_prep: Prepared
    passes: tuple[PassRecord, ...] = ()
    float64_apart: bool = False


Frame = Callable[[CheckState, Options], CheckState | None]
"""A frame: the state comparing something else, or None when its precondition fails."""
EvidencePass = Callable[[CheckState, Options], Evidence | None]
"""An evidence pass: what it measured on the state, or None when it measured nothing."""


def setting_of(plan: Plan, ref: Reference) -> Setting:
    """The :class:`Setting` (reference and directions) a plan and its reference give."""
    return Setting(ref.dd, plan.full, plan.s, plan.W, plan.rng_state, plan.ref_eps,
                   ref.vouched, plan.f0)  # fmt: skip


def _subspace(state: CheckState, opts: Options) -> CheckState | None:
    again = recheck_on_subspace(state.prep, state.plan, state.ref, state.judged, opts,
                                ref_prep=state.ref_prep)  # fmt: skip
    if again is None:
        return None
    return replace(state, plan=again.plan, ref=again.ref, judged=again.judged)


def _working_dtype(state: CheckState, opts: Options) -> CheckState | None:
    w = recheck_in_working_dtype(state.prep, state.plan, state.ref, state.judged, opts)
    if w is None:
        return None
    # the working-dtype reference is the implementation's own program: later passes use it
    return replace(state, prep=w.prep, plan=w.plan, ref=w.ref, judged=w.judged, ref_prep=w.prep,
                   float64_apart=state.float64_apart or w.measured)  # fmt: skip


def _as_evidence(source: str, before: Assessment, after: Assessment | None) -> Evidence | None:
    """What a kink pass added to ``before``: the entries it made NONSMOOTH, its notes."""
    if after is None:
        return None
    kink = (after.entries.status == _NONSMOOTH) & (before.entries.status != _NONSMOOTH)
    notes = after.notes[len(before.notes) :]
    # a pass that looked and found no kink leaves the entries as they were, with a note
    not_a_kink = np.zeros_like(kink) if kink.any() else before.entries.status > _NONSMOOTH
    return Evidence(source, kink, not_a_kink, tuple(notes))


def _kinks_off_the_axes(state: CheckState, opts: Options) -> Evidence | None:
    found = hidden_kinks(state.prep, state.plan, state.judged, opts, state.ref_prep)
    return _as_evidence("kinks-off-the-axes", state.judged, found)


def _kinks_at_the_point(state: CheckState, opts: Options) -> Evidence | None:
    found = kinks_of_intermediates(state.prep, state.judged, opts)
    return _as_evidence("kinks-at-the-point", state.judged, found)


FRAMES: tuple[tuple[str, Frame], ...] = (
    ("symmetric-subspace", _subspace),
    ("working-dtype", _working_dtype),
)
"""The frames, in the order they run (each on what the previous one compares)."""

EVIDENCE: tuple[tuple[str, EvidencePass], ...] = (
    ("kinks-off-the-axes", _kinks_off_the_axes),
    ("kinks-at-the-point", _kinks_at_the_point),
)
"""The evidence passes; each reads the framed state, none another's result."""


def decide(judged: Assessment, evidence: list[Evidence]) -> Assessment:
    """The one rule over all the evidence: NONSMOOTH wherever any pass measured a kink.

    Parameters
    ----------
    judged : Assessment
        The framed comparison's entries as the verdict table judged them.
    evidence : list of Evidence
        Every evidence pass's findings, in any order (the result does not depend on it).

    Returns
    -------
    Assessment
        ``judged`` with the kink entries NONSMOOTH (and not within their one-sided
        derivatives, which the kink notes give), and the notes of all the evidence,
        except a pass's "not at a kink" notes where another pass measured a kink at
        every entry they are about.
    """
    e = judged.entries
    kink = np.zeros(e.status.shape, bool)
    for ev in evidence:
        kink |= ev.kink
    notes = [n for ev in evidence if not _overruled(ev, kink) for n in ev.notes]
    entries = replace(e, status=np.where(kink, _NONSMOOTH, e.status),
                      within_one_sided=e.within_one_sided & ~kink)  # fmt: skip
    return replace(judged, entries=entries, notes=(*judged.notes, *notes))


def _overruled(ev: Evidence, kink: np.ndarray) -> bool:
    """Whether every entry ``ev`` found at no kink is at a kink that another pass measured."""
    return bool(ev.not_a_kink.any() and np.all(kink[ev.not_a_kink]))


def run_frames(state: CheckState, opts: Options) -> CheckState:
    """Run every frame in order; each record says whether its precondition held."""
    for name, frame in FRAMES:
        found = frame(state, opts)
        state = found if found is not None else state
        state = replace(state, passes=(*state.passes, PassRecord(name, found is not None)))
    return state


def gather_and_decide(
    state: CheckState, opts: Options, passes: tuple[tuple[str, EvidencePass], ...] = EVIDENCE
) -> CheckState:
    """Run every evidence pass on ``state``, then :func:`decide` over all of it."""
    found = [(name, fn(state, opts)) for name, fn in passes]
    records = tuple(PassRecord(name, ev is not None) for name, ev in found)
    judged = decide(state.judged, [ev for _, ev in found if ev is not None])
    return replace(state, judged=judged, passes=(*state.passes, *records))


def judgment(
    prep: Prepared, plan: Plan, ref: Reference, opts: Options, ref_prep: Prepared | None = None
) -> CheckState:
    """Assess ``prep``'s autodiff against ``ref``, frame, gather evidence, decide: the one loop.

    Parameters
    ----------
    prep : Prepared
        The implementation judged.
    plan, ref : Plan, Reference
        The reference and the plan it was computed on.
    opts : Options
        The check's options.
    ref_prep : Prepared, optional
        The implementation the reference comes from (default: ``prep``).

    Returns
    -------
    CheckState
        The judged state, ready for :func:`polygrad.pipeline.check.make_report`.
    """
    source = prep if ref_prep is None else ref_prep
    against = None if source is prep else source.target
    for staged in (opts.mp_in_stages, False):
        o = replace(opts, mp_in_stages=staged)
        judged = assess(prep, setting_of(plan, ref), ref.method, o, against)
        framed = run_frames(CheckState(prep, plan, ref, judged, source), o)
        state = gather_and_decide(framed, o)
        if not staged or not rests_on_deferred(state.judged, len(prep.modes)):
            break
    return state


def rests_on_deferred(judged: Assessment, modes: int = 1) -> bool:
    """Whether mp stopped after the directions of the worst entries (their MISMATCH
    decided the check) but no MISMATCH is left along them after the evidence (a kink
    measured there): the check would then fail on finite differences alone, and every
    direction in doubt is re-examined (:func:`judgment` assesses again, unstaged).
    ``modes``: the blocks (one per mode) the entries concatenate."""
    esc = judged.escalation
    if esc is None or not esc.deferred:
        return False
    return not mismatch_along(split_entries(judged.entries, modes), esc.d, esc.directions)
