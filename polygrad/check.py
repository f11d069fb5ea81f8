"""check(): autodiff against a reference derivative with a known error → verdicts.

The decision rule (all quantities per compared entry):

* the reference ``r ± e`` comes from :mod:`polygrad.reference` (mp, float64
  or working-dtype differences, with Richardson extrapolation and an error
  bar that is the larger of the truncation estimate and the propagated noise);
* the autodiff value is allowed the round-off of its own dtype,
  ``C_AD · eps · scale``, where ``scale`` is the size of the quantity (the
  entry plus the RMS of its row for Jacobian entries; the entry plus the
  2-norm of its terms for projections); where the reference's Jacobian is
  exactly 0, autodiff's own sets the scale, and where both are exactly 0
  (``floor`` away from its jumps, a stationary point), the function's size
  per input scale, ``|f_i| / s_j`` (:func:`_function_scale`);
* where a float64 evaluation of the rule decides MISMATCH, the working-dtype
  value is also allowed ``C_AD · eps · |f_i| / s_j``: the round-off a right
  rule inherits from intermediates of the size of ``f`` (``1 - tanh(x)^2``
  from a float32 ``tanh(x)`` one ulp below 1);
* ``tolerance = 2 e + C_AD · eps · scale`` (``e`` at least the accuracy a
  finite-difference reference was aimed at; where some entry fails, plus twice
  the largest move of the autodiff value a few ulps away, see
  :mod:`polygrad.dither`): MISMATCH when the float64
  evaluation of the rule (or, without one, the working-dtype evaluation) is
  further than that from the reference; UNSTABLE when only the working-dtype
  value is; NONSMOOTH when the left and right derivatives differ beyond their
  error bars (or a side jumps), also where autodiff returns NaN/Inf there (the
  norm at 0); NONFINITE when only one side is finite (the values: a finite
  reference with an infinite error bar is undecided); INCONCLUSIVE when the
  reference error bar is wider than ``sqrt(eps)·scale`` of the working dtype
  (where nothing sets a scale, only an infinite error bar is too wide).
"""

from __future__ import annotations

import concurrent.futures
import functools
import gc
import os
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from .backends import reject_number_lists, select_backend
from .backends.base import Supplied, Target, describe_exception
from .dither import ALLOWANCE, DITHERS, ULPS, dithered_args, move_sizes, spread
from .errors import GradientCheckError, InputValueError, NondeterministicFunctionError
from .progress import progress
from .refcache import CachedReference, open_cache
from .reference import directional_derivatives, estimate_noise, mp_directional_derivatives
from .reference.curvature import derivative_coefficients, rounding_noise
from .reference.differences import DirectionalDerivatives
from .reference.noise import output_resolution
from .report import SEVERITY, Entries, Report, Verdict

__all__ = ["check", "assert_gradients", "C_AD", "TOLERANCE_FACTOR"]

C_AD = 64.0
"""Round-off allowed to an autodiff value, in units of ``eps * scale``."""
TOLERANCE_FACTOR = 2.0
"""Multiple of the reference error bar allowed in the difference."""
F64_EPS = float(np.finfo(np.float64).eps)
MP_LEVELS = 14
"""Steps per direction of the mp reference (see ``mp_directional_derivatives``)."""
MP_AUTO_SECONDS = 5.0
"""``reference="auto"`` uses mp only when its estimated time is below this."""
PROGRESS_AFTER_SECONDS = 2.0
"""A reference expected to take longer shows a progress bar (on a terminal only)."""
CONDITION_ALLOWANCE = 1e4
"""``|f| / |f' s|`` the short ladder's finest step allows; beyond it the ladder moves up."""
FIRST_LEVELS = 2
"""Steps of a short ladder evaluated first along every direction; the rest only where needed
(see ``first_levels`` of :func:`polygrad.reference.directional_derivatives`)."""
SHARED_NOISE_DIRECTIONS = 32
"""Directions sampled to measure the noise once for a large full check (see ``_reference``)."""
SHARED_NOISE_MARGIN = 10.0
"""The noise used for every direction: this many times the smallest detected in the sample."""

BORROW_SHARE = 0.25
"""Share of the directions that must detect noise before the others borrow it."""


def _pow2_scales(x0: np.ndarray) -> np.ndarray:
    """Per-coordinate direction scales: powers of two near ``|x_i|``.

    Zeros get the scale of the typical nonzero entry (or 1), so a step
    ``h s_i`` is relative to the input's own size and exact in binary.
    """
    ax = np.abs(x0)
    nz = ax[ax > 0]
    big = float(np.max(nz)) if nz.size else 1.0
    typical = big * float(np.sqrt(np.mean((nz / big) ** 2))) if nz.size else 1.0
    base = np.where(ax > 0, ax, typical)
    return 2.0 ** np.round(np.log2(base))


def _ecnoise_step(eps: float) -> float:
    return float(2.0 ** (np.round(np.log2(eps ** (1.0 / 3.0))) - 2))


def _ladder(eps: float, accuracy: float | None = None) -> tuple[float, int]:
    """(largest step, number of levels) for differences in arithmetic with ``eps``.

    With a target relative ``accuracy`` far looser than ``eps`` allows (a
    float32 gradient judged on float64 differences), a short ladder of small
    steps suffices: its finest step keeps the round-off of a central
    difference (about ``eps |f| / (h |f'|)``) below the target for functions
    up to ``CONDITION_ALLOWANCE`` times larger than their derivative (in units
    of the input's scale), and three coarser steps give the Richardson tableau
    and the one-sided jump test.
    Directions that the short ladder does not resolve are refined as usual
    (see :func:`polygrad.reference.directional_derivatives`). Small steps also
    cross fewer nearby kinks, which are then not mistaken for kinks at ``x``.
    """
    if accuracy is not None:
        h_lo = float(2.0 ** np.ceil(np.log2(CONDITION_ALLOWANCE * eps / accuracy)))
        h_lo = max(2.0**-14, h_lo)
        if h_lo * 8 <= 2.0**-5:
            return h_lo * 8, 4
    h_min = max(2.0**-11, 2.0 ** (np.floor(np.log2(eps ** (1.0 / 3.0))) - 1))
    h_max = 2.0**-2
    levels = int(round(np.log2(h_max / h_min))) + 1
    return h_max, max(levels, 4)


def _rademacher(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    return rng.choice(np.array([-1.0, 1.0]), size=(k, n))


def _check_deterministic(target: Target) -> dict[str, Any]:
    """Evaluate twice more at x0; raise if the function is random."""
    info: dict[str, Any] = {}
    x = target.x0[None, :]
    fns = [("working", target.evaluate, target.eps)]
    if target.evaluate64 is not None and target.evaluate64 is not target.evaluate:
        fns.append(("float64", target.evaluate64, F64_EPS))
    for label, fn, eps in fns:
        a = fn(np.repeat(x, 2, axis=0))
        ref = target.y0 if label == "working" else a[0]
        diffs = [np.max(np.abs(a[i] - ref)) if a[i].size else 0.0 for i in range(2)]
        diffs.append(np.max(np.abs(a[0] - a[1])) if a[0].size else 0.0)
        worst = float(max(diffs))
        if worst > 0 or not np.array_equal(np.isnan(a[0]), np.isnan(a[1])):
            size = float(np.max(np.abs(ref))) if ref.size else 0.0
            if worst <= 64 * eps * size:
                info.setdefault("notes", []).append(
                    f"the function is not bitwise deterministic ({label} results differ by "
                    f"{worst:.2g}, within round-off); the difference is treated as noise"
                )
            else:
                raise NondeterministicFunctionError(
                    f"the function is not deterministic: two evaluations at the same input "
                    f"({label}) differ by {worst:.3g} (output size {size:.3g}). A gradient "
                    "check needs a deterministic function: call the model in inference mode "
                    "(dropout off, e.g. training=False / model.eval()) and fix random seeds."
                )
    return info


def _reference(
    target: Target,
    W_chunks: Callable[[], Any],
    method: str,
    fn: Callable[[np.ndarray], np.ndarray],
    eps: float,
    f0: np.ndarray,
    dps: int,
    batch_size: int,
    noise_info: dict[str, int],
    ladder: tuple[float, int],
    accuracy: float,
    shared_noise_dirs: np.ndarray | None = None,
    resolution: np.ndarray | float = 0.0,
) -> DirectionalDerivatives:
    """Reference derivatives along every direction yielded by ``W_chunks``.

    In float64/working arithmetic the noise is measured along each direction
    (ECnoise) before the differences, so that a kink or a noisy coordinate
    widens only the error bars it affects. With ``shared_noise_dirs`` (many
    directions and a loose target ``accuracy``), the noise is measured only
    along that sample of the directions, and ``SHARED_NOISE_MARGIN`` times the
    smallest value detected per output serves every direction. Rounding noise
    is a property of the evaluation rather than of the direction, while ECnoise
    reads a kink at ``x`` as noise: on a CNN input with a flat background most
    sampled pixels sit at ties, and a median (tried first) took their kink
    sizes for noise, hid nearby kinks behind wide error bars and gave wrong
    references. A direction noisier than assumed shows it in the Richardson
    tableau, whose error estimate grows with the scatter of its differences.
    ``resolution`` (per output) is the grid on which ``fn`` rounds its results
    (:func:`polygrad.reference.noise.output_resolution`): no noise estimate is
    below its rounding.
    """
    h_max, levels = ladder
    shared = None
    if method != "mp" and shared_noise_dirs is not None:
        noise = estimate_noise(
            fn, target.x0, shared_noise_dirs, f0, eps, _ecnoise_step(eps), resolution=resolution
        )
        noise_info["evaluations"] += noise.evaluations
        noise_info["detected"] += int(np.sum(noise.inform == 1))
        noise_info["total"] += int(noise.inform.size)
        # the smallest noise measured where some was detected: ECnoise reads a kink as
        # noise, and inputs at ties (a flat image background) can be most of the sample;
        # directions along which f is constant to the last bit (code 2) say nothing
        detected = np.where(noise.inform == 1, noise.sigma, np.inf)
        low = np.min(detected, axis=0)
        shared = SHARED_NOISE_MARGIN * np.where(np.isfinite(low), low, noise.sigma.min(axis=0))
    parts = []
    for W in W_chunks():
        if method == "mp":
            assert target.evaluate_mp is not None
            parts.append(
                mp_directional_derivatives(
                    target.evaluate_mp, target.x0, W, dps=dps, levels=MP_LEVELS
                )
            )
        else:
            if shared is not None:
                sigma = np.broadcast_to(shared, (W.shape[0], f0.size))
            else:
                noise = estimate_noise(
                    fn, target.x0, W, f0, eps, _ecnoise_step(eps), resolution=resolution
                )
                noise_info["evaluations"] += noise.evaluations
                noise_info["detected"] += int(np.sum(noise.inform == 1))
                noise_info["total"] += int(noise.inform.size)
                sigma = _borrow_unseen_noise(noise.sigma, noise.inform, noise.floor)
            parts.append(
                directional_derivatives(
                    fn,
                    target.x0,
                    W,
                    f0,
                    sigma,
                    eps,
                    method,
                    h_max,
                    levels,
                    max_rows=batch_size,
                    target_relative_error=accuracy,
                    # a short ladder (a reference far more precise than needed) starts
                    # with its coarse pair; a long one is evaluated whole
                    first_levels=FIRST_LEVELS if levels <= 4 else 0,
                    resolution=target.eps,
                )
            )
    if len(parts) == 1:
        return parts[0]
    from .reference.richardson import Estimate

    def cat(name: str) -> Estimate:
        es = [getattr(p, name) for p in parts]
        return Estimate(
            value=np.concatenate([e.value for e in es]),
            error=np.concatenate([e.error for e in es]),
            step=np.concatenate([e.step for e in es]),
            noise=np.concatenate([e.noise for e in es]),
            method=es[0].method,
            evaluations=sum(e.evaluations for e in es),
        )

    return DirectionalDerivatives(
        cat("central"),
        cat("right"),
        cat("left"),
        np.concatenate([p.jump_right for p in parts]),
        np.concatenate([p.jump_left for p in parts]),
    )


def _raised_note(raised: dict[str, Any]) -> str:
    return (
        f"the function raised {describe_exception(raised['first'])} at {raised['count']} "
        "of the points near x that the reference needed; they count as points where it "
        "is not finite"
    )


def _cache_options(
    target: Target, argnums: tuple[int, ...], modes: list[str], full: bool, **options: Any
) -> dict[str, Any]:
    """What besides the function and the point decides the reference (the cache key)."""
    from .fingerprint import framework_version

    return dict(options, backend=target.backend, framework=framework_version(target.backend),
                argnums=argnums, modes=tuple(modes), full=full)  # fmt: skip


def _sharded(
    executor: concurrent.futures.Executor, target: Target, f: Callable[..., Any],
    args: tuple[Any, ...], argnums: tuple[int, ...], supplied: Supplied, batch_size: int,
    wrt: str, use64: bool, method: str, fn: Callable[[np.ndarray], np.ndarray], eps: float,
    f0: np.ndarray, dps: int, W_chunks: Callable[[], Any], noise_info: dict[str, int],
    ladder: tuple[float, int], accuracy: float, shared_noise_dirs: np.ndarray | None,
    resolution: np.ndarray | float,
) -> DirectionalDerivatives:  # fmt: skip
    """:func:`polygrad.sharding.sharded_reference` with the check's state."""
    from .sharding import ShardSpec, sharded_reference

    spec = ShardSpec(f, args, argnums, target.backend, supplied, batch_size, wrt, use64)
    return sharded_reference(
        executor, spec, target, fn, W_chunks, noise_info, method=method, eps=eps, f0=f0,
        dps=dps, batch_size=batch_size, ladder=ladder, accuracy=accuracy,
        shared_noise_dirs=shared_noise_dirs, resolution=resolution,
    )  # fmt: skip


def _autodiff_roundoff(
    be: Any,
    f: Callable[..., Any],
    args: tuple[Any, ...],
    argnums: tuple[int, ...],
    supplied: Supplied,
    batch_size: int,
    seed: int,
    blocks: list[Entries],
    failing: list[np.ndarray],
    compare_all: Callable[..., list[Entries]],
    wd64: bool,
    target_dtype: str,
) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per block, the (working, float64) allowance for autodiff round-off, or None.

    The autodiff values are evaluated again at inputs moved by a few ulps of
    the working dtype (see :mod:`polygrad.dither`), and, while some ``failing``
    entry's value did not move at all, by larger moves (:func:`move_sizes`);
    each entry gets twice the largest move at the smallest size that moved it.
    Part of each move is the true change of the derivative over the move (its
    sensitivity to the input), which is not round-off: an input where the
    derivative changes fast (``cos`` at ``x ≈ 1000`` in float32) would
    otherwise hide a wrong rule. For a narrower working dtype that part is
    measured by the float64 evaluation of the rule at the same moved inputs and
    taken out, and the float64 value gets no allowance (a move of float32 ulps
    says nothing about float64 round-off). A float64 function's moves come in
    pairs of opposites, and only the even part of each pair counts: the linear
    change cancels. Without a float64 evaluation of a narrower rule there is no
    allowance (None); None also when the inputs cannot be moved (not float16,
    float32 or float64). Where the function fails at moved inputs, the moves
    stop, and entries that had not moved yet get no allowance.
    """
    if not wd64 and any(np.all(np.isnan(b.autodiff64)) for b in blocks):
        return None
    try:
        dtype = np.dtype(target_dtype)
    except TypeError:  # a dtype NumPy does not know (bfloat16 without ml_dtypes)
        return None
    if dtype not in (np.float16, np.float32, np.float64):  # bfloat16 (ml_dtypes): not moved
        return None
    allow = [np.full(b.autodiff.shape, np.nan) for b in blocks]
    rng = np.random.default_rng([seed, 3])
    for ulps in move_sizes(dtype):
        moved = dithered_args(be, args, argnums, rng, ulps, paired=wd64)
        if moved is None:
            return None
        try:
            others = [compare_all(be.make_target(f, a, argnums, supplied, batch_size))
                      for a in moved]  # fmt: skip
        except Exception:  # noqa: BLE001 - the allowance is optional: keep the verdicts
            break
        for j, b in enumerate(blocks):
            moves = [o[j].autodiff - b.autodiff for o in others]
            # per entry, the smallest size of move that moved its value at all
            new = np.isnan(allow[j]) & (spread(moves) > 0)
            if wd64:  # the even part of each pair: the derivative's linear change cancels
                moves = [(moves[2 * i] + moves[2 * i + 1]) / 2 for i in range(len(moves) // 2)]
            else:  # the derivative's own change, from the float64 rule, taken out
                moves = [mv - (o[j].autodiff64 - b.autodiff64)
                         for mv, o in zip(moves, others, strict=True)]  # fmt: skip
            allow[j] = np.where(new, ALLOWANCE * spread(moves), allow[j])
        if not any(np.any(fl & np.isnan(al)) for fl, al in zip(failing, allow, strict=True)):
            break
    out = []
    for al in allow:
        al = np.nan_to_num(al)
        out.append((al, al) if wd64 else (al, np.zeros_like(al)))
    return out


def _raising_points_as_nan(
    fn: Callable[[np.ndarray], np.ndarray], m: int, raised: dict[str, Any]
) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` with the rows at which it raises returned as NaN (``(B, n) -> (B, m)``).

    A batch that raises is split in halves until the rows that raise are
    found; ``raised`` records the first exception and how many rows raised.
    """

    def guarded(X: np.ndarray) -> np.ndarray:
        try:
            return fn(X)
        except Exception as exc:  # noqa: BLE001 - the user's function, at a point away from x
            if X.shape[0] <= 1:
                raised.setdefault("first", exc)
                raised["count"] = raised.get("count", 0) + X.shape[0]
                return np.full((X.shape[0], m), np.nan)
            half = X.shape[0] // 2
            return np.concatenate([guarded(X[:half]), guarded(X[half:])])

    return guarded


def _borrow_unseen_noise(sigma: np.ndarray, inform: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """``(d, m)`` noise, where a direction saw none, raised to the least seen elsewhere.

    Rounding noise is a property of the evaluation more than of the direction,
    but a direction can miss it: where its samples change ``f`` by a near-whole
    number of ulps, their rounding errors drift smoothly instead of scattering
    (a step scaled to a tiny ``|x_i|`` in a function of size 1, e.g.
    ``exp(x) - 1 - x`` near 0), ECnoise's high differences vanish, and the noise
    it reports is at the floor ``eps |f|``. Such a direction gets, per output,
    the smallest noise detected above the floor along the others, provided at
    least a quarter of the directions (and two) detected some: ECnoise also
    reads a kink at ``x`` as noise, and a single kinked coordinate must not lend
    its kink to the smooth ones. A direction along which ``f`` does not change
    at all (code 2) keeps its floor: its difference quotients are exactly 0.
    """
    seen = (inform == 1) & (sigma > floor[None, :])
    drift = (inform == 1) & ~seen
    # ECnoise reads a kink as noise: only noise seen along a fair share of the
    # directions is the evaluation's (one kinked coordinate among 8 smooth ones is not)
    drift &= np.sum(seen, axis=0)[None, :] >= max(2, BORROW_SHARE * sigma.shape[0])
    with np.errstate(invalid="ignore"):
        least = np.min(np.where(seen, sigma, np.inf), axis=0)
    least = np.where(np.isfinite(least), least, 0.0)
    return np.where(drift, np.maximum(sigma, least[None, :]), sigma)


def _naive_roundoff(
    target: Target, direction: np.ndarray, ref_fn: Callable[[np.ndarray], np.ndarray] | None
) -> dict[str, Any] | None:
    """Predict the error of a plain fixed-step central difference in the working dtype.

    The same estimators as :func:`polygrad.sweep` (one random direction): the
    working-dtype noise and, from float64 evaluations, the third derivative.
    """
    W = direction[None, :]
    try:
        sig = rounding_noise(
            target.evaluate, target.x0, W, target.y0, target.eps, _ecnoise_step(target.eps)
        )[0]
    except Exception:  # noqa: BLE001 - only an explanation; never fail the check on it
        return None
    i = int(np.argmax(sig))
    sigma = float(sig[i])
    out: dict[str, Any] = {
        "noise": sigma,
        "noise_ulps": sigma / max(target.eps * abs(target.y0[i]), 1e-300),
    }
    if ref_fn is not None:
        f0 = ref_fn(target.x0[None, :])[0]
        noise64 = estimate_noise(ref_fn, target.x0, W, f0, F64_EPS, _ecnoise_step(F64_EPS))
        _, _, g3, g3_err = derivative_coefficients(
            ref_fn, target.x0, W, f0, noise64.sigma, F64_EPS, 4096
        )
        # a third derivative within its own error bar is no evidence of curvature
        third = float(abs(g3[0, i])) if abs(g3[0, i]) > g3_err[0, i] else 0.0
        out["third_derivative"] = third
        if third > 0 and sigma > 0:
            h_opt = (3 * sigma / third) ** (1 / 3)
            out["optimal_step"] = h_opt
            out["optimal_error"] = third * h_opt**2 / 6 + sigma / h_opt
    out["example_step"] = 2.0**-13
    out["example_error"] = sigma / 2.0**-13
    return out


_F = TypeVar("_F", bound=Callable[..., Any])


def without_gc_pauses(fn: _F) -> _F:
    """Run ``fn`` with the objects that exist before it hidden from the garbage collector.

    A check allocates many short-lived objects, which triggers full
    collections; each one traverses everything the program holds, and with
    TensorFlow and Keras loaded that takes about 0.2 s. ``gc.freeze()`` moves
    the objects that exist before the call to a permanent generation, so
    collections during the call only traverse what the call allocates (and
    still free its reference cycles); ``gc.unfreeze()`` returns them after.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled() or gc.get_freeze_count():
            return fn(*args, **kwargs)
        gc.freeze()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.unfreeze()

    return wrapper  # type: ignore[return-value]


def normalize_argnums(argnums: int | tuple[int, ...], nargs: int) -> tuple[int, ...]:
    """``argnums`` as a tuple of non-negative indices into ``nargs`` arguments.

    Raises
    ------
    ValueError
        An index outside ``-nargs .. nargs - 1``.
    """
    items = (argnums,) if isinstance(argnums, int) else argnums
    try:
        out = tuple(int(a) for a in items)
        if not all(isinstance(a, (int, np.integer)) for a in items):
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(
            f"argnums={argnums!r}: give the position of the differentiated argument (an int, "
            "e.g. argnums=1) or a tuple of positions"
        ) from None
    for a in out:
        if not -nargs <= a < nargs:
            raise ValueError(f"argnums={argnums} but only {nargs} argument(s) were given")
    return tuple(a % nargs for a in out)


@without_gc_pauses
def check(
    f: Callable[..., Any],
    *args: Any,
    argnums: int | tuple[int, ...] = 0,
    backend: str | None = None,
    grad: Callable[..., Any] | None = None,
    jac: Callable[..., Any] | None = None,
    vjp: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    mode: str = "auto",
    reference: str = "auto",
    strategy: str = "auto",
    projections: int = 8,
    wrt: str = "inputs",
    order: int = 1,
    dps: int = 50,
    seed: int = 0,
    batch_size: int = 4096,
    budget: float = 60.0,
    nonsmooth: str = "allow",
    cache: bool | str | os.PathLike[str] | None = None,
    executor: concurrent.futures.Executor | None = None,
    _capture: dict[str, Any] | None = None,
) -> Report:
    """Check the derivative of ``f`` at ``args`` against a reference with a known error.

    Parameters
    ----------
    f : callable
        The function (or model). Its output may be a scalar, an array, or a
        tuple/list/dict of arrays.
    *args
        Arguments: arrays of one framework (NumPy, PyTorch, JAX, TensorFlow),
        Python floats, or tuples/lists/dicts of them.
    argnums : int or tuple of int
        Which arguments to differentiate (as in ``jax.grad``).
    backend : str, optional
        ``"numpy"``, ``"torch"``, ``"jax"`` or ``"tensorflow"``; by default
        chosen from the array types.
    grad, jac, vjp, jvp : callable, optional
        The derivative to check, for functions without autodiff (NumPy): see
        :class:`polygrad.backends.base.Supplied` for the calling conventions.
    mode : {"auto", "rev", "fwd", "both"}
        Check reverse mode (VJP), forward mode (JVP) or both. ``"auto"``:
        reverse when available.
    reference : {"auto", "mp", "float64", "working"}
        Source of the reference derivative. ``"auto"`` uses mp when the
        function runs on mpmath numbers, the working dtype is float64 and the
        problem is small; otherwise float64 differences; otherwise
        working-dtype differences (with honestly wider error bars).
    strategy : {"auto", "full", "projections"}
        Compare every Jacobian entry, or random projections ``uᵀJw``.
        ``"auto"``: full when its estimated cost is within ``budget`` seconds.
    projections : int
        Number of random directions in projection mode.
    wrt : {"inputs", "parameters"}
        Differentiate with respect to the arguments or the model's parameters.
    order : {1, 2}
        2 checks the gradient of the gradient (Hessian-vector products).
    dps : int
        Decimal digits for the mp reference.
    seed : int
        Seed of the random directions and cotangents.
    batch_size : int
        Largest number of points evaluated in one call.
    budget : float
        Seconds a full Jacobian check may take before projections are used.
    nonsmooth : {"allow", "within", "fail"}
        What ``report.ok`` makes of NONSMOOTH entries. ``"allow"`` (default):
        a point of non-differentiability is not a gradient error. ``"within"``:
        autodiff must lie between the left and right derivatives — right for
        one elementary kink (relu, abs, max), too strict for compositions, where
        autodiff may legitimately return other values (Bolte & Pauwels,
        "A mathematical model for automatic differentiation in machine
        learning", NeurIPS 2020). ``"fail"``: any NONSMOOTH entry fails.
    cache : bool or path, optional
        Keep the reference on disk and reuse it when the same function (code,
        closure, weights) is checked at the same point with the same options
        (see :mod:`polygrad.refcache`). True: the user cache folder (or
        ``$POLYGRAD_CACHE_DIR``); a path: that folder. Default: no cache.
    executor : concurrent.futures.Executor, optional
        Compute the reference's directions in shards on this executor (a
        process pool, Dask's ``Client.get_executor()``); same verdict as in
        one process (see :mod:`polygrad.sharding`).

    Returns
    -------
    Report
        ``report.verdict``, ``report.ok``, ``print(report)``, ``report.to_dict()``.

    Raises
    ------
    InputTypeError
        Integer or bool inputs. (Complex inputs are checked through their
        realification, in polygrad's convention: see :mod:`polygrad.complex`.)
    InputValueError
        NaN/Inf in the inputs, or a non-finite function value at the point.
    ShapeMismatchError
        A supplied derivative has the wrong shape.
    NondeterministicFunctionError
        Two evaluations at the same input differ (e.g. dropout in training mode).
    InputMutationError
        The function modifies its input in place.
    MissingBackendError
        The framework for these arrays is not installed.
    UnpicklableFunctionError
        ``executor`` runs in other processes and ``f`` cannot be serialised.
    """
    user_f, user_args = f, args
    t_start = time.perf_counter()
    if not args:
        raise TypeError("check(f, *args): pass the point at which to check the derivative")
    argnums_t = normalize_argnums(argnums, len(args))
    for option, value, allowed in (
        ("mode", mode, ("auto", "rev", "fwd", "both")),
        ("reference", reference, ("auto", "mp", "float64", "working")),
        ("strategy", strategy, ("auto", "full", "projections")),
        ("wrt", wrt, ("inputs", "parameters")),
        ("nonsmooth", nonsmooth, ("allow", "within", "fail")),
    ):
        if value not in allowed:
            raise ValueError(f"{option}={value!r}; choose one of {', '.join(allowed)}")
    if order not in (1, 2):
        raise ValueError(f"order={order}; polygrad checks first (1) and second (2) derivatives")

    reject_number_lists(f, args, argnums_t)
    be = select_backend(args, backend)
    supplied = Supplied(grad, jac, vjp, jvp)
    from .complex import ComplexInfo, name_pairs, realify

    cinfo = ComplexInfo()
    if wrt == "inputs":  # complex inputs/outputs: check the real map (Re, Im) -> (Re f, Im f)
        f, args, supplied, cinfo = realify(be, f, args, argnums_t, supplied)
        if cinfo.any and order == 2:
            raise ValueError("order=2 is not supported for complex inputs or outputs")
    if order == 2:
        f = be.gradient_function(f, args, argnums_t)
    target = be.make_target(f, args, argnums_t, supplied, batch_size, wrt)
    name_pairs(target, cinfo)  # complex leaves named Re/Im, the convention noted
    n, m = target.n, target.m
    details: dict[str, Any] = {"notes": list(target.notes) + (cinfo.notes if cinfo else [])}
    if n == 0 or m == 0:
        raise InputValueError(f"nothing to check: {n} inputs and {m} outputs")
    if not np.all(np.isfinite(target.y0)):
        raise InputValueError(
            "the function value at the point is not finite "
            f"({int(np.sum(~np.isfinite(target.y0)))} of {m} outputs); its derivative cannot "
            "be checked there"
        )
    det = _check_deterministic(target)
    details["notes"] += det.get("notes", [])

    # ---- which autodiff quantities -------------------------------------------------
    if mode == "auto":
        modes = ["rev"] if target.has_mode("rev") else ["fwd"]
    elif mode == "both":
        modes = ["rev", "fwd"]
    else:
        modes = [mode]
    for md in modes:
        if not target.has_mode(md):
            word = "reverse" if md == "rev" else "forward"
            why = [n for n in target.notes if word in n and ("failed" in n or "ignores" in n)]
            why += [n for n in target.notes if ("VJP" if md == "rev" else "JVP") in n]
            raise ValueError(
                f"mode={mode!r} needs {'a VJP' if md == 'rev' else 'a JVP'}, which this "
                "function does not provide"
                + (" (pass vjp=/grad=/jac= or jvp=/jac=)" if target.backend == "numpy" else "")
                + (": " + "; ".join(dict.fromkeys(why)) if why else "")
            )

    # ---- reference arithmetic ----------------------------------------------------
    wd64 = target.working_dtype == "float64"
    ref_fn, ref_eps, ref_method = target.evaluate, target.eps, "working"
    if target.evaluate64 is not None and reference != "working":
        ref_fn, ref_eps, ref_method = target.evaluate64, F64_EPS, "float64"
    elif reference in ("float64", "mp") and target.evaluate64 is None:
        details["notes"].append(
            "a float64 evaluation is not available; the reference uses the working dtype"
        )
    if wd64:
        ref_method = "float64"
    f0_ref = ref_fn(target.x0[None, :])[0]
    # away from x, a point where f raises (a matrix no longer positive definite) is a
    # point where f is not finite: the differences step around it
    raised: dict[str, Any] = {}
    ref_fn = _raising_points_as_nan(ref_fn, target.m, raised)

    rng = np.random.default_rng(seed)
    s = _pow2_scales(target.x0)

    # ---- strategy: full Jacobian or projections ------------------------------------
    # The reference need only be accurate to a fraction of the working dtype's round-off:
    # twice its error enters the tolerance beside C_AD * eps * scale.
    accuracy = max(1e-12, 30 * ref_eps, target.eps)
    h_max, levels = _ladder(ref_eps, accuracy)
    probe = min(n, 64)
    t0 = time.perf_counter()
    ref_fn(np.repeat(target.x0[None, :], probe, axis=0))
    t_row = (time.perf_counter() - t0) / probe
    full_cost = n * 2 * levels * t_row * 1.5
    if strategy == "auto":
        full = n <= 16 or full_cost <= budget
    else:
        full = strategy == "full"
    d = n if full else projections
    ckey, hit, rcache, notes_mark = None, None, open_cache(cache), len(details["notes"])
    if rcache is not None:
        ckey, hit = rcache.lookup(user_f, user_args, details["notes"], _cache_options(
            target, argnums_t, modes, full, reference=reference, strategy=strategy,
            projections=projections, wrt=wrt, order=order, dps=dps, seed=seed,
            batch_size=batch_size, budget=budget,
        ))  # fmt: skip
        notes_mark = len(details["notes"])

    use_mp = False
    # "auto" considers mp only for small problems: the graph is captured only then
    small = d * n <= 4096
    if hit is None and (reference == "mp" or (reference == "auto" and wd64 and small)):
        if not target.mp_mode():
            if reference == "mp":
                details["notes"].append(
                    "mp reference unavailable ("
                    + (target.mp_unavailable_reason or "the function cannot run on mpmath numbers")
                    + "); a float64 reference was used instead"
                )
        elif reference == "mp":
            use_mp = True
        else:
            # "auto": mp when its estimated cost is modest (one timed evaluation)
            t0 = time.perf_counter()
            assert target.evaluate_mp is not None  # mp_mode() said so
            try:
                target.evaluate_mp(target.x0, np.zeros_like(target.x0), dps)
                per_eval = time.perf_counter() - t0
            except Exception as exc:  # noqa: BLE001 - mp evaluation failed: float64 it is
                per_eval = np.inf
                details["notes"].append(
                    f"the mp reference failed ({type(exc).__name__}: {exc}); "
                    "float64 differences used"
                )
            mp_seconds = per_eval * (2 * MP_LEVELS * d + 1)
            use_mp = mp_seconds <= MP_AUTO_SECONDS
            if np.isfinite(mp_seconds) and not use_mp:
                details["notes"].append(
                    f"an mp reference would take about {mp_seconds:.0f} s here; float64 "
                    "differences were used (pass reference='mp' to use it anyway)"
                )
    if use_mp:
        ref_method = "mp"

    noise_dirs = _rademacher(rng, 1, n) * s[None, :]
    if full:
        chunk = max(1, min(n, (1 << 22) // max(n, 1)))

        def W_chunks() -> Any:
            for a in range(0, n, chunk):
                b = min(n, a + chunk)
                W = np.zeros((b - a, n))
                W[np.arange(b - a), np.arange(a, b)] = s[a:b]
                yield W

        W_all = None
    else:
        W_all = _rademacher(rng, projections, n) * s[None, :]

        def W_chunks() -> Any:
            yield W_all

    # a full check of many entries against a loose target: measure the noise along a
    # sample of the coordinate directions only (it costs more than the short ladder)
    shared_noise_dirs = None
    if full and levels <= 4 and n >= 8 * SHARED_NOISE_DIRECTIONS:
        pick = np.random.default_rng([seed, 1]).choice(n, SHARED_NOISE_DIRECTIONS, replace=False)
        shared_noise_dirs = np.zeros((SHARED_NOISE_DIRECTIONS, n))
        shared_noise_dirs[np.arange(SHARED_NOISE_DIRECTIONS), pick] = s[pick]

    t_ref = time.perf_counter()
    noise_info = {"evaluations": 0, "detected": 0, "total": 0}
    rows = d * (2 * levels + (9 if shared_noise_dirs is None else 0))
    if hit is not None:
        dd, ref_method, noise_info = hit.dd, hit.method, dict(hit.noise_info)
        details["notes"] += list(hit.notes)
    else:
        with progress(rows, "polygrad check", enabled=rows * t_row > PROGRESS_AFTER_SECONDS) as bar:

            def ref_fn_counted(X: np.ndarray) -> np.ndarray:
                out = ref_fn(X)
                bar.update(X.shape[0])
                return out

            # the grid of f's values: a small result of cancelling terms rounds at their size
            resolution, noise_info["evaluations"] = output_resolution(
                ref_fn_counted, target.x0, f0_ref, s, _ecnoise_step(ref_eps),
                np.random.default_rng([seed, 2]),
            )  # fmt: skip

            def run_reference(method: str) -> DirectionalDerivatives:
                if executor is not None:
                    use64 = target.evaluate64 is not None and reference != "working"
                    return _sharded(executor, target, f, args, argnums_t, supplied,
                                    batch_size, wrt, use64, method, ref_fn, ref_eps, f0_ref,
                                    dps, W_chunks, noise_info, (h_max, levels), accuracy,
                                    shared_noise_dirs, resolution)  # fmt: skip
                return _reference(
                    target,
                    W_chunks,
                    method,
                    ref_fn_counted,
                    ref_eps,
                    f0_ref,
                    dps,
                    batch_size,
                    noise_info,
                    (h_max, levels),
                    accuracy,
                    shared_noise_dirs,
                    resolution,
                )

            try:
                dd = run_reference(ref_method)
            except Exception as exc:  # noqa: BLE001 - any failure of mp evaluation means: fall back
                if ref_method != "mp":
                    raise
                details["notes"].append(
                    f"the mp reference failed ({type(exc).__name__}: {exc}); "
                    "float64 differences used"
                )
                ref_method = "float64" if target.evaluate64 is not None else "working"
                dd = run_reference(ref_method)
    t_ref = time.perf_counter() - t_ref
    if rcache is not None and ckey is not None and hit is None:
        notes = details["notes"][notes_mark:] + ([_raised_note(raised)] if raised else [])
        rcache.store(ckey, CachedReference(dd, ref_method, noise_info, tuple(notes), t_ref))
    # finite differences vouch for the accuracy they were aimed at; mp for its error bars
    vouched = 0.0 if ref_method == "mp" else accuracy

    # ---- autodiff quantities and comparison ---------------------------------------
    if _capture is not None:  # polygrad.compare judges other implementations on this reference
        _capture.update(
            target=target, dd=dd, full=full, s=s, W_all=W_all, ref_eps=ref_eps, modes=modes,
            rng_state=rng.bit_generator.state, ref_method=ref_method, vouched=vouched,
        )  # fmt: skip
    rng_state = rng.bit_generator.state

    def compare_all(
        t: Target, allowances: list[tuple[np.ndarray, np.ndarray]] | None = None
    ) -> list[Entries]:
        return _compare_modes(
            t, dd, modes, full, s, W_all, rng_state, ref_eps, vouched, allowances
        )  # fmt: skip

    allowances = None

    blocks = compare_all(target)
    failing = [np.isin(b.status, [SEVERITY[Verdict.MISMATCH], SEVERITY[Verdict.UNSTABLE]])
               for b in blocks]  # fmt: skip
    if (
        wrt == "inputs"
        and order == 1
        and not (cinfo and cinfo.any)
        and any(fl.any() for fl in failing)
    ):
        allowances = _autodiff_roundoff(be, f, args, argnums_t, supplied, batch_size, seed,
                                        blocks, failing, compare_all, wd64,
                                        target.working_dtype)  # fmt: skip
        if allowances is not None:
            blocks = compare_all(target, allowances)
            details["notes"].append(
                f"some entries failed: their autodiff values were evaluated again at {DITHERS} "
                f"inputs moved by up to {ULPS} ulps (further where a value did not move), and "
                f"each entry is allowed {ALLOWANCE:g} times the largest move (the round-off of "
                "evaluating the rule; a wrong rule is wrong by the same amount there)"
            )
    if reference == "auto" and ref_method != "mp":
        # no entry fails on a finite-difference reference while a stronger one can be had
        W_dirs = np.diag(s) if full else W_all
        assert W_dirs is not None
        merged = _escalate(target, dd, blocks, W_dirs, dps, details)
        if merged is not None:
            dd = merged  # compare_all reads it
            blocks = compare_all(target, allowances)
            _name_deciders(blocks, details, ref_method)
    entries = _concat_entries(blocks, prefix=len(modes) > 1, modes=modes)
    details["notes"] += _edge_notes(entries, f0_ref)

    verdict, ok = _overall(entries, nonsmooth)
    details.update(
        nonsmooth=nonsmooth,  # the option, for the report's explanation of NONSMOOTH
        backend=target.backend,
        working_dtype=target.working_dtype,
        eps=target.eps,
        inputs=n,
        outputs=m,
        input_names=[leaf.name for leaf in target.input_layout.leaves],
        modes=modes,
        strategy="full" if full else "projections",
        reference={
            "method": ref_method,
            "dps": dps if ref_method == "mp" else None,
            "noise": float(np.median(dd.central.noise)),
            "noise_max": float(np.max(dd.central.noise)),
            "noise_detected_fraction": noise_info["detected"] / max(noise_info["total"], 1),
            "noise_measured_along": (
                "each direction"
                if shared_noise_dirs is None
                else f"{SHARED_NOISE_DIRECTIONS} sampled directions "
                f"({SHARED_NOISE_MARGIN:g} x the smallest used for all)"
            ),
            "target_accuracy": accuracy,
            "noise_relative": float(
                np.median(np.max(dd.central.noise, axis=1) / max(np.max(np.abs(f0_ref)), 1e-300))
            ),
            "median_step": float(np.median(dd.central.step)),
            "median_relative_error": _median_relative(dd.central.value, dd.central.error),
            "evaluations": int(dd.central.evaluations + noise_info["evaluations"]),
            "seconds": t_ref,
            "cached": hit is not None,
        },
        rules={
            "tolerance": f"2 x reference error bar + {C_AD:g} x eps x scale",
            "has_float64_autodiff": bool(
                (target.vjp64 is not None) if "rev" in modes else (target.jvp64 is not None)
            ),
        },
    )
    if not full:
        details["projections"] = _detection_power(entries, projections, W_all, s)
    if ref_method != "mp" and wd64 and verdict == Verdict.PASS:
        # a float64 rule can be wrong by less than a difference quotient resolves
        resolution = TOLERANCE_FACTOR * details["reference"]["median_relative_error"]
        details["reference"]["resolution"] = resolution
        details["notes"].append(
            f"the reference is {ref_method} central differences: this check cannot resolve "
            f"gradient errors below about {resolution:.1g} relative; "
            + (
                "reference='mp' (if the function runs on mpmath numbers) resolves far smaller ones"
                if not small and "mp" in target.deferred  # not worth capturing to say so
                else "reference='mp' resolves far smaller ones"
                if target.mp_mode()
                else "an mp reference would resolve far smaller ones, but it is unavailable ("
                + (target.mp_unavailable_reason or "the function cannot run on mpmath numbers")
                + ")"
            )
        )
    if raised:
        details["notes"].append(_raised_note(raised))
    if target.working_dtype != "float64":
        guarded64 = None
        if target.evaluate64 is not None:
            guarded64 = _raising_points_as_nan(target.evaluate64, target.m, {})
        rnd = _naive_roundoff(target, noise_dirs[0], guarded64)
        if rnd is not None:
            details["naive_central_difference"] = rnd
    details["notes"] = list(dict.fromkeys(details["notes"] + list(target.notes)))
    try:  # supporting evidence only: never fails a check
        from .taylor import taylor_target

        details["taylor"] = taylor_target(target, mode=modes[0], seed=seed).to_dict()
    except Exception:  # noqa: BLE001
        pass
    details["seconds"] = time.perf_counter() - t_start
    quantity = "Jacobian entries" if full else "projections uᵀJw"
    return Report(verdict=verdict, ok=ok, entries=entries, quantity=quantity, details=details)


def _compare_modes(
    target: Target,
    dd: DirectionalDerivatives,
    modes: list[str],
    full: bool,
    s: np.ndarray,
    W: np.ndarray | None,
    rng_state: Mapping[str, Any],
    ref_eps: float,
    vouched: float = 0.0,
    allowances: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[Entries]:
    """:func:`_compare` for each of ``modes``, each from the random state ``rng_state``
    (the same cotangents for every target judged against one reference)."""
    blocks = []
    for j, md in enumerate(modes):
        rng = np.random.default_rng()
        rng.bit_generator.state = rng_state
        allowance = None if allowances is None else allowances[j]
        blocks.append(_compare(target, dd, md, full, s, W, rng, ref_eps, vouched, allowance))
    return blocks


def _compare(
    target: Target,
    dd: DirectionalDerivatives,
    md: str,
    full: bool,
    s: np.ndarray,
    W: np.ndarray | None,
    rng: np.random.Generator,
    ref_eps: float,
    vouched: float = 0.0,
    allowance: tuple[np.ndarray, np.ndarray] | None = None,
) -> Entries:
    n, m = target.n, target.m
    ref, ref_err = dd.central.value, dd.central.error  # (d, m)
    right, right_err = dd.right.value, dd.right.error
    left, left_err = dd.left.value, dd.left.error
    jumps = dd.jump_left | dd.jump_right
    out_names = _output_names(target)
    ad64 = None
    if full:
        # autodiff along the unit directions: a scaled one (s_j subnormal or huge) would
        # underflow in the working dtype, and 1 / s_j can overflow
        I = np.eye(m if md == "rev" else n)
        if md == "rev":
            ad = _rows(target.vjp, I).T  # (n, m)
            if target.vjp64 is not None:
                ad64 = _rows(target.vjp64, I).T
        else:
            ad = _rows(target.jvp, I)  # (n, m)
            if target.jvp64 is not None:
                ad64 = _rows(target.jvp64, I)
        # the reference back to the user's units: divide row j by s_j
        with np.errstate(over="ignore"):
            ref, ref_err = ref / s[:, None], ref_err / s[:, None]
            right, right_err = right / s[:, None], right_err / s[:, None]
            left, left_err = left / s[:, None], left_err / s[:, None]
            fscale = _function_scale(target.y0)[None, :] / s[:, None]
        scale = _jacobian_scale(ref)
        # a reference Jacobian that is exactly 0 (f constant along every direction, or
        # changes it cannot resolve) takes its scale from autodiff's: a nonzero autodiff
        # value within a wide error bar is then undecided, never agreement with 0
        scale = np.where(scale > 0, scale, _jacobian_scale(ad64 if ad64 is not None else ad))
        names = [
            (f"{out_names[i]} / " if m > 1 else "") + target.input_layout.name_of(j)
            for j in range(n)
            for i in range(m)
        ]
    else:
        assert W is not None
        k = W.shape[0]
        if md == "rev":
            U = np.ones((k, m)) if m == 1 else rng.choice([-1.0, 1.0], size=(k, m))
            A = _rows(target.vjp, U)  # (k, n)
            # w holds powers of two, so the products are exact; fsum rounds the sum once
            ad = _exact_dot(A, W)
            terms = A * W
            if target.vjp64 is not None:
                A64 = _rows(target.vjp64, U)
                ad64 = _exact_dot(A64, W)
                terms = A64 * W
            ref = np.sum(U * ref, axis=1, keepdims=True)
            ref_err = np.sum(np.abs(U) * ref_err, axis=1, keepdims=True)
            right = np.sum(U * right, axis=1, keepdims=True)
            right_err = np.sum(np.abs(U) * right_err, axis=1, keepdims=True)
            left = np.sum(U * left, axis=1, keepdims=True)
            left_err = np.sum(np.abs(U) * left_err, axis=1, keepdims=True)
            jumps = np.any(jumps, axis=1, keepdims=True)
            scale = np.abs(ad64 if ad64 is not None else ad) + np.sqrt(
                np.sum(terms**2, axis=1, keepdims=True)
            )
            fscale = np.sqrt(np.sum((U * _function_scale(target.y0)) ** 2, axis=1, keepdims=True))
            names = [f"uᵀJw[{i}]" for i in range(k)]
        else:
            ad = _rows(target.jvp, W)  # (k, m)
            if target.jvp64 is not None:
                ad64 = _rows(target.jvp64, W)
            scale = _jacobian_scale(ref)
            scale = np.where(scale > 0, scale, _jacobian_scale(ad64 if ad64 is not None else ad))
            fscale = np.broadcast_to(_function_scale(target.y0), ref.shape)
            names = [
                f"Jw[{i}]" + (f" {out_names[o]}" if m > 1 else "")
                for i in range(k)
                for o in range(m)
            ]

    ad = np.ravel(ad)
    ad64_f = np.ravel(ad64) if ad64 is not None else np.full(ad.shape, np.nan)
    ref, ref_err = np.ravel(ref), np.ravel(ref_err)
    right, right_err, left, left_err = (
        np.ravel(right),
        np.ravel(right_err),
        np.ravel(left),
        np.ravel(left_err),
    )
    scale, jumps = np.ravel(scale), np.ravel(jumps)
    fscale = np.ravel(np.where(np.isfinite(fscale), fscale, 0.0))
    return _decide(
        names,
        ad,
        ad64_f,
        ad64 is not None,
        ref,
        ref_err,
        left,
        left_err,
        right,
        right_err,
        jumps,
        scale,
        target.eps,
        ref_eps,
        vouched,
        allowance,
        fscale,
    )


def _jacobian_scale(J: np.ndarray) -> np.ndarray:
    """``(n, m)`` scale of each entry of a Jacobian ``J`` (``(n, m)``, rows are inputs).

    ``|J_ji|`` plus the RMS of output ``i``'s entries; an output whose entries are all
    0 (at a stationary point) takes the RMS of the whole Jacobian: on its own scale, 0,
    every error bar would be too coarse. Non-finite entries count as absent.
    """
    finite = np.where(np.isfinite(J), J, np.nan)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column
        rms = np.sqrt(np.nanmean(finite**2, axis=0))
        overall = float(np.sqrt(np.nanmean(finite**2))) if np.any(np.isfinite(J)) else 0.0
    rms = np.where(np.isfinite(rms), rms, 0.0)
    rms = np.where(rms > 0, rms, overall if np.isfinite(overall) else 0.0)
    return np.abs(np.where(np.isfinite(J), J, 0.0)) + rms[None, :]


def _function_scale(y0: np.ndarray) -> np.ndarray:
    """``(m,)`` size of each output: ``|f_i|``, or the RMS of ``f`` where ``f_i = 0``.

    Divided by an input's scale ``s_j``, it is the size of a derivative that
    changes ``f_i`` by its own size over a move of the input's size: the scale
    of an entry whose Jacobian is exactly 0 (nothing else sets one), and of the
    round-off that a rule inherits from intermediates of the size of ``f``.
    """
    a = np.abs(np.where(np.isfinite(y0), y0, 0.0))
    rms = float(np.sqrt(np.mean(a**2))) if a.size else 0.0
    return np.where(a > 0, a, rms)


def _too_coarse(ref_err: np.ndarray, scale: np.ndarray, eps_w: float) -> np.ndarray:
    """Where the reference's error bar is too wide to decide: ``2 e > sqrt(eps) scale``.

    Where nothing sets a scale (``scale == 0``: ``f`` and its Jacobian are both
    exactly 0, e.g. a squared residual at its zero), the error bar is its own
    scale, and only an infinite one is too wide.
    """
    with np.errstate(all="ignore"):
        relative = ~(TOLERANCE_FACTOR * ref_err <= np.sqrt(eps_w) * scale)
        return np.where(scale > 0, relative, ~np.isfinite(ref_err))


def _decide(
    names: list[str],
    ad: np.ndarray,
    ad64: np.ndarray,
    have64: bool,
    ref: np.ndarray,
    ref_err: np.ndarray,
    left: np.ndarray,
    left_err: np.ndarray,
    right: np.ndarray,
    right_err: np.ndarray,
    jumps: np.ndarray,
    scale: np.ndarray,
    eps_w: float,
    ref_eps: float,
    vouched: float = 0.0,
    allowance: tuple[np.ndarray, np.ndarray] | None = None,
    fscale: np.ndarray | None = None,
) -> Entries:
    """Apply the decision rule of the module docstring to every entry.

    ``vouched`` is the relative accuracy the reference was aimed at (0 for mp):
    an error bar far below it is incidental (the ladder stops refining once the
    target is met, and the bar's own estimate is not sharper than that), so the
    tolerances and the agreement of one-sided estimates use at least
    ``vouched * scale`` as the reference's error. ``allowance`` adds, per entry,
    the round-off measured for the working-dtype and the float64 autodiff
    values (see :mod:`polygrad.dither`). ``fscale`` is the entry's function
    scale (:func:`_function_scale` over the input's scale): the scale of an
    entry whose whole Jacobian is exactly 0, and, where a float64 rule decides
    MISMATCH, the working-dtype round-off a rule inherits from intermediates
    of the size of ``f`` (``1 - tanh(x)^2`` from a ``tanh(x)`` one ulp below
    1): UNSTABLE only beyond ``C_AD eps`` times it.
    """
    fscale = np.zeros_like(scale) if fscale is None else fscale
    extra_w, extra_64 = (
        (np.zeros_like(ad), np.zeros_like(ad))
        if allowance is None
        else (np.nan_to_num(allowance[0]), np.nan_to_num(allowance[1]))
    )
    with np.errstate(all="ignore"):
        # central reference missing (function not finite on one side): use the other side
        central_ok = np.isfinite(ref) & np.isfinite(ref_err)
        use_r = ~central_ok & np.isfinite(right) & np.isfinite(right_err) & ~jumps
        use_l = ~central_ok & ~use_r & np.isfinite(left) & np.isfinite(left_err) & ~jumps
        ref = np.where(use_r, right, np.where(use_l, left, ref))
        ref_err = np.where(use_r, right_err, np.where(use_l, left_err, ref_err))
        ref_finite = np.isfinite(ref) & np.isfinite(ref_err)
        # a finite reference with an infinite error bar (values too far apart in
        # magnitude for differences to resolve) is undecided, not non-finite
        ref_value_finite = np.isfinite(ref)
        scale = np.where(np.isfinite(scale), scale, 0.0)
        # a Jacobian that is exactly 0 (f constant, or stationary) has no scale of its
        # own: the function's size per input scale sets it
        scale = np.where(scale > 0, scale, fscale)
        # (a float64 working dtype has nothing narrower to excuse)
        scale_w = np.maximum(scale, fscale) if have64 and eps_w > F64_EPS else scale
        least = vouched * scale

        def vouch(e: np.ndarray) -> np.ndarray:
            return np.where(e < least, least, e)  # NaN stays NaN

        def tolerances(e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """(working dtype, float64) tolerances around a reference with error bar ``e``."""
            two_e = TOLERANCE_FACTOR * vouch(e)
            return (
                two_e + C_AD * eps_w * scale + extra_w,
                two_e + C_AD * F64_EPS * scale + extra_64,
            )

        tol_w, tol_64 = tolerances(ref_err)
        # For a smooth function the central, left and right estimates share one limit;
        # where they disagree, it is not smooth. The central estimate is the reference:
        # one-sided tableaus converge only at first order, and where f changes by less
        # than an ulp on one side they converge to the wrong limit with a small error
        # bar (a tiny entry of a large function). Only where the central estimate is
        # too coarse to decide (a kink just beyond the finest step spoils it) does a
        # consistent, more accurate one-sided estimate take its place.
        slack = C_AD * ref_eps * scale

        def agree(a, ea, b, eb):
            return np.abs(a - b) <= TOLERANCE_FACTOR * (vouch(ea) + vouch(eb)) + slack

        sides_finite = np.isfinite(left) & np.isfinite(right)
        consistent = (
            agree(left, left_err, right, right_err)
            & agree(ref, ref_err, left, left_err)
            & agree(ref, ref_err, right, right_err)
        )
        kink = sides_finite & ref_finite & ~consistent
        kink |= sides_finite & ~ref_finite & ~agree(left, left_err, right, right_err)
        nonsmooth = kink | jumps
        candidate = consistent & sides_finite & _too_coarse(ref_err, scale, eps_w)
        pick_r = candidate & (right_err < ref_err) & (right_err <= left_err)
        pick_l = candidate & ~pick_r & (left_err < ref_err)
        ref = np.where(pick_r, right, np.where(pick_l, left, ref))
        ref_err = np.where(pick_r, right_err, np.where(pick_l, left_err, ref_err))
        tol_w, tol_64 = tolerances(ref_err)
        lo, hi = np.fmin(left, right), np.fmax(left, right)
        within = (ad >= lo - tol_w) & (ad <= hi + tol_w)
        ad_finite = np.isfinite(ad) & (np.isfinite(ad64) | ~have64)
        diff_w = np.abs(ad - ref)
        diff_64 = np.abs(ad64 - ref)
        coarse = _too_coarse(ref_err, scale, eps_w)

        def fits_a_side(a: np.ndarray, eps: float) -> np.ndarray:
            # a coarse central estimate is only as good as its error bar, which can be
            # wrong where the steps are far beyond the function's length scale; where the
            # left or right estimate (each with its own bar) still admits the value, the
            # evidence of a wrong rule is not conclusive
            fit_l = np.abs(a - left) <= TOLERANCE_FACTOR * vouch(left_err) + C_AD * eps * scale
            fit_r = np.abs(a - right) <= TOLERANCE_FACTOR * vouch(right_err) + C_AD * eps * scale
            return coarse & (fit_l | fit_r)

        bad_w = ~(diff_w <= tol_w) & ~fits_a_side(ad, eps_w)
        bad_64 = ~(diff_64 <= tol_64) & ~fits_a_side(ad64, F64_EPS) if have64 else bad_w
        # a right rule (float64 agrees) is UNSTABLE only beyond the round-off it inherits
        # from intermediates of the size of f; the entries it excuses show that tolerance
        tol_f = tol_w + C_AD * eps_w * np.maximum(scale_w - scale, 0.0)
        excused = bad_w & ~bad_64 & (diff_w <= tol_f)
        bad_w &= ~excused
        tol_w = np.where(excused, tol_f, tol_w)
    status = np.full(ad.shape, SEVERITY[Verdict.PASS], dtype=np.int64)
    status = np.where(coarse & ~bad_64, SEVERITY[Verdict.INCONCLUSIVE], status)
    status = np.where(~bad_64 & bad_w & have64, SEVERITY[Verdict.UNSTABLE], status)
    status = np.where(bad_64, SEVERITY[Verdict.MISMATCH], status)
    status = np.where(nonsmooth, SEVERITY[Verdict.NONSMOOTH], status)
    status = np.where(ref_value_finite != ad_finite, SEVERITY[Verdict.NONFINITE], status)
    both_nonfinite = ~ref_value_finite & ~ad_finite
    status = np.where(both_nonfinite & ~nonsmooth, SEVERITY[Verdict.INCONCLUSIVE], status)
    # NaN/Inf from autodiff where f has a kink (the norm at 0) is a kink first: NONSMOOTH,
    # never within the one-sided derivatives; at a smooth point it stays NONFINITE
    status = np.where(nonsmooth & ~ad_finite, SEVERITY[Verdict.NONSMOOTH], status)
    within = np.where(nonsmooth, within, True)
    return Entries(
        names=names,
        autodiff=ad,
        autodiff64=ad64,
        reference=ref,
        reference_error=ref_err,
        left=left,
        left_error=left_err,
        right=right,
        right_error=right_err,
        tolerance=tol_w,
        tolerance64=np.where(have64, tol_64, np.nan),
        status=status,
        within_one_sided=within,
    )


DOUBT = (Verdict.MISMATCH, Verdict.UNSTABLE, Verdict.INCONCLUSIVE)
"""Verdicts that an entry gets only after the strongest available reference agrees."""


def _escalate(
    target: Target,
    dd: DirectionalDerivatives,
    blocks: list[Entries],
    W: np.ndarray,
    dps: int,
    details: dict[str, Any],
) -> DirectionalDerivatives | None:
    """``dd`` with the directions of the entries in doubt re-estimated by mp, or None.

    Only the directions (rows of ``W``, ``(d, n)``) that hold a MISMATCH, UNSTABLE
    or INCONCLUSIVE entry are re-estimated, so a passing check costs nothing
    more; None when there are none, when the function does not run on mpmath
    numbers, or when mp along them would take more than ``MP_AUTO_SECONDS``
    (a note says so). ``details["escalation"]`` records what was done.
    """
    d = W.shape[0]
    codes = [SEVERITY[v] for v in DOUBT]
    dirs = sorted({int(i) // (b.status.size // d) for b in blocks
                   for i in np.flatnonzero(np.isin(b.status, codes))})  # fmt: skip
    if not dirs:
        return None
    try:
        if not target.mp_mode():
            return None
        assert target.evaluate_mp is not None
        t0 = time.perf_counter()
        target.evaluate_mp(target.x0, np.zeros_like(target.x0), dps)
        seconds = (time.perf_counter() - t0) * (2 * MP_LEVELS * len(dirs) + 1)
        if seconds > MP_AUTO_SECONDS:
            details["notes"].append(
                f"entries in doubt were not re-examined with mp: it would take about "
                f"{seconds:.0f} s along their {len(dirs)} direction(s) (pass reference='mp')"
            )
            return None
        sub = mp_directional_derivatives(
            target.evaluate_mp, target.x0, W[dirs], dps=dps, levels=MP_LEVELS
        )
    except Exception as exc:  # noqa: BLE001 - the escalation is optional: keep the verdicts
        details["notes"].append(
            f"entries in doubt could not be re-examined with mp ({describe_exception(exc)})"
        )
        return None
    details["escalation"] = {"reference": "mp", "dps": dps, "directions": dirs, "d": d}
    return _merge_directions(dd, sub, np.asarray(dirs))


def _merge_directions(
    dd: DirectionalDerivatives, sub: DirectionalDerivatives, rows: np.ndarray
) -> DirectionalDerivatives:
    """``dd`` (``(d, m)`` arrays) with its ``rows`` replaced by ``sub``'s (``(len(rows), m)``)."""
    from dataclasses import replace

    def put(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.array(a, dtype=np.result_type(a, b), copy=True)
        out[rows] = b
        return out

    def est(a: Any, b: Any) -> Any:
        fields = ("value", "error", "step", "noise")
        new = {f: put(getattr(a, f), np.asarray(getattr(b, f), dtype=np.float64)) for f in fields}
        return replace(a, evaluations=a.evaluations + b.evaluations, **new)

    return DirectionalDerivatives(
        est(dd.central, sub.central),
        est(dd.right, sub.right),
        est(dd.left, sub.left),
        put(dd.jump_right, sub.jump_right),
        put(dd.jump_left, sub.jump_left),
    )


def _name_deciders(blocks: list[Entries], details: dict[str, Any], method: str) -> None:
    """Record, and say in a note, which reference decided each entry still in doubt.

    After :func:`_escalate`: an entry along a re-examined direction was decided
    by mp, any other by ``method`` (the first reference's arithmetic).
    """
    esc = details["escalation"]
    redone = set(esc["directions"])
    codes = [SEVERITY[v] for v in DOUBT]
    by: dict[str, list[str]] = {"mp": [], method: []}
    for b in blocks:
        per = b.status.size // esc["d"]  # entries per direction
        for i in np.flatnonzero(np.isin(b.status, codes)):
            by["mp" if int(i) // per in redone else method].append(b.names[i])
    esc["decided_by"] = by
    text = (
        f"entries in doubt on the {method} reference were re-examined with mp at "
        f"{esc['dps']} digits along their {len(redone)} direction(s)"
    )
    for who, names in by.items():
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            text += f"; still in doubt, decided by {who}: {shown}"
    details["notes"].append(text)


def _edge_notes(entries: Entries, f0: np.ndarray) -> list[str]:
    """Notes on entries decided at the edges: NaN at a kink, an unbounded reference.

    Parameters
    ----------
    entries : Entries
        The judged entries (``(K,)`` arrays).
    f0 : ndarray, shape (m,)
        The function at the point, in the reference's arithmetic.

    Returns
    -------
    list of str
    """
    notes = []
    kink = entries.status == SEVERITY[Verdict.NONSMOOTH]
    nan_at_kink = kink & ~np.isfinite(entries.autodiff)
    if np.any(nan_at_kink):
        k = int(np.sum(nan_at_kink))
        notes.append(
            f"autodiff returned NaN/Inf at {k} entr{'y' if k == 1 else 'ies'} where f is not "
            "differentiable (left and right derivatives differ, or one is infinite): a kink, "
            "not a NaN trap at a smooth point; a NaN lies within no one-sided derivative, so "
            "nonsmooth='within' fails it"
        )
    unbounded = np.isfinite(entries.reference) & ~np.isfinite(entries.reference_error)
    unbounded &= entries.status == SEVERITY[Verdict.INCONCLUSIVE]
    if np.any(unbounded):
        k = int(np.sum(unbounded))
        size = float(np.max(np.abs(f0))) if f0.size else 0.0
        notes.append(
            f"{k} entr{'y is' if k == 1 else 'ies are'} INCONCLUSIVE with an unbounded reference "
            f"error bar: f (of size {size:.3g}) does not change measurably under steps scaled "
            "to those inputs (magnitudes too far from f's for differences to bound their "
            "derivatives); both sides are finite, so this is not NONFINITE"
        )
    return notes


def _exact_dot(A: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Row-wise dot products rounded once (``math.fsum``): ``(k, n), (k, n) -> (k, 1)``."""
    import math

    return np.array([[math.fsum(a * w)] for a, w in zip(A, W, strict=True)])


def _median_relative(value: np.ndarray, error: np.ndarray) -> float:
    """Median of error / (|value| + RMS of the values): relative error bars robust to zeros."""
    v = np.where(np.isfinite(value), value, 0.0)
    with np.errstate(all="ignore"):
        scale = np.abs(v) + np.sqrt(np.mean(v**2, axis=0, keepdims=True))
        rel = error / scale
    rel = rel[np.isfinite(rel)]
    return float(np.median(rel)) if rel.size else float("nan")


def _rows(
    fn: Callable[[np.ndarray], np.ndarray] | None, M: np.ndarray, chunk: int = 256
) -> np.ndarray:
    assert fn is not None
    return np.concatenate(
        [np.asarray(fn(M[a : a + chunk]), dtype=np.float64) for a in range(0, M.shape[0], chunk)]
    )


def _output_names(target: Target) -> list[str]:
    return [target.output_layout.name_of(i) for i in range(target.m)]


def _overall(entries: Entries, nonsmooth: str) -> tuple[Verdict, bool]:
    """The worst verdict of ``entries`` and whether the check passes under ``nonsmooth``.

    ``nonsmooth`` is ``check``'s option: ``"allow"`` passes NONSMOOTH,
    ``"within"`` passes it when every entry at a kink lies within its one-sided
    derivatives, anything else passes PASS only.
    """
    worst = int(entries.status.max()) if entries.status.size else 0
    verdict = {v: k for k, v in SEVERITY.items()}[worst]
    if nonsmooth == "allow":
        return verdict, verdict in (Verdict.PASS, Verdict.NONSMOOTH)
    if nonsmooth == "within":
        at_kink = entries.status == SEVERITY[Verdict.NONSMOOTH]
        within = bool(np.all(entries.within_one_sided[at_kink]))
        return verdict, verdict == Verdict.PASS or (verdict == Verdict.NONSMOOTH and within)
    return verdict, verdict == Verdict.PASS


def _concat_entries(blocks: list[Entries], prefix: bool, modes: list[str]) -> Entries:
    if len(blocks) == 1:
        return blocks[0]
    names = []
    for md, b in zip(modes, blocks, strict=True):
        tag = "VJP" if md == "rev" else "JVP"
        names += [f"{tag} {nm}" for nm in b.names]
    fields = {}
    for name in (
        "autodiff",
        "autodiff64",
        "reference",
        "reference_error",
        "left",
        "left_error",
        "right",
        "right_error",
        "tolerance",
        "tolerance64",
        "status",
        "within_one_sided",
    ):
        fields[name] = np.concatenate([getattr(b, name) for b in blocks])
    return Entries(names=names, **fields)


def _detection_power(
    entries: Entries, k: int, W: np.ndarray | None, s: np.ndarray
) -> dict[str, Any]:
    """What size of gradient error the projections would have caught."""
    tol = np.where(np.isfinite(entries.tolerance64), entries.tolerance64, entries.tolerance)
    tau = float(np.nanmin(tol)) if tol.size else float("nan")
    # one wrong entry j shifts every Rademacher projection by |delta_j| s_j
    single = tau / s
    # an error spread over many entries: delta·w is about N(0, |delta ⊙ s|²); all k
    # projections miss with probability (sqrt(2/pi) tau / |delta ⊙ s|)^k
    spread = float(np.sqrt(2 / np.pi) * tau / 0.01 ** (1.0 / k))
    return {
        "count": k,
        "threshold": tau,
        "single_entry_error_caught": float(np.median(single)),
        "spread_error_norm_caught_99": spread,
    }


def assert_gradients(f: Callable[..., Any], *args: Any, **options: Any) -> Report:
    """Run :func:`check` and raise :class:`GradientCheckError` unless ``report.ok``.

    Takes the same arguments as :func:`check`. Returns the report when it
    passes, so it can be inspected further.

    Raises
    ------
    GradientCheckError
        An ``AssertionError`` whose message is the full text report.
    """
    report = check(f, *args, **options)
    if not report.ok:
        raise GradientCheckError(report)
    return report
