"""The docs build's figure tidying (``docs/hooks.py``) keeps every legend entry a figure drew.

``tidy`` rebuilds each legend at the site's size and leaves out lines drawn
outside the axes' limits; a legend entry whose handle is a proxy (the hatched
patch that stands for the kinks of ``report.plot()``) is no artist of the axes
and must survive, and a legend left with nothing is removed, not drawn empty.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hooks() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def labels(ax: Any) -> list[str]:
    legend = ax.get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def test_proxy_entries_kept_and_lines_outside_the_limits_dropped(hooks: Any) -> None:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure()
    ax = fig.subplots()
    inside = ax.plot([0, 1], [0, 1], label="inside")[0]
    outside = ax.plot([5, 6], [5, 6], label="outside")[0]
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    kink = Patch(facecolor="orange", hatch="///", label="kink (NONSMOOTH: not an error)")
    ax.legend(handles=[inside, outside, kink])
    assert labels(ax) == ["inside", "outside", "kink (NONSMOOTH: not an error)"]
    hooks.tidy(fig)
    assert labels(ax) == ["inside", "kink (NONSMOOTH: not an error)"]
    patch = ax.get_legend().legend_handles[1]
    assert patch.get_hatch() == "///"


def test_a_legend_left_empty_is_removed(hooks: Any) -> None:
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    ax.plot([5, 6], [5, 6], label="outside")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend()
    hooks.tidy(fig)
    assert ax.get_legend() is None


def test_kinks_figure_keeps_every_legend_entry(hooks: Any) -> None:
    fig = hooks.figure_kinks()
    before = {id(ax): labels(ax) for ax in fig.get_axes()}
    assert any("kink (NONSMOOTH: not an error)" in v for v in before.values()), before
    hooks.tidy(fig)
    after = {id(ax): labels(ax) for ax in fig.get_axes()}
    assert after == before


def test_shared_legend_keeps_proxy_entries(hooks: Any) -> None:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure()
    left, right = fig.subplots(1, 2)
    for ax in (left, right):
        line = ax.plot(np.arange(3.0), label="error")[0]
        ax.legend(handles=[line, Patch(hatch="///", label="kink")])
    hooks.shared_legend(fig)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["error", "kink"]
    assert left.get_legend() is None and right.get_legend() is None


def test_a_legend_placed_outside_the_axes_stays_there(hooks: Any) -> None:
    """The entries heat map puts its legend below the axes, where it covers no entry."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.imshow([[0.0, 1.0], [1.0, 0.0]])
    (line,) = ax.plot([0.0], [0.0], "s", label="kink")
    ax.legend(handles=[line], loc="upper right", bbox_to_anchor=(1.0, -0.12))
    hooks.tidy(fig)
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent()
    assert box.y1 <= ax.get_window_extent().y0  # wholly below the axes
    plt.close(fig)
