"""Where the benchmarks write on the docs: one page per question a user asks.

* ``docs/speed.md``, "How fast is a check?": the latency table (n = 10, the case-2
  CNN, the 200-check suite, the scalar losses) and the cost of a failing check
  (``python -m benchmarks latency``).
* ``docs/accuracy.md``, "How often is the verdict right?": the zoo's verdict tables
  (``python -m benchmarks``) and the real-code corpus (``python -m benchmarks corpus``).
* ``docs/scale.md``, "What does a check cost at scale?": the zoo's cost table and the
  latency rows at n = 1e4 and n = 1e6.

Each benchmark writes its tables between the markers ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` of its page (:data:`BLOCKS`) and leaves the rest of the page,
written by hand, as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DOCS", "BLOCKS", "markers", "find", "write_block"]

DOCS = Path(__file__).resolve().parent.parent / "docs"
SPEED, ACCURACY, SCALE = "speed.md", "accuracy.md", "scale.md"
BLOCKS: dict[str, str] = {
    "latency": SPEED,
    "latency-failing": SPEED,
    "zoo": ACCURACY,
    "corpus": ACCURACY,
    "zoo-cost": SCALE,
    "latency-large": SCALE,
}
"""Each block the benchmarks write, by its marker name, and the page (in ``docs/``) that
holds it."""


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of the block ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def find(text: str, name: str) -> re.Match[str] | None:
    """The block ``name`` of a page's ``text`` (group 1: what lies between its markers)."""
    begin, end = markers(name)
    return re.search(re.escape(begin) + r"(.*?)" + re.escape(end), text, re.DOTALL)


def write_block(path: Path, name: str, content: str, heading: str) -> None:
    """Put ``content`` between the markers of the block ``name`` on the page ``path``.

    Parameters
    ----------
    path : Path
        The page. It is created if it does not exist.
    name : str
        The block's marker name (a key of :data:`BLOCKS`).
    content : str
        The Markdown of the block, without its markers.
    heading : str
        The heading put above the block where the page has no such block yet (the
        block is then appended at the end of the page).
    """
    begin, end = markers(name)
    text = path.read_text() if path.exists() else ""
    block = f"{begin}\n{content.strip()}\n{end}"
    m = find(text, name)
    if m is not None:
        text = text[: m.start()] + block + text[m.end() :]
    else:
        head = text.rstrip("\n") + "\n\n" if text.strip() else ""
        text = f"{head}{heading}\n\n{block}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
