"""The backend registry: register_backend, the polygrad.backends entry points, discovery.

A backend of another package is defined here as a subclass of the NumPy
backend whose arrays are a small ndarray subclass, so these tests need no
framework.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import polygrad as pg
import polygrad.backends as backends
from polygrad.backends import (
    available_backends,
    backend_entries,
    canonical_name,
    get_backend,
    register_backend,
    select_backend,
    unregister_backend,
)
from polygrad.backends.numpy import NumpyBackend
from polygrad.cli import main
from polygrad.errors import MissingBackendError
from polygrad.testing import BackendHandle, to_backend


class TaggedArray(np.ndarray):
    """The arrays of the 'tagged' test backend: NumPy arrays with their own type."""


class TaggedBackend(NumpyBackend):
    name = "tagged"
    label = "Tagged"


def _tagged(x: Any) -> bool:
    return type(x).__module__ == __name__ and type(x).__name__ == "TaggedArray"


@pytest.fixture
def registry() -> Iterator[None]:
    """The registry as it was, restored after the test (with discovery state)."""
    saved = (
        dict(backends._REGISTRY),
        dict(backends._ALIASES),
        dict(backends.BACKEND_MODULES),
        backends._DISCOVERED,
    )
    yield
    for target, value in zip(
        (backends._REGISTRY, backends._ALIASES, backends.BACKEND_MODULES), saved, strict=False
    ):
        target.clear()
        target.update(value)  # type: ignore[attr-defined]
    backends._DISCOVERED = saved[3]


def test_builtin_backends_are_registered_through_the_same_api():
    entries = backend_entries()
    assert list(entries)[:4] == ["numpy", "torch", "jax", "tensorflow"]
    assert entries["torch"].module == "torch" and entries["torch"].origin == "polygrad"
    assert entries["tensorflow"].extra == "tensorflow"
    assert canonical_name("tf") == "tensorflow" and canonical_name("PyTorch") == "torch"
    assert canonical_name("mxnet") is None


def test_registered_backend_is_selected_from_its_arrays(registry):
    register_backend("tagged", TaggedBackend, owns=_tagged, aliases=("tg",))
    x = np.array([0.3, -0.5]).view(TaggedArray)
    assert select_backend((x,)).name == "tagged"
    assert select_backend((np.ones(2),)).name == "numpy"
    assert get_backend("TG").name == "tagged"
    assert available_backends()["tagged"] is True
    report = pg.check(lambda v: np.sum(np.sin(v)), x, grad=lambda v: np.cos(np.asarray(v)))
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert report.to_dict()["details"]["backend"] == "tagged"


def test_mixing_a_registered_backend_with_another_is_an_error(registry):
    register_backend("tagged", TaggedBackend, owns=_tagged)
    register_backend("tagged2", TaggedBackend, owns=lambda x: isinstance(x, float))
    x = np.array([0.3]).view(TaggedArray)
    with pytest.raises(TypeError, match="mix arrays of several frameworks .*tagged, tagged2"):
        select_backend((x, 1.5))


def test_names_are_not_taken_twice_and_can_be_removed(registry):
    with pytest.raises(ValueError, match="'numpy' is already registered"):
        register_backend("numpy", TaggedBackend)
    with pytest.raises(ValueError, match="'tf' is already registered"):
        register_backend("tagged", TaggedBackend, aliases=("tf",))
    with pytest.raises(TypeError, match="owns must be a callable"):
        register_backend("tagged", TaggedBackend, owns=True)  # type: ignore[arg-type]
    register_backend("tagged", TaggedBackend, aliases=("tg",))
    unregister_backend("tagged")
    assert canonical_name("tg") is None and "tagged" not in backend_entries()
    with pytest.raises(ValueError, match="unknown backend 'tagged'; choose from numpy, torch"):
        get_backend("tagged")


def _fake_entry_points(*eps: importlib.metadata.EntryPoint) -> Any:
    def entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
        return [ep for ep in eps if ep.group == group]

    return entry_points


def test_entry_points_are_found_and_loaded_only_when_needed(registry, monkeypatch):
    ep = importlib.metadata.EntryPoint(
        "tagged", f"{__name__}:TaggedBackend", backends.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(backends.importlib.metadata, "entry_points", _fake_entry_points(ep))
    backends._DISCOVERED = False
    entry = backend_entries()["tagged"]
    assert entry.factory == f"{__name__}:TaggedBackend"  # listed, not imported
    assert entry.origin.startswith("entry point")
    assert get_backend("tagged").name == "tagged"
    assert backend_entries()["tagged"].factory is TaggedBackend  # loaded on first use


def test_a_broken_entry_point_is_reported_and_breaks_nothing(registry, monkeypatch, capsys):
    ep = importlib.metadata.EntryPoint(
        "broken", "no_such_package_for_polygrad:Backend", backends.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(backends.importlib.metadata, "entry_points", _fake_entry_points(ep))
    backends._DISCOVERED = False
    assert select_backend((np.ones(2),)).name == "numpy"
    assert available_backends()["broken"] is False
    with pytest.raises(MissingBackendError, match="no_such_package_for_polygrad"):
        get_backend("broken")
    assert main(["backends", "--no-devices"]) == 0
    line = [r for r in capsys.readouterr().out.splitlines() if r.startswith("broken")][0]
    assert "ModuleNotFoundError" in line and "[entry point" in line


def test_cli_lists_discovered_backends(registry, monkeypatch, capsys, tmp_path):
    ep = importlib.metadata.EntryPoint(
        "tagged", f"{__name__}:TaggedBackend", backends.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(backends.importlib.metadata, "entry_points", _fake_entry_points(ep))
    backends._DISCOVERED = False
    out = tmp_path / "b.json"
    assert main(["backends", "--no-devices", "--json", str(out)]) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["backends"]}
    assert rows["tagged"]["installed"] and rows["tagged"]["origin"].startswith("entry point")
    assert rows["numpy"]["origin"] == "polygrad"
    assert "tagged" in capsys.readouterr().out


def test_handles_use_the_registered_backend_and_refuse_unknown_names(registry):
    register_backend("tagged", TaggedBackend, owns=_tagged)
    x = to_backend(np.arange(3.0), "tagged", "float32")
    assert x.dtype == np.float32 and np.array_equal(x, [0.0, 1.0, 2.0])
    assert BackendHandle("tagged").namespace is np and not BackendHandle("tagged").autodiff
    with pytest.raises(ValueError, match="unknown backend 'mxnet'"):
        to_backend(np.ones(2), "mxnet")
    with pytest.raises(ValueError, match="unknown backend 'mxnet'"):
        BackendHandle("mxnet")


DISCOVERY = """
import sys
import numpy as np
import polygrad
from polygrad.backends import available_backends, backend_entries, select_backend
from polygrad.cli import backend_info
backend_entries(); available_backends(); select_backend((np.ones(2),))
rows = backend_info(import_frameworks=False)
assert [r["backend"] for r in rows][:4] == ["numpy", "torch", "jax", "tensorflow"], rows
print(sorted(m for m in ("torch", "jax", "tensorflow", "keras") if m in sys.modules))
"""


def test_discovery_and_listing_import_no_framework():
    out = subprocess.run(
        [sys.executable, "-c", DISCOVERY], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


class AbsentFrameworkBackend(NumpyBackend):
    name = "absent"
    module = "no_such_framework_for_polygrad"


def test_an_entry_point_whose_framework_is_missing_is_listed_as_not_installed(
    registry, monkeypatch
):
    ep = importlib.metadata.EntryPoint(
        "absent", f"{__name__}:AbsentFrameworkBackend", backends.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(backends.importlib.metadata, "entry_points", _fake_entry_points(ep))
    backends._DISCOVERED = False
    assert available_backends()["absent"] is False
    with pytest.raises(MissingBackendError, match="pip install no_such_framework_for_polygrad"):
        get_backend("absent")
