"""The command line, run as ``python -m polygrad`` in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PNG = b"\x89PNG\r\n\x1a\n"

NUMPY_FILE = textwrap.dedent(
    """
    import numpy as np

    SCALE = np.float32(0.773)

    def logdensity(x):
        return np.sum(-x**2 / (2 * SCALE**2))

    def logdensity_grad(x):
        return -x / SCALE**2

    def buggy_grad(x):
        return -x / SCALE

    def no_grad(x):
        return np.sum(np.sin(x))
    """
)

TORCH_FILE = textwrap.dedent(
    """
    import torch

    def f(x):
        return torch.sum(torch.sin(x) * x)
    """
)


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("FORCE_COLOR", None)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "polygrad", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=e,
    )


@pytest.fixture
def user_files(tmp_path):
    (tmp_path / "model.py").write_text(NUMPY_FILE)
    (tmp_path / "tmodel.py").write_text(TORCH_FILE)
    return tmp_path


def test_check_pass_fail_and_json(user_files, tmp_path):
    f = str(user_files / "model.py")
    out = tmp_path / "out" / "report.json"
    ok = run(
        "check", f"{f}:logdensity", "--at", "1.0, 2.0", "--dtype", "float32", "--json", str(out)
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("polygrad: PASS") and "\x1b[" not in ok.stdout  # piped: plain
    data = json.loads(out.read_text())
    assert data["verdict"] == "PASS" and data["ok"] is True
    assert data["details"]["working_dtype"] == "float32"
    bad = run(
        "check",
        f"{f}:logdensity",
        "--at",
        "1.0",
        "--grad",
        "buggy_grad",
        "--plot",
        str(tmp_path / "entries.png"),
    )
    assert bad.returncode == 1
    assert "MISMATCH" in bad.stdout and "Taylor test" in bad.stdout
    png = (tmp_path / "entries.png").read_bytes()
    assert png[:8] == PNG and len(png) > 5_000
    # --grad given as file.py:function
    ok2 = run(
        "check",
        f"{f}:logdensity",
        "--at",
        "[0.5, -1.5]",
        "--dtype",
        "float64",
        "--grad",
        f"{f}:logdensity_grad",
    )
    assert ok2.returncode == 0 and "float64" in ok2.stdout


def test_usage_errors_exit_2(user_files):
    f = str(user_files / "model.py")
    cases = [
        ("check", f"{f}:missing", "--at", "1"),
        ("check", str(user_files / "nofile.py") + ":f", "--at", "1"),
        ("check", f"{f}:logdensity", "--at", "one, two"),
        ("check", f"{f}:no_grad", "--at", "1"),  # NumPy without a derivative
        ("check", f"{f}:logdensity"),  # --at missing (argparse)
        ("check", f"{f}:logdensity", "--at", "1", "--backend", "fortran"),
        (),
    ]
    for args in cases:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
    r = run("check", f"{f}:no_grad", "--at", "1")
    assert "--grad" in r.stderr


def test_framework_from_imports_and_taylor(user_files, tmp_path):
    f = str(user_files / "tmodel.py")
    r = run("check", f"{f}:f", "--at", "0.3, -1.2", "--no-color")
    assert r.returncode == 0, r.stderr
    assert "torch, float32" in r.stdout
    t = run("taylor", f"{f}:f", "--at", "0.3, -1.2", "--plot", str(tmp_path / "t.png"))
    assert t.returncode == 0 and "consistent" in t.stdout
    assert (tmp_path / "t.png").read_bytes()[:8] == PNG


def test_sweep_with_plot(user_files, tmp_path):
    f = str(user_files / "model.py")
    png = tmp_path / "sweep.png"
    r = run(
        "sweep",
        f"{f}:logdensity",
        "--at",
        "1.0",
        "--dtype",
        "float32",
        "--plot",
        str(png),
        "--json",
        str(tmp_path / "sweep.json"),
    )
    assert r.returncode == 0, r.stderr
    assert "best" in r.stdout and "2^-13" in r.stdout
    data = png.read_bytes()
    assert data[:8] == PNG and len(data) > 10_000
    sw = json.loads((tmp_path / "sweep.json").read_text())
    assert sw["optimal_step"] >= 2.0**-5 and len(sw["central_error"]) == len(sw["steps"])
    r = run("sweep", f"{f}:logdensity", "--at", "1.0", "--steps", "2^-5, 2^-9, 2^-13")
    assert r.returncode == 0 and r.stdout.count("2^-") >= 3


def test_backends():
    r = run("backends")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["backend", "installed", "version", "float64"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"numpy", "torch", "jax", "tensorflow"}
    for name in rows:
        assert " yes " in rows[name]
        assert "cpu" in rows[name].lower()
    # without --devices nothing is imported: fast, and still lists versions
    r = run("backends", "--no-devices")
    assert r.returncode == 0 and "numpy" in r.stdout


def test_import_polygrad_is_light():
    code = (
        "import sys, polygrad, polygrad.cli, polygrad.sweep, polygrad.taylor; "
        "print(sorted(m for m in ('torch','jax','tensorflow','matplotlib') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]"


def test_supplied_gradient_means_numpy_even_if_the_file_imports_torch(tmp_path):
    (tmp_path / "mixed.py").write_text(
        "import numpy as np\nimport torch\n\n"
        "def f(x):\n    return np.sum(np.sin(x))\n\n"
        "def g(x):\n    return np.cos(x)\n\n"
        "def g_bad(x):\n    return 1.01 * np.cos(x)\n"
    )
    f = str(tmp_path / "mixed.py")
    ok = run("check", f"{f}:f", "--at", "0.5, 1.5", "--grad", f"{f}:g")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("polygrad: PASS") and "numpy" in ok.stdout
    bad = run("check", f"{f}:f", "--at", "0.5, 1.5", "--grad", f"{f}:g_bad")
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout


TF_FILE = textwrap.dedent(
    """
    import os
    import sys

    import tensorflow as tf

    print("user line on sys.stderr", file=sys.stderr)
    os.write(2, b"user line on fd 2\\n")

    def f(x):
        return tf.reduce_sum(tf.sin(x) * x)
    """
)

# absl/glog records as TensorFlow writes them (severity, MMDD, time, thread, file:line])
NATIVE_LOG = r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|absl::InitializeLog|oneDNN|cuInit|cuda"


@pytest.mark.parametrize("level", [None, "3"])
def test_check_on_tensorflow_prints_no_native_log_line(tmp_path, level):
    """TF's C++ log lines stay off stderr, with or without the user's TF_CPP_MIN_LOG_LEVEL."""
    import re

    (tmp_path / "tfmodel.py").write_text(TF_FILE)
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    r = subprocess.run(
        [sys.executable, "-m", "polygrad", "check", f"{tmp_path / 'tfmodel.py'}:f", "--at", "1, 2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("polygrad: PASS")
    bad = [line for line in r.stderr.splitlines() if re.search(NATIVE_LOG, line)]
    assert bad == [], r.stderr
    # what the user's own code writes to stderr is kept, from Python and from native code
    assert r.stderr.splitlines() == ["user line on sys.stderr", "user line on fd 2"], r.stderr


def test_native_log_filter_is_scoped_to_the_entry_points():
    """``import polygrad`` sets nothing; the CLI's filter restores env, fd 2 and sys.stderr."""
    code = (
        "import os, sys\n"
        "import polygrad\n"
        "from polygrad._native_logs import quiet_native_logs, is_native_log_line\n"
        "assert 'TF_CPP_MIN_LOG_LEVEL' not in os.environ\n"
        "before = (sys.stderr, os.fstat(2).st_ino)\n"
        "with quiet_native_logs():\n"
        "    assert os.environ['TF_CPP_MIN_LOG_LEVEL'] == '3'\n"
        "    os.write(2, b'I0000 00:00:1796135232.291440    8347 port.cc:153] oneDNN on\\n')\n"
        "    os.write(2, b'kept\\n')\n"
        "assert 'TF_CPP_MIN_LOG_LEVEL' not in os.environ\n"
        "assert (sys.stderr, os.fstat(2).st_ino) == before\n"
        "assert is_native_log_line('E0000 00:00:17.5  12 cuda_platform.cc:52] failed cuInit')\n"
        "assert not is_native_log_line('E: my own error')\n"
        "print('done')\n"
    )
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n" and r.stderr == "kept\n"
