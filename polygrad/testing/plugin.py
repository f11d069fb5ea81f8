"""pytest plugin: run one gradient test in every framework.

Registered through the ``pytest11`` entry point, so it is active wherever
polygrad is installed. It imports no ML framework; a framework is imported
only by a test that uses it.

* ``backend`` fixture — a :class:`~polygrad.testing.BackendHandle`, one test
  per selected backend (ids ``[numpy]``, ``[torch]``, ``[jax]``,
  ``[tensorflow]``).
* Selection — ``--polygrad-backends=torch,jax``, else the environment
  variable ``POLYGRAD_BACKENDS=torch,jax``, else the ini setting
  ``polygrad_backends = torch,jax`` (``[tool.pytest.ini_options]``); without
  any of them, every *installed* framework is used. A project whose CI must
  test every framework names them all in the ini setting. A name polygrad does not know is a usage
  error. A framework that is requested but not installed makes its tests
  **fail** (not skip), with the ``pip install "polygrad-check[...]"`` command in
  the message: a CI job that asked for JAX must not go green without it.
* ``@pytest.mark.polygrad_backends("torch", "jax")`` — restricts a test to
  those backends (within the selection). A test whose backends are all
  outside the selection is deselected; this also holds for marked tests that
  do not use the ``backend`` fixture, so a test module that needs one
  framework can carry ``pytestmark = pytest.mark.polygrad_backends("torch")``.
  ``require="all"`` — the test needs every listed backend at once (e.g. it
  compares torch with JAX) and is deselected unless all are selected.
* Reference cache — checks run through the ``backend`` fixture
  (``backend.check``, ``backend.assert_gradients``) keep their reference
  derivatives on disk between runs (:mod:`polygrad.refcache`): in
  ``$POLYGRAD_CACHE_DIR`` if set, else in pytest's cache folder
  (``.pytest_cache/d/polygrad``, emptied by ``pytest --cache-clear``), else
  in the user cache folder. A rerun pays only for the autodiff side; a changed
  function, weight, point, dtype or option is a new entry.
  ``--polygrad-no-cache`` turns it off; ``cache=False`` turns it off for one
  check.

Whether a framework is installed is decided by :func:`framework_installed`
(``importlib.util.find_spec``, nothing imported); the plugin looks that
function up on this module at run time, so the plugin's own tests replace it
(``monkeypatch.setattr(plugin, "framework_installed", ...)``) to exercise the
not-installed path in an environment where everything is installed.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ._handles import BACKENDS, BackendHandle, canonical_name, extra_of
from ._handles import framework_installed as _framework_installed

__all__ = [
    "ENV_VAR",
    "OPTION",
    "MARKER",
    "NO_CACHE_OPTION",
    "framework_installed",
    "selected_backends",
]

ENV_VAR = "POLYGRAD_BACKENDS"
OPTION = "--polygrad-backends"
MARKER = "polygrad_backends"
NO_CACHE_OPTION = "--polygrad-no-cache"
CACHE_ENV = "POLYGRAD_CACHE_DIR"
_REQUESTED = pytest.StashKey[tuple[str, ...] | None]()
_DESELECTED = object()  # parameter value of a test none of whose backends is selected


class _Selected(str):
    """A backend name put into a test's parameters by this plugin (not by the user)."""


framework_installed = _framework_installed


def _parse(text: str, source: str) -> tuple[str, ...]:
    names: list[str] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            key = canonical_name(part)
        except ValueError:
            raise pytest.UsageError(
                f"{source}: unknown backend {part.strip()!r}; valid names: {', '.join(BACKENDS)}"
            ) from None
        if key not in names:
            names.append(key)
    if not names:
        raise pytest.UsageError(f"{source}: no backend named; valid names: {', '.join(BACKENDS)}")
    return tuple(names)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("polygrad", "polygrad gradient checks")
    group.addoption(
        OPTION,
        dest="polygrad_backends",
        default=None,
        metavar="NAMES",
        help=(
            "comma-separated backends for the 'backend' fixture: "
            f"{', '.join(BACKENDS)} (default: ${ENV_VAR}, else every installed framework). "
            "A requested framework that is not installed fails its tests."
        ),
    )

    group.addoption(
        NO_CACHE_OPTION,
        dest="polygrad_no_cache",
        action="store_true",
        default=False,
        help=(
            "do not keep gradient-check references between runs (default: kept in "
            f"${CACHE_ENV}, else pytest's cache folder, else the user cache folder)"
        ),
    )

    parser.addini(
        "polygrad_backends",
        help=(
            "comma-separated backends for the 'backend' fixture when neither "
            f"{OPTION} nor ${ENV_VAR} is given (default: every installed framework)"
        ),
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*names, require='any'): run this test only for these polygrad backends "
        f"({', '.join(BACKENDS)}); deselected when none of them is selected "
        "(require='all': unless all of them are)",
    )
    option = config.getoption("polygrad_backends", default=None)
    env = os.environ.get(ENV_VAR, "")
    requested: tuple[str, ...] | None = None
    ini = str(config.getini("polygrad_backends") or "")
    if option is not None:
        requested = _parse(option, OPTION)
    elif env.strip():
        requested = _parse(env, ENV_VAR)
    elif ini.strip():
        requested = _parse(ini, "polygrad_backends (ini)")
    config.stash[_REQUESTED] = requested
    from ..refcache import push_session_default

    push_session_default(_cache_folder(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    from ..refcache import pop_session_default

    pop_session_default()


def _cache_folder(config: pytest.Config) -> Any:
    """Where the ``backend`` fixture's checks keep references (None: nowhere).

    ``$POLYGRAD_CACHE_DIR`` first; then pytest's own cache folder (cleared by
    ``pytest --cache-clear``); without the cacheprovider plugin, the user cache.
    """
    if config.getoption("polygrad_no_cache", default=False):
        return None
    if os.environ.get(CACHE_ENV):
        return True
    cache = getattr(config, "cache", None)
    if cache is not None:
        try:
            return cache.mkdir("polygrad") / "references"
        except OSError:
            pass
    return True


def selected_backends(config: pytest.Config) -> tuple[str, ...]:
    """The backends tests run for: the requested ones, else the installed ones."""
    requested = config.stash.get(_REQUESTED, None)
    if requested is not None:
        return requested
    return tuple(name for name in BACKENDS if framework_installed(name))


def _marker(node: Any) -> tuple[tuple[str, ...], bool] | None:
    """(backends, all required) of the closest ``polygrad_backends`` marker; None: no marker."""
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return None
    require = marker.kwargs.get("require", "any")
    if require not in ("any", "all") or set(marker.kwargs) - {"require"}:
        raise pytest.UsageError(
            f"{node.nodeid}: @pytest.mark.{MARKER}(..., {marker.kwargs}): the only keyword is "
            "require='any' (default) or require='all'"
        )
    names = []
    for arg in marker.args:
        try:
            names.append(canonical_name(str(arg)))
        except ValueError:
            raise pytest.UsageError(
                f"{node.nodeid}: @pytest.mark.{MARKER}({arg!r}): unknown backend; "
                f"valid names: {', '.join(BACKENDS)}"
            ) from None
    return tuple(names), require == "all"


def _runs(node: Any, selected: tuple[str, ...]) -> tuple[str, ...] | None:
    """The selected backends a marked test runs for (empty: deselect); None: no marker."""
    marker = _marker(node)
    if marker is None:
        return None
    names, require_all = marker
    if require_all and not all(n in selected for n in names):
        return ()
    return tuple(n for n in selected if n in names)


def _already_parametrized(metafunc: pytest.Metafunc) -> bool:
    for marker in metafunc.definition.iter_markers("parametrize"):
        argnames = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
        if isinstance(argnames, str):
            argnames = [a.strip() for a in argnames.split(",")]
        if "backend" in argnames:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames or _already_parametrized(metafunc):
        return
    names = selected_backends(metafunc.config)
    restricted = _runs(metafunc.definition, names)
    if restricted is not None:
        names = restricted
    if names:
        params = [_Selected(n) for n in names]
        metafunc.parametrize("backend", params, ids=list(names), indirect=True)
    else:
        metafunc.parametrize("backend", [_DESELECTED], ids=["none-selected"], indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = selected_backends(config)
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") is _DESELECTED:
            dropped.append(item)
            continue
        runs = _runs(item, selected)
        if runs is not None and not runs:
            dropped.append(item)
            continue
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> BackendHandle:
    """The framework this instance of the test runs in (a :class:`BackendHandle`).

    Parametrised by the plugin over the selected backends; outside the
    plugin's parametrisation (``request.param`` missing) it is NumPy.
    """
    return BackendHandle(getattr(request, "param", "numpy"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    callspec = getattr(item, "callspec", None)
    name = callspec.params.get("backend") if callspec is not None else None
    if isinstance(name, _Selected) and not framework_installed(name):
        pytest.fail(
            f"polygrad backend {name!r} was requested but its framework is not installed; "
            f"install it with: {extra_of(name)}",
            pytrace=False,
        )
