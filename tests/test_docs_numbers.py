"""Numbers in the docs agree with the results they come from.

Every page (``docs/*.md`` and ``README.md``; not ``docs/changelog.md``, whose numbers
are dated records of runs whose results files were replaced or never kept) is held to
three checks, each a pure function of the pages and the results, so that a wrong number
planted in a copy of a page shows that each can fail:

* :func:`generated_contradictions`: the blocks that the benchmarks write on the pages
  of :data:`benchmarks.pages.BLOCKS` (the zoo's verdict tables on ``accuracy.md``, its
  cost table on ``scale.md``, the latency tables on ``speed.md`` and ``scale.md``, the
  corpus block on ``accuracy.md``) are what their renderers make of
  ``benchmarks/results/`` now, the sentence above each table included: its method,
  machine and date come from the results file too.
* :func:`contradictions`: the latency tables cell by cell, and every claim of
  :data:`CLAIMS`: a sentence whose numbers must show values computed from a results
  file (or, for a constant of the code, from the code). A number agrees when it equals
  the value to the digits it shows (half a unit of its last digit). A claim whose
  sentence is gone from its page is reported too, so a rewrite cannot drop a check.
* :func:`unsourced`: every number in a sentence about speed (a ratio ``2.4x``,
  "faster", "slower", "ratio", a time in ``ms``, ``s``, ``µs`` or minutes) or about
  correctness counts (``118 of 120``), on every page, is one of the numbers of a claim,
  or of a kind that is no measurement (:data:`NOT_MEASURED`: a problem size
  ``n = 1e4``, a version, a planted factor ``1 + 1e-3``...). The date of a run is no
  such kind: it comes from the results file, in a block the benchmarks write or through
  a ``<!-- value: ... -->`` marker. Code blocks, inline code and those markers (filled
  from the results at build time by ``docs/hooks.py``) are not prose, and numbers
  joined to a word (``float64``, ``case-2``, ``28×28``, ``20x20``) are names, not
  measurements.
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
NUMBER = r"((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
HISTORY = ("changelog.md",)
"""Pages of dated records, not held to the results files of today."""


def load_results() -> dict[str, Any]:
    from benchmarks.corpus.table import read_rows

    out: dict[str, Any] = {
        name: json.loads((RESULTS / f"{name}.json").read_text()) for name in ("latency", "zoo")
    }
    out["corpus"] = read_rows(RESULTS / "corpus.jsonl")
    out["corpus_meta"] = json.loads((RESULTS / "corpus.meta.json").read_text())
    return out


def load_pages() -> dict[str, str]:
    pages = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
    pages["README.md"] = (ROOT / "README.md").read_text()
    return pages


def _agrees(shown: str, value: float) -> bool:
    """Whether ``shown`` (as printed, e.g. ``"0.6"``, ``"1,570"``) is ``value`` to its digits."""
    text = shown.replace(",", "").rstrip(".")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value) <= 0.5 * 10.0**-decimals + 1e-9 * abs(value)


# ---- the blocks the benchmarks write ----------------------------------------------------


def generated_blocks(page: str) -> list[tuple[int, int]]:
    """Spans of a page written by the benchmarks (every block of
    :data:`benchmarks.pages.BLOCKS` it holds, markers included): checked by re-rendering
    them."""
    from benchmarks import pages

    spans = []
    for name in pages.BLOCKS:
        m = pages.find(page, name)
        if m is not None:
            spans.append(m.span())
    return spans


def rendered_blocks(results: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each block the benchmarks write: ``name -> (results file, what its renderer makes
    of that file now)``."""
    from benchmarks import latency, tables
    from benchmarks.corpus import table as corpus

    out = {
        "zoo": ("zoo.json", tables.render(results["zoo"])),
        "zoo-cost": ("zoo.json", tables.render_cost(results["zoo"])),
        "corpus": ("corpus.jsonl", corpus.render(results["corpus"], results["corpus_meta"])),
    }
    for name, block in latency.blocks(results["latency"]).items():
        out[name] = ("latency.json", block)
    return out


def generated_contradictions(pages: dict[str, str], results: dict[str, Any]) -> list[str]:
    """Each block the benchmarks write, on the page :data:`benchmarks.pages.BLOCKS` puts it,
    against what its renderer makes of the results files now (a changed cell or date is a
    number no results file holds; a block gone from its page is reported too)."""
    from benchmarks.pages import BLOCKS, find

    out = []
    for name, (source, rendered) in rendered_blocks(results).items():
        page = BLOCKS[name]
        m = find(pages[page], name)
        if m is None:
            out.append(f"{page}: no block {name!r} (written from {source})")
            continue
        want = rendered.strip().splitlines()
        lines = m.group(1).strip().splitlines()
        wrong = [ln for ln in lines if ln not in want] or [ln for ln in want if ln not in lines]
        if wrong or len(lines) != len(want):
            first = wrong[0] if wrong else f"{len(lines)} lines, {len(want)} rendered"
            out.append(f"{page}: the block {name!r} written from {source} differs: {first!r}")
    return out


# ---- the latency table ------------------------------------------------------------------


def _time_agrees(cell: str, value: float) -> bool:
    m = re.fullmatch(r"\s*([\d.]+) (ms|s)\s*", cell)
    assert m is not None, cell
    return _agrees(m.group(1), value * (1e3 if m.group(2) == "ms" else 1.0))


def latency_table_contradictions(pages: dict[str, str], rows: list[dict[str, Any]]) -> list[str]:
    """Every cell of the latency tables (the speed page's and the scale page's) against its
    row of ``latency.json``."""
    from benchmarks import latency
    from benchmarks.pages import BLOCKS, find

    out = []
    for name, subset in (
        ("latency", latency.speed_rows(rows)),
        ("latency-large", latency.large_rows(rows)),
    ):
        page = BLOCKS[name]
        block = find(pages[page], name)
        if block is None:
            out.append(f"{page}: no latency table between the {name!r} markers")
            continue
        lines = [ln for ln in block.group(1).splitlines() if ln.startswith("| ")]
        table = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[1:]]
        if len(table) != len(subset):
            out.append(f"{page}: latency table {len(table)} rows, latency.json {len(subset)}")
            continue
        for cells, row in zip(table, subset, strict=True):
            out += _row_contradictions(page, cells, row)
    return out


def _row_contradictions(page: str, cells: list[str], row: dict[str, Any]) -> list[str]:
    """The cells of one row of a latency table (warm, and first where it has those
    columns) against ``row``."""
    out = []
    for call, at in (("warm", 2), ("first", 5)):
        if f"tool_{call}" not in row or f"polygrad_{call}" not in row:
            continue
        tool, ours, ratio = cells[at : at + 3]
        for cell, value in ((tool, row[f"tool_{call}"]), (ours, row[f"polygrad_{call}"])):
            if not _time_agrees(cell, value):
                out.append(
                    f"{page}: latency table {cells[0]!r}, {call}: {cell} is not {value:.4g} s"
                )
        want = row[f"polygrad_{call}"] / row[f"tool_{call}"]
        if not _agrees(ratio.rstrip("x"), want):
            out.append(
                f"{page}: latency table {cells[0]!r}, {call}: ratio {ratio} is not {want:.3g}"
            )
    return out


# ---- values of the results files that the prose states ----------------------------------


def _cnn(results: dict[str, Any], framework: str, tool: str, key: str = "seconds") -> float:
    rows = results["zoo"]["cnn"][framework]["rows"]
    return next(float(r[key]) for r in rows if r["tool"].startswith(tool))


def _latency(results: dict[str, Any], **match: Any) -> dict[str, Any]:
    rows = results["latency"]["rows"]
    return next(r for r in rows if all(r.get(k) == v for k, v in match.items()))


def _zoo_correct(results: dict[str, Any]) -> tuple[int, int]:
    """(correct zoo cases polygrad passes, correct zoo cases); the cost rows are no cases."""
    rows = [r for r in results["zoo"]["results"] if r["family"] != "cost"]
    cases = {r["case"] for r in rows if r["truth"] == "correct"}
    ours = [r for r in rows if r["truth"] == "correct" and r["tool"].startswith("polygrad")]
    return sum(r["verdict"] == "pass" for r in ours), len(cases)


def _zoo(results: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [r for r in results["zoo"]["results"] if all(r[k] == v for k, v in match.items())]


def _cost(results: dict[str, Any], what: str, tool: str, key: str) -> list[float]:
    """``key`` of the zoo's cost-table rows of ``tool`` on the case ``what`` (float64)."""
    rows = _zoo(results, what=what, tool=tool, dtype="float64")
    return [float(r[key]) for r in rows]


def _span(values: list[float]) -> list[float]:
    return [min(values), max(values)]


def _mib(nbytes: float) -> float:
    return nbytes / 2**20


def _corpus_caught(results: dict[str, Any], framework: str, dtype: str) -> float:
    """Percentage of the planted bugs polygrad caught in the corpus, as its table shows it."""
    from benchmarks.corpus.table import summary

    s = summary(results["corpus"])[(framework, dtype)]
    return 100.0 * s["caught"] / s["planted"]


def _tf(r: dict[str, Any], call: str) -> float:
    return r[f"tool_{call}"] / r[f"polygrad_{call}"]


def _pt(r: dict[str, Any], call: str) -> float:
    return r[f"polygrad_{call}"] / r[f"tool_{call}"]


def _large(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The n = 1e4 rows of ``latency.json``."""
    return [r for r in results["latency"]["rows"] if r["n"] == 10_000]


def _code(module: str, name: str) -> Any:
    """A constant of the code, for the numbers the prose states that are settings."""
    import importlib

    return getattr(importlib.import_module(module), name)


Claim = tuple[str, str, Callable[[dict[str, Any]], list[float]]]


def pattern(template: str) -> str:
    """A claim's regular expression: ``template`` as literal text, where ``{}`` is a
    number, ``...`` any text, and any run of spaces any whitespace (line breaks included)."""
    parts = re.split(r"(\{\}|\.\.\.|\s+)", template)
    out = []
    for part in parts:
        if part == "{}":
            out.append(NUMBER)
        elif part == "...":
            out.append(r".*?")
        elif part and part.isspace():
            out.append(r"\s+")
        else:
            out.append(re.escape(part))
    return "".join(out)


CLAIMS: list[Claim] = [
    # -- accuracy.md and scale.md: the zoo (zoo.json) --
    (
        "scale.md",
        "polygrad is **{}x** faster",
        lambda R: [_cnn(R, "tensorflow", "tf.test") / _cnn(R, "tensorflow", "polygrad")],
    ),
    (
        "accuracy.md",
        "*Every correct gradient passes*: {} of the {} correct zoo cases, in four dtypes and "
        "four frameworks (and the {} correct gradients of the cost rows)",
        lambda R: [
            *map(float, _zoo_correct(R)),
            len({r["case"] for r in _zoo(R, family="cost", truth="correct", tool="polygrad")}),
        ],
    ),
    (
        "accuracy.md",
        "it reports all {} kinks, jumps and ties as NONSMOOTH",
        lambda R: [len(_zoo(R, truth="kink", tool="polygrad", verdict="kink"))],
    ),
    (
        "scale.md",
        "at n = 10 a check took {} to {} s; a full float64 check at n = 1e4 passes in all four "
        "frameworks ({} to {} s); the projection check at n = 1e6 took {} s (PyTorch, {} MiB "
        "peak) and {} s (JAX, {} MiB)",
        lambda R: [
            *_span(_cost(R, "softmax-xent-10", "polygrad", "seconds")),
            *_span(_cost(R, "log1p-square-sum-n10000", "polygrad", "seconds")),
            *(
                v
                for fw in ("torch", "jax")
                for r in _zoo(R, family="cost", tool="polygrad", framework=fw)
                for v in (r["seconds"], _mib(r["peak_memory"]))
            ),
        ],
    ),
    (
        "scale.md",
        "{} s in TensorFlow against {} s for `compute_gradient` ({}x faster), and {} s in "
        "PyTorch against {} s for `gradcheck` on a float64 copy ({}x slower",
        lambda R: [
            _cnn(R, "tensorflow", "polygrad"),
            _cnn(R, "tensorflow", "tf.test"),
            _cnn(R, "tensorflow", "tf.test") / _cnn(R, "tensorflow", "polygrad"),
            _cnn(R, "torch", "polygrad"),
            _cnn(R, "torch", "torch.autograd.gradcheck float64"),
            _cnn(R, "torch", "polygrad") / _cnn(R, "torch", "torch.autograd.gradcheck float64"),
        ],
    ),
    (
        "scale.md",
        "{}x faster than `compute_gradient` warm and {}x on the first call; {}x slower than "
        "`gradcheck` warm and {}x on the first call",
        lambda R: [
            _tf(_latency(R, job="cnn:tensorflow"), "warm"),
            _tf(_latency(R, job="cnn:tensorflow"), "first"),
            _pt(_latency(R, job="cnn:torch"), "warm"),
            _pt(_latency(R, job="cnn:torch"), "first"),
        ],
    ),
    (
        "scale.md",
        "the fewest that give an error bar and show a kink, are {} float64 model evaluations",
        lambda R: [_latency(R, job="cnn:tensorflow")["floor_evaluations"]],
    ),
    # -- speed.md and scale.md: the latency run (latency.json; calls from zoo.json) --
    (
        "speed.md",
        "`gradcheck` makes {} calls of the function and `scipy.optimize.check_grad` {} (the "
        "zoo's [cost table](scale.md#cost-by-problem-size) at n = 10)",
        lambda R: [
            *_cost(R, "softmax-xent-10", "torch.gradcheck", "evaluations"),
            *_cost(R, "softmax-xent-10", "scipy.check_grad", "evaluations"),
        ],
    ),
    (
        "speed.md",
        "*Keras*: {} s warm ({}x the floor's {} s), {} s on the first call of a new function "
        "({}x), against `tf.test.compute_gradient`'s {} s: {}x faster warm (ratio {}), {}x "
        "faster on the first call (ratio {})",
        lambda R: [
            (r := _latency(R, job="cnn:tensorflow"))["polygrad_warm"],
            r["polygrad_warm"] / r["floor_seconds"],
            r["floor_seconds"],
            r["polygrad_first"],
            r["polygrad_first"] / r["floor_seconds"],
            r["tool_warm"],
            _tf(r, "warm"),
            _pt(r, "warm"),
            _tf(r, "first"),
            _pt(r, "first"),
        ],
    ),
    (
        "speed.md",
        "*PyTorch*: {} s warm ({}x the floor's {} s), {} s first ({}x), against `gradcheck`'s {} s",
        lambda R: [
            (r := _latency(R, job="cnn:torch"))["polygrad_warm"],
            r["polygrad_warm"] / r["floor_seconds"],
            r["floor_seconds"],
            r["polygrad_first"],
            r["polygrad_first"] / r["floor_seconds"],
            r["tool_warm"],
        ],
    ),
    (
        "speed.md",
        "*Evaluations*: {} (Keras) and {} (PyTorch) against the floor's {}",
        lambda R: [
            _latency(R, job="cnn:tensorflow")["evaluations"],
            _latency(R, job="cnn:torch")["evaluations"],
            _latency(R, job="cnn:torch")["floor_evaluations"],
        ],
    ),
    (
        "scale.md",
        "*n = 1e4*: {}x and {}x `gradcheck`; the references take {} and {} evaluations per "
        "input, against `gradcheck`'s {}",
        lambda R: [
            *(_pt(r, "warm") for r in _large(R)),
            *(r["evaluations_per_input"] for r in _large(R)),
            _cost(R, "log1p-square-sum-n10000", "torch.gradcheck", "evaluations")[0] / 1e4,
        ],
    ),
    (
        "scale.md",
        "*n = 1e6*: {}x one forward+backward, +{} MB peak",
        lambda R: [_pt(r := _latency(R, n=1000000), "warm"), r["extra_peak_mb"]],
    ),
    (
        "speed.md",
        "the rerun from the reference cache takes {} s against the checkers' {} s ({}x), the "
        "first run {} s ({}x)",
        lambda R: [
            (r := _latency(R, job="suite:200"))["polygrad_warm"],
            r["tool_warm"],
            _pt(r, "warm"),
            r["polygrad_first"],
            _pt(r, "first"),
        ],
    ),
    # -- accuracy.md: the real-code corpus (corpus.jsonl, corpus.meta.json) --
    (
        "accuracy.md",
        "It covers {} cases ({} catalog entries) of the {} planned, {} skips (each with its "
        "reason) and {} timeouts",
        lambda R: [
            len(cases := [r for r in R["corpus"] if r["status"] == "case"]),
            len({(r["source"], r["entry"]) for r in cases}),
            R["corpus_meta"]["planned"],
            sum(r["status"] == "skipped" for r in R["corpus"]),
            sum(r["status"] == "timeout" for r in R["corpus"]),
        ],
    ),
    (
        "accuracy.md",
        "fall short in TensorFlow** ({}% and {}% caught)",
        lambda R: [_corpus_caught(R, "tensorflow", d) for d in ("bfloat16", "float16")],
    ),
    # -- other pages --
    (
        "comparison.md",
        "`tf.test.compute_gradient` makes {} slow eager calls",
        lambda R: [_cnn(R, "tensorflow", "tf.test", "evaluations")],
    ),
    (
        "README.md",
        "`python -m benchmarks` (about {} minutes; results in `docs/accuracy.md`",
        lambda R: [R["zoo"]["meta"]["total_seconds"] / 60],
    ),
    # -- constants of the code that the prose states (settings, not measurements) --
    (
        "error-model.md",
        "(ratio above {} per halving)",
        lambda R: [_code("polygrad.reference.differences", "JUMP_RATIO")],
    ),
    (
        "error-model.md",
        "mp (when that takes under {} s, `Policy.mp_auto_seconds`",
        lambda R: [_code("polygrad.policy", "Policy")().mp_auto_seconds],
    ),
    (
        "error-model.md",
        "at least {} µs per input and evaluation",
        lambda R: [1e6 * _code("polygrad.reference.mp", "MP_SECONDS_PER_INPUT")],
    ),
]
"""(page, :func:`pattern` template whose ``{}`` are numbers, the values they must show)."""


def _claims(pages: dict[str, str]) -> list[tuple[str, str, re.Match[str] | None, Claim]]:
    """Each claim with its page and the match of its sentence (None where it is gone)."""
    out = []
    for claim in CLAIMS:
        page, template, _ = claim
        out.append((page, template, re.search(pattern(template), pages[page], re.DOTALL), claim))
    return out


def contradictions(pages: dict[str, str], results: dict[str, Any]) -> list[str]:
    """Every number of the latency table and of :data:`CLAIMS` that the results contradict,
    every claim whose sentence is gone from its page, and every block the benchmarks write
    that their results no longer give."""
    out = latency_table_contradictions(pages, results["latency"]["rows"])
    out += generated_contradictions(pages, results)
    for page, template, m, (_, _, expected) in _claims(pages):
        if m is None:
            out.append(f"{page}: no sentence matches {template!r}")
            continue
        for shown, value in zip(m.groups(), expected(results), strict=True):
            if not _agrees(shown, value):
                out.append(f"{page}: {shown!r} in {m.group(0)!r} is not {value:.4g}")
    return out


# ---- numbers in sentences about speed or correctness counts -----------------------------

SPEED = re.compile(
    r"\d\s?x(?![\w×])|\bfaster\b|\bslower\b|\bratio\b|times as long|\bper check\b"
    r"|\d\s?(?:ms|s|µs|min|minutes|seconds|hours)\b(?!-)",
    re.IGNORECASE,
)
"""A sentence about speed: a ratio, a comparison of speed, a time."""

COUNT = re.compile(r"(?<![\w.,^/-])\d[\d,]*\s+of\s+(?:the\s+)?\d[\d,]*(?![\w.^])")
"""A sentence about correctness counts: ``118 of the 120``."""

MEASURE = re.compile(
    r"(?<![\w.^/×-])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[+-]?\d+)?"
    r"(?![A-Za-wyz_\d^×]|x\w|-[A-Za-z]|\.\d)"
)
"""A number standing alone (not part of a name such as ``float64``, ``case-2``, ``2^-13``,
``20x20``): a ratio ``2.4`` of ``2.4x``, a time, a count."""

NOT_MEASURED: list[tuple[str, str]] = [
    (r"\bn\s*[=≥≤<>]\s*[\d.,e+]+", "a problem size (how many inputs), a setting"),
    (r"\b\d+ (?:CPU )?(?:cores?|CPUs)\b", "the machine's size"),
    (r"\b1 \+ 1e-\d+", "a planted factor, a setting of the benchmark"),
    (
        r"(?i:\b(?:python|numpy|torch|jax|jaxlib|tensorflow|keras|scipy|mpmath|polygrad)"
        r"\s+\d+(?:\.\d+)+)",
        "a version",
    ),
    (r"\b\d+(?:\.\d+){2,}\b", "a version"),
    (r"\bcase \d\b", "the name of a user's case"),
]
"""Numbers that are no measurements, by the form of their context, with the reason."""

SENTENCE = re.compile(r"(?<=[.;:!?])\s+(?=[A-Z*(_\[])|\n\s*\n|\n(?=\s*(?:[-*] |\d+\. |\|))")


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with every span turned into spaces (line breaks kept), so offsets hold."""
    chars = list(text)
    for a, b in spans:
        for i in range(a, b):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def prose(name: str, text: str) -> str:
    """The prose of a page: code blocks, inline code, HTML comments (the build-time
    ``<!-- value: ... -->`` markers) and the blocks the benchmarks write are blanked;
    offsets are those of ``text``."""
    spans = generated_blocks(text)
    spans += [m.span() for m in re.finditer(r"^```.*?^```[ \t]*$", text, re.MULTILINE | re.DOTALL)]
    spans += [m.span() for m in re.finditer(r"<!--.*?-->", text, re.DOTALL)]
    text = _blank(text, spans)
    return _blank(text, [m.span() for m in re.finditer(r"`[^`\n]*`", text)])


def measured_numbers(name: str, text: str) -> list[tuple[int, str, str]]:
    """``(offset, number, sentence)`` of every number in a sentence about speed or
    correctness counts in the prose of a page, except those of :data:`NOT_MEASURED`."""
    text = prose(name, text)
    exempt = [m.span() for rx, _ in NOT_MEASURED for m in re.finditer(rx, text)]
    out = []
    start = 0
    for boundary in [*SENTENCE.finditer(text), None]:
        end = boundary.start() if boundary else len(text)
        sentence = text[start:end]
        if SPEED.search(sentence) or COUNT.search(sentence):
            for m in MEASURE.finditer(sentence):
                at = start + m.start()
                if not any(a <= at < b for a, b in exempt):
                    out.append((at, m.group(0), " ".join(sentence.split())))
        start = boundary.end() if boundary else end
    return out


def unsourced(pages: dict[str, str]) -> list[str]:
    """Every number in a sentence about speed or correctness counts that no claim holds."""
    held: dict[str, list[tuple[int, int]]] = {}
    for page, _, m, _ in _claims(pages):
        if m is not None:
            held.setdefault(page, []).extend(m.span(i) for i in range(1, len(m.groups()) + 1))
    out = []
    for name, text in pages.items():
        if name in HISTORY:
            continue
        for at, number, sentence in measured_numbers(name, text):
            if not any(a <= at < b for a, b in held.get(name, [])):
                out.append(f"{name}: {number} has no results file: {sentence[:160]!r}")
    return out


# ---- tests ------------------------------------------------------------------------------


def test_benchmark_numbers_in_the_docs_agree_with_the_results():
    assert contradictions(load_pages(), load_results()) == []


def test_every_number_about_speed_or_counts_has_a_results_file():
    assert unsourced(load_pages()) == []


def test_the_checker_sees_the_numbers_it_checks():
    """Not trivially passing: the pages state numbers about speed and counts, every claim
    holds some of them, and each kind of :data:`NOT_MEASURED` exempts something."""
    pages = load_pages()
    found = {name: measured_numbers(name, text) for name, text in pages.items()}
    on_benchmark_pages = [found[name] for name in ("speed.md", "accuracy.md", "scale.md")]
    assert all(on_benchmark_pages) and sum(map(len, on_benchmark_pages)) >= 45, found
    assert found["comparison.md"] and found["README.md"] and found["error-model.md"]
    for page, template, m, _ in _claims(pages):
        assert m is not None, (page, template)
    text = "\n".join(prose(n, t) for n, t in pages.items() if n not in HISTORY)
    for rx, why in NOT_MEASURED:
        assert re.search(rx, text), f"no use left for the exemption of {why!r}: {rx}"


@pytest.mark.parametrize(
    ("page", "right", "wrong", "planted"),
    [
        ("speed.md", "| 27.4x |", "| 91.7x |", "91.7x"),  # a ratio of the latency table
        ("speed.md", "| 33.1 ms |", "| 34.1 ms |", "34.1 ms"),  # a time of the latency table
        # the date above the latency table, written from latency.json
        (
            "speed.md",
            "scalar-loss rows: 2026-12-07)",
            "scalar-loss rows: 2026-12-05)",
            "2026-12-05",
        ),
        ("speed.md", "1.92 s warm (1.2x the floor's", "1.52 s warm (1.2x the floor's", "1.52"),
        ("scale.md", "| 12.78 s | 3.6x |", "| 12.78 s | 4.6x |", "4.6x"),  # the n = 1e4 table
        ("scale.md", "| 271 | 68x |", "| 217 | 68x |", "217"),  # the cost table
        ("scale.md", "**6.9x** faster", "**10.0x** faster", "10.0"),
        ("scale.md", "11.5x faster than", "6.9x faster than", "6.9"),
        ("scale.md", "153x one forward+backward", "214x one forward+backward", "214"),
        ("accuracy.md", "118 of the 118 correct zoo", "120 of the 120 correct zoo", "120"),
        ("accuracy.md", "(63% and 65%", "(73% and 65%", "73"),
        ("accuracy.md", "| 4/4 | 3/4 | 3/4 |", "| 4/4 | 4/4 | 3/4 |", "| 4/4 | 4/4 | 3/4 |"),
        # the dates above the zoo's and the corpus's tables, written from their results
        ("accuracy.md", "zoo run of 2026-12-03 13:32", "zoo run of 2026-12-04 13:32", "2026-12-04"),
        ("accuracy.md", "Run of 2026-12-02 00:23 UTC", "Run of 2026-12-01 00:23 UTC", "2026-12-01"),
    ],
)
def test_a_planted_wrong_number_is_found(page, right, wrong, planted):
    pages = load_pages()
    assert right in pages[page], right
    pages[page] = pages[page].replace(right, wrong, 1)
    found = contradictions(pages, load_results())
    assert found and all(f.startswith(f"{page}: ") and planted in f for f in found), found


@pytest.mark.parametrize(
    ("page", "right", "wrong", "number"),
    [
        ("comparison.md", "makes 1,570 slow", "makes 1,750 slow", "1,750"),
        ("README.md", "(about 7 minutes;", "(about 3 minutes;", "3"),
        ("error-model.md", "(ratio above 0.65 per", "(ratio above 0.75 per", "0.75"),
    ],
)
def test_a_planted_wrong_number_on_another_page_is_found(page, right, wrong, number):
    pages = load_pages()
    assert right in pages[page], right
    pages[page] = pages[page].replace(right, wrong, 1)
    found = contradictions(pages, load_results())
    assert len(found) == 1 and found[0].startswith(f"{page}: {number!r} in "), found


@pytest.mark.parametrize(
    ("page", "after", "planted", "numbers"),
    [
        ("getting-started.md", "## The idea in one call\n", "A check takes 13 ms.\n\n", ["13"]),
        ("index.md", "## Where to go next\n", "It is 2.4x faster than gradcheck.\n\n", ["2.4"]),
        ("why-fd-fails.md", "## Kinks\n", "It passes 118 of 120 cases.\n\n", ["118", "120"]),
        ("cache.md", "## The reference cache\n", "A hit takes 0.2 s per check.\n\n", ["0.2"]),
        ("README.md", "## Install\n", "- Installs in 45 seconds on n = 10 inputs.\n\n", ["45"]),
        ("speed.md", "**How to read the table.**", "A rerun is 1.7x faster. ", ["1.7"]),
        ("scale.md", "## Cost by problem size\n", "A check takes 12 s at n = 1e4.\n\n", ["12"]),
        ("accuracy.md", "## Summary\n", "It passes 117 of 118 cases.\n\n", ["117", "118"]),
        ("benchmarks.md", "## Running them\n", "The zoo takes 7 minutes.\n\n", ["7"]),
        ("api.md", "\n\n", "The check is 3x slower there.\n\n", ["3"]),
        ("localize.md", "\n\n", "It localizes 9 of 10 planted bugs.\n\n", ["9", "10"]),
    ],
)
def test_a_planted_number_without_a_results_file_is_found(page, after, planted, numbers):
    pages = load_pages()
    assert after in pages[page], after
    assert unsourced(pages) == []
    pages[page] = pages[page].replace(after, after + planted, 1)
    found = unsourced(pages)
    assert [f.split(": ")[1].split()[0] for f in found] == numbers, found
    assert all(f.startswith(f"{page}: ") for f in found), found


def test_numbers_that_are_no_measurements_are_not_asked_for_a_source():
    text = (
        "At n = 1e4 on 2 CPU cores (torch 2.13.0), a 1 + 1e-3 plant in case 2 "
        "on float64 inputs of 28×28 took 3.5 s."
    )
    assert [n for _, n, _ in measured_numbers("x.md", text)] == ["3.5"]
    # the date of a run, typed, is asked for a source: it is the results file's to state
    dated = "Measured 2026-12-03, a check took 3.5 s."
    assert [n for _, n, _ in measured_numbers("x.md", dated)] == ["2026", "3.5"]
    assert [n for _, n, _ in measured_numbers("x.md", "A 2,000-program run of 20x20.")] == []
    assert [n for _, n, _ in measured_numbers("x.md", "It found 7 of 40 `W`.")] == ["7", "40"]


def test_comparison_page_states_latency_ratios_through_build_time_values():
    """The comparison page's ratios are <!-- value: ... --> markers filled from the results
    at build time, never typed numbers that a new run would leave behind."""
    page = load_pages()["comparison.md"]
    assert "orders of magnitude" not in page
    for name in ("latency.framework_warm", "latency.cnn_tf_warm", "cnn.tf_ratio"):
        assert f"<!-- value: {name} -->" in page
    prose_only = re.sub(r"```.*?```", "", page, flags=re.DOTALL)
    assert not re.search(r"\b\d+(\.\d+)?x (faster|slower)\b", prose_only)
