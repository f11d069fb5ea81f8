"""The verdict rule on hand-built inputs: every verdict, every precedence pair."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from polygrad import Verdict
from polygrad.pipeline.judge import Findings, JudgeInput, judge, verdict_rule
from polygrad.policy import Policy
from polygrad.report import SEVERITY

F32 = float(np.finfo(np.float32).eps)
F64 = float(np.finfo(np.float64).eps)

# the rows of verdict_rule's table: (what makes the row's condition hold, its verdict)
ROWS = [
    ({"nonsmooth": True, "ad_finite": False}, Verdict.NONSMOOTH),
    ({"ref_finite": False, "ad_finite": False}, Verdict.INCONCLUSIVE),
    ({"ref_finite": True, "ad_finite": False}, Verdict.NONFINITE),  # finiteness differs
    ({"nonsmooth": True}, Verdict.NONSMOOTH),
    ({"bad_64": True}, Verdict.MISMATCH),
    ({"bad_w": True, "have64": True}, Verdict.UNSTABLE),
    ({"coarse": True}, Verdict.INCONCLUSIVE),
]
CLEAN = {
    "nonsmooth": False,
    "ad_finite": True,
    "ref_finite": True,
    "bad_64": False,
    "bad_w": False,
    "have64": False,
    "coarse": False,
}


def _findings(flags):
    arrays = {k: np.array([v]) for k, v in flags.items() if k != "have64"}
    return Findings(have64=flags["have64"], **arrays)


def _holds(row, flags):
    """Whether row ``row``'s condition holds for ``flags`` (as the table states it)."""
    f = flags
    return [
        f["nonsmooth"] and not f["ad_finite"],
        not f["ref_finite"] and not f["ad_finite"],
        f["ref_finite"] != f["ad_finite"],
        f["nonsmooth"],
        f["bad_64"],
        f["bad_w"] and f["have64"],
        f["coarse"],
    ][row]


def test_no_evidence_is_pass():
    assert verdict_rule(_findings(CLEAN))[0] == SEVERITY[Verdict.PASS]


@pytest.mark.parametrize("row", range(len(ROWS)))
def test_each_row_alone(row):
    flags = {**CLEAN, **ROWS[row][0]}
    assert verdict_rule(_findings(flags))[0] == SEVERITY[ROWS[row][1]]


PAIRS = list(itertools.combinations(range(len(ROWS)), 2))


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_the_earlier_row_wins(first, second):
    """Findings that satisfy two rows get the verdict of the one earlier in the table
    (or of a row earlier still, where the two conditions together make one hold: a
    non-finite autodiff value at a kink is row 1).

    Rows 2 and 3 exclude each other (both sides non-finite vs exactly one side):
    that pair cannot occur and is checked to be contradictory."""
    flags = {**CLEAN, **ROWS[second][0], **ROWS[first][0]}
    if (first, second) == (1, 2):
        assert not (_holds(1, flags) and _holds(2, flags))
        return
    assert _holds(first, flags) and _holds(second, flags), flags
    earliest = next(r for r in range(len(ROWS)) if _holds(r, flags))
    assert earliest <= first
    assert verdict_rule(_findings(flags))[0] == SEVERITY[ROWS[earliest][1]]


def test_the_rule_is_elementwise():
    rows = [{**CLEAN, **cond} for cond, _ in ROWS] + [CLEAN]
    fd = Findings(
        have64=True,
        **{k: np.array([r[k] for r in rows]) for k in CLEAN if k != "have64"},
    )
    want = [v for _, v in ROWS] + [Verdict.PASS]
    want[4] = Verdict.MISMATCH
    got = verdict_rule(fd)
    # with have64 for all, row 6's finding alone (bad_w) reads UNSTABLE
    assert list(got) == [SEVERITY[v] for v in want]


def _input(**kw):
    """One entry: f'(x) = 1 with a tight reference, a float64 working dtype."""
    one = np.array([1.0])
    base = dict(
        names=["x"], ad=one, ad64=np.array([np.nan]), have64=False,
        ref=one, ref_err=np.array([1e-14]), left=one, left_err=np.array([1e-12]),
        right=one, right_err=np.array([1e-12]), jumps=np.array([False]),
        scale=np.array([2.0]), fscale=np.array([1.0]), eps_w=F64, ref_eps=F64,
    )  # fmt: skip
    base.update({k: (np.array([v]) if isinstance(v, float | bool) and k not in
                     ("have64", "eps_w", "ref_eps", "vouched") else v)
                 for k, v in kw.items()})  # fmt: skip
    return JudgeInput(**base)


def _verdict(inp):
    return {c: v for v, c in SEVERITY.items()}[int(judge(inp).status[0])]


def test_pass_within_round_off():
    assert _verdict(_input(ad=1.0 + 16 * F64)) == Verdict.PASS


def test_mismatch_when_float64_rule_is_off():
    assert _verdict(_input(ad=1.001, ad64=1.001, have64=True)) == Verdict.MISMATCH
    assert _verdict(_input(ad=1.001)) == Verdict.MISMATCH  # without float64: working value


def test_unstable_when_only_the_working_value_is_off():
    inp = _input(ad=1.001, ad64=1.0, have64=True, eps_w=F32, fscale=0.0)
    assert _verdict(inp) == Verdict.UNSTABLE


def test_roundoff_inherited_from_f_is_allowed_to_a_narrow_rule():
    """1 - tanh(x)^2 from a float32 tanh(x) one ulp below 1: the entry is tiny (5e-7),
    f is of size 1; c_ad eps |f| / s excuses the working value when float64 agrees."""
    tiny = 4.5e-7
    kw = dict(ad=0.0, ad64=tiny, have64=True, eps_w=F32, ref=tiny, left=tiny, right=tiny,
              ref_err=1e-20, left_err=1e-20, right_err=1e-20, scale=2 * tiny)  # fmt: skip
    assert _verdict(_input(fscale=1.0, **kw)) == Verdict.PASS
    assert _verdict(_input(fscale=0.0, **kw)) == Verdict.UNSTABLE


def test_nonsmooth_when_sides_differ():
    inp = _input(ad=0.0, ref=0.5, left=0.0, right=1.0, ref_err=1e-3)
    assert _verdict(inp) == Verdict.NONSMOOTH
    assert bool(judge(inp).within_one_sided[0])


def test_nonfinite_when_only_autodiff_is_nan():
    assert _verdict(_input(ad=np.nan)) == Verdict.NONFINITE


def test_inconclusive_when_the_reference_is_too_coarse():
    wide = dict(ref_err=0.5, left_err=0.5, right_err=0.5)
    assert _verdict(_input(ad=1.2, **wide)) == Verdict.INCONCLUSIVE


def test_inconclusive_when_both_sides_are_not_finite():
    assert _verdict(_input(ad=np.inf, ref=np.nan, left=np.nan, right=np.nan)) == (
        Verdict.INCONCLUSIVE
    )


def test_policy_sets_the_tolerance():
    inp = _input(ad=1.0 + 400 * F64)  # tolerance 2 x 1e-14 + 64 eps x 2
    assert _verdict(inp) == Verdict.MISMATCH
    assert _verdict(replace(inp, policy=Policy(c_ad=512.0))) == Verdict.PASS
