"""Markdown tables from the runner's JSON (``benchmarks/results/zoo.json``): the verdict
tables of ``docs/accuracy.md`` and the cost table of ``docs/scale.md``.

Definitions used by every table (per tool variant):

* detected: a planted-wrong gradient gets ``fail``;
* false alarm: a correct gradient gets ``fail``; any other non-pass answer
  (``error``, ``kink``, ``unstable``, ``inconclusive``, ``nonfinite``,
  ``timeout``) is counted separately as "other";
* kink told apart: ``kink`` (polygrad's NONSMOOTH); no other tool has that answer;
* a trap is handled when a ``flag`` trap gets anything but ``pass`` and a
  ``pass`` trap gets ``pass``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import pages

__all__ = ["render", "render_cost", "write", "shortfalls", "HOW_TO_READ"]

HOW_TO_READ = """\
Every zoo case is a function, a point and a gradient under test whose truth is known
by construction: **correct** (autodiff or a closed form, right but hard to check in low
precision, long sums, extreme magnitudes or ill-conditioned compositions), **wrong** (a
bug planted in a custom gradient rule: `torch.autograd.Function`, `jax.custom_vjp`,
`tf.custom_gradient` or a hand-written NumPy gradient), **kink** (not differentiable at
the point) or a **NaN/Inf trap**. Each tool runs on the cases of its framework, at its
documented defaults (*defaults*: inputs in the case's dtype, as a user who just calls it
would) and, for cases not already in float64, as a careful user would (*[float64]*: the
inputs cast to float64 first). A cell `k/N` counts cases out of the `N` the tool ran.
*Detected* means the tool said the gradient is wrong (`fail`); a *false alarm* is `fail`
on a correct gradient; *other* counts any other non-pass answer (an exception, a
timeout, polygrad's UNSTABLE/INCONCLUSIVE/NONFINITE/NONSMOOTH). Read detection together
with false alarms: a tool that fails every float32 case also "detects" every float32 bug."""

BUG_DTYPES = ("float32", "float64")
ALL_DTYPES = ("float64", "float32", "bfloat16", "float16")


def _rows(payload: dict[str, Any], **where: Any) -> list[dict[str, Any]]:
    out = []
    for r in payload["results"]:
        if all(r.get(k) == v for k, v in where.items()):
            out.append(r)
    return out


def _tool_keys(payload: dict[str, Any], rows: Iterable[dict[str, Any]]) -> list[str]:
    order = payload["meta"]["tools"]
    present = {r["key"] for r in rows}
    return [k for k in order if k in present]


def _table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "–"


def _size_label(x: float) -> str:
    return f"1e{int(round(math.log10(x)))}"


def detection_by_size(payload: dict[str, Any]) -> str:
    """Detection rate by planted relative error, one table per dtype."""
    parts = []
    rows = _rows(payload, family="bug-size")
    for dt in BUG_DTYPES:
        sub = [r for r in rows if r["dtype"] == dt]
        if not sub:
            continue
        sizes = sorted({r["bug_size"] for r in sub}, reverse=True)
        body = []
        for key in _tool_keys(payload, sub):
            cells = []
            for s in sizes:
                rs = [r for r in sub if r["key"] == key and r["bug_size"] == s]
                cells.append(_frac(sum(r["verdict"] == "fail" for r in rs), len(rs)))
            body.append([key, *cells])
        parts.append(
            f"**{dt}** (relative error of the VJP, `g + delta * g`)\n\n"
            + _table(["tool", *[_size_label(s) for s in sizes]], body)
        )
    return "\n\n".join(parts)


def detection_by_kind(payload: dict[str, Any]) -> str:
    """Detection of each kind of planted bug (float32 and float64 together)."""
    rows = _rows(payload, family="bug-kind")
    kinds = list(dict.fromkeys(r["what"] for r in rows))
    body = []
    for key in _tool_keys(payload, rows):
        cells, tot, det = [], 0, 0
        for k in kinds:
            rs = [r for r in rows if r["key"] == key and r["what"] == k]
            d = sum(r["verdict"] == "fail" for r in rs)
            cells.append(_frac(d, len(rs)))
            tot, det = tot + len(rs), det + d
        body.append([key, *cells, _frac(det, tot)])
    return _table(["tool", *kinds, "all"], body)


def false_alarms(payload: dict[str, Any]) -> str:
    """False alarms (``fail``) and other non-pass answers on correct gradients, by dtype."""
    rows = _rows(payload, family="smooth")
    body = []
    for key in _tool_keys(payload, rows):
        cells = []
        for dt in ALL_DTYPES:
            rs = [r for r in rows if r["key"] == key and r["dtype"] == dt]
            if not rs:
                cells.append("–")
                continue
            fa = sum(r["verdict"] == "fail" for r in rs)
            other = sum(r["verdict"] not in ("pass", "fail", "skipped") for r in rs)
            skipped = sum(r["verdict"] == "skipped" for r in rs)
            cell = _frac(fa, len(rs) - skipped)
            if other:
                cell += f" (+{other} other)"
            cells.append(cell)
        body.append([key, *cells])
    return _table(["tool", *ALL_DTYPES], body)


def kinks(payload: dict[str, Any]) -> str:
    """How each tool answers at kinks, jumps and ties."""
    rows = _rows(payload, family="kink")
    body = []
    for key in _tool_keys(payload, rows):
        rs = [r for r in rows if r["key"] == key]
        c = Counter(r["verdict"] for r in rs)
        other = len(rs) - c["kink"] - c["fail"] - c["pass"]
        body.append([key, str(len(rs)), str(c["kink"]), str(c["fail"]), str(c["pass"]), str(other)])
    return _table(
        ["tool", "cases", "told apart (kink)", "called a bug (fail)", "pass", "other"], body
    )


def traps(payload: dict[str, Any]) -> str:
    """NaN/Inf traps handled as expected, per trap."""
    rows = _rows(payload, family="trap")
    whats = list(dict.fromkeys(r["what"] for r in rows))
    body = []
    for key in _tool_keys(payload, rows):
        cells = []
        for w in whats:
            rs = [r for r in rows if r["key"] == key and r["what"] == w]
            good = sum((r["verdict"] != "pass") == (r["expect"] == "flag") for r in rs)
            cells.append(_frac(good, len(rs)))
        body.append([key, *cells])
    head = ["tool", *whats]
    expects = []
    for w in whats:
        by_fw: dict[str, set[str]] = defaultdict(set)
        for r in rows:
            if r["what"] == w:
                by_fw[r["expect"]].add(r["framework"])
        expects.append(
            f"`{w}`: "
            + "; ".join(f"{e} ({', '.join(sorted(fws))})" for e, fws in sorted(by_fw.items()))
        )
    poly = [r for r in rows if r["tool"] == "polygrad"]
    verdicts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in poly:
        verdicts[r["what"]][r["verdict"]] += 1
    lines = [
        f"- `{w}`: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts[w].items()))
        for w in whats
        if verdicts[w]
    ]
    return (
        "Expected answer per trap (flag: anything but pass):\n\n"
        + "\n".join(f"- {e}" for e in expects)
        + "\n\n"
        + _table(head, body)
        + "\n\npolygrad's answers per trap:\n\n"
        + "\n".join(lines)
    )


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    k = len(s)
    return s[k // 2] if k % 2 else 0.5 * (s[k // 2 - 1] + s[k // 2])


def reference_accuracy(payload: dict[str, Any]) -> str:
    """Digits of the reference derivative vs the closed form, and error-bar coverage."""
    rows = [
        r
        for r in payload["results"]
        if r["family"] == "smooth"
        and r["dtype"] == "float64"
        and r["key"] in ("polygrad", "numdifftools")
        and "digits" in r.get("extra", {})
    ]
    body = []
    for key in ("polygrad", "numdifftools"):
        for fw in ("numpy", "all frameworks"):
            rs = [r for r in rows if r["key"] == key and (fw != "numpy" or r["framework"] == fw)]
            if not rs or (fw != "numpy" and key == "numdifftools"):
                continue
            digits = [r["extra"]["digits"] for r in rs]
            cov = [r["extra"]["covered"] for r in rs if "covered" in r["extra"]]
            body.append(
                [
                    key,
                    fw,
                    str(len(rs)),
                    f"{_median(digits):.1f}",
                    f"{min(digits):.1f}",
                    f"{_median(cov):.2f}" if cov else "–",
                    _frac(sum(c == 1.0 for c in cov), len(cov)),
                ]
            )
    head = [
        "tool",
        "frameworks",
        "cases",
        "median digits",
        "worst digits",
        "median coverage",
        "cases fully covered",
    ]
    per = []
    by_case: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if r["framework"] == "numpy":
            by_case[r["what"]][r["key"]] = r["extra"]
    for what, d in by_case.items():

        def cell(key: str, d: dict[str, dict[str, Any]] = d) -> str:
            e = d.get(key)
            if not e:
                return "–"
            cov = f", covered {e['covered']:.2f}" if "covered" in e else ""
            return f"{e['digits']:.1f} digits{cov}"

        per.append([what, cell("polygrad"), cell("numdifftools")])
    return (
        _table(head, body)
        + "\n\nPer function (NumPy, float64):\n\n"
        + _table(["function", "polygrad", "numdifftools"], per)
    )


COST_GROUPS = (
    ("smooth/softmax-xent-10/", "n = 10, full Jacobian"),
    ("smooth/log1p-square-sum-n10000/", "n = 1e4, full Jacobian"),
    ("cost/normal-logpdf-n1000000/", "n = 1e6, projections"),
)
"""Case-name prefixes (float64 cases only) of the cost table's rows."""


PROJECTION_TOOLS = ("torch.gradcheck(fast)", "jax.check_grads")
"""Tools that check random projections of the Jacobian, not every entry."""
MIB = 2**20
DETAIL_LIMIT = 200
"""The length at which the runner cuts a recorded message (``first_line``'s limit)."""


def _kind(tool: str, extra: dict[str, Any] | None = None) -> str:
    if tool in PROJECTION_TOOLS or "fast_mode" in tool:
        return "projections"
    if extra and extra.get("strategy") == "projections":
        return "projections"
    return "full"


def _cost_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for prefix, label in COST_GROUPS:
        for r in payload["results"]:
            if (
                r["case"].startswith(prefix)
                and r["dtype"] == "float64"
                and r["verdict"] not in ("skipped",)
            ):
                out.append(
                    {
                        "group": label,
                        "tool": r["tool"],
                        "kind": _kind(r["tool"], r.get("extra")),
                        "label": f"{r['key']} ({r['framework']})",
                        "seconds": r["seconds"] if r["verdict"] != "timeout" else None,
                        "evaluations": r["evaluations"],
                        "peak_memory": r["peak_memory"],
                        "verdict": r["verdict"],
                    }
                )
    cnn = payload.get("cnn") or {}
    for fw, block in cnn.items():
        for row in block.get("rows") or []:
            tool = "polygrad" if row["tool"].startswith("polygrad") else row["tool"]
            out.append(
                {
                    "group": CNN_GROUP,
                    "tool": tool,
                    "kind": _kind(row["tool"]),
                    "label": f"{row['tool']} ({fw})",
                    "seconds": row["seconds"],
                    "evaluations": row["evaluations"],
                    "peak_memory": None,
                    "verdict": "pass" if row["passed"] else "fail",
                }
            )
    return out


CNN_GROUP = "n = 784, case-2 CNN"


def _ratio(x: float | None, others: list[float], floor: float = 0.0) -> str:
    if x is None or not others:
        return "–"
    base = max(min(others), floor)
    if base <= 0:
        return "–"
    return f"{max(x, floor) / base:.2g}x"


def cost(payload: dict[str, Any]) -> str:
    """Cost of one check: wall time, calls, peak memory, ratios to the best other tool.

    Two tables, each narrow enough for the text column: the answer and the wall time,
    then the calls and the peak memory, with the same rows in the same order. Ratios
    compare a tool with the fastest (fewest calls, least memory) other tool of the same
    kind (full Jacobian or projections) at the same size; memory below 1 MiB counts as
    1 MiB.
    """
    rows = _cost_rows(payload)
    time_body, calls_body = [], []
    labels = [COST_GROUPS[0][1], COST_GROUPS[1][1], CNN_GROUP, COST_GROUPS[2][1]]
    for label in labels:
        grp = [r for r in rows if r["group"] == label]
        for r in grp:
            others = [o for o in grp if o["tool"] != r["tool"] and o["kind"] == r["kind"]]
            secs = [o["seconds"] for o in others if o["seconds"] is not None]
            evals = [o["evaluations"] for o in others if o["evaluations"]]
            mems = [o["peak_memory"] for o in others if o["peak_memory"] is not None]
            mem = r["peak_memory"]
            time_body.append(
                [
                    label,
                    r["label"],
                    r["kind"],
                    r["verdict"],
                    "–" if r["seconds"] is None else f"{r['seconds']:.3g}",
                    _ratio(r["seconds"], secs),
                ]
            )
            calls_body.append(
                [
                    label,
                    r["label"],
                    r["kind"],
                    "–" if r["evaluations"] is None else str(r["evaluations"]),
                    _ratio(r["evaluations"], evals),
                    "–" if mem is None else ("<1" if mem < MIB else f"{mem / MIB:.0f}"),
                    _ratio(mem, mems, floor=MIB),
                ]
            )
    time_head = ["size", "tool (framework)", "checks", "answer", "wall s", "vs fastest other"]
    calls_head = [
        "size",
        "tool (framework)",
        "checks",
        "calls",
        "vs fewest other",
        "peak MiB",
        "vs least other",
    ]
    return (
        "**Answer and wall time**\n\n"
        + _table(time_head, time_body)
        + "\n\n**Calls of the function and peak memory**\n\n"
        + _table(calls_head, calls_body)
    )


def cnn_speedup(payload: dict[str, Any]) -> str:
    """polygrad vs ``tf.test.compute_gradient`` on the case-2 CNN, same run."""
    rows = ((payload.get("cnn") or {}).get("tensorflow") or {}).get("rows") or []
    poly = [r for r in rows if r["tool"].startswith("polygrad")]
    tfcg = [r for r in rows if r["tool"] == "tf.test.compute_gradient"]
    if not poly or not tfcg:
        return "The CNN was not run."
    ratio = tfcg[0]["seconds"] / poly[0]["seconds"]
    return (
        f"Full 784-pixel input-gradient check of the case-2 CNN (Keras): polygrad "
        f"{poly[0]['seconds']:.1f} s ({poly[0]['result']}), `tf.test.compute_gradient` "
        f"{tfcg[0]['seconds']:.1f} s: polygrad is **{ratio:.1f}x** "
        + ("faster" if ratio >= 1 else "slower")
        + " (both are single calls in the zoo run, `benchmarks/results/zoo.json`; the "
        "[latency run](speed.md#the-case-2-cnn) times warm and first calls)."
    )


def shortfalls(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """polygrad results that miss the goals.

    The goals: no false alarm on correct gradients in float32, float64 and
    bfloat16; every planted bug with relative error >= 1e-4 (float32) or >= 1e-8
    (float64) detected; no kink called a mismatch; no crash.
    """
    out = []
    for r in payload["results"]:
        if r["tool"] != "polygrad" or r["family"] == "cost":
            continue
        why = None
        if r["verdict"] in ("error", "timeout"):
            why = "crash" if r["verdict"] == "error" else "timeout"
        elif r["truth"] == "correct" and r["dtype"] in ("float32", "float64", "bfloat16"):
            if r["verdict"] == "fail":
                why = "false alarm"
            elif r["verdict"] != "pass":
                why = f"correct gradient not passed ({r['verdict']})"
        elif r["truth"] == "wrong" and r["verdict"] != "fail":
            limit = {"float32": 1e-4, "float64": 1e-8}.get(r["dtype"], math.inf)
            if r["bug_size"] >= limit * (1 - 1e-9):
                why = f"missed bug ({r['verdict']})"
        elif r["truth"] == "kink" and r["verdict"] == "fail":
            why = "kink called a mismatch"
        if why == "crash" and "InputValueError" in r["detail"]:
            why = "refused the point (error)"
        if why:
            out.append(
                {"case": r["case"], "why": why, "verdict": r["verdict"], "detail": r["detail"]}
            )
    return out


def source(meta: dict[str, Any]) -> str:
    """Which run a zoo table comes from: its date, machine and results file."""
    return (
        f"zoo run of {meta['date']} on {meta['cpu_count']} CPUs ({meta['platform']}), "
        "`benchmarks/results/zoo.json`"
    )


def render(payload: dict[str, Any]) -> str:
    """The zoo's verdict tables: the ``zoo`` block of ``docs/accuracy.md``.

    Parameters
    ----------
    payload : dict
        The runner's JSON.

    Returns
    -------
    str
        Markdown: the run, how to read the tables, one table per kind of case (each with
        a sentence saying what it counts and which run it comes from), and polygrad's
        shortfalls.
    """
    meta = payload["meta"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    zoo = [r for r in payload["results"] if r["family"] != "cost"]
    n_cases = len({r["case"] for r in zoo})
    truths = Counter(t for _, t in {(r["case"], r["truth"]) for r in zoo})
    short = shortfalls(payload)
    src = "one call of each tool per case, " + source(meta)
    parts = [
        "Generated by `python -m benchmarks"
        + (" --quick" if meta["quick"] else "")
        + f"` on {meta['date']} in {meta['total_seconds'] / 60:.1f} min on a machine with "
        f"{meta['cpu_count']} CPUs ({meta['platform']}). Versions: {versions}.",
        "",
        f"{n_cases} zoo cases ("
        + ", ".join(f"{v} {k}" for k, v in sorted(truths.items()))
        + f"), {len(zoo)} tool runs; per-run timeout {meta['timeout']:g} s.",
        "",
        "### How to read this",
        "",
        HOW_TO_READ,
        "",
        "Tool settings: " + meta["tool_settings"],
        "",
        "### Wrong gradients: detection rate by bug size",
        "",
        f"Planted bugs detected (`fail`) out of those of each relative size; {src}.",
        "",
        detection_by_size(payload),
        "",
        "### Wrong gradients: detection by kind of bug",
        "",
        f"Planted bugs detected out of those of each kind, float32 and float64 together; {src}.",
        "",
        detection_by_kind(payload),
        "",
        "### Correct gradients: false alarms by dtype",
        "",
        "`fail` on a correct gradient out of the correct cases of each dtype (*other*: any "
        f"other non-pass answer); {src}.",
        "",
        false_alarms(payload),
        "",
        "### Kinks, jumps and ties",
        "",
        f"Answers on the cases not differentiable at the point; {src}.",
        "",
        kinks(payload),
        "",
        "### NaN/Inf traps",
        "",
        f"Answers as expected on each trap, and polygrad's answers; {src}.",
        "",
        traps(payload),
        "",
        "### Reference accuracy",
        "",
        "Digits correct of the numerical derivative against the closed form "
        "(`-log10(max|estimate - truth| / max|truth|)`, capped at 17) and coverage (the "
        "fraction of entries whose true error is within the stated error bar, allowing the "
        "float64 closed form its own round-off, 64 eps x (|entry| + RMS of the gradient)), "
        f"on the float64 correct cases with a closed form; {src}.",
        "",
        reference_accuracy(payload),
        "",
        "### Where polygrad falls short",
        "",
        "polygrad's answers that miss its goals (a false alarm, a missed bug of at least "
        "1e-4 in float32 or 1e-8 in float64, a kink called a bug, an error or a timeout); "
        f"{src}.",
        "",
    ]
    if short:
        parts.append(
            _table(
                ["case", "why", "detail"],
                [[f"`{s['case']}`", s["why"], _detail(s["detail"])] for s in short],
            )
        )
    else:
        parts.append("Nowhere on this zoo.")
    return "\n".join(parts) + "\n"


def _detail(text: str) -> str:
    """A recorded message as a table cell; one the runner cut at its length limit
    (:func:`benchmarks.tools.common.first_line`) ends in an ellipsis."""
    cell = text.replace("|", "\\|")
    return cell + " …" if len(text) >= DETAIL_LIMIT else cell


def render_cost(payload: dict[str, Any]) -> str:
    """The zoo's cost table: the ``zoo-cost`` block of ``docs/scale.md``.

    Parameters
    ----------
    payload : dict
        The runner's JSON.

    Returns
    -------
    str
        Markdown: what the table measures and which run it comes from, the table, and
        the case-2 CNN against ``tf.test.compute_gradient``.
    """
    return "\n".join(
        [
            "One call of each tool per size, float64 (the CNN: float32), from the "
            f"{source(payload['meta'])}; a single call, so its time is noisy: ratios within "
            "the run are the useful part. n = 10 is `smooth/softmax-xent-10`, n = 1e4 "
            "`smooth/log1p-square-sum-n10000`, the CNN is `benchmarks/cnn_input_gradient.py`, "
            "n = 1e6 is a projection check. *checks*: whether the tool compares every "
            "Jacobian entry (full) or random projections (gradcheck's fast mode and "
            "`check_grads` always check projections). *calls*: calls of the function counted "
            "by a wrapper (a batched call counts once; for polygrad on the CNN, the number of "
            "reference points). *peak MiB*: rise of the process's peak resident memory during "
            "the call (not measured per tool for the CNN, whose benchmark runs several tools "
            "in one call). The *vs* columns are ratios against the fastest "
            "(fewest, least) *other* tool of the same kind (full or projections) at the same "
            "size in this run. The same rows, in the same order, are in both tables.",
            "",
            cost(payload),
            "",
            cnn_speedup(payload),
            "",
        ]
    )


HEADINGS = {"zoo": "## The gradient zoo", "zoo-cost": "## Cost by problem size"}
"""The heading put above each block on a page that does not have it yet."""


def write(docs: Path, payload: dict[str, Any]) -> list[Path]:
    """Write the zoo's blocks into the pages in ``docs`` (see :mod:`benchmarks.pages`).

    Parameters
    ----------
    docs : Path
        The folder of the pages.
    payload : dict
        The runner's JSON.

    Returns
    -------
    list of Path
        The pages written.
    """
    out = []
    for name, content in (("zoo", render(payload)), ("zoo-cost", render_cost(payload))):
        path = docs / pages.BLOCKS[name]
        pages.write_block(path, name, content, HEADINGS[name])
        out.append(path)
    return out
