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
