"""Minimal pytrees: nested tuples, lists and dicts whose leaves are arrays or scalars.

This is deliberately small: polygrad only needs to flatten the arguments a user
passes to a function into a list of leaves, and to rebuild the same structure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["TreeDef", "flatten", "unflatten"]


@dataclass(frozen=True)
class TreeDef:
    """Structure of a pytree: ``kind`` is 'leaf', 'tuple', 'list' or 'dict'.

    A dict's leaves come in the order of ``keys`` (sorted where its keys compare, as JAX
    orders them); ``insertion`` is the dict's own order, which :func:`unflatten` rebuilds.
    """

    kind: str
    children: tuple[TreeDef, ...] = ()
    keys: tuple[Any, ...] = ()
    insertion: tuple[Any, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)


def flatten(tree: Any, path: str = "") -> tuple[list[Any], list[str], TreeDef]:
    """Flatten ``tree`` into ``(leaves, paths, treedef)``.

    ``paths`` are human-readable names of the leaves such as ``"[1]['w']"``.
    Tuples (but not namedtuples' field names), lists and dicts are containers;
    anything else is a leaf. A dict's entries come in sorted key order where the keys
    compare (JAX's order, so that every framework's leaves line up).
    """
    if isinstance(tree, (tuple, list)):
        leaves: list[Any] = []
        paths: list[str] = []
        children = []
        for i, item in enumerate(tree):
            lv, ps, td = flatten(item, f"{path}[{i}]")
            leaves += lv
            paths += ps
            children.append(td)
        kind = "tuple" if isinstance(tree, tuple) else "list"
        return leaves, paths, TreeDef(kind, tuple(children))
    if isinstance(tree, dict):
        leaves, paths, children = [], [], []
        keys = _sorted_keys(tree)
        for k in keys:
            lv, ps, td = flatten(tree[k], f"{path}[{k!r}]")
            leaves += lv
            paths += ps
            children.append(td)
        return leaves, paths, TreeDef("dict", tuple(children), keys, tuple(tree.keys()))
    return [tree], [path], TreeDef("leaf")


def _sorted_keys(tree: dict[Any, Any]) -> tuple[Any, ...]:
    """A dict's keys in sorted order where they compare (as JAX flattens a dict, so that
    a dict argument's leaves line up across frameworks), else in insertion order."""
    try:
        return tuple(sorted(tree.keys()))
    except TypeError:
        return tuple(tree.keys())


def unflatten(treedef: TreeDef, leaves: list[Any]) -> Any:
    """Inverse of :func:`flatten`."""
    return _build(treedef, iter(leaves))


def _build(td: TreeDef, it: Iterator[Any]) -> Any:
    """The tree ``td`` with its leaves taken from ``it`` in order.

    A module-level function, not a closure that calls itself: such a closure is a
    reference cycle (function, cell) holding the leaves, which then live until the
    garbage collector runs (every evaluation of a large input kept in memory).
    """
    if td.kind == "leaf":
        return next(it)
    items = [_build(c, it) for c in td.children]
    if td.kind == "tuple":
        return tuple(items)
    if td.kind == "list":
        return items
    by_key = dict(zip(td.keys, items, strict=True))
    return {k: by_key[k] for k in td.insertion or td.keys}  # the user's order of keys


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``fn`` to every leaf of ``tree``."""
    leaves, _, td = flatten(tree)
    return unflatten(td, [fn(leaf) for leaf in leaves])
