"""Code that reads its dtype computes another function when polygrad runs it in float64.

``-log(p + finfo(p.dtype).eps)`` adds 2^-23 in float32 and 2^-52 in float64; at
``p = 1e-7`` the two derivatives differ by a factor of two. The float32 gradient is right
for the float32 function, and must not be called wrong: the check finds the float64 run
to be another function and judges the float32 code against float32 differences.
TensorFlow rewrites the captured float32 graph to float64, its constants included, so
its float64 run is the same function.
"""

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict

EPS32 = 2.0**-23
P = [1e-7, 1e-4, 0.3]
ANOTHER = "the float64 run of f is the odd one out"
APART = "the float64 run of f computes another function"


def _rechecked(report):
    """Whether the report says the float64 run is another function (measured on f's
    values, or at failing entries) and was judged on the working program alone."""
    return any(ANOTHER in note or APART in note for note in report.notes)


def _log_eps(framework):
    """``-sum(log(p + eps))`` with the eps of the input's dtype, as users write it."""
    if framework == "torch":
        import torch

        return lambda p: -torch.log(p + torch.finfo(p.dtype).eps).sum()
    if framework == "jax":
        import jax.numpy as jnp

        return lambda p: -jnp.sum(jnp.log(p + jnp.finfo(p.dtype).eps))
    if framework == "tensorflow":
        import tensorflow as tf

        return lambda p: -tf.reduce_sum(tf.math.log(p + np.finfo(p.dtype.as_numpy_dtype).eps))
    return lambda p: -np.sum(np.log(p + np.finfo(p.dtype).eps))


def _input(framework, values):
    x = np.array(values, np.float32)
    if framework == "torch":
        import torch

        return torch.tensor(x)
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(x)
    if framework == "tensorflow":
        import tensorflow as tf

        return tf.constant(x)
    return x


def _exact(values):
    """The float32 function's derivative, in float64: -1 / (p + 2^-23) at the float32 p."""
    return -1.0 / (np.array(values, np.float32).astype(np.float64) + EPS32)


FRAMEWORKS = [
    pytest.param(fw, marks=pytest.mark.polygrad_backends(fw))
    for fw in ("numpy", "torch", "jax", "tensorflow")
]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_constant_that_depends_on_the_dtype_is_not_a_wrong_rule(framework):
    f = _log_eps(framework)
    x = _input(framework, P)
    extra = {}
    if framework == "numpy":
        extra["vjp"] = lambda g, p: -g / (p + np.finfo(p.dtype).eps)
    report = pg.check(f, x, **extra)
    assert report.verdict == Verdict.PASS and report.ok, str(report)
    np.testing.assert_allclose(report.entries.reference, _exact(P), rtol=1e-4)
    rechecked = _rechecked(report)
    # TensorFlow's float64 run is its float32 graph rewritten: the same function
    assert rechecked == (framework != "tensorflow"), str(report)


@pytest.mark.parametrize("framework", [p for p in FRAMEWORKS if p.values[0] != "tensorflow"])
def test_a_wrong_rule_in_code_that_reads_its_dtype_stays_a_mismatch(framework):
    """The same function under a rule 10% off: wrong in every dtype, so the float32
    check does not clear it."""
    x = _input(framework, P)
    if framework == "numpy":
        report = pg.check(_log_eps("numpy"), x,
                          vjp=lambda g, p: -1.1 * g / (p + np.finfo(p.dtype).eps))  # fmt: skip
    else:
        report = pg.check(_scaled_rule(framework, 1.1), x)
    assert report.verdict == Verdict.MISMATCH and not report.ok, str(report)
    # judged on the float32 program (its float64 run is measured to be another function,
    # where the float32 program runs on mp), never cleared as the odd one out
    assert not any(ANOTHER in note for note in report.notes)


def _scaled_rule(framework, factor):
    """``_log_eps`` under the framework's custom-rule mechanism, its VJP times ``factor``."""
    if framework == "torch":
        import torch

        class LogEps(torch.autograd.Function):
            @staticmethod
            def forward(ctx, p):
                ctx.save_for_backward(p)
                return -torch.log(p + torch.finfo(p.dtype).eps).sum()

            @staticmethod
            def backward(ctx, g):
                (p,) = ctx.saved_tensors
                return -factor * g / (p + torch.finfo(p.dtype).eps)

        return LogEps.apply
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def log_eps(p):
        return -jnp.sum(jnp.log(p + jnp.finfo(p.dtype).eps))

    log_eps.defvjp(
        lambda p: (log_eps(p), p), lambda p, g: (-factor * g / (p + jnp.finfo(p.dtype).eps),)
    )
    return log_eps


@pytest.mark.polygrad_backends("torch")
def test_a_model_loss_with_the_dtype_eps_passes_on_its_own_program():
    """A classifier's loss as users write it, -log(p[y] + finfo(p.dtype).eps) on sharp
    softmax outputs: its float64 run adds 2^-52, not 2^-23, and its gradient differs by
    0.4% at the entries whose p[y] is near 0. The float32 program is judged alone, its
    doubtful entries on mpmath numbers (PyTorch's mp program is the float32 one): PASS,
    its reference within its error bars of the float64 gradient of the float32 program
    (eps = 2^-23)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)
    ).eval()
    x = torch.randn(5, 4)
    y = torch.tensor([0, 2, 1, 0, 1])

    def nll(x, eps=None):
        p = torch.softmax(model(x) * 20, dim=-1)
        eps = torch.finfo(p.dtype).eps if eps is None else eps
        return -torch.log(p.gather(1, y[:, None]) + eps).mean()

    report = pg.check(nll, x)
    assert report.verdict == Verdict.PASS and report.ok, str(report)
    assert _rechecked(report)
    model64 = model.double()
    x64 = x.double().requires_grad_()
    (want,) = torch.autograd.grad(nll(x64, eps=EPS32), x64)
    model.float()
    # the reference's error bars cover the float32 program's own gradient
    gap = np.abs(report.entries.reference - want.numpy().ravel())
    assert np.all(gap <= report.entries.reference_error + 1e-9), (gap, report.entries)
    assert model64 is model


def _selu_layer(scale: float, seed: int):
    """A float32 SELU layer whose torch.autograd.Function has backward scale ``scale``
    (the right one, 1.0507009873554805, or a typo, 1.0507: a relative error of 9.4e-7,
    within float32's tolerance), with one pre-activation 2.3e-4 from the kink."""
    import torch

    alpha, right = 1.6732632423543772, 1.0507009873554805

    class Selu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, z):
            ctx.save_for_backward(z)
            return right * torch.where(z > 0, z, alpha * torch.expm1(z))

        @staticmethod
        def backward(ctx, g):
            (z,) = ctx.saved_tensors
            return g * scale * torch.where(z > 0, torch.ones_like(z), alpha * torch.exp(z))

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 6, generator=gen)
    W1 = torch.randn(6, 5, generator=gen) / 2
    w2 = torch.randn(5, generator=gen) / 2
    W1[0, 0] -= ((x @ W1)[0, 0] - 2.3e-4) / x[0, 0]
    return (lambda v: (Selu.apply(v @ W1) @ w2).pow(2).mean()), x


@pytest.mark.polygrad_backends("torch")
@pytest.mark.parametrize("seed", [0, 1])
def test_working_differences_across_a_kink_are_not_another_function(seed):
    """The typo's float64 rule is off beyond the float64 tolerance (MISMATCH); float32
    differences along an input cross the kink of the pre-activation 2.3e-4 from 0, where
    float64 ones do not, so the two references differ there and the float32 check is
    NONSMOOTH: that is no other float64 function (autodiff is not within the float32
    check's tolerance of its central difference). It was judged on float32 alone:
    INCONCLUSIVE, with a note saying autodiff agreed with the float32 check."""
    wrong, x = _selu_layer(1.0507, seed)
    report = pg.check(wrong, x)
    assert report.verdict is Verdict.MISMATCH and not report.ok
    assert report.details.reference.method == "float64"
    assert not _rechecked(report)
    right, x = _selu_layer(1.0507009873554805, seed)
    report = pg.check(right, x)
    assert report.verdict is Verdict.PASS and report.ok


def _rms_norm_forgetting_eps(framework):
    """An RMS norm ``x / sqrt(mean(x²) + finfo(x.dtype).eps)`` (as ``F.rms_norm`` with
    ``eps=None`` computes it) under a custom rule that forgets the eps: the derivative of
    the same function without it. Its float64 run adds 2^-52, so the float64 reference is
    that eps-free function's derivative, which the wrong rule is."""
    if framework == "torch":
        import torch

        class RMSNorm(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True))  # the eps forgotten
                return r * g - x * r**3 * (g * x).sum(-1, keepdim=True) / x.shape[-1]

        return RMSNorm.apply, lambda a, b: (a * b).sum()
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def rms(x):
        return x * jax.lax.rsqrt(jnp.mean(x**2, -1, keepdims=True) + jnp.finfo(x.dtype).eps)

    def bwd(x, g):
        r = jax.lax.rsqrt(jnp.mean(x**2, -1, keepdims=True))  # the eps forgotten
        return (r * g - x * r**3 * jnp.sum(g * x, -1, keepdims=True) / x.shape[-1],)

    rms.defvjp(lambda x: (rms(x), x), bwd)
    return rms, lambda a, b: jnp.sum(a * b)


def _rms_inputs(framework):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 4)) * 1e-3).astype(np.float32)
    w = rng.standard_normal((2, 4)).astype(np.float32)
    if framework == "torch":
        import torch

        return torch.tensor(x), torch.tensor(w)
    import jax.numpy as jnp

    return jnp.asarray(x), jnp.asarray(w)


def _rms_exact(x, w):
    """The derivative of the float32 function (eps = 2^-23), in float64."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    r = 1.0 / np.sqrt(np.mean(x**2, -1, keepdims=True) + EPS32)
    return r * w - x * r**3 * np.sum(w * x, -1, keepdims=True) / x.shape[-1]


@pytest.mark.parametrize("framework", [p for p in FRAMEWORKS if p.values[0] in ("torch", "jax")])
def test_a_rule_that_is_the_float64_runs_derivative_is_not_passed(framework):
    """At ``x`` near 1e-3 the eps is 7% of ``mean(x²)``: the float32 value differs from
    the float64 run by 6.6%, and the float32 program on mpmath numbers agrees with the
    float32 value. The rule that forgets the eps agreed with the float64 reference and
    was PASS, its entries 2% to 8% off the float32 function's derivative; the float64 run
    is measured to be another function, so the check is judged on the float32 program
    alone: MISMATCH. The right rule (autodiff of the same forward) is PASS there, its
    reference the float32 function's derivative."""
    rms, weighted = _rms_norm_forgetting_eps(framework)
    x, w = _rms_inputs(framework)
    report = pg.check(lambda v: weighted(rms(v), w), x)
    assert report.verdict is Verdict.MISMATCH and not report.ok, str(report)
    assert _rechecked(report), report.notes
    if framework == "torch":
        import torch

        def forward(v):
            return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + torch.finfo(v.dtype).eps)
    else:
        import jax
        import jax.numpy as jnp

        def forward(v):
            return v * jax.lax.rsqrt(jnp.mean(v**2, -1, keepdims=True) + jnp.finfo(v.dtype).eps)

    report = pg.check(lambda v: weighted(forward(v), w), x)
    assert report.verdict is Verdict.PASS and report.ok, str(report)
    np.testing.assert_allclose(report.entries.reference, _rms_exact(x, w).ravel(), rtol=1e-4)
    assert _rechecked(report), report.notes


@pytest.mark.polygrad_backends("torch")
def test_a_rule_wrong_only_in_float32_is_not_called_right():
    """A backward 0.1% off only where ``y.dtype == torch.float32``: its float64 evaluation
    agrees with the reference, its float32 values do not. Not ok (UNSTABLE), and the
    headline no longer says "the rule is right": it names a branch on the dtype beside
    unstable arithmetic."""
    import torch

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * (1 - y * y) * (1 + 1e-3 if y.dtype == torch.float32 else 1.0)

    x = torch.tensor([0.3, -1.2, 0.7], dtype=torch.float32)
    report = pg.check(lambda v: Tanh.apply(v).sum(), x)
    assert report.verdict is Verdict.UNSTABLE and not report.ok, str(report)
    headline = str(report).splitlines()[0]
    assert "the rule is right" not in headline and "a branch on the dtype" in headline
