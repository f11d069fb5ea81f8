"""The user's own finite-difference check, re-run on the checked function and explained.

``check(f, x, compare_with="tf.test.compute_gradient", compare_step=2**-13)``
states what that tool, with that step, would report on ``f`` at ``x``: its own
number (``gradcheck``'s ``|analytic - numeric|`` against ``atol + rtol |numeric|``,
``compute_gradient``'s ``max |J_numeric - J_autodiff|``, ``check_grads``' JVP test
along one random direction, or the relative metric
``max |a - b| / max(1e-8, |a| + |b|)`` of a hand-written central difference),
and how much of it is

- round-off: the working-dtype central difference minus the same difference
  evaluated in float64 (``~ noise / step``);
- truncation: the float64 central difference minus the reference derivative
  (``~ |f'''| step² / 6``), or *kinks* where the check found f non-smooth;
- autodiff error: autodiff minus the reference.

Those three add up to the tool's error of every entry. The best step for the
tool balances the measured round-off (falling like ``1 / step``) against the
measured truncation (growing like ``step²``); the tool's number at that step
is measured too. Every step is absolute, in the units of the user's input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .verdicts import SEVERITY, Entries, Verdict

if TYPE_CHECKING:
    from .backends.base import Target

__all__ = [
    "Tool",
    "YourTerms",
    "resolve_tool",
    "in_your_terms",
    "your_terms_result",
    "tool_tolerance",
    "TOOLS",
]

MAX_COLUMNS = 4096
"""Coordinates differenced at most; beyond, a random sample of them (the report says so)."""
RELATIVE_FLOOR = 1e-8
"""Floor of the denominator of the relative metric, ``max(1e-8, |a| + |b|)``."""
JAX_TOLERANCE = {"float16": 1e-2, "bfloat16": 1e-1, "float32": 2e-3, "float64": 1e-5}
"""``jax.test_util.check_grads``' default ``atol`` = ``rtol`` per dtype."""


@dataclass(frozen=True)
class Tool:
    """A finite-difference gradient check as its library runs it.

    Attributes
    ----------
    name : str
        The tool's own name, as the report prints it.
    step_name : str
        Name of its step argument (``"eps"``, ``"delta"``, ``"h"``).
    default_step : float
        Its default step (absolute, in the input's units).
    metric : str
        What it reports, in its terms.
    random_direction : bool
        True for ``check_grads`` (one JVP along a random normal direction);
        False for tools that difference every coordinate.
    """

    name: str
    step_name: str
    default_step: float
    metric: str
    random_direction: bool = False


TOOLS = {
    "gradcheck": Tool(
        "torch.autograd.gradcheck", "eps", 1e-6,
        "|analytic - numeric| <= atol + rtol |numeric| (atol 1e-5, rtol 1e-3)",
    ),
    "compute_gradient": Tool(
        "tf.test.compute_gradient", "delta", 1.0 / 1024, "max |J_numeric - J_autodiff|"
    ),
    "check_grads": Tool(
        "jax.test_util.check_grads", "eps", 1e-4,
        "|jvp - numerical_jvp| <= atol + rtol |numerical_jvp| along one random direction",
        random_direction=True,
    ),
    "fd": Tool(
        "central differences", "h", 1e-4, "max |a - b| / max(1e-8, |a| + |b|)"
    ),
}  # fmt: skip
_ALIASES = {
    "gradcheck": "gradcheck",
    "torch.autograd.gradcheck": "gradcheck",
    "torch": "gradcheck",
    "compute_gradient": "compute_gradient",
    "tf.test.compute_gradient": "compute_gradient",
    "tf": "compute_gradient",
    "tensorflow": "compute_gradient",
    "check_grads": "check_grads",
    "jax check_grads": "check_grads",
    "jax.test_util.check_grads": "check_grads",
    "jax": "check_grads",
    "fd": "fd",
    "central": "fd",
    "central difference": "fd",
    "central differences": "fd",
}


def resolve_tool(name: str | None, step: float | None = None) -> Tool | None:
    """The :class:`Tool` called ``name`` (its real name or an alias, any case); None for None.

    Raises
    ------
    ValueError
        An unknown name (the message lists the accepted ones), a step given
        without a tool, or a step that is not a positive finite number.
    """
    if name is None:
        if step is not None:
            raise ValueError("compare_step is the step of compare_with's tool; name the tool")
        return None
    if step is not None and not (np.isfinite(float(step)) and float(step) > 0):
        raise ValueError(f"compare_step={step!r}; the step must be a positive finite number")
    key = _ALIASES.get(str(name).strip().lower())
    if key is None:
        raise ValueError(
            f"compare_with={name!r}; choose one of " + ", ".join(repr(a) for a in _ALIASES)
        )
    return TOOLS[key]


@dataclass(frozen=True)
class YourTerms:
    """What the user's tool reports at ``x``, and what its number is made of.

    All errors are absolute, in the units of the gradient; all steps are
    absolute, in the units of the input. ``None`` where not measurable.

    Attributes
    ----------
    tool, step_name, step, metric : str, str, float, str
        The tool, its step argument and the value used, what it reports.
    dtype : str
        The dtype the tool differences in (the input's).
    value : float
        The tool's number: the largest ``|numeric - autodiff|`` (the relative
        metric for ``"fd"``).
    passes : bool or None
        Whether the tool's own test passes (``None``: it has no threshold).
    worst : str
        The entry behind ``value``; ``worst_autodiff`` and ``worst_numeric`` its values.
    roundoff, truncation, kink, autodiff_error : float or None
        The parts of the worst entry's ``|numeric - autodiff|``.
    max_roundoff, max_truncation : float or None
        Their largest values over all entries (kinks excluded from truncation).
    kinks : int
        Entries at a kink of f (NONSMOOTH in the check).
    entries : int
        Entries the tool compared; ``sampled`` True when coordinates were sampled.
    best_step, best_value : float or None
        The best step for the tool and its number measured at that step.
    best_value_smooth : float or None
        That number over the entries where f is smooth (None without kinks).
    typical : float
        Median ``|autodiff|`` over the entries (beside the worst entry's, it
        shows when a relative metric is ruled by near-zero entries).
    swamped : int or None
        Entries whose round-off at the step is at least half the entry (their
        relative error is of order 1 whatever the gradient).
    truncation_unresolved : float or None
        Where the truncation at the user's step was below what its measurement
        resolves, that bound: the best step then rests on the assumption that the
        truncation stays below it over the steps tried (true where f's third
        derivative is 0 near ``x``, as for a quadratic f). None where it was measured.
    best_step_capped : bool
        The predicted best step was capped at a quarter of the input's scale.
    """

    tool: str
    step_name: str
    step: float
    metric: str
    dtype: str
    value: float
    passes: bool | None
    worst: str
    worst_autodiff: float
    worst_numeric: float
    roundoff: float | None
    truncation: float | None
    kink: float | None
    autodiff_error: float | None
    max_roundoff: float | None
    max_truncation: float | None
    kinks: int
    entries: int
    sampled: bool
    best_step: float | None
    best_value: float | None
    best_value_smooth: float | None
    typical: float
    swamped: int | None
    truncation_unresolved: float | None = None
    best_step_capped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Setup:
    """Directions ``V`` (k, n), their names, autodiff and reference along them (k, m)."""

    V: np.ndarray
    names: list[str]
    autodiff: np.ndarray
    reference: np.ndarray | None
    kink: np.ndarray
    sampled: bool


def _central(evaluate: Any, x0: np.ndarray, V: np.ndarray, step: float) -> np.ndarray:
    """``(f(x + step v) - f(x - step v)) / (2 step)`` for each row ``v`` of ``V``: (k, m)."""
    out = []
    for a in range(0, V.shape[0], 1024):
        D = step * V[a : a + 1024]
        Y = np.asarray(evaluate(np.concatenate([x0[None, :] + D, x0[None, :] - D])), float)
        k = D.shape[0]
        out.append((Y[:k] - Y[k:]) / (2.0 * step))
    return np.concatenate(out)


def _autodiff_along(target: Target, V: np.ndarray) -> np.ndarray:
    """``V @ J.T`` (k, m) from autodiff in the working dtype."""
    m, n = target.m, target.n
    if target.vjp is not None and m <= n:
        J = np.concatenate(
            [np.asarray(target.vjp(np.eye(m)[a : a + 1024]), float) for a in range(0, m, 1024)]
        )  # (m, n)
        return V @ J.T
    assert target.jvp is not None
    return np.concatenate(
        [np.asarray(target.jvp(V[a : a + 1024]), float) for a in range(0, V.shape[0], 1024)]
    )


def _directions(
    target: Target, tool: Tool, seed: int, reference: np.ndarray | None, kink: np.ndarray | None
) -> _Setup:
    """The tool's directions: every coordinate (a sample beyond MAX_COLUMNS), or jax's one."""
    n = target.n
    if tool.random_direction:  # check_grads: RandomState(0).randn, in the input's dtype
        v = np.random.RandomState(0).randn(n)
        V = _in_dtype(v, target.working_dtype)[None, :]
        names = ["jvp along a random direction"]
        sampled = False
        cols = None
    else:
        sampled = n > MAX_COLUMNS
        cols = np.arange(n)
        if sampled:
            cols = np.sort(np.random.default_rng([seed, 18]).choice(n, MAX_COLUMNS, replace=False))
        V = np.eye(n)[cols]
        names = [target.input_layout.name_of(int(j)) for j in cols]
    ad = _autodiff_along(target, V)
    ref = None if reference is None else V @ reference.T
    if kink is None:
        km = np.zeros(ad.shape, dtype=bool)
    else:
        km = (np.abs(V) > 0).astype(float) @ kink.T.astype(float) > 0
    return _Setup(V, names, ad, ref, km, sampled)


def _in_dtype(v: np.ndarray, dtype: str) -> np.ndarray:
    try:
        return np.asarray(v, dtype=np.dtype(dtype)).astype(float)
    except TypeError:
        return v


def tool_tolerance(tool: str, dtype: str, numeric: Any) -> Any:
    """The ``|numeric - autodiff|`` that the tool named ``tool`` allows, or None.

    Parameters
    ----------
    tool : str
        A :attr:`Tool.name`.
    dtype : str
        The dtype differenced in (``check_grads``' tolerance depends on it).
    numeric : float or ndarray
        The tool's numeric derivative(s).

    Returns
    -------
    float or ndarray or None
        ``atol + rtol |numeric|``, shaped like ``numeric``; None for a tool
        without a threshold (``compute_gradient``, plain central differences).
    """
    if tool.startswith("torch"):
        return 1e-5 + 1e-3 * np.abs(numeric)
    if tool.startswith("jax"):
        tol = JAX_TOLERANCE.get(dtype, 1e-5)
        return tol + tol * np.abs(numeric)
    return None


def _metric(tool: Tool, dtype: str, num: np.ndarray, ad: np.ndarray) -> tuple[np.ndarray, Any]:
    """Per-entry badness in the tool's terms (argmax is its worst) and its pass/fail."""
    diff = np.abs(num - ad)
    allowed = tool_tolerance(tool.name, dtype, num)
    if allowed is not None:
        return diff / allowed, bool(np.all(diff <= allowed))
    if tool.name.startswith("central"):
        return diff / np.maximum(RELATIVE_FLOOR, np.abs(num) + np.abs(ad)), None
    return diff, None


def _value(tool: Tool, diff: np.ndarray, badness: np.ndarray) -> float:
    """The tool's headline number: the relative metric for "fd", else max |numeric - autodiff|."""
    if tool.name.startswith("central"):
        return float(np.nanmax(badness))
    return float(np.nanmax(diff))


def _best_step(step: float, roundoff: float, truncation: float, floor: float, cap: float) -> float:
    """Power of two minimising ``roundoff step / h + truncation (h / step)²``.

    ``truncation`` below ``floor`` (what the reference resolves) counts as
    ``floor``; the step never exceeds ``cap`` (a quarter of the input's scale).
    """
    t = max(truncation, floor, 1e-300)
    h = step * (max(roundoff, 1e-300) / (2.0 * t)) ** (1.0 / 3.0)
    h = min(h, cap)
    return float(2.0 ** np.round(np.log2(h)))


def in_your_terms(
    target: Target,
    tool: Tool,
    step: float | None,
    reference: np.ndarray | None = None,
    reference_error: np.ndarray | None = None,
    kink: np.ndarray | None = None,
    seed: int = 0,
) -> YourTerms:
    """Run ``tool`` with ``step`` on ``target`` and split its number into its parts.

    Parameters
    ----------
    target : Target
        The checked function.
    tool : Tool
        From :func:`resolve_tool`.
    step : float or None
        The tool's step (absolute); None: its default.
    reference, reference_error : ndarray, shape (m, n), optional
        The check's reference Jacobian and its error bar in the input's units
        (full checks); without them the truncation is estimated by Richardson
        extrapolation of float64 differences at ``step`` and ``step / 2``.
    kink : ndarray of bool, shape (m, n), optional
        Entries at a kink of f (NONSMOOTH).
    seed : int
        Seed of the coordinate sample (more than ``MAX_COLUMNS`` inputs).

    Returns
    -------
    YourTerms
    """
    h = float(tool.default_step if step is None else step)
    st = _directions(target, tool, seed, reference, kink)
    num = _central(target.evaluate, target.x0, st.V, h)
    diff = np.abs(num - st.autodiff)
    badness, passes = _metric(tool, target.working_dtype, num, st.autodiff)
    w = np.unravel_index(int(np.nanargmax(badness)), badness.shape)
    parts = _parts(target, st, h, num, reference_error)
    best = _best_and_measure(target, tool, st, h, parts, reference_error)
    name = st.names[int(w[0])] + (f" -> output {int(w[1])}" if target.m > 1 else "")
    return YourTerms(
        tool=tool.name, step_name=tool.step_name, step=h, metric=tool.metric,
        dtype=target.working_dtype, value=_value(tool, diff, badness), passes=passes,
        worst=name, worst_autodiff=float(st.autodiff[w]), worst_numeric=float(num[w]),
        roundoff=_pick(parts, "roundoff", w),
        truncation=None if st.kink[w] else _pick(parts, "truncation", w),
        kink=_pick(parts, "truncation", w) if st.kink[w] else None,
        autodiff_error=_pick(parts, "autodiff", w),
        max_roundoff=_max(parts.get("roundoff")),
        max_truncation=_max(None if "truncation" not in parts else
                            np.where(st.kink, 0.0, parts["truncation"])),
        kinks=int(np.sum(st.kink)), entries=int(diff.size), sampled=st.sampled,
        best_step=best[0], best_value=best[1], best_value_smooth=best[2],
        typical=float(np.median(np.abs(st.autodiff))),
        swamped=None if not parts else int(np.sum(2 * parts["roundoff"] >= np.abs(st.autodiff))),
        truncation_unresolved=best[3], best_step_capped=best[4],
    )  # fmt: skip


def _pick(parts: dict[str, np.ndarray], key: str, w: Any) -> float | None:
    a = parts.get(key)
    return None if a is None else float(a[w])


def _max(a: np.ndarray | None) -> float | None:
    return None if a is None else float(np.nanmax(a))


def _parts(
    target: Target, st: _Setup, h: float, num: np.ndarray, reference_error: Any
) -> dict[str, np.ndarray]:
    """Round-off, truncation (or kink) and autodiff error of every entry, (k, m) each.

    A dtype narrower than float64 is differenced again in float64 at the same
    step: the difference of the two is the round-off, the float64 one minus the
    reference the truncation. In float64 itself (or without a float64
    evaluation) the truncation is the reference's curvature times ``h²`` and the
    round-off what remains.
    """
    if target.evaluate64 is not None and target.working_dtype != "float64":
        num64 = _central(target.evaluate64, target.x0, st.V, h)
        ref = st.reference
        if ref is None:  # Richardson: the error of a central difference falls like h²
            half = _central(target.evaluate64, target.x0, st.V, h / 2)
            ref = half + (half - num64) / 3.0
        return {
            "roundoff": np.abs(num - num64),
            "truncation": np.abs(num64 - ref),
            "autodiff": np.abs(st.autodiff - ref),
            "floor": np.array(_roundoff_bound(target, F64_EPS, h)),
        }
    trunc, ref, H = _curvature(target, st, h)
    eps = F64_EPS if target.evaluate64 is not None else target.eps
    return {
        "roundoff": np.abs(num - ref - trunc),
        "truncation": np.abs(trunc),
        "autodiff": np.abs(st.autodiff - ref),
        "floor": np.array(_roundoff_bound(target, eps, H) * (h / H) ** 2),
    }


def _roundoff_bound(target: Target, eps: float, h: float) -> float:
    """Round-off of a central difference at step ``h`` in arithmetic ``eps``: what a
    truncation measured with it can be told apart from (``4 eps |f| / h``)."""
    return 4 * eps * float(np.max(np.abs(target.y0))) / h


def _curvature(target: Target, st: _Setup, h: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(signed truncation error at ``h``, reference), both (k, m), and the step ``H`` used.

    The truncation of a central difference is ``g''' h² / 6``; ``g'''`` is read
    from a difference at a step ``H >= h`` large enough that its own round-off is
    small (``eps^(1/3)`` of the input's scale, times 16), against the check's
    reference or a Richardson extrapolation at ``H``.
    """
    fn = target.evaluate64 if target.evaluate64 is not None else target.evaluate
    eps = F64_EPS if target.evaluate64 is not None else target.eps
    nz = np.abs(target.x0[target.x0 != 0])
    scale = float(np.median(nz)) if nz.size else 1.0
    H = max(h, float(2.0 ** np.round(np.log2(16 * eps ** (1 / 3) * scale))))
    big = _central(fn, target.x0, st.V, H)
    ref = st.reference
    if ref is None:
        half = _central(fn, target.x0, st.V, H / 2)
        ref = half + (half - big) / 3.0
    return (big - ref) * (h / H) ** 2, ref, H


def _best_and_measure(
    target: Target,
    tool: Tool,
    st: _Setup,
    h: float,
    parts: dict[str, np.ndarray],
    reference_error: np.ndarray | None,
) -> tuple[float | None, float | None, float | None, float | None, bool]:
    """The best step for the tool (predicted from the largest round-off and truncation at
    ``h``, then the best measured between ``h`` and that prediction), the tool's number
    there, and the same over the entries where f is smooth (None without kinks); all None
    without a float64 evaluation. Then what the prediction assumed: the bound below which
    the truncation went unmeasured (None where it was measured), and whether the step was
    capped at a quarter of the input's scale."""
    if not parts:
        return None, None, None, None, False
    smooth = ~st.kink
    R = float(np.max(parts["roundoff"][smooth], initial=0.0))
    T = float(np.max(parts["truncation"][smooth], initial=0.0))
    # truncation below the round-off of its own measurement (or the reference's error
    # bar) is not measured: it is only known to be smaller
    floor = float(parts["floor"])
    if reference_error is not None:
        err = np.abs(st.V) @ np.abs(reference_error).T
        floor = max(floor, float(np.max(err[smooth], initial=0.0)))
    nz = np.abs(target.x0[target.x0 != 0])
    scale = float(2.0 ** np.round(np.log2(np.median(nz)))) if nz.size else 1.0
    predicted = _best_step(h, R, T, floor, scale / 4)
    unresolved = floor if T <= floor else None
    capped = predicted >= scale / 4
    # the prediction extrapolates from one step (kinks near x bend it): measure the tool on
    # the powers of two between the user's step and the predicted one, and keep the best
    scores = [_measure(target, tool, st, step) for step in _candidates(h, predicted)]
    best = min(scores, key=lambda r: (r[1], 0.0 if r[2] is None else r[2], r[3]))
    return best[0], best[1], best[2], unresolved, capped


def _candidates(h: float, predicted: float) -> list[float]:
    """Powers of two from near ``h`` to ``predicted`` (at most ``CANDIDATES``, ends included)."""
    a, b = int(np.round(np.log2(h))), int(np.round(np.log2(predicted)))
    ks = np.arange(min(a, b), max(a, b) + 1)
    if ks.size > CANDIDATES:
        ks = np.unique(np.round(np.linspace(ks[0], ks[-1], CANDIDATES)).astype(int))
    return [float(2.0**k) for k in ks]


def _measure(
    target: Target, tool: Tool, st: _Setup, step: float
) -> tuple[float, float, float | None, float]:
    """(step, the tool's number, the same over smooth entries or None, max |numeric - autodiff|)."""
    num = _central(target.evaluate, target.x0, st.V, step)
    diff = np.abs(num - st.autodiff)
    badness, _ = _metric(tool, target.working_dtype, num, st.autodiff)
    smooth = ~st.kink
    on_smooth = None
    if np.any(st.kink) and np.any(smooth):
        on_smooth = _value(tool, diff[smooth], badness[smooth])
    return step, _value(tool, diff, badness), on_smooth, float(np.nanmax(diff))


CANDIDATES = 8
"""Steps at most on which the tool is measured to find its best one."""
F64_EPS = float(np.finfo(np.float64).eps)


def your_terms_result(
    target: Target, tool: Tool, step: float | None, entries: Entries, full: bool, seed: int
) -> YourTerms:
    """:func:`in_your_terms` on a finished check, as stored in its details.

    A full check lends its reference Jacobian, error bars and kinks (the
    first ``n m`` entries, ordered input-major); a check by projections
    leaves the truncation to Richardson extrapolation. At a kink (NONSMOOTH)
    the reference lent is the one-sided derivative nearer autodiff, which
    returns one element of the generalized derivative there: the central
    estimate is neither side, and the gap to it belongs to the kink, not to
    autodiff.
    """
    n, m = target.n, target.m
    ref = err = kink = None
    if full and len(entries.names) >= n * m:
        at_kink = entries.status == SEVERITY[Verdict.NONSMOOTH]
        left_nearer = np.abs(entries.autodiff - entries.left) <= np.abs(
            entries.autodiff - entries.right
        )
        side = np.where(left_nearer, entries.left, entries.right)
        side_err = np.where(left_nearer, entries.left_error, entries.right_error)
        use_side = at_kink & np.isfinite(side)
        ref = np.where(use_side, side, entries.reference)[: n * m].reshape(n, m).T
        err = np.where(use_side, side_err, entries.reference_error)[: n * m].reshape(n, m).T
        kink = (entries.status[: n * m] == SEVERITY[Verdict.NONSMOOTH]).reshape(n, m).T
    return in_your_terms(target, tool, step, ref, err, kink, seed)
