"""``polygrad init-nox``: the template noxfile, run with nox on a small project.

The project has one custom softplus gradient per framework (a hand-written
NumPy gradient, a ``torch.autograd.Function``, a ``jax.custom_vjp`` with a
planted bug, a ``tf.custom_gradient``). nox runs the template's sessions in
this environment (``--no-venv``: nothing is installed); exactly the JAX one
must fail, with polygrad's MISMATCH report in its output.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from polygrad.cli import main
from polygrad.testing import BACKENDS
from polygrad.testing.nox_template import render_noxfile, write_noxfile

OPS = {
    "numpy_ops.py": """
        import numpy as np

        def softplus(x):
            e = np.exp(-np.abs(x))
            return np.where(x > 0, x + np.log1p(e), np.log1p(np.exp(np.minimum(x, 0))))

        def loss(x):
            return np.sum(softplus(x))

        def loss_grad(x):
            e = np.exp(-np.abs(x))
            return np.where(x > 0, 1 / (1 + e), e / (1 + e))
        """,
    "torch_ops.py": """
        import torch

        class Softplus(torch.autograd.Function):
            @staticmethod
            def forward(x):
                return torch.nn.functional.softplus(x)

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(inputs[0])

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * torch.sigmoid(x)

        def loss(x):
            return torch.sum(Softplus.apply(x))
        """,
    "jax_ops.py": """
        import jax
        import jax.numpy as jnp

        @jax.custom_vjp
        def softplus(x):
            return jax.nn.softplus(x)

        def _fwd(x):
            return softplus(x), x

        def _bwd(x, g):
            return (g * jax.nn.sigmoid(-x),)  # planted bug: the derivative is sigmoid(x)

        softplus.defvjp(_fwd, _bwd)

        def loss(x):
            return jnp.sum(softplus(x))
        """,
    "tensorflow_ops.py": """
        import tensorflow as tf

        @tf.custom_gradient
        def softplus(x):
            def grad(g):
                return g * tf.math.sigmoid(x)

            return tf.math.softplus(x), grad

        def loss(x):
            return tf.reduce_sum(softplus(x))
        """,
}

TESTS = """
    import importlib

    import numpy as np
    import pytest


    def test_softplus_gradient(backend):
        ops = importlib.import_module(f"mylib.{backend.name}_ops")
        x = backend.asarray(np.linspace(-3.0, 3.0, 7), "float32")
        backend.assert_gradients(ops.loss, x, grad=getattr(ops, "loss_grad", None))


    @pytest.mark.polygrad_backends("numpy")
    def test_numpy_gradient_at_large_inputs(backend):
        from mylib.numpy_ops import loss, loss_grad

        backend.assert_gradients(loss, np.array([-80.0, 40.0]), grad=loss_grad)
"""


def _make_project(root: Path) -> None:
    (root / "mylib").mkdir(parents=True)
    (root / "mylib" / "__init__.py").write_text("")
    for name, text in OPS.items():
        (root / "mylib" / name).write_text(textwrap.dedent(text))
    (root / "tests").mkdir()
    (root / "tests" / "test_ops.py").write_text(textwrap.dedent(TESTS))
    (root / "pyproject.toml").write_text(
        '[project]\nname = "mylib"\nversion = "0.1"\n\n'
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
    )


def _sessions(output: str) -> dict[str, str]:
    """Output of each nox session, keyed by session name."""
    parts = re.split(r"^nox > Running session (\S+)\s*$", output, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_template_sessions_and_syntax():
    text = render_noxfile(["tf", "jax", "jax"])
    ast.parse(text)
    assert re.findall(r'@nox.session\(name="([^"]+)"\)', text) == ["tests-tensorflow", "tests-jax"]
    assert '_install(session, "polygrad-check[tensorflow]")' in text
    assert '_pytest(session, "jax")' in text
    assert 'f"--polygrad-backends={framework}"' in text
    everything = render_noxfile()
    assert re.findall(r'name="tests-(\w+)"', everything) == list(BACKENDS)
    assert '_install(session, "polygrad-check")' in everything  # numpy: no extra
    with pytest.raises(ValueError, match="unknown backend 'mxnet'"):
        render_noxfile(["mxnet"])
    with pytest.raises(ValueError, match="no framework named"):
        render_noxfile([])


def test_write_refuses_to_overwrite(tmp_path):
    path = write_noxfile(tmp_path, ["numpy"])
    assert path == tmp_path / "noxfile.py"
    with pytest.raises(FileExistsError, match="--force"):
        write_noxfile(tmp_path, ["torch"])
    assert "tests-torch" not in path.read_text()
    write_noxfile(tmp_path, ["torch"], force=True)
    assert "tests-torch" in path.read_text() and "tests-numpy" not in path.read_text()


def test_cli_init_nox(tmp_path, capsys):
    target = tmp_path / "proj"
    assert main(["init-nox", "--path", str(target), "--frameworks", "torch,jax"]) == 0
    out = capsys.readouterr().out
    assert "with sessions tests-torch, tests-jax" in out
    text = (target / "noxfile.py").read_text()
    assert text == render_noxfile(["torch", "jax"])
    assert main(["init-nox", "--path", str(target)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert (target / "noxfile.py").read_text() == text
    assert main(["init-nox", "--path", str(target), "--force"]) == 0
    assert (target / "noxfile.py").read_text() == render_noxfile()
    assert main(["init-nox", "--path", str(target), "--force", "--frameworks", "cntk"]) == 2
    assert "--frameworks: unknown backend 'cntk'" in capsys.readouterr().err


@pytest.mark.polygrad_backends("numpy", "torch", "jax", "tensorflow", require="all")
def test_nox_runs_each_framework_and_only_jax_fails(tmp_path):
    project = tmp_path / "project"
    _make_project(project)
    assert main(["init-nox", "--path", str(project)]) == 0
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("POLYGRAD_BACKENDS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "--no-venv", "--no-color"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    out = proc.stdout
    assert proc.returncode == 1, out
    sessions = _sessions(out)
    assert list(sessions) == [f"tests-{n}" for n in BACKENDS], out
    for name, text in sessions.items():
        if name == "tests-jax":
            assert f"Session {name} failed" in text, text
            assert "GradientCheckError: polygrad: MISMATCH" in text, text
            assert "the gradient rule is wrong" in text, text
            assert "1 failed" in text and "1 deselected" in text, text
        else:
            assert f"Session {name} was successful" in text, text
            assert "MISMATCH" not in text, text
    # installs are skipped without a virtualenv; the marker keeps the NumPy-only test in its session
    assert out.count("no virtualenv: testing the packages already installed") == 4
    assert "2 passed" in sessions["tests-numpy"]
    assert "1 passed, 1 deselected" in sessions["tests-torch"]
