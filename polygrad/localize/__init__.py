"""Where is the bug: the op, the layer and the line whose gradient rule is wrong.

After a MISMATCH (or NONFINITE: below), :meth:`polygrad.Report.localize` runs the user's
function once more (on the checked arguments, gradients recorded), records the
operations of the program with the inputs each saw, and checks each node's *own* rule
alone at those inputs: its VJP (the framework's, on that node alone) against central
differences of that node alone, in float64 where the node runs in float64 (see
:mod:`polygrad.localize._core`). Custom rule regions come first
(``torch.autograd.Function``, ``jax.custom_vjp`` / ``custom_jvp``,
``tf.custom_gradient``: where users' bugs are), then the framework's primitives, each
group in the order the forward pass ran them; the first node whose rule is wrong is
reported with its module or layer path and the source line that created it.

What each framework records (``_torch``, ``_jax``, ``_tf``, ``_numpy``):

* PyTorch: every ``autograd.Function.apply`` call (its class, arguments, call site and
  the ``nn.Module`` running it, from global module hooks), and every top-level torch
  function call under a ``TorchFunctionMode`` (the primitives);
* JAX: the jaxpr's equations (``pjit`` and ``closed_call`` bodies entered), each with the
  values it saw; ``custom_vjp_call`` / ``custom_jvp_call`` equations are the custom
  nodes; paths from ``name_stack`` (Flax, ``jax.named_scope``), lines from ``source_info``;
* TensorFlow: every ``tf.custom_gradient`` function called while the program runs
  eagerly (its rule and inputs, the name scope: Keras layer names, the call site), and
  every eager op the checked arguments reach (an op callback, ``_tf_ops``), re-executed
  alone in float64 where it has a float64 kernel;
* NumPy: no graph; the supplied derivative as a whole is the node.

After a NONFINITE verdict (autodiff NaN or Inf where the reference is finite) the walk
looks for something else (:mod:`polygrad.localize._nonfinite`): the program is recorded
as the user ran it, in its own dtypes, with one backward pass that gives each node the
cotangent it received, and the first node (in forward order, custom rules and
primitives together) whose VJP turns finite inputs and a finite cotangent into NaN or
Inf is reported, with the masking op (``where``) its output feeds and the fix.

Nothing runs for a check that did not fail; the cost is bounded by the nodes' own sizes
(``max_size`` input entries per node) and a time ``budget``; a walk cut short says so.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ._core import Node, NodeCheck, Site, Step, check_nodes
from ._share import WHOLE, Probe, Share, probe

if TYPE_CHECKING:  # pragma: no cover
    from ..backends.base import Supplied
    from ..policy import Policy
    from ..report import Report

__all__ = [
    "CheckedCall",
    "Localization",
    "NodeCheck",
    "Share",
    "Site",
    "Step",
    "locate",
    "localize",
    "localize_by_default",
]

WRONG_RULE = "wrong rule"
"""What :attr:`Localization.searched` is after a MISMATCH."""
NONFINITE_VJP = "non-finite VJP"
"""What :attr:`Localization.searched` is after a NONFINITE verdict."""

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
    order : int
        The derivative checked (2: the derivative of the gradient).
    """

    f: Callable[..., Any]
    args: tuple[Any, ...]
    argnums: tuple[int, ...]
    backend: str
    supplied: Supplied | None = None
    order: int = 1


@dataclass(frozen=True)
class Recording:
    """What a framework's recorder found: the nodes, custom rules first, and notes.

    Attributes
    ----------
    custom, primitives : tuple of Node
        The custom rule regions and the framework's primitives, each in forward order.
    notes : tuple of str
        What the recorder could not look at.
    located : NodeCheck or None
        The answer of a recorder that judges the rule as a whole (NumPy).
    steps : tuple of Step
        Every recorded call in forward order (a node's ``index`` is its position here),
        with the positions of the calls whose outputs it read; empty when unknown.
    outputs : tuple of int
        The positions of the calls that made the function's outputs; empty when unknown.
    suspects : tuple of str
        Notes on calls that change a derivative with no rule to compare (a detach, a
        hook): said where no located rule explains the whole error.
    """

    custom: tuple[Node, ...] = ()
    primitives: tuple[Node, ...] = ()
    notes: tuple[str, ...] = ()
    located: NodeCheck | None = None
    steps: tuple[Step, ...] = ()
    outputs: tuple[int, ...] = ()
    suspects: tuple[str, ...] = ()


@dataclass(frozen=True)
class Localization:
    """The result of :meth:`polygrad.Report.localize`.

    Attributes
    ----------
    located : NodeCheck or None
        The first node whose rule is wrong, or after NONFINITE whose VJP is NaN or Inf
        at finite values (None: none found among those checked).
    checked : tuple of NodeCheck
        Every node checked, in the order checked.
    notes : tuple of str
        Why nothing was checked, or what was left out (budget, sizes, unsupported parts).
    seconds : float
        Time spent.
    searched : str
        What was looked for: :data:`WRONG_RULE` (after a MISMATCH: a node whose VJP
        disagrees with its own differences) or :data:`NONFINITE_VJP` (after NONFINITE:
        the first node whose VJP is NaN or Inf at finite inputs and a finite cotangent).
    by_default : float or None
        The budget in seconds of a walk run by default after a failing check (see
        :func:`localize_by_default`); None where it was asked for.
    cut_short : bool
        The budget ran out before every node was checked, and none was found.
    share : Share or None
        How much of the function's error the located node explains (see
        :mod:`polygrad.localize._share`); None where it was not measured (a note says
        why) or nothing was located.
    """

    located: NodeCheck | None
    checked: tuple[NodeCheck, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    searched: str = WRONG_RULE
    by_default: float | None = None
    cut_short: bool = False
    share: Share | None = None

    @property
    def shown_first(self) -> bool:
        """A report shows it before the Jacobian entries: a node was located, or the
        walk was asked for (one run by default that found nothing is a line at the end)."""
        return self.located is not None or self.by_default is None

    def to_dict(self) -> dict[str, Any]:
        """The located node (op, kind, path, source line, its numbers; None where none
        was found), what was looked for, the count of nodes checked, the notes and the
        time, as a mapping (NaN and Inf as floats: :meth:`polygrad.Report.to_dict`
        makes them JSON-ready)."""
        return {
            "searched": self.searched,
            "located": None if self.located is None else self.located.to_dict(),
            "checked": len(self.checked),
            "notes": list(self.notes),
            "seconds": self.seconds,
            "by_default": self.by_default,
            "cut_short": self.cut_short,
            "share": None if self.share is None else self.share.to_dict(),
        }

    def lines(self) -> list[str]:
        """The text a report shows first."""
        from ._text import localization_lines

        return localization_lines(self)

    def __str__(self) -> str:
        return "\n".join(self.lines())


def localize(report: Report, budget: float = 30.0, max_size: int = 1 << 16) -> Localization:
    """Find the node to blame in the program a failed ``report`` checked.

    After a MISMATCH: the first node whose own rule is wrong. After NONFINITE: the first
    node whose VJP turns finite inputs and a finite cotangent into NaN or Inf.

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
        ``located`` is None, with a note, when the verdict is neither, when the call
        was not kept (a report not made by :func:`polygrad.check`), when the program
        cannot be recorded, or when no checked node is to blame.
    """
    call = getattr(report, "checked_call", None)
    verdict = str(report.verdict)
    if verdict not in ("MISMATCH", "NONFINITE"):
        return Localization(None, notes=(f"not run: the check's verdict is {verdict}; "
                                         "localization looks for a wrong rule after a "
                                         "MISMATCH and for a NaN- or Inf-making VJP after "
                                         "NONFINITE",))  # fmt: skip
    if call is None:
        return Localization(None, notes=("not run: the report does not hold the checked "
                                         "call (made by polygrad.check only)",))  # fmt: skip
    if call.order != 1:
        return Localization(None, notes=(SECOND_ORDER,))
    if verdict == "NONFINITE" and not _autodiff_nonfinite(report):
        return Localization(None, notes=("not run: autodiff is finite at every entry; the "
                                         "reference is the non-finite side",),
                            searched=NONFINITE_VJP)  # fmt: skip
    return locate(call, report, budget, max_size)


def localize_by_default(report: Report, policy: Policy) -> Localization | None:
    """The walk of :func:`localize` after a failing check that did not ask for one,
    within ``policy.localize_share`` times the check's own time (at least
    ``policy.localize_floor_seconds``).

    Parameters
    ----------
    report : Report
        A report of :func:`polygrad.check` or of one implementation of
        :func:`polygrad.compare` (it holds the checked call).
    policy : Policy
        Its ``localize_share`` and ``localize_floor_seconds`` set the budget, in seconds.

    Returns
    -------
    Localization or None
        None where the verdict is not MISMATCH or NONFINITE, where the share is 0, for
        ``order=2`` (the walk checks first-order rules), or where the framework's
        recorder captures no program (NumPy: the node would be the supplied rule as a
        whole, which the check itself judged). It raises nothing: a walk that fails is
        a note in the returned localization.
    """
    if str(report.verdict) not in ("MISMATCH", "NONFINITE") or policy.localize_share <= 0:
        return None
    call = getattr(report, "checked_call", None)
    if call is None or call.order != 1 or not _captures_program(call.backend):
        return None
    seconds = report.details.seconds or 0.0
    budget = max(policy.localize_floor_seconds, policy.localize_share * seconds)
    try:
        found = localize(report, budget)
    except Exception as exc:  # noqa: BLE001 - asked for by nobody: a note, never an error
        found = Localization(None, notes=(f"it failed: {type(exc).__name__}: {exc}",))
    return replace(found, by_default=budget)


def _captures_program(backend: str) -> bool:
    """The recorder of ``backend`` captures a program of nodes (not the supplied rule as
    a whole)."""
    name = _RECORDERS.get(backend)
    if name is None:
        return False
    return bool(getattr(importlib.import_module(f"{__name__}.{name}"), "CAPTURES_PROGRAM", True))


def _autodiff_nonfinite(report: Report) -> bool:
    """Some entry's autodiff value is NaN or Inf where its reference is finite."""
    e = report.entries
    return bool(np.any(~np.isfinite(e.autodiff) & np.isfinite(e.reference)))


def locate(call: CheckedCall, report: Report, budget: float = 30.0,
           max_size: int = 1 << 16, nonfinite: bool | None = None) -> Localization:  # fmt: skip
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
    nonfinite : bool or None
        Look for the first node whose VJP is NaN or Inf at finite values (True) or for
        a wrong rule (False); None: the first after a NONFINITE verdict, else the second.

    Returns
    -------
    Localization
    """
    start = time.perf_counter()
    if nonfinite is None:
        nonfinite = str(report.verdict) == "NONFINITE"
    searched = NONFINITE_VJP if nonfinite else WRONG_RULE
    rec = _record(call, report, as_run=nonfinite)
    if rec.located is not None:
        return Localization(rec.located, (rec.located,), rec.notes,
                            time.perf_counter() - start, searched)  # fmt: skip
    if nonfinite:
        return _walk_nonfinite(rec, budget, max_size, start)
    return _walk(rec, budget, max_size, start, _shares(call, report, rec, budget, start))


def _shares(call: CheckedCall, report: Report, rec: Recording, budget: float,
            start: float) -> Callable[[Node], Share | str]:  # fmt: skip
    """``share(node)``: the node's :class:`Share` of the function's error, or why it is not
    measured; the program is recorded again (:func:`._share.probe`) on the first call,
    within the walk's ``budget``. A failure is a reason, never an error."""
    from ..backends import get_backend

    made: list[Probe | str] = []

    def share(node: Node) -> Share | str:
        try:
            if not made:
                if time.perf_counter() - start > budget:
                    return f"the walk's budget of {budget:.2g} s is spent (report.localize() " \
                        "measures it)"  # fmt: skip
                made.append(probe(call, report, rec, _recorder(call), get_backend(call.backend)))
            p = made[0]
            return p if isinstance(p, str) else p.share(node)
        except Exception as exc:  # noqa: BLE001 - a diagnostic that cannot run: say so
            return f"it failed: {type(exc).__name__}: {exc}"

    return share


def _recorder(call: CheckedCall) -> Callable[..., Recording]:
    """The ``record`` function of ``call``'s framework."""
    module = importlib.import_module(f"{__name__}.{_RECORDERS[call.backend]}")
    return module.record  # type: ignore[no-any-return]


def _record(call: CheckedCall, report: Report, as_run: bool = False) -> Recording:
    """The recorder of ``call``'s framework, run; a failure is a note, not an error.
    ``as_run``: the nodes in the dtypes the program ran in (else float64 where they can)."""
    name = _RECORDERS.get(call.backend)
    if name is None:
        return Recording(notes=(f"the program of a {call.backend} function cannot be "
                                "captured for localization",))  # fmt: skip
    try:
        module = importlib.import_module(f"{__name__}.{name}")
        rec: Recording = module.record(call, report, as_run=as_run)
    except Exception as exc:  # noqa: BLE001 - the program could not be recorded: say so
        return Recording(notes=(f"the captured program is unavailable: {type(exc).__name__}: "
                                f"{exc}",))  # fmt: skip
    return rec


SECOND_ORDER = (
    "not run: order=2 checked the derivative of the gradient, and the walk checks each "
    "node's first-order rule (its VJP); a wrong second-order rule (a backward that is not "
    "itself differentiable, a detach inside a backward) is not seen by it: check the "
    "gradient of each custom rule with order=2 on its own"
)
"""Why a report of ``order=2`` is not localized."""

_DECLARED_ZERO = ("stop_gradient", "StopGradient")
"""Primitives whose rule is zero by declaration while their forward is the identity."""


def _declared_zero(node: Node) -> bool:
    return node.site.op.split(" ", 1)[0] in _DECLARED_ZERO


CUSTOM_AT_LEAST = 8
"""The first custom rule regions of a walk are checked whatever its budget: users' bugs are
there, and a first check in a process can spend a short budget compiling (JAX, float64)."""

OFF_PATH = 0.1
"""A wrong node whose op's calls together explain less than this share of the function's
error is passed over, and the walk goes on: its error lies in a derivative the check does
not measure (a weight's, where the check is of the input)."""


@dataclass
class _Found:
    """What a walk has found so far: the nodes checked, the notes, the wrong nodes passed
    over with their shares, and whether the budget cut it short."""

    checked: list[NodeCheck]
    notes: list[str]
    passed: list[tuple[NodeCheck, Share]]
    suspects: list[str]
    cut: bool = False


def _walk(rec: Recording, budget: float, max_size: int, start: float,
          share: Callable[[Node], Share | str]) -> Localization:  # fmt: skip
    """Custom rule regions first, then primitives, until one is wrong and explains the
    function's error (``share``; :data:`OFF_PATH`), or the budget ends. A ``stop_gradient``
    is not checked (its zero rule differs from its identity forward by declaration, as in
    the shift of a library's logsumexp): a note names it."""
    found = _Found([], list(rec.notes), [], [*rec.suspects, *_stops_note(rec)])
    for group in (rec.custom, tuple(n for n in rec.primitives if not _declared_zero(n))):
        rest = list(group)
        while rest:
            left = max(budget - (time.perf_counter() - start), 0.0)
            done = len(group) - len(rest)
            forced = max(CUSTOM_AT_LEAST - done, 0) if group is rec.custom else 0
            walk = check_nodes(rest, left, max_size, at_least=forced)
            found.checked.extend(walk.checked)
            found.notes.extend(walk.notes)
            found.cut = found.cut or walk.cut_short
            if walk.stopped < 0:
                break
            node, rest = rest[walk.stopped], rest[walk.stopped + 1 :]
            s = share(node)
            if isinstance(s, Share) and abs(s.same_op_fraction) < OFF_PATH:
                found.passed.append((walk.checked[-1], s))
                continue
            return _located(found, walk.checked[-1], s, start)
    if found.passed:
        earliest, s = found.passed.pop(0)
        return _located(found, earliest, s, start)
    if not rec.custom and not rec.primitives:
        found.notes.append("no operation of the program could be checked alone")
    return Localization(None, tuple(found.checked), (*found.notes, *found.suspects),
                        time.perf_counter() - start, cut_short=found.cut)  # fmt: skip


def _stops_note(rec: Recording) -> list[str]:
    """The note on the ``stop_gradient`` nodes, which are not checked (none: no note)."""
    stops = [n for n in rec.primitives if _declared_zero(n)]
    if not stops:
        return []
    return [f"{len(stops)} stop_gradient node(s) not checked: their rule is zero by "
            "declaration; where one drops a derivative the function needs, it is the bug "
            f"(the first: {stops[0].site.where()})"]  # fmt: skip


def _located(found: _Found, c: NodeCheck, share: Share | str, start: float) -> Localization:
    """The localization of ``c``, with its share (or why none), and the wrong nodes passed
    over on the way, each with its share."""
    notes = list(found.notes)
    for p, s in found.passed:
        notes.append(f"also wrong, passed over: {p.site.where()} ({_times(p)} x its tolerance),"
                     f" whose calls explain {_percent(s.same_op_fraction)} of this check's "
                     "error: its error is in a derivative this check does not measure (of a "
                     "weight, where the check is of the inputs)")  # fmt: skip
    if isinstance(share, str):
        notes.append(f"the located node's share of the function's error is not measured: {share}")
    # a share within WHOLE of 1 is the whole error: a detach, a hook, a stop_gradient with
    # no rule to compare is named only where the located rule does not explain it all
    if not (isinstance(share, Share) and abs(share.same_op_fraction - 1) <= WHOLE):
        notes += found.suspects
    return Localization(c, tuple(found.checked), tuple(notes), time.perf_counter() - start,
                        share=share if isinstance(share, Share) else None)  # fmt: skip


def _percent(fraction: float) -> str:
    """``fraction`` in whole percent (an int: 0%, never -0%)."""
    return f"{round(100 * fraction)}%"


def _times(c: NodeCheck) -> str:
    return f"{c.error / c.tolerance:.3g}" if c.tolerance > 0 else "inf"


def _walk_nonfinite(rec: Recording, budget: float, max_size: int, start: float) -> Localization:
    """All nodes in forward order, until one's VJP is NaN or Inf at finite values."""
    from ._nonfinite import walk_nonfinite

    walk = walk_nonfinite((*rec.custom, *rec.primitives), rec.steps, rec.outputs, budget,
                          max_size)  # fmt: skip
    notes = [*rec.notes, *walk.notes, *rec.suspects]
    if not rec.custom and not rec.primitives:
        notes.append("no operation of the program could be evaluated alone")
    found = walk.checked[-1] if walk.checked and walk.checked[-1].nonfinite else None
    return Localization(found, walk.checked, tuple(notes), time.perf_counter() - start,
                        NONFINITE_VJP, cut_short=walk.cut_short and found is None)  # fmt: skip
