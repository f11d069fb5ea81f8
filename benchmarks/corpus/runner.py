"""Run one corpus case: the framework's float64 checker, polygrad, and two planted bugs.

A case is ``(source, entry, region, dtype)``. Truth for a correct case: the
framework's own checker passes in float64, or polygrad's mp reference agrees
(``reference="mp"`` on the float64 function). The mp run also feeds discovery: an
operator whose own gradient is MISMATCH against mp is a finding, reduced to a
single input column as its minimal reproduction. Truth is computed once per
(entry, region) and shared by its dtypes, at the point rounded for the first of
them that runs.
"""

from __future__ import annotations

import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from .catalogs import SOURCES, Entry, Problem, Skip
from .frameworks import BUGS, Adapter, adapter

__all__ = ["CaseKey", "run_case", "MP_MAX_N", "INPUT_ERRORS"]

MP_MAX_N = 100
"""Largest input size given an mp reference (its cost grows with the graph and n)."""
INPUT_ERRORS = (
    "InputTypeError",
    "InputValueError",
    "ShapeMismatchError",
    "NondeterministicFunctionError",
    "InputMutationError",
    "MissingBackendError",
)
"""polygrad's documented input errors: any other exception is a failure of polygrad."""


@dataclass(frozen=True)
class CaseKey:
    """One corpus case."""

    framework: str
    source: str
    entry: str
    region: str
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.framework}/{self.source}/{self.entry}/{self.region}/{self.dtype}"

    @property
    def seed(self) -> int:
        """A fixed seed per (entry, region), the same in every dtype."""
        return zlib.crc32(f"{self.source}/{self.entry}/{self.region}".encode())


_INDEX: dict[str, dict[str, Entry]] = {}
_TRUTH: dict[tuple[str, str, str], dict[str, Any]] = {}


def _entry(key: CaseKey) -> Entry:
    if key.source not in _INDEX:
        _INDEX[key.source] = {e.name: e for e in SOURCES[key.source]()}
    return _INDEX[key.source][key.entry]


def _err(exc: BaseException) -> dict[str, Any]:
    kind = "input" if type(exc).__name__ in INPUT_ERRORS else "exception"
    text = str(exc).strip().splitlines()
    return {"error": f"{type(exc).__name__}: {text[0] if text else ''}"[:300], "error_kind": kind}


def _polygrad(f: Any, x: Any, **kw: Any) -> dict[str, Any]:
    import polygrad as pg

    t = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = pg.check(f, x, **kw)
    except Exception as e:  # noqa: BLE001 - recorded: the point of the corpus
        return {"verdict": None, "ok": False, "seconds": time.perf_counter() - t, **_err(e)}
    out: dict[str, Any] = {
        "verdict": str(r.verdict),
        "ok": bool(r.ok),
        "seconds": time.perf_counter() - t,
        "method": r.details.get("reference", {}).get("method"),
    }
    if str(r.verdict) != "PASS":
        row = r.entries.row(int(r.entries.worst(1)[0]))
        out["worst"] = {
            k: row.get(k)
            for k in ("name", "verdict", "autodiff", "reference", "reference_error", "tolerance")
        }
        out["why"] = _why(r)
    return out


def _why(report: Any) -> str:
    """The report's headline in full, and the first line that gives a reason, if any."""
    text = str(report).strip().splitlines()
    keep = [
        ln.strip()
        for ln in text[1:]
        if any(w in ln.lower() for w in ("because", "why", "reason", "could not", "no reference"))
    ]
    return " | ".join(text[:1] + keep[:1])


def _truth(key: CaseKey, a: Adapter, p: Problem, n: int) -> dict[str, Any]:
    """Checker and (where needed) mp verdicts on the float64 function, cached per point."""
    k = (key.source, key.entry, key.region)
    t = _TRUTH.setdefault(k, {})
    if "checker" not in t:
        verdict, detail, seconds = a.timed_checker(p.f64, p.x64)
        t["checker"] = {"verdict": verdict, "detail": detail, "seconds": seconds}
    want_mp = key.dtype == "float64" or t["checker"]["verdict"] != "pass"
    if want_mp and "mp" not in t:
        if n > MP_MAX_N:
            t["mp"] = {
                "verdict": None,
                "error": f"not run: n = {n} > {MP_MAX_N}",
                "error_kind": "limit",
            }
        else:
            t["mp"] = _polygrad(p.f64, p.x64, reference="mp")
            if t["mp"]["verdict"] == "MISMATCH":
                t["finding"] = _reduce(p, a)
    return t


def _reduce(p: Problem, a: Adapter) -> dict[str, Any] | None:
    """The first single input column on which the float64 gradient is MISMATCH against mp."""
    x = a.numpy(p.x64)
    if x.ndim == 0:
        return None
    for j in range(x.shape[-1]):
        xj = a.array(np.ascontiguousarray(x[..., j : j + 1]), "float64")
        try:
            r = _polygrad(p.f64, xj, reference="mp")
        except Exception:  # noqa: BLE001, S112 - a column that will not run is not the reproduction
            continue
        if r["verdict"] == "MISMATCH":
            return {"point": x[..., j].tolist(), **r.get("worst", {})}
    return None


def _bug(a: Adapter, p: Problem, bug: str, g: np.ndarray) -> dict[str, Any]:
    try:
        planted = a.plant(p.f, bug)
        gb = a.vjp(planted, p.x)
    except Exception as e:  # noqa: BLE001 - the plant itself failed: recorded, not counted
        return {"planted": False, "reason": f"plant failed: {type(e).__name__}: {str(e)[:120]}"}
    if np.array_equal(gb, g):
        return {"planted": False, "reason": "no-op in this dtype (the change rounds away)"}
    r = _polygrad(planted, p.x)
    return {"planted": True, **r, "caught": not r["ok"] and r.get("error_kind") != "exception"}


def run_case(key: CaseKey) -> dict[str, Any]:
    """Run everything for one case; a JSON-ready row.

    Returns
    -------
    dict
        ``status`` is ``"case"`` or ``"skipped"`` (with ``reason``); a case has
        ``checker``, ``mp``, ``correct``, ``polygrad``, ``bugs`` and maybe ``finding``.
    """
    row: dict[str, Any] = {"name": key.name, **key.__dict__}
    try:
        p = _entry(key).build(key.region, key.dtype, key.seed)
        a = adapter(key.framework)
        g = a.vjp(p.f, p.x)
        a.vjp(p.f64, p.x64)
    except Skip as s:
        return {**row, "status": "skipped", "reason": str(s)}
    except Exception as e:  # noqa: BLE001 - no gradient in this dtype: a skip with its reason
        return {
            **row,
            "status": "skipped",
            "reason": f"no gradient: {type(e).__name__}: {str(e)[:120]}",
        }
    n = int(np.size(a.numpy(p.x)))
    point = a.numpy(p.x).tolist() if n <= 12 else None
    row.update(status="case", n=n, repro=p.repro, point=point)
    t = _truth(key, a, p, n)
    mp = t.get("mp") or {}
    row["checker"] = t["checker"]
    if key.dtype != "float64":
        verdict, detail, seconds = a.timed_checker(p.f, p.x)
        row["checker_working"] = {"verdict": verdict, "detail": detail, "seconds": seconds}
    row["mp"] = {k: mp.get(k) for k in ("verdict", "ok", "error", "seconds")} if mp else None
    row["correct"] = t["checker"]["verdict"] == "pass" or (
        mp.get("verdict") in ("PASS", "NONSMOOTH")
    )
    if t.get("finding") is not None:
        row["finding"] = t["finding"]
    row["polygrad"] = _polygrad(p.f, p.x)
    row["bugs"] = {b: _bug(a, p, b, g) for b in BUGS} if row["correct"] else {}
    return row
