"""MkDocs hooks: figures drawn by polygrad and benchmark tables, made at build time.

* ``on_files`` runs the small polygrad computations in :data:`FIGURES` and adds
  their plots to the site as ``figures/<name>.png``; nothing binary is kept in
  the repository.
* ``on_files`` also writes ``css/pygments.css``, the stylesheet of the code
  highlighted at build time by Pygments, so no page loads anything from a CDN.
* ``on_page_markdown`` replaces a line ``<!-- benchmark-table: NAME -->`` with a
  table made from ``benchmarks/results/NAME.json`` (``zoo.cnn``: the CNN rows of
  ``zoo.json``, the run of the cost table of ``scale.md``), a line
  ``<!-- latency-summary -->`` with the per-framework cost against each framework's
  own checker (``benchmarks/results/latency.json``), and an inline
  ``<!-- value: NAME -->`` with a number computed at build time (:data:`VALUES`),
  so that the prose and the figures and tables beside it come from the same run.

The figures need matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import functools
import io
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BENCHMARK_MARKER = re.compile(r"^<!-- benchmark-table: ([\w.-]+) -->$", re.MULTILINE)
LATENCY_MARKER = re.compile(r"^<!-- latency-summary -->$", re.MULTILINE)
VALUE_MARKER = re.compile(r"<!-- value: ([\w.-]+) -->")


# ---- figures ----------------------------------------------------------------------------


def _case1(n: int) -> tuple[Callable[..., Any], np.ndarray, np.ndarray]:
    """USERS.md case 1 in NumPy float32: the Gaussian log-density summed over ``n`` dims."""
    scale = np.random.default_rng(0).uniform(0.5, 1.5, n).astype(np.float32)

    def log_density(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return np.sum(-(x**2) / (2 * scale**2))

    return log_density, np.ones(n, dtype=np.float32), scale


def figure_vcurve() -> Any:
    """Error of a plain central difference against the step, case 1 (n = 1)."""
    import polygrad as pg

    f, x, scale = _case1(1)
    return pg.sweep(f, x, scale).plot()


def figure_vshape() -> Any:
    """The V: a float32 function with curvature, ``exp``, where both error terms show."""
    import polygrad as pg

    return pg.sweep(lambda x: np.sum(np.exp(x)), np.ones(1, dtype=np.float32)).plot()


def figure_summation() -> Any:
    """The same curve for n = 1, 100 and 10 000 summed terms (one random direction each)."""
    from matplotlib.figure import Figure

    import polygrad as pg

    fig = Figure(figsize=(10.5, 4.4), layout="constrained")
    axes = fig.subplots(1, 3, sharey=False)
    for ax, n in zip(axes, (1, 100, 10_000), strict=True):
        f, x, scale = _case1(n)
        pg.sweep(f, x, scale, directions=1).plot(ax=ax)
        ax.set_title(f"n = {n}: |f| = {abs(float(f(x, scale))):.3g}", fontsize=10)
    return shared_legend(fig)


def _sin_in_float32(x: np.ndarray) -> Any:
    return np.sum(np.sin(x.astype(np.float32)).astype(np.float64))


@functools.cache
def noise_sweep() -> Any:
    """The sweep of a float64 function that computes in float32 inside (figure and prose)."""
    import polygrad as pg

    return pg.sweep(_sin_in_float32, np.array([0.3, 1.2]))


@functools.cache
def clean_sweep() -> Any:
    """The same function computed in float64 throughout: the step its round-off alone gives."""
    import polygrad as pg

    return pg.sweep(lambda x: np.sum(np.sin(x)), np.array([0.3, 1.2]))


def figure_noise() -> Any:
    """A float64 function that computes in float32 inside: noise far above float64 round-off."""
    return noise_sweep().plot()


def figure_taylor() -> Any:
    """Taylor remainders of a correct and of a wrong gradient."""
    from matplotlib.figure import Figure

    import polygrad as pg

    fig = Figure(figsize=(11.0, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    x = np.array([0.5, -1.0, 2.0])

    def f(x: np.ndarray) -> np.ndarray:
        return np.sum(np.sin(x) * x)

    pg.taylor_test(f, x, grad=lambda x: np.cos(x) * x + np.sin(x)).plot(ax=left)
    left.set_title("correct gradient: slope 2", fontsize=10)
    pg.taylor_test(f, x, grad=lambda x: np.cos(x) * x).plot(ax=right)
    right.set_title("gradient missing a term: slope 1", fontsize=10)
    return fig


def figure_kinks() -> Any:
    """report.plot() for 2x2 max pooling of an image whose background is exactly zero."""
    import polygrad as pg

    image = np.zeros((8, 8))
    image[2:6, 2:6] = np.arange(16.0).reshape(4, 4) / 16 + 0.1
    weights = np.linspace(-1.0, 1.0, 16).reshape(4, 4)

    def pooled(img: np.ndarray) -> np.ndarray:
        return img.reshape(4, 2, 4, 2).max(axis=(1, 3))

    def loss(img: np.ndarray) -> np.ndarray:
        return np.sum(weights * pooled(img)) + 0.5 * np.sum(img**2)

    def grad(img: np.ndarray) -> np.ndarray:
        blocks = img.reshape(4, 2, 4, 2).transpose(0, 2, 1, 3).reshape(4, 4, 4)
        first = blocks.argmax(axis=2)  # the element NumPy's max picks
        mask = np.zeros((4, 4, 4))
        np.put_along_axis(mask, first[..., None], 1.0, axis=2)
        g = (mask * weights[..., None]).reshape(4, 4, 2, 2).transpose(0, 2, 1, 3).reshape(8, 8)
        return g + img

    return pg.check(loss, image, grad=grad).plot()


FIGURES: dict[str, Callable[[], Any]] = {
    "vcurve": figure_vcurve,
    "vshape": figure_vshape,
    "summation": figure_summation,
    "noise": figure_noise,
    "taylor": figure_taylor,
    "kinks": figure_kinks,
}
"""Figure name (``figures/<name>.png``) → function returning a matplotlib figure."""


def render_figures() -> dict[str, bytes]:
    """Draw every figure in :data:`FIGURES`.

    Returns
    -------
    dict of str to bytes
        Figure name → PNG file contents.

    Raises
    ------
    ImportError
        matplotlib is not installed (``pip install "polygrad-check[plot]"``).
    """
    out = {}
    for name, make in FIGURES.items():
        buf = io.BytesIO()
        tidy(make()).savefig(buf, format="png", dpi=DPI)
        out[name] = buf.getvalue()
    return out


DPI = 96
"""Pixels per inch of the site's figures: a 10.5-inch figure fills the text column."""


def _visible(handle: Any, ax: Any) -> bool:
    """Whether a legend handle draws anything inside the axes' limits."""
    get_data = getattr(handle, "get_data", None)
    if get_data is None:
        return True
    x, y = (np.asarray(v, dtype=float) for v in get_data())
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    inside = np.isfinite(x) & np.isfinite(y) & (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
    return bool(np.any(inside))


def _legend_entries(ax: Any) -> tuple[list[Any], list[str]]:
    """The entries of the legend of ``ax`` (or of its labelled artists, without one),
    less the lines drawn outside its limits.

    A legend may hold proxy handles that are no artist of the axes (the hatched
    patch that stands for the kinks of ``report.plot()``): those are taken from
    the legend itself and kept, so that no entry the figure drew is lost.
    """
    handles, labels = ax.get_legend_handles_labels()
    drawn = dict(zip(labels, handles, strict=True))
    legend = ax.get_legend()
    if legend is not None:
        labels = [t.get_text() for t in legend.get_texts()]
        proxies = legend.legend_handles
        handles = [drawn.get(lab, p) for lab, p in zip(labels, proxies, strict=True)]
    kept = [
        (h, lab)
        for h, lab in zip(handles, labels, strict=True)
        if drawn.get(lab) is not h or _visible(h, ax)
    ]
    return [h for h, _ in kept], [lab for _, lab in kept]


def _placement(ax: Any, legend: Any) -> dict[str, Any]:
    """Where a rebuilt legend goes: where the figure anchored it (a heat map's legend below
    its axes, where it covers no entry), in axes coordinates; else the best place."""
    if getattr(legend, "_bbox_to_anchor", None) is None:
        return {"loc": "best"}
    b = legend.get_bbox_to_anchor().transformed(ax.transAxes.inverted())
    return {"loc": legend._loc, "bbox_to_anchor": (b.x0, b.y0, b.width, b.height),
            "bbox_transform": ax.transAxes}  # fmt: skip


def tidy(fig: Any) -> Any:
    """Readable legends and labels for the site, on a figure polygrad drew.

    Every legend keeps only the lines drawn within the axes (a prediction that is
    zero everywhere is not listed) at a readable size on a white box, and every text
    annotation gets a white box below the point it marks (the best step sits at the
    bottom of the error curve, so below it is free), legible where it crosses a line.
    """
    for ax in fig.get_axes():
        legend = ax.get_legend()
        if legend is not None:
            handles, labels = _legend_entries(ax)
            place = _placement(ax, legend)
            if handles:
                ax.legend(handles, labels, fontsize=8.5, framealpha=0.9, **place)
            else:  # every line lies outside the limits: no empty box
                legend.remove()
        for text in ax.texts:
            if hasattr(text, "xyann"):  # an annotation of a point: below it, off the curve
                text.xyann = (-10, -16)
                text.set_verticalalignment("top")
            text.set_fontsize(max(text.get_fontsize(), 9))
            text.set_bbox({"boxstyle": "round,pad=0.25", "fc": "white", "ec": "0.6", "alpha": 0.9})
    return fig


def shared_legend(fig: Any) -> Any:
    """One legend below the panels of ``fig`` instead of one per panel."""
    axes = fig.get_axes()
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*_legend_entries(ax), strict=True):
            entries.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    fig.legend(
        list(entries.values()),
        list(entries),
        loc="outside lower center",
        ncol=min(len(entries), 3),
        fontsize=9,
        frameon=False,
    )
    return fig


# ---- benchmark tables -------------------------------------------------------------------


def _seconds(x: Any) -> str:
    x = float(x)
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def _results(name: str) -> dict[str, Any]:
    """The JSON of ``benchmarks/results/<name>.json``; FileNotFoundError names the command."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"benchmark results {path.relative_to(ROOT)} not found; "
            f"run `python -m benchmarks` to produce them"
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def cnn_rows() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The case-2 CNN rows of ``zoo.json`` (the run of ``scale.md``'s cost table) and its meta."""
    data = _results("zoo")
    rows = [row for block in (data.get("cnn") or {}).values() for row in block.get("rows", [])]
    if not rows:
        raise ValueError("benchmarks/results/zoo.json has no CNN rows; run `python -m benchmarks`")
    return rows, data["meta"]


def benchmark_table(name: str) -> str:
    """A Markdown table of a benchmark's results.

    Parameters
    ----------
    name : str
        ``"zoo.cnn"``: the case-2 CNN rows of ``benchmarks/results/zoo.json``, the run
        of the cost table of ``docs/scale.md``. Otherwise the stem of a results file written
        by ``benchmarks/<name>.py``, with a ``results`` list of rows (``framework``,
        ``tool``, ``seconds``, ``evaluations``, ``evaluations_kind``, ``result``).

    Returns
    -------
    str
        The table, followed by a line naming the file, the machine and the versions.

    Raises
    ------
    FileNotFoundError
        The results file does not exist.
    """
    if name == "zoo.cnn":
        rows, meta = cnn_rows()
        source = (
            f"*From `benchmarks/results/zoo.json` (`python -m benchmarks`, {meta['date']}, the "
            "run of the [cost table](scale.md#cost-by-problem-size)): 784 input entries, "
            f"{meta.get('cpu_count', '?')} CPU cores, "
        )
        versions = meta.get("versions", {})
    else:
        data = _results(name)
        rows, versions = data["results"], data.get("versions", {})
        source = (
            f"*From `benchmarks/results/{name}.json`: {data.get('pixels', '?')} input entries, "
            f"{data.get('cpu_count', '?')} CPU cores, "
        )
    lines = [
        "| framework | tool | seconds | function evaluations | result |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for row in rows:
        tool = row["tool"].replace("|", "\\|")
        lines.append(
            f"| {row['framework']} | `{tool}` | {_seconds(row['seconds'])} | "
            f"{row['evaluations']} ({row['evaluations_kind']}) | {row['result']} |"
        )
    keep = ("python", "numpy", "torch", "tensorflow")
    listed = ", ".join(f"{k} {v}" for k, v in versions.items() if k in keep)
    return "\n".join([*lines, "", f"{source}{listed}.*"])


def _cnn_seconds(framework: str, tool_prefix: str) -> float:
    rows, _ = cnn_rows()
    for row in rows:
        if row["framework"] == framework and row["tool"].startswith(tool_prefix):
            return float(row["seconds"])
    raise KeyError(f"no CNN row for {framework} {tool_prefix!r} in zoo.json")


def _ratio(x: float) -> str:
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def cnn_ratio(framework: str, tool: str) -> str:
    """How many times the slower of polygrad and ``tool`` takes as long as the other."""
    ours = _cnn_seconds(framework, "polygrad")
    theirs = _cnn_seconds(framework, tool)
    return _ratio(max(ours, theirs) / min(ours, theirs))


FRAMEWORK_NAMES = {"numpy": "NumPy", "torch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow"}


def _span(values: list[float]) -> str:
    lo, hi = _ratio(min(values)), _ratio(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def latency_summary() -> str:
    """Per framework, polygrad's time against the framework's own checker (``latency.json``).

    Returns
    -------
    str
        A Markdown table: one row per framework for the n = 10 checks (float32 and
        float64 together), then one per larger check.
    """
    payload = _results("latency")
    rows = payload["rows"]
    lines = [
        "| check | the framework's checker | its time, warm | polygrad, warm "
        "| polygrad / checker, warm | polygrad / checker, first call |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    small = [r for r in rows if _single_small(r)]
    for fw in dict.fromkeys(r["framework"] for r in small):
        group = [r for r in small if r["framework"] == fw]
        warm = [r["polygrad_warm"] / r["tool_warm"] for r in group]
        first = [r["polygrad_first"] / r["tool_first"] for r in group]
        lines.append(
            f"| {FRAMEWORK_NAMES.get(fw, fw)}, n = 10, float32 and float64 | `{group[0]['tool']}` "
            f"| {_ms(group[0]['tool_warm'])} | {_ms_span([r['polygrad_warm'] for r in group])} "
            f"| {_span(warm)} | {_span(first)} |"
        )
    for r in rows:
        if _single_small(r):
            continue
        what = f"{FRAMEWORK_NAMES.get(r['framework'], r['framework'])}, n = {r['n']:,}"
        what += f", {r['dtype']}, {r.get('strategy', 'full')}"
        lines.append(
            f"| {what} | `{r['tool']}` | {_ms(r['tool_warm'])} | {_ms(r['polygrad_warm'])} "
            f"| {_span([r['polygrad_warm'] / r['tool_warm']])} | |"
        )
    dates = sorted({str(r.get("measured", "on an unrecorded date")) for r in rows})
    when = dates[0] if len(dates) == 1 else ", ".join(dates[:-1]) + " and " + dates[-1]
    lines += [
        "",
        f"*From `benchmarks/results/latency.json`, measured {when} on "
        f"{payload.get('cpu_count', '?')} CPU cores; how each row was timed is stated above "
        "its table on the [speed](speed.md#time-to-verdict-against-the-frameworks-checkers) "
        "and [scale](scale.md#large-inputs-full-checks-at-n-1e4-projections-at-n-1e6) "
        "pages.*",
    ]
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _ms_span(seconds: list[float]) -> str:
    lo, hi = _ms(min(seconds)), _ms(max(seconds))
    if lo == hi:
        return lo
    if lo.split()[1] == hi.split()[1]:
        return f"{lo.split()[0]} to {hi}"
    return f"{lo} to {hi}"


def _pow2(h: float) -> str:
    return f"2^{round(math.log2(h))}"


def _latency_row(job: str) -> dict[str, Any]:
    """The row of ``latency.json`` whose job is ``job`` (``cnn:tensorflow``, ``cnn:torch``)."""
    return next(r for r in _results("latency")["rows"] if r.get("job") == job)


def latency_small_ratio(numpy: bool) -> str:
    """The span of polygrad's warm time over the checker's at n = 10: NumPy against
    ``scipy.optimize.check_grad``, or the three frameworks against their own checkers."""
    rows = [r for r in _results("latency")["rows"] if _single_small(r)]
    rows = [r for r in rows if (r["framework"] == "numpy") == numpy]
    return _span([r["polygrad_warm"] / r["tool_warm"] for r in rows])


def _single_small(row: dict[str, Any]) -> bool:
    """A check of one function at n = 10 (not the suite's row, a job of many checks)."""
    return row["n"] == 10 and "job" not in row


def latency_cnn_ratio(job: str, call: str) -> str:
    """How many times the slower of polygrad and the checker takes as long as the other,
    on the CNN row ``job`` of ``latency.json``, for the ``warm`` or ``first`` call."""
    r = _latency_row(job)
    ours, theirs = float(r[f"polygrad_{call}"]), float(r[f"tool_{call}"])
    return f"{max(ours, theirs) / min(ours, theirs):.1f}"


VALUES: dict[str, Callable[[], str]] = {
    "latency.framework_warm": lambda: latency_small_ratio(numpy=False),
    "latency.numpy_warm": lambda: latency_small_ratio(numpy=True),
    "latency.cnn_tf_warm": lambda: latency_cnn_ratio("cnn:tensorflow", "warm"),
    "latency.cnn_tf_first": lambda: latency_cnn_ratio("cnn:tensorflow", "first"),
    "latency.cnn_torch_warm": lambda: latency_cnn_ratio("cnn:torch", "warm"),
    "latency.cnn_torch_first": lambda: latency_cnn_ratio("cnn:torch", "first"),
    "noise.best_step": lambda: _pow2(noise_sweep().optimal_step),
    "noise.clean_best_step": lambda: _pow2(clean_sweep().optimal_step),
    "cnn.tf_ratio": lambda: cnn_ratio("tensorflow", "tf.test.compute_gradient"),
    "cnn.torch_ratio": lambda: cnn_ratio("torch", "torch.autograd.gradcheck float64"),
    "zoo.date": lambda: str(_results("zoo")["meta"]["date"]),
}
"""Name of an inline ``<!-- value: NAME -->`` marker → the text it is replaced with."""


# ---- MkDocs hook functions -------------------------------------------------------------


def pygments_css(style: str = "default") -> str:
    """The stylesheet for code highlighted by ``pymdownx.highlight`` (class ``highlight``)."""
    from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]

    return str(HtmlFormatter(style=style).get_style_defs(".highlight"))


def on_files(files: Any, config: Any) -> Any:
    """Add the generated figures and the code-highlighting stylesheet to the site."""
    from mkdocs.structure.files import File

    for name, png in render_figures().items():
        files.append(File.generated(config, f"figures/{name}.png", content=png))
    files.append(File.generated(config, "css/pygments.css", content=pygments_css()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the benchmark-table, latency-summary and value markers (see the module)."""
    markdown = BENCHMARK_MARKER.sub(lambda m: benchmark_table(m.group(1)), markdown)
    markdown = LATENCY_MARKER.sub(lambda m: latency_summary(), markdown)
    return VALUE_MARKER.sub(lambda m: VALUES[m.group(1)](), markdown)
