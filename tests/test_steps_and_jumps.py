"""Jumps and steps on every reference path.

A jump at the point is NONSMOOTH whichever reference sees it: an odd jump
(``sign(x) cos(x)`` at 0) leaves the mp quick difference no gap between its one-sided
differences, and its central difference, about ``1 / h``, read at one step looked like a
derivative of 1e24 (MISMATCH); it grows like ``1 / h`` when the step shrinks, which a
derivative does not.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict
from polygrad.policy import DEFAULT_POLICY
from polygrad.report import SEVERITY

NO_MP_ESCALATION = replace(DEFAULT_POLICY, mp_auto_seconds=0.0)
"""Entries in doubt are not re-examined with mp (the verdict of the first reference)."""


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


# ---- a step of f beyond the finest steps ------------------------------------------------


def test_a_ladder_whose_long_steps_cross_a_step_of_floor_reads_the_constant_run():
    """floor at -8.279 along 8 (its scale), its values read as rounded on a grid of 1
    (noise 1/sqrt(12)): the ladder (steps 2 down to 2^-11 of 8) crosses the integer -8 at
    its four largest steps and is exactly constant below. The estimate is the constant
    run's, exactly 0 on every side, and the ladder does not move up to longer steps (it
    moved to a step of 16 x 8, crossing two integers, and read a slope of 1: MISMATCH)."""
    from polygrad.reference import directional_derivatives

    x0 = np.array([-8.279022891302844])
    W = np.array([[8.0]])
    f0 = np.floor(x0)
    sigma = np.full((1, 1), 1.0 / np.sqrt(12.0))
    dd = directional_derivatives(
        np.floor, x0, W, f0, sigma, 2.0**-52, "float64", 0.25, 10, target_relative_error=1e-12
    )
    assert dd.central.value[0, 0] == 0.0
    assert dd.right.value[0, 0] == 0.0 and dd.left.value[0, 0] == 0.0
    assert 8.0 * dd.central.step[0, 0] < 0.279  # a step that does not reach the integer
    assert np.isfinite(dd.central.error[0, 0])


@pytest.mark.polygrad_backends("torch")
def test_floor_of_a_20_by_20_input_is_not_a_mismatch(backend):
    """floor of 3 randn(20, 20): no entry is MISMATCH (one was: its ladder moved up across
    two integers); the output floor(-8.28) = -9 is read as rounded on a grid of 1, so its
    row's entries stay INCONCLUSIVE on float64 differences alone (mp along the 400
    directions of that row is left out here, as it is where it does not fit
    policy.mp_auto_seconds; see the xfail below)."""
    import torch

    x = 3 * torch.randn(20, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    report = backend.check(torch.floor, x, cache=False, policy=NO_MP_ESCALATION)
    assert report.to_dict()["counts"].get("MISMATCH", 0) == 0, report
    assert report.verdict is Verdict.INCONCLUSIVE


@pytest.mark.xfail(
    strict=True,
    reason="known limit: floor(x) = -9 near x spans 9 cells of its value grid 1, beyond the "
    "8 cells the value-grid floor takes for a function constant in pieces, so it is read as "
    "a continuous function rounded to whole numbers (noise 1/sqrt(12)); its exactly-0 "
    "differences get error bars of that noise over the step, too wide to decide, where mp "
    "does not re-examine the 400 directions of that row (beyond policy.mp_auto_seconds)",
)
@pytest.mark.polygrad_backends("torch")
def test_floor_of_a_20_by_20_input_passes(backend):
    import torch

    x = 3 * torch.randn(20, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    report = backend.check(torch.floor, x, cache=False, policy=NO_MP_ESCALATION)
    assert report.verdict is Verdict.PASS and report.ok


def test_a_zero_jacobian_on_float64_differences_states_no_relative_resolution():
    """floor's Jacobian is 0 everywhere off its steps: no relative error of a gradient can
    be stated against it, so the report does not say "errors below about nan relative"."""
    x = np.array([0.3, 1.7, -2.2])
    report = pg.check(np.floor, x, jac=lambda v: np.zeros((3, 3)), reference="float64")
    assert report.verdict is Verdict.PASS and report.ok
    assert "nan" not in str(report)
    assert report.details.reference.resolution is None


# ---- steps far from 0: a quantizer and its straight-through rule ----------------------

#: entries far from 0, none within 0.2 of a step of floor, ceil or round: every step of
#: the float64 ladder (down to 2^-11 of the input's scale, 2 to 64 here) crosses steps
FAR = [10000.3, -25000.7, 4096.6, 123456.2]
QUANTIZERS = {"floor": np.floor, "ceil": np.ceil, "round": np.round}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_a_step_function_far_from_0_passes_its_zero_rule(dtype, name):
    """The derivative of floor, ceil and round off their steps is 0, at any magnitude:
    PASS with a reference of 0 (floor at 1e4 was MISMATCH against the staircase's slope
    of 1, read by float64 differences)."""
    op = QUANTIZERS[name]
    x = np.array(FAR, dtype=dtype)
    report = pg.check(lambda t: np.sum(op(t)), x, grad=np.zeros_like, cache=False)
    assert report.verdict is Verdict.PASS and report.ok, report
    assert [e["reference"] for e in report.to_dict()["worst_entries"]] == [0.0] * 4


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_a_straight_through_rule_far_from_0_is_a_mismatch(dtype, name):
    """The straight-through rule (1 for a quantizer) is no derivative: MISMATCH on every
    entry (in float32 it was PASS against float64 differences, which read the
    staircase's slope, 1, with an error bar of 1e-5)."""
    op = QUANTIZERS[name]
    x = np.array(FAR, dtype=dtype)
    report = pg.check(lambda t: np.sum(op(t)), x, grad=np.ones_like, cache=False)
    assert report.verdict is Verdict.MISMATCH and not report.ok, report
    assert report.counts() == {"MISMATCH": 4}, report


@pytest.mark.parametrize("rule", [np.zeros_like, np.ones_like])
def test_float64_differences_alone_do_not_decide_a_staircase(rule):
    """On float64 differences alone, floor's values far from 0 are a staircase that a
    smooth function rounded to whole numbers would give too: neither the zero rule nor
    the straight-through one is decided (INCONCLUSIVE on every entry, never MISMATCH or
    PASS), and a note says why."""
    x = np.array(FAR, dtype=np.float32)
    report = pg.check(lambda t: np.sum(np.floor(t)), x, grad=rule, reference="float64",
                      cache=False)  # fmt: skip
    assert report.counts() == {"INCONCLUSIVE": 4}, report
    assert any("staircase" in note for note in report.notes), report.notes


def test_an_ordinary_rounded_value_is_no_staircase():
    """The staircase test on its own: floor's grid of 1 at |f| = 1e4 with a slope of 8192
    per unit of the direction is one; a sum's own rounding (grid 2^-39 at 1e4) is not,
    nor is a grid of 1 where the slope is so steep that a tread is 2^-40 of the
    direction (a few thousand ulps of the input), nor the rounding of a kink's values
    at f = 0."""
    from polygrad.reference.staircase import ambiguous_staircase

    f0 = np.array([1e4, 1e4, 1e4])
    grid = np.array([1.0, 2.0**-39, 1.0])
    slope = np.array([[8192.0, 8192.0, 2.0**40]])
    assert ambiguous_staircase(slope, grid, f0, 2.0**-52).tolist() == [[True, False, False]]
    # the norm at 0: f is 0 and its central slope 0, its one-sided slopes 1 and its grid
    # that of values near 1e-6; beside values of the size of its slopes, it is rounding
    f0, grid, slope = np.zeros(1), np.array([2.0**-72]), np.zeros((1, 1))
    assert ambiguous_staircase(slope, grid, f0, 2.0**-52, np.ones((1, 1))).tolist() == [[False]]
    # float32 values (a reference in the working dtype) rounded at their own ulp
    one = np.ones((1, 1))
    assert ambiguous_staircase(one, np.array([2.0**-24]), np.ones(1), 2.0**-23).tolist() == [
        [False]
    ]


def _straight_through(backend):
    """A quantizer ``round(16 x) / 16`` with the straight-through rule (the cotangent
    passed on unchanged), as quantization-aware training writes it in each framework."""
    if backend.name == "torch":
        import torch

        class Quantize(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return torch.round(x * 16) / 16

            @staticmethod
            def backward(ctx, g):
                return g

        return lambda t: Quantize.apply(t).sum()
    if backend.name == "jax":
        import jax
        import jax.numpy as jnp

        @jax.custom_vjp
        def quantize(x):
            return jnp.round(x * 16) / 16

        quantize.defvjp(lambda x: (quantize(x), None), lambda _, g: (g,))
        return lambda t: jnp.sum(quantize(t))
    import tensorflow as tf

    @tf.custom_gradient
    def quantize(x):
        return tf.round(x * 16) / 16, lambda g: g

    return lambda t: tf.reduce_sum(quantize(t))


@pytest.mark.polygrad_backends("torch", "jax", "tensorflow")
def test_a_straight_through_quantizer_in_float32_is_a_mismatch(backend):
    """The straight-through rule of a quantizer at inputs far from 0, in float32: its
    float64 differences read the staircase's slope, 1, which the rule gives (PASS in
    PyTorch before); the derivative is 0, MISMATCH on every entry."""
    x = backend.asarray(np.array(FAR, dtype=np.float32))
    report = backend.check(_straight_through(backend), x, cache=False)
    assert report.verdict is Verdict.MISMATCH and not report.ok, str(report)
    assert report.counts() == {"MISMATCH": 4}, report.counts()


def test_a_straight_through_rule_is_told_how_to_declare_itself():
    """Every MISMATCH entry of a quantizer's straight-through rule has a reference of
    exactly 0: the report says how to declare a surrogate by design, and with
    surrogate=True the check is ok; a wrong rule of a smooth function gets no such hint."""
    x = np.array(FAR, dtype=np.float32)
    f = lambda t: np.sum(np.round(t * 16) / 16)  # noqa: E731 - a user's one-line quantizer
    report = pg.check(f, x, grad=np.ones_like, cache=False)
    assert report.verdict is Verdict.MISMATCH
    assert "surrogate=True" in str(report), report
    declared = pg.check(f, x, grad=np.ones_like, cache=False, surrogate=True)
    assert declared.ok and declared.verdict is Verdict.INCONCLUSIVE, declared
    wrong = pg.check(lambda t: np.sum(np.sin(t)), x, grad=lambda t: 1.01 * np.cos(t), cache=False)
    assert wrong.verdict is Verdict.MISMATCH and "surrogate=True" not in str(wrong), wrong


# ---- a zero beside large entries: it has no size of its own ----------------------------

#: a zero entry beside entries of 1e6: it took their scale, and steps of 1e6 times the
#: ladder's crossed millions of the quantizer's treads
ZERO_BESIDE_LARGE = [0.0, 0.0, 0.0, 2e6]


def test_a_straight_through_rule_at_0_beside_large_entries_is_a_mismatch_numpy():
    """round(8 x) / 8 is 0 on (-1/16, 1/16): its derivative at 0 is 0, and the
    straight-through rule's 1 is MISMATCH there (it was PASS against the staircase's
    slope, read at steps of 2e6 times the ladder's)."""
    x = np.array(ZERO_BESIDE_LARGE, dtype=np.float32)
    f = lambda t: np.sum(np.round(t * 8) / 8)  # noqa: E731 - a user's one-line quantizer
    report = pg.check(f, x, grad=np.ones_like, cache=False)
    assert report.counts() == {"MISMATCH": 4}, report
    assert report.entries.reference.tolist() == [0.0] * 4


@pytest.mark.polygrad_backends("torch", "jax", "tensorflow")
def test_a_straight_through_rule_at_0_beside_large_entries_is_a_mismatch(backend):
    x = backend.asarray(np.array(ZERO_BESIDE_LARGE, dtype=np.float32))
    report = backend.check(_straight_through(backend), x, cache=False)
    assert report.counts() == {"MISMATCH": 4}, str(report)


def _hard_swish(x):
    return x * np.clip(x + 3, 0, 6) / 6


def _hard_swish_grad(x):
    return np.where(x < -3, 0.0, np.where(x > 3, 1.0, (2 * x + 3) / 6))


def _hard_swish_grad_special_cased_at_0(x):
    return np.where(x == 0, 1.0, _hard_swish_grad(x))


def test_a_smooth_point_at_0_beside_large_entries_is_no_kink():
    """hard-swish is smooth at 0 (derivative 1/2); its kinks are at -3 and 3. Beside an
    entry of 1e5, steps at 0 of 1e5 times the ladder's crossed both and read a kink at 0
    (NONSMOOTH, left 0 and right 1), and a rule that returns 1 there passed as lying
    between them. Now the right rule is PASS, the wrong one is not ok."""
    x = np.array([0.0, 1e5], dtype=np.float32)
    f = lambda t: np.sum(_hard_swish(t))  # noqa: E731
    right = pg.check(f, x, grad=_hard_swish_grad, cache=False)
    assert right.verdict is Verdict.PASS and right.ok, right
    assert right.entries.reference[0] == pytest.approx(0.5, rel=1e-9)
    wrong = pg.check(f, x, grad=_hard_swish_grad_special_cased_at_0, cache=False)
    assert not wrong.ok and wrong.counts()["PASS"] == 1, wrong


@pytest.mark.xfail(
    strict=True,
    reason="known limit: whether an operation of f sits at its kink is asked of the whole "
    "point; hard-swish's clip is at its bound at x[3] = 3, so the rule special-cased at the "
    "zeros (1 for a derivative of 1/2, f smooth there) is taken for autodiff's side of "
    "that kink and passes as NONSMOOTH; the kink is not on the zeros' path",
)
def test_a_rule_special_cased_at_0_beside_a_kink_elsewhere_is_a_mismatch():
    x = np.array([0.0, 0.0, 1e5, 3.0])
    f = lambda t: np.sum(_hard_swish(t))  # noqa: E731
    report = pg.check(f, x, grad=_hard_swish_grad_special_cased_at_0, cache=False)
    assert report.entries.status[:2].tolist() == [SEVERITY[Verdict.MISMATCH]] * 2, report


def test_a_staircase_entry_small_beside_its_row_is_not_decided_by_float64():
    """sum(c round(16 x) / 16) with c = (1e5, 1) at inputs near 1e4: x[1]'s reference is
    the staircase's slope 1 (its derivative is 0), small beside x[0]'s 1e5. An error bar
    of the size of the slope covered both readings, but was not too coarse against the
    row's scale, and the straight-through rule's 1 passed at x[1]; on float64 alone no
    entry is decided now, and with mp both are MISMATCH."""
    c = np.array([1e5, 1.0], np.float32)
    x = np.array([10000.3, 20000.3], np.float32)
    f = lambda t: np.sum(c * (np.round(t * 16) / 16))  # noqa: E731
    alone = pg.check(f, x, grad=lambda t: c, reference="float64", cache=False)
    assert alone.counts() == {"INCONCLUSIVE": 2}, alone
    report = pg.check(f, x, grad=lambda t: c, cache=False)
    assert report.counts() == {"MISMATCH": 2}, report


def _shifted(x):
    """``(x + 1024) - 1024`` elementwise: values of about 1e-3 rounded at ulp(1024)."""
    return (x + 1024.0) - 1024.0


@pytest.mark.parametrize("reference", ["float64", "auto"])
def test_a_reading_of_exactly_0_on_a_coarse_grid_keeps_its_error_bar(backend, reference):
    """The outputs of ``(x + 1024) - 1024`` at 1e-3 are rounded to a grid of 2^16 ulps of
    themselves and more, yet do not move at all along another entry's direction: that
    reading, exactly 0, is both readings of a staircase (its slope and 0), so the
    off-diagonal entries keep their error bars and PASS (they were unbounded and
    INCONCLUSIVE in NumPy, PyTorch and TensorFlow). With mp the whole check is PASS."""
    x = backend.asarray(np.array([1e-3, 2e-3, 0.5]))
    report = backend.check(_shifted, x, jac=lambda v: np.eye(3), reference=reference,
                           cache=False)  # fmt: skip
    e = report.entries
    off = [k for k, name in enumerate(e.names) if name[2] != name[-2]]
    assert len(off) == 6
    assert np.all(np.isfinite(e.reference_error[off])), report
    assert np.all(e.status[off] == SEVERITY[Verdict.PASS]), report
    np.testing.assert_array_equal(e.reference[off], 0.0)
    if reference == "auto":
        assert report.verdict is Verdict.PASS and report.ok, report
