"""A failing check decides as soon as its evidence is conclusive: the moves that measure a
float64 rule's round-off stop growing once no larger move can explain the failure."""

import numpy as np

import polygrad as pg
import polygrad.pipeline.autodiff as autodiff
from polygrad import Verdict


def _count_move_sizes(monkeypatch):
    sizes: list[int] = []
    real = autodiff.dithered_args

    def counting(be, args, argnums, rng, ulps, **kw):
        if kw.get("paired"):  # the round-off allowance's moves (not the kink test's)
            sizes.append(ulps)
        return real(be, args, argnums, rng, ulps, **kw)

    monkeypatch.setattr(autodiff, "dithered_args", counting)
    return sizes


def test_a_rule_wrong_by_a_factor_is_decided_at_the_first_move_size(monkeypatch):
    """sum(sin(x)) with the rule cos(x)(1 + 1e-3) in float64: the failure is 1e-3 of the
    values, far beyond what moves below 2^-33 of the inputs can show; one size of moves."""
    sizes = _count_move_sizes(monkeypatch)
    x = np.array([0.3, -1.2, 0.7, 2.1])
    report = pg.check(lambda v: np.sum(np.sin(v)), x, grad=lambda v: np.cos(v) * (1 + 1e-3),
                      reference="float64")  # fmt: skip
    assert report.verdict == Verdict.MISMATCH and not report.ok
    assert sizes == [2]


def test_a_right_rule_whose_value_does_not_move_still_gets_larger_moves(monkeypatch):
    """1 - tanh(x)^2 at x = 8 in float64 as a rule: tanh(x) rounds to the same float64
    number under moves of a few ulps, so the rule's round-off shows only at larger moves
    (the design of the allowance); a right rule stays PASS."""
    x = np.array([8.0, 8.5])
    t = np.tanh(x)
    report = pg.check(lambda v: np.sum(np.tanh(v)), x, grad=lambda v: 1 - np.tanh(v) ** 2)
    assert report.verdict == Verdict.PASS and report.ok
    np.testing.assert_allclose(report.entries.reference, 1 - t**2, rtol=1e-6)
