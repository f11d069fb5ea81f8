"""Gradients defined on the symmetric subspace: detected, named and checked there.

Operators of a symmetric positive-definite matrix that read one triangle
(Cholesky, ``logdet`` through it, ``eigvalsh``) have a gradient that assumes a
symmetric input; the check then runs along ``E_ii`` and ``E_ij + E_ji`` and is
judged there. Expected values are closed forms along those directions:

* ``d logdet(X) = tr(X⁻¹ dX)``;
* ``dL = L Φ(L⁻¹ dX L⁻ᵀ)`` for ``X = L Lᵀ`` (``Φ``: the lower triangle, diagonal halved);
* ``dλ_k = v_kᵀ dX v_k`` for distinct eigenvalues ``λ_k`` with eigenvectors ``v_k``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
import torch

import polygrad as pg
from polygrad import Verdict
from polygrad.pipeline.subspace import SYMMETRIC_SUBSPACE

SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
WEIGHT = np.arange(1.0, 10.0).reshape(3, 3) / 10.0
COEF = np.array([1.0, 2.0, 3.0])
FULL = np.array([[1.5, -0.3, 0.7], [0.2, 2.0, -1.1], [0.9, 0.4, 1.2]])  # not symmetric


# ---- closed forms along the symmetric directions ----------------------------------------------
def sym_directions(n: int) -> list[tuple[int, int, np.ndarray]]:
    """``(i, j, D)``: ``D = E_ii`` or ``E_ij + E_ji`` (``i < j``), in the order polygrad uses."""
    out = []
    for i in range(n):
        for j in range(i, n):
            D = np.zeros((n, n))
            D[i, j] = D[j, i] = 1.0
            out.append((i, j, D))
    return out


def along(derivative, n: int = 3) -> np.ndarray:
    """The closed-form derivative along every symmetric direction."""
    return np.array([derivative(D) for _, _, D in sym_directions(n)])


def d_logdet(X: np.ndarray):
    Xinv = np.linalg.inv(X)
    return lambda D: float(np.trace(Xinv @ D))


def d_weighted_cholesky(X: np.ndarray, W: np.ndarray):
    L = np.linalg.cholesky(X)
    Linv = np.linalg.inv(L)

    def dd(D: np.ndarray) -> float:
        P = Linv @ D @ Linv.T
        phi = np.tril(P) - 0.5 * np.diag(np.diag(P))
        return float(np.sum((L @ phi) * W))

    return dd


def d_eigen_sum(X: np.ndarray, c: np.ndarray):
    lam, V = np.linalg.eigh(X)
    return lambda D: float(sum(2 * c[k] * lam[k] * V[:, k] @ D @ V[:, k] for k in range(len(c))))


def assert_on_subspace(report: pg.Report, expected: np.ndarray, rtol: float) -> None:
    """PASS and ok on the subspace, the convention named, the values the closed form's."""
    assert report.verdict == Verdict.PASS, report
    assert report.ok
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    assert any(n.startswith("checked on the symmetric subspace of x") for n in report.notes)
    assert report.entries.names[:2] == ["x[0, 0]", "x[0, 1] + x[1, 0]"]
    np.testing.assert_allclose(report.entries.reference, expected, rtol=rtol)
    np.testing.assert_allclose(report.entries.autodiff, expected, rtol=rtol)


def measured(report: pg.Report) -> dict:
    return report.details["subspace"]["measured"]["x"]


# ---- TensorFlow -------------------------------------------------------------------------------
def test_tf_cholesky_float64_checked_on_subspace():
    w = tf.constant(WEIGHT)

    def f(x):
        return tf.reduce_sum(tf.linalg.cholesky(x) * w)

    x = tf.constant(SPD)
    report = pg.check(f, x)
    assert_on_subspace(report, along(d_weighted_cholesky(SPD, WEIGHT)), 1e-10)
    assert measured(report) == {
        "reads_upper": False,
        "reads_lower": True,
        "gradient_symmetric": True,
    }
    note = next(n for n in report.notes if n.startswith("checked on the symmetric subspace"))
    assert "assumes a symmetric input (its Jacobian is symmetrized)" in note
    assert "f reads only the lower triangle of x" in note
    np.testing.assert_array_equal(x.numpy(), SPD)  # the user's value is untouched


def test_tf_cholesky_float32_checked_on_subspace():
    w = tf.constant(WEIGHT, tf.float32)
    x = tf.constant(SPD, tf.float32)
    report = pg.check(lambda x: tf.reduce_sum(tf.linalg.cholesky(x) * w), x)
    X = SPD.astype(np.float32).astype(np.float64)
    assert_on_subspace(report, along(d_weighted_cholesky(X, WEIGHT.astype(np.float32))), 1e-5)


@pytest.mark.parametrize("dtype", [tf.float64, tf.float32])
def test_tf_logdet_via_cholesky(dtype):
    @tf.function
    def logdet(x):
        return 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(tf.linalg.cholesky(x))))

    report = pg.check(logdet, tf.constant(SPD, dtype))
    assert_on_subspace(report, along(d_logdet(SPD)), 1e-9 if dtype == tf.float64 else 1e-5)


def test_tf_linalg_logdet():
    report = pg.check(tf.linalg.logdet, tf.constant(SPD))
    assert_on_subspace(report, along(d_logdet(SPD)), 1e-10)


def test_tf_cholesky_matrix_output_per_output_row():
    report = pg.check(tf.linalg.cholesky, tf.constant(SPD))
    assert report.verdict == Verdict.PASS and report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    assert len(report.entries.names) == 9 * 6  # every output along the 6 directions
    # ∂L/∂(E_01 + E_10) per output entry, from the closed form dL = L Φ(L⁻¹ D L⁻ᵀ)
    L = np.linalg.cholesky(SPD)
    D = sym_directions(3)[1][2]
    P = np.linalg.inv(L) @ D @ np.linalg.inv(L).T
    dL = L @ (np.tril(P) - 0.5 * np.diag(np.diag(P)))
    np.testing.assert_allclose(report.entries.autodiff[9:18], dL.ravel(), atol=1e-12)


def test_tf_eigvalsh_unaffected():
    """TensorFlow's eigvalsh gradient is the full-space one here: an ordinary PASS."""
    report = pg.check(lambda x: tf.reduce_sum(tf.linalg.eigvalsh(x) ** 2 * COEF), tf.constant(SPD))
    assert report.verdict == Verdict.PASS and report.ok, report
    assert "convention" not in report.details


def test_tf_custom_gradient_wrong_on_subspace_is_mismatch():
    @tf.custom_gradient
    def cholesky(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            L = tf.linalg.cholesky(x)

        def grad(dL):
            return tape.gradient(L, x, output_gradients=dL) * (1.0 + 1e-3)

        return L, grad

    w = tf.constant(WEIGHT)
    report = pg.check(lambda x: tf.reduce_sum(cholesky(x) * w), tf.constant(SPD))
    assert report.verdict == Verdict.MISMATCH, report
    assert not report.ok
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    expected = along(d_weighted_cholesky(SPD, WEIGHT))
    np.testing.assert_allclose(report.entries.reference, expected, rtol=1e-10)
    np.testing.assert_allclose(report.entries.autodiff, expected * (1 + 1e-3), rtol=1e-10)
    assert any("wrong on the subspace as well" in n for n in report.notes)


# ---- PyTorch ----------------------------------------------------------------------------------
def test_torch_cholesky_checked_on_subspace():
    w = torch.tensor(WEIGHT)

    def f(x):
        return (torch.linalg.cholesky(x) * w).sum()

    x = torch.tensor(SPD)
    report = pg.check(f, x)
    assert_on_subspace(report, along(d_weighted_cholesky(SPD, WEIGHT)), 1e-10)
    assert measured(report)["reads_upper"] is False
    np.testing.assert_array_equal(x.numpy(), SPD)
    assert x.grad is None


def test_torch_cholesky_forward_and_reverse():
    w = torch.tensor(WEIGHT)
    report = pg.check(
        lambda x: (torch.linalg.cholesky(x) * w).sum(), torch.tensor(SPD), mode="both"
    )
    assert report.verdict == Verdict.PASS and report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    expected = along(d_weighted_cholesky(SPD, WEIGHT))
    np.testing.assert_allclose(report.entries.autodiff, np.concatenate([expected] * 2), rtol=1e-10)


def test_torch_eigvalsh_checked_on_subspace():
    c = torch.tensor(COEF)

    class EigenLoss(torch.nn.Module):
        def forward(self, x):
            return (torch.linalg.eigvalsh(x) ** 2 * c).sum()

    report = pg.check(EigenLoss(), torch.tensor(SPD))
    assert_on_subspace(report, along(d_eigen_sum(SPD, COEF)), 1e-9)
    assert measured(report)["reads_upper"] is False


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
def test_float32_built_matrix_checked_in_float64_on_subspace(framework):
    """S = M Mᵀ + 5 I built in float32 (its product rounds (i, j) and (j, i) apart, so S
    is symmetric to float32 ulps only), then cast to float64 and checked there, as users
    write it: still the symmetric subspace's convention, PASS (it was MISMATCH, 5e11 times
    the float64 tolerance, while the same float32 check passed)."""
    M = np.random.default_rng(3).standard_normal((5, 5)).astype(np.float32)
    S32 = M @ M.T + 5 * np.eye(5, dtype=np.float32)
    S = S32.astype(np.float64)
    lower = np.tril(S) + np.tril(S, -1).T  # what the operators read
    c = np.array([0.5, -1.0, 2.0, 1.5, 1.0])
    if framework == "torch":
        report = pg.check(lambda x: (torch.linalg.eigvalsh(x) ** 2 * torch.tensor(c)).sum(),
                          torch.tensor(S))  # fmt: skip
    elif framework == "jax":
        with jax.enable_x64(True):
            report = pg.check(lambda x: (jnp.linalg.eigvalsh(x) ** 2 * c).sum(), jnp.asarray(S))
    else:
        report = pg.check(lambda x: tf.reduce_sum(tf.linalg.eigvalsh(x) ** 2 * c),
                          tf.constant(S))  # fmt: skip
    if "convention" not in report.details:  # a framework that symmetrizes inside
        assert report.verdict == Verdict.PASS and report.ok, report
        return
    expected = np.array([d_eigen_sum(lower, c)(D) for _, _, D in sym_directions(5)])
    assert_on_subspace(report, expected, 1e-7)


def test_torch_eigh_eigenvalues_checked_on_subspace():
    c = torch.tensor(COEF)
    report = pg.check(lambda x: (torch.linalg.eigh(x)[0] ** 2 * c).sum(), torch.tensor(SPD))
    assert_on_subspace(report, along(d_eigen_sum(SPD, COEF)), 1e-9)


def test_torch_batched_cholesky_logdet():
    batch = np.stack([SPD, SPD + np.eye(3)])
    report = pg.check(lambda x: torch.logdet(x).sum(), torch.tensor(batch))
    # torch.logdet reads the full matrix (LU): an ordinary PASS; through Cholesky, the subspace
    assert report.verdict == Verdict.PASS and "convention" not in report.details

    def logdet_chol(x):
        return 2 * torch.log(torch.diagonal(torch.linalg.cholesky(x), dim1=-2, dim2=-1)).sum()

    report = pg.check(logdet_chol, torch.tensor(batch))
    assert report.verdict == Verdict.PASS and report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    expected = np.concatenate([along(d_logdet(B)) for B in batch])
    np.testing.assert_allclose(report.entries.autodiff, expected, rtol=1e-10)
    assert report.entries.names[6] == "x[1, 0, 0]"


class _WrongCholesky(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        L = torch.linalg.cholesky(x)
        ctx.save_for_backward(x)
        return L

    @staticmethod
    def backward(ctx, dL):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            (g,) = torch.autograd.grad(torch.linalg.cholesky(xx), xx, dL)
        return g * (1 + 1e-3)


def test_torch_autograd_function_wrong_on_subspace_is_mismatch():
    w = torch.tensor(WEIGHT)
    report = pg.check(lambda x: (_WrongCholesky.apply(x) * w).sum(), torch.tensor(SPD))
    assert report.verdict == Verdict.MISMATCH and not report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    expected = along(d_weighted_cholesky(SPD, WEIGHT))
    np.testing.assert_allclose(report.entries.autodiff, expected * (1 + 1e-3), rtol=1e-10)


def test_torch_full_matrix_function_unaffected():
    """A non-symmetric input, a function of every entry: the ordinary check."""
    w = torch.tensor(WEIGHT)
    report = pg.check(lambda x: ((x @ x) * w).sum(), torch.tensor(FULL))
    assert report.verdict == Verdict.PASS and report.ok, report
    assert "convention" not in report.details
    assert report.quantity == "Jacobian entries"
    # ∂/∂X sum(W ∘ X X) = W Xᵀ + Xᵀ W
    np.testing.assert_allclose(
        report.entries.autodiff, (WEIGHT @ FULL.T + FULL.T @ WEIGHT).ravel(), rtol=1e-12
    )


def test_torch_wrong_rule_on_symmetric_input_not_explained():
    """A wrong rule of a function of every entry: MISMATCH on the full space, not excused."""

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x * x).sum()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x * (1 + 1e-3)

    report = pg.check(Scaled.apply, torch.tensor(SPD))
    assert report.verdict == Verdict.MISMATCH and not report.ok
    assert "convention" not in report.details
    assert report.quantity == "Jacobian entries"
    assert any("wrong on the subspace as well" in n for n in report.notes)


# ---- JAX --------------------------------------------------------------------------------------
def test_jax_scipy_cholesky_checked_on_subspace():
    with jax.enable_x64(True):
        w = jnp.asarray(WEIGHT)

        @jax.jit
        def f(x):
            return jnp.sum(jax.scipy.linalg.cholesky(x, lower=True) * w)

        report = pg.check(f, jnp.asarray(SPD))
    assert_on_subspace(report, along(d_weighted_cholesky(SPD, WEIGHT)), 1e-10)
    # JAX's rule is not symmetric, but right along every symmetric direction
    assert measured(report) == {
        "reads_upper": False,
        "reads_lower": True,
        "gradient_symmetric": False,
    }


def test_jax_scipy_cholesky_projections():
    """In a projections check, the random directions are made symmetric in x."""
    with jax.enable_x64(True):
        w = jnp.asarray(WEIGHT)
        report = pg.check(
            lambda x: jnp.sum(jax.scipy.linalg.cholesky(x, lower=True) * w),
            jnp.asarray(SPD),
            strategy="projections",
        )
    assert report.verdict == Verdict.PASS and report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    assert measured(report) is None
    assert "projections" not in report.details
    V = np.asarray(report.details["subspace"]["directions"])
    assert V.shape == (8, 9)
    D = V.reshape(8, 3, 3)
    np.testing.assert_array_equal(D, np.swapaxes(D, 1, 2))
    expected = np.array([d_weighted_cholesky(SPD, WEIGHT)(d) for d in D])
    np.testing.assert_allclose(report.entries.reference, expected, rtol=1e-10)
    np.testing.assert_allclose(report.entries.autodiff, expected, rtol=1e-10)


def test_torch_projections_wrong_on_subspace_is_mismatch():
    w = torch.tensor(WEIGHT)
    report = pg.check(
        lambda x: (_WrongCholesky.apply(x) * w).sum(), torch.tensor(SPD), strategy="projections"
    )
    assert report.verdict == Verdict.MISMATCH and not report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    D = np.asarray(report.details["subspace"]["directions"]).reshape(-1, 3, 3)
    expected = np.array([d_weighted_cholesky(SPD, WEIGHT)(d) for d in D])
    np.testing.assert_allclose(report.entries.autodiff, expected * (1 + 1e-3), rtol=1e-10)


@pytest.mark.parametrize(
    "fn, derivative",
    [
        (lambda x: jnp.sum(jnp.linalg.cholesky(x) * WEIGHT), d_weighted_cholesky(SPD, WEIGHT)),
        (lambda x: jnp.sum(jnp.linalg.eigvalsh(x) ** 2 * COEF), d_eigen_sum(SPD, COEF)),
        (lambda x: jnp.sum(jnp.linalg.eigh(x)[0] ** 2 * COEF), d_eigen_sum(SPD, COEF)),
    ],
    ids=["cholesky", "eigvalsh", "eigh"],
)
def test_jax_numpy_symmetrizes_inside(fn, derivative):
    """jnp.linalg symmetrizes its input: f reads both triangles, the full-space check passes."""
    with jax.enable_x64(True):
        report = pg.check(fn, jnp.asarray(SPD))
    assert report.verdict == Verdict.PASS and report.ok, report
    assert "convention" not in report.details
    G = report.entries.autodiff.reshape(3, 3)
    np.testing.assert_allclose(
        [G[i, j] + (G[j, i] if i != j else 0.0) for i, j, _ in sym_directions(3)],
        along(derivative),
        rtol=1e-9,
    )


def test_jax_custom_vjp_wrong_on_subspace_is_mismatch():
    with jax.enable_x64(True):

        @jax.custom_vjp
        def cholesky(x):
            return jax.scipy.linalg.cholesky(x, lower=True)

        def fwd(x):
            L, pullback = jax.vjp(lambda a: jax.scipy.linalg.cholesky(a, lower=True), x)
            return L, pullback

        def bwd(pullback, dL):
            (g,) = pullback(dL)
            return (g * (1 + 1e-3),)

        cholesky.defvjp(fwd, bwd)
        w = jnp.asarray(WEIGHT)
        report = pg.check(lambda x: jnp.sum(cholesky(x) * w), jnp.asarray(SPD))
    assert report.verdict == Verdict.MISMATCH and not report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    expected = along(d_weighted_cholesky(SPD, WEIGHT))
    np.testing.assert_allclose(report.entries.autodiff, expected * (1 + 1e-3), rtol=1e-10)


# ---- the convention needs a precondition ------------------------------------------------------
# sum(W ∘ X) has the Jacobian W; a rule returning Wᵀ is wrong on the full space, and right along
# every symmetric direction: (Wᵀ)_ii = W_ii, (Wᵀ)_ij + (Wᵀ)_ji = W_ij + W_ji. Nothing in f is
# defined on symmetric matrices, so only a declaration (symmetric=) may judge it there.
SYM = SPD - 0.5 * np.eye(3)  # symmetric, not special otherwise


def transposed_rule(framework: str, scale: float = 1.0):
    """``f(X) = sum(W ∘ X)`` whose custom rule returns ``scale · g · Wᵀ`` (W = WEIGHT)."""
    if framework == "torch":
        w = torch.tensor(WEIGHT)

        class F(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return (w * x).sum()

            @staticmethod
            def backward(ctx, g):
                return g * w.T * scale

        return F.apply, torch.tensor(SYM)
    if framework == "jax":
        w = jnp.asarray(WEIGHT)

        @jax.custom_vjp
        def f(x):
            return jnp.sum(w * x)

        f.defvjp(lambda x: (f(x), None), lambda _, g: (g * w.T * scale,))
        return f, jnp.asarray(SYM)
    w = tf.constant(WEIGHT)

    @tf.custom_gradient
    def g(x):
        return tf.reduce_sum(w * x), lambda dy: dy * tf.transpose(w) * scale

    return g, tf.constant(SYM)


FRAMEWORKS = ["torch", "jax", "tensorflow"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_transposed_rule_at_symmetric_input_is_mismatch(framework):
    with jax.enable_x64(True):
        f, x = transposed_rule(framework)
        report = pg.check(f, x)
    assert report.verdict == Verdict.MISMATCH, report
    assert not report.ok
    assert "convention" not in report.details
    assert report.quantity == "Jacobian entries"
    np.testing.assert_allclose(report.entries.autodiff, WEIGHT.T.ravel(), rtol=1e-12)
    np.testing.assert_allclose(report.entries.reference, WEIGHT.ravel(), rtol=1e-9)
    note = next(n for n in report.notes if "symmetric direction" in n)
    assert note.startswith("autodiff agrees with the reference along every symmetric direction")
    assert "no operation of f defined on symmetric matrices (Cholesky, eigh...) reads x" in note
    assert note.endswith("declare it: symmetric=0")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_transposed_rule_declared_symmetric_is_judged_on_subspace(framework):
    with jax.enable_x64(True):
        f, x = transposed_rule(framework)
        report = pg.check(f, x, symmetric=0)
    expected = along(lambda D: float(np.sum(WEIGHT * D)))  # W_ii, W_ij + W_ji
    assert_on_subspace(report, expected, 1e-9)
    assert report.details["subspace"]["precondition"] == {
        "x": "x is declared symmetric (symmetric=0)"
    }
    assert measured(report)["gradient_symmetric"] is False


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_declared_rule_wrong_on_subspace_is_mismatch(framework):
    """Declared symmetric, a rule 1e-3 off along symmetric directions too: MISMATCH there."""
    with jax.enable_x64(True):
        f, x = transposed_rule(framework, 1 + 1e-3)
        report = pg.check(f, x, symmetric=(0,))
    assert report.verdict == Verdict.MISMATCH and not report.ok, report
    assert report.details["convention"] == SYMMETRIC_SUBSPACE
    expected = along(lambda D: float(np.sum(WEIGHT * D)))
    np.testing.assert_allclose(report.entries.reference, expected, rtol=1e-9)
    np.testing.assert_allclose(report.entries.autodiff, expected * (1 + 1e-3), rtol=1e-12)


def test_numpy_transposed_rule_needs_declaration():
    """NumPy code is not captured: no operation is known, only the declaration applies."""
    report = pg.check(lambda x: np.sum(WEIGHT * x), SYM, grad=lambda x: WEIGHT.T)
    assert report.verdict == Verdict.MISMATCH and not report.ok, report
    assert any("f's program could not be captured" in n for n in report.notes)
    report = pg.check(lambda x: np.sum(WEIGHT * x), SYM, grad=lambda x: WEIGHT.T, symmetric=0)
    assert_on_subspace(report, along(lambda D: float(np.sum(WEIGHT * D))), 1e-9)


def test_operation_on_another_argument_does_not_excuse():
    """cholesky reads y only: the transposed rule on x stays a MISMATCH."""
    w = torch.tensor(WEIGHT)

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return (w * x).sum()

        @staticmethod
        def backward(ctx, g):
            return g * w.T

    def f(x, y):
        return F.apply(x) + torch.linalg.cholesky(y).sum()

    report = pg.check(f, torch.tensor(SYM), torch.tensor(SPD), argnums=(0, 1))
    assert report.verdict == Verdict.MISMATCH and not report.ok, report
    assert "convention" not in report.details
    assert any(n.endswith("declare it: symmetric=0") for n in report.notes)


def _symmetric_functions(framework: str) -> dict:
    """cholesky (weighted), eigenvalues (weighted squares) and logdet of an SPD matrix,
    through operations that read one triangle."""
    if framework == "torch":
        w, c = torch.tensor(WEIGHT), torch.tensor(COEF)
        return {
            "cholesky": lambda x: (torch.linalg.cholesky(x) * w).sum(),
            "eigh": lambda x: (torch.linalg.eigh(x)[0] ** 2 * c).sum(),
            "logdet": lambda x: 2 * torch.log(torch.diagonal(torch.linalg.cholesky(x))).sum(),
        }
    if framework == "jax":
        return {
            "cholesky": lambda x: jnp.sum(jax.scipy.linalg.cholesky(x, lower=True) * WEIGHT),
            "eigh": lambda x: jnp.sum(
                jax.lax.linalg.eigh(x, symmetrize_input=False)[1] ** 2 * COEF
            ),
            "logdet": lambda x: (
                2 * jnp.sum(jnp.log(jnp.diagonal(jax.scipy.linalg.cholesky(x, lower=True))))
            ),
        }
    w = tf.constant(WEIGHT)
    return {
        "cholesky": lambda x: tf.reduce_sum(tf.linalg.cholesky(x) * w),
        "eigh": lambda x: tf.reduce_sum(tf.linalg.eigh(x)[0] ** 2 * COEF),
        "logdet": tf.linalg.logdet,
    }


_OPERATION = {"torch": "linalg_cholesky_ex", "jax": "cholesky", "tensorflow": "Cholesky"}
_EIGEN = {"torch": "_linalg_eigh", "jax": "eigh", "tensorflow": "SelfAdjointEigV2"}


@pytest.mark.parametrize("name", ["cholesky", "eigh", "logdet"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_operations_on_symmetric_matrices_keep_the_convention(framework, name):
    """The operation found in f's program is the precondition, and the report names it."""
    expected = {
        "cholesky": along(d_weighted_cholesky(SPD, WEIGHT)),
        "eigh": along(d_eigen_sum(SPD, COEF)),
        "logdet": along(d_logdet(SPD)),
    }[name]
    with jax.enable_x64(True):
        f = _symmetric_functions(framework)[name]
        x = {"torch": torch.tensor, "jax": jnp.asarray, "tensorflow": tf.constant}[framework](SPD)
        report = pg.check(f, x)
    if framework == "tensorflow" and name == "eigh":  # its rule is the full-space one
        assert report.verdict == Verdict.PASS and report.ok, report
        assert "convention" not in report.details
        return
    assert_on_subspace(report, expected, 1e-9)
    op = (_EIGEN if name == "eigh" else _OPERATION)[framework]
    why = report.details["subspace"]["precondition"]["x"]
    assert why.startswith(f"f applies {op} to a value computed from x"), why
    note = next(n for n in report.notes if n.startswith("checked on the symmetric subspace"))
    assert f"because f applies {op}" in note


def test_symmetric_option_errors():
    x = torch.tensor(SYM)
    with pytest.raises(ValueError, match="not a checked argument"):
        pg.check(lambda a: (a * a).sum(), x, symmetric=1)
    with pytest.raises(pg.InputValueError, match="declares x symmetric, but it is not"):
        pg.check(lambda a: (a * a).sum(), torch.tensor(FULL), symmetric=0)
    with pytest.raises(ValueError, match="real square matrices"):
        pg.check(lambda a: (a * a).sum(), torch.ones(3, 2, dtype=torch.float64), symmetric=0)
    with pytest.raises(TypeError, match="positions of the arguments"):
        pg.check(lambda a: (a * a).sum(), x, symmetric="x")
