"""A conformance suite for backends: what every backend must get right.

A backend author (of a built-in backend or of one registered through the
``polygrad.backends`` entry points) subclasses :class:`BackendConformance`
in a pytest file, names the backend, and gives one hook, a function with a
planted wrong gradient rule written in their framework::

    import polygrad_autograd  # noqa: F401  (or rely on the entry point)
    from polygrad.testing.conformance import BackendConformance

    class TestAutogradConformance(BackendConformance):
        backend = "autograd"
        selected_from_arrays = False   # autograd differentiates NumPy arrays

        def wrong_rule(self):
            from autograd.extend import defvjp, primitive
            import autograd.numpy as anp

            @primitive
            def sin(x):
                return anp.sin(x)

            defvjp(sin, lambda ans, x: lambda g: 2.0 * anp.cos(x) * g)  # wrong by 2
            return sin

The tests check closed-form functions whose Jacobians are known by hand
(elementwise, a reduction, a matrix product, a kink, a complex input), in
float32 and float64: the backend's :class:`~polygrad.backends.base.Target`
must reproduce the hand Jacobian, :func:`polygrad.check` must say
``PASS`` (``NONSMOOTH`` at the kink, ``MISMATCH`` for the planted wrong rule),
and bad input (integer, NaN, a list of numbers) must raise polygrad's errors.

The functions are written once against the backend's NumPy-style
``namespace()`` (``sin``, ``exp``, ``log``, ``sum``, ``tanh``, ``matmul``,
``abs``, ``real``, ``conj``), so a backend must provide those names.
Importing this module imports pytest, and no framework.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ..backends import backend_class, canonical_name, select_backend
from ..backends.base import Supplied
from ..errors import InputTypeError, InputValueError
from ..report import Verdict
from ._handles import BackendHandle

__all__ = ["CASES", "BackendConformance", "ClosedFormCase"]

_A = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])


@dataclass(frozen=True)
class ClosedFormCase:
    """A function with its Jacobian written by hand.

    Attributes
    ----------
    name : str
        Test id.
    build : callable
        ``build(xp, const) -> f``: the function written against the namespace
        ``xp``; ``const(array)`` turns a NumPy constant into the backend's array
        (for closures).
    x : ndarray
        The point (float64; cast to the dtype under test).
    value : callable
        ``value(x) -> ndarray``: ``f(x)`` in NumPy, float64.
    jacobian : callable
        ``jacobian(x) -> ndarray`` of shape ``out.shape + x.shape``.
    expect : Verdict
        The verdict :func:`polygrad.check` must reach.
    """

    name: str
    build: Callable[[Any, Callable[[np.ndarray], Any]], Callable[..., Any]]
    x: np.ndarray
    value: Callable[[np.ndarray], np.ndarray]
    jacobian: Callable[[np.ndarray], np.ndarray]
    expect: Verdict = Verdict.PASS


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


CASES: tuple[ClosedFormCase, ...] = (
    ClosedFormCase(
        "elementwise",
        lambda xp, const: lambda x: xp.sin(x) * xp.exp(x),
        np.array([0.3, -0.7, 1.1]),
        lambda x: np.sin(x) * np.exp(x),
        lambda x: np.diag((np.cos(x) + np.sin(x)) * np.exp(x)),
    ),
    ClosedFormCase(
        "reduction",
        lambda xp, const: lambda x: xp.log(xp.sum(xp.exp(x))),
        np.array([0.2, -1.3, 0.9, 2.0]),
        lambda x: np.log(np.sum(np.exp(x))),
        _softmax,
    ),
    ClosedFormCase(
        "matmul",
        lambda xp, const: (lambda a: lambda x: xp.tanh(xp.matmul(a, x)))(const(_A)),
        np.array([0.4, -0.2, 0.1]),
        lambda x: np.tanh(_A @ x),
        lambda x: (1.0 - np.tanh(_A @ x) ** 2)[:, None] * _A,
    ),
)
"""The smooth closed-form cases, each checked in float32 and float64."""

KINK = ClosedFormCase(
    "kink",
    lambda xp, const: lambda x: xp.abs(x),
    np.array([0.0, 0.5, -1.0]),
    np.abs,
    lambda x: np.diag(np.sign(x)),
    Verdict.NONSMOOTH,
)
"""``|x|`` at a point with an entry at 0: left and right derivatives differ there."""

COMPLEX = ClosedFormCase(
    "complex",
    lambda xp, const: lambda z: xp.sum(xp.real(z * xp.conj(z))),
    np.array([0.5 - 1.0j, -0.25 + 0.75j]),
    lambda z: np.sum(np.abs(z) ** 2),
    lambda z: 2.0 * z,
)
"""``sum |z|^2`` of a complex input: a real output, checked through its real pairs; its
gradient in polygrad's (conjugate Wirtinger) convention is ``2 z``."""


class BackendConformance:
    """Subclass in a ``Test...`` class and set :attr:`backend`; pytest runs the rest.

    Attributes
    ----------
    backend : str
        The backend's registered name.
    selected_from_arrays : bool
        Whether :func:`polygrad.check` picks the backend from its arrays
        without ``backend=`` (false for a backend that works on another
        backend's arrays, as autograd works on NumPy's).
    complex_inputs : bool
        Whether the backend checks functions of complex inputs.
    rtol : float
        Relative tolerance of the float64 Target against the hand Jacobian.
    """

    backend: str = ""
    selected_from_arrays: bool = True
    complex_inputs: bool = True
    rtol: float = 1e-10

    def wrong_rule(self) -> Callable[..., Any] | None:
        """``sin(x)`` elementwise with a VJP rule that returns ``2 cos(x) g`` (wrong by 2).

        Written in the framework's own custom-gradient mechanism. Backends
        without autodiff return None: the suite then supplies the wrong
        derivative with ``jac=``.
        """
        return None

    # -- helpers ----------------------------------------------------------------------
    @property
    def handle(self) -> BackendHandle:
        return BackendHandle(self.backend)

    @property
    def autodiff(self) -> bool:
        return bool(backend_class(self.backend).supports_autodiff)

    def _check(self, case: ClosedFormCase, dtype: str, f: Any = None, **options: Any) -> Any:
        h = self.handle
        if f is None:
            f = case.build(h.namespace, lambda a: h.asarray(a, dtype))
        x = case.x.astype(dtype)
        if not self.autodiff and not any(k in options for k in ("grad", "jac", "vjp", "jvp")):
            options["jac"] = lambda x_: case.jacobian(np.asarray(x_, np.float64))
        return h.check(f, h.asarray(x, dtype), **options)

    # -- the suite ----------------------------------------------------------------------
    def test_registered(self) -> None:
        name = canonical_name(self.backend)
        assert name is not None, f"backend {self.backend!r} is not registered"
        assert self.handle.installed

    @pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
    def test_target_reproduces_the_hand_jacobian(self, case: ClosedFormCase) -> None:
        h = self.handle
        be = select_backend((), h.name)
        f = case.build(h.namespace, lambda a: h.asarray(a, "float64"))
        supplied = Supplied() if self.autodiff else Supplied(jac=case.jacobian)
        t = be.make_target(f, (h.asarray(case.x, "float64"),), (0,), supplied, 64)
        J = case.jacobian(case.x).reshape(t.m, t.n)
        np.testing.assert_allclose(t.x0, case.x.ravel(), rtol=0, atol=0)
        np.testing.assert_allclose(t.y0, np.ravel(case.value(case.x)), rtol=self.rtol)
        X = np.stack([case.x, case.x + 0.125])
        want = np.stack([np.ravel(case.value(case.x)), np.ravel(case.value(case.x + 0.125))])
        np.testing.assert_allclose(t.evaluate(X), want, rtol=self.rtol)
        if t.vjp is not None:
            np.testing.assert_allclose(t.vjp(np.eye(t.m)), J, rtol=self.rtol, atol=1e-14)
        if t.jvp is not None and t.forward_mode():
            np.testing.assert_allclose(t.jvp(np.eye(t.n)), J.T, rtol=self.rtol, atol=1e-14)
        assert t.vjp is not None or t.jvp is not None, "the target has neither VJP nor JVP"

    @pytest.mark.parametrize("dtype", ["float32", "float64"])
    @pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
    def test_correct_gradient_passes(self, case: ClosedFormCase, dtype: str) -> None:
        report = self._check(case, dtype)
        assert report.verdict == Verdict.PASS, str(report)
        assert report.ok

    def test_kink_is_nonsmooth(self) -> None:
        report = self._check(KINK, "float64")
        assert report.verdict == Verdict.NONSMOOTH, str(report)
        assert report.ok  # nonsmooth="allow", the default

    def test_planted_wrong_rule_is_a_mismatch(self) -> None:
        wrong = self.wrong_rule()
        if wrong is None:
            assert not self.autodiff, "a backend with autodiff must give wrong_rule()"
            f = SIN.build(self.handle.namespace, lambda a: a)
            report = self._check(SIN, "float64", f, jac=lambda x: 2.0 * SIN.jacobian(x))
        else:
            report = self._check(SIN, "float64", wrong)
        assert report.verdict == Verdict.MISMATCH, str(report)
        assert not report.ok

    def test_complex_input(self) -> None:
        if not self.complex_inputs:
            pytest.xfail(f"the {self.backend} backend does not check complex inputs")
        options = {} if self.autodiff else {"grad": COMPLEX.jacobian}
        report = self._check(COMPLEX, "complex128", **options)
        assert report.verdict == Verdict.PASS, str(report)
        assert report.ok

    def test_selected_from_its_arrays(self) -> None:
        h = self.handle
        chosen = select_backend((h.asarray(np.ones(3), "float64"),)).name
        if self.selected_from_arrays:
            assert chosen == h.name
        else:
            assert chosen != h.name  # named explicitly with backend=

    def test_integer_input_is_refused(self) -> None:
        with pytest.raises(InputTypeError, match="integer dtype"):
            self._check(CASES[0], "int64")

    def test_nan_input_is_refused(self) -> None:
        h = self.handle
        f = CASES[0].build(h.namespace, lambda a: a)
        x = h.asarray(np.array([0.1, np.nan, 0.3]), "float64")
        options = {} if self.autodiff else {"jac": CASES[0].jacobian}
        with pytest.raises(InputValueError, match="NaN or Inf"):
            h.check(f, x, **options)

    def test_list_of_numbers_is_refused(self) -> None:
        h = self.handle
        f = CASES[1].build(h.namespace, lambda a: a)
        with pytest.raises(InputTypeError, match="Python list of numbers"):
            h.check(f, [0.1, 0.2], backend=h.name, grad=_softmax)


SIN = ClosedFormCase(
    "sin",
    lambda xp, const: lambda x: xp.sin(x),
    np.array([0.3, -0.7, 1.1]),
    np.sin,
    lambda x: np.diag(np.cos(x)),
    Verdict.MISMATCH,
)
"""The planted wrong rule's function: ``sin`` whose rule says ``2 cos``."""
