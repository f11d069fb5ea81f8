"""Names of checked inputs in reports: the function's own argument names.

A report names each Jacobian entry by the argument it belongs to. With
several checked arguments, or an argument that is a pytree, the name is the
parameter's name in the function's signature (``weight[2]``, ``params['b']``);
``arg<i>`` only where the signature does not say (``*args``, builtins). A
single plain array argument is called ``x``.

Callables that take ``*args`` and pass them on to a ``forward`` method (the
``apply`` of a ``torch.autograd.Function`` subclass, a module's ``__call__``)
are named from that ``forward``; a leading context parameter that is not one
of the call's arguments is skipped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["argument_names", "keep_signature", "leaf_name"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _positional_names(fn: Any) -> list[str] | None:
    """Names of ``fn``'s positional parameters, or None without a usable signature."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    names = []
    for p in params:
        if p.kind not in _POSITIONAL:
            break
        names.append(p.name)
    return names


def _forward_names(f: Any, nargs: int) -> list[str] | None:
    """Names from the ``forward`` that ``f`` dispatches to, if it has one."""
    owner = getattr(f, "__self__", None)
    for holder in (f, owner):
        forward = getattr(holder, "forward", None)
        if forward is None or not callable(forward):
            continue
        names = _positional_names(forward)
        if not names:
            continue
        # Function.forward(ctx, *inputs): the context is not one of the call's arguments
        if len(names) == nargs + 1 or (names[0] == "ctx" and len(names) > nargs):
            names = names[1:]
        return names
    return None


def argument_names(f: Callable[..., Any], nargs: int) -> list[str | None]:
    """The parameter name of each of ``nargs`` positional arguments of ``f``.

    Parameters
    ----------
    f : callable
        The user's function (a plain function, method, ``functools.partial``,
        ``jax.jit``/``tf.function`` wrapper, ``torch.nn.Module``, or the
        ``apply`` of an autograd ``Function``).
    nargs : int
        How many positional arguments it is called with.

    Returns
    -------
    list of str or None
        Length ``nargs``; None where the signature gives no name.
    """
    names = _positional_names(f)
    if not names:
        names = _forward_names(f, nargs) or []
    names = names[:nargs]
    return [*names, *([None] * (nargs - len(names)))]


def leaf_name(names: Sequence[str | None], i: int, path: str, argnums: Sequence[int]) -> str:
    """The name of the leaf at pytree ``path`` of argument ``i``.

    Parameters
    ----------
    names : sequence of str or None
        From :func:`argument_names`.
    i : int
        The argument's position.
    path : str
        The leaf's path in the argument (``"['w']"``, ``"[0]"``; ``""`` for an array).
    argnums : sequence of int
        The checked arguments.

    Returns
    -------
    str
        ``"x"`` for the only argument when it is a plain array; otherwise the
        parameter's name (or ``arg<i>``) followed by ``path``, so that a check of one
        of several arguments (``argnums=1`` of ``loss(weights, bias)``) names it.
    """
    if len(argnums) == 1 and not path and len(names) <= 1:
        return "x"
    base = names[i] if i < len(names) and names[i] else f"arg{i}"
    return f"{base}{path}"


def keep_signature(wrapper: Callable[..., Any], f: Callable[..., Any], nargs: int) -> None:
    """Give ``wrapper`` (which takes ``f``'s ``nargs`` arguments) ``f``'s parameter names.

    Only ``__signature__`` is set, so that :func:`argument_names` sees through
    the wrapper; no other attribute of ``f`` is copied.
    """
    names = argument_names(f, nargs)
    kind = inspect.Parameter.POSITIONAL_ONLY
    params = [inspect.Parameter(n or f"arg{i}", kind) for i, n in enumerate(names)]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
