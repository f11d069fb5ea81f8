"""hypothesis strategies for property-based gradient tests.

* :func:`points` — NumPy arrays of finite values whose magnitudes spread
  evenly over many binades (from tiny to huge), optionally kept away from
  the kinks of a non-smooth function;
* :func:`directions` — unit-norm arrays, to use as tangents (JVP) or
  cotangents (VJP).

Needs ``hypothesis`` (``pip install "polygrad-check[test]"``); importing
:mod:`polygrad.testing` does not.

Recipe: property-based test of a custom gradient
------------------------------------------------
A softplus with a hand-written gradient, checked at many points of many
scales with :func:`polygrad.assert_gradients`::

    import numpy as np
    from hypothesis import given, settings

    import polygrad as pg
    from polygrad.testing.strategies import points


    def softplus(x):
        # log(1 + e^x) without overflow: two branches
        return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0))))


    def softplus_grad(x):  # the logistic sigmoid, one stable branch per sign
        e = np.exp(-np.abs(x))
        return np.where(x > 0, 1 / (1 + e), e / (1 + e))


    @settings(max_examples=25, deadline=None)
    @given(points(5, dtype="float64", min_magnitude=1e-3, max_magnitude=30.0))
    def test_softplus_gradient(x):
        pg.assert_gradients(lambda x: np.sum(softplus(x)), x, grad=softplus_grad)

A bug on one branch only (say ``e / (1 - e)`` for ``x <= 0``) passes a check
at one hand-picked positive point; hypothesis draws points of both signs and
reports a failing one, and the failure message is polygrad's report with
the entries that disagree. ``deadline=None`` because a check takes a
variable tenth of a second or so; keep ``max_examples`` small for the same
reason. When a test fails, hypothesis shrinks the failing point, which runs
many more checks (a minute for the example above); add
``phases=(Phase.explicit, Phase.reuse, Phase.generate)`` to the settings to
report the first failing point instead.

:func:`directions` gives tangents for a directional-derivative (JVP) check:
``d/dt f(x + t v)`` at ``t = 0`` is ``grad f(x) · v``::

    @settings(max_examples=25, deadline=None)
    @given(points(5, "float64", max_magnitude=30.0), directions(5))
    def test_softplus_jvp(x, v):
        pg.assert_gradients(
            lambda t: np.sum(softplus(x + t[0] * v)),
            np.zeros(1),
            grad=lambda t: np.array([softplus_grad(x + t[0] * v) @ v]),
        )

For a non-smooth function, keep the points away from its kinks, e.g.
``points(4, avoid=(0.0, 1.0), min_distance=1e-2)`` for a function with kinks
at 0 and 1 (a point exactly at a kink is a ``NONSMOOTH`` verdict, which is
right, but is not what a test of the smooth pieces wants).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .._install import pip_install
from ..errors import MissingBackendError

try:
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingBackendError(
        "polygrad.testing.strategies needs hypothesis, which is not installed; install it "
        "with: " + pip_install("test", quote='"')
    ) from exc

__all__ = ["directions", "points"]

_FLOAT_DTYPES = ("float16", "float32", "float64")


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    out = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if any(s < 0 for s in out):
        raise ValueError(f"shape {shape!r} has a negative size")
    return out


def _float_dtype(dtype: str | np.dtype | type) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.name not in _FLOAT_DTYPES:
        raise ValueError(
            f"dtype {dt.name!r}: points and directions are {', '.join(_FLOAT_DTYPES)} arrays "
            "(convert them with polygrad.testing.to_backend for bfloat16 or a framework)"
        )
    return dt


def points(
    shape: int | Sequence[int],
    dtype: str | np.dtype | type = "float32",
    min_magnitude: float | None = None,
    max_magnitude: float | None = None,
    avoid: Sequence[float] = (),
    min_distance: float = 1e-3,
) -> st.SearchStrategy[np.ndarray]:
    """Arrays of finite, nonzero values with magnitudes spread over many binades.

    Each entry is ``±m`` with ``log2(m)`` uniform on
    ``[log2(min_magnitude), log2(max_magnitude)]``, so every binade is as
    likely as any other (a uniform draw on ``[-1e6, 1e6]`` would almost never
    give a value below 1). Shrinking moves entries towards magnitude 1 (or the
    nearest end of the range).

    Parameters
    ----------
    shape : int or sequence of int
        Shape of the arrays.
    dtype : {"float16", "float32", "float64"}
        dtype of the arrays; every value is exactly representable in it.
    min_magnitude, max_magnitude : float, optional
        Range of ``|x|``. Defaults: ``max(eps**2, sqrt(tiny))`` and
        ``min(eps**-2, sqrt(max))`` of the dtype — about 1.4e-14 to 7.0e13 for
        float32, 4.9e-32 to 2.0e31 for float64, 7.8e-3 to 256 for float16 —
        so that squares neither underflow nor overflow.
    avoid : sequence of float
        Kinks (points of non-differentiability) to keep away from.
    min_distance : float
        Smallest allowed ``|x - k|`` for every ``k`` in ``avoid``. Entries
        closer than that are moved away from the kink, to distance
        ``min_distance`` on the side they were drawn on.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of numpy.ndarray
        Arrays of ``shape`` and ``dtype``, all entries finite and nonzero.

    Raises
    ------
    ValueError
        A non-floating dtype, ``min_magnitude`` not positive or not below
        ``max_magnitude``, a magnitude outside the dtype's finite range, or a
        negative ``min_distance``.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=5, deadline=None)
    ... @given(points((2, 3), "float32", min_magnitude=1e-3, max_magnitude=1e3))
    ... def test(x):
    ...     assert x.shape == (2, 3) and x.dtype == np.float32
    ...     assert np.all((np.abs(x) >= 1e-3) & (np.abs(x) <= 1e3))
    >>> test()
    """
    shp = _shape(shape)
    dt = _float_dtype(dtype)
    info = np.finfo(dt)
    eps = float(info.eps)
    tiny, huge = float(info.tiny), float(info.max)
    lo = max(eps**2, math.sqrt(tiny)) if min_magnitude is None else float(min_magnitude)
    hi = min(eps**-2, math.sqrt(huge)) if max_magnitude is None else float(max_magnitude)
    if not (0 < lo < hi):
        raise ValueError(
            f"need 0 < min_magnitude < max_magnitude, got min_magnitude={lo}, max_magnitude={hi}"
        )
    if lo < tiny or hi > huge:
        raise ValueError(
            f"magnitudes [{lo:g}, {hi:g}] leave the normal range of {dt.name} [{tiny:g}, {huge:g}]"
        )
    if min_distance < 0 or not math.isfinite(min_distance):
        raise ValueError(f"min_distance={min_distance}: must be finite and >= 0")
    kinks = tuple(float(k) for k in avoid)
    log_lo, log_hi = math.log2(lo), math.log2(hi)
    centre = min(max(0.0, log_lo), log_hi)  # shrink towards magnitude 1

    def build(sign: bool, offset: float) -> float:
        e = min(max(centre + offset, log_lo), log_hi)
        value = dt.type((-1.0 if sign else 1.0) * 2.0**e)  # rounded to the dtype
        for k in kinks:
            if abs(float(value) - k) < min_distance:
                side = math.copysign(1.0, float(value) - k) if float(value) != k else 1.0
                value = dt.type(k + side * min_distance)
                while abs(float(value) - k) < min_distance:  # rounding moved it closer
                    value = np.nextafter(value, dt.type(side * np.inf))
        return float(value)

    def allowed(value: float) -> bool:
        return (
            value != 0.0
            and lo <= abs(value) <= hi
            and all(abs(value - k) >= min_distance for k in kinks)
        )

    elements = st.builds(
        build,
        st.booleans(),
        st.floats(log_lo - centre, log_hi - centre, allow_nan=False, allow_infinity=False),
    ).filter(allowed)
    return hnp.arrays(dt, shp, elements=elements, fill=st.nothing())


def directions(
    shape: int | Sequence[int], dtype: str | np.dtype | type = "float64"
) -> st.SearchStrategy[np.ndarray]:
    """Unit-norm arrays: tangents for a JVP, cotangents for a VJP.

    Entries are drawn on ``[-1, 1]`` and the array is divided by its 2-norm in
    float64, then rounded to ``dtype``; arrays of norm below ``1e-3`` before
    the division are redrawn.

    Parameters
    ----------
    shape : int or sequence of int
        Shape of the arrays (at least one entry).
    dtype : {"float16", "float32", "float64"}
        dtype of the arrays.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of numpy.ndarray
        Arrays ``v`` of ``shape`` and ``dtype`` with
        ``abs(norm(v) - 1) <= sqrt(size) * eps`` of the dtype.

    Raises
    ------
    ValueError
        A non-floating dtype, or a shape with no entries.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=5, deadline=None)
    ... @given(directions(4))
    ... def test(v):
    ...     assert abs(np.linalg.norm(v) - 1) < 1e-12
    >>> test()
    """
    shp = _shape(shape)
    dt = _float_dtype(dtype)
    if math.prod(shp) == 0:
        raise ValueError(f"shape {shp}: a direction needs at least one entry")
    raw = hnp.arrays(
        np.float64, shp, elements=st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)
    ).filter(lambda a: float(np.linalg.norm(a)) >= 1e-3)
    return raw.map(lambda a: (a / np.linalg.norm(a)).astype(dt))
