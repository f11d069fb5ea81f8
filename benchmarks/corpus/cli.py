"""``python -m benchmarks corpus``: enumerate the cases, run them, write the table."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from .. import pages
from . import table
from .catalogs import SOURCES, Entry, entries
from .runner import CaseKey
from .worker import run_all

__all__ = ["main", "all_keys", "quick_keys"]

HERE = Path(__file__).resolve().parent.parent
OUT_JSONL = HERE / "results" / "corpus.jsonl"
OUT_MD = pages.DOCS / pages.BLOCKS["corpus"]
DTYPES = ("bfloat16", "float16", "float32", "float64")
TIMEOUT = 120.0
TITLE = "## Real-code corpus (`python -m benchmarks corpus`)"


def _keys(e: Entry, regions: tuple[str, ...], dtypes: tuple[str, ...]) -> list[CaseKey]:
    return [CaseKey(e.framework, e.source, e.name, r, d) for r in regions for d in dtypes]


def all_keys(sources: list[str] | None = None) -> list[CaseKey]:
    """Every case: each entry x region, its four dtypes together; catalogs interleaved.

    Within a catalog the (entry, region) units are shuffled with a fixed seed; the
    catalogs then take turns, so a run stopped early still covers all of them.
    """
    by_source: dict[str, list[list[CaseKey]]] = {}
    for e in entries(sources):
        units = [_keys(e, (r,), DTYPES) for r in e.regions]
        by_source.setdefault(e.source, []).extend(units)
    rng = random.Random(0)
    queues = []
    for src in sorted(by_source):
        units = by_source[src]
        rng.shuffle(units)
        queues.append(units)
    out: list[CaseKey] = []
    while any(queues):
        for q in queues:
            if q:
                out.extend(q.pop(0))
    return out


def quick_keys(sources: list[str] | None = None) -> list[CaseKey]:
    """A few dozen cases: two entries of each catalog (the first and the middle one),
    their first region, in float32 (entries that need required arguments are skipped
    at once, so only about half of them run)."""
    out = []
    for src in sources or list(SOURCES):
        es = entries([src])
        for e in {es[0].name: es[0], es[len(es) // 2].name: es[len(es) // 2]}.values():
            out += _keys(e, e.regions[:1], ("float32",))
    return out


def _versions() -> str:
    import importlib.metadata as md

    out = []
    for p in ("polygrad-check", "torch", "jax", "tensorflow", "keras", "flax", "equinox", "mpmath"):
        try:
            out.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            out.append(f"{p} not installed")
    return ", ".join(out)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks corpus", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a few dozen cases (minutes)")
    p.add_argument("--sources", action="append", choices=list(SOURCES), help="only these catalogs")
    p.add_argument("--cases", metavar="TEXT", help="only cases whose name contains TEXT")
    p.add_argument("--limit", type=int, help="run at most N cases")
    p.add_argument("--minutes", type=float, help="start no case after this many minutes")
    p.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per case")
    p.add_argument("--out-jsonl", type=Path, default=OUT_JSONL)
    p.add_argument("--out-md", type=Path, default=OUT_MD)
    p.add_argument(
        "--resume", action="store_true", help="keep rows in --out-jsonl; rerun only timeouts"
    )
    p.add_argument("--render", action="store_true", help="run nothing: table from --out-jsonl")
    return p


def _render(args: argparse.Namespace, meta: dict[str, Any]) -> None:
    meta.setdefault("versions", _versions())
    rows = table.read_rows(args.out_jsonl)
    args.out_md.parent.mkdir(parents=True, exist_ok=True)
    table.write_block(args.out_md, table.render(rows, meta), TITLE)
    meta_path = args.out_jsonl.with_suffix(".meta.json")
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {args.out_md} from {len(rows)} rows", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.simplefilter("ignore")
    args = _parser().parse_args(argv)
    meta_path = args.out_jsonl.with_suffix(".meta.json")
    if args.render:
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        _render(args, meta)
        return 0
    keys = quick_keys(args.sources) if args.quick else all_keys(args.sources)
    if args.cases:
        keys = [k for k in keys if args.cases in k.name]
    if args.limit:
        keys = keys[: args.limit]
    if args.resume and args.out_jsonl.exists():
        done = {r["name"] for r in table.read_rows(args.out_jsonl) if r["status"] != "timeout"}
        keys = [k for k in keys if k.name not in done]
    elif args.out_jsonl.exists():
        args.out_jsonl.unlink()
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if args.quick else "full",
        "planned": len(keys),
        "cpu_count": os.cpu_count(),
        "versions": _versions(),
    }
    deadline = time.time() + 60 * args.minutes if args.minutes else None
    t0 = time.perf_counter()
    for i, row in enumerate(run_all(keys, args.out_jsonl, args.timeout, deadline)):
        pg = row.get("polygrad") or {}
        bugs = " ".join(
            f"{b}={'caught' if v.get('caught') else v.get('verdict') or v.get('reason', '')[:20]}"
            for b, v in (row.get("bugs") or {}).items()
        )
        clock = f"[{i + 1}/{len(keys)} {time.perf_counter() - t0:5.0f}s]"
        print(
            f"{clock} {row['name']}: {row['status']} "
            f"{pg.get('verdict') or pg.get('error') or row.get('reason', '')} "
            f"checker={(row.get('checker') or {}).get('verdict')} {bugs}",
            file=sys.stderr,
            flush=True,
        )
        if (i + 1) % 25 == 0:
            _render(args, meta)
    _render(args, meta)
    return 0
