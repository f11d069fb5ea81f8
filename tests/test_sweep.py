"""polygrad.sweep: the V-shaped error of plain finite differences, measured and predicted."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

import polygrad as pg
from polygrad.progress import progress, progress_available

PNG = b"\x89PNG\r\n\x1a\n"
USER_STEPS = 2.0 ** -np.arange(5, 14)  # the steps of USERS.md case 1


def _scale() -> np.ndarray:
    return np.random.default_rng(0).uniform(0.5, 1.5, size=1)


def _np_f(x, scale):
    return np.sum(-((x - 0.0) ** 2) / (2 * scale**2))


def _np_grad(x, scale):
    return -(x - 0.0) / scale**2


def _assert_case1(s: pg.Sweep) -> None:
    """USERS.md case 1: error grows as the step shrinks; predictions match; best step helps."""
    assert s.working_dtype == "float32"
    assert s.reference_method == "float64"
    err = s.central_error[:, 0]
    # the user's observation: from ~1e-7 at 2^-5 up to ~1e-4 at 2^-13
    e5, e13 = s.measured_error_at(2.0**-5), s.measured_error_at(2.0**-13)
    assert e5 < 3e-6
    assert 2e-5 < e13 < 1e-3
    assert e13 > 30 * e5
    # overall growth below the optimum: a log-log fit over the user's steps has slope ~ -1
    mask = np.isin(s.steps, USER_STEPS)
    slope = np.polyfit(np.log(s.steps[mask]), np.log(err[mask]), 1)[0]
    assert -1.5 < slope < -0.6
    # f''' = 0: the third derivative is found to be zero within its error bar
    assert abs(s.third_derivative[0, 0]) <= max(1e-9, 3 * s.third_derivative_error[0, 0])
    # predicted round-off within a factor 10 of the measured errors on the round-off side
    side = s.roundoff_side
    assert side.sum() >= 10
    ratio = err[side] / s.predicted_roundoff[side, 0]
    assert np.all((ratio > 0.1) & (ratio < 10)), ratio
    # the best step gives an error at least 10x smaller than the user's smallest step
    best = s.measured_error_at(s.optimal_step)
    assert best * 10 <= e13
    assert s.optimal_error * 10 <= e13
    assert math.log2(s.optimal_step) == round(math.log2(s.optimal_step))


def test_case1_numpy_float32():
    x = np.ones(1, np.float32)
    s = pg.sweep(_np_f, x, _scale().astype(np.float32))
    assert s.backend == "numpy"
    assert s.steps[0] == 0.5 and s.steps[-1] == 2.0**-15
    _assert_case1(s)
    text = str(s)
    assert "best" in text and "round-off" in text and "2^-13" in text
    d = s.to_dict()
    assert d["optimal_step"] == s.optimal_step and len(d["steps"]) == len(s.steps)


def test_case1_tensorflow_float32_both_forms():
    import tensorflow as tf
    import tensorflow_probability as tfp

    def hand(x, scale):
        return tf.reduce_sum(-((x - 0.0) ** 2) / (2 * scale**2))

    def with_tfp(x, scale):
        return tf.reduce_sum(tfp.distributions.Normal(tf.zeros_like(scale), scale).log_prob(x))

    x = tf.ones(1, tf.float32)
    scale = tf.constant(_scale(), tf.float32)
    for f in (hand, with_tfp):
        s = pg.sweep(f, x, scale)
        assert s.backend == "tensorflow"
        _assert_case1(s)
        report = pg.check(f, x, scale)
        assert report.ok and str(report.verdict) == "PASS"


def test_truncation_side_and_forward_differences():
    # g(t) = exp(sin(x + t)): nonzero f''' gives a real V with a finite optimum
    x = np.array([0.3, 1.7], np.float32)
    s = pg.sweep(lambda x: np.sum(np.exp(np.sin(x))), x)
    assert s.central_error.shape == (s.steps.size, 2)
    assert 2.0**-12 <= s.optimal_step <= 2.0**-5
    big = s.steps <= 2.0**-2
    trunc_side = big & (s.steps > s.optimal_step * 4)
    t, err = s.predicted_truncation.max(axis=1), s.central_error.max(axis=1)
    ratio = err[trunc_side] / t[trunc_side]
    assert np.all((ratio > 0.3) & (ratio < 3)), ratio  # truncation is predicted closely
    # third derivative of exp(sin x) at 0.3 along x[0]
    c, sn = math.cos(0.3), math.sin(0.3)
    g3 = math.exp(sn) * (c**3 - 3 * c * sn - c)
    w = s.directions[0, 0]  # a power of two near |x[0]|
    assert w == 0.25
    assert s.third_derivative[0, 0] == pytest.approx(g3 * w**3, rel=1e-4)
    # forward differences: best error much worse than central
    assert s.optimal_error_forward > 10 * s.optimal_error
    assert np.all(s.optimal_steps > 0)


def test_custom_steps_directions_and_errors():
    x = np.linspace(0.5, 2.0, 12)
    s = pg.sweep(lambda x: np.sum(x**3), x, steps=[2.0**-3, 2.0**-6, 2.0**-9], directions=3)
    assert s.directions.shape == (3, 12) and s.direction_names[0] == "random 1"
    assert np.array_equal(s.steps, [2.0**-3, 2.0**-6, 2.0**-9])
    # float64: the third derivative (6 per coordinate, times w³) is found
    W = s.directions
    assert s.third_derivative[:, 0] == pytest.approx(6 * np.sum(W**3, axis=1), rel=1e-6)
    with pytest.raises(ValueError):
        pg.sweep(lambda x: np.sum(x), x, steps=[1e-3])
    with pytest.raises(ValueError):
        pg.sweep(lambda x: np.sum(x), x, directions="diagonal")


def test_sweep_plot_png_and_svg(tmp_path):
    s = pg.sweep(_np_f, np.ones(1, np.float32), _scale().astype(np.float32))
    png, svg = tmp_path / "sweep.png", tmp_path / "sweep.svg"
    s.plot(png)
    s.plot(svg)
    data = png.read_bytes()
    assert data[:8] == PNG and len(data) > 10_000
    assert b"<svg" in svg.read_bytes()[:2000]


def test_progress_silent_when_not_a_terminal():
    assert progress_available(io.StringIO()) is None
    with progress(3, "work") as bar:  # under pytest stderr is captured: no bar, no error
        bar.update()
        bar.update(2)
