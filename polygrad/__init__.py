"""polygrad: is this autodiff gradient right, or is the disagreement only round-off?

Public API::

    import polygrad as pg
    report = pg.check(f, *args, argnums=0, **options)
    report.ok, report.verdict, print(report), report.to_dict()
    pg.assert_gradients(f, *args, **options)   # raises pg.GradientCheckError

No ML framework is imported by ``import polygrad``; a backend is chosen from
the arrays passed to :func:`check` and its framework imported only then.
"""

from ._version import __version__
from .check import assert_gradients, check
from .compare import Comparison, compare
from .errors import (
    GradientCheckError,
    InputMutationError,
    InputTypeError,
    InputValueError,
    MissingBackendError,
    NondeterministicFunctionError,
    PolygradError,
    ShapeMismatchError,
)
from .report import Report, Verdict
from .sweep import Sweep, sweep
from .taylor import TaylorResult, taylor_test

__all__ = [
    "Comparison",
    "GradientCheckError",
    "InputMutationError",
    "InputTypeError",
    "InputValueError",
    "MissingBackendError",
    "NondeterministicFunctionError",
    "PolygradError",
    "Report",
    "Sweep",
    "TaylorResult",
    "ShapeMismatchError",
    "Verdict",
    "__version__",
    "assert_gradients",
    "check",
    "compare",
    "sweep",
    "taylor_test",
]
