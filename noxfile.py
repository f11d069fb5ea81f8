"""nox sessions: the test matrix (numpy-only, each framework, all), lint and types."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests-all", "lint"]
CONSTRAINTS = ("-c", "constraints.txt")


@nox.session(name="tests-numpy")
def tests_numpy(session: nox.Session) -> None:
    session.install("-e", ".[test]", *CONSTRAINTS)
    session.run(
        "pytest",
        "-q",
        "tests/test_reference.py",
        "tests/test_check_numpy.py",
        "tests/test_errors.py",
        "tests/test_import.py",
    )


@nox.session(name="tests-torch")
def tests_torch(session: nox.Session) -> None:
    session.install("-e", ".[torch,test]", *CONSTRAINTS)
    session.run("pytest", "-q", "tests/test_backend_torch.py")


@nox.session(name="tests-jax")
def tests_jax(session: nox.Session) -> None:
    session.install("-e", ".[jax,test]", *CONSTRAINTS)
    session.run("pytest", "-q", "tests/test_backend_jax.py")


@nox.session(name="tests-tensorflow")
def tests_tensorflow(session: nox.Session) -> None:
    session.install("-e", ".[tensorflow,test]", *CONSTRAINTS)
    session.run("pytest", "-q", "tests/test_backend_tensorflow.py")


@nox.session(name="tests-all")
def tests_all(session: nox.Session) -> None:
    session.install("-e", ".[all,test]", *CONSTRAINTS)
    session.run("pytest", "-q")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff", *CONSTRAINTS)
    session.run("ruff", "check", "polygrad", "tests", "benchmarks", "noxfile.py")


@nox.session
def types(session: nox.Session) -> None:
    session.install("-e", ".", "mypy", *CONSTRAINTS)
    session.run("mypy", "--ignore-missing-imports", "polygrad")
