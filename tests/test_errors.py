"""Bad input gets a clear error (type and message), never a wrong verdict."""

from __future__ import annotations

import numpy as np
import pytest

import polygrad as pg
from polygrad.errors import (
    InputMutationError,
    InputTypeError,
    InputValueError,
    MissingBackendError,
    NondeterministicFunctionError,
    ShapeMismatchError,
)


def sq(x):
    return np.sum(x**2)


def test_integer_input():
    with pytest.raises(InputTypeError, match="integer dtype int64"):
        pg.check(sq, np.array([1, 2, 3]), grad=lambda x: 2 * x)
    assert issubclass(InputTypeError, TypeError)


def test_bool_input():
    with pytest.raises(InputTypeError, match="dtype bool"):
        pg.check(sq, np.array([True, False]), grad=lambda x: 2 * x)


def test_nan_input():
    with pytest.raises(InputValueError, match="NaN or Inf"):
        pg.check(sq, np.array([1.0, np.nan]), grad=lambda x: 2 * x)
    assert issubclass(InputValueError, ValueError)


def test_gradient_shape_mismatch():
    with pytest.raises(ShapeMismatchError, match=r"shape \(2,\) for x, whose shape is \(3,\)"):
        pg.check(sq, np.ones(3), grad=lambda x: np.ones(2))


def test_grad_for_vector_function():
    with pytest.raises(ShapeMismatchError, match="grad= needs a scalar function"):
        pg.check(lambda x: x**2, np.ones(3), grad=lambda x: 2 * x)


def test_random_function():
    rng = np.random.default_rng()

    def dropout(x):
        return np.sum(x * (rng.random(x.shape) > 0.5))

    with pytest.raises(NondeterministicFunctionError, match="not deterministic"):
        pg.check(dropout, np.linspace(1.0, 2.0, 50), grad=lambda x: np.ones_like(x))


def test_in_place_modification():
    def f(x):
        x *= 2
        return np.sum(x)

    with pytest.raises(InputMutationError, match="modified its input in place"):
        pg.check(f, np.ones(3), grad=lambda x: 2 * np.ones_like(x))


def test_no_derivative_for_numpy():
    with pytest.raises(TypeError, match="NumPy functions have no autodiff"):
        pg.check(sq, np.ones(3))


def test_two_derivatives_given():
    with pytest.raises(TypeError, match="only one of"):
        pg.check(sq, np.ones(3), grad=lambda x: 2 * x, vjp=lambda u, x: 2 * x * u)


def test_nonfinite_value_at_point():
    with pytest.raises(InputValueError, match="not finite"):
        pg.check(lambda x: np.sum(np.log(x)), np.array([1.0, -1.0]), grad=lambda x: 1 / x)


def test_bad_options():
    with pytest.raises(ValueError, match="mode="):
        pg.check(sq, np.ones(2), grad=lambda x: 2 * x, mode="sideways")
    with pytest.raises(ValueError, match="argnums=3"):
        pg.check(sq, np.ones(2), grad=lambda x: 2 * x, argnums=3)


def test_missing_framework_names_extra(monkeypatch):
    import importlib.util

    from polygrad.backends import get_backend

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(MissingBackendError, match=r"pip install 'polygrad-check\[torch\]'"):
        get_backend("torch")
    assert issubclass(MissingBackendError, ImportError)


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'mxnet'"):
        pg.check(sq, np.ones(2), grad=lambda x: 2 * x, backend="mxnet")


def test_argnums_out_of_range_in_sweep_and_taylor():
    with pytest.raises(ValueError, match="argnums=3"):
        pg.sweep(sq, np.ones(2), argnums=3)
    with pytest.raises(ValueError, match="argnums=3"):
        pg.taylor_test(sq, np.ones(2), grad=lambda x: 2 * x, argnums=3)


def test_argnums_must_be_positions():
    with pytest.raises(TypeError, match="argnums='x'.*position"):
        pg.check(sq, np.ones(2), grad=lambda x: 2 * x, argnums="x")
    with pytest.raises(TypeError, match="position"):
        pg.check(sq, np.ones(2), grad=lambda x: 2 * x, argnums=(0.5,))


# ---- raw framework errors and Python containers get polygrad's error types ------------------


@pytest.mark.polygrad_backends("jax")
@pytest.mark.parametrize("jit", [False, True])
def test_jax_function_returning_a_python_float(jit):
    import jax
    import jax.numpy as jnp

    def loss(x):
        return float(jnp.sum(jnp.sin(x)))  # cuts the result off from autodiff

    f = jax.jit(loss) if jit else loss
    with pytest.raises(InputTypeError, match=r"float\(\).*Return the JAX array itself") as info:
        pg.check(f, jnp.array([1.0, 2.0]))
    assert isinstance(info.value.__cause__, jax.errors.ConcretizationTypeError)


@pytest.mark.polygrad_backends("jax")
def test_jax_python_branch_on_a_traced_value():
    import jax.numpy as jnp

    def f(x):
        return jnp.sum(x**2) if float(x[0]) > 0 else jnp.sum(x)

    with pytest.raises(InputTypeError, match=r"jnp\.where or jax\.lax\.cond"):
        pg.check(f, jnp.array([1.0, 2.0]))


def _sine_sum(framework):
    """sum(sin(point)) written with ``framework``, and check's options for it."""
    if framework == "jax":
        import jax.numpy as jnp

        return (lambda point: jnp.sum(jnp.sin(jnp.asarray(point)))), {}
    if framework == "torch":
        import torch

        return (lambda point: torch.sum(torch.sin(torch.as_tensor(point)))), {}
    return (lambda point: np.sum(np.sin(point))), {"grad": np.cos}


@pytest.mark.parametrize(
    "framework",
    [
        "numpy",
        pytest.param("jax", marks=pytest.mark.polygrad_backends("jax")),
        pytest.param("torch", marks=pytest.mark.polygrad_backends("torch")),
    ],
)
@pytest.mark.parametrize("container", [list, tuple])
def test_python_list_of_numbers_as_input(framework, container):
    f, options = _sine_sum(framework)
    with pytest.raises(InputTypeError, match=r"argument point is a Python (list|tuple) of numbers"):
        pg.check(f, container([1.0, 2.0]), **options)
    with pytest.raises(InputTypeError, match=r"np\.asarray\(x\)"):
        pg.sweep(f, container([1.0, 2.0]), **options)


def test_list_of_arrays_is_still_a_pytree():
    def f(ws):
        return np.sum(ws[0] ** 2) + np.sum(np.sin(ws[1]))

    def grad(ws):
        return [2 * ws[0], np.cos(ws[1])]

    r = pg.check(f, [np.array([0.5, 1.0]), np.array([2.0])], grad=grad)
    assert r.verdict == pg.Verdict.PASS and r.ok
    assert r.details["input_names"] == ["ws[0]", "ws[1]"]


# ---- entry names: argument names and dict keys -----------------------------------------------


class _Affine:
    """A custom torch autograd Function, as users write them (ctx first)."""

    @staticmethod
    def build():
        import torch

        class Affine(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, weight, bias):
                ctx.save_for_backward(x, weight)
                return (x * weight + bias).sum()

            @staticmethod
            def backward(ctx, g):
                x, weight = ctx.saved_tensors
                return g * weight, g * x, g * torch.ones_like(x)

        return Affine


@pytest.mark.polygrad_backends("torch")
def test_autograd_function_entries_named_by_forward_arguments():
    import torch

    Affine = _Affine.build()
    x = torch.tensor([0.5, -1.0], dtype=torch.float64)
    w = torch.tensor([2.0, 3.0], dtype=torch.float64)
    b = torch.tensor([0.1, 0.2], dtype=torch.float64)
    r = pg.check(Affine.apply, x, w, b, argnums=(0, 1, 2))
    assert r.verdict == pg.Verdict.PASS and r.ok
    assert r.details["input_names"] == ["x", "weight", "bias"]
    assert r.entries.names == ["x[0]", "x[1]", "weight[0]", "weight[1]", "bias[0]", "bias[1]"]
    # the Jacobian [w, x, 1] in that order, independently of the names
    np.testing.assert_allclose(r.entries.autodiff, [2, 3, 0.5, -1, 1, 1])


@pytest.mark.polygrad_backends("torch")
def test_setup_context_style_function_and_methods_named_too():
    import torch

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(x, factor):  # new style: no ctx; setup_context saves what backward needs
            return (x * factor).sum()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, factor = ctx.saved_tensors
            return g * factor, g * x

    x = torch.tensor([1.5], dtype=torch.float64)
    r = pg.check(Scale.apply, x, torch.tensor([2.0], dtype=torch.float64), argnums=(0, 1))
    assert r.ok and r.details["input_names"] == ["x", "factor"]

    class Model:
        def loss(self, weights, inputs):
            return np.sum(weights * inputs**2)

    def grad(weights, inputs):
        return inputs**2, 2 * weights * inputs

    m = Model()
    r = pg.check(m.loss, np.array([1.0]), np.array([2.0]), argnums=(0, 1), grad=grad)
    assert r.ok and r.details["input_names"] == ["weights", "inputs"]


def test_one_of_several_arguments_is_named_by_its_parameter():
    """loss(weights, bias) checked in bias alone (argnums=1): the entries are bias[i], not
    x[i], which read as the other argument; a function of one argument keeps x."""

    def loss(weights, bias):
        return np.sum(np.tanh(2.0 * weights + bias))

    w, b = np.array([0.1, -0.3, 0.7]), np.array([0.2, 0.2, 0.2])
    wrong = pg.check(loss, w, b, argnums=1, grad=lambda w, b: 1.01 / np.cosh(2 * w + b) ** 2)
    assert wrong.verdict is pg.Verdict.MISMATCH and wrong.details["input_names"] == ["bias"]
    assert wrong.entries.names == ["bias[0]", "bias[1]", "bias[2]"]
    assert "bias[" in str(wrong).splitlines()[0]
    first = pg.check(loss, w, b, grad=lambda w, b: 2 / np.cosh(2 * w + b) ** 2)
    assert first.ok and first.details["input_names"] == ["weights"]
    alone = pg.check(lambda v: np.sum(np.sin(v)), w, grad=np.cos)
    assert alone.ok and alone.details["input_names"] == ["x"]


@pytest.mark.polygrad_backends("torch", "jax", "tensorflow", require="all")
@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
def test_dict_outputs_named_by_key(framework):
    import jax.numpy as jnp
    import tensorflow as tf
    import torch

    lib = {
        "torch": (torch, lambda v: torch.tensor(v, dtype=torch.float64)),
        "jax": (jnp, jnp.asarray),
        "tensorflow": (tf.math, lambda v: tf.constant(v, tf.float64)),
    }
    m, arr = lib[framework]
    total = {"torch": torch.sum, "jax": jnp.sum, "tensorflow": tf.reduce_sum}[framework]

    def losses(x):
        return {"loss": total(x**2), "reg": total(m.sin(x))}

    x0 = [0.5, -1.0]
    r = pg.check(losses, arr(x0))
    assert r.verdict == pg.Verdict.PASS and r.ok
    names = r.entries.names
    assert sorted(names) == sorted(
        [f"f['{k}'] / x[{j}]" for k in ("loss", "reg") for j in (0, 1)]
    ), names
    expected = {"loss": 2 * np.array(x0), "reg": np.cos(x0)}
    for name, value in zip(names, r.entries.reference, strict=True):
        key, j = name.split("'")[1], int(name[-2])
        np.testing.assert_allclose(value, expected[key][j], rtol=1e-7)


def test_a_gradient_given_as_a_list_is_named_a_list():
    """grad= returning list(2 * x) for an array x: the error names the list and its length,
    not the shape () of its first number."""
    with pytest.raises(ShapeMismatchError, match=r"returned a list of 3 numbers for x"):
        pg.check(lambda x: np.sum(x**2), np.ones(3), grad=lambda x: list(2 * x))
