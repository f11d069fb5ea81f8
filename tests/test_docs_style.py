"""The docs site's stylesheet: printed reports wrap at the page's width, never clip."""

import re
from pathlib import Path

CSS = Path(__file__).resolve().parents[1] / "docs" / "css" / "site.css"


def test_printed_reports_wrap():
    """A report's first line answers the question; at 1366 px it is wider than the text
    column, and a ```text block must wrap it rather than hide it behind a scroll bar."""
    css = CSS.read_text(encoding="utf-8")
    rule = re.search(r"\.language-text\.highlight pre[^{]*\{([^}]*)\}", css)
    assert rule is not None
    assert re.search(r"white-space:\s*pre-wrap", rule.group(1))
