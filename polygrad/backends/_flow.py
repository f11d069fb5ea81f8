"""Whose is a gradient that autodiff connects to no input: measured, not assumed.

Every backend refuses a function whose output autodiff connects to none of its
inputs while its values change with them (``.numpy()``, ``.detach()``, a stop
gradient on the way: the user's error). Two other kinds of function look the
same to that first test and are no error of the user's:

- a piecewise-constant function (``floor``, ``ceil``, ``round``, ``sign``) whose
  1% move crosses a step: its zero gradient is right wherever it is constant on
  both sides of the point, which :func:`steps_only` measures;
- a framework operation whose registered derivative is missing for one of its
  arguments (TensorFlow's ``Zeta`` with respect to ``x``): a finding for the
  check to judge, which the TensorFlow backend names from its graph.

This module holds the measurement shared by the backends; it sees only
``(k, n) -> (k, m)`` float64 callables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import BatchFn

__all__ = ["StepEvidence", "steps_only"]

#: relative step sizes tried below the guard's 1% move, largest first
_STEPS = tuple(10.0**-k for k in range(3, 13))
#: a change at the previous step this many times round-off, were the function smooth
#: (linear in the step), would still show at the next one: vanishing there is a step
_MARGIN = 16.0


@dataclass(frozen=True)
class StepEvidence:
    """What the small moves showed about a function autodiff connects to no input.

    Attributes
    ----------
    step : float
        The relative step size (of ``1 + |x|``) at which the values stopped changing.
    before : float
        The largest change of an output at the previous, ten times larger, step.
    """

    step: float
    before: float
    jump: bool = False

    def note(self, cause: str) -> str:
        """The report's note: why the zero gradient is judged, not refused."""
        head = f"autodiff connects no output to the inputs ({cause}), and "
        if self.jump:
            return head + (
                f"the values jump by {self.before:.3g} under moves as small as "
                f"{self.step:.0e} (of 1 + |x|): the point is on a step of a piecewise-constant "
                "function; the zero gradient is judged against the reference"
            )
        return head + (
            f"the values do not change under moves of {self.step:.0e} (of 1 + |x|) on either "
            f"side of the point (largest change {self.before:.3g} at {10 * self.step:.0e}: a "
            "step of a piecewise-constant function nearby); the zero gradient is judged "
            "against the reference"
        )


def steps_only(
    evaluate: BatchFn, x0: np.ndarray, y0: np.ndarray, eps: float, change: float
) -> StepEvidence | None:
    """Whether the function is constant on both sides of ``x0``, its 1% change a step's.

    Moves of decreasing relative size ``h`` (``1e-3``, ``1e-4``, ...) are made
    along ``±s`` for two random sign vectors ``s`` (the first the 1% move's own,
    seed 0). The function is piecewise constant at ``x0`` when, at some ``h``,
    no output changes by more than round-off while, at ``10 h``, the change
    was so large that a function linear in the step would still show it at
    ``h``. A function that changes smoothly (a stop gradient, a NumPy round
    trip) shrinks with ``h`` and never vanishes that way.

    Parameters
    ----------
    evaluate : BatchFn
        ``(k, n) -> (k, m)`` float64, the function in the working dtype.
    x0 : ndarray, shape (n,), float64
        The point.
    y0 : ndarray, shape (m,), float64
        The outputs at ``x0``.
    eps : float
        Machine epsilon of the working dtype.
    change : float
        The largest change under the 1% move (:func:`change_under_a_move`).

    A change that does not shrink with ``h`` down to the smallest step (``4 eps``, a
    move of a few ulps of ``x``) is a jump at the point itself (``floor`` at an
    integer): that too is judged, as the discontinuity it is.

    Returns
    -------
    StepEvidence or None
        The step at which the values stopped changing (or the smallest step, for a
        jump at the point), or None when they change smoothly.
    """
    signs = np.random.default_rng(0).choice([-1.0, 1.0], x0.shape)
    other = np.random.default_rng(1).choice([-1.0, 1.0], x0.shape)
    moves = np.stack([signs, -signs, other, -other]) * (1.0 + np.abs(x0))
    ulp = eps * (float(np.max(np.abs(y0), initial=0.0)) or 1.0)
    changes = [change]
    for h in (h for h in _STEPS if h >= 4 * eps):
        ys = evaluate(x0[None, :] + h * moves)
        now = float(np.max(np.abs(ys - y0[None, :]), initial=0.0))
        if not np.isfinite(now):
            return None
        if now <= 64 * ulp:
            # a smooth function whose change at h rounds away entirely (less than an ulp
            # of the largest output) changed by about ten ulps at 10 h (more only where
            # its derivative vanishes, which the reference then sees); one whose change
            # merely fell to round-off, by at most ten times that round-off
            smooth = (
                changes[-1] <= _MARGIN * ulp if now == 0 else changes[-1] / 10 <= _MARGIN * 64 * ulp
            )
            return None if smooth else StepEvidence(h, changes[-1])
        changes.append(now)
    # a jump at the point: the change did not shrink over the last two steps
    last = changes[-3:]
    if len(last) == 3 and min(last[1:]) >= 0.5 * max(last):
        return StepEvidence(_STEPS[len(changes) - 2], changes[-1], jump=True)
    return None
