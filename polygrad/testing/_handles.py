"""One NumPy test input, converted to each framework: ``to_backend`` and ``BackendHandle``.

Nothing here imports a framework until a conversion or a namespace for that
framework is asked for.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .._install import pip_install
from ..backends import _ALIASES, BACKEND_MODULES
from ..errors import InputTypeError, MissingBackendError

if TYPE_CHECKING:
    from ..report import Report

__all__ = ["BACKENDS", "BackendHandle", "extra_of", "framework_installed", "to_backend"]

BACKENDS: tuple[str, ...] = tuple(BACKEND_MODULES)
"""The backend names, in the order tests are parametrised: numpy, torch, jax, tensorflow."""

_DERIVATIVE_OPTIONS = ("grad", "jac", "vjp", "jvp")


def canonical_name(name: str) -> str:
    """``"tf"`` → ``"tensorflow"``, ``"pytorch"`` → ``"torch"``; other names lower-cased.

    Raises
    ------
    ValueError
        The name is not one of :data:`BACKENDS` (or an alias of one).
    """
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in BACKEND_MODULES:
        raise ValueError(f"unknown backend {name!r}; valid names: {', '.join(BACKENDS)}")
    return key


def extra_of(name: str) -> str:
    """The install command that provides backend ``name``.

    E.g. ``pip install "polygrad-check[jax]"``; without an extra for NumPy.
    """
    extra = BACKEND_MODULES[canonical_name(name)][1]
    return pip_install(extra, quote='"')


def framework_installed(name: str) -> bool:
    """Whether the framework of backend ``name`` is installed (it is not imported).

    Raises
    ------
    ValueError
        Unknown backend name.
    """
    module = BACKEND_MODULES[canonical_name(name)][2]
    return not module or importlib.util.find_spec(module) is not None


def _import_framework(name: str) -> ModuleType:
    module = BACKEND_MODULES[name][2] or "numpy"
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingBackendError(
            f"backend {name!r} needs {module!r}, which is not installed; install it with: "
            f"{extra_of(name)}"
        ) from exc


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype
    try:
        return np.dtype(dtype).name
    except TypeError:
        name = getattr(dtype, "name", None) or str(dtype).rpartition(".")[2]
        return str(name).replace("torch.", "")


def to_backend(array: Any, name: str, dtype: Any = None) -> Any:
    """Convert a NumPy array (or anything ``np.asarray`` accepts) to backend ``name``'s array.

    Parameters
    ----------
    array : array_like
        The test input, any shape.
    name : {"numpy", "torch", "jax", "tensorflow"}
        The target framework (aliases ``"tf"``, ``"pytorch"``, ``"np"`` are accepted).
    dtype : str or dtype, optional
        The dtype of the result, e.g. ``"float32"``, ``"float64"``, ``"bfloat16"``
        (for the frameworks that have it). Default: the input's NumPy dtype.

    Returns
    -------
    numpy.ndarray, torch.Tensor, jax.Array or tf.Tensor
        A copy with the same shape and values (rounded to ``dtype``). A JAX
        float64 array is made under ``jax.enable_x64``, so it is float64 even
        when the global ``jax_enable_x64`` flag is off (the flag is not changed).
        :func:`polygrad.check` evaluates it in float64; code of your own that
        reduces it outside the check (``jnp.sum``) computes in float32 unless
        the flag is on, as JAX always does.

    Raises
    ------
    ValueError
        Unknown backend name.
    InputTypeError
        The framework has no such dtype.
    MissingBackendError
        The framework is not installed; the message names the extra to install.

    Examples
    --------
    >>> import numpy as np
    >>> from polygrad.testing import to_backend
    >>> to_backend(np.arange(3.0), "numpy", "float32").dtype
    dtype('float32')
    """
    key = canonical_name(name)
    x = np.array(array, copy=True)
    dt = None if dtype is None else _dtype_name(dtype)
    if key == "numpy":
        try:
            return x.astype(np.dtype(dt)) if dt is not None else x
        except TypeError as exc:
            raise InputTypeError(f"NumPy has no dtype {dt!r}") from exc
    fw = _import_framework(key)
    if key == "jax":
        import jax.numpy as jnp

        try:
            target = np.dtype(jnp.dtype(dt)) if dt is not None else x.dtype
        except TypeError as exc:
            raise InputTypeError(f"jax has no dtype {dt!r}") from exc
        if target.itemsize == 8:
            with fw.enable_x64(True):
                return jnp.asarray(x, dtype=target)
        return jnp.asarray(x, dtype=target)
    attr = dt if dt is not None else x.dtype.name
    if key == "torch":
        fw_dtype = getattr(fw, attr, None)
        if not isinstance(fw_dtype, fw.dtype):
            raise InputTypeError(f"torch has no dtype {attr!r}")
        return fw.tensor(x).to(fw_dtype)
    try:
        tf_dtype = fw.as_dtype(attr)
    except TypeError as exc:
        raise InputTypeError(f"tensorflow has no dtype {attr!r}") from exc
    return fw.constant(x, dtype=tf_dtype)


def _namespace(name: str) -> ModuleType:
    fw = _import_framework(name)
    if name == "jax":
        import jax.numpy as jnp

        return jnp
    if name == "tensorflow":
        return fw.experimental.numpy  # NumPy-style functions on tf.Tensor, differentiable
    return fw


@dataclass(frozen=True)
class BackendHandle:
    """One framework, as a test sees it: convert inputs, do math, check gradients.

    The value of the ``backend`` fixture of the polygrad pytest plugin. With
    it, one test body checks the same math in every framework::

        def test_logsumexp(backend):
            xp = backend.namespace
            x = backend.asarray(np.linspace(-2, 2, 5), "float32")
            backend.assert_gradients(lambda x: xp.log(xp.sum(xp.exp(x))), x, grad=np_grad)

    Attributes
    ----------
    name : str
        ``"numpy"``, ``"torch"``, ``"jax"`` or ``"tensorflow"``.
    """

    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", canonical_name(self.name))

    def __str__(self) -> str:
        return self.name

    @property
    def installed(self) -> bool:
        """Whether the framework is installed (checked without importing it)."""
        return framework_installed(self.name)

    @property
    def autodiff(self) -> bool:
        """Whether the framework differentiates functions itself (all but NumPy)."""
        return self.name != "numpy"

    @property
    def namespace(self) -> ModuleType:
        """The framework's NumPy-style math module.

        ``numpy``, ``torch``, ``jax.numpy`` and ``tf.experimental.numpy`` (whose
        functions take and return ``tf.Tensor``). Functions such as ``sum``,
        ``sin``, ``exp``, ``log``, ``tanh``, ``where`` and ``maximum`` have the
        same names in all four; call them as functions (``xp.sum(x)``), not as
        methods. Each module keeps its own rules for mixing Python scalars and
        arrays (``torch.maximum`` needs two tensors, for instance).

        Raises
        ------
        MissingBackendError
            The framework is not installed.
        """
        return _namespace(self.name)

    def asarray(self, array: Any, dtype: Any = None) -> Any:
        """Convert a NumPy test input to this framework; see :func:`to_backend`."""
        return to_backend(array, self.name, dtype)

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.autodiff:
            # the framework's own autodiff is what is checked; a NumPy derivative is not used
            for key in _DERIVATIVE_OPTIONS:
                options.pop(key, None)
        options.setdefault("backend", self.name)
        if "cache" not in options:  # the pytest plugin's reference cache, if any
            from ..refcache import session_default

            options["cache"] = session_default()
        return options

    def _args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(self.asarray(a) if isinstance(a, np.ndarray) else a for a in args)

    def check(self, f: Callable[..., Any], *args: Any, **options: Any) -> Report:
        """:func:`polygrad.check` in this framework.

        NumPy arrays among ``args`` (top level only) are converted with
        :meth:`asarray`, keeping their dtype. The NumPy derivative options
        ``grad``, ``jac``, ``vjp`` and ``jvp`` are passed on for the NumPy
        backend only (it has no autodiff); the other backends check their own
        autodiff and ignore them.

        Returns
        -------
        Report

        Raises
        ------
        MissingBackendError
            The framework is not installed.
        TypeError
            NumPy backend without any of ``grad``/``jac``/``vjp``/``jvp``.
        """
        from ..check import check

        return check(f, *self._args(args), **self._options(dict(options)))

    def assert_gradients(self, f: Callable[..., Any], *args: Any, **options: Any) -> Report:
        """:func:`polygrad.assert_gradients` in this framework (arguments as :meth:`check`).

        Raises
        ------
        GradientCheckError
            The check did not pass; the message is the full text report.
        """
        __tracebackhide__ = True  # noqa: F841 - pytest: show the report, not this frame
        from ..check import assert_gradients

        return assert_gradients(f, *self._args(args), **self._options(dict(options)))
