"""Figures: the error-versus-step curve, the Taylor test, per-entry errors of a report.

matplotlib is an optional extra (``pip install 'polygrad-check[plot]'``), imported
only when a figure is drawn. Figures are built with
:class:`matplotlib.figure.Figure` directly (no pyplot, no GUI backend), so
they can be saved from scripts, servers and tests alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._install import pip_install

if TYPE_CHECKING:
    from .report import Report
    from .sweep import Sweep
    from .taylor import TaylorResult

__all__ = ["plot_report", "plot_sweep", "plot_taylor"]


def _figure(ax: Any, size: tuple[float, float] = (6.4, 4.4)) -> tuple[Any, Any]:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "plotting needs matplotlib, which is not installed; install it with: "
            + pip_install("plot")
        ) from exc
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _save(fig: Any, path: str | Path | None, tight: bool = False) -> None:
    """Write ``fig`` to ``path`` (None: nothing); ``tight``: grown to hold what lies outside
    its axes (a legend below them)."""
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight" if tight else None)


def plot_sweep(s: Sweep, path: str | Path | None = None, ax: Any = None) -> Any:
    """Log-log error of plain differences against the step, with both predictions.

    Parameters
    ----------
    s : Sweep
        Result of :func:`polygrad.sweep`.
    path : str or Path, optional
        File to save to; the format follows the suffix (``.png``, ``.svg``, ``.pdf``).
    ax : matplotlib Axes, optional
        Axes to draw into (default: a new figure).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        matplotlib is not installed.
    """
    fig, ax = _figure(ax)
    h = s.steps
    ce, fe = s.central_error.max(axis=1), s.forward_error.max(axis=1)
    pt, pr = s.predicted_truncation.max(axis=1), s.predicted_roundoff.max(axis=1)
    tiny = np.finfo(np.float64).tiny
    grid = np.geomspace(h.min(), h.max(), 200)
    gt, gr = (a.max(axis=1) for a in s.predict(grid, "central"))
    ax.loglog(h, np.maximum(ce, tiny), "o-", color="C0", label="central difference (measured)")
    ax.loglog(
        h,
        np.maximum(fe, tiny),
        "s",
        color="C1",
        alpha=0.6,
        ms=4,
        label="forward difference (measured)",
    )
    ax.loglog(grid, gr, ":", color="C3", label="predicted round-off  σ/(√2 h)")
    if np.any(pt > 0):
        ax.loglog(
            grid, np.maximum(gt, tiny), "--", color="C2", label="predicted truncation  |f'''| h²/6"
        )
    ax.loglog(grid, gt + gr, "-", color="0.5", lw=0.8, label="predicted total")
    ax.axvline(s.optimal_step, color="k", lw=0.8, ls="-.")
    # the label sits at the foot of the best step's line, on the side with more room (more
    # than half the axes): below the crossing of the two predictions, where no curve runs,
    # and inside the axes, off the tick labels
    lo, hi = np.log(ax.get_xlim())
    at = float((np.log(s.optimal_step) - lo) / (hi - lo))
    right = at < 0.5
    ax.text(
        at + (0.01 if right else -0.01),
        0.03,
        "best "
        + s.best_step_label().replace(" with a ", "\n").replace(" (measured", "\n(measured"),
        transform=ax.transAxes,
        ha="left" if right else "right",
        va="bottom",
        fontsize=8,
        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.7", "alpha": 0.75},
    )
    pos = np.concatenate([ce[ce > 0], pr[pr > 0]])
    if pos.size:
        ax.set_ylim(max(pos.min() / 30, tiny), max(pos.max(), float(np.max(pt))) * 10)
    ax.set_xlabel("step h (× s, a power of two near |x|)")
    one = s.shared_scale()
    if one:
        top = ax.secondary_xaxis("top", functions=(lambda h: h * one, lambda d: d / one))
        top.set_xlabel(f"absolute step (your delta / eps; s = {one:.3g})", fontsize=8)
    ax.set_ylabel("|difference quotient − reference|")
    ax.set_title(f"Finite-difference error in {s.working_dtype} ({s.backend})", fontsize=10)
    _legend_of_drawn(ax)
    ax.grid(True, which="major", alpha=0.3)
    _save(fig, path)
    return fig


def _legend_of_drawn(ax: Any) -> None:
    """A legend of the lines that show inside the axes' limits (none that lie outside)."""
    lo, hi = ax.get_ylim()
    drawn = []
    for line in ax.get_lines():
        label = line.get_label()
        y = np.asarray(line.get_ydata(), dtype=float)
        if label.startswith("_") or not np.any(np.isfinite(y) & (y >= lo) & (y <= hi)):
            continue
        drawn.append(line)
    ax.legend(handles=drawn, fontsize=7, loc="best")


def plot_taylor(t: TaylorResult, path: str | Path | None = None, ax: Any = None) -> Any:
    """Log-log Taylor remainder ``r(h)`` with its floor and slope-1/slope-2 guides.

    Parameters
    ----------
    t : TaylorResult
        Result of :func:`polygrad.taylor_test`.
    path : str or Path, optional
        File to save to (``.png``, ``.svg``...).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        matplotlib is not installed.
    """
    fig, ax = _figure(ax)
    h, r = t.steps, t.residual
    tiny = np.finfo(np.float64).tiny
    ax.loglog(h, np.maximum(r, tiny), "o-", color="C0", ms=4, label="remainder r(h)")
    if np.any(t.used):
        ax.loglog(
            h[t.used],
            r[t.used],
            "o",
            color="C3",
            ms=7,
            mfc="none",
            label=f"fitted: slope {t.slope:.2f}",
        )
        h0, r0 = h[t.used][0], r[t.used][0]
        for p, style in ((2, "--"), (1, ":")):
            ax.loglog(
                h,
                r0 * (h / h0) ** p,
                style,
                color="0.4",
                lw=0.8,
                label=f"slope {p}" + (" (correct)" if p == 2 else " (wrong gradient)"),
            )
    ax.loglog(h, t.floor, "-", color="C7", lw=0.8, label="round-off floor")
    pos = r[np.isfinite(r) & (r > 0)]
    if pos.size:
        ax.set_ylim(max(pos.min() / 10, tiny), pos.max() * 10)
    ax.set_xlabel("step h")
    ax.set_ylabel("|f(x+hv) − f(x) − h⟨∇f, v⟩|")
    ax.set_title(f"Taylor test: {t.verdict}", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, which="major", alpha=0.3)
    _save(fig, path)
    return fig


def _arrange(report: Report) -> tuple[Any, str, str]:
    """How flat per-entry arrays map onto a 2-D picture: (function, y label, x label).

    Full Jacobians become outputs × inputs; the gradient of a scalar function
    of one input that is an image (two non-trivial axes) keeps the image's
    shape; anything else is a strip.
    """
    e, d = report.entries, report.details
    n, m = int(d.inputs), int(d.outputs)
    modes = list(d.modes)
    if report.quantity.startswith("Jacobian") and len(modes) == 1 and len(e.names) == n * m:
        if m == 1 and len(d.input_names) == 1 and "[" in e.names[-1]:
            last = e.names[-1]
            shape = tuple(int(v) + 1 for v in last[last.index("[") + 1 : -1].split(","))
            sq = tuple(k for k in shape if k > 1)
            if len(sq) == 2 and int(np.prod(sq)) == n:
                return (lambda a: np.asarray(a).reshape(sq)), "row", "column"
        return (lambda a: np.asarray(a).reshape(n, m).T), "output", "input"
    return (lambda a: np.asarray(a)[None, :]), "", "compared quantity"


KINK_CODE = 1
"""Status code of NONSMOOTH entries (:data:`polygrad.report.SEVERITY`)."""
KINK_COLOR = "#e8a33d"


def _kinks_layer(ax: Any, kink: np.ndarray) -> list[Any]:
    """Kink entries in their own colour, hatched, off the error scale; their legend handle."""
    if not np.any(kink):
        return []
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    ax.imshow(
        np.ma.masked_array(np.ones(kink.shape), ~kink), cmap=ListedColormap([KINK_COLOR]),
        aspect="auto", interpolation="nearest",
    )  # fmt: skip
    ys, xs = np.nonzero(kink)
    for y, x in zip(ys, xs, strict=True):
        ax.add_patch(_hatch(float(x), float(y)))
    return [Patch(facecolor=KINK_COLOR, hatch="///", label="kink (NONSMOOTH: not an error)")]


def _hatch(x: float, y: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///", lw=0, ec="0.3")


def plot_report(report: Report, path: str | Path | None = None, ax: Any = None) -> Any:
    """Heat map of per-entry errors against their tolerances (error bars + round-off).

    Colour is ``log10(|autodiff − reference| / tolerance)``: below 0 (blue) the
    entry agrees within the error bars, above 0 (red) it does not. Full
    Jacobians are drawn as an outputs × inputs matrix; the gradient of a
    scalar function of one 2-D input (an image) in the input's shape;
    projections as a strip. Entries at a kink (NONSMOOTH) are no errors: they
    are drawn off that scale, in amber and hatched, with their own legend
    entry; failing or undecided entries are outlined.

    Parameters
    ----------
    report : Report
        Result of :func:`polygrad.check`.
    path : str or Path, optional
        File to save to (``.png``, ``.svg``...).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        matplotlib is not installed.
    """
    fig, ax = _figure(ax, (6.4, 5.2))
    arrange, ylabel, xlabel = _arrange(report)
    e = report.entries
    kink = arrange(e.status == KINK_CODE)
    with np.errstate(all="ignore"):
        ratio = np.abs(e.autodiff - e.reference) / np.where(e.tolerance > 0, e.tolerance, np.nan)
        z = np.log10(np.maximum(arrange(ratio), 1e-12))
    z = np.where(np.isfinite(z), z, 3.0)
    smooth = z[~kink]
    lim = min(8.0, max(1.0, float(np.max(np.abs(smooth))) if smooth.size else 1.0))
    im = ax.imshow(
        np.ma.masked_array(z, kink), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
        interpolation="nearest",
    )  # fmt: skip
    cb = fig.colorbar(im, ax=ax)
    cb.set_label("log10(|autodiff − reference| / tolerance)")
    handles = _kinks_layer(ax, kink)
    bad = arrange(e.status) > KINK_CODE
    if np.any(bad):
        ys, xs = np.nonzero(bad)
        handles += ax.plot(
            xs, ys, "s", mfc="none", mec="k", ms=5, mew=0.8, label="fails or undecided"
        )
    if handles:
        # below the axes: over them it covers entries of the heat map
        ax.legend(handles=handles, fontsize=7, loc="upper right", bbox_to_anchor=(1.0, -0.12))
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    else:
        ax.set_yticks([])
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts().items()))
    ax.set_title(f"polygrad: {report.verdict} ({counts})", fontsize=10)
    _save(fig, path, tight=bool(handles))
    return fig
