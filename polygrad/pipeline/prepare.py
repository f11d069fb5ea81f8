"""Prepare stage: validate the options, build the target, choose the autodiff modes."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import front_door
from ..backends.base import Backend, Supplied, Target, building_a_gradient_target
from ..backends.validate import check_deterministic, validate_target
from ..policy import DEFAULT_POLICY, Policy
from ..your_terms import Tool, resolve_tool
from .judge import Expected
from .symmetric import declared_leaves

__all__ = [
    "Options",
    "Prepared",
    "check_deterministic",
    "choose_modes",
    "expectation_notes",
    "prepare",
    "symmetric_positions",
]

_ALLOWED = {
    "mode": ("auto", "rev", "fwd", "both"),
    "reference": ("auto", "mp", "float64", "working"),
    "strategy": ("auto", "full", "projections"),
    "wrt": ("inputs", "parameters"),
    "nonsmooth": ("allow", "within", "fail"),
}


def symmetric_positions(symmetric: int | Sequence[int] | None) -> tuple[int, ...]:
    """The ``symmetric=`` option of :func:`polygrad.check` as a tuple of positions.

    Raises
    ------
    TypeError
        Not an int, a sequence of ints or None.
    """
    if symmetric is None:
        return ()
    if isinstance(symmetric, (int, np.integer)) and not isinstance(symmetric, bool):
        return (int(symmetric),)
    if isinstance(symmetric, Sequence) and all(
        isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in symmetric
    ):
        return tuple(int(i) for i in symmetric)
    raise TypeError(
        f"symmetric={symmetric!r}: give the positions of the arguments declared symmetric "
        "(an int or a tuple of ints, as argnums)"
    )


@dataclass(frozen=True)
class Options:
    """The keyword options of :func:`polygrad.check`, validated on construction.

    ``mp_in_stages`` is the judgment's own: mp re-examines the directions of the worst
    MISMATCH entries first and stops there when it confirms one (see
    :func:`polygrad.pipeline.assess.assess`); :func:`polygrad.pipeline.judgment.judgment`
    sets it False to re-examine every direction in doubt.

    Raises
    ------
    ValueError
        An option outside its allowed values, ``order`` not 1 or 2, ``rtol`` or
        ``atol`` not a finite number >= 0, ``surrogate`` not a bool.
    """

    mode: str = "auto"
    reference: str = "auto"
    strategy: str = "auto"
    projections: int = 8
    wrt: str = "inputs"
    order: int = 1
    dps: int = 50
    seed: int = 0
    batch_size: int = 4096
    budget: float = 60.0
    nonsmooth: str = "allow"
    policy: Policy = DEFAULT_POLICY
    compare_with: str | None = None
    compare_step: float | None = None
    cache: bool | str | os.PathLike[str] | None = None
    executor: concurrent.futures.Executor | None = None
    symmetric: tuple[int, ...] = ()
    rtol: float | None = None
    atol: float | None = None
    surrogate: bool = False
    mp_in_stages: bool = True

    @property
    def expected(self) -> Expected:
        """The accuracy asked for (``rtol``/``atol``, 0 where not given) and ``surrogate``."""
        return Expected(self.rtol or 0.0, self.atol or 0.0, bool(self.surrogate))

    @property
    def tool(self) -> Tool | None:
        """The user's own finite-difference check named by ``compare_with``, or None."""
        return resolve_tool(self.compare_with, self.compare_step)

    @property
    def tool_step(self) -> float | None:
        """That check's step (None: the tool's default)."""
        return self.compare_step

    def __post_init__(self) -> None:
        for option, allowed in _ALLOWED.items():
            value = getattr(self, option)
            if value not in allowed:
                raise ValueError(f"{option}={value!r}; choose one of {', '.join(allowed)}")
        if self.order not in (1, 2):
            raise ValueError(
                f"order={self.order}; polygrad checks first (1) and second (2) derivatives"
            )
        resolve_tool(self.compare_with, self.compare_step)  # a clear error before any work
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 <= value < np.inf):
                raise ValueError(f"{name}={value!r}; give a finite number >= 0, or None")
        if not isinstance(self.surrogate, bool):
            raise ValueError(f"surrogate={self.surrogate!r}; give True or False")
        symmetric_positions(self.symmetric)  # a clear error for anything but positions


@dataclass(frozen=True)
class Prepared:
    """The function as the core sees it, with how to call it again.

    Attributes
    ----------
    backend : Backend
        The framework of the arrays.
    f, args, argnums, supplied
        The (realified; for ``order=2`` the gradient) function and its arguments.
    complex_any : bool
        Some checked input or output is complex (checked through its realification).
    target : Target
        The flattened function, its evaluations and its VJP/JVP.
    modes : list of str
        ``"rev"`` and/or ``"fwd"``.
    notes : list of str
        Notes gathered so far.
    """

    backend: Backend
    f: Callable[..., Any]
    args: tuple[Any, ...]
    argnums: tuple[int, ...]
    supplied: Supplied
    complex_any: bool
    target: Target
    modes: list[str]
    notes: list[str]

    @property
    def batch_call(self) -> tuple[Any, ...]:
        """``(f, args, argnums, supplied)``: how to build this target at other arguments."""
        return (self.f, self.args, self.argnums, self.supplied)


SURROGATE_NOTE = "surrogate=True:"
"""How the note of a check whose rule is a surrogate by design begins."""


def expectation_notes(opts: Options) -> list[str]:
    """Notes on the accuracy asked for (``rtol``/``atol``) and a surrogate rule."""
    notes = []
    if opts.rtol or opts.atol:
        notes.append(
            f"accuracy asked for: rtol={opts.rtol or 0:g}, atol={opts.atol or 0:g}; an entry "
            "passes where |autodiff - reference| <= atol + rtol x |reference| or within the "
            "check's own tolerance, whichever is wider (the tolerance column); |diff| is the "
            "error measured"
        )
    if opts.surrogate:
        notes.append(
            f"{SURROGATE_NOTE} the rule is not the derivative of f by design (a straight-"
            "through estimator, clipped or reversed gradients); the values of f were checked "
            "finite and deterministic, the autodiff values finite; entries where the rule "
            "differs from f's derivative are INCONCLUSIVE by design, shown with their "
            "difference, and the check is ok"
        )
    return notes


def choose_modes(target: Target, mode: str, autodiff: bool) -> list[str]:
    """The autodiff modes to check (``autodiff``: the backend differentiates by itself).

    Raises
    ------
    ValueError
        The requested mode is not available.
    """
    if mode == "auto":
        modes = ["rev"] if target.has_mode("rev") else ["fwd"]
    else:
        modes = ["rev", "fwd"] if mode == "both" else [mode]
    for md in modes:
        if not target.has_mode(md):
            # "auto" tried reverse mode first: why it failed is the first thing to say
            tried = ["rev", md] if mode == "auto" and md == "fwd" else [md]
            why = [note for t in tried for note in target.mode_notes.get(t, [])]
            head = (
                "mode='auto' needs a VJP or a JVP, and this function provides neither"
                if mode == "auto"
                else f"mode={mode!r} needs {'a VJP' if md == 'rev' else 'a JVP'}, which this "
                "function does not provide"
            )
            raise ValueError(
                head
                + ("" if autodiff else " (pass vjp=/grad=/jac= or jvp=/jac=)")
                + (": " + "; ".join(dict.fromkeys(why)) if why else "")
            )
    return modes


def prepare(
    f: Callable[..., Any],
    args: tuple[Any, ...],
    argnums: int | tuple[int, ...],
    supplied: Supplied,
    backend: str | None,
    opts: Options,
) -> Prepared:
    """Validate, choose the backend, realify complex values, build the target.

    Raises
    ------
    TypeError, ValueError, InputTypeError, InputValueError, NondeterministicFunctionError
        As documented for :func:`polygrad.check`.
    """
    be, argnums_t = front_door("check", f, args, argnums, backend)
    from ..complex import ComplexInfo, name_pairs, realify

    cinfo = ComplexInfo()
    if opts.wrt == "inputs":  # complex values: check the real map (Re, Im) -> (Re f, Im f)
        f, args, supplied, cinfo = realify(be, f, args, argnums_t, supplied)
        if cinfo.any and opts.order == 2:
            raise ValueError("order=2 is not supported for complex inputs or outputs")
    if opts.order == 2:
        if opts.wrt != "inputs":
            raise ValueError(
                "order=2 checks the derivative of the gradient with respect to the checked "
                "inputs (argnums); with wrt='parameters' it is not supported. To check a "
                "Hessian with respect to parameters, write the loss as a function of a "
                "parameter tensor (torch.func.functional_call(model, {'weight': w}, x)) "
                "and check it with order=2 and argnums"
            )
        f = be.gradient_function(f, args, argnums_t)
    with building_a_gradient_target() if opts.order == 2 else contextlib.nullcontext():
        target = be.make_target(f, args, argnums_t, supplied, opts.batch_size, opts.wrt)
    name_pairs(target, cinfo)  # complex leaves named Re/Im, the convention noted
    notes = list(target.notes) + (cinfo.notes if cinfo else [])
    notes += validate_target(target)
    notes += expectation_notes(opts)
    modes = choose_modes(target, opts.mode, be.supports_autodiff)
    prepared = Prepared(be, f, args, argnums_t, supplied, bool(cinfo and cinfo.any), target,
                        modes, notes)  # fmt: skip
    declared_leaves(prepared, opts)  # the declaration (symmetric=), checked before any work
    return prepared
