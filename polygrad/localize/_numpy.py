"""NumPy: no graph; the supplied derivative as a whole is the node.

A NumPy function has no autodiff and no captured program: the rule checked is the one
passed to :func:`polygrad.check` (``vjp=``, ``jvp=``, ``grad=`` or ``jac=``). It is
reported as the node, with the line that defines it, and its error is the report's own
worst entry against that entry's tolerance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._core import NodeCheck, Site
from ._names import callable_place

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report
    from ..verdicts import Entries
    from . import CheckedCall, Recording


CAPTURES_PROGRAM = False
"""No program is captured: the node is the supplied rule, which the check itself judged, so
a failing check does not localize by default (it would only repeat its verdict)."""


def record(call: CheckedCall, report: Report, as_run: bool = False) -> Recording:
    """The supplied rule as the located node, from the report's worst entry; with
    ``as_run`` (the NONFINITE walk), from its entries that are NaN or Inf where the
    reference is finite."""
    from . import Recording

    supplied = call.supplied
    named = [(k, getattr(supplied, k)) for k in ("vjp", "jvp", "grad", "jac")
             if supplied is not None and getattr(supplied, k) is not None]  # fmt: skip
    note = ("NumPy: the function has no captured program; the supplied rule as a whole is "
            "the node")  # fmt: skip
    if not named:
        return Recording(notes=(note, "no derivative was supplied"))
    kind, fn = named[0]
    site = Site(f"the supplied {kind}= rule", "custom rule", "", callable_place(fn))
    e = report.entries
    if as_run:
        return Recording(notes=(note,), located=_nonfinite(site, e))
    i = int(e.worst(1)[0])
    ad, ref, tol = float(e.autodiff[i]), float(e.reference[i]), float(e.tolerance[i])
    dtype = np.asarray(e.autodiff).dtype.name
    what = f"the Jacobian entry {e.names[i]} by the rule against the check's reference"
    check = NodeCheck(site, ad, ref, abs(ad - ref), tol, dtype, what)
    return Recording(notes=(note,), located=check if check.wrong else None)


def _nonfinite(site: Site, e: Entries) -> NodeCheck | None:
    """The rule as a node whose values are NaN or Inf where the reference is finite."""
    bad = np.flatnonzero(~np.isfinite(e.autodiff) & np.isfinite(e.reference))
    if not bad.size:
        return None
    shown = "; ".join(f"{e.names[int(i)]}: {float(e.autodiff[int(i)])!r}" for i in bad[:3])
    more = f" (and {bad.size - 3} more)" if bad.size > 3 else ""
    i = int(bad[0])
    what = "the Jacobian entries by the rule where the check's reference is finite"
    dtype = np.asarray(e.autodiff).dtype.name
    return NodeCheck(site, float(e.autodiff[i]), float(e.reference[i]), float("inf"), 0.0,
                     dtype, what, nonfinite=f"the Jacobian entries {shown}{more}")  # fmt: skip
