"""The staged ladder, contiguous extensions and the chunk sizer (cost mechanisms that must
not change a reference's value or honesty)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import polygrad as pg
from polygrad.backends.base import ChunkSizer
from polygrad.reference import directional_derivatives
from polygrad.reference.differences import _extend, evaluate_ladder

EPS64 = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)


def _counted(f):
    rows = []

    def fn(X):
        rows.append(X.shape[0])
        return f(X)

    return fn, rows


def _staged(fn, x, noise, first_start=0, first_levels=2):
    """The staged short ladder of a check aimed at float32 accuracy (float64 differences,
    the pair 2^-11, 2^-12 first, or the one ``first_start`` steps below) along the
    coordinate axes of ``x``, with noise ``noise`` in the single output."""
    f0 = fn(x[None])[0]
    sig = np.full((x.size, 1), noise)
    return directional_derivatives(
        fn, x, np.eye(x.size), f0, sig, EPS64, "float64", 2.0**-11, 4,
        target_relative_error=EPS32, first_levels=first_levels, resolution=EPS32,
        first_start=first_start,
    )  # fmt: skip


def test_middle_pair_settles_what_the_coarse_pair_leaves_to_truncation():
    """sin(3 x): the error bar of the coarse pair (the difference of its two central
    differences, of the size of the h^2 term) misses float32's target at every x; the
    middle pair's, a quarter of it, meets it. The error bars cover the closed form."""
    x = np.linspace(0.1, 0.4, 20)
    fn, _ = _counted(lambda X: np.sum(np.sin(3 * X), axis=1)[:, None])
    coarse, middle = _staged(fn, x, 4 * EPS64), _staged(fn, x, 4 * EPS64, first_start=1)
    assert coarse.central.evaluations > x.size * 8
    assert middle.central.evaluations == x.size * 4 + 1
    exact = 3 * np.cos(3 * x)
    for dd in (coarse, middle):
        assert np.all(np.abs(dd.central.value[:, 0] - exact) <= dd.central.error[:, 0])
    assert np.all(middle.central.step[:, 0] == 2.0**-13)


def test_a_direction_the_middle_pair_does_not_settle_gets_the_whole_ladder():
    """|x_0 - 1e-5|: a kink within the middle pair's steps. Its direction gets the step
    above and the step below, so its estimate is the one of the ladder evaluated whole
    (same steps, same values), and the smooth direction stays at 4 evaluations."""
    x = np.array([0.0, 0.5])
    fn, _ = _counted(lambda X: (np.abs(X[:, 0] - 1e-5) + np.sin(X[:, 1]))[:, None])
    staged = _staged(fn, x, 4 * EPS64, first_start=1)
    whole = _staged(fn, x, 4 * EPS64, first_levels=0)
    for side in ("central", "right", "left"):
        a, b = getattr(staged, side), getattr(whole, side)
        assert a.value[0, 0] == b.value[0, 0] and a.error[0, 0] == b.error[0, 0]
    assert staged.central.value[0, 0] == pytest.approx(-1.0, abs=1e-9)
    assert staged.central.evaluations < whole.central.evaluations


def test_smooth_directions_settle_on_the_first_two_steps():
    """sum(sin(x)) with a float32 target: every direction settles on its first pair of
    steps (4 evaluations each, plus g(0) once) and the error bars cover the truth."""
    x = np.linspace(0.3, 1.7, 50)
    fn, rows = _counted(lambda X: np.sum(np.sin(X), axis=1)[:, None])
    dd = _staged(fn, x, 4 * EPS64)
    assert dd.central.evaluations == x.size * 4 + 1
    err = np.abs(dd.central.value[:, 0] - np.cos(x))
    assert np.all(err <= dd.central.error[:, 0])
    assert np.all(dd.central.error[:, 0] <= EPS32 * np.abs(np.cos(x)))


@pytest.mark.parametrize("side", [1.0, -1.0])
def test_curvature_cancelling_the_slope_is_not_a_jump(side):
    """g(t) = t - c t^2 (or its mirror image) with c h = 0.6 at the coarse step h = 2^-11:
    the one-sided difference g(h) - g(0) = h (1 - c h) shrinks by 0.875 from h to h/2,
    not by 1/2, as when the linear and quadratic terms cancel (a random direction of a
    sum over many inputs, whose second derivative grows like n and its first like
    sqrt(n)). Its odd and even parts each shrink as they must: no jump, the direction
    settles on its first pair, and the one-sided derivatives cover the slope, 1."""
    c = 0.6 * 2.0**11
    x = np.array([0.0, 0.5])
    g = lambda X: (X[:, 0] - side * c * X[:, 0] ** 2 + np.sin(X[:, 1]))[:, None]  # noqa: E731
    fn, _ = _counted(g)
    dd = _staged(fn, x, 4 * EPS64)
    assert not np.any(dd.jump_right) and not np.any(dd.jump_left)
    assert dd.central.evaluations == 2 * 4 + 1
    assert abs(dd.central.value[0, 0] - 1.0) <= dd.central.error[0, 0] + 4 * EPS64
    for one_sided in (dd.right, dd.left):
        assert abs(one_sided.value[0, 0] - 1.0) <= one_sided.error[0, 0]


def test_a_jump_beside_cancelling_curvature_is_still_a_jump():
    """The same g with a step of 0.01 just right of 0: g(h) - g(0) does not shrink on
    the right, nor does the odd part of the differences; it is a jump on the right."""
    c = 0.6 * 2.0**11
    x = np.array([0.0])
    fn, _ = _counted(lambda X: (X[:, 0] - c * X[:, 0] ** 2 + 0.01 * (X[:, 0] > 0))[:, None])
    dd = _staged(fn, x, 4 * EPS64)
    assert dd.jump_right[0, 0] and not dd.jump_left[0, 0]


def test_an_infinite_slope_at_the_edge_of_the_domain_is_still_a_jump():
    """sqrt at 0: NaN on the left, so the odd and even parts of the differences cannot
    be formed and say nothing; the right side's infinite slope is still seen."""
    x = np.array([0.0])
    with np.errstate(invalid="ignore"):
        fn, _ = _counted(lambda X: np.sqrt(X[:, :1]))
        dd = _staged(fn, x, 4 * EPS64)
    assert dd.jump_right[0, 0]
    assert dd.right.value[0, 0] == np.inf


def test_kink_pinned_at_x_by_the_coarse_pair_is_not_refined():
    """|x_0| + sum(sin(x_1:)): the kink at x_0 = 0 is resolved by the coarse pair (each
    side exact, so the kink lies within float32's resolution of x), the rest settle."""
    x = np.array([0.0, 0.5, 0.9, 1.3])
    fn, _ = _counted(lambda X: (np.abs(X[:, 0]) + np.sum(np.sin(X[:, 1:]), axis=1))[:, None])
    dd = _staged(fn, x, 4 * EPS64)
    assert dd.right.value[0, 0] == pytest.approx(1.0, abs=1e-9)
    assert dd.left.value[0, 0] == pytest.approx(-1.0, abs=1e-9)
    # 4 evaluations per direction and g(0): no finer steps for the kink either
    assert dd.central.evaluations == 4 * 4 + 1
    np.testing.assert_allclose(dd.central.value[1:, 0], np.cos(x[1:]), rtol=EPS32)


def test_kink_near_x_is_refined_until_pinned():
    """|x_0 - 1e-5|: the kink is 1e-5 from x, within the coarse steps (2^-11, 2^-12) but
    far outside float32's resolution of x; it must get the finer steps, which do not
    cross it, and the one-sided derivatives there are both the slope on the left, -1."""
    x = np.array([0.0, 0.5])
    fn, _ = _counted(lambda X: (np.abs(X[:, 0] - 1e-5) + np.sin(X[:, 1]))[:, None])
    dd = _staged(fn, x, 4 * EPS64)
    assert dd.central.evaluations > 2 * 4 + 1
    assert dd.central.step[0, 0] < 1e-5
    assert dd.central.value[0, 0] == pytest.approx(-1.0, abs=1e-9)
    assert dd.right.value[0, 0] == pytest.approx(-1.0, abs=1e-9)


def test_noisy_direction_moves_up_by_the_levels_it_needs():
    """A function ten million times larger than its derivative: the coarse pair is far
    too noisy, so the steps move up (not down), and the result meets the target."""
    x = np.array([1.0])

    def f(X):
        return 1e7 + 1e-3 * X[:, :1] ** 2

    fn, _ = _counted(f)
    dd = _staged(fn, x, 1e7 * EPS64)
    assert dd.central.step[0, 0] > 2.0**-11
    assert abs(dd.central.value[0, 0] - 2e-3) <= dd.central.error[0, 0]
    assert dd.central.error[0, 0] <= 1e-4 * 2e-3


def test_extensions_stay_contiguous_per_direction():
    """Direction 0 already reaches two levels above direction 1; moving both up by two
    gives each two new steps directly above its own, and the shared ladder grows."""
    x = np.array([0.7, 1.1])
    fn = lambda X: np.sin(X[:, :1]) + X[:, 1:] ** 3  # noqa: E731
    W = np.eye(2)
    steps = 2.0 ** -np.arange(2, 6)  # 1/4 .. 1/32
    Y = evaluate_ladder(fn, x, W, steps, 64)
    Y[1, :2] = np.nan  # direction 1 was evaluated on 1/16, 1/32 only
    Y2, steps2, added = _extend(fn, x, W, Y, steps, np.array([2, 2]), np.array([0, 0]), 64)
    assert added == 2 * 2 * 2
    np.testing.assert_array_equal(steps2, 2.0 ** -np.arange(0, 6))  # grew by two on top
    valid = ~np.all(np.isnan(Y2), axis=(2, 3))
    np.testing.assert_array_equal(valid[0], [1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(valid[1], [0, 0, 1, 1, 1, 1])
    want = evaluate_ladder(fn, x, W, steps2, 64)
    np.testing.assert_array_equal(Y2[valid], want[valid])


def test_center_is_evaluated_with_its_neighbours():
    calls = []

    def fn(X):
        calls.append(X.copy())
        return X[:, :1] * 2.0

    x = np.array([3.0, 1.0])
    center: dict[str, np.ndarray] = {}
    Y = evaluate_ladder(fn, x, np.eye(2), np.array([0.5, 0.25]), 64, center)
    assert len(calls) == 1 and np.array_equal(calls[0][0], x)  # first row of the batch
    assert center["f0"][0] == 6.0
    assert Y.shape == (2, 2, 2, 1) and Y[0, 0, 0, 0] == 7.0


# ---- chunk sizes -----------------------------------------------------------------------------


class _Clock:
    """A simulated clock: batch functions advance it by the cost they model."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _slow_above(clock: _Clock, limit: int, per_row: float, penalty: float):
    """A batch function whose per-row cost grows for chunks larger than ``limit``."""
    sizes = []

    def fn(X):
        sizes.append(X.shape[0])
        clock.now += X.shape[0] * (per_row if X.shape[0] <= limit else per_row * penalty)
        return X[:, :1] * 2.0

    return fn, sizes


def test_chunk_sizer_finds_the_cache_friendly_size_and_keeps_rows_in_order():
    clock = _Clock()
    fn, sizes = _slow_above(clock, 64, 2e-5, 4.0)
    sizer = ChunkSizer(4096, clock=clock)
    X = np.arange(3000.0)[:, None]
    out = sizer(fn, X)
    np.testing.assert_array_equal(out, 2.0 * X)  # every row once, in order
    assert sum(sizes) == 3000
    # warm-up 32, two timed chunks of 32 (2e-5 s a row), then 256 at 8e-5 a row: slower,
    # so the timing stops there and 32 is kept for the rest
    assert sizes[:5] == [32, 32, 32, 256, 256]
    assert sizer.best == 32
    assert sizes[-1] <= 32


def test_chunk_sizer_prefers_large_chunks_when_calls_cost_most():
    sizes = []
    clock = _Clock()

    def fn(X):
        sizes.append(X.shape[0])
        clock.now += 2e-3  # a fixed cost per call
        return X

    sizer = ChunkSizer(1024, clock=clock)
    X = np.zeros((5000, 1))
    assert sizer(fn, X).shape == (5000, 1)
    assert sizer.best == 1024
    assert sum(sizes) == 5000
    assert sizes[:7] == [32, 32, 32, 256, 256, 1024, 1024]


def test_chunk_sizer_small_batches_pass_through():
    sizer = ChunkSizer(4096)
    seen = []
    out = sizer(lambda X: seen.append(X.shape[0]) or X + 1, np.zeros((5, 2)))
    np.testing.assert_array_equal(out, np.ones((5, 2)))
    assert seen == [5]


# ---- the garbage collector -------------------------------------------------------------------


def test_check_leaves_the_garbage_collector_as_it_found_it():
    x = np.array([0.3, 0.7])
    assert gc.isenabled() and gc.get_freeze_count() == 0
    pg.check(lambda x: np.sum(np.sin(x)), x, grad=np.cos)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        pg.check(lambda x: np.sum(np.sin(x)), x, grad=np.cos)
        assert not gc.isenabled()
    finally:
        gc.enable()


# ---- memory -----------------------------------------------------------------------------------


def test_batches_of_a_wide_input_stay_within_the_byte_budget(monkeypatch):
    from polygrad.reference import differences, noise

    monkeypatch.setattr(differences, "BATCH_BYTES", 8 * 1000 * 12)  # 12 rows of n = 1000
    assert differences.rows_per_batch(1000, 4096) == 12
    assert differences.rows_per_batch(10, 64) == 64
    x = np.linspace(0.1, 1.0, 1000)
    W = np.eye(1000)[:5]
    seen = []

    def fn(X):
        seen.append(X.shape[0])
        return np.sum(np.sin(X), axis=1)[:, None]

    Y = evaluate_ladder(fn, x, W, np.array([0.5, 0.25]), 4096)
    assert max(seen) <= 12 and sum(seen) == 5 * 4
    seen.clear()
    whole = evaluate_ladder(fn, x, W[:1], np.array([0.5]), 8)
    assert whole.shape == (1, 1, 2, 1)
    est = noise.estimate_noise(fn, x, W, fn(x[None])[0], EPS64, 2.0**-20)
    assert max(seen) <= 12 and est.sigma.shape == (5, 1)
    assert Y.shape == (5, 2, 2, 1)


def test_a_direction_whose_points_exceed_the_byte_budget_is_evaluated_in_pieces(monkeypatch):
    """A long ladder (ten steps, 21 points with x0) of an input so wide that 12 points
    fill the budget: each direction's points go in pieces of at most 12 rows, with the
    values of one whole batch, bit for bit, and x0 first."""
    from polygrad.reference import differences

    x = np.linspace(0.1, 1.0, 1000)
    W = np.random.default_rng(5).normal(size=(3, 1000))
    steps = 2.0 ** -np.arange(2, 12)
    seen = []

    def fn(X):
        seen.append(X.shape[0])
        return np.stack([np.sum(np.sin(X), axis=1), np.sum(X**3, axis=1)], axis=1)

    whole_center: dict[str, np.ndarray] = {}
    whole = evaluate_ladder(fn, x, W, steps, 4096, whole_center)
    assert seen == [3 * 20 + 1]  # whole directions, one batch
    seen.clear()
    monkeypatch.setattr(differences, "BATCH_BYTES", 8 * 1000 * 12)  # 12 rows of n = 1000
    center: dict[str, np.ndarray] = {}
    pieces = evaluate_ladder(fn, x, W, steps, 4096, center)
    assert max(seen) <= 12 and sum(seen) == 3 * 20 + 1
    np.testing.assert_array_equal(pieces, whole)
    np.testing.assert_array_equal(center["f0"], fn(x[None])[0])


def _tableaus_without_the_shortcut(monkeypatch, *args, **kwargs):
    from polygrad.reference import differences

    with monkeypatch.context() as m:
        m.setattr(differences, "_constant_entries", lambda *a: None)
        return differences._tableaus(*args, **kwargs)


@pytest.mark.parametrize("seed", range(40))
def test_constant_entries_get_the_tableaus_they_would_get_one_by_one(seed, monkeypatch):
    """Outputs that do not move along a direction (the zeros of a sparse Jacobian) share
    one tableau, scaled by their noise (or one per distinct noise where it is subnormal):
    every field agrees with the tableau built entry by entry, to a few ulps (matrix
    products of another width round differently), and the entry chosen is the same."""
    from polygrad.reference.differences import _tableaus

    rng = np.random.default_rng([seed, 7])
    d, L, m = (int(v) for v in rng.integers(1, 7, 3) + np.array([0, 1, 0]))
    steps = 2.0 ** -np.arange(a := int(rng.integers(3, 12)), a + L)
    f0 = rng.standard_normal(m) * 10.0 ** rng.integers(-3, 4, m)
    f0[rng.random(m) < 0.3] = 0.0
    Y = f0 + rng.standard_normal((d, L, 2, m)) * steps[None, :, None, None]
    moving = rng.random((d, m)) < 0.4
    Y = np.where(moving[:, None, None, :], Y, f0)
    sigma = np.abs(rng.standard_normal((d, m))) * 1e-14 * (rng.random((d, m)) < 0.8)
    sigma = np.where(rng.random((d, m)) < 0.2, 1e-321 * rng.integers(1, 4, (d, m)), sigma)
    for cross_check in (False, True):
        new = _tableaus(Y, f0, steps, sigma, EPS64, cross_check=cross_check)
        old = _tableaus_without_the_shortcut(monkeypatch, Y, f0, steps, sigma, EPS64,
                                             cross_check=cross_check)  # fmt: skip
        for a, b in zip(new, old, strict=True):
            np.testing.assert_array_equal(a.level, b.level)
            np.testing.assert_array_equal(a.order, b.order)
            for name in ("value", "truncation", "error", "noise"):
                np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-13,
                                           atol=0)  # fmt: skip
            np.testing.assert_array_equal(a.value[~moving], 0.0)


def test_a_padding_layer_builds_tableaus_only_for_the_entries_that_move(monkeypatch):
    """A full check of zero padding (each input moves one output of 36) on float64
    differences: the tableaus are built for the moving entries and a few shared ones,
    and the check passes with the reference equal to the Jacobian (1 or 0)."""
    from polygrad.reference import differences

    sizes = []
    real = differences.neville

    def spy(D, *args, **kwargs):
        sizes.append(int(np.prod(D.shape[1:])))
        return real(D, *args, **kwargs)

    monkeypatch.setattr(differences, "neville", spy)

    def pad(x):
        return np.pad(x.reshape(2, 2), 2).ravel()

    x = np.array([0.3, -1.2, 2.5, 0.7])
    vjp = lambda g, x: g.reshape(6, 6)[2:4, 2:4].ravel()  # noqa: E731
    report = pg.check(pad, x, vjp=vjp, reference="float64")
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    jacobian = np.stack([pad(e) for e in np.eye(4)])  # (inputs, outputs): entry order
    np.testing.assert_allclose(report.entries.reference, jacobian.ravel(), rtol=1e-9, atol=0)
    # per tableau call: at most the 4 moving entries of a stage, and the shared ones
    assert max(sizes) <= 8, sizes
