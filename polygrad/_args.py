"""Normalising the ``argnums`` option shared by check, compare, sweep and taylor_test."""

from __future__ import annotations

import numpy as np

__all__ = ["normalize_argnums"]


def normalize_argnums(argnums: int | tuple[int, ...], nargs: int) -> tuple[int, ...]:
    """``argnums`` as a tuple of non-negative indices into ``nargs`` arguments.

    Raises
    ------
    TypeError
        ``argnums`` is not an int or a tuple of ints.
    ValueError
        An index outside ``-nargs .. nargs - 1``.
    """
    items = (argnums,) if isinstance(argnums, int) else argnums
    try:
        out = tuple(int(a) for a in items)
        if not all(isinstance(a, (int, np.integer)) for a in items):
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(
            f"argnums={argnums!r}: give the position of the differentiated argument (an int, "
            "e.g. argnums=1) or a tuple of positions"
        ) from None
    for a in out:
        if not -nargs <= a < nargs:
            raise ValueError(f"argnums={argnums} but only {nargs} argument(s) were given")
    return tuple(a % nargs for a in out)
