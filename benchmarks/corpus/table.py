"""The corpus table: per framework and dtype, polygrad beside the framework's own checker.

Reads the JSON-lines rows of :mod:`benchmarks.corpus.worker` and writes Markdown
into the block between the ``corpus`` markers of ``docs/accuracy.md`` (see
:mod:`benchmarks.pages`).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import pages

__all__ = ["read_rows", "summary", "render", "write_block", "BEGIN", "END"]

BEGIN, END = "<!-- corpus:begin -->", "<!-- corpus:end -->"
DTYPES = ("bfloat16", "float16", "float32", "float64")
FAIL_ON_CORRECT = ("MISMATCH", "UNSTABLE")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file; a later row of the same case replaces an earlier one."""
    rows: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[r["name"]] = r
    return list(rows.values())


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100.0 * a / b:.0f}%)" if b else "–"


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "–"


def summary(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Counts per ``(framework, dtype)``: the numbers of the table."""
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    times: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        k = (r["framework"], r["dtype"])
        s = out[k]
        if r["status"] != "case":
            s[r["status"]] += 1
            continue
        s["cases"] += 1
        pg, chk = r["polygrad"], r["checker"]
        s[f"checker_{chk['verdict']}"] += 1
        cw = r.get("checker_working") or chk
        s[f"checker_working_{cw['verdict']}"] += 1
        times[k]["checker"].append(chk["seconds"])
        times[k]["polygrad"].append(pg["seconds"])
        if pg.get("error_kind") == "exception":
            s["exceptions"] += 1
        if pg.get("error_kind") == "input":
            s["input_errors"] += 1
        if not r["correct"]:
            s["truth_unknown"] += 1
            continue
        s["correct"] += 1
        v = pg["verdict"]
        s["ok"] += int(v in ("PASS", "NONSMOOTH") and pg["ok"])
        s["fail_on_correct"] += int(v in FAIL_ON_CORRECT)
        s["inconclusive"] += int(v == "INCONCLUSIVE")
        s["nonfinite"] += int(v == "NONFINITE")
        for b in r["bugs"].values():
            if b.get("planted"):
                s["planted"] += 1
                s["caught"] += int(bool(b.get("caught")))
            else:
                s["plant_noop"] += 1
    for k, t in times.items():
        out[k]["checker_median_s"] = _median(t["checker"])
        out[k]["polygrad_median_s"] = _median(t["polygrad"])
    return out


def _main_table(rows: list[dict[str, Any]]) -> list[str]:
    """Two tables with the same rows, each narrow enough for the text column: polygrad's
    verdicts on the correct cases, then the planted bugs and the framework's checker."""
    s = summary(rows)
    verdicts = [
        "| framework | dtype | cases | correct | PASS/NONSMOOTH ok "
        "| MISMATCH or UNSTABLE on correct | INCONCLUSIVE on correct | NONFINITE on correct "
        "| exceptions (timeouts) "
        "| truth unknown |",
        "|" + " --- |" * 10,
    ]
    checkers = [
        "| framework | dtype | planted bugs caught | plants that round away "
        "| framework checker (float64): pass / fail / error "
        "| framework checker (working dtype): pass / fail / error "
        "| median s: checker (float64), polygrad |",
        "|" + " --- |" * 7,
    ]
    for fw in sorted({k[0] for k in s}):
        for dt in DTYPES:
            c = s.get((fw, dt))
            if not c:
                continue
            verdicts.append(
                f"| {fw} | {dt} | {c['cases']} | {c['correct']} | {_pct(c['ok'], c['correct'])} "
                f"| {c['fail_on_correct']} | {c['inconclusive']} | {c['nonfinite']} "
                f"| {c['exceptions']} ({c['timeout']}) "
                f"| {c['truth_unknown']} |"
            )
            checkers.append(
                f"| {fw} | {dt} | {_pct(c['caught'], c['planted'])} "
                f"| {c['plant_noop']} "
                f"| {c['checker_pass']} / {c['checker_fail']} / {c['checker_error']} "
                f"| {c['checker_working_pass']} / {c['checker_working_fail']} "
                f"/ {c['checker_working_error']} "
                f"| {c['checker_median_s']}, {c['polygrad_median_s']} |"
            )
    return [
        "**polygrad on the cases**",
        "",
        *verdicts,
        "",
        "**Planted bugs, and the framework's own checker on the same cases**",
        "",
        *checkers,
    ]


def _point(r: dict[str, Any]) -> str:
    p = r.get("point")
    return f"x = {p}" if p is not None else f"x: {r['region']} draw, n = {r['n']}"


def _listing(rows: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    correct = [r for r in rows if r["status"] == "case" and r["correct"]]
    groups = [
        (
            "MISMATCH or UNSTABLE on a correct case",
            [r for r in correct if r["polygrad"]["verdict"] in FAIL_ON_CORRECT],
        ),
        (
            "INCONCLUSIVE on a correct case",
            [r for r in correct if r["polygrad"]["verdict"] == "INCONCLUSIVE"],
        ),
        (
            "NONFINITE on a correct case",
            [r for r in correct if r["polygrad"]["verdict"] == "NONFINITE"],
        ),
        (
            "polygrad exceptions (not a documented input error)",
            [
                r
                for r in rows
                if r["status"] == "case" and r["polygrad"].get("error_kind") == "exception"
            ],
        ),
        ("timeouts", [r for r in rows if r["status"] == "timeout"]),
    ]
    for title, rs in groups:
        out += ["", f"**{title}: {len(rs)}**", ""]
        for r in sorted(rs, key=lambda r: r["name"]):
            pg = r.get("polygrad", {})
            why = _sentences(pg.get("error") or pg.get("why") or r.get("reason", ""))
            w = pg.get("worst") or {}
            nums = ""
            if w:
                nums = (
                    f"; worst {w.get('name')}: autodiff {_num(w.get('autodiff'))}, "
                    f"reference {_num(w.get('reference'))} ± {_num(w.get('reference_error'))}"
                )
            at = _point(r) if "n" in r else ""
            repro = f"`{r['repro']}`, " if r.get("repro") else ""
            out.append(f"- `{r['name']}`: {repro}{at} — {why}{nums}")
    return out


STORED_WHY = 300
"""The length at which a run stored a report's reason (older runs cut it there)."""


def _sentences(text: str) -> str:
    """``text`` without a trailing period, cut at its last sentence end (with "…") where a
    run stored it cut mid-sentence at :data:`STORED_WHY` characters."""
    text = text.strip()
    if len(text) >= STORED_WHY:
        end = max(text.rfind(". "), text.rfind("; "))
        text = (text[:end] if end > 0 else text) + " …"
    return text.rstrip(".")


def _num(v: Any) -> str:
    """A stored number for the table: NaN for None (a non-finite value), else 4 digits."""
    if v is None:
        return "NaN"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _findings(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        f = r.get("finding")
        if f and (r["source"], r["entry"]) not in seen:
            seen[(r["source"], r["entry"])] = {**f, "row": r}
    out = [
        "",
        f"**Findings: {len(seen)} operators whose own float64 gradient is MISMATCH against mp**",
        "",
    ]
    if not seen:
        return out + ["(none in this run)"]
    out += [
        "| operator | repro | at | autodiff (float64) | mp reference ± error |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (src, name), f in sorted(seen.items()):
        r = f["row"]
        out.append(
            f"| `{src}.{name}` | `{r['repro']}` | x = {f.get('point')} ({f.get('name')}) "
            f"| {f.get('autodiff')} | {f.get('reference')} ± {f.get('reference_error')} |"
        )
    return out


def _skips(rows: list[dict[str, Any]]) -> list[str]:
    by: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        if r["status"] == "skipped":
            reason = r["reason"].split(":")[0]
            by[r["source"]][reason] += 1
    out = ["", "**Skipped (recorded reasons, per catalog)**", ""]
    for src, c in sorted(by.items()):
        out.append(f"- {src}: " + "; ".join(f"{why} ({n})" for why, n in c.most_common()))
    return out


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The Markdown block (without markers)."""
    cases = [r for r in rows if r["status"] == "case"]
    entries = {(r["source"], r["entry"]) for r in cases}
    lines = [
        f"Run of {meta.get('date', '?')} ({meta.get('mode', '?')}) on "
        f"{meta.get('cpu_count', '?')} CPUs, each case checked once: {len(rows)} cases "
        "attempted, "
        f"{len(cases)} run ({len(entries)} catalog entries), "
        f"{sum(r['status'] == 'skipped' for r in rows)} skipped with a recorded reason, "
        f"{sum(r['status'] == 'timeout' for r in rows)} timeouts; "
        f"{meta.get('planned', '?')} cases planned in this mode. "
        f"Versions: {meta.get('versions', '?')}.",
        "",
        *_main_table(rows),
        *_findings(rows),
        *_listing(rows),
        *_skips(rows),
        "",
    ]
    return "\n".join(lines)


def write_block(md: Path, block: str, title: str) -> None:
    """Replace the text between the corpus markers of ``md`` (append a section if absent)."""
    pages.write_block(md, "corpus", block, title)
