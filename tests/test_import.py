"""`import polygrad` imports no ML framework, nor does a NumPy-only check."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import numpy as np
import polygrad as pg
heavy = ("torch", "jax", "tensorflow", "keras", "matplotlib")
assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]
r = pg.check(lambda x: np.sum(x**2), np.ones(3, np.float32), grad=lambda x: 2 * x)
assert r.ok
str(r); r.to_dict()
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, loaded
print("clean")
"""


def test_import_and_numpy_check_load_no_framework():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


def test_public_api():
    import polygrad as pg

    for name in ("check", "assert_gradients", "Report", "Verdict", "GradientCheckError"):
        assert hasattr(pg, name)
    assert {v.name for v in pg.Verdict} >= {
        "PASS",
        "MISMATCH",
        "UNSTABLE",
        "NONSMOOTH",
        "NONFINITE",
        "INCONCLUSIVE",
    }
    assert issubclass(pg.GradientCheckError, AssertionError)
