"""Test helpers: one test body, every framework.

* :func:`assert_gradients` — the same object as :func:`polygrad.assert_gradients`;
  its failure (:class:`~polygrad.GradientCheckError`, an ``AssertionError``)
  carries the full text report, so pytest shows why the check failed.
* :func:`to_backend` and :class:`BackendHandle` — turn one NumPy test input
  into a NumPy, PyTorch, JAX or TensorFlow array, and give the framework's
  NumPy-style math module, so the same test checks the same math everywhere.
* The pytest plugin (:mod:`polygrad.testing.plugin`, registered through the
  ``pytest11`` entry point): a ``backend`` fixture parametrised over the
  installed frameworks, the ``--polygrad-backends`` option and the
  ``POLYGRAD_BACKENDS`` environment variable, and the
  ``@pytest.mark.polygrad_backends(...)`` marker.
* :mod:`polygrad.testing.strategies` — hypothesis strategies for points and
  directions (needs ``hypothesis``, from the ``test`` extra; imported only
  when that module is).
* :mod:`polygrad.testing.programs` — a verdict fuzzer: random programs of each
  framework's operators, one description interpreted by NumPy, PyTorch, JAX
  and TensorFlow, with planted gradient bugs (needs ``hypothesis`` too).

Importing this package imports no ML framework and not hypothesis.
"""

from __future__ import annotations

from ..check import assert_gradients
from ._handles import BACKENDS, BackendHandle, extra_of, framework_installed, to_backend

__all__ = [
    "BACKENDS",
    "BackendHandle",
    "assert_gradients",
    "extra_of",
    "framework_installed",
    "to_backend",
]
