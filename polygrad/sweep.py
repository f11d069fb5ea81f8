"""Error of a plain finite difference against the step: the V-shaped curve, measured and predicted.

:func:`sweep` answers the question of a float32 finite-difference check ("the error grows as the
step shrinks — which step should I choose?"). For each direction ``w`` it
measures, in the working dtype, the error of the plain central difference

    ``C(h) = (f(x + h w) - f(x - h w)) / (2 h)``

and of the forward difference ``F(h) = (f(x + h w) - f(x)) / h`` against a
reference derivative with a known error bar (float64 central differences with
Richardson extrapolation, :func:`polygrad.reference.directional_derivatives`),
over a range of steps. Next to the measurement it gives the two textbook
predictions:

* truncation error ``|g'''| h² / 6`` (central) and ``|g''| h / 2`` (forward),
  with ``g(t) = f(x + t w)``; the derivatives ``g''`` and ``g'''`` are
  estimated by Richardson extrapolation (Neville tableau) of differences of
  the difference quotients, so they carry error bars, and the error bar is
  added to the magnitude (a quadratic function has ``g''' = 0`` and no
  truncation error);
* round-off error ``σ / (√2 h)`` (central) and ``√2 σ / h`` (forward): the
  standard deviation of the difference quotient when ``f`` carries
  independent noise of standard deviation ``σ``, measured in the working
  dtype by ECnoise (:func:`polygrad.reference.estimate_noise`).

The best step minimises the predicted total, ``h* = (3σ / (√2 |g'''|))^(1/3)``
for central differences, and is reported rounded to a power of two (so that
``x + h w`` is exact in binary) and never larger than the largest step swept.

References
----------
J. J. Moré and S. M. Wild, "Estimating derivatives of noisy simulations",
ACM TOMS 38(3) (2012). P. E. Gill, W. Murray, M. A. Saunders, M. H. Wright,
"Computing forward-difference intervals for numerical optimization", SIAM J.
Sci. Stat. Comput. 4 (1983).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._random_state import preserving_random_state
from .backends import front_door
from .backends.base import Supplied, Target
from .backends.validate import validate_target
from .progress import progress
from .reference import directional_derivatives, estimate_noise
from .reference.curvature import derivative_coefficients, rounding_noise
from .reference.differences import evaluate_ladder
from .reference.steps import F64_EPS
from .reference.steps import ecnoise_step as _ecnoise_step
from .reference.steps import ladder as _ladder
from .reference.steps import pow2_scales as _pow2_scales
from .reference.steps import rademacher as _rademacher

__all__ = ["Sweep", "sweep", "sweep_target"]

"""Steps ``2^-1 ... 2^-14`` of the ladder on which ``g''`` and ``g'''`` are estimated."""


@dataclass
class Sweep:
    """Measured and predicted errors of plain finite differences over a range of steps.

    All step sizes are in units of the direction ``w``; with the default
    directions (a power of two near ``|x_j|`` in coordinate ``j``) a step is
    relative to the size of the input. Errors are in the units of ``f``'s
    derivative along ``w``.

    Attributes
    ----------
    steps : ndarray, shape (L,)
        Steps ``h`` swept, decreasing.
    directions : ndarray, shape (d, n)
        The directions ``w`` (flat, in input units).
    direction_names : list of str
        A label per direction (``"x[0]"`` for a coordinate, ``"random 1"``...).
    reference, reference_error : ndarray, shape (d, m)
        Reference derivative ``g'(0)`` along each direction and its error bar.
    reference_method : str
        ``"float64"`` or ``"working"``: the arithmetic of the reference.
    central_error, forward_error : ndarray, shape (L, d)
        Measured ``max_i |C_i(h) - ref_i|`` (and the forward analogue) over the
        outputs ``i``, in the working dtype.
    central_errors_all, forward_errors_all : ndarray, shape (L, d, m)
        The same per output.
    noise : ndarray, shape (d, m)
        Noise standard deviation ``σ`` of ``f`` in the working dtype (ECnoise).
    second_derivative, second_derivative_error : ndarray, shape (d, m)
        ``g''(0)`` and its error bar (float64 arithmetic where available).
    third_derivative, third_derivative_error : ndarray, shape (d, m)
        ``g'''(0)`` and its error bar.
    predicted_truncation, predicted_roundoff : ndarray, shape (L, d)
        Predicted central-difference errors ``(|g'''| + err) h²/6`` and
        ``σ/(√2 h)`` (maximum over outputs).
    predicted_forward_truncation, predicted_forward_roundoff : ndarray, shape (L, d)
        Forward-difference predictions ``(|g''| + err) h/2`` and ``√2 σ/h``.
    optimal_step, optimal_error : float
        Step (a power of two) minimising the predicted central error over all
        directions, and the predicted error there.
    optimal_step_forward, optimal_error_forward : float
        The same for forward differences.
    optimal_steps : ndarray, shape (d,)
        Best central step per direction.
    working_dtype : str
        The function's floating dtype; ``eps`` its machine epsilon.
    eps : float
    backend : str
    notes : list of str
    """

    steps: np.ndarray
    directions: np.ndarray
    direction_names: list[str]
    reference: np.ndarray
    reference_error: np.ndarray
    reference_method: str
    central_errors_all: np.ndarray
    forward_errors_all: np.ndarray
    noise: np.ndarray
    second_derivative: np.ndarray
    second_derivative_error: np.ndarray
    third_derivative: np.ndarray
    third_derivative_error: np.ndarray
    working_dtype: str
    eps: float
    backend: str
    optimal_step: float = math.nan
    optimal_error: float = math.nan
    optimal_step_forward: float = math.nan
    optimal_error_forward: float = math.nan
    optimal_steps: np.ndarray = field(default_factory=lambda: np.empty(0))
    notes: list[str] = field(default_factory=list)

    # ---- derived curves -------------------------------------------------------------
    @property
    def central_error(self) -> np.ndarray:
        return np.max(self.central_errors_all, axis=2)

    @property
    def forward_error(self) -> np.ndarray:
        return np.max(self.forward_errors_all, axis=2)

    def _coef(self, value: np.ndarray, error: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(error), np.abs(value) + error, np.abs(value))

    def predict(
        self, h: np.ndarray | float, kind: str = "central"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (truncation, round-off) errors at steps ``h``.

        Parameters
        ----------
        h : array_like, shape (K,)
            Steps in units of the direction.
        kind : {"central", "forward"}

        Returns
        -------
        truncation, roundoff : ndarray, shape (K, d)
            Maxima over the outputs.
        """
        h = np.atleast_1d(np.asarray(h, dtype=np.float64))[:, None, None]
        if kind == "central":
            c = self._coef(self.third_derivative, self.third_derivative_error) / 6.0
            trunc = c[None] * h**2
            rnd = self.noise[None] / (math.sqrt(2.0) * h)
        elif kind == "forward":
            b = self._coef(self.second_derivative, self.second_derivative_error) / 2.0
            trunc = b[None] * h
            rnd = math.sqrt(2.0) * self.noise[None] / h
        else:
            raise ValueError(f"kind={kind!r}; choose 'central' or 'forward'")
        return np.max(trunc, axis=2), np.max(rnd, axis=2)

    @property
    def predicted_truncation(self) -> np.ndarray:
        return self.predict(self.steps, "central")[0]

    @property
    def predicted_roundoff(self) -> np.ndarray:
        return self.predict(self.steps, "central")[1]

    @property
    def predicted_forward_truncation(self) -> np.ndarray:
        return self.predict(self.steps, "forward")[0]

    @property
    def predicted_forward_roundoff(self) -> np.ndarray:
        return self.predict(self.steps, "forward")[1]

    def measured_error_at(self, h: float, kind: str = "central") -> float:
        """Measured error (maximum over directions and outputs) at a swept step ``h``.

        Raises
        ------
        KeyError
            ``h`` is not one of :attr:`steps`.
        """
        i = np.flatnonzero(np.isclose(self.steps, h, rtol=1e-12, atol=0.0))
        if i.size == 0:
            raise KeyError(f"step {h!r} was not swept")
        err = self.central_error if kind == "central" else self.forward_error
        return float(np.max(err[i[0]]))

    @property
    def scales(self) -> np.ndarray:
        """Largest ``|w_j|`` of each direction, shape (d,): a step ``h`` moves coordinates by up
        to ``h`` times this, in the input's units (the power of two near ``|x_j|`` by default)."""
        return np.max(np.abs(self.directions), axis=1)

    @property
    def coordinate_directions(self) -> bool:
        """Whether every direction moves a single coordinate."""
        return bool(np.all(np.sum(self.directions != 0, axis=1) == 1))

    def tool_step(self) -> tuple[float, float]:
        """Best absolute step for a central difference per coordinate, and its predicted error.

        The step of ``gradcheck`` (``eps``), ``tf.test.compute_gradient``
        (``delta``) and ``check_grads`` (``eps``) moves one input by an absolute
        amount. Along a direction ``w = c e_j`` the truncation error of the
        gradient entry is ``|g'''| δ² / (6 c³)`` and the round-off ``σ / (√2 δ)``
        with ``δ = c h``; the largest over directions and outputs is minimised
        over powers of two ``δ`` up to the largest swept step. Random
        directions give a bound: one coordinate's curvature is usually
        smaller than a random direction's, so the best step is at least this.

        Returns
        -------
        delta, error : float
            The step in the input's units and the predicted error there, in
            the units of the gradient.
        """
        c = self.scales[:, None]
        coef = self._coef(self.third_derivative, self.third_derivative_error) / (6.0 * c**3)
        cap = float(self.steps[0] * np.min(self.scales))
        grid = 2.0 ** np.arange(math.floor(math.log2(cap)), -80, -1, dtype=np.float64)
        g = grid[:, None, None]
        total = np.max(coef[None] * g**2 + self.noise[None] / (math.sqrt(2.0) * g), axis=(1, 2))
        i = int(np.argmin(np.where(np.isfinite(total), total, np.inf)))
        return float(grid[i]), float(total[i])

    @property
    def roundoff_side(self) -> np.ndarray:
        """Boolean mask over :attr:`steps`: steps below the optimum where round-off dominates."""
        t, r = self.predicted_truncation.max(axis=1), self.predicted_roundoff.max(axis=1)
        return (self.steps < self.optimal_step) & (r > t)

    # ---- output ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (curves are maxima over directions and outputs)."""
        from .verdicts import jsonable as _jsonable

        return _jsonable(
            {
                "backend": self.backend,
                "working_dtype": self.working_dtype,
                "eps": self.eps,
                "directions": self.direction_names,
                "reference_method": self.reference_method,
                "reference": self.reference,
                "reference_error": self.reference_error,
                "noise": self.noise,
                "second_derivative": self.second_derivative,
                "third_derivative": self.third_derivative,
                "third_derivative_error": self.third_derivative_error,
                "steps": self.steps,
                "central_error": self.central_error.max(axis=1),
                "forward_error": self.forward_error.max(axis=1),
                "predicted_truncation": self.predicted_truncation.max(axis=1),
                "predicted_roundoff": self.predicted_roundoff.max(axis=1),
                "predicted_forward_truncation": self.predicted_forward_truncation.max(axis=1),
                "predicted_forward_roundoff": self.predicted_forward_roundoff.max(axis=1),
                "optimal_step": self.optimal_step,
                "optimal_error": self.optimal_error,
                "optimal_step_forward": self.optimal_step_forward,
                "optimal_error_forward": self.optimal_error_forward,
                "optimal_steps": self.optimal_steps,
                "scales": self.scales,
                "optimal_steps_absolute": self.optimal_steps * self.scales,
                "tool_step": self.tool_step()[0],
                "tool_step_error": self.tool_step()[1],
                "notes": self.notes,
            }
        )

    def __str__(self) -> str:
        return _render(self)

    def __repr__(self) -> str:
        return (
            f"<polygrad.Sweep {self.working_dtype} {len(self.steps)} steps x "
            f"{len(self.direction_names)} directions; best step {self.optimal_step:.3g}>"
        )

    def best_step_label(self) -> str:
        """The best central step with its predicted (and, where swept, measured) error."""
        return best_step_label(self)

    def shared_scale(self) -> float:
        """The scale ``s`` shared by every direction (0 when they differ)."""
        return _one_scale(self)

    def plot(self, path: str | Path | None = None, ax: Any = None) -> Any:
        """Draw the log-log error-versus-step curve with both predictions.

        Parameters
        ----------
        path : str or Path, optional
            Where to save the figure (format from the suffix: ``.png``, ``.svg``...).
        ax : matplotlib Axes, optional
            Draw into these axes instead of a new figure.

        Returns
        -------
        matplotlib.figure.Figure

        Raises
        ------
        ImportError
            matplotlib is not installed (``pip install 'polygrad-check[plot]'``).
        """
        from .plot import plot_sweep

        return plot_sweep(self, path, ax=ax)


def _fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}g}"  # nan and inf print as such


def _pow2(h: float) -> str:
    k = math.log2(h)
    return f"2^{int(round(k))}" if abs(k - round(k)) < 1e-9 else f"{h:.3g}"


def _one_scale(s: Sweep) -> float:
    """The scale shared by every direction (0 when they differ)."""
    sc = s.scales
    return float(sc[0]) if sc.size and np.all(sc == sc[0]) else 0.0


def best_step_label(s: Sweep) -> str:
    """The best central step with its predicted and (where swept) measured error; the text and
    the figure both print this."""
    txt = f"h ≈ {_pow2(s.optimal_step)} with a predicted error of {_fmt(s.optimal_error)}"
    try:
        txt += f" (measured {_fmt(s.measured_error_at(s.optimal_step))})"
    except KeyError:
        pass
    return txt


def _absolute_lines(s: Sweep) -> list[str]:
    """Steps in the input's units: per entry for coordinates, h × s for random directions,
    and the best absolute step of a tool that moves one input at a time."""
    one = _one_scale(s)
    if s.coordinate_directions:
        per = ", ".join(
            f"{name} {_fmt(h * c, 3)}"
            for name, h, c in zip(s.direction_names[:8], s.optimal_steps, s.scales, strict=False)
        )
        head = (
            "  Steps h are relative: direction j moves x_j by h × s_j, s_j a power of two near "
            f"|x_j|. Best absolute step per entry: {per}"
            + (" ..." if len(s.direction_names) > 8 else "")
            + "."
        )
        bound = ""
    else:
        head = (
            f"  The {len(s.direction_names)} directions are random: each moves every input x_j at "
            "once by h × s_j (s_j a power of two near |x_j|"
            + (f"; s = {_fmt(one, 3)} for all" if one else "")
            + "), so a step in your units is h × s."
        )
        bound = (
            " (from random directions: one input's curvature is usually smaller, so the best "
            "step of a tool moving one input at a time is at least this)"
        )
    delta, err = s.tool_step()
    return [
        head,
        f"  Best delta of tf.test.compute_gradient / eps of gradcheck and check_grads (one input "
        f"moved at a time, in your units): {_fmt(delta, 3)} ({_pow2(delta)}), predicted error "
        f"{_fmt(err)} in the gradient's units{bound}.",
    ]


def _render(s: Sweep) -> str:
    ce, fe = s.central_error.max(axis=1), s.forward_error.max(axis=1)
    pt, pr = s.predicted_truncation.max(axis=1), s.predicted_roundoff.max(axis=1)
    one = _one_scale(s)
    lines = [
        f"polygrad sweep: plain finite differences in {s.working_dtype} against a "
        f"{s.reference_method} reference ({s.backend}; {len(s.direction_names)} direction(s): "
        f"{', '.join(s.direction_names[:4])}{'...' if len(s.direction_names) > 4 else ''})",
        f"  {'step h':>8} {'absolute' if one else '':>10} {'central':>10} {'predicted':>10} "
        f"{'truncation':>10} {'round-off':>10} {'forward':>10}",
    ]
    for i, h in enumerate(s.steps):
        mark = "  <- best" if np.isclose(h, s.optimal_step, rtol=1e-12, atol=0) else ""
        lines.append(
            f"  {_pow2(h):>8} {_fmt(h * one, 3) if one else '':>10} {_fmt(ce[i]):>10} "
            f"{_fmt(pt[i] + pr[i]):>10} {_fmt(pt[i]):>10} {_fmt(pr[i]):>10} {_fmt(fe[i]):>10}"
            f"{mark}"
        )
    sigma = float(np.max(s.noise))
    third = float(np.max(np.abs(s.third_derivative)))
    third_err = float(np.max(s.third_derivative_error))
    small = s.steps[-1]
    para = (
        f"  Errors are max |difference quotient - reference| over directions and outputs. "
        f"f carries round-off noise σ ≈ {_fmt(sigma)} in {s.working_dtype}, so a central "
        f"difference is off by about σ/(√2 h) from round-off — "
        f"{_fmt(sigma / math.sqrt(2) / small)} "
        f"at h = {_pow2(small)} — and this grows as the step shrinks; truncation adds "
        f"|f'''| h²/6 with |f'''| ≈ {_fmt(third)} (± {_fmt(third_err)}), which shrinks with it. "
        f"The best central step is {best_step_label(s)}"
    )
    if np.isfinite(s.optimal_step_forward):
        para += (
            f"; for forward differences h ≈ {_pow2(s.optimal_step_forward)} "
            f"(error {_fmt(s.optimal_error_forward)})"
        )
    para += (
        ". A disagreement between autodiff and a plain difference that follows this curve is "
        "round-off of the check, not a wrong gradient; polygrad.check() uses a float64 "
        "reference with Richardson extrapolation and an error bar instead."
    )
    lines.append(para)
    lines.extend(_absolute_lines(s))
    for note in s.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _default_steps(eps: float) -> np.ndarray:
    k = max(10, int(math.ceil(0.6 * math.log2(1.0 / eps))) + 1)
    return 2.0 ** -np.arange(1, k + 1, dtype=np.float64)


def _directions(target: Target, directions: Any, seed: int) -> tuple[np.ndarray, list[str]]:
    n = target.n
    s = _pow2_scales(target.x0)
    if directions is None:
        directions = "coordinates" if n <= 8 else 4
    if isinstance(directions, str):
        if directions != "coordinates":
            raise ValueError(
                f"directions={directions!r}; use 'coordinates', a number of random directions, "
                "or an array of shape (d, n)"
            )
        W = np.diag(s)
        return W, [target.input_layout.name_of(j) for j in range(n)]
    if isinstance(directions, (int, np.integer)):
        if directions < 1:
            raise ValueError("directions must be at least 1")
        rng = np.random.default_rng(seed)
        W = _rademacher(rng, int(directions), n) * s[None, :]
        return W, [f"random {i + 1}" for i in range(int(directions))]
    W = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    if W.shape[1] != n:
        raise ValueError(f"directions have {W.shape[1]} entries; the checked inputs have {n}")
    return W, [f"w[{i}]" for i in range(W.shape[0])]


def _best_step(
    s: Sweep, kind: str, h_max: float, per_direction: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    grid = 2.0 ** np.arange(math.floor(math.log2(h_max)), -80, -1, dtype=np.float64)
    t, r = s.predict(grid, kind)
    total = t + r  # (G, d)
    if not per_direction:
        total = total.max(axis=1, keepdims=True)
    i = np.argmin(np.where(np.isfinite(total), total, np.inf), axis=0)
    return grid[i], total[i, np.arange(total.shape[1])]


def sweep_target(
    target: Target,
    steps: Sequence[float] | np.ndarray | None = None,
    directions: Any = None,
    seed: int = 0,
    batch_size: int = 4096,
) -> Sweep:
    """:func:`sweep` on an already built :class:`~polygrad.backends.base.Target`.

    Parameters
    ----------
    target : Target
    steps, directions, seed, batch_size
        As in :func:`sweep`.

    Returns
    -------
    Sweep
    """
    W, names = _directions(target, directions, seed)
    d, n = W.shape
    hs = _default_steps(target.eps) if steps is None else np.asarray(steps, dtype=np.float64)
    if hs.ndim != 1 or hs.size < 2 or np.any(~np.isfinite(hs)) or np.any(hs <= 0):
        raise ValueError("steps must be a 1-D sequence of at least two positive numbers")
    hs = np.sort(hs)[::-1]
    notes: list[str] = []
    ref_fn, ref_eps, method = _reference_arithmetic(target, notes)
    dd, noise_w, coefficients, Y = _measured(target, W, hs, ref_fn, ref_eps, method, batch_size)
    Yp = np.moveaxis(Y[:, :, 0], 1, 0)  # (L, d, m)
    Ym = np.moveaxis(Y[:, :, 1], 1, 0)
    h = hs[:, None, None]
    ref = dd.central.value
    with np.errstate(all="ignore"):
        central = np.abs((Yp - Ym) / (2 * h) - ref[None])
        forward = np.abs((Yp - target.y0) / h - ref[None])
    if np.any(dd.jump_left | dd.jump_right):
        notes.append(
            "f has a jump or an infinite slope along some direction: the predictions assume a "
            "smooth function and do not apply there"
        )
    g2, g2e, g3, g3e = coefficients
    result = Sweep(
        steps=hs, directions=W, direction_names=names, reference=ref,
        reference_error=dd.central.error, reference_method=method,
        central_errors_all=central, forward_errors_all=forward, noise=noise_w,
        second_derivative=g2, second_derivative_error=g2e, third_derivative=g3,
        third_derivative_error=g3e, working_dtype=target.working_dtype, eps=target.eps,
        backend=target.backend, notes=notes,
    )  # fmt: skip
    _set_best_steps(result, float(hs[0]))
    return result


def _reference_arithmetic(target: Target, notes: list[str]) -> tuple[Any, float, str]:
    """``(evaluation, eps, method)`` of the reference: float64 where it can be had."""
    if target.evaluate64 is not None:
        return target.evaluate64, F64_EPS, "float64"
    notes.append(
        "no float64 evaluation of f is available: the reference and the curvature are "
        "computed in the working dtype, with correspondingly wider error bars"
    )
    return target.evaluate, target.eps, "working"


def _measured(
    target: Target, W: np.ndarray, hs: np.ndarray, ref_fn: Any, ref_eps: float, method: str,
    batch_size: int,
) -> tuple[Any, np.ndarray, tuple[np.ndarray, ...], np.ndarray]:  # fmt: skip
    """The reference along ``W``, the working dtype's noise, the second and third derivative
    coefficients and ``f`` on the ladder of steps ``hs`` (``(d, L, 2, m)``)."""
    d, n = W.shape
    with progress(4, "polygrad sweep", enabled=d * n > 20000) as bar:
        f0_ref = ref_fn(target.x0[None, :])[0]
        noise_ref = estimate_noise(ref_fn, target.x0, W, f0_ref, ref_eps, _ecnoise_step(ref_eps))
        h_max, levels = _ladder(ref_eps)
        dd = directional_derivatives(ref_fn, target.x0, W, f0_ref, noise_ref.sigma, ref_eps,
                                     method, h_max, levels, max_rows=batch_size)  # fmt: skip
        bar.update()
        noise_w = rounding_noise(
            target.evaluate, target.x0, W, target.y0, target.eps, _ecnoise_step(target.eps)
        )
        bar.update()
        coefficients = derivative_coefficients(
            ref_fn, target.x0, W, f0_ref, noise_ref.sigma, ref_eps, batch_size
        )
        bar.update()
        Y = evaluate_ladder(target.evaluate, target.x0, W, hs, batch_size)
        bar.update()
    return dd, noise_w, coefficients, Y


def _set_best_steps(result: Sweep, h_cap: float) -> None:
    """Fill in the best central and forward steps of a new ``result`` (capped at ``h_cap``)."""
    opt, err = _best_step(result, "central", h_cap)
    result.optimal_step, result.optimal_error = float(opt[0]), float(err[0])
    optf, errf = _best_step(result, "forward", h_cap)
    result.optimal_step_forward, result.optimal_error_forward = float(optf[0]), float(errf[0])
    result.optimal_steps = _best_step(result, "central", h_cap, per_direction=True)[0]
    if result.optimal_step >= h_cap:
        result.notes.append(
            f"the predicted error still falls at the largest step swept ({_pow2(h_cap)}): the "
            "truncation error is negligible here (f''' ≈ 0), so the best step is capped there"
        )


def _zero_jvp(f: Callable[..., Any]) -> Callable[..., Any]:
    """A placeholder JVP (zeros shaped like ``f``'s output) for backends without autodiff."""
    from ._pytree import tree_map

    def jvp(tangents: Any, *args: Any) -> Any:
        return tree_map(lambda a: np.zeros(np.shape(a)), f(*args))

    return jvp


@preserving_random_state
def sweep(
    f: Callable[..., Any],
    *args: Any,
    steps: Sequence[float] | np.ndarray | None = None,
    argnums: int | tuple[int, ...] = 0,
    backend: str | None = None,
    grad: Callable[..., Any] | None = None,
    jac: Callable[..., Any] | None = None,
    vjp: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    directions: Any = None,
    seed: int = 0,
    batch_size: int = 4096,
    wrt: str = "inputs",
) -> Sweep:
    """Error of plain central and forward differences against a reference, over a range of steps.

    Parameters
    ----------
    f : callable
        The function, in any supported framework (as for :func:`polygrad.check`).
    *args
        The point: arrays of one framework, Python floats, or pytrees of them.
    steps : sequence of float, optional
        Steps ``h`` in units of the direction (relative to ``|x|`` for the default
        directions). Default: ``2^-1, 2^-2, ...`` down to about ``2 eps^0.6`` of the
        working dtype (``2^-15`` for float32), wide enough to show both the
        truncation and the round-off side.
    argnums : int or tuple of int
        Which arguments to perturb.
    backend : str, optional
        Force a backend (``"numpy"``, ``"torch"``, ``"jax"``, ``"tensorflow"``).
    grad, jac, vjp, jvp : callable, optional
        Accepted for symmetry with :func:`polygrad.check`; a sweep does not need
        the derivative.
    directions : None, "coordinates", int or ndarray of shape (d, n)
        Directions ``w`` to differentiate along. Default: every coordinate when
        there are at most 8 checked inputs, else 4 random ±1 directions; each
        scaled by a power of two near ``|x_j|``.
    seed : int
        Seed of the random directions.
    batch_size : int
        Largest number of points per evaluation call.
    wrt : {"inputs", "parameters"}
        Perturb the arguments or the model's parameters.

    Returns
    -------
    Sweep
        Measured errors, predictions, best step; ``print(result)`` and
        ``result.plot("sweep.png")``.

    Raises
    ------
    ValueError
        Bad ``steps`` or ``directions``.
    MissingBackendError, InputTypeError, InputValueError, NondeterministicFunctionError
        As for :func:`polygrad.check` (``f`` not finite at the point, or not
        deterministic: no curve is measured).
    """
    be, argnums_t = front_door("sweep", f, args, argnums, backend)
    supplied = Supplied(grad, jac, vjp, jvp)
    if not be.supports_autodiff and not supplied.given():
        supplied = Supplied(jvp=_zero_jvp(f))  # a sweep needs no derivative
    target = be.make_target(f, args, argnums_t, supplied, batch_size, wrt)
    validate_target(target)  # the front door's checks, as check() runs them
    return sweep_target(
        target, steps=steps, directions=directions, seed=seed, batch_size=batch_size
    )
