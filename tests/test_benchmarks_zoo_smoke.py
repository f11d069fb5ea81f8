"""The gradient zoo, its tables, and a smoke run of ``python -m benchmarks --quick``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from benchmarks import tables
from benchmarks.tools import TOOLS, VERDICTS
from benchmarks.tools.common import accuracy
from benchmarks.zoo import TRUTHS, all_cases, zoo_cases

ROOT = Path(__file__).resolve().parent.parent


def test_zoo_has_every_kind_of_case() -> None:
    cases = zoo_cases()
    assert len(cases) >= 150
    assert len({c.name for c in all_cases()}) == len(all_cases())
    truths = Counter(c.truth for c in cases)
    assert set(truths) == set(TRUTHS)
    assert {c.framework for c in cases} == {"numpy", "torch", "jax", "tensorflow"}
    assert {"float64", "float32", "bfloat16", "float16"} <= {c.dtype for c in cases}
    for c in cases:
        assert (c.bug_size is not None) == (c.truth == "wrong"), c.name
        assert (c.expect is not None) == (c.truth == "nonfinite-trap"), c.name
    sizes = {c.bug_size for c in cases if c.family == "bug-size" and c.dtype == "float64"}
    assert min(sizes) == pytest.approx(1e-8) and max(sizes) == pytest.approx(1e-1)


@pytest.mark.parametrize(
    "name",
    [
        "bug-size/softplus-scaled-1e-03/numpy/float64",
        "bug-kind/transposed-jacobian/numpy/float64",
        "bug-kind/dropped-cotangent-one-input/numpy/float64",
        "smooth/deep-tanh-sin-20/numpy/float64",
    ],
)
def test_numpy_case_truth_matches_its_label(name: str) -> None:
    """A planted bug is off the closed form by its stated size; a correct rule is not off."""
    case = {c.name: c for c in all_cases()}[name]
    p = case.problem()
    assert p.truth is not None and p.grad is not None
    g = np.asarray(p.grad(p.x), dtype=np.float64)
    rel = np.max(np.abs(g - p.truth)) / np.max(np.abs(p.truth))
    if case.truth == "wrong":
        assert rel == pytest.approx(case.bug_size, rel=1e-6)
    else:
        assert rel < 1e-14


def test_accuracy_digits_and_coverage() -> None:
    truth = np.array([1.0, -2.0, 4.0])
    est = truth + np.array([4e-8, 0.0, -1e-6])
    out = accuracy(est, np.array([1e-7, 1e-9, 1e-7]), truth)
    assert out["digits"] == pytest.approx(-np.log10(1e-6 / 4.0))
    assert out["covered"] == pytest.approx(2 / 3)
    assert accuracy(est, None, None) == {}


def _row(**kw: object) -> dict[str, object]:
    base = {
        "case": "c",
        "family": "bug-size",
        "tool": "polygrad",
        "dtype": "float64",
        "truth": "wrong",
        "bug_size": 1e-8,
        "verdict": "pass",
        "detail": "",
    }
    base.update(kw)
    return base


def test_shortfalls_apply_the_goals() -> None:
    rows = [
        _row(case="missed", bug_size=1e-8, verdict="pass"),
        _row(case="too-small-to-require", dtype="float32", bug_size=1e-5, verdict="pass"),
        _row(
            case="false-alarm", family="smooth", truth="correct", dtype="bfloat16", verdict="fail"
        ),
        _row(
            case="f16-not-required",
            family="smooth",
            truth="correct",
            dtype="float16",
            verdict="inconclusive",
        ),
        _row(case="kink-as-bug", family="kink", truth="kink", verdict="fail"),
        _row(case="kink-ok", family="kink", truth="kink", verdict="kink"),
        _row(case="crash", family="trap", truth="nonfinite-trap", verdict="error"),
        _row(case="other-tool", tool="torch.gradcheck", verdict="pass"),
    ]
    got = {s["case"]: s["why"] for s in tables.shortfalls({"results": rows})}
    assert got == {
        "missed": "missed bug (pass)",
        "false-alarm": "false alarm",
        "kink-as-bug": "kink called a mismatch",
        "crash": "crash",
    }


def test_quick_run_writes_tables_and_polygrad_gets_them_right(tmp_path: Path) -> None:
    out_json = tmp_path / "zoo.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--out-json",
            str(out_json),
            "--docs",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]

    payload = json.loads(out_json.read_text())
    meta = payload["meta"]
    assert meta["quick"] is True and meta["cpu_count"] >= 1
    assert {"torch", "jax", "tensorflow", "scipy", "numdifftools", "polygrad"} <= set(
        meta["versions"]
    )
    rows = payload["results"]
    by = {(r["case"], r["key"]): r for r in rows}
    for r in rows:
        assert r["verdict"] in VERDICTS
        assert r["seconds"] > 0 and r["evaluations"] > 0, r
    # every applicable tool ran on every quick case
    for case in {r["case"] for r in rows}:
        fw = case.split("/")[2]
        dtype = case.split("/")[3]
        want = {
            t.key
            for t in TOOLS
            if fw in t.frameworks and (t.variant == "defaults" or dtype != "float64")
        }
        assert {k for c, k in by if c == case} == want, case

    for fw in ("numpy", "torch"):
        bug = by[(f"bug-size/softplus-scaled-1e-02/{fw}/float32", "polygrad")]
        assert bug["verdict"] == "fail" and "MISMATCH" in bug["detail"]
        ok = by[(f"smooth/normal-logpdf-n100-at1/{fw}/float32", "polygrad")]
        assert ok["verdict"] == "pass"
    assert by[("kink/relu-at-zero/torch/float64", "polygrad")]["verdict"] == "kink"
    # the hand-written where-trick gradient is 0 * NaN = NaN at the negative entries, where
    # the derivative is 0: autodiff and reference disagree on finiteness there
    trap = by[("trap/where-trick/numpy/float64", "polygrad")]
    assert trap["verdict"] == "nonfinite" and "NONFINITE" in trap["detail"], trap
    assert trap["extra"]["ok"] is False
    assert trap["extra"]["counts"] == {"PASS": 3, "NONFINITE": 3}, trap["extra"]
    # fixed-step checkers at their defaults raise a false alarm on the float32 case
    naive = by[("smooth/normal-logpdf-n100-at1/torch/float32", "torch.gradcheck")]
    assert naive["verdict"] == "fail"
    digits = by[("smooth/softmax-xent-10/numpy/float64", "polygrad")]["extra"]
    assert digits["reference_method"] in ("quad", "mp", "float64")

    # the verdict tables go to the accuracy page, the cost table to the scale page, each
    # table under a sentence naming the run's date and machine
    md, cost = (tmp_path / "accuracy.md").read_text(), (tmp_path / "scale.md").read_text()
    for heading in (
        "### How to read this",
        "### Wrong gradients: detection rate by bug size",
        "### Correct gradients: false alarms by dtype",
        "### Kinks, jumps and ties",
        "### NaN/Inf traps",
        "### Reference accuracy",
        "### Where polygrad falls short",
    ):
        assert heading in md
    assert "| polygrad | 2/2 |" in md  # both planted 1e-2 bugs detected
    run = f"zoo run of {meta['date']} on {meta['cpu_count']} CPUs"
    assert md.count(run) == 7 and "| size | tool (framework) |" not in md
    assert cost.startswith("## Cost by problem size\n\n<!-- zoo-cost:begin -->\n")
    assert run in cost and "| size | tool (framework) |" in cost
