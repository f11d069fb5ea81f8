"""Complex inputs and outputs: polygrad's gradient convention and each framework's.

The model
---------
A complex input ``z = a + i b`` with ``n`` entries is ``2n`` real inputs and a
complex output with ``m`` entries is ``2m`` real outputs: polygrad checks the
*realification* of ``f``, the real map ``(a, b) -> (Re f, Im f)``, whose
Jacobian is an ordinary real matrix. The reference is that real Jacobian
(central differences along real directions, or mp), so a function need not be
holomorphic to be checked.

In the flat vectors, a complex array of shape ``S`` becomes a real array of
shape ``S + (2,)``: index ``[..., 0]`` is the real part and ``[..., 1]`` the
imaginary part; entry names say which (``Im x[3]`` is flat ``x[3, 1]``, and
``Re f[2] / Im x[3]`` is ``∂ Re f[2] / ∂ Im x[3]``).

Complex outputs of real inputs
------------------------------
A function of real inputs with a complex output (``rfft``, ``stft``,
``polar``, ``view_as_complex``, ``eigvals``...) is checked the same way: the
complex output counts as the pair ``(Re f, Im f)`` of real outputs, and the
Jacobian is the real Jacobian of ``x -> (Re f, Im f)`` (for ``rfft`` of ``n``
points, ``∂ Re f_k/∂ x_j = cos(2πjk/n)``, ``∂ Im f_k/∂ x_j = -sin(2πjk/n)``).
Each backend makes the pair inside the framework, with the framework's own
``real``/``imag``, so the framework's autodiff applies its own convention; in
complex terms, weights ``u`` on ``Re f`` and ``v`` on ``Im f`` are the
cotangent ``u + i v`` in PyTorch and TensorFlow (``L = Re(conj(c)·f)``), and
``u - i v`` in JAX (``L = Re(c·f)``): :func:`from_polygrad` of ``u + i v``.
The report says "complex output checked as (real, imag) pairs"
(:data:`OUTPUT_CONVENTION`).

The convention
--------------
polygrad packs real VJPs and JVPs back into complex numbers:

* a cotangent ``u`` on a complex output is ``u_re + i u_im`` (the weights of
  ``Re f`` and ``Im f``), and the VJP it gives on a complex input is
  ``∂L/∂a + i ∂L/∂b`` where ``L = u_re·Re f + u_im·Im f``. For a real-valued
  ``f`` and ``u = 1`` this is the gradient ``∂f/∂a + i ∂f/∂b = 2 ∂f/∂z̄``
  (the conjugate Wirtinger convention): the direction of steepest ascent,
  ``6+8j`` for ``|z|²`` at ``3+4j``.
* a tangent ``v = v_a + i v_b`` gives the JVP ``d(Re f) + i d(Im f)``, the
  real-linear directional derivative.

PyTorch (``torch.autograd.grad``, ``torch.func.vjp``) and TensorFlow
(``tf.GradientTape.gradient``) return VJPs in this convention. JAX
(``jax.vjp``, ``jax.grad``) returns the conjugate: its VJP with cotangent
``c`` equals ``conj(polygrad VJP with cotangent conj(c))``, so ``jax.grad`` of
``|z|²`` at ``3+4j`` is ``6-8j`` (``2 ∂f/∂z``, which for a holomorphic ``f``
is ``2 f'(z)``... the complex derivative ``f'(z)`` itself with
``holomorphic=True``). All three agree with polygrad on JVPs. NumPy functions
supply ``grad=``/``vjp=``/``jvp=`` in polygrad's convention.

Since every framework differentiates the realified function with the real
chain rule, polygrad builds it inside the framework (the hooks
:meth:`~polygrad.backends.base.Backend.make_complex`,
:meth:`~polygrad.backends.base.Backend.complex_parts` and
:meth:`~polygrad.backends.base.Backend.stack_pair`) and checks it like any
real function; the framework's own complex convention is then applied
exactly where it would be in the user's code, and :func:`to_polygrad` /
:func:`from_polygrad` convert a framework's native complex VJP.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._names import argument_names, keep_signature, leaf_name
from ._pytree import flatten, unflatten
from .errors import InputTypeError

__all__ = [
    "CONJUGATE_WIRTINGER",
    "CONVENTIONS",
    "WIRTINGER",
    "OUTPUT_CONVENTION",
    "ComplexInfo",
    "from_polygrad",
    "name_pairs",
    "realify",
    "to_polygrad",
]

CONJUGATE_WIRTINGER = "conjugate-wirtinger"
"""VJP ``∂L/∂a + i ∂L/∂b`` (``2 ∂L/∂z̄`` for real ``L``): polygrad, PyTorch, TensorFlow."""
WIRTINGER = "wirtinger"
"""VJP ``∂L/∂a - i ∂L/∂b`` (``2 ∂L/∂z``), cotangents conjugated likewise: JAX."""

CONVENTIONS: dict[str, str] = {
    CONJUGATE_WIRTINGER: (
        "VJP = dL/da + i dL/db (= 2 dL/dz̄ for real L; polygrad's convention, no conversion)"
    ),
    WIRTINGER: (
        "VJP = dL/da - i dL/db (= 2 dL/dz for real L); converted to polygrad's by "
        "conjugating the cotangent and the result"
    ),
}
"""Convention name → what a framework's complex VJP is, and how polygrad converts it."""


def to_polygrad(vjp_value: Any, convention: str) -> np.ndarray:
    """Convert a framework's complex VJP to polygrad's convention.

    Parameters
    ----------
    vjp_value : array_like, complex
        The VJP as the framework returned it, for the cotangent
        ``from_polygrad(u, convention)``.
    convention : str
        A key of :data:`CONVENTIONS`.

    Returns
    -------
    ndarray, complex
        ``∂L/∂a + i ∂L/∂b`` for the cotangent ``u`` (same shape).

    Raises
    ------
    ValueError
        Unknown convention.
    """
    value = np.asarray(vjp_value)
    if convention == CONJUGATE_WIRTINGER:
        return value
    if convention == WIRTINGER:
        return np.conj(value)
    raise ValueError(f"unknown complex convention {convention!r}; known: {', '.join(CONVENTIONS)}")


def from_polygrad(cotangent: Any, convention: str) -> np.ndarray:
    """The cotangent to give a framework so that :func:`to_polygrad` of its VJP is polygrad's.

    Both conventions are their own inverse, so this is the same map as
    :func:`to_polygrad`.
    """
    return to_polygrad(cotangent, convention)


def _copies(backend: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Copies of the framework arrays in ``args``, so that a probing call cannot change them."""
    from ._pytree import tree_map

    def copy(leaf: Any) -> Any:
        if getattr(leaf, "dtype", None) is not None and backend.owns(leaf):
            try:
                return backend.from_numpy(np.asarray(backend.to_numpy(leaf)))
            except Exception:  # noqa: BLE001 - a leaf that cannot be copied is passed as is
                return leaf
        return leaf

    return tuple(tree_map(copy, a) for a in args)


def _is_complex_array(x: Any) -> bool:
    dt = getattr(x, "dtype", None)
    if dt is None:
        return isinstance(x, complex)
    flag = getattr(dt, "is_complex", None)  # torch and TensorFlow dtypes
    if isinstance(flag, bool):
        return flag
    try:
        return np.dtype(dt).kind == "c"
    except TypeError:
        return False


@dataclass
class ComplexInfo:
    """Which checked inputs and which outputs are complex, after :func:`realify`.

    Attributes
    ----------
    inputs : list of str
        Names (``"x"``, ``"arg1[0]"``...) of the complex checked leaves.
    outputs : int
        Number of complex output leaves.
    notes : list of str
        What the report should say about the realification.
    output_flags : list of bool
        Per output leaf, whether :func:`realify` turned it into real pairs.
    """

    inputs: list[str] = field(default_factory=list)
    outputs: int = 0
    notes: list[str] = field(default_factory=list)
    output_flags: list[bool] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.inputs) or self.outputs > 0


def realify(
    backend: Any,
    f: Callable[..., Any],
    args: tuple[Any, ...],
    argnums: tuple[int, ...],
    supplied: Any,
) -> tuple[Callable[..., Any], tuple[Any, ...], Any, ComplexInfo]:
    """The real function of real arguments that polygrad checks in place of a complex ``f``.

    Every complex leaf of ``args[argnums]`` (shape ``S``) is replaced by a real
    array of shape ``S + (2,)`` holding its real and imaginary parts; every
    complex output leaf likewise. Nothing changes when nothing is complex.
    With real inputs, ``f`` is called once (on copies) to find complex outputs
    only for a backend without autodiff (NumPy, whose ``vjp=``/``jvp=`` are
    converted here); an autodiff backend makes its complex outputs real pairs
    itself, and ``f`` is returned untouched.

    Parameters
    ----------
    backend : Backend
        The framework's backend (its ``complex_parts``, ``make_complex`` and
        ``stack_pair`` build the realified function in the framework).
    f : callable
        The user's function.
    args : tuple
        Its arguments (arrays of the backend's framework).
    argnums : tuple of int
        The checked arguments.
    supplied : Supplied
        User derivatives (NumPy) in polygrad's convention; converted to the
        real ones.

    Returns
    -------
    f_real, args_real, supplied_real, info
        The realified function, arguments and derivatives, and what was complex.

    Raises
    ------
    InputTypeError
        ``jac=`` with complex inputs or outputs (pass ``vjp=``/``jvp=``, or
        ``grad=`` for a real-valued function).
    InputValueError
        A complex input contains NaN or Inf.
    """
    info = ComplexInfo()
    new_args, flags, treedefs = _realified_inputs(backend, f, args, argnums, info)
    if not info.inputs and backend.supports_autodiff:
        # real inputs: an autodiff backend itself sees a complex output as its real pairs
        # (Re, Im), made with the framework's real/imag, so f is passed on untouched
        return f, args, supplied, info
    out_flags = _complex_outputs(backend, f, args, info)
    if out_flags is None:
        return f, args, supplied, info  # the backend reports the failing call
    info.outputs = sum(out_flags)
    info.output_flags = out_flags
    if not info.inputs and not info.outputs:
        return f, args, supplied, info

    def to_complex(real_args: tuple[Any, ...]) -> tuple[Any, ...]:
        return _to_complex(backend, argnums, flags, treedefs, real_args)

    def f_real(*real_args: Any) -> Any:
        return _f_real(backend, f, to_complex, out_flags, *real_args)

    keep_signature(f_real, f, len(args))  # reports name entries by f's arguments
    f_real.__name__ = getattr(f, "__name__", "f")
    f_real.__doc__ = getattr(f, "__doc__", None)
    if info.inputs:
        info.notes.append(
            "complex input(s) "
            + ", ".join(info.inputs)
            + " checked as (real, imag) pairs (entries Re x[k], Im x[k]); "
            "gradients in polygrad's convention dL/da + i dL/db"
        )
    real_supplied = _real_supplied(supplied, to_complex, flags, argnums, info.outputs > 0)
    return f_real, tuple(new_args), real_supplied, info


def _realified_inputs(
    backend: Any, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...],
    info: ComplexInfo,
) -> tuple[list[Any], dict[int, list[bool]], dict[int, Any]]:  # fmt: skip
    """The arguments with every complex checked leaf as a real ``S + (2,)`` pair array, which
    leaves were complex, and each checked argument's tree structure; ``info.inputs`` names
    the complex leaves.

    Raises
    ------
    InputValueError
        A complex input contains NaN or Inf.
    """
    from .backends.base import validate_float_array

    flags: dict[int, list[bool]] = {}
    treedefs: dict[int, Any] = {}
    new_args = list(args)
    arg_names = argument_names(f, len(args))
    for i in argnums:
        leaves, paths, td = flatten(args[i])
        treedefs[i] = td
        flags[i] = [_is_complex_array(leaf) for leaf in leaves]
        if not any(flags[i]):
            continue
        out = []
        for leaf, path, is_c in zip(leaves, paths, flags[i], strict=True):
            if not is_c:
                out.append(leaf)
                continue
            name = leaf_name(arg_names, i, path, argnums)
            host = np.asarray(backend.to_numpy(leaf))
            validate_float_array(host.real, f"{name} (real part)")
            validate_float_array(host.imag, f"{name} (imaginary part)")
            info.inputs.append(name)
            out.append(backend.stack_pair(*backend.complex_parts(leaf)))
        new_args[i] = unflatten(td, out)
    return new_args, flags, treedefs


def _complex_outputs(
    backend: Any, f: Callable[..., Any], args: tuple[Any, ...], info: ComplexInfo
) -> list[bool] | None:
    """Which output leaves of ``f`` (called once, on copies) are complex; None where the call
    raises with real inputs (the backend reports it later)."""
    with warnings.catch_warnings():  # complex or not does not depend on JAX's x64 setting
        warnings.simplefilter("ignore")
        try:
            out = f(*_copies(backend, args))
        except Exception:
            if info.inputs:
                raise
            return None
    return [_is_complex_array(o) for o in flatten(out)[0]]


def _to_complex(
    backend: Any, argnums: tuple[int, ...], flags: dict[int, list[bool]],
    treedefs: dict[int, Any], real_args: tuple[Any, ...],
) -> tuple[Any, ...]:  # fmt: skip
    """The user's complex arguments from their realified form."""
    full = list(real_args)
    for i in argnums:
        if not any(flags[i]):
            continue
        leaves = flatten(real_args[i])[0]
        full[i] = unflatten(treedefs[i], [
            backend.make_complex(leaf[..., 0], leaf[..., 1]) if c else leaf
            for leaf, c in zip(leaves, flags[i], strict=True)
        ])  # fmt: skip
    return tuple(full)


def _f_real(
    backend: Any, f: Callable[..., Any], to_complex: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    out_flags: list[bool], *real_args: Any,
) -> Any:  # fmt: skip
    """``f`` on realified arguments, its complex outputs as real pairs."""
    out = f(*to_complex(real_args))
    if not any(out_flags):
        return out
    leaves, _, td = flatten(out)
    return unflatten(td, [
        backend.stack_pair(*backend.complex_parts(o)) if c else o
        for o, c in zip(leaves, out_flags, strict=True)
    ])  # fmt: skip


OUTPUT_CONVENTION = (
    "complex output checked as (real, imag) pairs: the Jacobian is that of the real map "
    "x -> (Re f, Im f), entries named Re f[k] and Im f[k]; a VJP with weights u on Re f "
    "and v on Im f is the framework's VJP for the complex cotangent u + i v (PyTorch, "
    "TensorFlow, NumPy vjp=) or u - i v (JAX)"
)
"""The report's note on complex outputs (the same for real and complex inputs)."""


def name_pairs(target: Any, info: ComplexInfo) -> None:
    """Mark the complex inputs and outputs of ``target`` as (re, im) pairs, and note the convention.

    Entry names then read ``Re f[3] / Im x[0]`` instead of ``f[3, 0] / x[0, 1]``.

    Parameters
    ----------
    target : Target
        Built by a backend from the function :func:`realify` returned; its
        layouts are replaced (the flat vectors do not change). A complex output
        of a real input is already marked by the backend.
    info : ComplexInfo
        What :func:`realify` made real.
    """
    ins = target.input_layout
    if info.inputs:
        target.input_layout = ins.with_pairs([leaf.name in info.inputs for leaf in ins.leaves])
    outs = target.output_layout
    if info.outputs and len(info.output_flags) == len(outs.leaves):
        target.output_layout = outs.with_pairs(info.output_flags)
    if any(leaf.pair for leaf in target.output_layout.leaves):
        if OUTPUT_CONVENTION not in target.notes:
            target.notes.append(OUTPUT_CONVENTION)


def _real_supplied(
    supplied: Any,
    to_complex: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    flags: dict[int, list[bool]],
    argnums: tuple[int, ...],
    complex_output: bool,
) -> Any:
    """User derivatives in polygrad's complex convention → derivatives of the realified map."""
    from .backends.base import Supplied

    if supplied is None or not supplied.given():
        return supplied
    if supplied.jac is not None and any(any(v) for v in flags.values()):
        raise InputTypeError(
            "jac= is not defined for complex inputs or outputs (a non-holomorphic function "
            "has no complex Jacobian); pass vjp= or jvp= in polygrad's convention, or grad= "
            "(dL/da + i dL/db) for a real-valued function"
        )
    if supplied.jac is not None:
        raise InputTypeError(
            "jac= is not taken for a complex output; pass jvp= (the complex J v) or vjp= "
            "(the cotangent u + i v weighs Re f by u and Im f by v: the VJP is "
            "u·∂Re f + v·∂Im f, e.g. Re(conj(c) @ J) for a complex Jacobian J)"
        )

    def real_input_like(value: Any) -> Any:
        return _real_input_like(value, argnums, flags)

    grad = vjp = jvp = None
    if supplied.grad is not None:
        user_grad = supplied.grad

        def grad(*real_args: Any) -> Any:
            return real_input_like(user_grad(*to_complex(real_args)))

    if supplied.vjp is not None:
        user_vjp = supplied.vjp

        def vjp(cotangent: Any, *real_args: Any) -> Any:
            c = np.asarray(cotangent)
            cot = c[..., 0] + 1j * c[..., 1] if complex_output else c
            return real_input_like(user_vjp(cot, *to_complex(real_args)))

    if supplied.jvp is not None:
        user_jvp = supplied.jvp

        leaf_flags = [c for i in argnums for c in flags[i]]

        def jvp(tangents: Any, *real_args: Any) -> Any:
            ts = tuple(
                t[..., 0] + 1j * t[..., 1] if c else t
                for t, c in zip(tangents, leaf_flags, strict=True)
            )
            return _real_output_like(user_jvp(ts, *to_complex(real_args)))

    return Supplied(grad=grad, jac=None, vjp=vjp, jvp=jvp)


def _real_input_like(value: Any, argnums: tuple[int, ...], flags: dict[int, list[bool]]) -> Any:
    """A derivative shaped like the checked complex inputs → its real pairs."""
    parts = value if len(argnums) > 1 else (value,)
    if len(argnums) > 1 and (not isinstance(value, (tuple, list)) or len(value) != len(argnums)):
        return value  # the backend reports the wrong structure
    out = []
    for part, i in zip(parts, argnums, strict=True):
        leaves, _, td = flatten(part)
        if len(leaves) != len(flags[i]):
            out.append(part)
            continue
        out.append(unflatten(td, [
            np.stack([np.real(leaf), np.imag(leaf)], axis=-1) if c else leaf
            for leaf, c in zip(leaves, flags[i], strict=True)
        ]))  # fmt: skip
    return tuple(out) if len(argnums) > 1 else out[0]


def _real_output_like(value: Any) -> Any:
    """A derivative shaped like the outputs, complex leaves as real pairs."""
    arr = np.asarray(value)
    if np.iscomplexobj(arr):
        return np.stack([arr.real, arr.imag], axis=-1)
    return arr
