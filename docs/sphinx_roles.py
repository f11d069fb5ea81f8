"""Griffe extension: Sphinx roles in docstrings become cross-references in the API reference.

The docstrings are NumPy style and name other objects with Sphinx roles
(``:func:`check```, ``:class:`~polygrad.Report```), which read well in ``help()``
and in Sphinx, but which Markdown would print literally. This extension, loaded by
mkdocstrings (``extensions:`` in ``mkdocs.yml``), rewrites every role of a loaded
docstring into an optional mkdocs-autorefs cross-reference: a link where the target
is rendered on the site, plain code where it is not (``json.dumps``, a private
helper). The Python objects are not changed; only griffe's copy of the docstring.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|exc|obj|const):`(?P<target>[^`]+)`")
"""A Sphinx Python-domain role; ``target`` is ``name``, ``~name`` or ``title <name>``."""


def _split(target: str) -> tuple[str, str]:
    """The title and the dotted name of a role's target."""
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<name>[^>]+)>", target)
    if explicit:
        return explicit["title"], explicit["name"].lstrip("~.")
    name = target.lstrip("!").lstrip("~").lstrip(".")
    name = name.removesuffix("()")
    title = name.rsplit(".", 1)[-1] if target.startswith("~") else name
    return title, name


def _lookup(obj: griffe.Object, loader: griffe.GriffeLoader, name: str) -> Any:
    """The object ``name`` stands for in the scope of ``obj`` (its members, parents, package)."""
    scopes = [obj, *_parents(obj)]
    for scope in scopes:
        head, _, rest = name.partition(".")
        try:
            path = scope.resolve(head)
        except (griffe.NameResolutionError, AttributeError):
            continue
        found = _get(loader, f"{path}.{rest}" if rest else path)
        if found is not None:
            return found
    return _get(loader, name) or _get(loader, f"{obj.package.path}.{name}")


def _parents(obj: griffe.Object) -> list[griffe.Object]:
    out: list[griffe.Object] = []
    while obj.parent is not None:
        obj = obj.parent
        out.append(obj)
    return out


def _get(loader: griffe.GriffeLoader, path: str) -> Any:
    """The object at ``path``; a module shadowed by its own function (``pkg.f`` → ``pkg.f.f``)."""
    try:
        found = loader.modules_collection[path]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    last = path.rsplit(".", 1)[-1]
    if found.is_module and last in found.members:
        found = found.members[last]
    return found


def _autoref(title: str, identifiers: list[str]) -> str:
    """An optional autorefs cross-reference (plain code when no identifier is on the site)."""
    ident = html.escape(identifiers[0], quote=True)
    slug = f' slug="{html.escape(identifiers[1], quote=True)}"' if len(identifiers) > 1 else ""
    code = f"<code>{html.escape(title)}</code>"
    return f'<autoref identifier="{ident}"{slug} optional>{code}</autoref>'


def rewrite_roles(text: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    """``text`` with every Sphinx role replaced by a cross-reference."""

    def replace(match: re.Match[str]) -> str:
        title, name = _split(match["target"])
        found = _lookup(obj, loader, name)
        if found is None:
            return f"`{title}`"
        identifiers = [found.path]
        try:
            canonical = found.final_target.path if found.is_alias else found.canonical_path
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            canonical = found.path
        if canonical != found.path:
            identifiers.append(canonical)
        return _autoref(title, identifiers)

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring griffe loads."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Walk the loaded package once its tree (and its aliases) are complete."""
        self._walk(pkg, loader, seen=set())

    def _walk(self, obj: Any, loader: griffe.GriffeLoader, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None and ROLE.search(obj.docstring.value):
            obj.docstring.value = rewrite_roles(obj.docstring.value, obj, loader)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, loader, seen)
