"""The import-layer contract of pyproject.toml names every module of polygrad.

``lint-imports`` (the lint session) enforces the layers and the absence of import
cycles among sibling modules; a module the layers do not name escapes the first, so
each new module must be placed in a layer.
"""

from __future__ import annotations

import pkgutil
import re
import sys
from pathlib import Path

import polygrad

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def _named_in_layers() -> set[str]:
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    return {name for layer in layers for name in re.split(r"\s*[|:]\s*", layer.strip())}


def test_every_module_is_in_a_layer():
    modules = {
        f"polygrad.{m.name}"
        for m in pkgutil.iter_modules(polygrad.__path__)
        if m.name not in ("__main__",)
    }
    missing = sorted(modules - _named_in_layers())
    assert not missing, f"modules the import layers do not name: {missing}"


def test_cycles_are_forbidden_at_every_depth():
    acyclic = [c for c in _contracts() if c["type"] == "acyclic_siblings"]
    assert acyclic and acyclic[0]["ancestors"] == ["polygrad"]
