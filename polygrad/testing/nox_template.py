"""The ``noxfile.py`` that ``polygrad init-nox`` writes for a user's project.

One nox session per framework, ``tests-<framework>``: it installs
``polygrad-check[<framework>]``, pytest and the project, and runs
``python -m pytest --polygrad-backends=<framework>``, so the ``backend``
fixture of polygrad's pytest plugin runs that framework only and a missing
framework fails the session instead of skipping its tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .._install import requirement as requirement_of
from ._handles import BACKENDS, canonical_name

__all__ = ["render_noxfile", "write_noxfile"]

_HEADER = '''"""Gradient tests of this project, one nox session per framework.

Written by ``polygrad init-nox``; edit it freely. ``nox`` runs every session,
``nox -s tests-{first}`` one of them, ``nox -s tests-{first} -- -k softplus``
passes arguments on to pytest.

Each session installs polygrad with that framework's extra, pytest and this
project, and runs ``pytest --polygrad-backends=<framework>``: the ``backend``
fixture of polygrad's pytest plugin then runs only that framework, and fails
(does not skip) when it is not installed. Tests marked
``@pytest.mark.polygrad_backends(...)`` run only in their frameworks' sessions.

``nox --no-venv`` runs the sessions in the current environment and installs
nothing (each session skips its installs when it has no virtualenv).
"""

from __future__ import annotations

import nox

# What each session installs besides polygrad: this project (e.g. ".[test]" for
# its test extra) and the test tools.
PROJECT = ("-e", ".")
TEST_TOOLS = ("pytest", "hypothesis")
PYTEST_ARGS = ("-q",)


def _install(session: nox.Session, polygrad: str) -> None:
    if session.venv_backend == "none":
        session.log("no virtualenv: testing the packages already installed")
        return
    session.install(polygrad, *TEST_TOOLS)
    session.install(*PROJECT)


def _pytest(session: nox.Session, framework: str) -> None:
    args = (f"--polygrad-backends={{framework}}", *PYTEST_ARGS, *session.posargs)
    session.run("python", "-m", "pytest", *args)
'''

_SESSION = '''

@nox.session(name="tests-{name}")
def tests_{name}(session: nox.Session) -> None:
    """Gradient tests in {label}."""
    _install(session, "{requirement}")
    _pytest(session, "{name}")
'''

_LABELS = {"numpy": "NumPy", "torch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow"}


def _frameworks(frameworks: Iterable[str] | None) -> list[str]:
    names: list[str] = []
    for name in BACKENDS if frameworks is None else frameworks:
        key = canonical_name(name)
        if key not in names:
            names.append(key)
    if not names:
        raise ValueError(f"no framework named; choose from {', '.join(BACKENDS)}")
    return names


def render_noxfile(frameworks: Iterable[str] | None = None) -> str:
    """The text of the template ``noxfile.py``.

    Parameters
    ----------
    frameworks : iterable of str, optional
        Sessions to write, from ``"numpy"``, ``"torch"``, ``"jax"``,
        ``"tensorflow"`` (aliases such as ``"tf"`` accepted; duplicates
        dropped). Default: all four.

    Returns
    -------
    str
        Python source of a noxfile with one ``tests-<framework>`` session each.

    Raises
    ------
    ValueError
        An unknown framework name, or none at all.
    """
    names = _frameworks(frameworks)
    text = _HEADER.format(first=names[0])
    for name in names:
        requirement = requirement_of("" if name == "numpy" else name)
        text += _SESSION.format(name=name, label=_LABELS[name], requirement=requirement)
    return text


def write_noxfile(
    directory: str | Path = ".", frameworks: Iterable[str] | None = None, force: bool = False
) -> Path:
    """Write the template ``noxfile.py`` into ``directory``.

    Parameters
    ----------
    directory : str or Path
        The project folder (created if missing).
    frameworks : iterable of str, optional
        Sessions to write; see :func:`render_noxfile`.
    force : bool
        Overwrite an existing ``noxfile.py``.

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    FileExistsError
        ``noxfile.py`` exists and ``force`` is false.
    ValueError
        An unknown framework name.
    """
    text = render_noxfile(frameworks)
    path = Path(directory) / "noxfile.py"
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
