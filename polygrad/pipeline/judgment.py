"""One judgment: the check's state, the passes run on it, and the one loop that runs them.

:func:`polygrad.check` and :func:`polygrad.compare` reach a verdict the same way:
the implementation's autodiff is assessed against the reference
(:func:`~polygrad.pipeline.assess.assess`), then the passes of :data:`PASSES` run,
in order, each on the state the previous one left:

* ``symmetric-subspace``: failures inside a symmetric matrix argument, checked along
  symmetric directions where the convention applies
  (:mod:`polygrad.pipeline.subspace`);
* ``working-dtype``: failures of a float64 run that is another function than the
  working-dtype program (:mod:`polygrad.pipeline.dtype_dependence`);
* ``kinks-off-the-axes``: MISMATCH entries at a kink that the coordinate directions
  do not see (:func:`polygrad.pipeline.kinks.hidden_kinks`);
* ``kinks-at-the-point``: MISMATCH entries where only an intermediate sits at a kink
  (:func:`polygrad.pipeline.kinks.kinks_of_intermediates`).

Each pass states when it ran and whether it changed what was compared
(:class:`PassRecord`); the records travel in the state, and the report's details
list them, so a reader sees which measurements the verdict rests on. In
:func:`polygrad.compare` every implementation runs the same loop: the reference
(and any new reference a pass needs, along new directions) comes from the
implementation the comparison's reference was computed from (``ref_prep``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .assess import Assessment, assess
from .autodiff import Setting
from .dtype_dependence import recheck_in_working_dtype
from .kinks import hidden_kinks, kinks_of_intermediates
from .plan import Plan
from .prepare import Options, Prepared
from .reference import Reference
from .subspace import recheck_on_subspace

__all__ = ["PASSES", "CheckState", "Pass", "PassRecord", "judgment", "run_passes", "setting_of"]


@dataclass(frozen=True)
class PassRecord:
    """What one pass of the judgment did.

    Attributes
    ----------
    name : str
        The pass (``"symmetric-subspace"``, ``"working-dtype"``, ...).
    changed : bool
        Whether it changed the judged state (what was compared, or entries' status).
    """

    name: str
    changed: bool


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
        The judged entries, with their notes.
    ref_prep : Prepared
        The implementation the reference comes from (``prep`` itself in
        :func:`polygrad.check`).
    passes : tuple of PassRecord
        The passes run so far, in order.
    """

    prep: Prepared
    plan: Plan
    ref: Reference
    judged: Assessment
    ref_prep: Prepared
    passes: tuple[PassRecord, ...] = ()


Pass = Callable[[CheckState, Options], CheckState | None]
"""A pass: the state with what it found, or None when it changes nothing."""


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
    return replace(state, prep=w.prep, plan=w.plan, ref=w.ref, judged=w.judged, ref_prep=w.prep)


def _kinks_off_the_axes(state: CheckState, opts: Options) -> CheckState | None:
    judged = hidden_kinks(state.prep, state.plan, state.judged, opts, state.ref_prep)
    return None if judged is None else replace(state, judged=judged)


def _kinks_at_the_point(state: CheckState, opts: Options) -> CheckState | None:
    judged = kinks_of_intermediates(state.prep, state.judged, opts)
    return None if judged is None else replace(state, judged=judged)


PASSES: tuple[tuple[str, Pass], ...] = (
    ("symmetric-subspace", _subspace),
    ("working-dtype", _working_dtype),
    ("kinks-off-the-axes", _kinks_off_the_axes),
    ("kinks-at-the-point", _kinks_at_the_point),
)
"""The passes of every judgment, in the order they run."""


def run_passes(
    state: CheckState, opts: Options, passes: tuple[tuple[str, Pass], ...] = PASSES
) -> CheckState:
    """Run ``passes`` on ``state`` in order; each record says whether it changed it."""
    for name, fn in passes:
        found = fn(state, opts)
        changed = found is not None
        state = found if found is not None else state
        state = replace(state, passes=(*state.passes, PassRecord(name, changed)))
    return state


def judgment(
    prep: Prepared, plan: Plan, ref: Reference, opts: Options, ref_prep: Prepared | None = None
) -> CheckState:
    """Assess ``prep``'s autodiff against ``ref`` and run every pass: the one loop.

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
    judged = assess(prep, setting_of(plan, ref), ref.method, opts, against)
    return run_passes(CheckState(prep, plan, ref, judged, source), opts)
