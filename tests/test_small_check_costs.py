"""The fixed costs of a small check: what is computed once and reused, and that
reusing it never changes a value or a verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad.backends.mpmath import make_context, mp_evaluator
from polygrad.mpexec.values import leaves_at, point_at
from polygrad.policy import Policy


def test_point_at_sums_exactly_and_adds_only_the_nonzero_steps() -> None:
    ctx = make_context(50)
    x0 = np.array([0.1, -2.5, 1e-300, 3.0])
    dx = np.array([0.0, 1e-30, 0.0, -0.75])
    p = point_at(ctx, x0, dx)
    assert p.dtype == object and p.shape == (4,)
    # float64 values convert exactly; the sums are exact at 50 digits
    assert p[0] == ctx.mpf(0.1) and p[2] == ctx.mpf(1e-300)
    assert p[1] == ctx.mpf(-2.5) + ctx.mpf(1e-30)
    assert p[1] != ctx.mpf(-2.5)  # 1e-30 is not lost to float64 rounding
    assert p[3] == ctx.mpf(2.25)
    with mpmath.workdps(60):
        assert mpmath.mpf(p[1]) + mpmath.mpf(2.5) == mpmath.mpf(1e-30)


def test_point_at_serves_a_new_point_or_context_anew() -> None:
    ctx50, ctx30 = make_context(50), make_context(30)
    x0 = np.array([1.0, 2.0])
    a = point_at(ctx50, x0, np.zeros(2))
    b = point_at(ctx50, x0 + 1.0, np.zeros(2))  # a new point, same context
    c = point_at(ctx30, x0, np.array([0.5, 0.0]))  # the first point, another context
    assert list(a) == [1, 2] and list(b) == [2, 3] and list(c) == [1.5, 2]
    assert all(isinstance(v, ctx30.mpf) for v in c)
    # steps from one point reuse its conversion: entries not stepped are the same objects
    d1, d2 = point_at(ctx50, x0, np.array([1e-20, 0.0])), point_at(ctx50, x0, np.zeros(2))
    e1 = point_at(ctx50, x0, np.array([0.0, 1e-20]))
    assert d1[1] is d2[1] and d2[0] is e1[0] and d1[0] is not d2[0]
    x0[0] = 5.0  # the same array object, changed in place: not served stale
    assert list(point_at(ctx50, x0, np.zeros(2))) == [5, 2]


def test_leaves_at_gives_each_leaf_its_own_memory() -> None:
    ctx = make_context(50)
    x0 = np.arange(6.0)
    first = leaves_at(ctx, x0, np.zeros(6), [(2,), (2, 2)])
    first[0][0] = ctx.mpf(99)
    again = leaves_at(ctx, x0, np.zeros(6), [(2,), (2, 2)])
    assert again[0][0] == 0 and again[1].shape == (2, 2) and again[1][1, 1] == 5


def test_mp_evaluator_matches_mpmath_along_a_step() -> None:
    ev = mp_evaluator(lambda leaves: np.sum(np.exp(leaves[0])), [(3,)])
    x0 = np.array([0.5, -1.0, 2.0])
    dx = np.array([0.0, 1e-25, 0.0])
    y = ev(x0, dx, 50)
    with mpmath.workdps(50):
        want = mpmath.exp(0.5) + mpmath.exp(mpmath.mpf(-1.0) + mpmath.mpf(1e-25)) + mpmath.exp(2.0)
        assert abs(y[0] - want) < mpmath.mpf(10) ** -45


def test_a_float64_numpy_check_after_another_point_is_right(without_quad: None) -> None:
    """The mp reference of one check does not leak into the next (the last point is kept)."""
    w = np.array([0.5, 1.5, 1.0])

    def f(x: np.ndarray) -> np.ndarray:
        return np.sum(w * np.sin(x) * np.exp(x / 3))

    def grad(x: np.ndarray) -> np.ndarray:
        return w * np.exp(x / 3) * (np.cos(x) + np.sin(x) / 3)

    def wrong(x: np.ndarray) -> np.ndarray:
        return grad(x) * (1 + 1e-9)

    for x in (np.array([0.3, -1.2, 2.0]), np.array([1.1, 0.4, -0.7])):
        ok = pg.check(f, x, grad=grad)
        assert ok.verdict == pg.Verdict.PASS and ok.ok
        assert ok.details.reference.method == "mp"
        bad = pg.check(f, x, grad=wrong)
        assert bad.verdict == pg.Verdict.MISMATCH and not bad.ok


def _counting_resolution(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import polygrad.pipeline.reference as stage

    calls: list[int] = []
    real = stage.output_resolution

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(stage, "output_resolution", counted)
    return calls


def test_an_mp_reference_reads_no_value_grid(
    monkeypatch: pytest.MonkeyPatch, without_quad: None
) -> None:
    """The grid of f's values feeds the noise model of finite differences only."""
    calls = _counting_resolution(monkeypatch)
    x = np.array([0.3, -1.2, 2.0])
    report = pg.check(lambda v: np.sum(np.sin(v) * v), x, grad=lambda v: np.cos(v) * v + np.sin(v))
    assert report.details.reference.method == "mp"
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert calls == []
    float64 = pg.check(
        lambda v: np.sum(np.sin(v) * v), x, grad=lambda v: np.cos(v) * v + np.sin(v),
        reference="float64",
    )  # fmt: skip
    assert float64.verdict == pg.Verdict.PASS and float64.ok and calls == [1]


def test_an_mp_reference_that_fails_falls_back_with_the_value_grid(
    monkeypatch: pytest.MonkeyPatch, without_quad: None
) -> None:
    calls = _counting_resolution(monkeypatch)
    x = np.array([0.3, -1.2, 2.0])

    def f(v: np.ndarray) -> Any:
        if v.dtype == object and not all(a == b for a, b in zip(v, x, strict=True)):
            raise TypeError("this function runs on mpmath numbers only at x")
        return np.sum(np.sin(v))

    report = pg.check(f, x, grad=np.cos)
    assert report.details.reference.method == "float64"
    assert any("the mp reference failed" in note for note in report.details.notes)
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert calls == [1]
    wrong = pg.check(f, x, grad=lambda v: np.cos(v) * (1 + 1e-6))
    assert wrong.verdict == pg.Verdict.MISMATCH and not wrong.ok


def test_rerunning_the_small_latency_rows_replaces_them(tmp_path: Path) -> None:
    """``python -m benchmarks latency --jobs small:...`` keeps the other rows, once each."""
    from benchmarks.latency import _kept_rows

    small = {"n": 10, "framework": "jax", "dtype": "float32", "verdict": "PASS"}
    other = {"n": 10, "framework": "jax", "dtype": "float64", "verdict": "PASS"}
    large = {"n": 10000, "framework": "torch", "dtype": "float64", "strategy": "full"}
    path = tmp_path / "latency.json"
    path.write_text(json.dumps({"rows": [small, other, large]}))
    assert _kept_rows(path, ["small:jax,float32"]) == [other, large]
    assert _kept_rows(path, ["full:10000"]) == [small, other]


# -- the noise of a float32 check, probed along random sign directions --------------------------
def _sin_exp(w: np.ndarray) -> tuple[Any, Any]:
    def f(x: np.ndarray) -> Any:
        return np.sum(w * np.sin(x) * np.exp(x / 3))

    def grad(x: np.ndarray) -> np.ndarray:
        return w * np.exp(x / 3) * (np.cos(x) + np.sin(x) / 3)

    return f, grad


def test_a_float32_check_probes_the_noise_once_for_every_direction() -> None:
    """Ten inputs: the noise of the float64 reference is measured along two random sign
    directions (18 evaluations) instead of each direction's own (90); the reference is
    still right to its stated error bar, which meets the float32 aim."""
    rng = np.random.default_rng(5)
    w = rng.uniform(0.5, 1.5, 10).astype(np.float32)
    x = rng.uniform(-2.0, 2.0, 10).astype(np.float32)
    f, grad = _sin_exp(w)
    report = pg.check(f, x, grad=grad)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    ref = report.details["reference"]
    assert ref["noise_measured_along"].startswith("2 random sign directions")
    assert ref["evaluations"] < 90
    xs, ws = x.astype(np.float64), w.astype(np.float64)
    want = ws * np.exp(xs / 3) * (np.cos(xs) + np.sin(xs) / 3)
    err = np.abs(report.entries.reference - want)
    bar = report.entries.reference_error
    assert np.all(err <= bar)
    assert np.all(bar <= 1.2e-7 * (np.abs(want) + np.sqrt(np.mean(want**2))))


def test_noise_of_cancelling_terms_is_measured_along_each_direction() -> None:
    """``x[0]`` enters through ``(x0 + 2^20)^2 - 2^40``, whose float64 round-off (at the
    size of 2^40) is far above that of ``f``'s value: the random directions, which move
    ``x[0]`` too, measure that noise, and since it is not the ordinary rounding of
    ``f`` (it would send the other directions to long steps), each direction's own noise
    is measured, as with probing switched off. Every entry is right to its error bar."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-2.0, 2.0, 8).astype(np.float32)

    def f(x: np.ndarray) -> Any:
        return np.sum(np.sin(x[1:])) + ((x[0] + 2.0**20) ** 2 - 2.0**40) * 1e-6

    def grad(x: np.ndarray) -> np.ndarray:
        g = np.cos(x).astype(np.float64)
        g[0] = 2e-6 * (float(x[0]) + 2.0**20)
        return g

    report = pg.check(f, x, grad=grad)
    own = pg.check(f, x, grad=grad, policy=Policy(probe_noise_directions=0))
    want = grad(x.astype(np.float64))
    for rep in (report, own):
        assert rep.verdict is pg.Verdict.PASS and rep.ok, rep
        assert rep.details["reference"]["noise_measured_along"] == "each direction"
        assert np.all(np.abs(rep.entries.reference - want) <= rep.entries.reference_error)
    assert report.details["reference"]["evaluations"] == own.details["reference"][
        "evaluations"] + 18  # the two probes'  # fmt: skip
