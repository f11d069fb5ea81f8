"""Jumps and steps on every reference path.

A jump at the point is NONSMOOTH whichever reference sees it: an odd jump
(``sign(x) cos(x)`` at 0) leaves the mp quick difference no gap between its one-sided
differences, and its central difference, about ``1 / h``, read at one step looked like a
derivative of 1e24 (MISMATCH); it grows like ``1 / h`` when the step shrinks, which a
derivative does not.
"""

from __future__ import annotations

import numpy as np
import pytest

from polygrad import Verdict
from polygrad.report import SEVERITY


def _sign_cos(xp):
    return lambda x: xp.sign(x) * xp.cos(x)


def _sign_cos_jac(x):
    # autodiff's convention: sign' = 0 everywhere, so d/dx sign(x) cos(x) = -sign(x) sin(x)
    return np.diag(-np.sign(x) * np.sin(x))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("reference", ["auto", "mp"])
def test_an_odd_jump_at_the_point_is_nonsmooth(backend, dtype, reference):
    """sign(x) cos(x) at x = (0, 0.3): the entry at the jump is NONSMOOTH with both one-sided
    derivatives +inf (the jump, +2, over a step shrinking to 0); the others PASS."""
    x = np.array([0.0, 0.3], dtype)
    report = backend.check(
        _sign_cos(backend.namespace), x, jac=_sign_cos_jac, reference=reference, cache=False
    )
    assert report.verdict is Verdict.NONSMOOTH and report.ok, report
    if reference == "mp":
        assert report.details["reference"]["method"] == "mp"
    e = report.entries
    at_jump = e.names.index("f[0] / x[0]")
    assert e.right[at_jump] == np.inf and e.left[at_jump] == np.inf, report
    others = [i for i in range(len(e.names)) if i != at_jump]
    np.testing.assert_allclose(
        e.reference[others], [0.0, 0.0, -np.sin(dtype(0.3))], rtol=1e-6, atol=1e-12
    )
    assert e.status[at_jump] == SEVERITY[Verdict.NONSMOOTH]
    assert all(e.status[i] == SEVERITY[Verdict.PASS] for i in others), report
