"""The documentation builds with ``mkdocs build --strict``: no warning, no broken link.

The build runs the hooks of ``docs/hooks.py`` (figures drawn by polygrad, benchmark
tables) and renders the API reference from the docstrings, so a renamed function, a
broken docstring section or a missing benchmark result fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert "WARNING" not in log, log
    for page in ("getting-started", "why-fd-fails", "error-model", "comparison", "api"):
        assert (site / page / "index.html").exists(), page
    for figure in ("vcurve", "vshape", "summation", "noise", "taylor", "kinks"):
        png = site / "figures" / f"{figure}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", figure
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for anchor in ("polygrad.check.check", "polygrad.assert_gradients", "polygrad.Verdict.PASS"):
        assert f'id="{anchor}"' in api, anchor
    comparison = (site / "comparison" / "index.html").read_text(encoding="utf-8")
    assert "benchmark-table" not in comparison  # the marker was replaced by the table
    assert "tf.test.compute_gradient</code></td>" in comparison
    if (ROOT / "docs" / "benchmarks.md").exists():
        assert (site / "benchmarks" / "index.html").exists()
