"""A dict whose costly entries are computed on first use.

A report's supporting explanations (the predicted error of a naive central
difference, the Taylor-remainder test) cost as much as a small check and are read
only when the report is printed, serialised or inspected. :class:`LazyDetails`
holds them as pending computations: reading the key, iterating, serialising,
copying or pickling the dict computes them once; a pending computation that
returns None leaves its key absent, as an eager one would.
"""

from __future__ import annotations

from _collections_abc import dict_items, dict_keys, dict_values
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LazyDetails"]


class LazyDetails(dict):  # type: ignore[type-arg]
    """A ``dict[str, Any]`` with entries that may be computed later (see :meth:`defer`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, Callable[[], Any]] = {}

    def defer(self, key: str, compute: Callable[[], Any]) -> None:
        """Set ``key`` to ``compute()`` when it is first needed (absent if that is None)."""
        self._pending[key] = compute

    def force(self, key: str | None = None) -> None:
        """Compute the pending entry ``key`` (every pending entry when None)."""
        keys = list(self._pending) if key is None else [key]
        for k in keys:
            compute = self._pending.pop(k, None)
            if compute is None:
                continue
            value = compute()
            if value is not None:
                super().__setitem__(k, value)

    # -- reads of one key ---------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        if key in self._pending:
            self.force(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str) and key in self._pending:
            self.force(key)
        return super().__contains__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if key in self._pending:
            self.force(key)
        return super().get(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self._pending:
            self.force(key)
        return super().pop(key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self._pending:
            self.force(key)
        return super().setdefault(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._pending.pop(key, None)
        super().__setitem__(key, value)

    # -- reads of the whole dict ----------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        self.force()
        return super().__iter__()

    def __len__(self) -> int:
        self.force()
        return super().__len__()

    def keys(self) -> dict_keys[Any, Any]:
        self.force()
        return super().keys()

    def values(self) -> dict_values[Any, Any]:
        self.force()
        return super().values()

    def items(self) -> dict_items[Any, Any]:
        self.force()
        return super().items()

    def copy(self) -> dict[Any, Any]:
        self.force()
        return dict(super().items())

    def __repr__(self) -> str:
        self.force()
        return super().__repr__()

    def __eq__(self, other: object) -> bool:
        self.force()
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the plain dict it becomes once computed."""
        self.force()
        return (dict, (dict(super().items()),))
