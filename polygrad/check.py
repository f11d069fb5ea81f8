"""The module behind :func:`polygrad.check` and :func:`polygrad.assert_gradients`.

``polygrad.check`` (the attribute of the package) is the *function*, the
public API; this module is reachable as ``importlib.import_module("polygrad.check")``
or ``from polygrad.check import check``. The implementation is the pipeline
in :mod:`polygrad.pipeline` (whose modules are not hidden by any function):
:mod:`polygrad.pipeline.check` composes its stages, and :mod:`polygrad.policy`
holds the tunables.

``C_AD`` and ``TOLERANCE_FACTOR`` are the default policy's values, kept for
reading; to change them pass ``policy=Policy(c_ad=..., tolerance_factor=...)``.
"""

from __future__ import annotations

from ._args import normalize_argnums
from .pipeline.check import assert_gradients, check, without_gc_pauses
from .policy import DEFAULT_POLICY, Policy

__all__ = [
    "C_AD",
    "TOLERANCE_FACTOR",
    "Policy",
    "assert_gradients",
    "check",
    "normalize_argnums",
    "without_gc_pauses",
]

C_AD = DEFAULT_POLICY.c_ad
"""Round-off allowed to an autodiff value, in units of ``eps * scale`` (default policy)."""
TOLERANCE_FACTOR = DEFAULT_POLICY.tolerance_factor
"""Multiple of the reference error bar allowed in the difference (default policy)."""
