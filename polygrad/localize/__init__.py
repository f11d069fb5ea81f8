"""Where is the bug: the op, the layer and the line whose gradient rule is wrong.

After a MISMATCH, :meth:`polygrad.Report.localize` runs the user's function once more
(on the checked arguments, gradients recorded), records the operations of the program
with the inputs each saw, and checks each node's *own* rule alone at those inputs: its
VJP (the framework's, on that node alone) against central differences of that node
alone, in float64 where the node runs in float64 (see :mod:`polygrad.localize._core`).
Custom rule regions come first (``torch.autograd.Function``, ``jax.custom_vjp`` /
``custom_jvp``, ``tf.custom_gradient``: where users' bugs are), then the framework's
primitives, each group in the order the forward pass ran them; the first node whose
rule is wrong is reported with its module or layer path and the source line that
created it.

What each framework records (``_torch``, ``_jax``, ``_tf``, ``_numpy``):

* PyTorch: every ``autograd.Function.apply`` call (its class, arguments, call site and
  the ``nn.Module`` running it, from global module hooks), and every top-level torch
  function call under a ``TorchFunctionMode`` (the primitives);
* JAX: the jaxpr's equations (``pjit`` and ``closed_call`` bodies entered), each with the
  values it saw; ``custom_vjp_call`` / ``custom_jvp_call`` equations are the custom
  nodes; paths from ``name_stack`` (Flax, Equinox), lines from ``source_info``;
* TensorFlow: every ``tf.custom_gradient`` function called while the program runs
  eagerly (its rule and inputs, the name scope: Keras layer names, the call site);
  primitives are not checked;
* NumPy: no graph; the supplied derivative as a whole is the node.

Nothing runs for a check that did not fail; the cost is bounded by the nodes' own sizes
(``max_size`` input entries per node) and a time ``budget``; a walk cut short says so.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._core import Node, NodeCheck, Site, check_nodes

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.base import Supplied
    from ..report import Report

__all__ = ["CheckedCall", "Localization", "NodeCheck", "Site", "locate", "localize"]

_RECORDERS = {"torch": "_torch", "jax": "_jax", "tensorflow": "_tf", "numpy": "_numpy"}


@dataclass(frozen=True)
class CheckedCall:
    """The call a report was made from, kept so that the program can be captured again.

    Attributes
    ----------
    f : callable
        The user's function, as passed to :func:`polygrad.check`.
    args : tuple
        Its arguments, as passed (never modified).
    argnums : tuple of int
        The checked arguments.
    backend : str
        The framework's backend name (``"torch"``, ``"jax"``, ``"tensorflow"``, ``"numpy"``).
    supplied : Supplied or None
        A supplied derivative (NumPy).
    """

    f: Callable[..., Any]
    args: tuple[Any, ...]
    argnums: tuple[int, ...]
    backend: str
    supplied: Supplied | None = None


@dataclass(frozen=True)
class Recording:
    """What a framework's recorder found: the nodes, custom rules first, and notes."""

    custom: tuple[Node, ...] = ()
    primitives: tuple[Node, ...] = ()
    notes: tuple[str, ...] = ()
    located: NodeCheck | None = None  # a recorder that judges as a whole (NumPy)


@dataclass(frozen=True)
class Localization:
    """The result of :meth:`polygrad.Report.localize`.

    Attributes
    ----------
    located : NodeCheck or None
        The first node whose rule is wrong (None: none found among those checked).
    checked : tuple of NodeCheck
        Every node checked, in the order checked.
    notes : tuple of str
        Why nothing was checked, or what was left out (budget, sizes, unsupported parts).
    seconds : float
        Time spent.
    """

    located: NodeCheck | None
    checked: tuple[NodeCheck, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """The text a report shows first."""
        from ._text import localization_lines

        return localization_lines(self)

    def __str__(self) -> str:
        return "\n".join(self.lines())


def localize(report: Report, budget: float = 30.0, max_size: int = 1 << 16) -> Localization:
    """Find the first node whose rule is wrong in the program a failed ``report`` checked.

    Parameters
    ----------
    report : Report
        A report of :func:`polygrad.check`.
    budget : float
        Seconds the node checks may take (the recording itself is one forward pass).
    max_size : int
        Nodes with more input entries than this are skipped (noted).

    Returns
    -------
    Localization
        ``located`` is None, with a note, when the report did not fail, when the call
        was not kept (a report not made by :func:`polygrad.check`), when the program
        cannot be recorded, or when no checked node is wrong.
    """
    call = getattr(report, "checked_call", None)
    if str(report.verdict) != "MISMATCH":
        return Localization(None, notes=(f"not run: the check's verdict is {report.verdict}, "
                                         "localization looks for a wrong rule after a "
                                         "MISMATCH",))  # fmt: skip
    if call is None:
        return Localization(None, notes=("not run: the report does not hold the checked "
                                         "call (made by polygrad.check only)",))  # fmt: skip
    return locate(call, report, budget, max_size)


def locate(call: CheckedCall, report: Report, budget: float = 30.0,
           max_size: int = 1 << 16) -> Localization:  # fmt: skip
    """The walk of :func:`localize` on ``call``, whatever the report's verdict.

    Parameters
    ----------
    call : CheckedCall
        The function, its arguments and its framework.
    report : Report
        The report of ``call`` (read for a NumPy function, whose supplied rule is judged
        by the report's own entries).
    budget, max_size
        As in :func:`localize`.

    Returns
    -------
    Localization
    """
    start = time.perf_counter()
    rec = _record(call, report)
    if rec.located is not None:
        return Localization(rec.located, (rec.located,), rec.notes, time.perf_counter() - start)
    return _walk(rec, budget, max_size, start)


def _record(call: CheckedCall, report: Report) -> Recording:
    """The recorder of ``call``'s framework, run; a failure is a note, not an error."""
    name = _RECORDERS.get(call.backend)
    if name is None:
        return Recording(notes=(f"the program of a {call.backend} function cannot be "
                                "captured for localization",))  # fmt: skip
    try:
        module = importlib.import_module(f"{__name__}.{name}")
        rec: Recording = module.record(call, report)
    except Exception as exc:  # noqa: BLE001 - the program could not be recorded: say so
        return Recording(notes=(f"the captured program is unavailable: {type(exc).__name__}: "
                                f"{exc}",))  # fmt: skip
    return rec


def _walk(rec: Recording, budget: float, max_size: int, start: float) -> Localization:
    """Custom rule regions first, then primitives, until one is wrong or the budget ends."""
    notes = list(rec.notes)
    checked: list[NodeCheck] = []
    for group in (rec.custom, rec.primitives):
        left = budget - (time.perf_counter() - start)
        walk = check_nodes(group, max(left, 0.0), max_size)
        checked.extend(walk.checked)
        notes.extend(walk.notes)
        if checked and checked[-1].wrong:
            return Localization(checked[-1], tuple(checked), tuple(notes),
                                time.perf_counter() - start)  # fmt: skip
    if not rec.custom and not rec.primitives:
        notes.append("no operation of the program could be checked alone")
    return Localization(None, tuple(checked), tuple(notes), time.perf_counter() - start)
