"""The lines a report shows for a localization (the located node first)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from . import Localization
    from ._core import NodeCheck


def node_lines(c: NodeCheck) -> list[str]:
    """The op, its path, its source line, and its error against its own tolerance."""
    lines = [f"  op:     {c.site.op} ({c.site.kind})"]
    if c.site.path:
        lines.append(f"  layer:  {c.site.path}")
    if c.site.source:
        lines.append(f"  line:   {c.site.source}")
    times = c.error / c.tolerance if c.tolerance > 0 else float("inf")
    lines.append(
        f"  its rule: {c.compared}: {c.autodiff:.10g} against {c.reference:.10g} "
        f"({c.arithmetic}); |diff| {c.error:.2e} = {times:.3g} x "
        f"its tolerance {c.tolerance:.2e} (relative {c.relative:.2e})"
    )
    return lines


def localization_lines(loc: Localization) -> list[str]:
    """Header, the located node (or that none was found), counts and notes."""
    custom = sum(c.site.kind == "custom rule" for c in loc.checked)
    count = (f"{len(loc.checked)} node(s) checked alone at their forward-pass inputs "
             f"({custom} custom rule(s), {len(loc.checked) - custom} primitive(s)) "
             f"in {loc.seconds:.2f} s")  # fmt: skip
    if loc.located is not None:
        lines = ["Localized: the first node whose own rule is wrong"]
        lines += node_lines(loc.located)
    else:
        lines = ["Localized: no node's own rule was found wrong"]
    if loc.checked:
        lines.append(f"  {count}")
    lines += [f"  note: {n}" for n in loc.notes]
    return lines
