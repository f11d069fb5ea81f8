"""The round-off of an mp evaluation where ``f`` is a cancellation of larger terms.

An mp reference's error model takes the round-off of ``f`` at ``dps`` digits to be a
few units in the last digit of ``|f|``. That fails where ``f`` is a difference of
terms far larger than itself: ``log_softmax(exp(x))[0]`` at ``x = (5.66, 1)`` is
``286.x - logsumexp(286.x, 2.7) = -e^-283``, and at 50 (or 100) digits both terms
round to the same number, so ``f`` is exactly 0 near the point, its differences are
exactly 0, and a derivative of ``0 ± 0`` would be claimed for a true ``-6e-125``.
No precision fixes this for every function (the terms can differ at any depth).

What does is measuring it, as Monte Carlo arithmetic does (D. S. Parker, "Monte Carlo
Arithmetic: exploiting randomness in floating-point arithmetic", UCLA CSD-970002,
1997): every operand of an addition or a subtraction is moved by a random relative
amount ``u 2^(k - prec)`` (``u`` uniform in ``[-1, 1]``), which is what the rounding
of the operation that made it can do, enlarged ``2^k`` times. Where ``f`` is a
smooth computation, its response is linear in that size: ``f_k = f + 2^k S``, with
``|S|`` the size of ``f``'s round-off in units of the precision (``|S| ≈ |f|`` where
nothing cancels; ``|S| ≫ |f|`` where large terms cancel, at any depth). The same
random moves at two sizes tell that response from a branch the moves flip (a
comparison at a tie: a jump, not round-off), which is left to the kink tests.

:data:`OPERAND_MOVES` is read by the arithmetic of every mpmath context polygrad
makes (:func:`polygrad.mpexec.context.make_context`); it is None, and the arithmetic
exact to ``dps`` digits, everywhere except inside :func:`moving_operands`.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["OPERAND_MOVES", "MOVE_BITS", "moving_operands", "rounding_scale"]

OPERAND_MOVES: contextvars.ContextVar[tuple[random.Random, int] | None] = contextvars.ContextVar(
    "mp_operand_moves", default=None
)
"""``(generator, k)`` while operands are moved by ``u 2^(k - prec)``; None otherwise."""

MOVE_BITS = (24, 12)
"""The two sizes of the moves, in bits above the precision's unit: large enough to be
represented and to dominate the evaluation's own rounding, far below anything a
float64 comparison resolves (``2^24 × 10^-75`` is ``1e-68``)."""

LINEAR = 0.25
"""The largest relative disagreement of the two responses, scaled to the same size, that
is still read as linear (round-off): a smooth response agrees to ``~2^-12``."""

SEED = 20_241_205
"""The moves' seed: the same moves at both sizes, and the same check twice the same."""


@contextlib.contextmanager
def moving_operands(bits: int, seed: int = SEED) -> Iterator[None]:
    """Within the block, mpmath additions and subtractions move their operands by a
    random relative ``u 2^(bits - prec)`` (see the module docstring).

    Parameters
    ----------
    bits : int
        Size of the moves in bits above the unit ``2^-prec`` of the context computing.
    seed : int
        Seed of the uniform ``u`` in ``[-1, 1]``: the same seed gives the same moves, in
        the order the operations run.

    Notes
    -----
    Only numbers of contexts made by :func:`polygrad.mpexec.context.make_context` are
    moved; machine floats and other objects are untouched. The setting is a
    :class:`contextvars.ContextVar`, so other threads and tasks compute exactly.
    """
    token = OPERAND_MOVES.set((random.Random(seed), bits))
    try:
        yield
    finally:
        OPERAND_MOVES.reset(token)


def rounding_scale(
    evaluate_mp: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
    x0: np.ndarray,
    dps: int,
    f0: np.ndarray,
) -> np.ndarray:
    """The size ``|S|`` of ``f``'s round-off, per output, in units of the precision.

    Parameters
    ----------
    evaluate_mp : callable
        ``(x0, dx, dps) -> y``: ``f(x0 + dx)`` on mpmath numbers, ``y`` an object array
        ``(m,)``.
    x0 : ndarray, shape (n,), float64
        The point.
    dps : int
        The digits ``f0`` was evaluated at.
    f0 : ndarray, shape (m,), object
        ``f(x0)`` at ``dps`` digits, without moves.

    Returns
    -------
    ndarray, shape (m,), float64
        ``|f_k - f0| / 2^k`` relative to the unit ``2^-prec`` of ``dps`` digits (a size
        comparable to ``|f|``), where the responses at the two sizes of
        :data:`MOVE_BITS` agree (a smooth computation); 0 where they do not (a branch
        flipped) or are not real numbers, and everywhere where ``f`` raised on the moved
        operands (the measurement is then left out). Costs two evaluations of ``f``.
    """
    zero = np.zeros_like(x0)
    unit = 2.0 ** -_prec(dps)
    responses = []
    for bits in MOVE_BITS:
        try:
            with moving_operands(bits):
                fk = evaluate_mp(x0, zero, dps)
            responses.append(np.abs(_as_floats(fk - f0)) / (2.0**bits * unit))
        except Exception:  # noqa: BLE001 - f refused the moved operands: nothing measured
            return np.zeros(np.size(f0))
    big, small = responses
    with np.errstate(invalid="ignore"):
        linear = np.abs(big - small) <= LINEAR * np.maximum(big, small)
        linear &= np.isfinite(big) & np.isfinite(small)
    return np.where(linear, big, 0.0)


def _prec(dps: int) -> int:
    """mpmath's binary precision at ``dps`` decimal digits."""
    from mpmath.libmp import dps_to_prec

    return int(dps_to_prec(dps))


def _as_floats(a: np.ndarray) -> np.ndarray:
    arr = np.asarray(a, dtype=object).ravel()
    out = np.empty(arr.size)
    for i, v in enumerate(arr):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            out[i] = np.nan
    return out
