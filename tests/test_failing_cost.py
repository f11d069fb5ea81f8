"""A failing check decides as soon as its evidence is conclusive: the moves that measure a
float64 rule's round-off stop growing once no larger move can explain the failure."""

from dataclasses import replace

import numpy as np
import pytest
from conftest import torch_planted_tanh

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


def _clamp_twin(planted: float, n: int = 64):
    """clip(x, -1, 1) in float32 with its VJP supplied (planted: times ``planted``)."""
    x = (1.5 * np.random.default_rng(0).standard_normal(n)).astype(np.float32)

    def vjp(u, v):
        return u * ((v > -1) & (v < 1)) * planted

    return x, vjp


def test_mp_confirms_the_worst_directions_first_and_stops_there():
    """The same planted clamp: every one of its in-range entries fails on the float64
    reference; mp re-examines the directions of the worst four, confirms the MISMATCH and
    stops; the other directions in doubt are named as resting on float64."""
    from polygrad.pipeline.assess import FIRST_STAGE

    x, vjp = _clamp_twin(1 + 1e-3)
    report = pg.check(lambda v: np.clip(v, -1.0, 1.0), x, vjp=vjp)
    esc = report.details.escalation
    in_range = int(np.sum(np.abs(x) < 1))
    assert report.verdict == Verdict.MISMATCH
    assert len(esc.directions) == FIRST_STAGE and esc.deferred == in_range - FIRST_STAGE
    assert np.sum(report.entries.status == 5) == in_range  # every in-range entry fails
    assert any("rest on the float64 reference" in n for n in report.details["notes"])


def test_a_right_rule_gets_every_direction_in_doubt_re_examined():
    """The twin with the right rule: nothing fails, so nothing is staged or deferred."""
    x, vjp = _clamp_twin(1.0)
    report = pg.check(lambda v: np.clip(v, -1.0, 1.0), x, vjp=vjp)
    assert report.verdict == Verdict.PASS and report.ok
    esc = report.details.escalation
    assert esc is None or not esc.deferred


def test_a_first_stage_that_evidence_overturns_re_examines_every_direction(monkeypatch):
    """Where a kink pass turns the first stage's confirmed MISMATCH entries NONSMOOTH, the
    check would fail on finite differences alone: the judgment assesses again with every
    direction in doubt re-examined by mp (here all of them are MISMATCH on mp too)."""
    import polygrad.pipeline.judgment as judgment

    real = judgment.gather_and_decide
    seen = []

    def overturn_first_stage(state, opts):
        out = real(state, opts)
        esc = out.judged.escalation
        seen.append(None if esc is None else esc.deferred)
        if esc is None or not esc.deferred:
            return out
        e = out.judged.entries
        along = np.isin(np.arange(e.status.size) // (e.status.size // esc.d), esc.directions)
        status = np.where(along & (e.status == 5), 2, e.status)  # NONSMOOTH, as a kink pass
        entries = replace(e, status=status)
        return replace(out, judged=replace(out.judged, entries=entries))

    monkeypatch.setattr(judgment, "gather_and_decide", overturn_first_stage)
    x, vjp = _clamp_twin(1 + 1e-3)
    report = pg.check(lambda v: np.clip(v, -1.0, 1.0), x, vjp=vjp)
    in_range = int(np.sum(np.abs(x) < 1))
    assert seen[0] and seen[1] is None  # staged, then every direction at once
    assert len(report.details.escalation.directions) == in_range
    assert report.verdict == Verdict.MISMATCH


@pytest.mark.polygrad_backends("torch")
def test_the_working_dtype_frame_is_not_run_where_the_rule_is_wrong_in_both_dtypes(monkeypatch):
    """A torch float32 tanh rule times 1 + 1e-3 inside a weighted sum with weights from
    1e-4 to 1: at the small weights the float32 value agrees with the reference while the
    float64 one does not (the frame's precondition), at the large ones both are off alike,
    which decides the check; the frame's working-dtype reference is never computed."""
    import torch

    import polygrad.pipeline.dtype_dependence as dtype_dependence
    import polygrad.pipeline.judgment as judgment

    computed, explicable = [], []
    real_ref, real_frame = dtype_dependence.compute_reference, judgment.recheck_in_working_dtype

    def frame(prep, plan, ref, judged, opts):
        explicable.append(int(np.sum(dtype_dependence._explicable(judged.entries))))
        return real_frame(prep, plan, ref, judged, opts)

    monkeypatch.setattr(dtype_dependence, "compute_reference",
                        lambda *a, **k: computed.append(1) or real_ref(*a, **k))  # fmt: skip
    monkeypatch.setattr(judgment, "recheck_in_working_dtype", frame)

    Tanh = torch_planted_tanh(1e-3)
    c = torch.logspace(-4, 0, 16)
    x = torch.linspace(-1.5, 1.5, 16)
    report = pg.check(lambda v: (c.to(v.dtype) * Tanh.apply(v)).sum(), x)
    assert report.verdict == Verdict.MISMATCH and not report.ok
    assert explicable and explicable[0] > 0  # the precondition held at some entries
    assert computed == []


def test_a_first_stage_not_confirmed_where_mp_cannot_take_the_rest_is_judged_without_mp(
    monkeypatch,
):
    """Where mp clears the worst directions but the rest is beyond policy.mp_auto_seconds,
    the check is judged as if mp could take none (the fine one-sided steps, as before the
    stages), not on a mix: no escalation is recorded, and the verdicts are those of the
    same check with mp's budget at 0."""
    import polygrad.pipeline.assess as assess
    import polygrad.pipeline.reference as reference
    from polygrad.policy import Policy

    real_seconds = reference.mp_seconds_at_least
    monkeypatch.setattr(assess, "mismatch_along", lambda *a: False)  # mp cleared the first four
    monkeypatch.setattr(
        reference, "mp_seconds_at_least",
        lambda n, evaluations: 1e9 if evaluations > 40 else real_seconds(n, evaluations),
    )  # fmt: skip
    x, vjp = _clamp_twin(1 + 1e-3)
    report = pg.check(lambda v: np.clip(v, -1.0, 1.0), x, vjp=vjp)
    assert report.details.escalation is None
    assert any("were not re-examined with mp" in n for n in report.details["notes"])
    without = pg.check(
        lambda v: np.clip(v, -1.0, 1.0), x, vjp=vjp, policy=Policy(mp_auto_seconds=0)
    )
    assert report.verdict is without.verdict is Verdict.MISMATCH
    np.testing.assert_array_equal(report.entries.status, without.entries.status)
