"""The Taylor-remainder test: a gradient check that needs no choice of step.

For a direction ``v`` and steps ``h``, the first-order Taylor remainder

    ``r(h) = |φ(x + h v) - φ(x) - h ⟨∇φ(x), v⟩|``

falls like ``h²`` when the gradient ``∇φ`` is right and only like ``h`` when
it is wrong (the wrong part of ``⟨∇φ, v⟩`` survives as ``h · error``). The
test fits the slope of ``log r`` against ``log h`` over the smallest steps at
which ``r`` stands clearly above its floor: the noise of ``φ`` (ECnoise) plus
the round-off of the autodiff directional derivative itself
(``h · C · eps · Σ|g_j v_j|``). A slope near 2 supports the gradient, a
slope near 1 shows it is wrong along ``v``; no decision is made from steps
where ``r`` is at the floor.

For a function with several outputs the test is applied to ``φ = uᵀ f`` for
a random ±1 cotangent ``u`` (``∇φ = uᵀ J``, one VJP; or ``uᵀ (J v)``, one
JVP). ``φ`` is evaluated in float64 where the backend can, which widens the
range of usable steps; the gradient is the one being checked, in the working
dtype.

References
----------
P. E. Farrell, D. A. Ham, S. W. Funke, M. E. Rognes, "Automated derivation of
the adjoint of high-level transient finite element programs", SIAM J. Sci.
Comput. 35 (2013) (the Taylor test of dolfin-adjoint); see also
``pyadjoint.taylor_test``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .backends import front_door
from .backends.base import Supplied, Target
from .backends.validate import validate_target
from .reference import estimate_noise
from .reference.steps import F64_EPS
from .reference.steps import ecnoise_step as _ecnoise_step
from .reference.steps import pow2_scales as _pow2_scales

__all__ = ["TaylorResult", "continuous_signs", "taylor_test", "taylor_target"]

GRADIENT_ROUNDOFF = 8.0
"""Round-off of the autodiff directional derivative, in units of ``eps · Σ|g_j v_j|``."""
ABOVE_FLOOR = 10.0
"""A step is used when its remainder exceeds this multiple of the floor."""
FIT_POINTS = 5
"""Number of (smallest) usable steps the slope is fitted on."""
SLOPE_CORRECT = 1.7
SLOPE_WRONG = 1.3


@dataclass
class TaylorResult:
    """Outcome of :func:`taylor_test`.

    Attributes
    ----------
    steps : ndarray, shape (L,)
        Steps ``h`` (decreasing), in units of the direction.
    residual : ndarray, shape (L,)
        The remainder ``r(h)``, in the units of ``f``.
    floor : ndarray, shape (L,)
        The level below which ``r(h)`` is round-off.
    used : ndarray of bool, shape (L,)
        Steps the slope was fitted on.
    slope : float
        Fitted order of ``r(h)``; NaN when fewer than 3 steps stand above the floor.
    rates : ndarray, shape (L - 1,)
        Local orders ``log2(r(h_k) / r(h_{k+1}))`` for consecutive steps (ratio 2).
    directional_derivative : float
        ``⟨∇φ, v⟩`` from the gradient being checked.
    first_order_error : float
        ``r(h)/h`` at the smallest used step: the size of the error of
        ``⟨∇φ, v⟩`` when the slope is 1 (an upper bound otherwise).
    verdict : str
        ``"consistent"`` (slope ≥ 1.7), ``"wrong"`` (slope ≤ 1.3), ``"unclear"``
        (in between) or ``"flat"`` (the remainder stays at its floor: ``f`` is
        linear along ``v`` to working precision, or too noisy).
    mode : str
        ``"rev"`` (VJP) or ``"fwd"`` (JVP).
    evaluation : str
        Arithmetic of ``φ``: ``"float64"`` or ``"working"``.
    working_dtype : str
    direction : ndarray, shape (n,)
    notes : list of str
    """

    steps: np.ndarray
    residual: np.ndarray
    floor: np.ndarray
    used: np.ndarray
    slope: float
    rates: np.ndarray
    directional_derivative: float
    first_order_error: float
    verdict: str
    mode: str
    evaluation: str
    working_dtype: str
    direction: np.ndarray
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool | None:
        """True for slope ≈ 2, False for slope ≈ 1, None when the test cannot tell."""
        return {"consistent": True, "wrong": False}.get(self.verdict)

    def explain(self) -> str:
        """One sentence: what the slope says about the gradient."""
        if self.verdict == "flat":
            return (
                "the Taylor remainder stays at its round-off floor at every step (f is linear "
                "along the direction to working precision, or too noisy): no evidence either way"
            )
        span = f"h in [{_g(self.steps[self.used].min())}, {_g(self.steps[self.used].max())}]"
        txt = f"the Taylor remainder falls like h^{self.slope:.2f} over {span}"
        if self.verdict == "consistent":
            expect = (
                "expected 2 for a correct gradient"
                if self.slope < 2.5
                else "at least 2 for a correct gradient; faster where f's second-order term "
                "vanishes along the direction"
            )
            return txt + f" ({expect}): supports the gradient"
        if self.verdict == "wrong":
            order = "first order" if 0.5 <= self.slope <= 1.5 else "far below second order"
            return (
                txt + f" — {order}, so the directional derivative is wrong by about "
                f"{_g(self.first_order_error)} ({self._relative_error()})"
            )
        return txt + " (between 1 = wrong and 2 = correct): inconclusive"

    def _relative_error(self) -> str:
        """The error as a percentage of the derivative, unless the derivative is ~0."""
        dd, err = abs(self.directional_derivative), self.first_order_error
        if not np.isfinite(dd) or dd <= 1e-3 * err:  # a percentage of ~0 says nothing
            return f"the gradient's directional derivative is {_g(self.directional_derivative)}"
        return f"{_g(100 * err / dd)}% of {_g(self.directional_derivative)}"

    def to_dict(self) -> dict[str, Any]:
        from .verdicts import jsonable as _jsonable

        return _jsonable(
            {
                "slope": self.slope,
                "verdict": self.verdict,
                "explanation": self.explain(),
                "steps": self.steps,
                "residual": self.residual,
                "floor": self.floor,
                "used": self.used,
                "rates": self.rates,
                "directional_derivative": self.directional_derivative,
                "first_order_error": self.first_order_error,
                "mode": self.mode,
                "evaluation": self.evaluation,
                "working_dtype": self.working_dtype,
                "notes": self.notes,
            }
        )

    def __str__(self) -> str:
        lines = [f"polygrad Taylor test: {self.verdict} — {self.explain()}"]
        lines.append(f"  {'step h':>10} {'remainder':>11} {'floor':>10} {'rate':>6}")
        for i, h in enumerate(self.steps):
            rate = f"{self.rates[i - 1]:.2f}" if i > 0 and np.isfinite(self.rates[i - 1]) else ""
            mark = " *" if self.used[i] else ""
            lines.append(
                f"  {_g(h):>10} {_g(self.residual[i]):>11} {_g(self.floor[i]):>10} {rate:>6}{mark}"
            )
        lines.append("  (* = steps the slope was fitted on)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<polygrad.TaylorResult {self.verdict} slope={self.slope:.3g}>"

    def plot(self, path: str | Path | None = None, ax: Any = None) -> Any:
        """Draw ``r(h)`` on log-log axes with slope-1 and slope-2 guides and the floor.

        Parameters
        ----------
        path : str or Path, optional
            Where to save the figure (``.png``, ``.svg``...).
        ax : matplotlib Axes, optional

        Returns
        -------
        matplotlib.figure.Figure

        Raises
        ------
        ImportError
            matplotlib is not installed (``pip install 'polygrad-check[plot]'``).
        """
        from .plot import plot_taylor

        return plot_taylor(self, path, ax=ax)


def _g(x: float) -> str:
    return f"{float(x):.3g}"  # nan and inf print as such


def _default_steps(eps: float) -> np.ndarray:
    k = int(math.ceil(0.5 * math.log2(1.0 / eps))) + 8
    return 2.0 ** -np.arange(1, k + 1, dtype=np.float64)


def _grid(phi: np.ndarray, phi0: float) -> float:
    """The step of a staircase: where some steps leave ``φ`` exactly unchanged (it computes
    in a narrower float than its inputs, ``x.astype(np.float32)`` inside), the least change
    seen at the others; 0 where every step changed it. A residual of that size is the
    staircase, ``h ⟨∇φ, v⟩`` where φ did not move at all, not a first-order error."""
    change = np.abs(phi - phi0)
    change = change[np.isfinite(change)]
    if not np.any(change == 0):
        return 0.0
    moved = change[change > 0]
    return float(np.min(moved)) if moved.size else math.inf


def taylor_target(
    target: Target,
    mode: str = "auto",
    steps: Sequence[float] | np.ndarray | None = None,
    direction: np.ndarray | None = None,
    seed: int = 0,
) -> TaylorResult:
    """:func:`taylor_test` on an already built :class:`~polygrad.backends.base.Target`.

    Parameters
    ----------
    target : Target
    mode, steps, direction, seed
        As in :func:`taylor_test`.

    Returns
    -------
    TaylorResult

    Raises
    ------
    ValueError
        No VJP or JVP is available for ``mode``, or bad ``steps``/``direction``.
    """
    u, v = _directions(target, direction, seed)
    mode, dd, terms = _directional_derivative(target, mode, u, v)
    hs = _default_steps(target.eps) if steps is None else np.asarray(steps, dtype=np.float64)
    hs = np.sort(hs)[::-1]
    if hs.ndim != 1 or hs.size < 3 or np.any(~(hs > 0)):
        raise ValueError("steps must be a 1-D sequence of at least three positive numbers")
    if target.evaluate64 is not None:
        fn, eps_f, evaluation = target.evaluate64, F64_EPS, "float64"
    else:
        fn, eps_f, evaluation = target.evaluate, target.eps, "working"
    X = np.concatenate([target.x0[None, :], target.x0[None, :] + hs[:, None] * v[None, :]])
    Y = fn(X)
    phi0, phi = float(Y[0] @ u), Y[1:] @ u
    with np.errstate(all="ignore"):
        residual = np.abs(phi - phi0 - hs * dd)
    noise = estimate_noise(fn, target.x0, v[None, :], Y[0], eps_f, _ecnoise_step(eps_f))
    sigma_phi = float(np.sqrt(np.sum((u * noise.sigma[0]) ** 2)))
    floor = np.maximum(
        2.0 * sigma_phi + hs * GRADIENT_ROUNDOFF * target.eps * terms, 2.0 * _grid(phi, phi0)
    )
    with np.errstate(all="ignore"):
        rates = np.log2(residual[:-1] / residual[1:]) / np.log2(hs[:-1] / hs[1:])
    used, slope, first, verdict = _fit(hs, residual, floor)
    notes = [] if np.all(np.isfinite(residual)) else [
        "f is not finite at some of the steps; they were left out"
    ]  # fmt: skip
    return TaylorResult(
        steps=hs, residual=residual, floor=floor, used=used, slope=slope, rates=rates,
        directional_derivative=dd, first_order_error=first, verdict=verdict, mode=mode,
        evaluation=evaluation, working_dtype=target.working_dtype, direction=v, notes=notes,
    )  # fmt: skip


def _directions(
    target: Target, direction: np.ndarray | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The cotangent ``u`` ``(m,)`` and the direction ``v`` ``(n,)`` of the test.

    Raises
    ------
    ValueError
        ``direction`` does not have one entry per checked input.
    """
    n, m = target.n, target.m
    rng = np.random.default_rng(seed)
    if direction is None:
        v = continuous_signs(rng, n) * _pow2_scales(target.x0)
    else:
        v = np.asarray(direction, dtype=np.float64).reshape(-1)
        if v.size != n:
            raise ValueError(f"direction has {v.size} entries; the checked inputs have {n}")
    u = np.ones(m) if m == 1 else continuous_signs(rng, m)
    return u, v


def continuous_signs(rng: np.random.Generator, size: int) -> np.ndarray:
    """Random signs times magnitudes uniform in [0.5, 1.5): no two entries of equal size.

    A ±1 direction (times powers of two, equal for inputs of one size) gives a gradient
    error that is antisymmetric over two entries (a transposed matrix: ``+e`` at one,
    ``-e`` at the other) no component along it whenever their signs agree, and the
    Taylor remainder is then second order with the wrong gradient. With magnitudes
    drawn from a continuous distribution, an error cancels along the direction with
    probability 0.
    """
    return rng.choice(np.array([-1.0, 1.0]), size=size) * rng.uniform(0.5, 1.5, size=size)


def _directional_derivative(
    target: Target, mode: str, u: np.ndarray, v: np.ndarray
) -> tuple[str, float, float]:
    """``(mode, uᵀJv, Σ|terms|)`` from the VJP or the JVP.

    Raises
    ------
    ValueError
        ``mode`` names a derivative the function does not provide.
    """
    if mode == "auto":
        mode = "rev" if target.vjp is not None else "fwd"
    if mode == "rev" and target.vjp is not None:
        g = np.asarray(target.vjp(u[None, :]), dtype=np.float64)[0]
        return mode, float(g @ v), float(np.sum(np.abs(g * v)))
    if mode == "fwd" and target.jvp is not None:
        jv = np.asarray(target.jvp(v[None, :]), dtype=np.float64)[0]
        return mode, float(u @ jv), float(np.sum(np.abs(jv)))
    what = "VJP" if mode == "rev" else "JVP"
    raise ValueError(f"mode={mode!r}: this function provides no {what}")


def _fit(
    hs: np.ndarray, residual: np.ndarray, floor: np.ndarray
) -> tuple[np.ndarray, float, float, str]:
    """The steps used, the slope of ``log r`` against ``log h`` over the smallest steps above
    the floor (the asymptotic regime), the first-order error and the reading."""
    above = np.flatnonzero(np.isfinite(residual) & (residual > ABOVE_FLOOR * floor))
    used = np.zeros(hs.size, dtype=bool)
    if above.size < 3:
        return used, math.nan, math.nan, "flat"
    pick = above[-FIT_POINTS:]
    used[pick] = True
    slope = float(np.polyfit(np.log(hs[pick]), np.log(residual[pick]), 1)[0])
    first = float(residual[pick[-1]] / hs[pick[-1]])
    if slope >= SLOPE_CORRECT:
        return used, slope, first, "consistent"
    return used, slope, first, "wrong" if slope <= SLOPE_WRONG else "unclear"


def taylor_test(
    f: Callable[..., Any],
    *args: Any,
    argnums: int | tuple[int, ...] = 0,
    backend: str | None = None,
    grad: Callable[..., Any] | None = None,
    jac: Callable[..., Any] | None = None,
    vjp: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    mode: str = "auto",
    steps: Sequence[float] | np.ndarray | None = None,
    direction: np.ndarray | None = None,
    seed: int = 0,
    batch_size: int = 4096,
    wrt: str = "inputs",
) -> TaylorResult:
    """Taylor-remainder test of the gradient of ``f`` at ``args`` along one direction.

    Parameters
    ----------
    f : callable
        The function, in any supported framework.
    *args
        The point (arrays of one framework, floats, or pytrees of them).
    argnums : int or tuple of int
        Arguments whose gradient is tested.
    backend : str, optional
        Force a backend.
    grad, jac, vjp, jvp : callable, optional
        The derivative to test, for NumPy functions (see :func:`polygrad.check`).
    mode : {"auto", "rev", "fwd"}
        Test the VJP (reverse mode) or the JVP (forward mode).
    steps : sequence of float, optional
        Steps ``h`` in units of the direction; default ``2^-1 ... 2^-(k+8)`` with
        ``2^-k ≈ sqrt(eps)`` of the arithmetic ``f`` is evaluated in.
    direction : ndarray, shape (n,), optional
        The direction ``v`` over the flattened checked inputs; default random signs
        times magnitudes uniform in [0.5, 1.5), scaled by a power of two near ``|x_j|``
        (see :func:`continuous_signs`).
    seed : int
        Seed of the random direction and cotangent.
    batch_size : int
        Largest number of points per evaluation call.
    wrt : {"inputs", "parameters"}
        Test the gradient with respect to the arguments or the model's parameters.

    Returns
    -------
    TaylorResult
        ``.slope`` (≈ 2: correct, ≈ 1: wrong), ``.verdict``, ``print(result)``,
        ``result.plot("taylor.png")``.

    Raises
    ------
    ValueError
        Bad ``mode``, ``steps`` or ``direction``.
    MissingBackendError, InputTypeError, InputValueError, NondeterministicFunctionError
        As for :func:`polygrad.check` (``f`` not finite at the point, or not
        deterministic: no slope is measured).
    """
    if mode not in ("auto", "rev", "fwd"):
        raise ValueError(f"mode={mode!r}; choose 'auto', 'rev' or 'fwd'")
    be, argnums_t = front_door("taylor_test", f, args, argnums, backend)
    target = be.make_target(f, args, argnums_t, Supplied(grad, jac, vjp, jvp), batch_size, wrt)
    validate_target(target)  # the front door's checks, as check() runs them
    return taylor_target(target, mode=mode, steps=steps, direction=direction, seed=seed)
