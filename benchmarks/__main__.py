"""Run the gradient zoo against every checker and write the tables.

Usage::

    python -m benchmarks latency [--quick]   (time to verdict: see benchmarks.latency)
    python -m benchmarks corpus [--quick]    (real-code corpus: see benchmarks.corpus)
    python -m benchmarks [--quick] [--only TOOL] [--cases TEXT] [--out-json PATH]
                         [--docs DIR] [--timeout SECONDS] [--no-cnn] [--render]

Every tool runs on every zoo case of its framework (see :mod:`benchmarks.tools`) in a
worker process with a per-run timeout; then the cost cases and the case-2 CNN
(:mod:`benchmarks.cnn_input_gradient`). Writes the per-case results as JSON and the
tables as Markdown (:mod:`benchmarks.tables`): the verdict tables into ``accuracy.md``
and the cost table into ``scale.md`` of the ``--docs`` folder (see
:mod:`benchmarks.pages`). ``--quick`` runs a small NumPy/PyTorch subset in well under a
minute (the CI smoke test); ``--render`` rewrites the Markdown from an existing JSON file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from . import pages, tables
from .harness import Worker
from .tools import TOOLS, Tool, numdifftools_tool, scipy_check_grad
from .tools.common import ToolResult
from .zoo import Case, cost_cases, zoo_cases

HERE = Path(__file__).resolve().parent
OUT_JSON = HERE / "results" / "zoo.json"
TIMEOUT = 45.0
QUICK_TIMEOUT = 30.0
QUICK_CASES = (
    "smooth/normal-logpdf-n100-at1/numpy/float32",
    "smooth/normal-logpdf-n100-at1/torch/float32",
    "bug-size/softplus-scaled-1e-02/numpy/float32",
    "bug-size/softplus-scaled-1e-02/torch/float32",
    "kink/relu-at-zero/torch/float64",
    "trap/where-trick/numpy/float64",
    "smooth/softmax-xent-10/numpy/float64",
    "smooth/softmax-xent-10/torch/float64",
)
"""The ``--quick`` subset: NumPy and PyTorch only, one case per kind."""
PACKAGES = (
    "polygrad",
    "numpy",
    "mpmath",
    "scipy",
    "numdifftools",
    "torch",
    "jax",
    "jaxlib",
    "tensorflow",
    "keras",
)
TOOL_SETTINGS = (
    "torch.gradcheck at its defaults (eps 1e-6, atol 1e-5, rtol 1e-3; `fast_mode=True` "
    "for (fast)); jax.check_grads(f, (x,), order=1, modes=['rev']) with its dtype-based "
    "default tolerances; tf.test.compute_gradient(f, [x]) then assertAllClose with its "
    "defaults (rtol = atol = 1e-6); scipy.optimize.check_grad at its defaults, passing "
    f"when the 2-norm of the difference is at most {scipy_check_grad.RTOL:g} x the "
    "gradient's 2-norm; numdifftools Gradient at its defaults, passing when max |difference| "
    f"<= {numdifftools_tool.RTOL:g} x max |gradient|; polygrad.check at its defaults. "
    "scipy and numdifftools run on the NumPy cases, each framework's checker on its own "
    "framework's cases, polygrad on all."
)


DISTRIBUTIONS = {"polygrad": "polygrad-check"}
"""Distribution names that differ from the import name."""


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = importlib.metadata.version(DISTRIBUTIONS.get(p, p))
        except importlib.metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def _row(case: Case, tool: Tool, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "case": case.name,
        "family": case.family,
        "what": case.name.split("/")[1],
        "framework": case.framework,
        "dtype": case.dtype,
        "n": case.n,
        "truth": case.truth,
        "bug_size": case.bug_size,
        "expect": case.expect,
        "tool": tool.name,
        "variant": tool.variant,
        "key": tool.key,
        **result,
    }


def run(
    cases: list[Case],
    tools: list[Tool],
    timeout: float,
    with_cnn: bool,
    log: Any = sys.stderr,
) -> dict[str, Any]:
    """Run ``tools`` on ``cases`` (and the CNN); return the JSON payload.

    Parameters
    ----------
    cases : list of Case
        The cases (zoo and cost).
    tools : list of Tool
        The tool variants.
    timeout : float
        Seconds one tool may spend on one case.
    with_cnn : bool
        Also time the case-2 CNN (:mod:`benchmarks.cnn_input_gradient`, 28x28).
    log : file
        Where progress goes.

    Returns
    -------
    dict
        ``{"meta": ..., "results": [...], "cnn": ...}``.
    """
    t0 = time.perf_counter()
    worker = Worker(timeout)
    results = []
    try:
        for i, case in enumerate(cases):
            for tool in tools:
                if not tool.applies(case):
                    continue
                if case.n > tool.max_n:
                    res = tool.run(case).to_dict()  # skipped: nothing to run
                else:
                    ans = worker.call(("job", case.name, tool.key))
                    res = (
                        ans
                        if ans is not None
                        else ToolResult(
                            "timeout", None, timeout, None, f"no answer within {timeout:g} s"
                        ).to_dict()
                    )
                results.append(_row(case, tool, res))
            done = [r for r in results if r["case"] == case.name]
            summary = " ".join(f"{r['key']}={r['verdict']}({r['seconds']:.1f}s)" for r in done)
            print(
                f"[{i + 1}/{len(cases)} {time.perf_counter() - t0:6.0f}s] {case.name}: {summary}",
                file=log,
                flush=True,
            )
        cnn = None
        if with_cnn:
            cnn = worker.call(("cnn", 28), timeout=900.0)
            print(f"[cnn {time.perf_counter() - t0:6.0f}s] done", file=log, flush=True)
    finally:
        worker.close()
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": _versions(),
        "cpu_count": os.cpu_count(),
        "platform": f"{platform.system()} {platform.machine()}",
        "timeout": timeout,
        "tools": [t.key for t in tools],
        "tool_settings": TOOL_SETTINGS,
        "total_seconds": time.perf_counter() - t0,
    }
    return {"meta": meta, "results": results, "cnn": cnn}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    Raises
    ------
    SystemExit
        ``--only`` names no tool.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["latency"]:
        from . import latency

        return latency.main(argv[1:])
    if argv[:1] == ["corpus"]:
        from .corpus import cli

        return cli.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small NumPy/PyTorch smoke subset")
    parser.add_argument(
        "--only", action="append", metavar="TOOL", help="run only this tool (name or key)"
    )
    parser.add_argument("--out-json", type=Path, default=OUT_JSON)
    parser.add_argument(
        "--docs",
        type=Path,
        default=pages.DOCS,
        help="the folder of the pages the tables are written into (accuracy.md, scale.md)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds per tool run")
    parser.add_argument("--no-cnn", action="store_true", help="skip the case-2 CNN")
    parser.add_argument(
        "--cases", metavar="TEXT", help="run only the cases whose name contains TEXT"
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="run nothing: rewrite the Markdown from the JSON at --out-json",
    )
    args = parser.parse_args(argv)
    if args.render:
        payload = json.loads(args.out_json.read_text())
        written = tables.write(args.docs, payload)
        print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
        return 0

    tools = TOOLS
    if args.only:
        tools = [t for t in TOOLS if t.name in args.only or t.key in args.only]
        if not tools:
            names = sorted({t.name for t in TOOLS})
            parser.error(f"--only {args.only}: no such tool; choose from {names}")
    cases = zoo_cases() + cost_cases()
    if args.quick:
        wanted = set(QUICK_CASES)
        cases = [c for c in cases if c.name in wanted]
    if args.cases:
        cases = [c for c in cases if args.cases in c.name]
    timeout = args.timeout or (QUICK_TIMEOUT if args.quick else TIMEOUT)
    with_cnn = not (args.quick or args.no_cnn or args.only or args.cases)

    payload = run(cases, tools, timeout, with_cnn)
    payload["meta"]["quick"] = args.quick
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    written = tables.write(args.docs, payload)
    print(f"wrote {args.out_json} and {', '.join(map(str, written))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
