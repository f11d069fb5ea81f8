"""Exceptions raised by polygrad.

Every error that comes from bad input derives from :class:`PolygradError` and
from the built-in exception a Python user would expect (``TypeError`` for a
wrong dtype, ``ValueError`` for a wrong value or shape, ``ImportError`` for a
missing framework), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "PolygradError",
    "InputTypeError",
    "InputValueError",
    "ShapeMismatchError",
    "NondeterministicFunctionError",
    "InputMutationError",
    "MissingBackendError",
    "GradientCheckError",
]


class PolygradError(Exception):
    """Base class of the errors polygrad raises for unusable input."""


class InputTypeError(PolygradError, TypeError):
    """An input has a type or dtype that cannot be differentiated (integer, bool, object)."""


class InputValueError(PolygradError, ValueError):
    """An input has a value that makes the check meaningless (NaN or Inf)."""


class ShapeMismatchError(PolygradError, ValueError):
    """A supplied derivative (gradient, Jacobian, VJP, JVP) has the wrong shape."""


class NondeterministicFunctionError(PolygradError, RuntimeError):
    """The function returned different values for the same input (e.g. dropout in training mode)."""


class InputMutationError(PolygradError, RuntimeError):
    """The function modified one of its inputs in place."""


class MissingBackendError(PolygradError, ImportError):
    """The framework needed for these arrays is not installed; the message names the extra."""


class GradientCheckError(AssertionError):
    """Raised by :func:`polygrad.assert_gradients` when a check fails.

    The message is the full text report; the :class:`~polygrad.Report` is
    available as the ``report`` attribute.
    """

    def __init__(self, report: object) -> None:
        # plain text: an exception message may end up in a log file or a CI page
        super().__init__(report.to_text(color=False))  # type: ignore[attr-defined]
        self.report = report
