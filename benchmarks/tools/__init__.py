"""One adapter per gradient checker, each with ``run(case) -> ToolResult``.

Every tool runs at its documented defaults (variant ``defaults``: the inputs in
the case's own dtype, as a user who just calls it would) and, for cases that
are not already float64, as a careful user would use it (variant ``float64``:
the inputs cast to float64 first). polygrad runs once, at its defaults.

=========================  ===========================================================
tool                       what "pass" means
=========================  ===========================================================
torch.gradcheck            ``gradcheck(f, (x,))`` returns True (eps 1e-6, atol 1e-5,
                           rtol 1e-3)
torch.gradcheck(fast)      the same with ``fast_mode=True``
jax.check_grads            ``check_grads(f, (x,), order=1, modes=["rev"])`` raises nothing
tf.compute_gradient        ``assertAllClose(*compute_gradient(f, [x]))`` (rtol = atol =
                           1e-6)
scipy.check_grad           ``check_grad(f, g, x0) <= 1e-5 * ||g(x0)||``
numdifftools               ``max |Gradient(f)(x0) - g| <= 1e-6 * max |g|``
polygrad                   ``check(f, x)`` verdict PASS (NONSMOOTH → "kink")
=========================  ===========================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..zoo import Case
from . import (
    jax_check_grads,
    numdifftools_tool,
    polygrad_tool,
    scipy_check_grad,
    tf_compute_gradient,
    torch_gradcheck,
)
from .common import VERDICTS, ToolResult

__all__ = ["Tool", "TOOLS", "ToolResult", "VERDICTS", "by_key"]


@dataclass(frozen=True)
class Tool:
    """A checker in one variant.

    Attributes
    ----------
    name : str
        The checker, e.g. ``"torch.gradcheck"``.
    variant : str
        ``"defaults"`` or ``"float64"`` (inputs cast to float64 first).
    frameworks : tuple of str
        The frameworks whose cases it runs on.
    max_n : int
        Largest input size it is run at (larger cases are recorded as ``skipped``).
    runner : callable
        ``runner(case, careful) -> ToolResult``.
    """

    name: str
    variant: str
    frameworks: tuple[str, ...]
    max_n: int
    runner: Callable[[Case, bool], ToolResult]

    @property
    def key(self) -> str:
        return self.name if self.variant == "defaults" else f"{self.name} [{self.variant}]"

    def applies(self, case: Case) -> bool:
        """Whether the tool runs on ``case`` (same framework; a cast only where one is needed)."""
        if case.framework not in self.frameworks:
            return False
        return self.variant == "defaults" or case.dtype != "float64"

    def run(self, case: Case) -> ToolResult:
        """Run on ``case``; ``skipped`` when the case is larger than :attr:`max_n`."""
        if case.n > self.max_n:
            return ToolResult("skipped", None, 0.0, None, f"n = {case.n} > {self.max_n}")
        return self.runner(case, self.variant == "float64")


def _gradcheck(fast: bool) -> Callable[[Case, bool], ToolResult]:
    def runner(case: Case, careful: bool) -> ToolResult:
        return torch_gradcheck.run(case, careful=careful, fast_mode=fast)

    return runner


def _tools() -> list[Tool]:
    out = []
    for variant in ("defaults", "float64"):
        out += [
            Tool(
                "torch.gradcheck",
                variant,
                torch_gradcheck.FRAMEWORKS,
                torch_gradcheck.MAX_N["slow"],
                _gradcheck(False),
            ),
            Tool(
                "torch.gradcheck(fast)",
                variant,
                torch_gradcheck.FRAMEWORKS,
                torch_gradcheck.MAX_N["fast"],
                _gradcheck(True),
            ),
            Tool(
                "jax.check_grads",
                variant,
                jax_check_grads.FRAMEWORKS,
                jax_check_grads.MAX_N,
                jax_check_grads.run,
            ),
            Tool(
                "tf.compute_gradient",
                variant,
                tf_compute_gradient.FRAMEWORKS,
                tf_compute_gradient.MAX_N,
                tf_compute_gradient.run,
            ),
            Tool(
                "scipy.check_grad",
                variant,
                scipy_check_grad.FRAMEWORKS,
                scipy_check_grad.MAX_N,
                scipy_check_grad.run,
            ),
            Tool(
                "numdifftools",
                variant,
                numdifftools_tool.FRAMEWORKS,
                numdifftools_tool.MAX_N,
                numdifftools_tool.run,
            ),
        ]
    out.append(
        Tool(
            "polygrad",
            "defaults",
            polygrad_tool.FRAMEWORKS,
            polygrad_tool.MAX_N,
            polygrad_tool.run,
        )
    )
    return out


TOOLS: list[Tool] = _tools()
"""Every tool variant, in table order."""


def by_key() -> dict[str, Tool]:
    """Tools by :attr:`Tool.key`."""
    return {t.key: t for t in TOOLS}
