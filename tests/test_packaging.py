"""The distribution: built as a wheel, it is ``polygrad-check`` and imports as ``polygrad``.

The name ``polygrad`` on the package index belongs to an unrelated project, so
the distribution name, every extra that refers back to polygrad, every install
hint polygrad prints and every install line of the docs must name
``polygrad-check``; a self-reference left as ``polygrad[...]`` would make pip
fetch the other project.
"""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from polygrad._install import DISTRIBUTION, pip_install, requirement
from polygrad.testing.nox_template import render_noxfile

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources (so no build files land in the tree)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "polygrad", src / "polygrad", ignore=skip)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*cmd, "-q", str(src), "-w", str(out)], check=True, timeout=300)
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def _member(whl: zipfile.ZipFile, suffix: str) -> str:
    (name,) = [n for n in whl.namelist() if n.endswith(suffix)]
    return whl.read(name).decode()


def test_wheel_metadata_names_the_free_distribution(wheel: zipfile.ZipFile) -> None:
    meta = email.parser.Parser().parsestr(_member(wheel, ".dist-info/METADATA"))
    assert meta["Name"] == "polygrad-check"
    assert Path(wheel.filename or "").name.startswith("polygrad_check-")
    requires = meta.get_all("Requires-Dist") or []
    own = [r for r in requires if re.match(r"polygrad\b", r)]
    # the extras that pull in other extras name this distribution, never bare "polygrad"
    assert own and all(r.startswith("polygrad-check[") for r in own), own
    assert any(r.startswith("polygrad-check[") and 'extra == "all"' in r for r in own)
    assert {"torch", "jax", "tensorflow", "plot", "demo", "tfp", "all"} <= set(
        meta.get_all("Provides-Extra")
    )
    assert meta["Author"] == "polygrad developers"


def test_wheel_keeps_import_name_and_entry_points(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert "polygrad/__init__.py" in names and "polygrad/_install.py" in names
    assert not any(n.startswith("polygrad_check/") for n in names)
    entry_points = _member(wheel, ".dist-info/entry_points.txt")
    assert re.search(r"\[console_scripts\]\s*\npolygrad = polygrad\.cli:main", entry_points)
    assert re.search(r"\[pytest11\]\s*\npolygrad = polygrad\.testing\.plugin", entry_points)


def test_install_hints_name_the_distribution() -> None:
    assert DISTRIBUTION == "polygrad-check"
    assert requirement() == "polygrad-check"
    assert pip_install("torch") == "pip install 'polygrad-check[torch]'"
    assert pip_install("test", quote='"') == 'pip install "polygrad-check[test]"'
    text = render_noxfile(["numpy", "jax"])
    assert '_install(session, "polygrad-check")' in text
    assert '_install(session, "polygrad-check[jax]")' in text


def test_docs_install_lines_and_the_other_project() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = {p.name: p.read_text() for p in pages}
    for name, page in text.items():
        for line in re.findall(r"pip install[^\n]*", page):
            # an install from the index names polygrad-check; "-e ." installs this tree
            assert not re.search(r"pip install\s+['\"]?polygrad(\[|['\"]|\s|$)", line), (name, line)
    assert 'pip install "polygrad-check[torch]"' in text["getting-started.md"]
    assert "pip uninstall polygrad" in text["getting-started.md"]
    assert "pip uninstall polygrad" in text["README.md"]


# ---- the extras install what the demo imports -----------------------------------------------

FRAMEWORK_EXTRAS = ("torch", "jax", "tensorflow", "tfp")


def _demo_imports() -> set[str]:
    """Top-level modules that polygrad/demo.py imports (absolute imports, stdlib excluded);
    matplotlib too, which its plots import through polygrad.plot."""
    tree = ast.parse((ROOT / "polygrad" / "demo.py").read_text())
    found = {"matplotlib"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "polygrad"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _extra(extras: dict[str, list[str]], name: str) -> set[str]:
    """Distributions an extra names, its references to polygrad-check[...] expanded."""
    out: set[str] = set()
    for req in map(Requirement, extras[name]):
        if _norm(req.name) == DISTRIBUTION:
            for inner in req.extras:
                out |= _extra(extras, inner)
        else:
            out.add(_norm(req.name))
    return out


def _closure(dists: set[str]) -> set[str]:
    """``dists`` and what they require when installed (their own extras left out)."""
    seen, todo = set(), list(dists)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for req in map(Requirement, requires):
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_norm(req.name))
    return seen


def _extras() -> dict[str, list[str]]:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def test_the_extras_install_every_module_the_demo_imports() -> None:
    """[all] installs every module the demo imports; [demo] the ones no framework brings,
    so that `pip install ".[torch,demo]"` runs the CNN case too."""
    extras = _extras()
    owners = importlib.metadata.packages_distributions()
    imports = _demo_imports()
    assert {"sklearn", "scipy", "tensorflow_probability", "keras"} <= imports  # parsed
    missing = sorted(m for m in imports if m not in owners)
    if missing:
        pytest.skip(f"not installed here, so their distributions are unknown: {missing}")
    dist = {m: {_norm(d) for d in owners[m]} for m in imports}
    everything = _closure(_extra(extras, "all") | _extra(extras, ""))
    assert {m: d for m, d in dist.items() if not d & everything} == {}
    frameworks = _closure(set().union(*(_extra(extras, e) for e in FRAMEWORK_EXTRAS)))
    demo = _closure(_extra(extras, "demo") | _extra(extras, ""))
    assert {m: d for m, d in dist.items() if not d & (frameworks | demo)} == {}
    assert _extra(extras, "tensorflow") == {"tensorflow"}  # polygrad imports no TFP, no tf-keras
