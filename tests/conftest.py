"""Shared test helpers: the digit-recognition CNN of USERS.md case 2, in each framework,
and the garbage a check leaves to the cyclic collector.

Nothing here imports a framework at import time (each per-framework nox
session installs only its own); the builders import theirs when called.
Test modules import the builders by name (``from conftest import ...``),
because some tests keep the model in a module-level global, as users do.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


def digit_8x8() -> tuple[np.ndarray, int]:
    """The first 8x8 digit of scikit-learn's digits data set, scaled to [0, 1], and its label."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images[0] / 16.0, int(digits.target[0])


def torch_digit(side: int = 28) -> tuple[Any, Any]:
    """The digit upsampled (bilinear) to a ``(1, 1, side, side)`` float32 tensor in [0, 1].

    Returns
    -------
    image : torch.Tensor, shape (1, 1, side, side), float32
    label : torch.Tensor, shape (1,), int64
    """
    import torch
    import torch.nn.functional as F

    image, label = digit_8x8()
    img = torch.tensor(image, dtype=torch.float32)[None, None]
    img = F.interpolate(img, size=(side, side), mode="bilinear", align_corners=False)
    return img.clamp(0, 1), torch.tensor([label])


def torch_case2_cnn(side: int = 28) -> Any:
    """USERS.md case 2 in PyTorch (seeded, eval mode, float32) for ``side x side`` images.

    Conv2d(32, 3x3) -> ReLU -> MaxPool 2 -> Conv2d(64, 3x3) -> ReLU -> MaxPool 2 ->
    Flatten -> Dropout(0.5) -> Linear(10); the loss supplies the softmax.
    """
    import torch
    from torch import nn

    torch.manual_seed(0)
    k = ((side - 2) // 2 - 2) // 2
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(64 * k * k, 10),
    ).eval()


def keras_digit() -> tuple[np.ndarray, int]:
    """The digit resized by ``tf.image.resize`` (bilinear) to ``(1, 28, 28, 1)`` float32, label."""
    import tensorflow as tf

    image, label = digit_8x8()
    big = tf.image.resize(image[None, :, :, None], (28, 28), method="bilinear")
    return np.clip(big.numpy(), 0.0, 1.0).astype(np.float32), label


def keras_case2_cnn() -> Any:
    """The Keras CNN of USERS.md case 2 with seeded random weights.

    Biases are small random numbers, as after training: with Keras' default zero
    biases every blank pixel sits exactly on a ReLU kink.
    """
    import keras

    keras.utils.set_random_seed(1)
    bias = {"bias_initializer": keras.initializers.RandomNormal(stddev=0.05)}
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu", **bias),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu", **bias),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax", **bias),
        ]
    )


def torch_planted_tanh(rel: float) -> Any:
    """A ``torch.autograd.Function`` computing tanh whose backward is off by ``1 + rel``."""
    import torch

    class PlantedTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (y,) = ctx.saved_tensors
            return g * (1 - y * y) * (1 + rel)

    return PlantedTanh


def cyclic_garbage_after(run: Callable[[], Any]) -> list[object]:
    """The objects that only the cyclic garbage collector would free after ``run()``
    (held in reference cycles: a check's wide arrays there stay in memory until the
    collector happens to run)."""
    gc.collect()
    gc.disable()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.fixture
def without_quad(monkeypatch):
    """numpy-quaddtype out of the way: the reference tiers where it is not installed (mp,
    then float64 differences), as on a platform without its wheel or with numpy < 2.4."""
    from polygrad.backends import _quad_eval
    from polygrad.reference import quad

    monkeypatch.setattr(quad, "quad_dtype", lambda: None)
    monkeypatch.setattr(_quad_eval, "quad_dtype", lambda: None)


def mlp_loss_grad_mp(
    w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, x: np.ndarray, target: int = 3
) -> list[Any]:
    """The gradient of ``log_softmax(w2 @ tanh(w1 @ x + b1))[target]`` with respect to
    ``x``, in closed form at 50 digits (mpmath): the scalar loss the quad tier's tests
    check in every framework."""
    import mpmath

    mpmath.mp.dps = 50
    hidden, n = w1.shape
    h = [mpmath.tanh(mpmath.fsum(mpmath.mpf(w1[i, j]) * mpmath.mpf(x[j]) for j in range(n))
                     + mpmath.mpf(b1[i])) for i in range(hidden)]  # fmt: skip
    z = [mpmath.fsum(mpmath.mpf(w2[k, i]) * h[i] for i in range(hidden))
         for k in range(w2.shape[0])]  # fmt: skip
    s = mpmath.fsum(mpmath.exp(v) for v in z)
    e = [(1 if k == target else 0) - mpmath.exp(z[k]) / s for k in range(len(z))]
    g = [mpmath.fsum(mpmath.mpf(w2[k, i]) * e[k] for k in range(len(z))) * (1 - h[i] ** 2)
         for i in range(hidden)]  # fmt: skip
    return [mpmath.fsum(g[i] * mpmath.mpf(w1[i, j]) for i in range(hidden)) for j in range(n)]
