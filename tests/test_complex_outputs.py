"""Complex outputs of real inputs: checked as (real, imag) pairs in every framework.

Expected Jacobians are closed forms: the DFT matrix for the FFT family
(``∂ rfft(x)_k / ∂ x_j = exp(-2πi jk/n)``), the polar map, the identity for
``complex``/``view_as_complex``, and the eigenvalue perturbation formula of a
2x2 matrix. A complex entry ``c`` of the Jacobian is the pair of real entries
``Re c`` (row ``Re f_k``) and ``Im c`` (row ``Im f_k``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import polygrad as pg
from polygrad.backends import get_backend
from polygrad.complex import OUTPUT_CONVENTION, from_polygrad

X8 = np.array([0.3, -1.2, 0.8, 2.1, -0.4, 0.05, 1.7, -0.9], dtype=np.float32)
X34 = np.array(
    [[0.5, -1.0, 0.25, 2.0], [1.5, 0.75, -0.5, -2.0], [0.1, 0.2, -1.3, 0.9]], dtype=np.float32
)


# ---- closed forms ---------------------------------------------------------------------------
def dft(n: int, sign: float = -1.0) -> np.ndarray:
    """DFT matrix F[k, j] = exp(sign 2πi jk/n), complex128."""
    k = np.arange(n)
    return np.exp(sign * 2j * np.pi * np.outer(k, k) / n)


def pairs(J: np.ndarray) -> np.ndarray:
    """Complex Jacobian (out..., n) → real Jacobian (2 m, n), rows Re f_0, Im f_0, Re f_1..."""
    J = J.reshape(-1, J.shape[-1])
    return np.stack([J.real, J.imag], axis=1).reshape(-1, J.shape[-1])


def entries(J_real: np.ndarray) -> np.ndarray:
    """A real Jacobian (m, n) in the order of ``report.entries`` (input-major)."""
    return J_real.T.ravel()


def rfft_jacobian(n: int) -> np.ndarray:
    return pairs(dft(n)[: n // 2 + 1])


def fft2_jacobian(shape: tuple[int, int]) -> np.ndarray:
    """∂ fft2(X)[k, l] / ∂ X[j, i] = F_r[k, j] F_c[l, i]."""
    return pairs(np.kron(dft(shape[0]), dft(shape[1])))


def assert_pass(report: pg.Report, expected: np.ndarray, rtol: float = 1e-6) -> None:
    """PASS, ok, the convention named, and the reference equal to the closed form."""
    assert report.verdict == pg.Verdict.PASS, report
    assert report.ok
    assert OUTPUT_CONVENTION in report.notes
    assert "complex output checked as (real, imag) pairs" in str(report)
    atol = 1e-9 * float(np.max(np.abs(expected)))
    np.testing.assert_allclose(report.entries.reference, expected, rtol=rtol, atol=atol)
    np.testing.assert_allclose(report.entries.autodiff, expected, rtol=1e-5, atol=1e-5)


RFFT = {
    "torch": (torch.fft.rfft, torch.tensor),
    "jax": (jnp.fft.rfft, jnp.asarray),
    "tensorflow": (tf.signal.rfft, tf.constant),
}


@pytest.mark.parametrize("name", list(RFFT))
def test_rfft_of_real_float32_is_checked_as_real_pairs(name):
    rfft, array = RFFT[name]
    r = pg.check(rfft, array(X8))
    assert r.details["working_dtype"] == "float32"
    assert r.details["reference"]["method"] == "float64"
    assert r.details["outputs"] == 2 * 5  # 5 complex outputs = 10 real ones
    assert r.entries.names[:3] == ["Re f[0] / x[0]", "Im f[0] / x[0]", "Re f[1] / x[0]"]
    assert_pass(r, entries(rfft_jacobian(8)))


def test_fft_family_in_torch():
    x, X = torch.tensor(X8), torch.tensor(X34)
    assert_pass(pg.check(torch.fft.fft, x), entries(pairs(dft(8))))
    assert_pass(pg.check(torch.fft.ifft, x), entries(pairs(dft(8, +1.0) / 8)))
    assert_pass(pg.check(torch.fft.ihfft, x), entries(pairs(dft(8, +1.0)[:5] / 8)))
    r = pg.check(torch.fft.fft2, X)
    assert r.entries.names[:2] == ["Re f[0, 0] / x[0, 0]", "Im f[0, 0] / x[0, 0]"]
    assert_pass(r, entries(fft2_jacobian((3, 4))))
    assert_pass(pg.check(torch.fft.fftn, X), entries(fft2_jacobian((3, 4))))


def test_torch_compiled_spectrum():
    """torch.compile of sin then rfft: J = F diag(cos x)."""
    spectrum = torch.compile(lambda s: torch.fft.rfft(torch.sin(s)))
    r = pg.check(spectrum, torch.tensor(X8))
    cos = np.cos(X8.astype(np.float64))
    assert_pass(r, entries(rfft_jacobian(8) * cos[None, :]))


def test_fft_family_in_jax_jitted():
    x, X = jnp.asarray(X8), jnp.asarray(X34)
    assert_pass(pg.check(jax.jit(jnp.fft.fft), x), entries(pairs(dft(8))))
    assert_pass(pg.check(jnp.fft.ifft, x), entries(pairs(dft(8, +1.0) / 8)))
    assert_pass(pg.check(jnp.fft.fft2, X), entries(fft2_jacobian((3, 4))))


def test_fft_family_in_tensorflow_function():
    x, X = tf.constant(X8), tf.constant(X34)
    # a real signal given to tf.signal.fft: the user casts it to complex64
    fft = tf.function(lambda s: tf.signal.fft(tf.cast(s, tf.complex64)))
    assert_pass(pg.check(fft, x), entries(pairs(dft(8))), rtol=1e-4)
    assert_pass(pg.check(tf.function(tf.signal.rfft), x), entries(rfft_jacobian(8)))
    fft2 = lambda s: tf.signal.fft2d(tf.complex(s, tf.zeros_like(s)))  # noqa: E731
    assert_pass(pg.check(fft2, X), entries(fft2_jacobian((3, 4))))


def test_jax_complex64_cast_is_promoted_for_the_reference():
    """A cast to complex64 inside f is re-executed as complex128 for the float64 reference."""
    r = pg.check(lambda s: jnp.fft.fft(s.astype(jnp.complex64)), jnp.asarray(X8))
    assert r.details["reference"]["method"] == "float64"
    assert_pass(r, entries(pairs(dft(8))))


def test_numpy_rfft_with_derivatives_in_polygrad_convention():
    F = dft(8)[:5]
    x = X8.astype(np.float64)
    expected = entries(rfft_jacobian(8))
    assert_pass(pg.check(np.fft.rfft, x, vjp=lambda c, x: (np.conj(c) @ F).real), expected)
    assert_pass(pg.check(np.fft.rfft, x, jvp=lambda t, x: F @ t[0]), expected)
    # JAX's convention (cotangent u - i v) passed as polygrad's is a bug
    r = pg.check(np.fft.rfft, x, vjp=lambda c, x: (c @ F).real)
    assert r.verdict == pg.Verdict.MISMATCH and not r.ok
    # a relative error of 1e-7 in float64
    r = pg.check(np.fft.rfft, x, vjp=lambda c, x: (np.conj(c) @ F).real * (1 + 1e-7))
    assert r.verdict == pg.Verdict.MISMATCH
    with pytest.raises(pg.InputTypeError, match="jac= is not taken for a complex output"):
        pg.check(np.fft.rfft, x, jac=lambda x: F)


def stft_jacobian(n: int, n_fft: int, hop: int) -> np.ndarray:
    """Rectangular window, no padding: stft[k, t] = Σ_j x[t·hop + j] exp(-2πi jk/n_fft)."""
    frames = (n - n_fft) // hop + 1
    bins = n_fft // 2 + 1
    J = np.zeros((bins, frames, n), dtype=complex)
    for t in range(frames):
        J[:, t, t * hop : t * hop + n_fft] = dft(n_fft)[:bins]
    return J


def test_stft_in_torch_and_tensorflow():
    window = torch.ones(4)

    def spectrum(s):  # a closure over the window, as users write it
        return torch.stft(s, 4, hop_length=2, window=window, center=False, return_complex=True)

    r = pg.check(spectrum, torch.tensor(X8))
    assert r.entries.names[1] == "Im f[0, 0] / x[0]"
    assert_pass(r, entries(pairs(stft_jacobian(8, 4, 2))))
    # TensorFlow: frames first, then bins
    J = stft_jacobian(8, 4, 2).transpose(1, 0, 2)
    r = pg.check(lambda s: tf.signal.stft(s, 4, 2, window_fn=None), tf.constant(X8))
    assert_pass(r, entries(pairs(J)))


R = np.array([1.5, 0.7], dtype=np.float32)
THETA = np.array([0.3, 2.0], dtype=np.float32)


def polar_jacobian(r: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """d(r e^{iθ}) = e^{iθ} dr + i r e^{iθ} dθ; real Jacobian over (r, θ)."""
    r64, t64 = r.astype(np.float64), theta.astype(np.float64)
    e = np.exp(1j * t64)
    return np.concatenate([pairs(np.diag(e)), pairs(np.diag(1j * r64 * e))], axis=1)


def complex_jacobian(k: int) -> np.ndarray:
    """d(a + i b) = da + i db."""
    eye = np.eye(k)
    return np.concatenate([pairs(eye + 0j), pairs(1j * eye)], axis=1)


def test_polar_complex_and_view_as_complex_in_torch():
    r, theta = torch.tensor(R), torch.tensor(THETA)
    rep = pg.check(torch.polar, r, theta, argnums=(0, 1))
    assert rep.entries.names[:2] == ["Re f[0] / arg0[0]", "Im f[0] / arg0[0]"]
    assert_pass(rep, entries(polar_jacobian(R, THETA)))
    assert_pass(pg.check(torch.complex, r, theta, argnums=(0, 1)), entries(complex_jacobian(2)))
    # view_as_complex: (k, 2) real -> k complex, the identity on the flat vectors
    pairs_in = torch.tensor(X34[:, :2].copy())
    assert_pass(pg.check(torch.view_as_complex, pairs_in), entries(np.eye(6)))


def test_complex_from_parts_in_jax_and_tensorflow():
    expected = entries(complex_jacobian(2))
    assert_pass(
        pg.check(jax.lax.complex, jnp.asarray(R), jnp.asarray(THETA), argnums=(0, 1)), expected
    )
    assert_pass(pg.check(tf.complex, tf.constant(R), tf.constant(THETA), argnums=(0, 1)), expected)
    polar = lambda r, t: jnp.asarray(r) * jnp.exp(1j * t)  # noqa: E731
    rep = pg.check(polar, jnp.asarray(R), jnp.asarray(THETA), argnums=(0, 1))
    assert_pass(rep, entries(polar_jacobian(R, THETA)))


# a real nonsymmetric matrix with the complex eigenvalues 0.75 ± i sqrt(5.9375)
A = np.array([[1.0, -2.0], [3.0, 0.5]], dtype=np.float32)


def eigvals_jacobian(a: np.ndarray, lams: np.ndarray) -> np.ndarray:
    """λ = m ± s, m = (a + d)/2, s = sqrt(((a - d)/2)² + bc); columns over a, b, c, d."""
    (p, q), (r, t) = a.astype(np.float64)
    s = np.sqrt(complex(((p - t) / 2) ** 2 + q * r))
    rows = []
    for lam in lams:
        sign = np.sign(((lam - (p + t) / 2) / s).real)  # which root this eigenvalue is
        rows.append(
            [
                0.5 + sign * (p - t) / (4 * s),
                sign * r / (2 * s),
                sign * q / (2 * s),
                0.5 - sign * (p - t) / (4 * s),
            ]
        )
    return pairs(np.array(rows))


EIGVALS = {
    "torch": (torch.linalg.eigvals, torch.tensor),
    "jax": (jnp.linalg.eigvals, jnp.asarray),
    "tensorflow": (tf.linalg.eigvals, tf.constant),
}


@pytest.mark.parametrize("name", list(EIGVALS))
def test_eigenvalues_of_a_real_nonsymmetric_matrix(name):
    eigvals, array = EIGVALS[name]
    lams = np.asarray(eigvals(array(A.astype(np.float64))))
    assert np.all(np.abs(lams.imag) > 2)  # a complex pair: no ordering ambiguity of reals
    r = pg.check(eigvals, array(A))
    assert_pass(r, entries(eigvals_jacobian(A, lams)), rtol=1e-5)


# ---- the convention, derived and measured --------------------------------------------------
U = np.array([0.3, -1.0, 0.5, 2.0, -0.25])  # weights on Re f
V = np.array([1.0, 0.2, -0.7, 0.4, 1.5])  # weights on Im f


def native_vjp(name, cotangent):
    be = get_backend(name)
    rfft, array = RFFT[name]
    (g,) = be.native_vjp(rfft, (array(X8.astype(np.float64)),), (0,), cotangent)
    return np.real(np.asarray(g))


@pytest.mark.parametrize("name", list(RFFT))
def test_real_weights_are_the_complex_cotangent_of_each_convention(name):
    """u on Re f and v on Im f: the cotangent u + i v in PyTorch and TF, u - i v in JAX."""
    expected = np.stack([U, V], axis=1).ravel() @ rfft_jacobian(8)
    conv = get_backend(name).complex_convention
    got = native_vjp(name, from_polygrad(U + 1j * V, conv))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)  # JAX runs it in float32
    # and the other sign is a different vector (the convention matters here)
    other = native_vjp(name, np.conj(from_polygrad(U + 1j * V, conv)))
    assert np.max(np.abs(other - expected)) > 1


# ---- planted bugs: a custom rule of a complex-output function off by 1e-3 ------------------
def dft_rows(n: int) -> np.ndarray:
    return dft(n)[: n // 2 + 1]


class TorchRfft(torch.autograd.Function):
    """rfft with a hand-written backward; ``scale`` plants a relative error."""

    scale = 1.0

    @staticmethod
    def forward(x):
        return torch.fft.rfft(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        F = torch.tensor(dft_rows(g.shape[-1] * 2 - 2), dtype=g.dtype)
        # torch's cotangent g = u + i v: dL/dx_j = Σ_k u_k Re F_kj + v_k Im F_kj = Re(conj(g) F)
        return (g.conj() @ F).real * TorchRfft.scale


def make_jax_rfft(scale: float):
    """rfft with a custom VJP scaled by ``scale``: a new function per scale, as JAX
    caches the trace of a rule per Python function (a global read in it is frozen)."""

    @jax.custom_vjp
    def rfft(x):
        return jnp.fft.rfft(x)

    def bwd(x, g):
        # JAX's cotangent g = u - i v: dL/dx_j = Re(g F)
        F = jnp.asarray(dft_rows(x.shape[-1]), dtype=g.dtype)
        return ((g @ F).real.astype(x.dtype) * scale,)

    rfft.defvjp(lambda x: (jnp.fft.rfft(x), x), bwd)
    return rfft


JAX_RFFT = {"f": make_jax_rfft(1.0)}


def jax_rfft(x):
    return JAX_RFFT["f"](x)


TF_SCALE = {"scale": 1.0}


@tf.custom_gradient
def tf_rfft(x):
    def grad(g):  # TensorFlow's cotangent g = u + i v, as torch's
        F = tf.constant(dft_rows(8), dtype=g.dtype)
        return (
            tf.math.real(tf.linalg.matvec(F, tf.math.conj(g), transpose_a=True)) * TF_SCALE["scale"]
        )

    return tf.signal.rfft(x), grad


PLANTED = {
    "torch": (TorchRfft.apply, torch.tensor, lambda s: setattr(TorchRfft, "scale", s)),
    "jax": (jax_rfft, jnp.asarray, lambda s: JAX_RFFT.update(f=make_jax_rfft(s))),
    "tensorflow": (tf_rfft, tf.constant, lambda s: TF_SCALE.update(scale=s)),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_custom_rule_of_rfft_right_and_off_by_1e_3(name):
    fn, array, set_scale = PLANTED[name]
    set_scale(1.0)
    assert_pass(pg.check(fn, array(X8)), entries(rfft_jacobian(8)))
    set_scale(1.0 + 1e-3)
    try:
        r = pg.check(fn, array(X8))
    finally:
        set_scale(1.0)
    assert r.verdict == pg.Verdict.MISMATCH, r
    assert not r.ok
    assert OUTPUT_CONVENTION in r.notes


@pytest.mark.parametrize("name", list(RFFT))
def test_second_order_through_a_complex_output(name):
    """order=2: the VJP of rfft(x³) for a fixed cotangent on the pairs, 3x² ⊙ (Jᵀc): diagonal."""
    rfft, array = RFFT[name]
    r = pg.check(lambda s: rfft(s**3), array(X8.astype(np.float64)), order=2)
    assert r.verdict == pg.Verdict.PASS and r.ok
    J = r.entries.reference.reshape(8, 8)
    np.testing.assert_allclose(J - np.diag(np.diag(J)), 0.0, atol=1e-9)
    assert np.all(np.abs(np.diag(J)) > 1e-3)


def test_mixed_real_and_complex_outputs_and_user_objects_unchanged():
    """A tuple (real, complex) output from a module method; the module is left as it was."""

    class Spectral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = torch.nn.Parameter(torch.tensor(2.0))

        def features(self, x):
            return (self.gain * x).sum(), torch.fft.rfft(self.gain * x)

    model = Spectral()
    x = torch.tensor(X8)
    r = pg.check(model.features, x)
    assert r.entries.names[:3] == ["f[0] / x[0]", "Re f[1][0] / x[0]", "Im f[1][0] / x[0]"]
    J = np.concatenate([np.full((1, 8), 2.0), 2.0 * rfft_jacobian(8)])
    assert_pass(r, entries(J))
    assert model.gain.dtype == torch.float32 and float(model.gain.detach()) == 2.0
    assert x.dtype == torch.float32 and np.array_equal(x.numpy(), X8)


def linear_then_rfft_jacobian(x: np.ndarray, weight_out_in: bool) -> np.ndarray:
    """rfft(W x + b), 8 outputs of the layer: ∂f_k/∂W[i, j] = F[k, i] x_j, ∂f_k/∂b_i = F[k, i]."""
    F = dft(8)[:5]
    dW = np.einsum("ki,j->kij", F, x.astype(np.float64))  # W[i, j]: output i, input j
    if not weight_out_in:  # Keras' kernel is (input, output)
        dW = dW.transpose(0, 2, 1)
    return pairs(np.concatenate([dW.reshape(5, -1), F], axis=1))


def test_parameters_of_a_torch_module_with_a_spectral_output():
    torch.manual_seed(0)

    class Spectral(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 8)

        def forward(self, x):
            return torch.fft.rfft(self.lin(x))

    model, x = Spectral(), torch.tensor([0.5, -1.0, 2.0])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = pg.check(model, x, wrt="parameters")
    assert r.entries.names[:2] == ["Re f[0] / lin.weight[0, 0]", "Im f[0] / lin.weight[0, 0]"]
    assert_pass(r, entries(linear_then_rfft_jacobian(x.numpy(), weight_out_in=True)))
    for k, v in model.state_dict().items():
        assert v.dtype == torch.float32 and torch.equal(v, before[k])


def test_parameters_of_a_keras_model_with_a_spectral_output():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8)])
    before = [np.array(w) for w in model.get_weights()]
    x = tf.constant([[0.5, -1.0, 2.0]])
    r = pg.check(lambda model, x: tf.signal.rfft(model(x)), model, x, wrt="parameters")
    J = linear_then_rfft_jacobian(x.numpy()[0], weight_out_in=False)
    assert_pass(r, entries(J))
    for w, b in zip(model.get_weights(), before, strict=True):
        assert w.dtype == np.float32 and np.array_equal(w, b)
