"""The tunables of a check, in one documented, frozen object.

Every number that shapes how :func:`polygrad.check` and
:func:`polygrad.compare` reach a verdict, and is not a property of the
arithmetic itself, is a field of :class:`Policy`. Pass one to change them
for one call (``pg.check(f, x, policy=Policy(mp_auto_seconds=0.0))``);
:data:`DEFAULT_POLICY` is used otherwise. A policy is frozen: derive a new one
with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_POLICY", "Policy"]


@dataclass(frozen=True)
class Policy:
    """Tolerances, ladder lengths, budgets and sample sizes of a gradient check.

    Attributes
    ----------
    c_ad : float
        Round-off allowed to an autodiff value, in units of ``eps * scale``.
    tolerance_factor : float
        Multiple of the reference error bar allowed in the difference.
    mp_levels : int
        Steps per direction of the mp reference (see
        :func:`polygrad.reference.mp_directional_derivatives`).
    mp_auto_seconds : float
        ``reference="auto"`` uses mp (first, or to re-examine entries in
        doubt) only when its estimated time is below this many seconds.
    mp_auto_size : int
        ``reference="auto"`` considers mp first only when the number of
        directions times the number of inputs is at most this (the function's
        graph is captured only then).
    full_auto_inputs : int
        ``strategy="auto"`` always checks the full Jacobian up to this many inputs.
    progress_after_seconds : float
        A reference expected to take longer shows a progress bar (on a terminal only).
    condition_allowance : float
        ``|f| / |f' s|`` the short ladder's finest step allows; beyond it the
        ladder moves up (see :func:`polygrad.reference.steps.ladder`).
    first_levels : int
        Steps of a short ladder evaluated first along every direction; the rest
        only where needed.
    first_start : int
        Index of the short ladder's step that those first steps begin at (0: its
        largest; see :func:`polygrad.reference.directional_derivatives`).
    large_full_inputs : int
        A full check of at least this many inputs aims its finite-difference
        reference at ``large_full_accuracy`` at least: a short ladder of small
        steps and the noise measured once along a sample of directions (see
        ``shared_noise_directions``) then serve every entry, about four
        evaluations per input instead of some forty.
    large_full_accuracy : float
        Relative accuracy such a reference aims at (below the ``sqrt(eps)``
        beyond which an entry is INCONCLUSIVE; a direction whose error bar comes
        near that is estimated again by the long ladder, and entries in doubt are
        re-examined with mp where the function runs on mpmath numbers).
    large_full_condition_allowance : float
        The ``condition_allowance`` of such a check's short ladder: a function of
        many inputs (a sum over them) is far larger than each partial derivative
        times its input's scale.
    shared_noise_directions : int
        Directions sampled to measure the noise once for a large full check.
    shared_noise_margin : float
        The noise used for every direction: this many times the smallest
        detected in the sample, at most the largest detected.
    shared_noise_projections : int
        Random projections of an input of at least ``large_full_inputs`` entries
        measure the noise along this many of their directions only (random sign
        directions are alike: each draws the same distribution of noise), and it
        serves all, as for a large full check; each direction's own noise table
        costs nine evaluations of ``f``, most of the cost of a check at n = 1e6.
    probe_noise_directions : int
        A full check whose finite-difference reference aims at a relative accuracy
        of at least ``probe_noise_accuracy`` (a float32, float16 or bfloat16 check
        on float64 differences, whose round-off lies far below that aim) first
        measures the noise along this many random sign directions only: each moves
        every input, so it re-rounds every intermediate that a coordinate direction
        does. Where each detects noise, the largest, times ``shared_noise_margin``,
        serves every direction; the directions whose error bar then misses the aim
        get their own noise measured and are estimated again. Elsewhere, and for
        checks of at most twice this many directions, each direction's own noise
        is measured from the start (nine evaluations each, two thirds of a small
        float32 check's). 0: always each direction's own.
    probe_noise_accuracy : float
        The least relative accuracy aimed at for which the noise is probed first.
    borrow_share : float
        Share of the directions that must detect noise before the others borrow it.
    dithers : int
        Copies of the inputs moved by a few ulps to measure the autodiff
        round-off of entries that fail (see :mod:`polygrad.dither`).
    dither_ulps : int
        Each input coordinate moves by a random whole number of ulps in
        ``[-dither_ulps, dither_ulps]`` (the first move size).
    dither_allowance : float
        Each entry is allowed this many times the largest move of its value.
    subspace_explains : float
        Failures on a symmetric matrix argument are explained by the
        symmetric-subspace convention when the check along symmetric
        directions passes, or its worst ``|autodiff - reference| / tolerance``
        is at most this fraction of the full-space worst (see
        :mod:`polygrad.pipeline.subspace`).
    c_lost : float
        Hidden cancellation: where ``f`` itself is computed to a relative
        accuracy ``rho`` only in a narrow working dtype (its value made from
        intermediates far larger than itself, ``x - sin(x)`` near 0), each
        entry of its row may be off by ``c_lost * rho`` times its scale where
        only the working dtype is off: it turns UNSTABLE into PASS, never a
        MISMATCH (see :func:`polygrad.pipeline.judge.findings`).
    widest_tolerance : float
        Largest tolerance, as a share of an entry's scale, at which a comparison
        still checks the rule. Where the tolerance that decides MISMATCH is wider
        (a bfloat16 or float16 rule with no float64 evaluation: ``c_ad`` epsilons
        are half, or a sixteenth, of the scale; or allowances for round-off as large)
        a rule wrong by that share would pass: the entry is INCONCLUSIVE, never PASS.
    localize_share : float
        A failing check (MISMATCH or NONFINITE) localizes the wrong rule by default
        (``localize=None``) within this multiple of the check's own time, so that it
        costs at most that much more; 0: not by default.
    localize_floor_seconds : float
        The least time that localization by default is given (a check of a few
        milliseconds still gets the walk of a small program).
    """

    c_ad: float = 64.0
    tolerance_factor: float = 2.0
    mp_levels: int = 14
    mp_auto_seconds: float = 5.0
    mp_auto_size: int = 4096
    full_auto_inputs: int = 16
    progress_after_seconds: float = 2.0
    condition_allowance: float = 1e4
    first_levels: int = 2
    first_start: int = 1
    large_full_inputs: int = 1024
    large_full_accuracy: float = 1e-8
    large_full_condition_allowance: float = 1e5
    shared_noise_directions: int = 32
    shared_noise_margin: float = 10.0
    shared_noise_projections: int = 2
    probe_noise_directions: int = 2
    probe_noise_accuracy: float = 1e-9
    borrow_share: float = 0.25
    dithers: int = 5
    dither_ulps: int = 2
    dither_allowance: float = 2.0
    subspace_explains: float = 0.1
    c_lost: float = 4.0
    widest_tolerance: float = 0.01
    localize_share: float = 1.0
    localize_floor_seconds: float = 0.5


DEFAULT_POLICY = Policy()
"""The policy of every check that is not given one."""
