"""The name polygrad is installed under, and the install commands built from it.

The import name is ``polygrad``; the distribution on the package index is
``polygrad-check``, because the name ``polygrad`` there belongs to an
unrelated project. Every install hint that polygrad prints is built here, so
that none of them sends a user to the other project.
"""

from __future__ import annotations

__all__ = ["DISTRIBUTION", "pip_install", "requirement"]

DISTRIBUTION = "polygrad-check"


def requirement(extra: str = "") -> str:
    """The requirement string for polygrad with ``extra``.

    Parameters
    ----------
    extra : str
        An optional extra (``"torch"``, ``"jax"``, ``"tensorflow"``, ``"plot"``,
        ``"test"``, ``"all"``...); empty for none.

    Returns
    -------
    str
        ``"polygrad-check[extra]"``, or ``"polygrad-check"`` without an extra.
    """
    return f"{DISTRIBUTION}[{extra}]" if extra else DISTRIBUTION


def pip_install(extra: str = "", quote: str = "'") -> str:
    """The shell command that installs polygrad with ``extra``.

    Parameters
    ----------
    extra : str
        An optional extra; see :func:`requirement`.
    quote : str
        The quote put around the requirement (``'`` or ``"``), so that a
        shell does not expand the brackets.

    Returns
    -------
    str
        E.g. ``pip install 'polygrad-check[torch]'``.
    """
    return f"pip install {quote}{requirement(extra)}{quote}"
