"""Public behaviour that had no test: compare() beside check(), the command line on JAX
and TensorFlow, float16 in PyTorch, UNSTABLE and NONFINITE in the frameworks, forward
mode in PyTorch, second order in TensorFlow, Keras parameters and projections on
framework functions. Expected values come from closed forms, mpmath or hand-written
Jacobians, never from polygrad itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import keras
import mpmath
import numpy as np
import pytest
import tensorflow as tf
import torch

import polygrad as pg
from polygrad import Verdict

# --- compare() and check() on the same implementation -------------------------------------------


def _var_grad(x: np.ndarray) -> np.ndarray:
    """Gradient of the unbiased variance, 2 (x - mean) / (n - 1), in float64."""
    x = x.astype(np.float64)
    return 2 * (x - x.mean()) / (x.size - 1)


class _VarWrongAt2(torch.autograd.Function):
    """torch's unbiased variance, with the gradient of entry 2 too large by 1%."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.var()

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        d = 2 * (x - x.mean()) / (x.numel() - 1)
        scale = torch.ones_like(d)
        scale[2] = 1.01
        return g * d * scale


def test_compare_agrees_with_check_on_the_same_implementation():
    """torch x.var() of float32 inputs near 0: both PASS, both with references on the
    closed form; a rule wrong at entry 2 is MISMATCH there in both."""
    x_np = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    x = torch.tensor(x_np)
    report = pg.check(lambda x: x.var(), x)
    comparison = pg.compare({"torch": lambda x: x.var()}, x)
    assert report.verdict is Verdict.PASS and report.ok, report.counts()
    assert comparison["torch"].gradient is Verdict.PASS and comparison.ok, str(comparison)
    true = _var_grad(x_np)
    for e in (report.entries, comparison["torch"].report.entries):
        assert np.all(np.abs(e.reference - true) <= e.reference_error + 1e-12 * np.abs(true))
    bad = pg.check(_VarWrongAt2.apply, x)
    bad_c = pg.compare({"torch": _VarWrongAt2.apply}, x)
    assert bad.verdict is Verdict.MISMATCH and bad_c["torch"].gradient is Verdict.MISMATCH
    for e in (bad.entries, bad_c["torch"].report.entries):
        assert [e.names[i] for i in np.flatnonzero(e.status == e.status.max())] == ["x[2]"]


def _var_near_1e4() -> tuple[np.ndarray, torch.Tensor]:
    x_np = (1e4 + np.random.default_rng(0).standard_normal(50)).astype(np.float32)
    return x_np, torch.tensor(x_np)


def test_compare_with_a_float64_reference_agrees_with_check_on_var_near_1e4():
    """float32 inputs near 1e4: check's automatic reference (float64 differences) and the
    same reference asked of compare() both give PASS, on the closed form."""
    x_np, x = _var_near_1e4()
    report = pg.check(lambda x: x.var(), x)
    assert report.details["reference"]["method"] == "float64"
    assert report.verdict is Verdict.PASS and report.ok, report.counts()
    comparison = pg.compare({"torch": lambda x: x.var()}, x, reference="float64")
    assert comparison["torch"].gradient is Verdict.PASS and comparison.ok, str(comparison)
    true = _var_grad(x_np)
    scale = np.sqrt(np.mean(true**2))
    for e in (report.entries, comparison["torch"].report.entries):
        assert np.all(np.abs(e.reference - true) <= 1e-7 * scale)


def _var_grad_mp(x: np.ndarray, ddof: int) -> np.ndarray:
    """Gradient of the variance, 2 (x - mean) / (n - ddof), in mpmath (50 digits)."""
    with mpmath.workdps(50):
        xs = [mpmath.mpf(float(v)) for v in x]
        mean = mpmath.fsum(xs) / len(xs)
        return np.array([float(2 * (v - mean) / (len(xs) - ddof)) for v in xs])


VARIANCES = {  # each framework's own variance of float32 inputs, and its ddof
    "torch": (lambda x: x.var(), torch.tensor, 1),
    "jax": (jnp.var, jnp.asarray, 0),
    "tensorflow": (tf.math.reduce_variance, tf.constant, 0),
}


@pytest.mark.parametrize("framework", sorted(VARIANCES))
def test_mp_reference_passes_var_near_1e4(framework):
    """float32 inputs near 1e4 against an mp reference: the float64 evaluation of the
    rule, 2 (x - mean) / (n - ddof), rounds the mean at the size of the inputs (2e-14 of
    each entry, 34 times 64 eps64 of its scale), which its paired moves show; its odd
    part, the derivative's change of 8e-5 over a move of 2 float32 ulps, is no kink.
    PASS, on the mp closed form."""
    fn, as_input, ddof = VARIANCES[framework]
    x_np, _ = _var_near_1e4()
    report = pg.check(fn, as_input(x_np), reference="mp")
    assert report.details["reference"]["method"] == "mp"
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    true = _var_grad_mp(x_np, ddof)
    e = report.entries
    assert np.all(np.abs(e.reference - true) <= e.reference_error + 1e-15 * np.abs(true))


def test_mp_reference_finds_one_wrong_entry_of_var_near_1e4():
    """The same check with entry 2's gradient 1% too large: MISMATCH there only."""
    _, x = _var_near_1e4()
    report = pg.check(_VarWrongAt2.apply, x, reference="mp")
    assert report.verdict is Verdict.MISMATCH and not report.ok
    worst = np.flatnonzero(report.entries.status == report.entries.status.max())
    assert [report.entries.names[i] for i in worst] == ["x[2]"]


# --- the command line on JAX and TensorFlow functions -------------------------------------------

JAX_FILE = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp

    def f(x):
        return jnp.sum(jnp.sin(x) * x)

    @jax.custom_vjp
    def g(x):
        return jnp.sum(jnp.sin(x) * x)

    def _fwd(x):
        return g(x), x

    def _bwd(x, ct):
        d = jnp.sin(x) + x * jnp.cos(x)
        return (ct * d.at[1].multiply(1.01),)  # entry 1 is 1% too large

    g.defvjp(_fwd, _bwd)
    """
)

TF_FILE = textwrap.dedent(
    """
    import tensorflow as tf

    def f(x):
        return tf.reduce_sum(tf.sin(x) * x)

    @tf.custom_gradient
    def g(x):
        def grad(ct):
            d = tf.sin(x) + x * tf.cos(x)
            return ct * d * tf.constant([1.0, 1.01, 1.0])  # entry 1 is 1% too large
        return tf.reduce_sum(tf.sin(x) * x), grad
    """
)

AT = np.array([0.3, -1.2, 0.8], np.float32)


def _cli(path: Path, func: str, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ)
    env.pop("FORCE_COLOR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "polygrad", "check", f"{path}:{func}", "--at", "0.3, -1.2, 0.8"]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return proc, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.parametrize(("backend", "source"), [("jax", JAX_FILE), ("tensorflow", TF_FILE)])
def test_cli_checks_jax_and_tensorflow_functions(tmp_path, backend, source):
    """The framework comes from the file's imports; a right gradient exits 0 with PASS, a
    custom rule wrong at entry 1 exits 1 with MISMATCH at that entry."""
    path = tmp_path / "user_model.py"
    path.write_text(source)
    ok, data = _cli(path, "f", tmp_path / "ok.json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("polygrad: PASS")
    assert data["verdict"] == "PASS" and data["ok"] is True
    assert data["details"]["backend"] == backend
    assert data["details"]["working_dtype"] == "float32"
    x = AT.astype(np.float64)
    true = np.sin(x) + x * np.cos(x)
    for row in data["worst_entries"]:
        j = int(row["name"][2])
        assert abs(row["reference"] - true[j]) <= row["reference_error"] + 1e-7 * abs(true[j])
    bad, data = _cli(path, "g", tmp_path / "bad.json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.startswith("polygrad: MISMATCH")
    assert data["counts"] == {"PASS": 2, "MISMATCH": 1}
    worst = data["worst_entries"][0]
    assert worst["name"] == "x[1]" and worst["verdict"] == "MISMATCH"
    assert worst["difference"] == pytest.approx(0.01 * abs(true[1]), rel=1e-3)


# --- float16 through check() in PyTorch ---------------------------------------------------------


def test_float16_torch_right_gradient_passes_and_a_wrong_one_fails():
    x = torch.tensor([0.3, -0.7, 1.3, 1.9], dtype=torch.float16)
    report = pg.check(lambda x: torch.sum(torch.sin(x) * x), x)
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    assert report.details["working_dtype"] == "float16"
    assert x.dtype == torch.float16  # the user's tensor is untouched
    xd = x.double().numpy()
    true = np.sin(xd) + xd * np.cos(xd)
    e = report.entries
    assert np.all(np.abs(e.reference - true) <= e.reference_error + 1e-9 * np.abs(true))

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return torch.sum(torch.sin(x) * x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            d = torch.sin(x) + x * torch.cos(x)
            return g * d * torch.tensor([1.0, 1.0, 1.3, 1.0], dtype=x.dtype)

    bad = pg.check(Wrong.apply, x)
    assert bad.verdict is Verdict.MISMATCH and not bad.ok
    assert [bad.entries.names[i] for i in np.flatnonzero(bad.entries.status > 0)] == ["x[2]"]


# --- UNSTABLE outside NumPy ---------------------------------------------------------------------

SMALL = [1e-2, 2e-2, -3e-2]


def _one_minus_cos_over_x2_derivative(x: float) -> float:
    """d/dx (1 - cos x) / x^2 = (x sin x - 2 (1 - cos x)) / x^3, at 40 digits."""
    with mpmath.workdps(40):
        a = mpmath.mpf(x)
        return float((a * mpmath.sin(a) - 2 * (1 - mpmath.cos(a))) / a**3)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_cancellation_in_float32_is_unstable_not_mismatch(framework):
    """(1 - cos x) / x^2 at |x| ~ 1e-2 in float32: 1 - cos x keeps 3 digits, and autodiff
    through it (sin x / x^2 - 2 (1 - cos x) / x^3, two terms of 100 cancelling to 1e-3)
    loses the rest. The rule is right: its float64 evaluation matches the reference."""
    if framework == "torch":
        x = torch.tensor(SMALL, dtype=torch.float32)
        report = pg.check(lambda x: torch.sum((1 - torch.cos(x)) / x**2), x)
    else:
        x = jnp.asarray(SMALL, jnp.float32)
        report = pg.check(lambda x: jnp.sum((1 - jnp.cos(x)) / x**2), x)
    assert report.verdict is Verdict.UNSTABLE and not report.ok, str(report)
    assert report.counts() == {"UNSTABLE": 3}
    e = report.entries
    xs = np.asarray(SMALL, np.float32).astype(np.float64)
    true = np.array([_one_minus_cos_over_x2_derivative(v) for v in xs])
    assert np.all(np.abs(e.reference - true) <= e.reference_error + 1e-9 * np.abs(true))
    assert np.all(np.abs(e.autodiff64 - true) <= e.tolerance64)  # the rule is right
    assert np.all(np.abs(e.autodiff - true) > e.tolerance)  # float32 loses it


# --- NONFINITE from a framework's own NaN trap --------------------------------------------------

MIXED = [0.7, -1.2, 1.5, -0.4]


def _where_sqrt(framework: str, safe: bool):
    """sum(where(x > 0, sqrt(x), 0)); the safe form feeds sqrt only positive numbers."""
    if framework == "torch":
        x = torch.tensor(MIXED, dtype=torch.float64)

        def f(x):
            inner = torch.where(x > 0, x, torch.ones_like(x)) if safe else x
            return torch.sum(torch.where(x > 0, torch.sqrt(inner), torch.zeros_like(x)))

        return f, x
    xj = jnp.asarray(MIXED, jnp.float32)

    def g(x):
        inner = jnp.where(x > 0, x, 1.0) if safe else x
        return jnp.sum(jnp.where(x > 0, jnp.sqrt(inner), 0.0))

    return g, xj


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_where_sqrt_trap_is_nonfinite_and_the_safe_form_passes(framework):
    """At x < 0 the derivative is 0, autodiff returns 0 * (d sqrt at x < 0) = NaN."""
    f, x = _where_sqrt(framework, safe=False)
    report = pg.check(f, x)
    assert report.verdict is Verdict.NONFINITE and not report.ok, str(report)
    e = report.entries
    nonfinite = [e.names[i] for i, v in enumerate(e.verdicts()) if v is Verdict.NONFINITE]
    assert nonfinite == ["x[1]", "x[3]"]  # the negative entries
    xs = np.asarray(MIXED)
    true = np.where(xs > 0, 0.5 / np.sqrt(np.abs(xs)), 0.0)
    assert np.all(np.isnan(e.autodiff[xs < 0]))
    assert np.all(np.abs(e.reference - true) <= e.reference_error + 1e-6 * np.abs(true))
    safe, x = _where_sqrt(framework, safe=True)
    good = pg.check(safe, x)
    assert good.verdict is Verdict.PASS and good.ok, str(good)


# --- PyTorch forward mode -----------------------------------------------------------------------


class _Cube(torch.autograd.Function):
    """x**3 elementwise, with a backward rule and a forward rule, either one 0.1% off."""

    jvp_factor = 1.0
    vjp_factor = 1.0

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @classmethod
    def backward(cls, ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x**2 * cls.vjp_factor

    @classmethod
    def jvp(cls, ctx, t):
        (x,) = ctx.saved_tensors
        return t * 3 * x**2 * cls.jvp_factor


class _CubeWrongJVP(_Cube):
    jvp_factor = 1.001


class _CubeWrongVJP(_Cube):
    vjp_factor = 1.001


XT = [0.5, -1.1, 2.0]


def _mismatched(report: pg.Report) -> list[str]:
    e = report.entries
    return [e.names[i] for i, v in enumerate(e.verdicts()) if v is Verdict.MISMATCH]


def test_torch_forward_mode_and_both_modes():
    """mode="fwd" checks JVPs, mode="both" VJPs and JVPs: each finds the rule that is
    wrong, on the diagonal of the Jacobian of x**3 (3 x^2), and only there."""
    x = torch.tensor(XT, dtype=torch.float64)
    right = pg.check(lambda x: torch.sum(torch.sin(x) * x), x, mode="fwd")
    assert right.verdict is Verdict.PASS and right.ok and right.details["modes"] == ["fwd"]
    xs = np.asarray(XT)
    e = right.entries
    assert np.all(np.abs(e.reference - (np.sin(xs) + xs * np.cos(xs))) <= 1e-12)
    both = pg.check(lambda x: torch.sum(torch.sin(x) * x), x, mode="both")
    assert both.verdict is Verdict.PASS and both.ok and both.details["modes"] == ["rev", "fwd"]
    fwd = pg.check(_CubeWrongJVP.apply, x, mode="fwd")
    assert fwd.verdict is Verdict.MISMATCH and len(_mismatched(fwd)) == 3
    assert pg.check(_CubeWrongJVP.apply, x, mode="rev").verdict is Verdict.PASS
    wrong_jvp = pg.check(_CubeWrongJVP.apply, x, mode="both")
    assert wrong_jvp.verdict is Verdict.MISMATCH
    assert all(name.startswith("JVP") for name in _mismatched(wrong_jvp))
    wrong_vjp = pg.check(_CubeWrongVJP.apply, x, mode="both")
    assert wrong_vjp.verdict is Verdict.MISMATCH
    assert all(name.startswith("VJP") for name in _mismatched(wrong_vjp))
    assert len(_mismatched(wrong_vjp)) == 3
    assert pg.check(_CubeWrongVJP.apply, x, mode="fwd").verdict is Verdict.PASS
    # the mismatched entries are the diagonal ones: reference 3 x^2, off by 0.1%
    e = fwd.entries
    idx = [i for i, v in enumerate(e.verdicts()) if v is Verdict.MISMATCH]
    np.testing.assert_allclose(np.sort(e.reference[idx]), np.sort(3 * xs**2), rtol=1e-12)
    np.testing.assert_allclose(np.sort(e.autodiff[idx]), np.sort(3.003 * xs**2), rtol=1e-12)


# --- TensorFlow second order --------------------------------------------------------------------


@tf.custom_gradient
def _cos_wrong_derivative(x):
    """cos(x), whose own derivative is given 1% too large (-1.01 sin x)."""

    def grad(ct):
        return ct * -1.01 * tf.sin(x)

    return tf.cos(x), grad


@tf.custom_gradient
def _sin_right_first_wrong_second(x):
    def grad(ct):
        return ct * _cos_wrong_derivative(x)

    return tf.sin(x), grad


def test_tensorflow_second_order():
    """order=2 checks the Jacobian of the gradient: the Hessian of sum(sin(x) exp(x)) is
    diag(2 cos(x) exp(x)); a first derivative that is right but whose own derivative is
    1% off passes at order 1 and is MISMATCH on the Hessian's diagonal at order 2."""
    x = tf.constant([0.3, -0.2, 0.5], tf.float32)
    report = pg.check(lambda x: tf.reduce_sum(tf.sin(x) * tf.exp(x)), x, order=2)
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    xs = x.numpy().astype(np.float64)
    hessian = np.diag(2 * np.cos(xs) * np.exp(xs))
    e = report.entries
    assert e.reference.size == 9
    np.testing.assert_allclose(np.sort(e.reference), np.sort(hessian.ravel()), atol=1e-7)
    f = lambda x: tf.reduce_sum(_sin_right_first_wrong_second(x))  # noqa: E731
    first = pg.check(f, x)
    assert first.verdict is Verdict.PASS and first.ok, str(first)
    second = pg.check(f, x, order=2)
    assert second.verdict is Verdict.MISMATCH and not second.ok
    assert len(_mismatched(second)) == 3  # the diagonal, -sin(x) given as -1.01 sin(x)
    idx = [i for i, v in enumerate(second.entries.verdicts()) if v is Verdict.MISMATCH]
    np.testing.assert_allclose(
        np.sort(second.entries.reference[idx]), np.sort(-np.sin(xs)), rtol=1e-6
    )


# --- Keras parameters through check() -----------------------------------------------------------


def _hand_parameter_gradient(model, x: np.ndarray) -> np.ndarray:
    """d/dparams of sum(model(x)^2) for Dense(tanh) -> Dense, in float64, by hand."""
    w1, b1, w2, b2 = (np.asarray(v.numpy(), np.float64) for v in model.trainable_variables)
    h = np.tanh(x @ w1 + b1)
    out = h @ w2 + b2
    d_out = 2 * out
    d_z = (d_out @ w2.T) * (1 - h**2)
    parts = [x.T @ d_z, d_z.sum(0), h.T @ d_out, d_out.sum(0)]
    return np.concatenate([p.ravel() for p in parts])


def test_keras_parameters_through_check():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(2)]
    )
    x_np = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    before = [w.numpy().copy() for w in model.weights]
    report = pg.check(
        lambda m, x: tf.reduce_sum(m(x) ** 2), model, tf.constant(x_np), wrt="parameters"
    )
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    assert report.details["inputs"] == 4 * 8 + 8 + 8 * 2 + 2
    assert report.details["input_names"] == [v.path for v in model.trainable_variables]
    true = _hand_parameter_gradient(model, x_np.astype(np.float64))
    e = report.entries
    scale = np.sqrt(np.mean(true**2))
    assert np.all(np.abs(e.reference - true) <= e.reference_error + 1e-9 * scale)
    for w, b in zip(model.weights, before, strict=True):  # the model is untouched
        np.testing.assert_array_equal(w.numpy(), b)
        assert w.dtype == "float32"


# --- projections on framework functions ---------------------------------------------------------

N_PROJ = 40
X_PROJ = np.random.default_rng(0).standard_normal(N_PROJ).astype(np.float32)
WRONG = np.where(np.arange(N_PROJ) == 3, 1.01, 1.0).astype(np.float32)


def _tanh_x(framework: str, wrong: bool):
    """sum(tanh(x) x); the wrong form's rule is 1% too large at entry 3."""
    if framework == "torch":

        class F(torch.autograd.Function):
            @staticmethod
            def forward(x):
                return torch.sum(torch.tanh(x) * x)

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(inputs[0])

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                t = torch.tanh(x)
                return g * (t + x * (1 - t**2)) * torch.tensor(WRONG)

        plain_t = lambda x: torch.sum(torch.tanh(x) * x)  # noqa: E731
        return (F.apply if wrong else plain_t), torch.tensor(X_PROJ)
    if framework == "jax":

        @jax.custom_vjp
        def g(x):
            return jnp.sum(jnp.tanh(x) * x)

        def fwd(x):
            return g(x), x

        def bwd(x, ct):
            t = jnp.tanh(x)
            return (ct * (t + x * (1 - t**2)) * WRONG,)

        g.defvjp(fwd, bwd)
        plain_j = lambda x: jnp.sum(jnp.tanh(x) * x)  # noqa: E731
        return (g if wrong else plain_j), jnp.asarray(X_PROJ)

    @tf.custom_gradient
    def h(x):
        def grad(ct):
            t = tf.tanh(x)
            return ct * (t + x * (1 - t**2)) * WRONG

        return tf.reduce_sum(tf.tanh(x) * x), grad

    plain_tf = lambda x: tf.reduce_sum(tf.tanh(x) * x)  # noqa: E731
    return (h if wrong else plain_tf), tf.constant(X_PROJ)


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
def test_projections_on_framework_functions(framework):
    """8 random projections u^T J w of a 40-input function: a right rule passes; a rule
    1% off at one entry, an error above the stated detection power, fails."""
    f, x = _tanh_x(framework, wrong=False)
    report = pg.check(f, x, strategy="projections")
    assert report.details["strategy"] == "projections"
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    assert report.counts() == {"PASS": 8}
    xs = X_PROJ.astype(np.float64)
    d3 = np.tanh(xs[3]) + xs[3] * (1 - np.tanh(xs[3]) ** 2)
    power = report.details["projections"]["single_entry_error_caught"]
    assert 0.01 * abs(d3) > 10 * power
    f, x = _tanh_x(framework, wrong=True)
    bad = pg.check(f, x, strategy="projections")
    assert bad.verdict is Verdict.MISMATCH and not bad.ok, str(bad)
