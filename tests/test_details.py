"""The typed report details: the same JSON form as the untyped dictionary, attributes, laziness."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from conftest import torch_planted_tanh
from details_cases import CASES, shape

import polygrad as pg
from polygrad.details import Deferred, Details, ReferenceInfo, TaylorSummary

GOLDEN = json.loads((Path(__file__).parent / "golden_details_shapes.json").read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_json_form_has_the_keys_of_the_untyped_details(name):
    """Each report's ``to_dict()["details"]`` has the nested keys, and kinds of values,
    that the untyped dictionary wrote (recorded in golden_details_shapes.json)."""
    report = CASES[name]()
    assert str(report.verdict) == GOLDEN[name]["verdict"]
    assert report.ok == (report.verdict is not pg.Verdict.MISMATCH)
    d = report.to_dict()["details"]
    assert shape(d) == GOLDEN[name]["details"]
    assert json.loads(report.to_json())["details"] == d


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_mapping_view_is_the_json_form_of_the_attributes(name):
    """``details[key]`` (the earlier dictionary's reads) agrees with the typed attributes."""
    report = CASES[name]()
    d = report.details
    assert isinstance(d, Details)
    assert d["reference"]["method"] == d.reference.method
    assert d["notes"] == list(d.notes) == report.notes
    assert d.get("projections") == (None if d.projections is None else d.projections.to_dict())
    assert ("escalation" in d) == (d.escalation is not None)
    assert dict(d.items()) == d.to_dict() == {k: d[k] for k in d}
    assert d.get("no such key", 3) == 3
    with pytest.raises(KeyError):
        d["force"]


def test_escalation_is_typed():
    report = CASES["mismatch_escalated"]()
    esc = report.details.escalation
    assert report.verdict is pg.Verdict.MISMATCH and not report.ok
    assert esc is not None and esc.reference == "mp" and esc.d == 2
    assert esc.decided_by is not None and esc.decided_by["mp"]
    assert report.details["escalation"]["directions"] == list(esc.directions)


def test_values_match_the_closed_form_reference():
    """mp reference of d/dx sum(sin x): cos x, and the details say mp at its digits."""
    report = CASES["mp"]()
    assert report.verdict is pg.Verdict.PASS and report.ok
    assert report.details.reference.method == "mp" and report.details.reference.dps == 50
    np.testing.assert_allclose(report.entries.reference, np.cos([0.3, 1.2]), rtol=1e-14)
    assert report.details.reference.resolution is None
    assert "resolution" not in report.details["reference"]


def test_a_passing_report_defers_its_supporting_evidence_until_read():
    """PASS: the naive central difference and the Taylor test wait for the first read;
    reading one key computes that key only; pickling computes them."""
    report = CASES["float64_fd"]()
    assert report.verdict is pg.Verdict.PASS and report.ok
    d = report.details
    assert d._naive.pending and d._taylor.pending
    assert d["naive_central_difference"]["noise"] > 0
    assert not d._naive.pending and d._taylor.pending
    assert isinstance(d.taylor, TaylorSummary) and d.taylor.explanation
    copy = pickle.loads(pickle.dumps(report))
    assert copy.details == d and copy.details.taylor == d.taylor


def test_a_failing_report_computes_its_supporting_evidence_now():
    report = CASES["projections"]()
    assert report.verdict is pg.Verdict.PASS and report.ok
    x = np.linspace(-1.0, 1.0, 12)
    bad = pg.check(lambda x: np.tanh(x) * 2.0, x, vjp=lambda u, x: 3.0 * u / np.cosh(x) ** 2,
                   strategy="projections")  # fmt: skip
    assert bad.verdict is pg.Verdict.MISMATCH and not bad.ok
    assert not bad.details._taylor.pending and not bad.details._naive.pending
    proj = bad.details.projections
    assert proj is not None and proj.count == len(bad.entries.names)


def test_deferred_computes_once_and_pickles_its_value():
    calls: list[int] = []
    lazy: Deferred[int] = Deferred(lambda: calls.append(1) or 7)
    assert lazy.pending and calls == []
    assert lazy.get() == 7 and lazy.get() == 7 and calls == [1]
    assert pickle.loads(pickle.dumps(Deferred(lambda: 5))).get() == 5
    assert Deferred().get() is None


def test_reference_info_leaves_out_an_unset_resolution():
    info = ReferenceInfo("float64", None, 1e-16, 2e-16, 1.0, "each direction", 1e-8, 1e-16,
                         1e-3, 1.0, 1.0, 1e-10, 40, 0.1, False)  # fmt: skip
    assert "resolution" not in info.to_dict()
    assert info.to_dict()["dps"] is None


@pytest.mark.polygrad_backends("torch")
def test_a_mismatch_entry_in_to_dict_carries_the_tolerance_that_decided_it():
    """A bfloat16 tanh whose rule is 5% off: MISMATCH on the float64 evaluation of the
    rule. The working tolerance (bfloat16's) is wider than the difference; the dict now
    holds the float64 one too, which the difference exceeds, so a script reading the
    JSON sees why the entry failed."""
    import torch

    Tanh = torch_planted_tanh(0.05)

    x = torch.tensor([0.3, -0.8, 1.2, 0.05], dtype=torch.bfloat16)
    report = pg.check(lambda v: Tanh.apply(v).sum(), x)
    assert report.verdict is pg.Verdict.MISMATCH
    worst = report.to_dict()["worst_entries"][0]
    assert worst["verdict"] == "MISMATCH"
    assert worst["difference"] > worst["tolerance_float64"] > 0
