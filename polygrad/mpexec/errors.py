"""Errors of the mp re-execution: a program the interpreters cannot run.

They are raised by the low-level entry points of :mod:`polygrad.mpexec`
(:func:`~polygrad.mpexec.jaxpr.evaluate_jaxpr_mp`,
:func:`~polygrad.mpexec.torch_graph.torch_mp_evaluator`...). The backends catch
them: a check then uses a float64 reference and its report names the reason,
so :func:`polygrad.check` never raises them.
"""

from __future__ import annotations

from ..errors import PolygradError

__all__ = ["GraphCaptureError", "UnsupportedOperatorError", "UnsupportedPrimitiveError"]


class UnsupportedPrimitiveError(PolygradError, NotImplementedError):
    """A jaxpr contains a primitive the mpmath interpreter does not implement.

    Parameters
    ----------
    primitive : str
        The primitive's name.
    where : str or None, optional
        The user's source line that produced it, when JAX recorded one.
    why : str, optional
        What about the equation is not covered (e.g. ``"batch_group_count > 1"``).

    Attributes
    ----------
    primitive : str
    where : str or None
    """

    def __init__(self, primitive: str, where: str | None = None, why: str = "") -> None:
        self.primitive, self.where = primitive, where
        text = f"the JAX primitive {primitive!r}"
        if where:
            text += f" (from {where})"
        text += " cannot be evaluated on mpmath numbers"
        if why:
            text += f": {why}"
        super().__init__(text)


class UnsupportedOperatorError(PolygradError, NotImplementedError):
    """An operator in a captured PyTorch graph has no mpmath rule (the message names it)."""


class GraphCaptureError(PolygradError, RuntimeError):
    """The function's graph could not be captured, or is valid only at the traced point."""
