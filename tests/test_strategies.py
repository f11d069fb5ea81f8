"""hypothesis strategies, and the property-based recipe for a custom gradient."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings

import polygrad as pg
from polygrad.testing.strategies import directions, points

FAST = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# --- points --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_points_shape_dtype_range(dtype):
    seen: list[np.ndarray] = []

    @FAST
    @given(points((2, 3), dtype, min_magnitude=2.0**-6, max_magnitude=2.0**6))
    def run(x: np.ndarray) -> None:
        assert x.shape == (2, 3)
        assert x.dtype == np.dtype(dtype)
        assert np.all(np.isfinite(x))
        assert np.all((np.abs(x) >= 2.0**-6) & (np.abs(x) <= 2.0**6))
        seen.append(x.astype(np.float64))

    run()
    values = np.concatenate([s.ravel() for s in seen])
    assert (values > 0).any() and (values < 0).any()


def test_points_default_range_spans_tiny_to_huge():
    seen: list[np.ndarray] = []

    @FAST
    @given(points(8))
    def run(x: np.ndarray) -> None:
        seen.append(np.abs(x.astype(np.float64)).ravel())

    run()
    mags = np.concatenate(seen)
    assert mags.min() >= np.finfo(np.float32).eps ** 2
    assert mags.max() <= np.finfo(np.float32).eps ** -2
    # log-uniform magnitudes: each of these decades is reached
    assert mags.min() < 1e-8 and mags.max() > 1e8
    assert ((mags > 1e-3) & (mags < 1e3)).any()


def test_points_float16_defaults_keep_squares_finite():
    lo = float(np.sqrt(np.finfo(np.float16).tiny))

    @FAST
    @given(points(20, "float16"))
    def run(x: np.ndarray) -> None:
        mags = np.abs(x.astype(np.float64))
        assert np.all((mags >= lo) & (mags <= 256.0))
        assert np.all(np.isfinite(x * x)) and np.all(x * x > 0)

    run()


def test_points_keep_away_from_kinks():
    kinks = (1.0, -0.5)

    @FAST
    @given(
        points(6, "float32", min_magnitude=0.25, max_magnitude=4.0, avoid=kinks, min_distance=0.1)
    )
    def run(x: np.ndarray) -> None:
        for k in kinks:
            assert np.all(np.abs(x.astype(np.float64) - k) >= 0.1)

    run()


def test_points_bad_arguments():
    with pytest.raises(ValueError, match="min_magnitude < max_magnitude"):
        points(3, min_magnitude=2.0, max_magnitude=1.0)
    with pytest.raises(ValueError, match="min_magnitude < max_magnitude"):
        points(3, min_magnitude=0.0)
    with pytest.raises(ValueError, match="leave the normal range of float16"):
        points(3, "float16", max_magnitude=1e6)
    with pytest.raises(ValueError, match="'int32'"):
        points(3, "int32")
    with pytest.raises(ValueError, match="min_distance"):
        points(3, avoid=(0.0,), min_distance=-1.0)
    with pytest.raises(ValueError, match="negative"):
        points((2, -1))


# --- directions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_directions_are_unit_vectors(dtype):
    eps = float(np.finfo(dtype).eps)

    @FAST
    @given(directions((3, 2), dtype))
    def run(v: np.ndarray) -> None:
        assert v.shape == (3, 2) and v.dtype == np.dtype(dtype)
        assert abs(float(np.linalg.norm(v.astype(np.float64))) - 1.0) <= np.sqrt(6) * eps

    run()


def test_directions_bad_arguments():
    with pytest.raises(ValueError, match="at least one entry"):
        directions((0, 3))
    with pytest.raises(ValueError, match="'int64'"):
        directions(3, "int64")


def test_strategies_need_hypothesis_but_testing_does_not():
    code = (
        "import sys\n"
        "sys.modules['hypothesis'] = None\n"  # `import hypothesis` now raises ImportError
        "import polygrad.testing\n"
        "assert 'pytest' not in sys.modules\n"  # the helpers need neither pytest nor hypothesis
        "try:\n"
        "    import polygrad.testing.strategies\n"
        "except polygrad.MissingBackendError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "needs hypothesis" in out.stdout
    assert 'pip install "polygrad-check[test]"' in out.stdout


# --- the recipe: property-based test of a hand-written gradient ----------------------------------


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x), two branches so that neither overflows."""
    return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0))))


def softplus_grad(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x > 0, 1 / (1 + e), e / (1 + e))


def softplus_grad_bug(x: np.ndarray) -> np.ndarray:
    """Right for x > 0; the x <= 0 branch has a sign error in the denominator."""
    e = np.exp(-np.abs(x))
    return np.where(x > 0, 1 / (1 + e), e / (1 - e))


# the verdict as a property over POINTS' whole range: 500 randomized examples per run
RECIPE = settings(max_examples=500, deadline=None, database=None)
POINTS = points(5, "float64", min_magnitude=1e-3, max_magnitude=30.0)


def test_recipe_correct_gradient_passes():
    calls = []

    @RECIPE
    @given(POINTS)
    def run(x: np.ndarray) -> None:
        report = pg.assert_gradients(lambda x: np.sum(softplus(x)), x, grad=softplus_grad)
        calls.append(report.verdict)

    run()
    assert len(calls) >= 10
    assert set(calls) == {pg.Verdict.PASS}


def test_recipe_finds_the_bug_on_one_branch():
    # one hand-picked positive point does not show the bug
    x_pos = np.array([0.5, 2.0, 7.0])
    assert pg.check(lambda x: np.sum(softplus(x)), x_pos, grad=softplus_grad_bug).ok
    failing: list[np.ndarray] = []

    # without the shrink phase: the first failing example is enough here (shrinking would
    # run dozens more checks to find a smaller one)
    @settings(RECIPE, phases=(Phase.explicit, Phase.reuse, Phase.generate))
    @given(POINTS)
    def run(x: np.ndarray) -> None:
        try:
            pg.assert_gradients(lambda x: np.sum(softplus(x)), x, grad=softplus_grad_bug)
        except pg.GradientCheckError:
            failing.append(x)
            raise

    with pytest.raises(pg.GradientCheckError) as info:
        run()
    assert info.value.report.verdict is pg.Verdict.MISMATCH
    assert "MISMATCH" in str(info.value)
    # every failing point had an entry on the buggy branch
    assert failing and all((x <= 0).any() for x in failing)


RESOLVABLE = 1e-5
"""A float64-difference reference resolves a directional derivative ``g'(0)`` of a
function of one variable at 0 only down to about ``1e-6 |g(0)|`` (the round-off of
``g`` over the largest step that keeps truncation small); below that, without an mp
reference, the check is INCONCLUSIVE (docs/error-model.md, known limits). This softplus
has no mp reference: ``np.minimum(x, 0)`` returns the Python int 0 on mpmath input."""


def test_recipe_directional_derivative_along_directions():
    """A tangent from `directions`: d/dt sum(softplus(x + t v)) at t = 0 is grad . v,
    over the documented domain (a derivative of at least ``RESOLVABLE`` of the value)."""

    @RECIPE
    @given(POINTS, directions(5))
    def run(x: np.ndarray, v: np.ndarray) -> None:
        slope = float(np.dot(softplus_grad(x), v))
        assume(abs(slope) >= RESOLVABLE * float(np.sum(softplus(x))))
        report = pg.assert_gradients(
            lambda t: np.sum(softplus(x + t[0] * v)),
            np.zeros(1),
            grad=lambda t: np.array([np.dot(softplus_grad(x + t[0] * v), v)]),
        )
        assert report.verdict is pg.Verdict.PASS

    run()


@pytest.mark.xfail(
    importlib.util.find_spec("numpy_quaddtype") is None,
    strict=True,
    reason="known limit without numpy-quaddtype: a directional derivative of 1e-7 of the "
    "function's value (softplus at -16 beside four at 1) is below what float64 differences "
    "resolve, and this softplus has no mp reference, so the correct gradient is INCONCLUSIVE "
    "(the quad reference, where installed, decides it)",
)
def test_a_derivative_below_the_float64_resolution_passes():
    x = np.array([1.0, 1.0, -16.0, 1.0, 1.0])
    v = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    report = pg.check(
        lambda t: np.sum(softplus(x + t[0] * v)),
        np.zeros(1),
        grad=lambda t: np.array([np.dot(softplus_grad(x + t[0] * v), v)]),
    )
    assert report.verdict is pg.Verdict.PASS and report.ok


def test_docstring_examples_run():
    import doctest

    from polygrad.testing import strategies

    result = doctest.testmod(strategies)
    assert result.attempted >= 6 and result.failed == 0


def test_a_product_bound_past_float64_rules_the_draw_out_instead_of_raising() -> None:
    """The fuzzer's bound of prod over 6 entries of up to 3.9e55 is past float64 (a full
    NumPy run raised OverflowError while drawing a program): it is infinite, which the
    generator's limit rules out."""
    import math

    from polygrad.testing.programs import _reduce_bounds

    lo, hi = _reduce_bounds("prod", 6, 2.57e-56, 3.89e55)
    assert lo == 2.57e-56**6 and math.isinf(hi)
    lo, hi = _reduce_bounds("prod", 6, -3.89e55, 1.0)
    assert math.isinf(lo) and math.isinf(hi) and lo < 0 < hi
