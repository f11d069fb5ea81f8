"""A minimal progress bar for long checks: tqdm or rich when installed, on a terminal only.

Nothing is shown when standard error is not a terminal (pipes, CI logs,
pytest's capture), when neither tqdm nor rich is installed, or when the
caller says the work is short (``enabled=False``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Progress", "progress", "progress_available"]


class Progress:
    """Handle passed to the body of :func:`progress`; ``update()`` advances the bar."""

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar = bar
        self._task = task

    def update(self, k: int = 1) -> None:
        """Advance by ``k`` units."""
        if self._bar is None:
            return
        if self._task is not None:  # rich
            self._bar.advance(self._task, k)
        else:  # tqdm
            self._bar.update(k)


def progress_available(stream: Any = None) -> str | None:
    """Which progress library would be used now: ``"tqdm"``, ``"rich"`` or None.

    None when ``stream`` (default ``sys.stderr``) is not a terminal, when
    ``POLYGRAD_NO_PROGRESS`` is set, or when neither library is installed.
    """
    stream = sys.stderr if stream is None else stream
    if os.environ.get("POLYGRAD_NO_PROGRESS"):
        return None
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    for name in ("tqdm", "rich"):
        if importlib.util.find_spec(name) is not None:
            return name
    return None


@contextmanager
def progress(total: int, description: str, enabled: bool = True) -> Iterator[Progress]:
    """Show a progress bar of ``total`` units while the body runs (if worth showing).

    Parameters
    ----------
    total : int
        Number of units of work.
    description : str
        Label of the bar.
    enabled : bool
        False for work known to be short: nothing is shown.

    Yields
    ------
    Progress
        Call ``.update(k)`` after each ``k`` units.
    """
    lib = progress_available() if enabled else None
    if lib == "tqdm":
        from tqdm import tqdm

        with tqdm(total=total, desc=description, leave=False, file=sys.stderr) as bar:
            yield Progress(bar)
    elif lib == "rich":
        from rich.console import Console
        from rich.progress import Progress as RichProgress

        with RichProgress(console=Console(file=sys.stderr), transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield Progress(bar, task)
    else:
        yield Progress()
