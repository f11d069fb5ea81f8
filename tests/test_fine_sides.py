"""Projections of a ReLU CNN at a real digit: every random direction crosses the
max-pooling ties of the blank background, kinks at x itself, and the first reference
reads them as noise, so its one-sided derivatives overlap within their error bars and
autodiff (an element of the generalized derivative) was called MISMATCH on a correct
gradient. The one-sided derivatives at fine steps (:mod:`polygrad.pipeline.sides`)
show the kink; at a smooth point they agree, and a wrong rule stays MISMATCH."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import keras_case2_cnn, keras_digit, torch_case2_cnn, torch_digit  # noqa: E402

import polygrad as pg  # noqa: E402
from polygrad.report import SEVERITY  # noqa: E402

NONSMOOTH = SEVERITY[pg.Verdict.NONSMOOTH]


def assert_every_projection_at_a_kink(report: pg.Report) -> None:
    """Every projection NONSMOOTH and the check ok (never MISMATCH, never undecided)."""
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok, report
    assert np.all(report.entries.status == NONSMOOTH), report
    assert "verify nothing of the gradient" in str(report)


def assert_kinks_resolved(report: pg.Report) -> None:
    """Every projection NONSMOOTH; along a direction the fine steps re-examined (its
    entries in doubt on the first steps), the one-sided derivatives differ by far more
    than their error bars (a kink resolved)."""
    assert_every_projection_at_a_kink(report)
    e = report.entries
    gap = np.abs(e.left - e.right)
    assert np.any(gap > 100 * (e.left_error + e.right_error)), report
    assert any("estimated again" in n and "at a kink of f" in n for n in report.notes), report


@pytest.mark.polygrad_backends("torch")
def test_torch_case2_cnn_projections_at_a_digit_are_nonsmooth_not_mismatch():
    import torch.nn.functional as F

    model = torch_case2_cnn().eval()
    x, label = torch_digit()
    report = pg.check(lambda v: F.cross_entropy(model(v), label), x, strategy="projections")
    assert_kinks_resolved(report)


@pytest.mark.polygrad_backends("tensorflow")
def test_keras_case2_cnn_projections_at_a_digit_are_nonsmooth_not_mismatch():
    import keras
    import tensorflow as tf

    model = keras_case2_cnn()
    image, label = keras_digit()
    loss = keras.losses.SparseCategoricalCrossentropy()
    f = lambda v: loss(np.array([label]), model(v, training=False))  # noqa: E731
    # its first steps already read every projection's kink (none in doubt, so nothing is
    # re-examined; the PyTorch CNN above exercises the fine steps)
    assert_every_projection_at_a_kink(pg.check(f, tf.constant(image), strategy="projections"))


@pytest.mark.polygrad_backends("torch")
def test_a_wrong_rule_at_a_smooth_point_stays_mismatch_in_projections():
    import torch
    from torch import nn

    class Planted(torch.autograd.Function):
        @staticmethod
        def forward(ctx, z):
            return z.clone()

        @staticmethod
        def backward(ctx, g):
            return g * (1 + 1e-3)  # a wrong rule: off by 1e-3

    torch.manual_seed(0)  # a smooth CNN: mp does not run convolutions, float64 decides
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Tanh(), nn.Flatten(), nn.Linear(4 * 36, 1))
    x = torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    right = pg.check(lambda v: net(v).sum(), x, strategy="projections")
    assert right.verdict == pg.Verdict.PASS and right.ok, right
    assert right.details["reference"]["method"] == "float64"
    wrong = pg.check(lambda v: net(Planted.apply(v)).sum(), x, strategy="projections")
    assert wrong.verdict == pg.Verdict.MISMATCH and not wrong.ok, wrong
