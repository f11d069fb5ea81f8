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
    # one table of verdicts on correct cases, one of planted bugs and the framework's checker
    assert "| torch | float32 | 1 | 1 | 1/1 (100%) | 0 | 0 | 0 | 0 (0) | 0 |\n" in block
    assert "| framework | dtype | planted bugs caught | plants that round away |" in block
    assert "| torch | float32 | 2/2 (100%) | 0 | 1 / 0 / 0 |" in block
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


def _latency_row(job: str, date: str) -> dict:
    kind, _, arg = job.partition(":")
    framework, dtype = arg.split(",")[:2] if kind in ("small", "loss") else ("torch", "float64")
    row = {"job": job, "n": 10, "framework": framework, "dtype": dtype, "measured": date}
    if kind == "full":
        row.update(n=10_000, strategy="full")
    return row


def test_latency_dates_come_from_the_rows() -> None:
    """The sentence above a latency table states the date each row was measured, from
    ``latency.json``: the first row's, and the others' by their jobs (a kind of job by
    its name only when every row of that kind was measured that day)."""
    from benchmarks.latency import measured

    small = [_latency_row(f"small:{fw},float32", "2026-12-03") for fw in ("numpy", "jax")]
    losses = [_latency_row(f"loss:{fw},float64", "2026-12-06") for fw in ("numpy", "jax")]
    assert measured(small) == "Measured 2026-12-03"
    assert measured(small + losses) == "Measured 2026-12-03 (the scalar-loss rows: 2026-12-06)"
    losses[1]["measured"] = "2026-12-07"
    assert measured(small + losses) == (
        "Measured 2026-12-03 (the rows of loss:numpy,float64: 2026-12-06; "
        "the rows of loss:jax,float64: 2026-12-07)"
    )
    undated = [{k: v for k, v in r.items() if k != "measured"} for r in small]
    assert measured(undated) == "Measured on an unrecorded date"


def test_latency_blocks_go_to_their_pages(tmp_path: Path) -> None:
    """The large rows go to the scale page's table, the others to the speed page's; each
    block is written between its markers, the text around it kept, and its caption names
    the date of its own rows and the machine from the results file."""
    from benchmarks import latency, pages

    rows = [
        _latency_row("small:numpy,float32", "2026-12-03"),
        _latency_row("full:10000", "2026-12-05"),
    ]
    for r in rows:
        r.update(tool="t", tool_warm=0.01, polygrad_warm=0.02, verdict="PASS")
    rows[0].update(tool_first=0.1, polygrad_first=0.3)
    payload = {"cpu_count": 7, "shared": False, "warm_repeats": 9, "twin_repeats": 3,
               "rows": rows, "failing": [], "errors": []}  # fmt: skip
    (tmp_path / "speed.md").write_text(
        "# Speed\n\n<!-- latency:begin -->\nold\n<!-- latency:end -->\n\ntail\n"
    )
    latency.write_pages(tmp_path, payload)
    speed, scale = (tmp_path / "speed.md").read_text(), (tmp_path / "scale.md").read_text()
    assert speed.startswith("# Speed\n\n<!-- latency:begin -->\nMeasured") and "old" not in speed
    assert "<!-- latency:end -->\n\ntail\n\n## Cost of a failing check\n" in speed
    block = pages.find(speed, "latency")
    assert block is not None
    assert block.group(1).strip().startswith("Measured 2026-12-03 on 7 CPU cores")
    assert "n = 10000" not in block.group(1)
    assert (
        "numpy, n = 10, float32 | t | 10.0 ms | 20.0 ms | 2.0x | 100.0 ms | 300.0 ms | 3.0x |"
        in speed
    )
    large = pages.find(scale, "latency-large")
    assert large is not None and scale.startswith(latency.HEADINGS["latency-large"])
    assert large.group(1).strip().startswith("Measured 2026-12-05 on 7 CPU cores")
    assert "n = 10000, float64, full | t | 10.0 ms | 20.0 ms | 2.0x | PASS |" in scale
    assert pages.find(speed, "latency-failing") is not None  # appended, under its heading
