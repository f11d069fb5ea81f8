"""A zoo case: a function, a point, the gradient under test and its known truth."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ops import Ops, ops

__all__ = ["Case", "Problem", "TRUTHS", "make_case"]

TRUTHS = ("correct", "wrong", "kink", "nonfinite-trap")
"""What a case's gradient is: right, planted-wrong, at a point of non-differentiability,
or a NaN/Inf trap."""

Fun = Callable[[Ops, Any], Any]
"""``fun(o, x) -> scalar``: the function, written against :class:`~benchmarks.zoo.ops.Ops`."""
Grad = Callable[[Ops, Any], Any]
"""``grad(o, x) -> array shaped like x``: a hand-written gradient."""


@dataclass
class Problem:
    """A case made concrete in one framework and dtype.

    Attributes
    ----------
    o : Ops
        The framework namespace (``o.framework``, ``o.dtype``).
    f : callable
        ``f(x) -> scalar`` on arrays of the framework.
    x : object
        The point: an array of the framework, shape ``shape``, dtype ``o.dtype``.
    grad : callable or None
        For NumPy: the gradient under test, ``grad(x) -> ndarray`` in the working
        dtype. None for frameworks with autodiff (the gradient under test is what
        their autodiff returns, through any custom rule in ``f``).
    truth : numpy.ndarray or None
        The closed-form gradient at ``x`` (float64, shape of ``x``), where known.
    """

    o: Ops
    f: Callable[[Any], Any]
    x: Any
    grad: Callable[[np.ndarray], np.ndarray] | None
    truth: np.ndarray | None

    @property
    def x64(self) -> np.ndarray:
        """The point as float64 NumPy (exactly the working-dtype values)."""
        return self.o.to_numpy(self.x)

    def value_and_grad(self, x: Any) -> tuple[float, np.ndarray]:
        """``f(x)`` and the gradient under test at a framework array ``x`` (float64 NumPy)."""
        if self.grad is not None:
            return float(np.asarray(self.f(x), dtype=np.float64)), np.asarray(
                self.grad(x), dtype=np.float64
            )
        return self.o.value_and_grad(self.f, x)


@dataclass(frozen=True)
class Case:
    """One zoo case.

    Attributes
    ----------
    name : str
        Unique, readable: ``family/what/framework/dtype``.
    framework : str
        ``"numpy"``, ``"torch"``, ``"jax"`` or ``"tensorflow"``.
    dtype : str
        Working dtype of the inputs and the computation.
    family : str
        The zoo module the case comes from (one idea per module).
    truth : str
        One of :data:`TRUTHS`.
    bug_size : float or None
        For ``truth == "wrong"``: the relative size of the planted error,
        ``max |g_bug - g| / max |g|`` (nominal, by construction).
    description : str
        What the case is and why it is hard.
    n : int
        Number of input scalars.
    build : callable
        ``build(dtype) -> Problem``; ``dtype`` is normally :attr:`dtype`, or
        ``"float64"`` for a tool used as a careful user would (cast the inputs).
    expect : str or None
        For traps: ``"flag"`` when the gradient under test is wrong (a tool
        should not pass it), ``"pass"`` when it is right.
    options : dict
        Per-tool options for this case, e.g. ``{"polygrad": {"strategy": ...}}``.
    """

    name: str
    framework: str
    dtype: str
    family: str
    truth: str
    bug_size: float | None
    description: str
    n: int
    build: Callable[[str], Problem] = field(repr=False, compare=False)
    expect: str | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)

    def problem(self, dtype: str | None = None) -> Problem:
        """The case made concrete (imports the framework); see :attr:`build`."""
        return self.build(dtype or self.dtype)


def make_case(
    *,
    family: str,
    what: str,
    framework: str,
    dtype: str,
    truth: str,
    point: np.ndarray,
    fun: Fun,
    rule: Grad | None,
    exact: Grad | None,
    description: str,
    bug_size: float | None = None,
    expect: str | None = None,
    options: dict[str, dict[str, Any]] | None = None,
) -> Case:
    """Build a :class:`Case` from a function written against :class:`Ops`.

    Parameters
    ----------
    family, what, framework, dtype, truth, description, bug_size, expect, options
        As in :class:`Case`; the name is ``f"{family}/{what}/{framework}/{dtype}"``.
    point : numpy.ndarray
        The point in float64; it is rounded to the working dtype.
    fun : callable
        ``fun(o, x) -> scalar``.
    rule : callable or None
        The hand-written gradient ``rule(o, x)`` checked for NumPy (a NumPy case
        needs one); frameworks use their autodiff instead.
    exact : callable or None
        The correct closed-form gradient ``exact(o, x)``, evaluated in float64
        NumPy at the rounded point.

    Returns
    -------
    Case

    Raises
    ------
    ValueError
        An unknown truth, or a NumPy case without ``rule``.
    """
    if truth not in TRUTHS:
        raise ValueError(f"truth={truth!r}; choose one of {TRUTHS}")
    if framework == "numpy" and rule is None:
        raise ValueError("a NumPy case needs its hand-written gradient (rule=)")
    point = np.asarray(point, dtype=np.float64)

    def build(dt: str) -> Problem:
        o = ops(framework, dt)
        x = o.const(point)
        x64 = o.to_numpy(x)
        truth_grad = None
        if exact is not None:
            with np.errstate(all="ignore"):
                truth_grad = np.asarray(exact(ops("numpy", "float64"), x64), dtype=np.float64)
        grad = None
        if framework == "numpy":
            assert rule is not None
            grad = lambda xa: rule(o, xa)  # noqa: E731
        return Problem(o=o, f=lambda xa: fun(o, xa), x=x, grad=grad, truth=truth_grad)

    return Case(
        name=f"{family}/{what}/{framework}/{dtype}",
        framework=framework,
        dtype=dtype,
        family=family,
        truth=truth,
        bug_size=bug_size,
        description=description,
        n=int(point.size),
        build=build,
        expect=expect,
        options=dict(options or {}),
    )
