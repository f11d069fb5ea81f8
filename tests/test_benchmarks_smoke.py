"""Smoke test: the CNN input-gradient benchmark runs and writes its results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {
    ("tensorflow", "polygrad.check(strategy='full')"),
    ("tensorflow", "tf.test.compute_gradient"),
    ("torch", "polygrad.check(strategy='full')"),
    ("torch", "torch.autograd.gradcheck float32"),
    ("torch", "torch.autograd.gradcheck float64"),
    ("torch", "torch.autograd.gradcheck float64 fast_mode"),
}


def test_cnn_input_gradient_benchmark_quick(tmp_path: Path) -> None:
    """``python -m benchmarks.cnn_input_gradient --quick`` exits 0 with all tools timed."""
    out = tmp_path / "cnn.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cnn_input_gradient", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["results"]
    seconds = {(r["framework"], r["tool"]): r["seconds"] for r in rows}
    assert set(seconds) == TOOLS
    assert all(s > 0 for s in seconds.values())


def test_latency_benchmark_quick(tmp_path: Path) -> None:
    """``python -m benchmarks latency --quick`` times polygrad beside each checker."""
    out = tmp_path / "latency.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "latency", "--quick", "--out-json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {(r["framework"], r["dtype"]) for r in rows} == {
        (fw, dt) for fw in ("numpy", "torch") for dt in ("float32", "float64")
    }
    for r in rows:
        assert r["verdict"] == "PASS", r
        assert r["tool_warm"] > 0 and r["polygrad_warm"] > 0
