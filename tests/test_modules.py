"""The modules behind the public functions can be imported, and the functions stay
the package's attributes: ``pg.check`` is the function, ``polygrad.check`` the module
(reached by importlib); the implementation modules are hidden by nothing."""

from __future__ import annotations

import importlib
import types

import numpy as np

import polygrad as pg


def test_check_compare_sweep_modules_and_functions():
    for name in ("check", "compare", "sweep"):
        module = importlib.import_module(f"polygrad.{name}")
        assert isinstance(module, types.ModuleType)
        assert getattr(module, name) is getattr(pg, name)
        assert callable(getattr(pg, name)) and not isinstance(getattr(pg, name), types.ModuleType)
    report = pg.check(lambda x: np.sum(x**2), np.ones(3), grad=lambda x: 2 * x)
    assert report.verdict == pg.Verdict.PASS and report.ok


def test_pipeline_stages_are_plain_modules():
    import polygrad.pipeline as pipeline

    for stage in ("prepare", "plan", "reference", "autodiff", "judge", "assess", "explain"):
        module = importlib.import_module(f"polygrad.pipeline.{stage}")
        assert isinstance(module, types.ModuleType)
        assert getattr(pipeline, stage) is module  # no function of that name hides it
    assert isinstance(importlib.import_module("polygrad.pipeline.check"), types.ModuleType)
    assert importlib.import_module("polygrad.pipeline.check").check is pg.check


def test_a_policy_changes_one_call_only(without_quad):
    from polygrad.policy import DEFAULT_POLICY, Policy

    f, g = (lambda x: np.sum(np.exp(x))), np.exp
    x = np.linspace(0.5, 1.5, 4)
    fast = pg.check(f, x, grad=g, policy=Policy(mp_auto_seconds=0.0))
    assert fast.verdict == pg.Verdict.PASS and fast.ok
    assert fast.details["reference"]["method"] == "float64"
    assert DEFAULT_POLICY == Policy()
    again = pg.check(f, x, grad=g)
    assert again.details["reference"]["method"] == "mp" and again.ok
