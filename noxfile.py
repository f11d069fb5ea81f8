"""nox sessions: the test matrix (numpy-only, each framework, all), lint and types.

Every install uses ``-c constraints.txt`` (the tested versions), except
``minimal-versions``, which replaces the pins of the runtime dependencies by
the oldest supported ones from ``constraints-min.txt``. The single-framework
sessions install only that framework's extra and run pytest with
``--polygrad-backends=<framework>``: the ``backend`` fixture of polygrad's
pytest plugin runs that framework only, and tests marked
``@pytest.mark.polygrad_backends(...)`` for other frameworks are deselected.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

# `nox` alone runs the whole matrix (what CI runs); `nox -s NAME` runs one session
nox.options.sessions = [
    "tests-numpy",
    "tests-torch",
    "tests-jax",
    "tests-tensorflow",
    "tests-all",
    "tests-example-backend",
    "tests-example-mlx",
    "minimal-versions",
    "lint",
    "types",
    "docs",
    "demo",
]
CONSTRAINTS = ("-c", "constraints.txt")
# tests of the testing helpers; they adapt to the frameworks a session selects
TESTING_TESTS = (
    "tests/test_plugin.py",
    "tests/test_strategies.py",
    "tests/test_init_nox.py",
    "tests/test_verdict_fuzz.py",
    "tests/test_conformance.py",
)
NUMPY_TESTS = (
    "tests/test_reference.py",
    "tests/test_mp_quick.py",
    "tests/test_check_numpy.py",
    "tests/test_errors.py",
    "tests/test_import.py",
    "tests/test_backend_registry.py",
    "tests/test_layout.py",
    *TESTING_TESTS,
)


def _pytest(session: nox.Session, framework: str, *files: str) -> None:
    args = ("-q", f"--polygrad-backends={framework}", *files, *session.posargs)
    session.run("python", "-m", "pytest", *args)


@nox.session(name="tests-numpy")
def tests_numpy(session: nox.Session) -> None:
    """NumPy only: no framework installed, so the MissingBackendError paths run for real."""
    session.install("-e", ".[test,quad]", *CONSTRAINTS)
    _pytest(session, "numpy", *NUMPY_TESTS)


@nox.session(name="tests-torch")
def tests_torch(session: nox.Session) -> None:
    session.install("-e", ".[torch,test,quad]", *CONSTRAINTS)
    _pytest(
        session,
        "torch",
        "tests/test_backend_torch.py",
        "tests/test_mp_torch.py",
        "tests/test_quad_torch.py",
        "tests/test_promotion_torch.py",
        "tests/test_low_precision_rules.py",
        *TESTING_TESTS,
    )


@nox.session(name="tests-jax")
def tests_jax(session: nox.Session) -> None:
    session.install("-e", ".[jax,jax-models,test,quad]", *CONSTRAINTS)
    _pytest(
        session,
        "jax",
        "tests/test_backend_jax.py",
        "tests/test_mp_jax.py",
        "tests/test_quad_jax.py",
        "tests/test_promotion_jax.py",
        "tests/test_low_precision_rules.py",
        *TESTING_TESTS,
    )


@nox.session(name="tests-tensorflow")
def tests_tensorflow(session: nox.Session) -> None:
    session.install("-e", ".[tensorflow,tfp,test,quad]", *CONSTRAINTS)
    _pytest(
        session,
        "tensorflow",
        "tests/test_backend_tensorflow.py",
        "tests/test_promotion_tensorflow.py",
        "tests/test_low_precision_rules.py",
        "tests/test_mp_tensorflow.py",
        "tests/test_quad_tensorflow.py",
        *TESTING_TESTS,
    )


@nox.session(name="tests-all")
def tests_all(session: nox.Session) -> None:
    """Everything (the docs build and examples too); all four frameworks are required."""
    session.install("-e", ".[all,jax-models,test,docs,quad]", *CONSTRAINTS)
    # the verdict fuzzer runs at its full budget in each single-framework session; here
    # a small one, a smoke test of every framework at once
    session.env["POLYGRAD_FUZZ_EXAMPLES"] = os.environ.get("POLYGRAD_FUZZ_EXAMPLES", "50")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session(name="tests-example-backend")
def tests_example_backend(session: nox.Session) -> None:
    """The autograd backend of examples/polygrad-autograd, a package outside polygrad.

    Installed beside polygrad, found through its ``polygrad.backends`` entry
    point, listed by ``polygrad backends``, and run through the conformance suite.
    """
    session.install("-e", ".[test]", *CONSTRAINTS)
    session.install("-e", "examples/polygrad-autograd", *CONSTRAINTS)
    session.run("polygrad", "backends", "--no-devices")
    session.run(
        "python", "-m", "pytest", "-q", "examples/polygrad-autograd/tests", *session.posargs
    )


@nox.session(name="tests-example-mlx")
def tests_example_mlx(session: nox.Session) -> None:
    """The MLX backend of examples/polygrad-mlx, a package outside polygrad, on MLX's CPU build.

    Found through its ``polygrad.backends`` entry point, listed by ``polygrad
    backends``, picked from ``mx.array`` arguments without ``backend=``, and
    run through the conformance suite.
    """
    session.install("-e", ".[test]", *CONSTRAINTS)
    session.install("-e", "examples/polygrad-mlx", "mlx[cpu]", *CONSTRAINTS)
    session.run("polygrad", "backends")
    session.run("python", "-m", "pytest", "-q", "examples/polygrad-mlx/tests", *session.posargs)


def _min_constraints(session: nox.Session) -> str:
    """constraints.txt with the runtime pins replaced by those of constraints-min.txt."""

    def pins(path: str) -> dict[str, str]:
        out = {}
        for line in Path(path).read_text().splitlines():
            req = line.split("#", 1)[0].strip()
            if req:
                out[req.split("==")[0].strip().lower().replace("_", "-")] = req
        return out

    merged = {**pins("constraints.txt"), **pins("constraints-min.txt")}
    path = Path(session.virtualenv.location) / "constraints-merged.txt"
    path.write_text("\n".join(merged.values()) + "\n")
    return str(path)


@nox.session(name="minimal-versions")
def minimal_versions(session: nox.Session) -> None:
    """The oldest supported numpy and mpmath (constraints-min.txt), with the NumPy tests."""
    session.install("-e", ".", "pytest", "hypothesis", "nox", "-c", _min_constraints(session))
    versions = "import numpy, mpmath; print(numpy.__version__, mpmath.__version__)"
    session.run("python", "-c", versions)
    # the verdict fuzzer's exact properties rest on the quad reference (numpy-quaddtype,
    # numpy >= 2.4): tests-numpy and tests-all run it
    _pytest(session, "numpy", *(t for t in NUMPY_TESTS if t != "tests/test_verdict_fuzz.py"))


@nox.session
def benchmarks(session: nox.Session) -> None:
    """The gradient zoo against today's checkers; writes docs/accuracy.md and docs/scale.md
    (--quick: smoke)."""
    session.install("-e", ".[bench]", *CONSTRAINTS)
    session.run("python", "-m", "benchmarks", *session.posargs)


# run from an empty folder, so that `import polygrad` finds the installed wheel, not ./polygrad
DEMO_CHECK = """
import sys
from polygrad.demo import demo
result = demo("polygrad-demo")
if result.skipped or not result.ok:
    sys.exit("the demo skipped a case or gave an unexpected verdict: see above")
"""


@nox.session
def demo(session: nox.Session) -> None:
    """`polygrad demo` as a new user gets it: the wheel built and installed with [all].

    Not editable, so the wheel's files and extras are what runs; the session fails
    when any case is skipped (a module the extras do not install) or unexpected.
    """
    session.install(".[all]", *CONSTRAINTS)
    session.chdir(session.create_tmp())
    session.run("polygrad", "demo", "--help", silent=True)
    session.run("python", "-c", DEMO_CHECK)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("-e", ".[lint]", *CONSTRAINTS)
    paths = ("polygrad", "tests", "benchmarks", "examples", "noxfile.py")
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)
    # the import layers of pyproject.toml's [tool.importlinter]: no cycles, no upward imports
    session.run("lint-imports")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site (figures drawn at build time) into site/."""
    session.install("-e", ".[all,docs]", "pytest", *CONSTRAINTS)
    # a number in prose without a results file, or one that contradicts it, fails the build
    session.run("python", "-m", "pytest", "-q", "tests/test_docs_numbers.py")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session
def types(session: nox.Session) -> None:
    """mypy on polygrad (settings in pyproject.toml), without the frameworks installed."""
    session.install("-e", ".", "mypy", "pytest", "hypothesis", *CONSTRAINTS)
    session.run("mypy")
