"""Complex inputs: each framework's convention measured, conversion rules, check() on complex."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
import torch

import polygrad as pg
from polygrad.backends import get_backend
from polygrad.backends.base import Supplied
from polygrad.complex import (
    CONJUGATE_WIRTINGER,
    CONVENTIONS,
    WIRTINGER,
    from_polygrad,
    to_polygrad,
)

Z_GENERAL = 0.4 - 1.3j
U_GENERAL = 0.3 - 0.7j
V_GENERAL = 0.2 + 0.5j


def general_np(z):
    """A non-holomorphic complex function: z conj(z)² + 2z."""
    return z * np.conj(z) ** 2 + 2 * z


def real_jacobian(f, z, h=1e-6):
    """2x2 Jacobian of (a, b) -> (Re f, Im f) by central differences (error ~1e-10)."""
    cols = []
    for dz in (h, 1j * h):
        d = (f(z + dz) - f(z - dz)) / (2 * h)
        cols.append([d.real, d.imag])
    return np.array(cols).T


def polygrad_vjp(f, z, u):
    """polygrad's convention: (u_re, u_im) @ J packed as a + i b."""
    g = np.array([u.real, u.imag]) @ real_jacobian(f, z)
    return g[0] + 1j * g[1]


# ---- each framework's native VJP ----------------------------------------------------------
def torch_vjp(fn, z, u):
    zt = torch.tensor(z, dtype=torch.complex128, requires_grad=True)
    out = fn(zt)
    cot = torch.tensor(u, dtype=out.dtype)
    return complex(torch.autograd.grad(out, zt, cot)[0])


def jax_vjp(fn, z, u):
    with jax.enable_x64(True):
        out, pull = jax.vjp(fn, jnp.complex128(z))
        return complex(pull(jnp.asarray(u, dtype=out.dtype))[0])


def tf_vjp(fn, z, u):
    zt = tf.constant(z, tf.complex128)
    with tf.GradientTape() as tape:
        tape.watch(zt)
        out = fn(zt)
    return complex(tape.gradient(out, zt, output_gradients=tf.constant(u, out.dtype)).numpy())


FRAMEWORKS = {
    # name: (native vjp, |z|², z², general f, convention of its backend)
    "torch": (
        torch_vjp,
        lambda z: (z * z.conj()).real,
        lambda z: z * z,
        lambda z: z * z.conj() ** 2 + 2 * z,
    ),
    "jax": (
        jax_vjp,
        lambda z: jnp.abs(z) ** 2,
        lambda z: z * z,
        lambda z: z * jnp.conj(z) ** 2 + 2 * z,
    ),
    "tensorflow": (
        tf_vjp,
        lambda z: tf.math.real(z * tf.math.conj(z)),
        lambda z: z * z,
        lambda z: z * tf.math.conj(z) ** 2 + 2 * z,
    ),
}


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_measured_conventions_match_the_table(name):
    """The values in the issue and the docs, and the conversion rule, for each framework."""
    vjp, abs2, square, general = FRAMEWORKS[name]
    conv = get_backend(name).complex_convention
    expected_conv = WIRTINGER if name == "jax" else CONJUGATE_WIRTINGER
    assert conv == expected_conv and conv in CONVENTIONS
    g_abs2 = vjp(abs2, 3 + 4j, 1.0)
    g_square = vjp(square, 0.1j, 1 + 0j)
    if conv == WIRTINGER:
        assert g_abs2 == pytest.approx(6 - 8j) and g_square == pytest.approx(0.2j)
    else:
        assert g_abs2 == pytest.approx(6 + 8j) and g_square == pytest.approx(-0.2j)
    # polygrad's values: 6+8j and -0.2j, after conversion
    assert to_polygrad(g_abs2, conv) == pytest.approx(6 + 8j)
    assert to_polygrad(vjp(square, 0.1j, complex(from_polygrad(1 + 0j, conv))), conv) == (
        pytest.approx(-0.2j)
    )
    # a non-holomorphic function and a general cotangent: the rule holds, not only for u = 1
    native = vjp(general, Z_GENERAL, complex(from_polygrad(U_GENERAL, conv)))
    expected = polygrad_vjp(general_np, Z_GENERAL, U_GENERAL)
    assert complex(to_polygrad(native, conv)) == pytest.approx(expected, abs=1e-8)
    assert expected == pytest.approx(0.523 + 1.949j, abs=1e-8)  # worked out by hand


def test_jvps_agree_with_polygrad_in_every_framework():
    J = real_jacobian(general_np, Z_GENERAL)
    jv = J @ np.array([V_GENERAL.real, V_GENERAL.imag])
    expected = jv[0] + 1j * jv[1]
    assert expected == pytest.approx(0.314 - 1.407j, abs=1e-8)
    with jax.enable_x64(True):
        j = jax.jvp(
            FRAMEWORKS["jax"][3], (jnp.complex128(Z_GENERAL),), (jnp.complex128(V_GENERAL),)
        )
    t = torch.func.jvp(
        FRAMEWORKS["torch"][3],
        (torch.tensor(Z_GENERAL, dtype=torch.complex128),),
        (torch.tensor(V_GENERAL, dtype=torch.complex128),),
    )
    x = tf.constant(Z_GENERAL, tf.complex128)
    with tf.autodiff.ForwardAccumulator(x, tf.constant(V_GENERAL, tf.complex128)) as acc:
        y = FRAMEWORKS["tensorflow"][3](x)
    for value in (j[1], t[1], acc.jvp(y)):
        assert complex(np.asarray(value)) == pytest.approx(expected, abs=1e-8)


def test_conversion_functions():
    g = np.array([1 + 2j, -3j])
    np.testing.assert_array_equal(to_polygrad(g, CONJUGATE_WIRTINGER), g)
    np.testing.assert_array_equal(to_polygrad(g, WIRTINGER), np.conj(g))
    np.testing.assert_array_equal(from_polygrad(to_polygrad(g, WIRTINGER), WIRTINGER), g)
    with pytest.raises(ValueError, match="unknown complex convention"):
        to_polygrad(g, "holomorphic")


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_backend_native_vjp_is_the_framework_vjp(name):
    vjp, _, _, general = FRAMEWORKS[name]
    be = get_backend(name)
    z = be.from_numpy(np.array([Z_GENERAL]))
    (got,) = be.native_vjp(general, (z,), (0,), np.array([U_GENERAL]))
    assert complex(got[0]) == pytest.approx(vjp(general, Z_GENERAL, U_GENERAL), abs=1e-12)


# ---- check() on complex inputs, every backend ---------------------------------------------
Z = np.array([3 + 4j, -0.5 + 0.25j, 1.5j])


def general_jacobian_entries(z):
    """Expected reference of check() for general f, elementwise: per element a 2x2 block."""
    return [real_jacobian(general_np, zi) for zi in z]


@pytest.mark.parametrize("name", list(FRAMEWORKS))
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_check_complex_in_every_framework(name, dtype):
    _, abs2, _, general = FRAMEWORKS[name]
    be = get_backend(name)
    z = be.from_numpy(Z.astype(dtype))
    sum_abs2 = {
        "torch": lambda z: torch.sum(abs2(z)),
        "jax": lambda z: jnp.sum(abs2(z)),
        "tensorflow": lambda z: tf.reduce_sum(abs2(z)),
    }[name]
    r = pg.check(sum_abs2, z)
    assert r.verdict == pg.Verdict.PASS
    assert r.details["working_dtype"] == ("float32" if dtype == np.complex64 else "float64")
    zw = Z.astype(dtype).astype(np.complex128)
    expected = np.stack([2 * zw.real, 2 * zw.imag], axis=-1).ravel()  # 2z in (re, im) pairs
    np.testing.assert_allclose(r.entries.reference, expected, rtol=1e-10)
    np.testing.assert_allclose(r.entries.autodiff, expected, rtol=1e-6)
    assert r.entries.names[:2] == ["Re x[0]", "Im x[0]"]  # flat x[0, 0] and x[0, 1]
    assert any("complex input(s) x" in n for n in r.notes)

    r = pg.check(general, z)  # complex output: the real 6x6 Jacobian (block diagonal)
    assert r.verdict == pg.Verdict.PASS
    assert r.entries.names[1] == "Im f[0] / Re x[0]"  # flat f[0, 1] / x[0, 0]
    assert any("complex output checked as (real, imag) pairs" in n for n in r.notes)
    blocks = general_jacobian_entries(zw)
    J = np.zeros((6, 6))
    for k, blk in enumerate(blocks):
        J[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = blk
    np.testing.assert_allclose(r.entries.reference, J.T.ravel(), atol=1e-7)


def test_wrong_complex_rules_are_mismatches_in_their_own_framework():
    """A rule written in the other framework's convention is a bug in this one."""

    @jax.custom_vjp
    def square_jax(z):
        return z * z

    square_jax.defvjp(lambda z: (z * z, z), lambda z, g: (g * jnp.conj(2 * z),))  # torch's rule
    z = jnp.array([0.1j, 1.0 - 2.0j], dtype=jnp.complex64)
    assert pg.check(square_jax, z).verdict == pg.Verdict.MISMATCH
    square_jax_ok = jax.custom_vjp(lambda z: z * z)
    square_jax_ok.defvjp(lambda z: (z * z, z), lambda z, g: (g * 2 * z,))
    assert pg.check(square_jax_ok, z).verdict == pg.Verdict.PASS

    class Square(torch.autograd.Function):
        conjugate = True

        @staticmethod
        def forward(z):
            return z * z

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (z,) = ctx.saved_tensors
            d = 2 * z
            return g * (d.conj() if Square.conjugate else d)

    zt = torch.tensor([0.1j, 1.0 - 2.0j], dtype=torch.complex128)
    assert pg.check(Square.apply, zt).verdict == pg.Verdict.PASS
    Square.conjugate = False  # JAX's rule in torch
    assert pg.check(Square.apply, zt).verdict == pg.Verdict.MISMATCH


def test_numpy_supplied_derivatives_in_polygrad_convention():
    def f(z):
        return np.sum(np.abs(z) ** 2)

    assert pg.check(f, Z, grad=lambda z: 2 * z).verdict == pg.Verdict.PASS
    assert pg.check(f, Z, grad=lambda z: 2 * np.conj(z)).verdict == pg.Verdict.MISMATCH

    def vjp(u, z):  # polygrad's VJP of z conj(z)² + 2z, written out
        return u * np.conj(np.conj(z) ** 2 + 2) + np.conj(u) * 2 * z * np.conj(z)

    def jvp(t, z):
        (dz,) = t
        return dz * (np.conj(z) ** 2 + 2) + 2 * z * np.conj(z) * np.conj(dz)

    r = pg.check(general_np, Z, vjp=vjp)
    assert r.verdict == pg.Verdict.PASS, r
    assert pg.check(general_np, Z, jvp=jvp).verdict == pg.Verdict.PASS
    assert pg.check(general_np, Z, jvp=lambda t, z: 2 * t[0]).verdict == pg.Verdict.MISMATCH
    assert pg.check(general_np, Z.astype(np.complex64), vjp=vjp).details["working_dtype"] == (
        "float32"
    )
    with pytest.raises(pg.InputTypeError, match="jac= is not defined for complex"):
        pg.check(general_np, Z, jac=lambda z: np.diag(2 * z))


def test_mixed_real_and_complex_arguments():
    w = np.array([0.5, -2.0])

    def f(w, z):
        return np.sum(w * np.abs(z) ** 2)

    def grad(w, z):
        return np.abs(z) ** 2, 2 * w * z

    z = np.array([1 + 1j, 0.5j])
    r = pg.check(f, w, z, argnums=(0, 1), grad=grad)
    assert r.verdict == pg.Verdict.PASS
    assert r.details["input_names"] == ["w", "z"]  # f's argument names
    assert r.details["inputs"] == 2 + 4
    # a complex argument that is not checked is passed through unchanged
    r = pg.check(
        lambda x, c: np.sum(np.real(c * x)), np.array([1.0, 2.0]), z, grad=lambda x, c: c.real
    )
    assert r.verdict == pg.Verdict.PASS


def test_bad_complex_inputs_still_error():
    with pytest.raises(pg.InputValueError, match="imaginary part"):
        pg.check(lambda z: np.sum(np.abs(z)), np.array([complex(1.0, np.nan)]), grad=lambda z: z)
    with pytest.raises(pg.InputTypeError, match="integer"):
        pg.check(lambda x: np.sum(x), np.array([1, 2]), grad=lambda x: x)
    with pytest.raises(pg.InputTypeError, match="bool"):
        pg.check(lambda x: np.sum(x), np.array([True]), grad=lambda x: x)
    with pytest.raises(ValueError, match="order=2"):
        pg.check(lambda z: torch.sum(torch.abs(z) ** 2), torch.tensor([1j]), order=2)
    # a backend on its own sees only real inputs, and says where complex ones are handled
    be = get_backend("torch")
    with pytest.raises(pg.InputTypeError, match="realify"):
        be.make_target(lambda z: z.abs().sum(), (torch.tensor([1j]),), (0,), Supplied(), 64)
