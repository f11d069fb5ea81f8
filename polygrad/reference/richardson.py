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

from dataclasses import dataclass

import numpy as np

__all__ = ["Estimate", "TableauResult", "neville", "step_ladder"]

NOISE_COVERAGE = 3.0
"""Multiple of the propagated noise standard deviation in the error bar."""


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
    # coefficient vectors of each tableau column over the D_k: carried exactly
    prev_T = np.empty(0, dtype=D.dtype)  # the previous column (set at j = 0)
    prev_C = np.empty((0, L))
    entries = _Entries()
    columns: list[tuple[np.ndarray, np.ndarray]] = []
    for j in range(L):
        if j == 0:
            T = D.copy()
            C = np.eye(L)  # C[k] = coefficients of T[k] over the D_k
            trunc = np.full((L,) + batch, np.inf)
            trunc[1:] = _to_float(np.abs(T[1:] - T[:-1]))
        else:
            factor = 2.0 ** (p0 + (j - 1) * dp) - 1.0
            T = prev_T[1:] + (prev_T[1:] - prev_T[:-1]) / factor
            C = prev_C[1:] + (prev_C[1:] - prev_C[:-1]) / factor
            # differences are taken before rounding, so mp tableaus keep their digits
            trunc = np.maximum(
                _to_float(np.abs(T - prev_T[1:])), _to_float(np.abs(T - prev_T[:-1]))
            )
        if cross_check and T.shape[0] > 1:
            # also against the next finer entry of the same column: two estimates of the
            # same order that disagree show a truncation error the parents can hide. The
            # leading error c h^p of this column's entries (p = p0 + j dp) changes by
            # c h^p (1 - 2^-p) from h to h/2, so the difference is scaled up by
            # 1 / (1 - 2^-p): twice the difference for a raw one-sided quotient
            order = p0 + j * dp
            widen = 1.0 / (1.0 - 2.0**-order)
            trunc[:-1] = np.maximum(trunc[:-1], widen * _to_float(np.abs(T[:-1] - T[1:])))
        Tf = _to_float(T)
        # noise propagated exactly through the coefficients (independent noise)
        noise = sd_max * np.sqrt(np.einsum("kl,l...->k...", C**2, sd_rel**2))
        err = np.maximum(trunc, NOISE_COVERAGE * noise) + value_eps * np.abs(Tf)
        err = np.where(np.isfinite(err), err, np.inf)
        if cross_check:
            columns.append((Tf, err))
        entries.add(T, err, trunc, noise, j, L - fine_levels)
        prev_T, prev_C = T, C
        if T.shape[0] <= 1:
            break
    best_val, best_err, best_trunc, best_noise, best_level, best_order = entries.best()
    fine = entries.best(fine_only=True)
    # consistency with the finest steps: a large-step entry that disagrees with them
    # extrapolated across something non-smooth; the limit h -> 0 is what counts
    with np.errstate(all="ignore"):
        gap = _to_float(np.abs(best_val - fine[0]))
        inconsistent = (gap > best_err + fine[1]) & np.isfinite(fine[1])
    if np.any(inconsistent):
        best_val, best_err, best_trunc, best_noise, best_level, best_order = (
            np.where(inconsistent, f, b)
            for f, b in zip(
                fine,
                (best_val, best_err, best_trunc, best_noise, best_level, best_order),
                strict=True,
            )
        )
    # The minimum of many error estimates is biased low (one entry's difference to its
    # neighbours can be small by chance). The best entry of every other column among
    # those using no step larger than the chosen entry's (larger steps may cross a
    # kink that the chosen entry does not see) estimates the same limit: where the two
    # error bars do not overlap, the chosen one grows to cover the other's interval.
    start = best_level - best_order  # index of the largest step the chosen entry uses
    with np.errstate(all="ignore"):
        for Tc, ec in columns:
            usable = np.arange(Tc.shape[0]).reshape((-1,) + (1,) * len(batch)) >= start
            e_use = np.where(usable, ec, np.inf)
            pick = np.argmin(e_use, axis=0)[None]
            other_err = np.take_along_axis(e_use, pick, axis=0)[0]
            other_val = np.take_along_axis(Tc, pick, axis=0)[0]
            gap = np.abs(_to_float(np.asarray(best_val)) - other_val)
            apart = np.isfinite(gap) & np.isfinite(other_err) & (gap > best_err + other_err)
            best_err = np.where(apart, gap + other_err, best_err)
    return TableauResult(best_val, best_err, best_trunc, best_noise, best_level, best_order)


class _Entries:
    """Every entry of a tableau, column after column, and the one with the least error.

    The choice is one ``argmin`` over all entries in the order they were added
    (column by column, rows in order), so the first of equal error bars wins.
    """

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.level: list[np.ndarray] = []
        self.order: list[np.ndarray] = []
        self.fine: list[np.ndarray] = []

    def add(self, T, err, trunc, noise, j: int, fine_from: int) -> None:
        """Column ``j`` (rows ``k``, level ``k + j``); rows ``k >= fine_from`` are fine."""
        rows = np.arange(T.shape[0])
        self.parts.append((T, err, trunc, noise))
        self.level.append(rows + j)
        self.order.append(np.full(rows.size, j))
        self.fine.append(rows >= fine_from)

    def best(self, fine_only: bool = False) -> tuple[np.ndarray, ...]:
        """(value, error, truncation, noise, level, order) of the least-error entry per
        element; NaN, inf, inf, inf, 0, 0 where no entry has a finite error bar."""
        T, err, trunc, noise = (np.concatenate(a) for a in zip(*self.parts, strict=True))
        if fine_only:
            keep = np.concatenate(self.fine).reshape((-1,) + (1,) * (err.ndim - 1))
            err = np.where(keep, err, np.inf)
        pick = np.argmin(err, axis=0)
        e = np.take_along_axis(err, pick[None], axis=0)[0]
        found = e < np.inf

        def at(a: np.ndarray, missing: float) -> np.ndarray:
            return np.where(found, np.take_along_axis(a, pick[None], axis=0)[0], missing)

        level, order = np.concatenate(self.level)[pick], np.concatenate(self.order)[pick]
        return (
            at(T, np.nan), np.where(found, e, np.inf), at(trunc, np.inf), at(noise, np.inf),
            np.where(found, level, 0), np.where(found, order, 0),
        )  # fmt: skip
