"""Step sizes, direction scales and random directions for difference references.

Pure NumPy helpers shared by :func:`polygrad.check`, :func:`polygrad.sweep`
and :func:`polygrad.taylor_test`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["F64_EPS", "RademacherDirections", "ecnoise_step", "ladder", "pow2_scales", "rademacher"]

F64_EPS = float(np.finfo(np.float64).eps)
"""Machine epsilon of float64."""


def pow2_scales(x0: np.ndarray) -> np.ndarray:
    """Per-coordinate direction scales: powers of two near ``|x_i|``.

    Zeros get the scale of the typical nonzero entry, but no larger than 1 (or 1
    where every entry is 0), so a step ``h s_i`` is relative to the input's own
    size and exact in binary. A zero has no size of its own: beside entries of
    ``1e5`` it would otherwise take steps of ``1e5`` times the ladder's, which
    cross a function's features near 0 (the kinks of a hard-swish at ``±3``, the
    treads of a quantizer) and read them as a kink or a slope at 0; a unit scale,
    as the usual ``max(1, |x|)`` of finite-difference steps gives, does not.

    Parameters
    ----------
    x0 : ndarray, shape (n,)
        The point.

    Returns
    -------
    ndarray, shape (n,), float64
    """
    ax = np.abs(x0)
    nz = ax[ax > 0]
    big = float(np.max(nz)) if nz.size else 1.0
    typical = big * float(np.sqrt(np.mean((nz / big) ** 2))) if nz.size else 1.0
    base = np.where(ax > 0, ax, min(typical, 1.0))
    return 2.0 ** np.round(np.log2(base))


def ecnoise_step(eps: float) -> float:
    """The step of the ECnoise difference table in arithmetic with machine epsilon ``eps``."""
    return float(2.0 ** (np.round(np.log2(eps ** (1.0 / 3.0))) - 2))


def ladder(
    eps: float, accuracy: float | None = None, condition_allowance: float = 1e4
) -> tuple[float, int]:
    """(largest step, number of levels) for differences in arithmetic with ``eps``.

    With a target relative ``accuracy`` far looser than ``eps`` allows (a
    float32 gradient judged on float64 differences), a short ladder of small
    steps suffices: its finest step keeps the round-off of a central
    difference (about ``eps |f| / (h |f'|)``) below the target for functions
    up to ``condition_allowance`` times larger than their derivative (in units
    of the input's scale), and three coarser steps give the Richardson tableau
    and the one-sided jump test.
    Directions that the short ladder does not resolve are refined as usual
    (see :func:`polygrad.reference.directional_derivatives`). Small steps also
    cross fewer nearby kinks, which are then not mistaken for kinks at ``x``.
    """
    if accuracy is not None:
        h_lo = float(2.0 ** np.ceil(np.log2(condition_allowance * eps / accuracy)))
        h_lo = max(2.0**-14, h_lo)
        if h_lo * 8 <= 2.0**-5:
            return h_lo * 8, 4
    h_min = max(2.0**-11, 2.0 ** (np.floor(np.log2(eps ** (1.0 / 3.0))) - 1))
    h_max = 2.0**-2
    levels = int(round(np.log2(h_max / h_min))) + 1
    return h_max, max(levels, 4)


def rademacher(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """``(k, n)`` random signs ±1 (float64) drawn from ``rng``.

    One random bit per sign: ``k n / 8`` random bytes unpacked (a draw of ``k n``
    integers costs about twenty times more at ``n = 1e6``).

    Parameters
    ----------
    rng : numpy.random.Generator
    k, n : int
        Shape of the draw.

    Returns
    -------
    ndarray, shape (k, n), float64
        Entries ``-1.0`` or ``1.0``, each with probability 1/2.
    """
    bits = _random_bits(rng, int(k) * int(n))
    return np.where(bits.reshape(int(k), int(n)) != 0, 1.0, -1.0)


def _random_bits(rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` random bits (``uint8`` 0 or 1) from ``size / 8`` random bytes of ``rng``:
    the one draw behind :func:`rademacher` and :class:`RademacherDirections`."""
    return np.unpackbits(np.frombuffer(rng.bytes((size + 7) // 8), dtype=np.uint8), count=size)


@dataclass(frozen=True, eq=False)
class RademacherDirections:
    """``k`` random directions ``w_i = r_i ⊙ 2^e_i ⊙ s`` (``r_i`` random signs, ``e_i``
    random exponents in ``{-1, 0, 1}``), generated on demand.

    The exponents make two entries of the same scale cancel in a projection (an error
    ``+e`` at one and ``-e`` at the other: ``e s_a r_a - e s_b r_b = 0``) only where
    their sign and exponent agree, with probability 1/6 instead of the 1/2 of signs
    alone: all of 8 projections miss such a pair once in 1.7 million draws, not once in
    256. Every entry is still a power of two times ±1, so ``x0 + h w`` is exact for
    power-of-two steps ``h`` wherever ``h s_j / 2`` is a multiple of the input's ulp.

    Row ``i`` is drawn from its own generator, seeded with ``(*seed, i)``: any rows can
    be generated again, in any order, with the same values, so the ``(k, n)`` matrix
    is never stored (64 MB at ``k = 8``, ``n = 1e6``); each stage builds the rows it
    needs and drops them. Indexing gives NumPy arrays, as a stored matrix would.

    Attributes
    ----------
    seed : tuple of int
        Seed of the directions (row ``i`` uses ``(*seed, i)``).
    k : int
        Number of directions.
    s : ndarray, shape (n,)
        Direction scales (powers of two): every entry of ``w_i`` is ``±s_j / 2``,
        ``±s_j`` or ``±2 s_j``.
    """

    seed: tuple[int, ...]
    k: int
    s: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        """``(k, n)``."""
        return (self.k, int(self.s.size))

    @property
    def ndim(self) -> int:
        """2, as a matrix of directions."""
        return 2

    def __len__(self) -> int:
        return self.k

    def row(self, i: int) -> np.ndarray:
        """Direction ``i``: ``(n,)`` float64, entries ``±2^e s_j``, ``e`` in ``{-1, 0, 1}``."""
        out = np.empty(self.s.size)
        self._fill(i, out)
        return out

    def _fill(self, i: int, out: np.ndarray) -> None:
        """Write direction ``i`` into ``out`` (``(n,)`` float64).

        The signs are :func:`rademacher`'s draw (one random bit each, bit 0 for -1),
        applied by flipping the sign bit of ``s``: exactly ``r_i * s``, in two passes
        over the row where a multiplication by a float64 array of signs takes five;
        the exponents, one byte each from the same generator, scale it exactly.
        """
        if not 0 <= i < self.k:
            raise IndexError(f"direction {i} of {self.k}")
        rng = np.random.default_rng([*self.seed, int(i)])
        bits = _random_bits(rng, self.s.size)
        flip = np.left_shift(bits ^ 1, np.uint64(63), dtype=np.uint64)
        s = np.ascontiguousarray(self.s, dtype=np.float64)
        np.bitwise_xor(s.view(np.uint64), flip, out=out.view(np.uint64))
        exponents = rng.integers(-1, 2, size=self.s.size, dtype=np.int8)
        np.ldexp(out, exponents, out=out)

    def __getitem__(self, key: Any) -> np.ndarray:
        """Rows by integer (``(n,)``), slice or index array (``(len, n)``)."""
        if isinstance(key, (int, np.integer)):
            return self.row(int(key) + (self.k if key < 0 else 0))
        idx = np.arange(self.k)[key]
        out = np.empty((idx.size, self.s.size))
        for j, i in enumerate(idx):
            self._fill(int(i), out[j])
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        full = self[:]
        return full if dtype is None else full.astype(dtype)
