"""Points drawn from a fixed seed to include the hard regions of a function.

A region is a rule that draws float64 values; the case casts them to its working
dtype (and the float64 reference uses the rounded values, so both see one point).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["FUNCTION_REGIONS", "MODULE_REGIONS", "draw"]

Draw = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def _signs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.where(rng.random(shape) < 0.5, -1.0, 1.0)


def _moderate(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(-3.0, 3.0, shape)


def _positive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.05, 5.0, shape)


def _unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.02, 0.98, shape)


def _tail(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return _signs(rng, shape) * rng.uniform(6.0, 40.0, shape)


def _tiny(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return _signs(rng, shape) * 10.0 ** rng.uniform(-30.0, -3.0, shape)


def _large(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return _signs(rng, shape) * 10.0 ** rng.uniform(2.0, 4.5, shape)


def _zeros(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Exact zeros and integers among moderate values (kinks, poles, ``0 * log 0``)."""
    x = np.round(rng.uniform(-3.0, 3.0, shape) * 2.0) / 2.0
    return np.where(rng.random(shape) < 0.5, 0.0, x)


def _near_tie(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    c = rng.uniform(-2.0, 2.0)
    return c + 1e-3 * rng.standard_normal(shape)


def _normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape)


def _saturating(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return 30.0 * rng.standard_normal(shape)


def _small(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return 1e-4 * rng.standard_normal(shape)


FUNCTION_REGIONS: dict[str, Draw] = {
    "moderate": _moderate,
    "positive": _positive,
    "unit": _unit,
    "tail": _tail,
    "tiny": _tiny,
    "large": _large,
    "zeros": _zeros,
    "near-tie": _near_tie,
}
"""Regions for elementwise and special functions (scalar domains)."""

MODULE_REGIONS: dict[str, Draw] = {
    "moderate": _normal,
    "saturating": _saturating,
    "tiny": _small,
    "near-tie": _near_tie,
}
"""Regions for layers and modules (inputs of a sample shape)."""


def draw(region: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Draw a float64 point of ``shape`` from ``region``.

    Parameters
    ----------
    region : str
        A key of :data:`FUNCTION_REGIONS` or :data:`MODULE_REGIONS`.
    shape : tuple of int
        Shape of the point.
    seed : int
        Seed of the generator (fixed per case, so runs are reproducible).

    Returns
    -------
    numpy.ndarray
        float64 values of ``shape``.

    Raises
    ------
    KeyError
        Unknown region.
    """
    rule = {**FUNCTION_REGIONS, **MODULE_REGIONS}[region]
    return np.asarray(rule(np.random.default_rng(seed), shape), dtype=np.float64)
