"""The pytest plugin (backend fixture, selection, marker) and the conversion helpers."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import numpy as np
import pytest

import polygrad as pg
from polygrad.errors import InputTypeError, MissingBackendError
from polygrad.testing import BACKENDS, BackendHandle, framework_installed, to_backend
from polygrad.testing import plugin as plugin_module

pytest_plugins = ["pytester"]

INSTALLED = [name for name in BACKENDS if framework_installed(name)]

ONE_TEST = """
import numpy as np

def test_sin(backend):
    xp = backend.namespace
    x = backend.asarray(np.linspace(-1.0, 2.0, 4), "float32")
    backend.assert_gradients(lambda x: xp.sum(xp.sin(x)), x, grad=lambda x: np.cos(x))
"""


@pytest.fixture(scope="session")
def frameworks_loaded() -> None:
    """Import and run every installed framework once in this process.

    ``pytester.runpytest`` runs in this process and, after each run, removes
    the modules that run imported; importing torch or TensorFlow a second time
    in one process aborts it. Modules loaded before the run are kept.
    """
    for name in INSTALLED:
        handle = BackendHandle(name)
        xp = handle.namespace
        handle.check(lambda x, xp=xp: xp.sum(xp.sin(x)), np.ones(2, np.float32), grad=np.cos)


@pytest.fixture
def clean_env(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, frameworks_loaded: None
) -> None:
    """No POLYGRAD_BACKENDS; an empty ini file, so that no ini of a folder above is used."""
    monkeypatch.delenv(plugin_module.ENV_VAR, raising=False)
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester").makeini("[pytest]\n")


def _ids(result: pytest.RunResult, test: str = "test_sin") -> list[str]:
    """Parameter ids of the tests that ran, in order, from ``-v`` output."""
    out = []
    for line in result.outlines:
        if f"::{test}[" in line and (" PASSED" in line or " FAILED" in line):
            out.append(line.split("[", 1)[1].split("]", 1)[0])
    return out


# --- registration and imports ------------------------------------------------------------------


def test_registered_as_pytest11_entry_point():
    eps = importlib.metadata.entry_points(group="pytest11")
    assert [e.value for e in eps if e.name == "polygrad"] == ["polygrad.testing.plugin"]


def test_testing_package_reexports_assert_gradients():
    from polygrad import testing

    assert testing.assert_gradients is pg.assert_gradients


IMPORT_CODE = """
import sys
import pytest
import polygrad.testing.plugin
import polygrad.testing
heavy = ("torch", "jax", "tensorflow", "keras", "hypothesis")
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, loaded
rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[1]])
assert rc == 0, rc
loaded = [m for m in heavy[:-1] if m in sys.modules]  # hypothesis has its own pytest plugin
assert not loaded, loaded
print("clean")
"""


def test_plugin_imports_no_framework(tmp_path):
    test_file = tmp_path / "test_one.py"
    test_file.write_text(ONE_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_CODE, str(test_file)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("clean")
    # collection ran the plugin's parametrisation: one test per installed framework
    assert out.stdout.count("test_one.py::test_sin[") == len(INSTALLED)


# --- parametrisation and selection ---------------------------------------------------------------


def test_fixture_runs_every_installed_backend(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=len(INSTALLED))
    assert _ids(result) == INSTALLED


@pytest.mark.polygrad_backends("torch", "jax", require="all")
def test_option_selects_backends(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("-v", "--polygrad-backends=jax,torch")
    result.assert_outcomes(passed=2)
    assert _ids(result) == ["jax", "torch"]


@pytest.mark.polygrad_backends("torch", "jax", require="all")
def test_env_var_selects_and_option_wins(pytester: pytest.Pytester, monkeypatch, clean_env):
    pytester.makepyfile(ONE_TEST)
    monkeypatch.setenv("POLYGRAD_BACKENDS", "jax")
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1)
    assert _ids(result) == ["jax"]
    result = pytester.runpytest("-v", "--polygrad-backends=torch")
    result.assert_outcomes(passed=1)
    assert _ids(result) == ["torch"]


@pytest.mark.polygrad_backends("torch", "jax", require="all")
def test_ini_setting_selects_after_option_and_env(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, clean_env
):
    pytester.makepyfile(ONE_TEST)
    pytester.makeini("[pytest]\npolygrad_backends = torch, numpy\n")
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2)
    assert _ids(result) == ["torch", "numpy"]
    monkeypatch.setenv("POLYGRAD_BACKENDS", "jax")
    result = pytester.runpytest("-v")
    assert _ids(result) == ["jax"]
    result = pytester.runpytest("-v", "--polygrad-backends=numpy")
    assert _ids(result) == ["numpy"]
    pytester.makeini("[pytest]\npolygrad_backends = torch, chainer\n")
    monkeypatch.delenv("POLYGRAD_BACKENDS")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*polygrad_backends (ini): unknown backend 'chainer'*"])


def test_aliases_and_duplicates(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("-v", "--polygrad-backends= NP ,numpy")
    result.assert_outcomes(passed=1)
    assert _ids(result) == ["numpy"]


@pytest.mark.parametrize(
    "how",
    ["option", "env"],
)
def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester, monkeypatch, clean_env, how):
    pytester.makepyfile(ONE_TEST)
    if how == "option":
        result = pytester.runpytest("--polygrad-backends=numpy,mxnet")
        source = "--polygrad-backends"
    else:
        monkeypatch.setenv("POLYGRAD_BACKENDS", "mxnet")
        result = pytester.runpytest()
        source = "POLYGRAD_BACKENDS"
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*{source}: unknown backend 'mxnet'; valid names: numpy, torch, jax, tensorflow*"]
    )


def test_empty_selection_is_a_usage_error(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("--polygrad-backends=,")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--polygrad-backends: no backend named*"])


# --- the marker -----------------------------------------------------------------------------------

MARKED = """
import pytest

@pytest.mark.polygrad_backends("torch", "jax")
def test_marked(backend):
    assert backend.name in ("torch", "jax")

@pytest.mark.polygrad_backends("numpy")
def test_marked_without_fixture():
    pass

def test_plain(backend):
    pass
"""


def test_marker_is_registered(pytester: pytest.Pytester, clean_env):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.polygrad_backends(*names, require='any')*"])
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("--strict-markers", "--polygrad-backends=numpy")
    result.assert_outcomes(passed=2, deselected=1)


@pytest.mark.polygrad_backends("numpy", "torch", "jax", require="all")
def test_marker_restricts_backends(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("-v", "--polygrad-backends=numpy,torch,jax")
    result.assert_outcomes(passed=6)
    assert _ids(result, "test_marked") == ["torch", "jax"]
    assert _ids(result, "test_plain") == ["numpy", "torch", "jax"]
    # jax only: test_marked runs once, the numpy-only test is deselected
    result = pytester.runpytest("-v", "--polygrad-backends=jax")
    result.assert_outcomes(passed=2, deselected=1)
    assert _ids(result, "test_marked") == ["jax"]


def test_marker_outside_selection_is_deselected(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("-v", "--polygrad-backends=numpy")
    # test_marked has no selected backend: deselected, not skipped
    result.assert_outcomes(passed=2, deselected=1)
    assert "test_marked[" not in result.stdout.str()


REQUIRE_ALL = """
import pytest

@pytest.mark.polygrad_backends("numpy", "jax", require="all")
def test_together(backend):
    pass

@pytest.mark.polygrad_backends("numpy", "jax", require="all")
def test_together_no_fixture():
    pass
"""


def test_marker_require_all_deselects_partial_selections(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(REQUIRE_ALL)
    result = pytester.runpytest("-v", "--polygrad-backends=numpy,torch")
    result.assert_outcomes(deselected=2)


@pytest.mark.polygrad_backends("numpy", "jax", require="all")
def test_marker_require_all_runs_when_all_selected(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(REQUIRE_ALL)
    result = pytester.runpytest("-v", "--polygrad-backends=numpy,torch,jax")
    result.assert_outcomes(passed=3)
    assert _ids(result, "test_together") == ["numpy", "jax"]


def test_marker_bad_keyword_is_an_error(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.polygrad_backends("numpy", require="most")
        def test_x():
            pass
        """
    )
    result = pytester.runpytest("--polygrad-backends=numpy")
    assert result.ret != pytest.ExitCode.OK
    assert "the only keyword is require='any' (default) or require='all'" in (
        result.stdout.str() + result.stderr.str()
    )


def test_marker_with_unknown_name_is_an_error(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.polygrad_backends("mxnet")
        def test_x(backend):
            pass
        """
    )
    result = pytester.runpytest("--polygrad-backends=numpy")
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*polygrad_backends('mxnet'): unknown backend; valid names*"])


def test_explicit_parametrisation_is_left_alone(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("backend", ["mine"])
        def test_x(backend):
            assert backend == "mine"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


# --- failures -------------------------------------------------------------------------------------


def test_failing_gradient_shows_the_report(pytester: pytest.Pytester, clean_env):
    pytester.makepyfile(
        """
        import numpy as np

        def test_wrong_sign(backend):
            backend.assert_gradients(
                lambda x: np.sum(np.sin(x)), np.linspace(-1.0, 2.0, 4), grad=lambda x: -np.cos(x)
            )
        """
    )
    result = pytester.runpytest("--polygrad-backends=numpy")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*GradientCheckError: polygrad: MISMATCH*the gradient rule is wrong*",
            "*worst entries:*",
            "*x[[]1[]]*MISMATCH*",
        ]
    )


def test_requested_but_missing_framework_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, clean_env
):
    real = plugin_module.framework_installed
    monkeypatch.setattr(
        plugin_module, "framework_installed", lambda name: name != "jax" and real(name)
    )
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("-v", "--polygrad-backends=numpy,jax")
    result.assert_outcomes(passed=1, failed=1)
    assert _ids(result) == ["numpy", "jax"]
    result.stdout.fnmatch_lines(
        [
            "*polygrad backend 'jax' was requested but its framework is not installed; "
            'install it with: pip install "polygrad-check[[]jax[]]"*'
        ]
    )
    # not requested: a missing framework is simply not part of the parametrisation
    result = pytester.runpytest("-v")
    assert "jax" not in _ids(result)
    result.assert_outcomes(passed=len([n for n in INSTALLED if n != "jax"]))


def test_requesting_every_backend_matches_what_is_installed(pytester: pytest.Pytester, clean_env):
    """In CI everything is installed (4 pass); in the numpy-only session three must fail."""
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest("-v", "--polygrad-backends=numpy,torch,jax,tensorflow")
    missing = [n for n in BACKENDS if n not in INSTALLED]
    result.assert_outcomes(passed=len(INSTALLED), failed=len(missing))
    assert _ids(result) == list(BACKENDS)
    for name in missing:
        result.stdout.fnmatch_lines([f'*pip install "polygrad-check[[]{name}[]]"*'])


# --- conversion helpers (run per selected backend, through the plugin itself) ---------------------


@pytest.mark.parametrize("dtype", [None, "float32", "float64", np.float32])
def test_to_backend_types_and_values(backend, dtype):
    x = np.array([[-1.5, 0.0], [2.0**-30, 3.0e5]])
    a = backend.asarray(x, dtype)
    kind = {
        "numpy": "numpy.ndarray",
        "torch": "torch.Tensor",
        "jax": "jaxlib._jax.ArrayImpl",
        "tensorflow": "tensorflow.python.framework.ops.EagerTensor",
    }[backend.name]
    assert f"{type(a).__module__}.{type(a).__qualname__}" == kind
    want = np.dtype(dtype) if dtype is not None else np.dtype(np.float64)
    back = np.asarray(a.numpy() if hasattr(a, "numpy") and backend.name != "numpy" else a)
    assert back.dtype == want
    assert back.shape == (2, 2)
    np.testing.assert_array_equal(back, x.astype(want))
    # a copy: changing the NumPy input does not change the converted array
    x[0, 0] = 7.0
    assert float(np.asarray(back)[0, 0]) == -1.5


def test_namespace_runs_the_same_math(backend):
    xp = backend.namespace
    x = backend.asarray(np.array([0.25, -0.5, 1.0]), "float32")
    value = xp.sum(xp.exp(xp.sin(x)))
    expected = np.sum(np.exp(np.sin([0.25, -0.5, 1.0])))
    assert float(np.asarray(value)) == pytest.approx(expected, rel=1e-6)


def test_handle_check_forwards_and_converts(backend):
    xp = backend.namespace
    x = np.linspace(-1.0, 1.0, 3).astype(np.float32)  # converted by check
    report = backend.check(lambda x: xp.sum(xp.tanh(x) ** 2), x, grad=lambda x: 0 * x)
    # the NumPy backend checks the (wrong) supplied gradient; the others their own autodiff
    expected = pg.Verdict.MISMATCH if backend.name == "numpy" else pg.Verdict.PASS
    assert report.verdict is expected
    assert report.to_dict()["details"]["backend"] == backend.name


def test_handle_assert_gradients_raises_the_report(backend):
    xp = backend.namespace
    x = backend.asarray(np.array([0.3, 0.7]), "float32")
    if backend.name == "numpy":
        f = lambda x: np.sum(x**3)  # noqa: E731
        with pytest.raises(pg.GradientCheckError, match="MISMATCH"):
            backend.assert_gradients(f, x, grad=lambda x: 2 * x**2)
        rep = backend.assert_gradients(f, x, grad=lambda x: 3 * x**2)
    else:
        rep = backend.assert_gradients(lambda x: xp.sum(x**3), x)
    assert rep.ok


def test_handle_names_and_errors():
    assert BackendHandle("tf").name == "tensorflow"
    assert BackendHandle("PyTorch").name == "torch"
    assert str(BackendHandle("np")) == "numpy"
    with pytest.raises(ValueError, match="unknown backend 'mxnet'; valid names: numpy, torch"):
        BackendHandle("mxnet")
    with pytest.raises(ValueError, match="unknown backend"):
        to_backend(np.ones(2), "fortran")
    with pytest.raises(InputTypeError, match="NumPy has no dtype 'float7'"):
        to_backend(np.ones(2), "numpy", "float7")


def test_unknown_dtype_is_an_input_type_error(backend):
    with pytest.raises(InputTypeError, match="has no dtype 'float7'"):
        backend.asarray(np.ones(2), "float7")


@pytest.mark.parametrize("name", ["torch", "jax", "tensorflow"])
def test_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    with pytest.raises(MissingBackendError, match=rf'pip install "polygrad-check\[{name}\]"'):
        to_backend(np.ones(2), name)
    with pytest.raises(MissingBackendError, match="not installed"):
        BackendHandle(name).namespace  # noqa: B018


def test_frameworks_installed_or_missing_with_the_extra():
    """Whatever this environment has: installed frameworks convert, missing ones name the extra.

    In the numpy-only nox session torch, jax and tensorflow take the second branch for real.
    """
    for name in BACKENDS:
        if framework_installed(name):
            assert np.asarray(to_backend(np.arange(3.0), name)).tolist() == [0.0, 1.0, 2.0]
        else:
            with pytest.raises(
                MissingBackendError, match=rf'pip install "polygrad-check\[{name}\]"'
            ):
                to_backend(np.arange(3.0), name)
            with pytest.raises(
                MissingBackendError, match=rf"pip install 'polygrad-check\[{name}\]'"
            ):
                pg.check(lambda x: x, np.ones(2), backend=name)


def test_docstring_examples_run():
    import doctest

    from polygrad.testing import _handles

    result = doctest.testmod(_handles)
    assert result.attempted >= 2 and result.failed == 0
