"""``polygrad demo`` with every backend installed: all examples, expected verdicts, files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

PNG = b"\x89PNG\r\n\x1a\n"
# absl/glog records as TensorFlow writes them, and its banners
NATIVE_LOG = r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|absl::InitializeLog|oneDNN|cuInit"


def test_demo_runs_everything(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the demo keeps TensorFlow's C++ log lines away
    r = subprocess.run(
        [sys.executable, "-m", "polygrad", "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    native = [line for line in r.stderr.splitlines() if re.search(NATIVE_LOG, line)]
    assert native == [], r.stderr
    text = r.stdout
    assert "Summary: 7 of 7 examples gave the expected verdict" in text
    assert "UNEXPECTED" not in text and "skipped" not in text
    for fw in ("numpy", "tensorflow", "tensorflow (tfp)", "torch", "jax"):
        assert f"case 1 normal log-density  {fw} " in text
    assert "MISMATCH" in text and "Taylor slope 1.0" in text
    assert "[as expected] custom gradient, bug" in text and "far outside the tolerance" in text
    assert "the wrong rule, localized: torch.autograd.Function SinSquare" in text
    for line in text.splitlines():  # every value line gives the gap and the tolerance
        if "case 1 normal log-density" in line:
            assert re.search(r"\|diff\| [\d.e-]+, within the tolerance [\d.e-]+$", line), line
            # the two values carry the digits where they part: |diff| 2e-8 near 0.77 shows
            # 10 digits, not -0.773585 against -0.773586 (a gap that reads 50 times the |diff|)
            m = re.search(r"autodiff (\S+), reference (\S+) .*\|diff\| (\S+),", line)
            ad, ref, diff = (float(v) for v in m.groups())
            assert abs(abs(ad - ref) - diff) <= 0.1 * diff, line
    assert "this f is quadratic (f''' = 0" in text  # what the best step h = 0.5 rests on
    assert "the best step swept" not in text  # 0.5 is predicted best, not the best measured
    # the user's own checks, re-run and explained: compute_gradient (case 1), the loop (case 2)
    assert "your check: tf.test.compute_gradient with delta = 0.000122 (2^-13)" in text
    assert "your check: central differences with h = 0.0001" in text
    assert "784 pixels in one batched pass" in text
    # the digit image as it is: its kinks are shown, NONSMOOTH and ok
    assert re.search(r"\(\d+ NONSMOOTH, \d+ PASS\)", text)
    assert "NONSMOOTH in case 2 marks the pixels at a kink" in text
    # the user's relative metric reads 1 at every step: the best-step line says so
    assert "no step in that range brings this metric below your 1" in text
    summary = json.loads((out / "summary.json").read_text())
    statuses = [o["status"] for o in summary["outcomes"]]
    assert statuses[:6] == ["PASS"] * 5 + ["MISMATCH"]
    assert statuses[6] == "NONSMOOTH"  # the image as it is: kinks, shown and ok
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 7  # five sweeps, the Taylor plot of the bug, the CNN heat map
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 10_000, p
    rep = json.loads((out / "case1-tensorflow.json").read_text())
    assert rep["verdict"] == "PASS" and rep["details"]["reference"]["method"] == "float64"
    sw = json.loads((out / "case1-numpy-sweep.json").read_text())
    assert sw["optimal_step"] == 0.5


def test_demo_numpy_only(tmp_path):
    """Without frameworks (simulated by hiding them) the demo runs what it can and says so."""
    out = tmp_path / "demo"
    code = (
        "import sys, importlib.util as u\n"
        "real = u.find_spec\n"
        "hidden = ('torch', 'jax', 'tensorflow', 'tensorflow_probability', 'keras', 'tf_keras')\n"
        "u.find_spec = lambda name, *a, **k: None if name.split('.')[0] in hidden "
        "else real(name, *a, **k)\n"
        "from polygrad.demo import run_demo\n"
        f"sys.exit(run_demo({str(out)!r}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for mod in ("torch", "jax", "tensorflow"):
        assert f"pip install 'polygrad-check[{mod}]'" in r.stdout
    assert "numpy hand-written" in r.stdout and "MISMATCH" in r.stdout
    assert "Summary: 2 of 2 examples" in r.stdout
    assert (out / "case1-numpy-sweep.png").read_bytes()[:8] == PNG
