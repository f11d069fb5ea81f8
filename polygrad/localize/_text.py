"""The lines a report shows for a localization (the located node first)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._share import WHOLE

if TYPE_CHECKING:  # pragma: no cover
    from . import Localization
    from ._core import NodeCheck
    from ._share import Share


def node_lines(c: NodeCheck) -> list[str]:
    """The op, its path, its source line, and its error against its own tolerance (or,
    from the NONFINITE walk, where its VJP is NaN or Inf, what it feeds and the fix)."""
    lines = [f"  op:     {c.site.op} ({c.site.kind})"]
    if c.site.path:
        lines.append(f"  layer:  {c.site.path}")
    if c.site.source:
        lines.append(f"  line:   {c.site.source}")
    if c.nonfinite:
        lines.append(f"  its VJP ({c.arithmetic}, finite inputs, finite cotangent) is NaN "
                     f"or Inf at {c.nonfinite}")  # fmt: skip
        if c.feeds is not None:
            lines.append(f"  feeds:  {c.feeds.where()}")
        if c.hint:
            lines.append(f"  fix:    {c.hint}")
        return lines
    times = c.error / c.tolerance if c.tolerance > 0 else float("inf")
    lines.append(
        f"  its rule: {c.compared}: {c.autodiff:.10g} against {c.reference:.10g} "
        f"({c.arithmetic}); |diff| {c.error:.2e} = {times:.3g} x "
        f"its tolerance {c.tolerance:.2e} (relative {c.relative:.2e})"
    )
    return lines


_HEADERS = {
    "wrong rule": ("Localized: the first node whose own rule is wrong",
                   "Localized: no node's own rule was found wrong"),
    "non-finite VJP": ("Localized: the first node whose VJP turns finite values into NaN or Inf",
                       "Localized: no node's VJP turns finite values into NaN or Inf"),
}  # fmt: skip


def localization_lines(loc: Localization) -> list[str]:
    """Header, the located node (or that none was found), counts and notes."""
    custom = sum(c.site.kind == "custom rule" for c in loc.checked)
    kinks = [c.site.where() for c in loc.checked if c.at_kink]
    count = (f"{len(loc.checked)} node(s) checked alone at their forward-pass inputs "
             f"({custom} custom rule(s), {len(loc.checked) - custom} primitive(s)) "
             f"in {loc.seconds:.2f} s")  # fmt: skip
    if kinks:
        count += (f"; {len(kinks)} at a kink of their own, where differences read no "
                  f"derivative, not judged (the first: {kinks[0]})")  # fmt: skip
    found, none = _HEADERS[loc.searched]
    if loc.by_default is not None and loc.located is None:
        none = _by_default_line(loc)
    lines = [found, *node_lines(loc.located)] if loc.located is not None else [none]
    if loc.share is not None:
        lines.append(share_line(loc.share))
    if loc.checked:
        lines.append(f"  {count}")
    lines += [f"  note: {n}" for n in loc.notes]
    return lines


def share_line(s: Share) -> str:
    """How much of the function's error the located node explains (with the other calls of
    its op, where it has some), and what that means."""
    line = (f"  share:  {100 * s.fraction:.0f}% of the function's error: its error carried "
            f"through the program, {s.node:.3e}, against the function's {s.function:.3e} "
            "(the sum of its outputs along the error's direction; tolerance "
            f"{s.tolerance:.1e})")  # fmt: skip
    whole = s.fraction
    if s.calls > 1 and abs(s.same_op_fraction - s.fraction) > WHOLE / 2:
        whole = s.same_op_fraction
        line += (f"; with the {s.calls - 1} other call(s) of the same op, "
                 f"{100 * whole:.0f}%")  # fmt: skip
        if abs(whole - 1) <= WHOLE:
            line += ": together they explain it"
    if whole < 1 - WHOLE:
        line += ("; the rest comes from elsewhere, such as a second wrong rule: check "
                 "again once this one is fixed")  # fmt: skip
    elif whole > 1 + WHOLE:
        line += "; other parts of the program offset some of it"
    return line


def _by_default_line(loc: Localization) -> str:
    """The one line of a walk run by default that found nothing: cut short (and how to
    walk in full), or complete."""
    head = "  localization (run by default after a failing check)"
    if loc.cut_short:
        return (f"{head}: cut short by its budget of {loc.by_default:.2g} s (the check's own "
                "time) before a node was blamed; report.localize() (CLI: --localize) walks "
                "the program in full")  # fmt: skip
    if not loc.checked:
        return f"{head}: no node was checked"
    return f"{head}: no node's own rule was found wrong among {len(loc.checked)} checked"
