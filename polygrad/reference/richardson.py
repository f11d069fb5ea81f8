"""Finite differences with Richardson extrapolation and honest error bars.

Along a direction ``w`` (entries that are powers of two times ±1), the
derivative of ``g(t) = f(x + t w)`` at ``t = 0`` is estimated from
differences on a ladder of steps ``h_k = h_0 2^{-k}``. Every step is a power
of two, so ``x + h_k w`` is exact in binary and the step taken is the step
assumed (no representation error, the first trap of hand-written checks).

* Central differences ``D_k = (g(h_k) - g(-h_k)) / (2 h_k)`` have the error
  expansion ``c_1 h² + c_2 h⁴ + ...``; one-sided differences
  ``F_k = ±(g(±h_k) - g(0)) / h_k`` have ``c_1 h + c_2 h² + ...``.
* A Neville (Richardson) tableau eliminates those terms one by one
  (``T_{k,j} = T_{k,j-1} + (T_{k,j-1} - T_{k-1,j-1}) / (2^{p_j} - 1)``).
* Each tableau entry gets an error estimate: the truncation estimate of
  Ridders' method (the larger distance to its two parents) and the
  propagated noise (the noise ``σ`` measured by ECnoise, carried through the
  tableau's exact linear coefficients). The entry with the smallest total is
  the estimate — this is how the step is chosen from the measured noise and
  the measured curvature: large steps lose to truncation, small steps to
  noise.
* The error bar is the larger of the truncation estimate and three times the
  propagated noise standard deviation, plus the rounding of the result.

References
----------
C. J. F. Ridders, "Accurate computation of F'(x) and F'(x)F''(x)", Adv. Eng.
Software 4(2), 75–76 (1982). W. H. Press et al., *Numerical Recipes*, §5.7
(``dfridr``). L. F. Richardson, "The deferred approach to the limit",
Phil. Trans. R. Soc. A 226 (1927). J. J. Moré and S. M. Wild, "Estimating
derivatives of noisy simulations", ACM TOMS 38(3) (2012).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["Estimate", "TableauResult", "neville", "step_ladder"]

NOISE_COVERAGE = 3.0
"""Multiple of the propagated noise standard deviation in the error bar."""

COEFFICIENT_PATH_SIZE = 256
"""Up to this many elements per step, a tableau of float64 quotients is formed as matrix
products with its fixed coefficients (a few NumPy calls, where the column-by-column
recursion makes dozens on tiny arrays); beyond it, column by column."""

TIED_ERRORS = 2.0**-30
"""Error bars within this relative distance of the least are tied, and the first of them
wins: the two ways of forming a tableau (coefficients or recursion) round its error bars
differently in the last digits (1e-13 apart), and a near-tie must not pick different
entries in each (an error bar is an estimate good to a few digits at best)."""

TIED_ULPS = 8.0
"""Error bars within this many ulps of the chosen value (``value_eps |T|``) of the least
are tied too: where the quotients nearly cancel (D ~ 1 varying by 1e-7), a bar of 2e-9 is
formed from differences that each way rounds at ulps of D, 5e-16 apart (3e-7 relative,
far beyond :data:`TIED_ERRORS`; found by the property test in CI)."""


@dataclass(frozen=True)
class Estimate:
    """A derivative estimate that never travels without its error bar.

    Attributes
    ----------
    value : ndarray, float64
        The estimated derivative (any shape; one entry per direction/output).
    error : ndarray, float64
        Absolute error bar (≥ 0; ``inf`` where no estimate could be formed).
    step : ndarray, float64
        Step (in units of the direction) of the finest difference used.
    noise : ndarray, float64
        Noise standard deviation of the function values that were used.
    method : str
        ``"mp"``, ``"float64"`` or ``"working"``: the arithmetic of the
        function evaluations.
    evaluations : int
        Function evaluations spent.
    value_mp : ndarray of object or None
        For ``method == "mp"``: the value at full precision (mpmath numbers);
        ``error`` then bounds ``value`` (float64), and ``error_mp`` this one.
    error_mp : ndarray or None
        Error bar of ``value_mp`` (float64 numbers, may be far below 1e-16).
    """

    value: np.ndarray
    error: np.ndarray
    step: np.ndarray
    noise: np.ndarray
    method: str
    evaluations: int
    value_mp: np.ndarray | None = None
    error_mp: np.ndarray | None = None


@dataclass(frozen=True)
class TableauResult:
    """Best entry of a Neville tableau, per element."""

    value: np.ndarray
    error: np.ndarray
    truncation: np.ndarray
    noise: np.ndarray
    level: np.ndarray
    order: np.ndarray


def step_ladder(h_max: float, levels: int) -> np.ndarray:
    """Steps ``h_max, h_max/2, ..., h_max/2^(levels-1)`` (powers of two if ``h_max`` is)."""
    return h_max * 2.0 ** -np.arange(levels)


def _to_float(a: np.ndarray) -> np.ndarray:
    """float64 copy of ``a`` (mpmath numbers rounded; a NaN or infinity stays one, quietly)."""
    with np.errstate(invalid="ignore", over="ignore"):
        if a.dtype == object:
            return np.vectorize(float, otypes=[np.float64])(a) if a.size else a.astype(np.float64)
        return a.astype(np.float64)


def neville(
    D: np.ndarray,
    steps: np.ndarray,
    p0: int,
    dp: int,
    noise_sd: np.ndarray,
    value_eps: float,
    fine_levels: int = 4,
    cross_check: bool = False,
    size: int | None = None,
) -> TableauResult:
    """Richardson-extrapolate a sequence of difference quotients.

    Parameters
    ----------
    D : ndarray, shape (L, ...)
        Difference quotients at ``steps`` (float64, or object arrays of
        mpmath numbers, which keep their precision through the tableau).
        NaN marks a step where the function was not finite.
    steps : ndarray, shape (L,)
        Decreasing steps with ratio 2.
    p0, dp : int
        The error expansion is ``h^p0, h^(p0+dp), ...`` (central: 2, 2;
        one-sided: 1, 1).
    noise_sd : ndarray, shape (L, ...) or broadcastable
        Standard deviation of the noise in each ``D_k``.
    value_eps : float
        Relative rounding of the final value (added to the error bar).
    fine_levels : int
        Size of the window of finest steps used for the consistency check:
        the best entry over the whole tableau is kept only if it agrees,
        within both error bars, with the best entry that uses only the
        ``fine_levels`` finest steps. Otherwise the function is not smooth
        over the large steps (a kink or a singularity within reach of them)
        and the fine-step entry is the estimate.
    cross_check : bool
        Widen the error bar of the chosen entry until it overlaps the best
        entry of every other column, and the truncation estimate of an entry
        also covers its difference to the next finer entry of its column (see
        the code comments): for the final error bars, not for steering the
        step ladder.
    size : int, optional
        The number of quotients (``D.size``) that decides between the two ways of
        forming the tableau (matrix products for small inputs); given by a caller
        that forms part of a larger one, so that its entries round alike.

    Returns
    -------
    TableauResult
        Value (same dtype as ``D``), error bar, its truncation and noise parts,
        the level ``k`` and order ``j`` of the entry chosen.
    """
    L = D.shape[0]
    batch = D.shape[1:]
    noise_sd = np.broadcast_to(np.asarray(noise_sd, dtype=np.float64), (L,) + batch)
    # propagate relative to the largest noise so that squares neither under- nor overflow
    sd_max = np.max(noise_sd, axis=0)
    with np.errstate(all="ignore"):
        sd_rel = np.where(sd_max > 0, noise_sd / np.where(sd_max > 0, sd_max, 1.0), 0.0)
    plan = _plan(L, p0, dp, fine_levels)
    small = (D.size if size is None else size) <= COEFFICIENT_PATH_SIZE * L
    if small and D.dtype != object and np.all(np.isfinite(D)):
        T, trunc = _by_coefficients(plan, D, cross_check)
    else:
        T, trunc = _by_recursion(plan, D, cross_check)
    Tf = _to_float(T)
    # noise propagated exactly through the coefficients (independent noise)
    sd2 = sd_rel.reshape(L, -1) ** 2
    noise = (sd_max.reshape(-1) * np.sqrt(plan.coef_sq @ sd2)).reshape((-1,) + batch)
    with np.errstate(all="ignore"):
        err = np.maximum(trunc, NOISE_COVERAGE * noise) + value_eps * np.abs(Tf)
    err = np.where(np.isfinite(err), err, np.inf)
    entries = (T, err, trunc, noise)
    slack = TIED_ULPS * value_eps * np.abs(Tf)
    best = list(_least(plan, entries, None, slack))
    fine = _least(plan, entries, plan.fine, slack)
    # consistency with the finest steps: a large-step entry that disagrees with them
    # extrapolated across something non-smooth; the limit h -> 0 is what counts
    with np.errstate(all="ignore"):
        gap = _to_float(np.abs(best[0] - fine[0]))
        inconsistent = (gap > best[1] + fine[1]) & np.isfinite(fine[1])
    if np.any(inconsistent):
        best = [np.where(inconsistent, f, b) for f, b in zip(fine, best, strict=True)]
    if cross_check:
        best[1] = _covering(plan, Tf, err, best)
    return TableauResult(*best)


@dataclass(frozen=True)
class _Plan:
    """The entries of an ``L``-step tableau, column after column (``N = L (L + 1) / 2``).

    Every entry is a fixed linear combination of the ``D_k``: ``coef`` (``(N, L)``)
    gives it, ``up``/``down`` its differences from its two parents (the finer and
    the coarser entry of the previous column; for column 0, from the next coarser
    quotient, and infinite at ``k = 0``), ``next`` its difference from the next
    finer entry of its column (scaled by ``widen``; 0 for the last), ``coef_sq``
    the squares that carry independent noise.
    """

    coef: np.ndarray
    up: np.ndarray
    down: np.ndarray
    next: np.ndarray
    widen: np.ndarray
    coef_sq: np.ndarray
    level: np.ndarray
    order: np.ndarray
    fine: np.ndarray
    top: np.ndarray  # column 0, row 0: no parent (truncation estimate infinite)
    starts: tuple[int, ...]  # first entry of each column
    factors: tuple[float, ...]  # column j's Richardson factor 2^(p0 + (j-1) dp) - 1


def _column(prev: np.ndarray, j: int, p0: int, dp: int) -> dict[str, np.ndarray]:
    """Coefficient rows of column ``j`` of the tableau, from those of column ``j - 1``
    (``prev``; the identity for ``j = 0``), and of its entries' differences."""
    L = prev.shape[1]
    factor = 0.0 if j == 0 else 2.0 ** (p0 + (j - 1) * dp) - 1.0
    if j == 0:
        C = np.eye(L)
        up = down = np.vstack([np.zeros((1, L)), C[1:] - C[:-1]])
    else:
        C = prev[1:] + (prev[1:] - prev[:-1]) / factor
        up, down = C - prev[1:], C - prev[:-1]
    rows = np.arange(C.shape[0])
    last = rows == rows[-1]
    return {
        "coef": C, "up": up, "down": down,
        "next": np.vstack([C[:-1] - C[1:], np.zeros((1, L))]),
        "widen": np.where(last, 0.0, 1.0 / (1.0 - 2.0 ** -(p0 + j * dp))),
        "level": rows + j, "order": np.full(rows.size, j), "factor": np.array([factor]),
    }  # fmt: skip


@functools.lru_cache(maxsize=256)
def _plan(L: int, p0: int, dp: int, fine_levels: int) -> _Plan:
    """The coefficients of every entry of the tableau (see :class:`_Plan`)."""
    cols = [_column(np.eye(L), 0, p0, dp)]
    for j in range(1, L):
        cols.append(_column(cols[-1]["coef"], j, p0, dp))
    stacked = {k: np.concatenate([c[k] for c in cols]) for k in cols[0]}
    sizes = [c["coef"].shape[0] for c in cols]
    rows = np.concatenate([np.arange(n) for n in sizes])
    top = np.zeros(rows.size, dtype=bool)
    top[0] = True
    factors = tuple(float(f) for f in stacked["factor"])
    return _Plan(
        stacked["coef"], stacked["up"], stacked["down"], stacked["next"], stacked["widen"],
        stacked["coef"] ** 2, stacked["level"], stacked["order"], rows >= L - fine_levels,
        top, tuple(int(v) for v in np.cumsum([0] + sizes[:-1])), factors,
    )  # fmt: skip


def _by_coefficients(
    plan: _Plan, D: np.ndarray, cross_check: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(entries, truncation estimates), ``(N, ...)``, of finite float64 quotients, each a
    matrix product with the plan's coefficients."""
    L, batch = D.shape[0], D.shape[1:]
    Df = D.reshape(L, -1)
    shape = (-1,) + batch
    T = (plan.coef @ Df).reshape(shape)
    trunc = np.maximum(np.abs(plan.up @ Df), np.abs(plan.down @ Df))
    if cross_check:
        trunc = np.maximum(trunc, plan.widen[:, None] * np.abs(plan.next @ Df))
    trunc[plan.top] = np.inf
    return T, trunc.reshape(shape)


def _by_recursion(plan: _Plan, D: np.ndarray, cross_check: bool) -> tuple[np.ndarray, np.ndarray]:
    """(entries, truncation estimates), ``(N, ...)``, column by column: mpmath numbers
    keep their digits (differences are taken before rounding), and a NaN quotient
    spoils only the entries that use it (``inf - inf`` where ``f`` was not finite is NaN,
    as meant, and no warning)."""
    Ts, truncs = [], []
    prev = D
    with np.errstate(invalid="ignore"):
        for j in range(D.shape[0]):
            T, trunc = _next_column(plan, D, prev, j, cross_check)
            Ts.append(T)
            truncs.append(trunc)
            prev = T
    return np.concatenate(Ts), np.concatenate(truncs)


def _next_column(
    plan: _Plan, D: np.ndarray, prev: np.ndarray, j: int, cross_check: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Column ``j`` of the tableau (entries and truncation estimates) from column ``j - 1``
    (``prev``; ``D`` itself for ``j = 0``)."""
    if j == 0:
        T = D.copy()
        trunc = np.full(D.shape, np.inf)
        trunc[1:] = _to_float(np.abs(T[1:] - T[:-1]))
    else:
        T = prev[1:] + (prev[1:] - prev[:-1]) / plan.factors[j]
        trunc = np.maximum(_to_float(np.abs(T - prev[1:])), _to_float(np.abs(T - prev[:-1])))
    if cross_check and T.shape[0] > 1:
        # also against the next finer entry of the same column: two estimates of the
        # same order that disagree show a truncation error the parents can hide. The
        # leading error c h^p of this column's entries (p = p0 + j dp) changes by
        # c h^p (1 - 2^-p) from h to h/2, so the difference is scaled up by
        # 1 / (1 - 2^-p): twice the difference for a raw one-sided quotient
        widen = plan.widen[plan.starts[j]]
        trunc[:-1] = np.maximum(trunc[:-1], widen * _to_float(np.abs(T[:-1] - T[1:])))
    return T, trunc


def _least(
    plan: _Plan,
    entries: tuple[np.ndarray, ...],
    among: np.ndarray | None,
    slack: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """(value, error, truncation, noise, level, order) of the least-error entry per
    element (among the entries ``among`` marks, if given); NaN, inf, inf, inf, 0, 0
    where no entry has a finite error bar. The first of equal error bars wins (the
    coarsest column, then the coarsest row), and so does the first of those within
    :data:`TIED_ERRORS` of the least, or within ``slack`` (per entry, as ``err``) of it."""
    T, err, trunc, noise = entries
    N, batch = err.shape[0], err.shape[1:]
    e2 = err.reshape(N, -1)
    if among is not None:
        e2 = np.where(among[:, None], e2, np.inf)
    pick = np.argmin(e2, axis=0)
    cols = np.arange(e2.shape[1])
    with np.errstate(invalid="ignore"):
        least = e2[pick, cols]
        extra = 0.0 if slack is None else slack.reshape(N, -1)[pick, cols]
        tied = e2 <= least * (1.0 + TIED_ERRORS) + extra  # (a NaN least ties nothing)
    pick = np.where(tied.any(axis=0), np.argmax(tied, axis=0), pick)
    e = e2[pick, cols]
    found = e < np.inf

    def at(a: np.ndarray, missing: float) -> np.ndarray:
        return np.where(found, a.reshape(N, -1)[pick, cols], missing).reshape(batch)

    return (
        at(T, np.nan), np.where(found, e, np.inf).reshape(batch), at(trunc, np.inf),
        at(noise, np.inf), np.where(found, plan.level[pick], 0).reshape(batch),
        np.where(found, plan.order[pick], 0).reshape(batch),
    )  # fmt: skip


def _covering(plan: _Plan, Tf: np.ndarray, err: np.ndarray, best: list[np.ndarray]) -> np.ndarray:
    """The chosen entry's error bar, widened to cover the best entry of every column.

    The minimum of many error estimates is biased low (one entry's difference to its
    neighbours can be small by chance). The best entry of every other column among
    those using no step larger than the chosen entry's (larger steps may cross a
    kink that the chosen entry does not see) estimates the same limit: where the two
    error bars do not overlap, the chosen one grows to cover the other's interval.
    """
    best_val, best_err = _to_float(np.asarray(best[0])), best[1]
    start = best[4] - best[5]  # index of the largest step the chosen entry uses
    bounds = list(plan.starts) + [Tf.shape[0]]
    with np.errstate(all="ignore"):
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            Tc, ec = Tf[a:b], err[a:b]
            usable = np.arange(b - a).reshape((-1,) + (1,) * start.ndim) >= start
            e_use = np.where(usable, ec, np.inf)
            pick = np.argmin(e_use, axis=0)[None]
            other_err = np.take_along_axis(e_use, pick, axis=0)[0]
            other_val = np.take_along_axis(Tc, pick, axis=0)[0]
            gap = np.abs(best_val - other_val)
            apart = np.isfinite(gap) & np.isfinite(other_err) & (gap > best_err + other_err)
            best_err = np.where(apart, gap + other_err, best_err)
    return best_err
