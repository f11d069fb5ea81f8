"""Verdicts and reports: what was compared, the verdict, and the numbers behind it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .details import Details

# Verdict, Entries and SEVERITY live in polygrad.verdicts; re-exported here, where users
# and the pipeline import them
from .verdicts import SEVERITY as SEVERITY
from .verdicts import Entries, Verdict
from .verdicts import jsonable as _jsonable

if TYPE_CHECKING:  # pragma: no cover
    from .localize import CheckedCall, Localization

__all__ = ["Verdict", "Entries", "Report"]


@dataclass
class Report:
    """The result of :func:`polygrad.check`.

    Attributes
    ----------
    verdict : Verdict
        The worst verdict over all compared entries.
    ok : bool
        True for ``PASS``; for ``NONSMOOTH`` as the ``nonsmooth=`` option of
        :func:`polygrad.check` says (by default a kink is not an error; the
        report says whether autodiff lies between the one-sided derivatives).
    entries : Entries
        Every compared quantity (Jacobian entries, or projections ``uᵀJw``).
    quantity : str
        What the entries are: ``"Jacobian entries"`` or ``"projections"``.
    details : Details
        Everything else behind the verdict: reference method, noise, steps,
        tolerances, projections' detection power, timings, notes (typed; it
        also reads as the mapping of its JSON form, ``details["reference"]["method"]``).
    checked_call : CheckedCall or None
        The call the report was made from (kept by :func:`polygrad.check` for
        :meth:`localize`).
    localization : Localization or None
        The result of :meth:`localize`, once run (the text report then shows it first).
    """

    verdict: Verdict
    ok: bool
    entries: Entries
    quantity: str
    details: Details
    checked_call: CheckedCall | None = field(default=None, repr=False, compare=False)
    localization: Localization | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the checked call: the user's function and arguments need not
        pickle (a lambda, a model on a device), and a copy has nothing to localize."""
        state = dict(self.__dict__)
        state["checked_call"] = None
        return state

    def localize(self, budget: float = 30.0, max_size: int = 1 << 16) -> Localization:
        """Name the op, the layer and the source line whose own gradient rule is wrong.

        For a MISMATCH: the checked function runs once more, each node of its program
        (custom rule regions first, then primitives) is checked alone at the inputs it
        saw, and the first wrong one is reported (see :mod:`polygrad.localize`). For
        NONFINITE (autodiff NaN or Inf where the reference is finite): the first node,
        in forward order, whose VJP turns finite inputs and the finite cotangent it
        received into NaN or Inf, with the ``where`` it feeds and the fix (the
        "double where"). Kept in :attr:`localization`, which ``str(report)`` then
        shows first and :meth:`to_dict` includes.

        Parameters
        ----------
        budget : float
            Seconds the node checks may take; a walk cut short says so in a note.
        max_size : int
            Nodes with more input entries than this are not checked (noted).

        Returns
        -------
        Localization
            ``located`` is None, with notes saying why, where nothing was found or run.
        """
        from .localize import localize

        self.localization = localize(self, budget, max_size)
        return self.localization

    @property
    def notes(self) -> list[str]:
        return list(self.details.notes)

    def counts(self) -> dict[str, int]:
        """Number of entries per verdict."""
        out: dict[str, int] = {}
        for v in self.entries.verdicts():
            out[str(v)] = out.get(str(v), 0) + 1
        return out

    def to_dict(self, max_entries: int = 20) -> dict[str, Any]:
        """JSON-serialisable summary; the ``max_entries`` worst entries are included, and
        ``"localization"`` once :meth:`localize` has run (see
        :meth:`polygrad.localize.Localization.to_dict`: the located node's op, layer path,
        source line, error and tolerance, or None with the notes saying why)."""
        worst = self.entries.worst(max_entries)
        d = {
            "verdict": str(self.verdict),
            "ok": self.ok,
            "quantity": self.quantity,
            "counts": self.counts(),
            "worst_entries": [self.entries.row(int(i)) for i in worst],
            "details": _jsonable(self.details.to_dict()),
        }
        if self.localization is not None:
            d["localization"] = _jsonable(self.localization.to_dict())
        return d

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        from .render import render_text

        return render_text(self)

    def to_text(self, color: bool | None = None) -> str:
        """The text report (``str(report)``); ``color=False`` for logs and exception messages."""
        from .render import render_text

        return render_text(self, color=color)

    def plot(self, path: Any = None, ax: Any = None) -> Any:
        """Heat map of ``|autodiff - reference| / tolerance`` per Jacobian entry.

        Needs matplotlib (``pip install 'polygrad-check[plot]'``). Saves to ``path``
        (PNG/SVG by extension) when given; returns the matplotlib figure.
        """
        from .plot import plot_report

        return plot_report(self, path, ax=ax)

    def __repr__(self) -> str:
        size = len(self.entries.names)
        return f"<polygrad.Report {self.verdict} ok={self.ok} ({size} {self.quantity})>"
