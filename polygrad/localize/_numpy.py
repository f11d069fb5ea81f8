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
    from . import CheckedCall, Recording


def record(call: CheckedCall, report: Report) -> Recording:
    """The supplied rule as the located node, from the report's worst entry."""
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
    i = int(e.worst(1)[0])
    ad, ref, tol = float(e.autodiff[i]), float(e.reference[i]), float(e.tolerance[i])
    dtype = np.asarray(e.autodiff).dtype.name
    what = f"the Jacobian entry {e.names[i]} by the rule against the check's reference"
    check = NodeCheck(site, ad, ref, abs(ad - ref), tol, dtype, what)
    return Recording(notes=(note,), located=check if check.wrong else None)
