"""One NumPy test input, converted to each framework: ``to_backend`` and ``BackendHandle``.

Nothing here imports a framework until a conversion or a namespace for that
framework is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .._install import pip_install
from ..backends import backend_class, backend_entries, get_backend
from ..backends import canonical_name as _registered_name
from ..errors import MissingBackendError

if TYPE_CHECKING:
    from ..report import Report

__all__ = ["BACKENDS", "BackendHandle", "extra_of", "framework_installed", "to_backend"]

BACKENDS: tuple[str, ...] = ("numpy", "torch", "jax", "tensorflow")
"""The built-in backends, in the order tests are parametrised. Backends of other
packages are found by name too (see :func:`polygrad.backends.register_backend`)."""

_DERIVATIVE_OPTIONS = ("grad", "jac", "vjp", "jvp")


def canonical_name(name: str) -> str:
    """``"tf"`` → ``"tensorflow"``, ``"pytorch"`` → ``"torch"``; other names lower-cased.

    Raises
    ------
    ValueError
        The name is not a registered backend (built-in, registered or found
        through the ``polygrad.backends`` entry points) or an alias of one.
    """
    key = _registered_name(name)
    if key is None:
        valid = ", ".join(backend_entries())
        raise ValueError(f"unknown backend {name!r}; valid names: {valid}")
    return key


def extra_of(name: str) -> str:
    """The install command that provides backend ``name``.

    E.g. ``pip install "polygrad-check[jax]"``; without an extra for NumPy; for
    a backend of another package without a polygrad extra, ``pip install <its framework>``.
    """
    entry = backend_entries()[canonical_name(name)]
    if entry.extra or not entry.module:
        return pip_install(entry.extra, quote='"')
    return f"pip install {entry.module}"


def framework_installed(name: str) -> bool:
    """Whether the framework of backend ``name`` is installed (it is not imported).

    Raises
    ------
    ValueError
        Unknown backend name.
    """
    return backend_entries()[canonical_name(name)].installed


def _instance(name: str) -> Any:
    try:
        return get_backend(name)
    except ImportError as exc:
        raise MissingBackendError(
            f"backend {name!r} is not installed; install it with: {extra_of(name)}"
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

    The conversion is the backend's own :meth:`~polygrad.backends.base.Backend.asarray`,
    so it works for every registered backend.

    Parameters
    ----------
    array : array_like
        The test input, any shape.
    name : str
        The backend: ``"numpy"``, ``"torch"``, ``"jax"``, ``"tensorflow"`` (aliases
        ``"tf"``, ``"pytorch"``, ``"np"`` are accepted) or a registered one.
    dtype : str or dtype, optional
        The dtype of the result, e.g. ``"float32"``, ``"float64"``, ``"bfloat16"``
        (for the frameworks that have it). Default: the input's NumPy dtype.

    Returns
    -------
    numpy.ndarray, torch.Tensor, jax.Array, tf.Tensor...
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
    backend = _instance(canonical_name(name))
    return backend.asarray(array, None if dtype is None else _dtype_name(dtype))


def _namespace(name: str) -> ModuleType:
    return _instance(name).namespace()  # type: ignore[no-any-return]


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
        ``"numpy"``, ``"torch"``, ``"jax"``, ``"tensorflow"`` or another
        registered backend.
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
        return bool(backend_class(self.name).supports_autodiff)

    @property
    def namespace(self) -> ModuleType:
        """The framework's NumPy-style math module (the backend's ``namespace()``).

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
