"""Numbers in the docs agree with the benchmark results they come from.

The benchmark page's latency table and the ratios, counts and times its prose
states are read back and compared with ``benchmarks/results/latency.json`` and
``zoo.json``. A number is taken to agree when it equals the result to the digits
it shows (half a unit of its last digit). :func:`contradictions` is a pure
function of the pages and the results, so a wrong number planted in a copy of a
page shows that each check can fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LATENCY_BLOCK = re.compile(r"<!-- latency:begin -->(.*?)<!-- latency:end -->", re.DOTALL)
NUMBER = r"([\d.,]+)"


def load_results() -> dict[str, Any]:
    return {name: json.loads((RESULTS / f"{name}.json").read_text()) for name in ("latency", "zoo")}


def load_pages() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}


def _agrees(shown: str, value: float) -> bool:
    """Whether ``shown`` (as printed, e.g. ``"0.6"``, ``"1,570"``) is ``value`` to its digits."""
    text = shown.replace(",", "").rstrip(".")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value) <= 0.5 * 10.0**-decimals + 1e-9 * abs(value)


def _seconds(cell: str) -> float | None:
    m = re.fullmatch(r"\s*([\d.]+) (ms|s)\s*", cell)
    if m is None:
        return None
    return float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1.0)


# ---- the latency table ------------------------------------------------------------------


def _time_agrees(cell: str, value: float) -> bool:
    m = re.fullmatch(r"\s*([\d.]+) (ms|s)\s*", cell)
    assert m is not None, cell
    return _agrees(m.group(1), value * (1e3 if m.group(2) == "ms" else 1.0))


def latency_table_contradictions(page: str, rows: list[dict[str, Any]]) -> list[str]:
    """Every cell of the latency table against its row of ``latency.json``."""
    block = LATENCY_BLOCK.search(page)
    if block is None:
        return ["benchmarks.md: no latency table between its markers"]
    lines = [ln for ln in block.group(1).splitlines() if ln.startswith("| ") and "---" not in ln]
    table = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[1:]]
    if len(table) != len(rows):
        return [f"latency table: {len(table)} rows, latency.json {len(rows)}"]
    out = []
    for cells, row in zip(table, rows, strict=True):
        for call, (tool, ours, ratio) in (("warm", cells[2:5]), ("first", cells[5:8])):
            if f"tool_{call}" not in row or f"polygrad_{call}" not in row:
                continue
            expected = {
                tool: row[f"tool_{call}"],
                ours: row[f"polygrad_{call}"],
            }
            for cell, value in expected.items():
                if not _time_agrees(cell, value):
                    out.append(f"latency table {cells[0]!r}, {call}: {cell} is not {value:.4g} s")
            want = row[f"polygrad_{call}"] / row[f"tool_{call}"]
            if not _agrees(ratio.rstrip("x"), want):
                out.append(f"latency table {cells[0]!r}, {call}: ratio {ratio} is not {want:.3g}")
    return out


# ---- ratios, counts and times stated in prose -------------------------------------------


def _cnn(results: dict[str, Any], framework: str, tool: str) -> float:
    rows = results["zoo"]["cnn"][framework]["rows"]
    return next(float(r["seconds"]) for r in rows if r["tool"].startswith(tool))


def _latency(results: dict[str, Any], **match: Any) -> dict[str, Any]:
    rows = results["latency"]["rows"]
    return next(r for r in rows if all(r.get(k) == v for k, v in match.items()))


def _zoo_correct(results: dict[str, Any]) -> tuple[int, int]:
    """(correct zoo cases polygrad passes, correct zoo cases); the cost rows are no cases."""
    rows = [r for r in results["zoo"]["results"] if r["family"] != "cost"]
    cases = {r["case"] for r in rows if r["truth"] == "correct"}
    ours = [r for r in rows if r["truth"] == "correct" and r["tool"].startswith("polygrad")]
    return sum(r["verdict"] == "pass" for r in ours), len(cases)


def _tf(r: dict[str, Any], call: str) -> float:
    return r[f"tool_{call}"] / r[f"polygrad_{call}"]


def _pt(r: dict[str, Any], call: str) -> float:
    return r[f"polygrad_{call}"] / r[f"tool_{call}"]


Claim = tuple[str, str, Callable[[dict[str, Any]], list[float]]]
CLAIMS: list[Claim] = [
    (
        "benchmarks.md",
        r"polygrad is \*\*" + NUMBER + r"x\*\* faster",
        lambda R: [
            _cnn(R, "tensorflow", "tf.test") / _cnn(R, "tensorflow", "polygrad"),
        ],
    ),
    (
        "benchmarks.md",
        r"\*Every correct gradient passes\*: " + NUMBER + " of the " + NUMBER + " correct zoo",
        lambda R: list(map(float, _zoo_correct(R))),
    ),
    (
        "benchmarks.md",
        r"2\.4 s in TensorFlow against\s+16\.7 s for `compute_gradient` \(" + NUMBER + "x faster",
        lambda R: [_cnn(R, "tensorflow", "tf.test") / _cnn(R, "tensorflow", "polygrad")],
    ),
    (
        "benchmarks.md",
        NUMBER
        + r" s in PyTorch against "
        + NUMBER
        + r" s for\s+`gradcheck` on a float64 copy \("
        + NUMBER
        + "x slower",
        lambda R: [
            _cnn(R, "torch", "polygrad"),
            _cnn(R, "torch", "torch.autograd.gradcheck float64"),
            _cnn(R, "torch", "polygrad") / _cnn(R, "torch", "torch.autograd.gradcheck float64"),
        ],
    ),
    (
        "benchmarks.md",
        NUMBER
        + r"x faster\s+than `compute_gradient` warm and "
        + NUMBER
        + r"x on the first call; "
        + NUMBER
        + r"x slower than `gradcheck`\s+warm and "
        + NUMBER
        + "x on the first call",
        lambda R: [
            _tf(_latency(R, job="cnn:tensorflow"), "warm"),
            _tf(_latency(R, job="cnn:tensorflow"), "first"),
            _pt(_latency(R, job="cnn:torch"), "warm"),
            _pt(_latency(R, job="cnn:torch"), "first"),
        ],
    ),
    (
        "benchmarks.md",
        r"\*Keras\*: " + NUMBER + r" s warm .*? " + NUMBER + r" s on the first call of a new\s+"
        r"function .*?`tf.test.compute_gradient`'s "
        + NUMBER
        + r" s: "
        + NUMBER
        + r"x faster warm\s+\(ratio "
        + NUMBER
        + r"\), "
        + NUMBER
        + r"x faster on the first call"
        r" \(ratio " + NUMBER + r"\)",
        lambda R: [
            (r := _latency(R, job="cnn:tensorflow"))["polygrad_warm"],
            r["polygrad_first"],
            r["tool_warm"],
            _tf(r, "warm"),
            _pt(r, "warm"),
            _tf(r, "first"),
            _pt(r, "first"),
        ],
    ),
    (
        "benchmarks.md",
        r"\*PyTorch\*: " + NUMBER + r" s warm .*? " + NUMBER + r" s first .*?against\s+"
        r"`gradcheck`'s " + NUMBER + " s",
        lambda R: [
            (r := _latency(R, job="cnn:torch"))["polygrad_warm"],
            r["polygrad_first"],
            r["tool_warm"],
        ],
    ),
    (
        "benchmarks.md",
        r"\*n = 1e4\*: " + NUMBER + "x and " + NUMBER + "x `gradcheck`",
        lambda R: [_pt(r, "warm") for r in R["latency"]["rows"] if r["n"] == 10000],
    ),
    (
        "benchmarks.md",
        r"\*n = 1e6\*: " + NUMBER + r"x one forward\+backward, \+" + NUMBER + " MB peak",
        lambda R: [
            _pt(r := _latency(R, n=1000000), "warm"),
            r["extra_peak_mb"],
        ],
    ),
    (
        "benchmarks.md",
        r"takes "
        + NUMBER
        + r" s against the checkers'\s+"
        + NUMBER
        + r" s \("
        + NUMBER
        + r"x\), the first run "
        + NUMBER
        + r" s \("
        + NUMBER
        + r"x\)",
        lambda R: [
            (r := _latency(R, job="suite:200"))["polygrad_warm"],
            r["tool_warm"],
            _pt(r, "warm"),
            r["polygrad_first"],
            _pt(r, "first"),
        ],
    ),
]
"""(page, pattern whose groups are numbers, the values they must show, in order)."""


def contradictions(pages: dict[str, str], results: dict[str, Any]) -> list[str]:
    """Every number of the latency table and of :data:`CLAIMS` that the results contradict,
    and every claim whose sentence is gone from its page (so a rewrite cannot drop a check)."""
    out = latency_table_contradictions(pages["benchmarks.md"], results["latency"]["rows"])
    for page, pattern, expected in CLAIMS:
        m = re.search(pattern, pages[page], re.DOTALL)
        if m is None:
            out.append(f"{page}: no sentence matches {pattern!r}")
            continue
        for shown, value in zip(m.groups(), expected(results), strict=True):
            if not _agrees(shown, value):
                out.append(f"{page}: {shown!r} in {m.group(0)!r} is not {value:.4g}")
    return out


def test_benchmark_numbers_in_the_docs_agree_with_the_results():
    assert contradictions(load_pages(), load_results()) == []


@pytest.mark.parametrize(
    ("right", "wrong"),
    [
        ("| 23.5x |", "| 2.5x |"),  # a ratio of the latency table
        ("| 15.2 ms |", "| 16.2 ms |"),  # a time of the latency table
        ("**6.9x** faster", "**10.0x** faster"),
        ("118 of the 118 correct zoo", "120 of the 120 correct zoo"),
        (
            "11.5x faster\n  than `compute_gradient` warm",
            "6.9x faster\n  than `compute_gradient` warm",
        ),
        ("153x one forward+backward", "214x one forward+backward"),
    ],
)
def test_a_planted_wrong_number_is_found(right, wrong):
    pages = load_pages()
    assert right in pages["benchmarks.md"], right
    pages["benchmarks.md"] = pages["benchmarks.md"].replace(right, wrong, 1)
    found = contradictions(pages, load_results())
    planted = wrong.strip("| *\n").split()[0].rstrip("x")
    assert found and all(planted in f for f in found), found


def test_comparison_page_states_latency_ratios_through_build_time_values():
    """The comparison page's ratios are <!-- value: ... --> markers filled from the results
    at build time, never typed numbers that a new run would leave behind."""
    page = load_pages()["comparison.md"]
    assert "orders of magnitude" not in page
    for name in ("latency.framework_warm", "latency.cnn_tf_warm", "cnn.tf_ratio"):
        assert f"<!-- value: {name} -->" in page
    prose = re.sub(r"```.*?```", "", page, flags=re.DOTALL)
    assert not re.search(r"\b\d+(\.\d+)?x (faster|slower)\b", prose)
