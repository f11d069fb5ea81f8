"""The documentation builds with ``mkdocs build --strict``: no warning, no broken link.

The build runs the hooks of ``docs/hooks.py`` (figures drawn by polygrad, benchmark
tables) and renders the API reference from the docstrings, so a renamed function, a
broken docstring section or a missing benchmark result fails here. The built HTML is
then read as a browser would get it: no Sphinx role printed as text, nothing loaded
from another site, and the install line names this project's distribution.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|exc|obj):(?:`|<code>)")
EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\bsrc=[\"'](?:https?:)?//", re.IGNORECASE)
EXTERNAL_STYLESHEET = re.compile(r"<link[^>]*\bhref=[\"'](?:https?:)?//[^\"']*\.css", re.IGNORECASE)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once for this module's tests."""
    site = tmp_path_factory.mktemp("docs") / "site"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert "WARNING" not in log, log
    return site


def pages(site: Path) -> dict[str, str]:
    """Every built HTML page, by its path in the site."""
    return {str(p.relative_to(site)): p.read_text(encoding="utf-8") for p in site.rglob("*.html")}


def test_mkdocs_build_strict(site: Path) -> None:
    for page in ("getting-started", "why-fd-fails", "error-model", "comparison", "api"):
        assert (site / page / "index.html").exists(), page
    for figure in ("vcurve", "vshape", "summation", "noise", "taylor", "kinks"):
        png = site / "figures" / f"{figure}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", figure
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for anchor in ("polygrad.check.check", "polygrad.assert_gradients", "polygrad.Verdict.PASS"):
        assert f'id="{anchor}"' in api, anchor
    comparison = (site / "comparison" / "index.html").read_text(encoding="utf-8")
    assert "benchmark-table" not in comparison  # the marker was replaced by the table
    assert "tf.test.compute_gradient</code></td>" in comparison
    # one benchmark page per question, each in the navigation, and the index linking them
    index = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    for page in ("speed", "accuracy", "scale"):
        assert (site / page / "index.html").exists(), page
        assert f'href="../{page}/"' in index, page
    for page in ("speed", "scale", "accuracy"):  # the build-time values were filled in
        assert "<!-- value:" not in (site / page / "index.html").read_text(encoding="utf-8")


def test_no_sphinx_role_printed_as_text(site: Path) -> None:
    # docstrings keep their Sphinx roles (help(), Sphinx); the site shows links or code
    found = {name: ROLE.findall(html)[:3] for name, html in pages(site).items()}
    assert {name: roles for name, roles in found.items() if roles} == {}
    api = pages(site)["api/index.html"]
    assert 'href="#polygrad.check.check"' in api  # a role became a cross-reference


def test_nothing_loaded_from_another_site(site: Path) -> None:
    # highlighting is done at build time (Pygments), its stylesheet is served by the site
    for name, html in pages(site).items():
        assert not EXTERNAL_SCRIPT.search(html), name
        assert not EXTERNAL_STYLESHEET.search(html), name
        assert "cdnjs" not in html and "highlight.min.js" not in html, name
    getting_started = pages(site)["getting-started/index.html"]
    assert 'class="language-python highlight"' in getting_started
    assert (site / "css" / "pygments.css").read_text().count(".highlight") > 10
    assert 'href="../css/pygments.css"' in getting_started


def test_install_line_names_the_distribution(site: Path) -> None:
    def code(page: str) -> str:
        html = pages(site)[page]
        text = re.sub(r"<[^>]+>", "", "\n".join(re.findall(r"<pre.*?</pre>", html, re.DOTALL)))
        return text.replace("&quot;", '"')

    for page, line in [
        ("index.html", 'pip install "polygrad-check[all]"'),
        ("getting-started/index.html", 'pip install "polygrad-check[torch]"'),
    ]:
        assert line in code(page), page
    installs = re.findall(
        r"pip install (?:--[\w-]+ )*\"?([\w.-]+)", code("getting-started/index.html")
    )
    assert installs and set(installs) == {"polygrad-check"}, installs
    # what to do if the unrelated `polygrad` project is installed
    assert "pip uninstall polygrad" in code("getting-started/index.html")


def test_supplied_calling_conventions_documented(site: Path) -> None:
    api = re.sub(r"<[^>]+>", "", pages(site)["api/index.html"])
    for call in ("grad(*args)", "jac(*args)", "vjp(cotangent, *args)", "jvp(tangents, *args)"):
        assert call in api, call
    assert 'id="polygrad.backends.base.Supplied"' in pages(site)["api/index.html"]
