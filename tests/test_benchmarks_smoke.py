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


def test_corpus_benchmark_subset(tmp_path: Path) -> None:
    """One correct catalog case: PASS and ok, both planted bugs caught, the table block written."""
    out, md = tmp_path / "corpus.jsonl", tmp_path / "benchmarks.md"
    md.write_text("# page\n\n<!-- corpus:begin -->\nold\n<!-- corpus:end -->\n\ntail\n")
    name = "torch/torch.special/expit/moderate/float32"
    cmd = [sys.executable, "-m", "benchmarks", "corpus", "--sources", "torch.special"]
    cmd += ["--cases", name, "--out-jsonl", str(out), "--out-md", str(md)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["name"] == name and row["status"] == "case"
    assert row["checker"]["verdict"] == "pass" and row["correct"]
    assert row["polygrad"]["verdict"] == "PASS" and row["polygrad"]["ok"]
    assert set(row["bugs"]) == {"scale-1e-3", "entry-1pct"}
    for bug in row["bugs"].values():
        assert bug["planted"] and bug["caught"] and bug["verdict"] == "MISMATCH", bug
    text = md.read_text()
    assert text.startswith("# page\n") and text.endswith("\ntail\n") and "old" not in text
    block = text.split("<!-- corpus:begin -->")[1].split("<!-- corpus:end -->")[0]
    assert "| framework | dtype | cases | correct | PASS/NONSMOOTH ok |" in block
    row_md = "| torch | float32 | 1 | 1 | 1/1 (100%) | 0 | 0 | 0 | 0 (0) | 2/2 (100%) | 0 | 0 "
    assert row_md + "| 1 / 0 / 0 |" in block
    assert "**Findings: 0 operators" in block


def test_cnn_floor_points_are_two_central_differences_per_pixel() -> None:
    """The floor's points: ``x0 ± h e_i`` for both steps, in float64, pixel by pixel."""
    import numpy as np

    from benchmarks import cnn_input_gradient as cnn

    image = (np.arange(6, dtype=np.float32) / 8).reshape(2, 3)
    points = cnn.floor_points(image)
    assert points.shape == (4 * 6, 2, 3) and points.dtype == np.float64
    moves = (points - image.astype(np.float64)).reshape(4, 6, 6)
    for block, (h, sign) in enumerate((h, s) for h in cnn.FLOOR_STEPS for s in (1.0, -1.0)):
        np.testing.assert_array_equal(moves[block], sign * h * np.eye(6))


def test_cnn_floors_time_the_float64_models_without_changing_them() -> None:
    """Both floors run the float64 copy of the model on the quick (14x14) input; the
    user's float32 models keep their dtype and weights."""
    import numpy as np

    from benchmarks import cnn_input_gradient as cnn

    image, label = cnn.digit_image(14)
    torch_model, keras_model = cnn.torch_cnn(14), cnn.keras_cnn(14)
    keras_model(image[None, :, :, None])
    before = [w.copy() for w in keras_model.get_weights()]
    assert cnn.torch_floor(torch_model, image, label) > 0
    assert cnn.keras_floor(keras_model, image, label) > 0
    assert all(p.dtype.is_floating_point and str(p.dtype) == "torch.float32"
               for p in torch_model.parameters())  # fmt: skip
    after = keras_model.get_weights()
    assert len(after) == len(before)
    pairs = zip(after, before, strict=True)
    assert all(a.dtype == np.float32 and np.array_equal(a, b) for a, b in pairs)


def test_latency_shapes_quick(tmp_path: Path) -> None:
    """One scalar-loss row and one failing-twin row of the latency benchmark, in quick mode:
    the MLP log-softmax loss passes beside ``check_grad``; the MLP with a right
    ``torch.autograd.Function`` rule passes and its twin, the rule planted x(1 + 1e-3),
    is a MISMATCH, both timed."""
    out = tmp_path / "latency.json"
    jobs = "loss:numpy,float32,mlp,twin:torch,float64,mlp"
    cmd = [sys.executable, "-m", "benchmarks", "latency", "--quick", "--jobs", jobs]
    proc = subprocess.run(cmd + ["--out-json", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads(out.read_text())
    assert payload["errors"] == []
    (loss,) = payload["rows"]
    assert loss["shape"] == "scalar loss: MLP log-softmax", loss
    assert (loss["framework"], loss["dtype"], loss["n"]) == ("numpy", "float32", 10)
    assert loss["verdict"] == "PASS" and loss["tool"] == "scipy check_grad", loss
    assert loss["tool_warm"] > 0 and loss["polygrad_warm"] > 0
    (twin,) = payload["failing"]
    assert twin["rule"] == "torch.autograd.Function" and twin["problem"].startswith("MLP"), twin
    assert (twin["pass_verdict"], twin["fail_verdict"]) == ("PASS", "MISMATCH"), twin
    assert min(twin[f"{v}_{c}"] for v in ("pass", "fail") for c in ("warm", "first")) > 0
    assert "scalar loss: MLP log-softmax; numpy, n = 10, float32" in proc.stdout
    assert "| PASS / MISMATCH |" in proc.stdout


def test_latency_jobs_split_only_at_a_new_job_kind() -> None:
    """``--jobs`` text: a job's own argument keeps its commas."""
    from benchmarks.latency import split_jobs

    text = "small:torch,float32,loss:jax,float64,mlp,full:10000"
    assert split_jobs(text) == ["small:torch,float32", "loss:jax,float64,mlp", "full:10000"]
