"""A new user's trial: tolerances as wide as the values, expected accuracy, surrogates.

1. A rule with no float64 evaluation in bfloat16 or float16 is allowed ``64 eps`` of
   its scale, half (or a sixteenth) of the values: a 30% (5%) wrong rule fits in it.
   Such an entry is INCONCLUSIVE with the reason, never PASS.
2. scikit-learn's Gaussian-process log marginal likelihood: its exact float64 gradient
   PASSes, one wrong by 1e-3 is MISMATCH.
3. ``rtol=``/``atol=``: the accuracy the user expects of an approximate gradient (an
   implicit layer solved to 1e-5); ``surrogate=True``: a rule that is not the derivative
   by design (straight-through estimator, gradient reversal, clipping) is reported, not
   judged (INCONCLUSIVE, ok), and still checked finite.

The truths are closed forms (``cos``), an mp evaluation, or a planted factor.
"""

from __future__ import annotations

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict
from polygrad.pipeline.judge import Expected, JudgeInput, judge
from polygrad.policy import DEFAULT_POLICY, Policy
from polygrad.report import SEVERITY

POINTS = np.linspace(0.3, 1.5, 7)
WIDE = "round-off allowed is of the size of the entries"


# --- 1. a tolerance of the size of the values checks nothing ---------------------------


@pytest.mark.polygrad_backends("tensorflow")
@pytest.mark.parametrize(("dtype", "factor"), [("bfloat16", 1.3), ("float16", 1.05)])
def test_tensorflow_wrong_rule_without_float64_evaluation_is_not_pass(
    dtype: str, factor: float
) -> None:
    import tensorflow as tf

    dt = getattr(tf, dtype)
    planted = tf.constant(factor, dt)  # closed over: the float64 re-run of the rule fails

    @tf.custom_gradient
    def sin(x):
        def grad(g):
            return g * tf.cos(x) * planted

        return tf.sin(x), grad

    x = tf.constant(POINTS, dtype=dt)
    r = pg.check(lambda x: tf.reduce_sum(sin(x)), x)
    assert not r.details["rules"]["has_float64_autodiff"]
    assert r.verdict == Verdict.INCONCLUSIVE and not r.ok, r
    assert WIDE in str(r)
    # the measured error is shown: the planted share of cos(x)
    rel = np.abs(r.entries.autodiff - r.entries.reference) / np.cos(POINTS)
    assert np.all(np.abs(rel - (factor - 1)) < 0.05), rel


@pytest.mark.polygrad_backends("torch")
def test_torch_wrong_rule_in_bfloat16_is_mismatch() -> None:
    import torch

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sin(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * torch.cos(x) * 1.3

    for dtype in (torch.bfloat16, torch.float16):
        x = torch.tensor(POINTS, dtype=dtype)
        r = pg.check(lambda x: Sin.apply(x).sum(), x)
        assert r.verdict == Verdict.MISMATCH and not r.ok, r


@pytest.mark.polygrad_backends("jax")
def test_jax_wrong_custom_vjp_in_bfloat16_is_mismatch() -> None:
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def sin(x):
        return jnp.sin(x)

    sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x) * 1.3,))
    x = jnp.asarray(POINTS, dtype=jnp.bfloat16)
    r = pg.check(lambda x: jnp.sum(sin(x)), x)
    assert r.verdict == Verdict.MISMATCH and not r.ok, r


def _judged(
    ad: np.ndarray, eps: float, *, have64: bool = False, allowance: float | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> np.ndarray:  # fmt: skip
    """The verdicts of ``ad`` against an exact reference ``cos(POINTS)`` (error bar 1e-12)."""
    ref = np.cos(POINTS)
    k = ref.size
    err = np.full(k, 1e-12)
    scale = np.abs(ref) + np.sqrt(np.mean(ref**2))
    inp = JudgeInput(
        names=[f"x[{i}]" for i in range(k)], ad=ad, ad64=ad if have64 else np.full(k, np.nan),
        have64=have64, ref=ref, ref_err=err, left=ref, left_err=err, right=ref,
        right_err=err, jumps=np.zeros(k, bool), scale=scale, fscale=scale, eps_w=eps,
        ref_eps=2.0**-52, allowance_w=None if allowance is None else allowance * scale,
        allowance_64=None, policy=policy,
    )  # fmt: skip
    return judge(inp).status


def test_judge_wide_tolerances_are_inconclusive_in_every_dtype() -> None:
    inconclusive = SEVERITY[Verdict.INCONCLUSIVE]
    ref = np.cos(POINTS)
    # bfloat16 and float16 rules with no float64 evaluation, 30% and 5% off
    assert np.all(_judged(ref * 1.3, 2.0**-7) == inconclusive)
    assert np.all(_judged(ref * 1.05, 2.0**-10) == inconclusive)
    # float32 with a measured allowance of half the scale: a 10% error fits in it
    assert np.all(_judged(ref * 1.1, 2.0**-23, allowance=0.5) == inconclusive)
    # a float32 rule 1e-4 off has a tolerance far below 1% of its scale: MISMATCH
    assert np.all(_judged(ref * (1 + 1e-4), 2.0**-23) == SEVERITY[Verdict.MISMATCH])
    # the right float32 rule PASSes
    assert np.all(_judged(ref.astype(np.float32).astype(float), 2.0**-23) == 0)
    # the limit is the policy's
    loose = Policy(widest_tolerance=1.0)
    assert np.all(_judged(ref * 1.3, 2.0**-7, policy=loose) == SEVERITY[Verdict.PASS])


# --- 2. scikit-learn's Gaussian-process likelihood -------------------------------------


def _gpr() -> tuple[object, np.ndarray]:
    pytest.importorskip("sklearn")
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    rs = np.random.RandomState(25)
    X = np.sort(rs.uniform(0, 5, 15))[:, None]
    y = np.sin(X[:, 0]) + 0.1 * rs.randn(15)
    kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)
    gpr = GaussianProcessRegressor(kernel, optimizer=None).fit(X, y)
    return gpr, gpr.kernel_.theta


# d log p(y | theta) / d theta at theta = (0, 0, log 0.1), mpmath at 40 digits (alpha 1e-10
# on the diagonal, as scikit-learn adds)
GPR_TRUE = np.array([-1.1735903001319226868, 2.777612684428934579, -4.3653696437957748264])


@pytest.mark.polygrad_backends("numpy")
@pytest.mark.parametrize(("factor", "verdict"), [(1.0, Verdict.PASS), (1 + 1e-3, Verdict.MISMATCH)])
def test_gaussian_process_likelihood_gradient(factor: float, verdict: Verdict) -> None:
    gpr, theta = _gpr()

    def lml(t):
        return gpr.log_marginal_likelihood(t)  # type: ignore[attr-defined]

    def grad(t):
        return factor * gpr.log_marginal_likelihood(t, eval_gradient=True)[1]  # type: ignore[attr-defined]

    assert np.allclose(grad(theta) / factor, GPR_TRUE, rtol=1e-14, atol=0)
    r = pg.check(lml, theta, grad=grad)
    assert r.verdict == verdict and r.ok == (verdict == Verdict.PASS), r


# --- 3. the accuracy expected, and surrogates by design --------------------------------


def _implicit_layer():
    """sum(z^2) of the fixed point z = tanh(A z + a), iterated to 1e-5 by a while loop, with
    an implicit-function-theorem VJP evaluated at that approximate fixed point."""
    import jax
    import jax.numpy as jnp

    A = 0.5 * jnp.array([[0.5, -0.3, 0.2], [0.1, 0.4, -0.2], [-0.3, 0.2, 0.6]], jnp.float64)

    def step(z, a):
        return jnp.tanh(A @ z + a)

    def solve(a):
        def body(c):
            z, _ = c
            zn = step(z, a)
            return zn, jnp.max(jnp.abs(zn - z))

        init = (jnp.zeros_like(a), jnp.asarray(jnp.inf, a.dtype))
        return jax.lax.while_loop(lambda c: c[1] > 1e-5, body, init)[0]

    @jax.custom_vjp
    def fixed_point(a):
        return solve(a)

    def fwd(a):
        z = solve(a)
        return z, (z, a)

    def bwd(res, g):
        z, a = res
        Jz = jax.jacobian(lambda z: step(z, a))(z)
        w = jnp.linalg.solve((jnp.eye(3) - Jz).T, g)
        return jax.vjp(lambda a: step(z, a), a)[1](w)

    fixed_point.defvjp(fwd, bwd)
    return lambda a: jnp.sum(fixed_point(a) ** 2)


@pytest.mark.polygrad_backends("jax")
def test_jax_implicit_layer_under_the_accuracy_asked() -> None:
    import jax

    with jax.enable_x64(True):
        import jax.numpy as jnp

        f, a = _implicit_layer(), jnp.array([0.3, -0.2, 0.5], jnp.float64)
        plain = pg.check(f, a)
        loose = pg.check(f, a, rtol=1e-4)
        tight = pg.check(f, a, rtol=1e-7)
    assert plain.verdict == Verdict.MISMATCH, plain
    assert loose.verdict == Verdict.PASS and loose.ok, loose
    assert tight.verdict == Verdict.MISMATCH and not tight.ok, tight
    e = loose.entries
    rel = np.abs(e.autodiff - e.reference) / np.abs(e.reference)
    assert np.max(rel) > 1e-6  # the solver's error, measured and shown
    assert np.all(e.tolerance >= 1e-4 * np.abs(e.reference))
    assert "rtol=0.0001" in str(loose)


@pytest.mark.parametrize(("rtol", "atol", "verdict"), [
    (1e-4, None, Verdict.PASS), (1e-7, None, Verdict.MISMATCH), (None, 1e-4, Verdict.PASS),
    (None, None, Verdict.MISMATCH),
])  # fmt: skip
def test_accuracy_asked_in_every_framework(
    backend, rtol: float | None, atol: float | None, verdict: Verdict
) -> None:
    """A float64 rule 1e-5 off: PASS where the accuracy asked allows it, MISMATCH otherwise."""
    r = _rule_planted(backend.name, 1e-5, rtol=rtol, atol=atol)
    assert r.verdict == verdict and r.ok == (verdict == Verdict.PASS), r
    diff = np.abs(r.entries.autodiff - r.entries.reference)
    assert np.allclose(diff, 1e-5 * np.cos(POINTS), rtol=1e-3)  # measured, and shown


def _rule_planted(name: str, rel: float, **options) -> pg.Report:
    """``sum(sin(x))`` at float64 POINTS whose rule is ``cos(x) (1 + rel)``, checked."""
    factor = 1.0 + rel
    if name == "numpy":
        return pg.check(lambda x: np.sum(np.sin(x)), POINTS,
                        grad=lambda x: np.cos(x) * factor, **options)  # fmt: skip
    if name == "torch":
        import torch

        class Sin(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return torch.sin(x)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * torch.cos(x) * factor

        x = torch.tensor(POINTS, dtype=torch.float64)
        return pg.check(lambda x: Sin.apply(x).sum(), x, **options)
    if name == "jax":
        import jax
        import jax.numpy as jnp

        @jax.custom_vjp
        def sin(x):
            return jnp.sin(x)

        sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x) * factor,))
        with jax.enable_x64(True):
            return pg.check(lambda x: jnp.sum(sin(x)), jnp.asarray(POINTS), **options)
    import tensorflow as tf

    @tf.custom_gradient
    def tsin(x):
        return tf.sin(x), lambda g: g * tf.cos(x) * factor

    return pg.check(lambda x: tf.reduce_sum(tsin(x)), tf.constant(POINTS), **options)


def test_surrogate_rule_is_reported_not_judged(backend) -> None:
    """A gradient reversal (the rule is -cos x): INCONCLUSIVE by design, ok, shown."""
    plain = _rule_planted(backend.name, -2.0)
    r = _rule_planted(backend.name, -2.0, surrogate=True)
    assert plain.verdict == Verdict.MISMATCH and not plain.ok, plain
    assert r.verdict == Verdict.INCONCLUSIVE and r.ok, r
    assert np.allclose(r.entries.autodiff, -np.cos(POINTS), rtol=1e-12)
    assert np.allclose(r.entries.reference, np.cos(POINTS), rtol=1e-9)
    assert "surrogate by design" in str(r)


@pytest.mark.polygrad_backends("torch")
def test_straight_through_estimator_in_torch() -> None:
    """round(x) with the identity as its gradient: f's derivative is 0 between the jumps."""
    import torch

    x = torch.tensor(POINTS + 0.1, dtype=torch.float32)

    def f(x):
        return (x + (torch.round(x * 4) / 4 - x).detach()).pow(2).sum()

    r = pg.check(f, x, surrogate=True)
    assert r.verdict == Verdict.INCONCLUSIVE and r.ok, r
    assert np.all(np.abs(r.entries.reference) < 1e-3)  # f is constant between its jumps
    assert np.allclose(r.entries.autodiff, 2 * np.round(x.numpy() * 4) / 4)
    assert pg.check(f, x).verdict == Verdict.MISMATCH


def test_surrogate_rule_that_is_nan_is_not_ok() -> None:
    r = pg.check(lambda x: np.sum(np.sin(x)), POINTS,
                 grad=lambda x: np.where(x > 1, np.nan, -np.cos(x)), surrogate=True)  # fmt: skip
    assert r.verdict == Verdict.NONFINITE and not r.ok, r


@pytest.mark.parametrize("bad", [{"rtol": -1.0}, {"atol": float("inf")}, {"rtol": "1e-4"},
                                 {"surrogate": 1}])  # fmt: skip
def test_accuracy_options_are_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        pg.check(lambda x: np.sum(np.sin(x)), POINTS, grad=np.cos, **bad)


def test_expected_is_what_judge_reads() -> None:
    assert Expected(1e-4, 1e-6).allowed(np.array([2.0, np.nan])).tolist() == [2e-4 + 1e-6, 0.0]


def test_steps_where_f_is_not_finite_raise_no_warning():
    """gammaln at 0.5 (the ladder's long steps reach its poles): the tableau's inf - inf
    is NaN by design and spoils only the entries that use it; the user sees a PASS and no
    RuntimeWarning from polygrad's internals."""
    import warnings

    from scipy.special import digamma, gammaln

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        report = pg.check(lambda x: np.sum(gammaln(x)), np.array([0.5, 3.0, 50.0]),
                          grad=digamma)  # fmt: skip
    assert report.verdict == Verdict.PASS and report.ok, report
