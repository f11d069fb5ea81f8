"""Every ```python block in docs/*.md runs, and raises nothing.

The blocks of one page run in order in one namespace, as a reader would type
them: a test for block ``k`` first runs the page's blocks ``0 .. k-1`` if they
have not run yet. After a block runs, every function it defined whose name
starts with ``test_`` and that takes no arguments is called too, so a pytest
example in the docs is executed, not only defined. Examples assert their own
results (``assert report.verdict == pg.Verdict.PASS``), so a change in
behaviour fails here. Each page runs in its own temporary working directory,
so examples that save figures leave nothing behind.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(line number, source)`` of every fenced ```python block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


PAGES = sorted(DOCS.glob("*.md"))
CASES = [(page.name, k) for page in PAGES for k, _ in enumerate(python_blocks(page))]


class _Page:
    """The namespace of one page and how many of its blocks have run."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.blocks = python_blocks(DOCS / name)
        self.namespace: dict[str, Any] = {"__name__": f"docs_{Path(name).stem}"}
        self.done = 0
        self.workdir = workdir
        self.tests_run: dict[str, Any] = {}

    def run(self, k: int) -> None:
        line, source = self.blocks[k]
        code = compile(source, f"{DOCS / self.name}:{line}", "exec")
        cwd = Path.cwd()
        os.chdir(self.workdir)
        try:
            exec(code, self.namespace)
            for key, value in list(self.namespace.items()):
                new = self.tests_run.get(key) is not value
                if key.startswith("test_") and callable(value) and new:
                    if not inspect.signature(value).parameters:
                        value()
                    self.tests_run[key] = value
        finally:
            os.chdir(cwd)
        self.done = k + 1


_PAGES: dict[str, _Page] = {}


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {page.name: tmp_path_factory.mktemp(page.stem) for page in PAGES}


def test_docs_have_examples() -> None:
    names = {name for name, _ in CASES}
    assert {"getting-started.md", "why-fd-fails.md"} <= names
    assert len(CASES) >= 15


@pytest.mark.parametrize(("page", "block"), CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_docs_example_runs(page: str, block: int, workdirs: dict[str, Path]) -> None:
    state = _PAGES.get(page)
    if state is None or state.done > block:  # first use, or blocks rerun out of order
        state = _PAGES[page] = _Page(page, workdirs[page])
    while state.done < block:
        state.run(state.done)
    state.run(block)
