"""The Taylor-remainder test: slope 2 for correct gradients, 1 for a 1% error."""

from __future__ import annotations

import numpy as np
import pytest

import polygrad as pg
import polygrad.taylor as taylor_mod
from polygrad.render import render_text, strip_color, use_color

PNG = b"\x89PNG\r\n\x1a\n"
A = np.array([[2.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 3.0]])

FUNCTIONS = {
    "sin": (lambda x: np.sum(np.sin(x)), lambda x: np.cos(x)),
    "exp of norm": (
        lambda x: np.exp(np.sum(x * x) / 4),
        lambda x: np.exp(np.sum(x * x) / 4) * x / 2,
    ),
    "logsumexp": (lambda x: np.log(np.sum(np.exp(x))), lambda x: np.exp(x) / np.sum(np.exp(x))),
    "rosenbrock": (
        lambda x: np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
        lambda x: (
            np.concatenate([[0.0], 200 * (x[1:] - x[:-1] ** 2)])
            + np.concatenate([-400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1]), [0.0]])
        ),
    ),
    "quadratic form": (lambda x: 0.5 * x @ A @ x, lambda x: A @ x),
    "tanh squared": (lambda x: np.sum(np.tanh(x) ** 2), lambda x: 2 * np.tanh(x) / np.cosh(x) ** 2),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_slope_two_when_right_one_when_wrong(name, dtype):
    f, g = FUNCTIONS[name]
    x = np.array([0.3, -1.2, 0.7], dtype)
    right = pg.taylor_test(f, x, grad=lambda x: g(x).astype(x.dtype))
    wrong = pg.taylor_test(f, x, grad=lambda x: (1.01 * g(x)).astype(x.dtype))
    assert abs(right.slope - 2) <= 0.2 and right.verdict == "consistent" and right.ok
    assert abs(wrong.slope - 1) <= 0.2 and wrong.verdict == "wrong" and wrong.ok is False
    assert wrong.used.sum() >= 3 and right.used.sum() >= 3
    # the first-order term measures the 1% error of the directional derivative
    rel = wrong.first_order_error / abs(wrong.directional_derivative)
    assert 0.005 < rel < 0.02


def test_a_function_computing_in_float32_inside_is_no_first_order_error():
    """float64 inputs cast to float32 inside f (a float32 model behind a float64 API): the
    smallest steps leave f exactly unchanged, so their remainder is h <g, v> itself, a
    staircase and not a first-order error; the right gradient is supported from the steps
    f resolves, and one 1% off is still found wrong."""
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((20, 20)) * 0.2).astype(np.float32)
    x = rng.standard_normal(20)

    def f(x):
        return float(np.sum(np.tanh(W @ x.astype(np.float32)) ** 2))

    def g(x):
        h = np.tanh(W.astype(np.float64) @ x)
        return W.T.astype(np.float64) @ (2 * h * (1 - h**2))

    right = pg.taylor_test(f, x, grad=g)
    assert right.verdict == "consistent" and right.ok, right
    wrong = pg.taylor_test(f, x, grad=lambda x: 1.01 * g(x))
    assert wrong.verdict == "wrong" and wrong.ok is False, wrong


def test_vector_output_jvp_and_flat_function():
    M = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.1]])
    f = lambda x: np.tanh(M @ x)  # noqa: E731
    jac = lambda x: (1 - np.tanh(M @ x) ** 2)[:, None] * M  # noqa: E731
    x = np.array([0.2, -0.4])
    assert abs(pg.taylor_test(f, x, jac=jac).slope - 2) < 0.2
    assert abs(pg.taylor_test(f, x, jac=jac, mode="fwd").slope - 2) < 0.2
    bad = pg.taylor_test(f, x, jac=lambda x: jac(x) * 1.01)
    assert abs(bad.slope - 1) < 0.2
    # a linear function has no second-order term: the remainder stays at the floor
    flat = pg.taylor_test(lambda x: np.sum(3 * x), x, grad=lambda x: np.full_like(x, 3.0))
    assert flat.verdict == "flat" and np.isnan(flat.slope) and flat.ok is None


def test_check_attaches_taylor_and_renders_it():
    f, g = FUNCTIONS["sin"]
    x = np.array([0.3, -1.2, 0.7], np.float32)
    report = pg.check(f, x, grad=g)
    t = report.details["taylor"]
    assert abs(t["slope"] - 2) < 0.2 and t["verdict"] == "consistent"
    assert "Taylor test" in render_text(report, color=False)
    bad = pg.check(f, x, grad=lambda x: 1.01 * g(x))
    assert str(bad.verdict) == "MISMATCH"
    assert abs(bad.details["taylor"]["slope"] - 1) < 0.2
    assert "falls like h^1.0" in str(bad)
    report.to_json()  # JSON-serialisable


def test_taylor_line_does_not_contradict_a_mismatch():
    """One entry among 2000 wrong by 1% in float32: a random direction barely sees it,
    so the Taylor test is consistent; the rendered line must say that the comparison of
    each entry decides."""
    f, g = FUNCTIONS["sin"]
    x = (np.linspace(-1.0, 1.0, 2000) + 0.5).astype(np.float32)

    def bad_grad(x):
        out = g(x)
        out[7] *= 1.01
        return out

    report = pg.check(f, x, grad=bad_grad)
    assert str(report.verdict) == "MISMATCH" and report.counts()["MISMATCH"] == 1
    assert report.details["taylor"]["verdict"] == "consistent"
    text = render_text(report, color=False)
    assert "supports the gradient — along one random direction only" in text
    good = render_text(pg.check(f, x, grad=g), color=False)
    assert "supports the gradient" in good and "along one random direction only" not in good


def test_taylor_failure_never_fails_a_check(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("broken")

    monkeypatch.setattr(taylor_mod, "taylor_target", boom)
    report = pg.check(lambda x: np.sum(x**2), np.ones(3), grad=lambda x: 2 * x)
    assert report.ok and "taylor" not in report.details


def test_colour_only_on_terminals(monkeypatch):
    report = pg.check(lambda x: np.sum(x**2), np.ones(2), grad=lambda x: 2 * x)
    coloured = render_text(report, color=True)
    assert "\x1b[" in coloured and strip_color(coloured) == render_text(report, color=False)

    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_color(Tty()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_color(Tty()) is False
    monkeypatch.delenv("NO_COLOR")
    import io

    assert use_color(io.StringIO()) is False  # piped
    assert "\x1b[" not in str(report)  # pytest captures stdout: not a terminal


def test_plots(tmp_path):
    f, g = FUNCTIONS["logsumexp"]
    t = pg.taylor_test(f, np.array([0.3, -1.2, 0.7]), grad=lambda x: 1.01 * g(x))
    t.plot(tmp_path / "taylor.png")
    data = (tmp_path / "taylor.png").read_bytes()
    assert data[:8] == PNG and len(data) > 10_000
    from polygrad.plot import plot_report

    M = np.arange(12.0).reshape(3, 4) / 20
    jac = lambda x: (1 - np.tanh(M @ x) ** 2)[:, None] * M * np.array([1, 1, 1.01, 1])  # noqa: E731
    report = pg.check(lambda x: np.tanh(M @ x), np.ones(4) / 2, jac=jac)
    assert str(report.verdict) == "MISMATCH"
    plot_report(report, tmp_path / "entries.png")
    data = (tmp_path / "entries.png").read_bytes()
    assert data[:8] == PNG and len(data) > 10_000


def _framework_cases():
    """(framework, f, x, buggy_f) with a 1%-wrong custom gradient in each installed framework."""
    cases = []
    x0 = np.array([0.3, -1.2, 0.7, 1.5])
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None:

        class Bad(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.sum(torch.sin(x) * x)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * 1.01 * (torch.cos(x) * x + torch.sin(x))

        cases.append(
            (
                "torch",
                lambda x: torch.sum(torch.sin(x) * x),
                Bad.apply,
                torch.tensor(x0, dtype=torch.float32),
            )
        )
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:  # pragma: no cover
        jax = None
    if jax is not None:

        @jax.custom_vjp
        def bad(x):
            return jnp.sum(jnp.sin(x) * x)

        bad.defvjp(lambda x: (bad(x), x), lambda x, g: (g * 1.01 * (jnp.cos(x) * x + jnp.sin(x)),))
        cases.append(("jax", lambda x: jnp.sum(jnp.sin(x) * x), bad, jnp.asarray(x0, jnp.float32)))
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover
        tf = None
    if tf is not None:

        @tf.custom_gradient
        def bad_tf(x):
            def grad(g):
                return g * 1.01 * (tf.cos(x) * x + tf.sin(x))

            return tf.reduce_sum(tf.sin(x) * x), grad

        cases.append(
            (
                "tensorflow",
                lambda x: tf.reduce_sum(tf.sin(x) * x),
                bad_tf,
                tf.constant(x0, tf.float32),
            )
        )
    return cases


def test_each_framework():
    cases = _framework_cases()
    assert {c[0] for c in cases} >= {"torch", "jax", "tensorflow"}
    for name, good, bad, x in cases:
        r_good, r_bad = pg.taylor_test(good, x), pg.taylor_test(bad, x)
        assert abs(r_good.slope - 2) <= 0.2, (name, r_good)
        assert abs(r_bad.slope - 1) <= 0.2, (name, r_bad)


def _swapped_error_grad(x):
    """The gradient of sum(x^2) with +1 and -1 added to two entries of one size: an
    error that cancels along any direction giving them equal components."""
    return 2 * x + np.array([1.0, -1.0, 0.0, 0.0])


@pytest.mark.parametrize("seed", range(10))
def test_an_error_antisymmetric_over_two_entries_is_first_order(seed):
    """x = (1.1, 0.9, ...): both entries have the power-of-two scale 1, so a ±1 direction
    gave them equal components whenever their signs agreed (consistent for seeds 0, 4, 5
    and 7), and the error cancelled; a continuous direction leaves it first order."""
    x = np.array([1.1, 0.9, -1.2, 2.0])
    result = pg.taylor_test(lambda v: np.sum(v**2), x, grad=_swapped_error_grad, seed=seed)
    assert result.verdict == "wrong", str(result)
    right = pg.taylor_test(lambda v: np.sum(v**2), x, grad=lambda v: 2 * v, seed=seed)
    assert right.verdict == "consistent", str(right)


@pytest.mark.polygrad_backends("torch")
@pytest.mark.parametrize("seed", range(6))
def test_a_transposed_weight_gradient_is_first_order_in_torch(seed):
    """A custom matrix-vector product whose backward returns dW transposed: wrong by
    +e and -e at W[0, 1] and W[1, 0], entries of one size (consistent for seeds 0 to 4
    with ±1 directions)."""
    import torch

    class MatVec(torch.autograd.Function):
        @staticmethod
        def forward(ctx, W, x):
            ctx.save_for_backward(W, x)
            return W @ x

        @staticmethod
        def backward(ctx, g):
            W, x = ctx.saved_tensors
            return torch.outer(g, x).T, W.T @ g  # the bug: dW transposed

    W = torch.tensor([[0.9, 1.2], [-0.8, 1.1]], dtype=torch.float64)
    x = torch.tensor([0.5, -1.5], dtype=torch.float64)
    result = pg.taylor_test(lambda w: torch.tanh(MatVec.apply(w, x)).sum(), W, seed=seed)
    assert result.verdict == "wrong", str(result)
