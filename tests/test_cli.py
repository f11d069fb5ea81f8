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


@pytest.mark.polygrad_backends("torch")
def test_a_numpy_function_with_its_gradient_in_a_file_that_imports_torch(tmp_path):
    """``f`` and ``f_grad`` in NumPy, in a file that also imports torch (for other
    functions): the CLI used to run ``f`` as torch and fail with a bare TypeError. The
    gradient next to ``f`` makes it a NumPy function; the torch function beside it is
    still run as torch."""
    path = tmp_path / "mixed.py"
    path.write_text(textwrap.dedent(
        """
        import numpy as np
        import torch

        def f(x):
            return np.sum(np.log1p(x**2))

        def f_grad(x):
            return 2 * x / (1 + x**2)

        def g(x):
            return torch.sum(torch.sin(x) * x)
        """
    ))  # fmt: skip
    r = run("check", f"{path}:f", "--at", "0.5, -1.5, 2.0", "--no-color")
    assert r.returncode == 0, r.stderr
    assert "PASS" in r.stdout and "numpy, float32" in r.stdout
    t = run("check", f"{path}:g", "--at", "0.5, -1.5", "--no-color", "--backend", "torch")
    assert t.returncode == 0 and "torch, float32" in t.stdout, t.stderr


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


# --- several arguments, array files, --json, --dtype, factories --------------------------

MULTI_FILE = textwrap.dedent(
    """
    import numpy as np

    def f(x, scale, b):
        return np.sum(scale * np.sin(x) + b * x**2)

    def f_grad(x, scale, b):
        return scale * np.cos(x) + 2 * b * x, np.sum(x**2)

    def f_bad(x, scale, b):
        return scale * np.cos(x) + b * x, np.sum(x**2)

    def g(x):
        return np.sum(np.exp(-x / 100.0))

    def g_grad(x):
        return -np.exp(-x / 100.0) / 100.0
    """
)

SCALE = [0.5, 1.5, 2.0, 1.0, 0.75]


@pytest.fixture
def multi(tmp_path):
    import numpy as np

    (tmp_path / "multi.py").write_text(MULTI_FILE)
    np.save(tmp_path / "scale.npy", np.asarray(SCALE))
    np.savez(tmp_path / "params.npz", b=np.asarray(0.25), other=np.ones(2))
    return tmp_path


def check_json(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    r = run("check", *args, "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r, json.loads(r.stdout)


def test_several_arguments_from_expressions_and_files(multi):
    import numpy as np

    d = multi
    r, data = check_json(
        f"{d / 'multi.py'}:f",
        "--arg",
        "np.linspace(-1, 1, 5)",
        "--arg",
        f"@{d / 'scale.npy'}",
        "--arg",
        f"@{d / 'params.npz'}:b",
        "--argnums",
        "0,2",
    )
    assert r.returncode == 0 and data["verdict"] == "PASS" and data["ok"] is True
    det = data["details"]
    assert det["working_dtype"] == "float64"  # NumPy arrays keep their dtype
    assert det["inputs"] == 6  # x (5 entries) and b; scale is not differentiated
    x = np.linspace(-1, 1, 5)
    dx = np.asarray(SCALE) * np.cos(x) + 0.5 * x
    exact = {f"x[{i}]": dx[i] for i in range(5)}
    exact["b"] = float(np.sum(x**2))
    rows = {e["name"]: e for e in data["worst_entries"]}
    assert set(rows) == set(exact)
    for name, value in exact.items():
        assert rows[name]["reference"] == pytest.approx(value, rel=1e-13, abs=1e-15)
    # the wrong rule for x is found with the same arguments
    bad = run(
        "check",
        f"{d / 'multi.py'}:f",
        "--arg",
        "np.linspace(-1, 1, 5)",
        "--arg",
        f"@{d / 'scale.npy'}",
        "--arg",
        f"@{d / 'params.npz'}:b",
        "--argnums",
        "0,2",
        "--grad",
        "f_bad",
    )
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout


@pytest.mark.parametrize(
    ("options", "dtype"),
    [
        ([], "float64"),  # np.full makes float64 and keeps it
        (["--dtype", "float32"], "float32"),
        (["--dtype", "float16"], "float16"),
    ],
)
def test_dtype_casts_the_floating_arguments(multi, options, dtype):
    import numpy as np

    r, data = check_json(
        f"{multi / 'multi.py'}:g", "--arg", "np.full(1000, 100.0)", "--strategy", "full", *options
    )
    assert r.returncode == 0 and data["verdict"] == "PASS" and data["ok"] is True
    assert data["details"]["working_dtype"] == dtype and data["details"]["inputs"] == 1000
    x = np.asarray(100.0, dtype)  # 100 is exact in all three dtypes
    exact = -np.exp(-float(x) / 100.0) / 100.0
    eps = float(np.finfo(dtype).eps)
    # float64 differences resolve about 1e-11 relative here (n = 1000 is past the mp reference)
    resolution = 1e-10 if dtype == "float64" else eps
    for row in data["worst_entries"]:
        # the float64 reference's error bar covers the closed form
        assert abs(row["reference"] - exact) <= row["reference_error"]
        assert row["reference_error"] <= resolution * abs(exact)
        assert row["autodiff"] == pytest.approx(exact, rel=eps)


def test_numbers_and_at_default_to_float32_and_json_file_keeps_the_text(multi, tmp_path):
    f = f"{multi / 'multi.py'}:g"
    out = tmp_path / "r.json"
    r = run("check", f, "--arg", "[99.0, 101.0]", "--json", str(out))
    assert r.returncode == 0 and r.stdout.startswith("polygrad: PASS"), r.stderr
    assert json.loads(out.read_text())["details"]["working_dtype"] == "float32"
    r, data = check_json(f, "--at", "1, 2")
    assert data["details"]["working_dtype"] == "float32" and data["ok"] is True


def test_sweep_and_taylor_take_several_arguments(multi):
    d = multi
    common = [
        f"{d / 'multi.py'}:f",
        "--arg",
        "np.linspace(-1, 1, 5)",
        "--arg",
        f"@{d / 'scale.npy'}",
        "--arg",
        "0.25",
        "--dtype",
        "float64",
    ]
    r = run("sweep", *common, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["optimal_step"] > 0
    t = run("taylor", *common, "--grad", "f_grad", "--argnums", "0,2")
    assert t.returncode == 0 and "consistent" in t.stdout, t.stdout + t.stderr


FACTORIES = textwrap.dedent(
    """
    import numpy as np

    def f(x):
        return np.sum(x**3)

    def not_a_tuple():
        return f

    def args_not_a_tuple():
        return f, np.ones(3)

    def four_things():
        return f, (np.ones(3),), {}, None

    def unknown_option():
        return f, (np.ones(3),), {"grad": lambda x: 3 * x**2, "tolerance": 1e-3}

    def good():
        return f, (np.ones(3),), {"grad": lambda x: 3 * x**2}
    """
)


def test_usage_errors_of_arguments_and_factories_exit_2(multi):
    d = multi
    (d / "factories.py").write_text(FACTORIES)
    m, fa = f"{d / 'multi.py'}", f"{d / 'factories.py'}"
    cases = [
        (("check", f"{m}:g", "--arg", "np.full(3,"), "not a Python expression"),
        (("check", f"{m}:g", "--arg", "np.fill(3, 1.0)"), "AttributeError"),
        (("check", f"{m}:g", "--arg", f"@{d / 'none.npy'}"), "no such file"),
        (("check", f"{m}:g", "--arg", f"@{d / 'multi.py'}"), ".npy"),
        (("check", f"{m}:g", "--arg", f"@{d / 'params.npz'}"), "name one with file.npz:key"),
        (("check", f"{m}:g", "--arg", f"@{d / 'params.npz'}:c"), "no array 'c'"),
        (("check", f"{m}:g"), "--arg EXPR"),
        (("check", f"{m}:f", "--arg", "1.0", "--argnums", "3"), "argnums"),
        (("check", f"{m}:g", "--arg", "1.0", "--argnums", "x"), "--argnums"),
        (("check", f"{fa}:not_a_tuple", "--factory"), "must return (f, args)"),
        (("check", f"{fa}:args_not_a_tuple", "--factory"), "(x,)"),
        (("check", "--factory", f"{fa}:four_things"), "of length 4"),
        (("check", f"{fa}:unknown_option", "--factory"), "tolerance"),
        (("check", f"{fa}:good", "--factory", "--arg", "1.0"), "do not apply"),
        (("check", f"{m}:g", "--factory", f"{fa}:good"), "give the factory once"),
        (("check", "--factory"), "--factory"),
    ]
    for args, message in cases:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr, (args, r.stderr)
    ok = run("check", f"{fa}:good", "--factory", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["verdict"] == "PASS", ok.stderr


TORCH_FACTORY = textwrap.dedent(
    """
    import torch

    W = [[0.5, -1.0, 2.0]]
    B = [0.1]

    def make():
        layer = torch.nn.Linear(3, 1, dtype=torch.float64)
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(W, dtype=torch.float64))
            layer.bias.copy_(torch.tensor(B, dtype=torch.float64))
        x = torch.tensor([0.3, -0.2, 0.4], dtype=torch.float64)
        return (lambda x: torch.tanh(layer(x)).sum()), (x,), {"strategy": "full"}

    def f(x, s):
        return torch.sum(torch.tanh(s * x))
    """
)


@pytest.mark.polygrad_backends("torch")
def test_torch_factory_and_torch_arguments(tmp_path):
    import numpy as np

    (tmp_path / "tfac.py").write_text(TORCH_FACTORY)
    r = run("check", f"{tmp_path / 'tfac.py'}:make", "--factory", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["verdict"] == "PASS" and data["ok"] is True
    det = data["details"]
    assert det["backend"] == "torch" and det["working_dtype"] == "float64"
    assert det["strategy"] == "full"  # the factory's option reached check
    w, x = np.array([0.5, -1.0, 2.0]), np.array([0.3, -0.2, 0.4])
    exact = (1 - np.tanh(w @ x + 0.1) ** 2) * w
    ref = [row["reference"] for row in sorted(data["worst_entries"], key=lambda e: e["name"])]
    np.testing.assert_allclose(ref, exact, rtol=1e-12)
    # expressions become torch tensors; --argnums 0,1 differentiates both
    r, data = check_json(
        f"{tmp_path / 'tfac.py'}:f", "--arg", "[0.3, -1.2]", "--arg", "2.0", "--argnums", "0,1"
    )
    assert data["verdict"] == "PASS" and data["ok"] is True
    assert data["details"]["backend"] == "torch" and data["details"]["inputs"] == 3
    assert data["details"]["working_dtype"] == "float32"


FRAMEWORK_FILES = {
    "jax": "import jax.numpy as jnp\n\ndef f(x, w):\n    return jnp.sum(jnp.sin(x) * w)\n",
    "tensorflow": (
        "import tensorflow as tf\n\ndef f(x, w):\n    return tf.reduce_sum(tf.sin(x) * w)\n"
    ),
}


@pytest.mark.parametrize(
    "framework",
    [pytest.param(name, marks=pytest.mark.polygrad_backends(name)) for name in FRAMEWORK_FILES],
)
@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
def test_expressions_become_the_frameworks_arrays(tmp_path, framework, dtype):
    import numpy as np

    (tmp_path / "fw.py").write_text(FRAMEWORK_FILES[framework])
    r, data = check_json(
        f"{tmp_path / 'fw.py'}:f",
        "--arg",
        "np.linspace(0, 1, 4)",
        "--arg",
        "np.arange(4.0)",
        "--dtype",
        dtype,
    )
    assert data["verdict"] == "PASS" and data["ok"] is True, r.stderr
    det = data["details"]
    assert det["backend"] == framework and det["working_dtype"] == dtype
    assert det["inputs"] == 4 and det["reference"]["method"] in ("quad", "mp", "float64")
    # the reference is of the function at the cast point: bfloat16 rounds linspace(0, 1, 4)
    rounded = np.asarray([0.0, 0.333984375, 0.66796875, 1.0])  # exact bfloat16 numbers
    x = np.linspace(0, 1, 4) if dtype == "float64" else rounded
    exact = dict(zip([f"x[{i}]" for i in range(4)], np.cos(x) * np.arange(4.0), strict=True))
    resolution = 1e-10 if dtype == "float64" else 2.0**-8  # bfloat16 has 8 significant bits
    scale = max(abs(v) for v in exact.values())  # w[0] = 0: one exact zero in the gradient
    for row in data["worst_entries"]:
        value = exact[row["name"]]
        # the error bar covers the closed form (itself rounded to float64)
        assert abs(row["reference"] - value) <= row["reference_error"] + 4e-16 * abs(value)
        assert row["reference_error"] <= resolution * scale


CNN_FACTORY = textwrap.dedent(
    """
    import numpy as np
    import tensorflow as tf
    import keras
    from sklearn.datasets import load_digits

    def digit():
        digits = load_digits()
        img = digits.images[0] / 16.0  # a real "0"
        big = tf.image.resize(img[None, :, :, None], (28, 28), method="bilinear")
        x = np.clip(big.numpy(), 0.0, 1.0).reshape(784).astype(np.float32)
        return tf.constant(x), int(digits.target[0])

    def make():
        x, label = digit()
        y = tf.one_hot([label], 10)
        keras.utils.set_random_seed(1)
        bias = {"bias_initializer": keras.initializers.RandomNormal(stddev=0.05)}
        model = keras.Sequential([
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu", **bias),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu", **bias),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax", **bias),
        ])
        cce = keras.losses.CategoricalCrossentropy()
        return (lambda x: cce(y, model(tf.reshape(x, (1, 28, 28, 1))))), (x,)
    """
)


@pytest.mark.polygrad_backends("tensorflow")
def test_users_case2_cnn_from_the_command_line_through_a_factory(tmp_path):
    """USERS.md case 2: a closure over a Keras CNN and a loss object, every pixel checked.

    docs/cli.md shows this factory and this run: its source and its counts are read
    from the page, so the page cannot drift from what the command does.
    """
    import re
    from pathlib import Path

    (tmp_path / "cnn.py").write_text(CNN_FACTORY)
    r = run("check", f"{tmp_path / 'cnn.py'}:make", "--factory", "--strategy", "full", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["verdict"] in ("PASS", "NONSMOOTH") and data["ok"] is True
    counts = data["counts"]
    assert set(counts) <= {"PASS", "NONSMOOTH"} and counts.get("PASS", 0) > 0
    assert sum(counts.values()) == 784  # every pixel of the image
    det = data["details"]
    assert det["backend"] == "tensorflow" and det["working_dtype"] == "float32"
    assert det["strategy"] == "full" and det["reference"]["method"] == "float64"
    page = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    assert CNN_FACTORY.strip() in page
    shown = re.search(r"verdicts: NONSMOOTH (\d+), PASS (\d+)", page)
    assert shown is not None
    assert (int(shown[1]), int(shown[2])) == (counts.get("NONSMOOTH", 0), counts["PASS"])
    assert f"{counts['PASS']} smooth entries pass" in page
    assert f"the {counts.get('NONSMOOTH', 0)} pixels" in page


SWISH_FILE = textwrap.dedent(
    """
    import torch


    class Swish(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * torch.sigmoid(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(x)
            return g * (s + x * s * (1 - s) * 1.01)  # the bug: 1.01


    def f(x):
        return torch.tanh(Swish.apply(torch.sin(x))).sum()
    """
)


def test_localize_names_the_wrong_rule_and_its_line(tmp_path):
    """``check --localize`` after a MISMATCH: the custom rule is named, with the line of
    the user's file that called it, before the Jacobian entries; without the flag the
    walk runs within the check's own time, and with ``--no-localize`` not at all."""
    path = tmp_path / "swish.py"
    path.write_text(SWISH_FILE)
    args = ("check", f"{path}:f", "--at", "0.3, -1.2, 2.0", "--dtype", "float64")
    out = run(*args, "--localize")
    assert out.returncode == 1, out.stderr
    text = out.stdout
    assert "Localized: the first node whose own rule is wrong" in text, text
    assert "torch.autograd.Function Swish (custom rule)" in text, text
    assert f"{path}:19 in f" in text, text
    assert text.index("Localized:") < text.index("worst entries:")
    plain = run(*args)  # by default, within the check's own time: found here too
    assert plain.returncode == 1 and "Localized: the first node" in plain.stdout
    off = run(*args, "--no-localize")
    assert off.returncode == 1 and "Localized:" not in off.stdout
