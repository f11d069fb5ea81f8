"""Reports of every shape of ``details``, for the test of its JSON form (tests/test_details.py).

``shape`` turns a JSON form into its structure: nested keys, with every leaf
replaced by its kind. ``golden_details_shapes.json`` holds the structures written
by the untyped ``details`` dictionary these dataclasses replaced; regenerate with
``python tests/details_cases.py > tests/golden_details_shapes.json`` only when the
JSON form is meant to change.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

import polygrad as pg


def shape(x: Any) -> Any:
    """Nested keys of a JSON form; leaves as ``"str"``, ``"bool"``, ``"number"``, ``"list"``."""
    if isinstance(x, dict):
        return {k: shape(v) for k, v in sorted(x.items())}
    if isinstance(x, list):
        return "list"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, str) and x not in ("inf", "-inf"):
        return "str"
    return "number"  # int, float, None (NaN) or "inf"


def mp() -> pg.Report:
    x = np.array([0.3, 1.2])
    return pg.check(lambda x: np.sum(np.sin(x)), x, grad=np.cos, reference="mp")


def float64_fd() -> pg.Report:
    """float32 inputs: a float64 reference, the naive central difference, the Taylor test."""
    w = np.array([0.5, 1.5, -1.0], dtype=np.float32)
    return pg.check(lambda x: np.sum(w * np.sin(x)), np.array([0.3, -1.1, 2.0], np.float32),
                    grad=lambda x: w * np.cos(x))  # fmt: skip


def projections() -> pg.Report:
    x = np.linspace(-1.0, 1.0, 12)
    return pg.check(lambda x: np.tanh(x) * 2.0, x, vjp=lambda u, x: 2.0 * u / np.cosh(x) ** 2,
                    strategy="projections")  # fmt: skip


def nonsmooth() -> pg.Report:
    return pg.check(lambda x: np.sum(np.abs(x)), np.array([0.0, 1.0]), grad=np.sign)


def mismatch_escalated() -> pg.Report:
    """float32 erfc with a rule 1e-3 too large: entries in doubt re-examined with mp."""
    import torch

    def bad(x: Any) -> Any:
        y = torch.special.erfc(x)
        return y + 1e-3 * (y - y.detach())

    return pg.check(bad, torch.tensor([-6.0, 7.0]))


def complex_input() -> pg.Report:
    z = np.array([0.3 + 0.4j, -1.0 + 0.2j])
    return pg.check(lambda z: np.sum(np.abs(z) ** 2), z, grad=lambda z: 2 * z)


def your_terms() -> pg.Report:
    x = np.array([0.3, 1.2])
    return pg.check(lambda x: np.sum(np.sin(x)), x, grad=np.cos, compare_with="fd",
                    compare_step=1e-4)  # fmt: skip


CASES: dict[str, Callable[[], pg.Report]] = {
    "mp": mp,
    "float64_fd": float64_fd,
    "projections": projections,
    "nonsmooth": nonsmooth,
    "mismatch_escalated": mismatch_escalated,
    "complex": complex_input,
    "your_terms": your_terms,
}


def record() -> dict[str, Any]:
    """Each case's verdict and the structure of its ``details`` JSON form."""
    out = {}
    for name, case in CASES.items():
        r = case()
        out[name] = {"verdict": str(r.verdict), "details": shape(r.to_dict()["details"])}
    return out


if __name__ == "__main__":
    print(json.dumps(record(), indent=1, sort_keys=True))
