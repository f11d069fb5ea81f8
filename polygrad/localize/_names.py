"""Names and places: the objects a function reaches, and the user's source line."""

from __future__ import annotations

import inspect
import os
import traceback
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["reachable_roots", "source_line"]


def reachable_roots(f: Any, wanted: Callable[[Any], bool]) -> list[tuple[str, Any]]:
    """``(name, obj)`` for each object satisfying ``wanted`` that ``f`` is, is bound to,
    closes over, or names as a global; named as the user's code names it."""
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def add(label: str, obj: Any) -> None:
        if wanted(obj) and id(obj) not in seen:
            seen.add(id(obj))
            out.append((label, obj))

    add(type(f).__name__, f)
    add("self", getattr(f, "__self__", None))
    code = getattr(f, "__code__", None)
    if code is not None:
        for name, cell in zip(
            code.co_freevars, getattr(f, "__closure__", None) or (), strict=False
        ):
            try:
                add(name, cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        scope = getattr(f, "__globals__", {})
        for name in code.co_names:
            if name in scope:
                add(name, scope[name])
    return out


def source_line(frames: Iterable[traceback.FrameSummary], skip: tuple[str, ...]) -> str:
    """``"file.py:12 in forward: code"`` of the innermost frame outside the ``skip``
    folders (the framework's and polygrad's own), or ``""``."""
    for fr in reversed(list(frames)):
        path = os.path.abspath(fr.filename)
        if any(path.startswith(d + os.sep) for d in skip) or fr.filename.startswith("<frozen"):
            continue
        return format_place(fr.filename, fr.lineno or 0, fr.name, fr.line or "")
    return ""


def format_place(filename: str, lineno: int, func: str, code: str = "") -> str:
    """``file:line in func: code``, the file relative to the working folder when inside it."""
    rel = os.path.relpath(filename) if os.path.isabs(filename) else filename
    shown = filename if rel.startswith("..") else rel
    text = f"{shown}:{lineno} in {func}"
    return f"{text}: {code.strip()}" if code.strip() else text


def callable_place(fn: Any) -> str:
    """Where a Python callable is defined (``file:line in name``), or ``""``."""
    try:
        target = inspect.unwrap(fn)
        lines, start = inspect.getsourcelines(target)
        filename = inspect.getsourcefile(target) or ""
    except (OSError, TypeError):
        return ""
    return format_place(filename, start, getattr(target, "__qualname__", "?"), lines[0])
