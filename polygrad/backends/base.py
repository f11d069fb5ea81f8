"""The backend interface: what a framework must provide to the numerical core.

A backend turns a user's function and arguments into a :class:`Target`: a set
of plain callables on NumPy ``float64`` arrays (and, where possible, on
mpmath numbers). The numerical core (:mod:`polygrad.reference`,
:mod:`polygrad.check`) only ever sees a :class:`Target`; it never imports a
framework and branches on capabilities (``Target.evaluate64 is None``,
``Backend.supports_autodiff``...), never on a backend's name.

Shapes used throughout (``n`` = number of checked input scalars, ``m`` =
number of output scalars, ``B``/``k`` = batch sizes):

* ``evaluate(X)``: ``X`` is ``(B, n)`` float64 → ``(B, m)`` float64, the
  function evaluated in the working dtype (rows of ``X`` are rounded to it).
* ``evaluate64(X)``: the same with inputs and, where possible, parameters
  promoted to float64.
* ``vjp(U)``: cotangents ``U`` ``(k, m)`` → ``(k, n)`` = ``U @ J``.
* ``jvp(V)``: tangents ``V`` ``(k, n)`` → ``(k, m)`` = ``V @ J.T``.
* ``evaluate_mp(x0, dx, dps)``: the function at the one point ``x0 + dx``
  (float64 ``(n,)`` each; the sum is formed exactly) evaluated on mpmath
  numbers at ``dps`` decimal digits → ``(m,)`` object array.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._install import pip_install
from ..errors import InputTypeError, InputValueError, MissingBackendError
from ..mpexec.kinks import recording_kinks

__all__ = [
    "building_a_gradient_target",
    "gradient_target",
    "Backend",
    "Leaf",
    "Layout",
    "Supplied",
    "Target",
    "BatchFn",
    "change_under_a_move",
    "chunked",
    "computed_in_note",
    "dtype_eps",
    "narrowest_input_dtype",
    "not_an_array_message",
    "dtype_tiny",
    "numpy_dtype",
    "validate_float_array",
]

BatchFn = Callable[[np.ndarray], np.ndarray]
"""A callable mapping a ``(B, a)`` float64 array to a ``(B, b)`` float64 array."""


@dataclass(frozen=True)
class Leaf:
    """One checked input array inside the flat vector ``x``.

    Attributes
    ----------
    name : str
        Human-readable name, e.g. ``"x"`` or ``"arg1['w']"``.
    shape : tuple of int
        The array's shape.
    offset : int
        Position of its first element in the flat vector.
    pair : bool
        The leaf is a complex array seen as real pairs: its last axis (length
        2) holds the real and imaginary parts, and entries are named
        ``Re x[3]`` and ``Im x[3]`` (see :mod:`polygrad.complex`).
    """

    name: str
    shape: tuple[int, ...]
    offset: int
    pair: bool = False

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class Layout:
    """How checked inputs (or outputs) map onto a flat vector."""

    leaves: tuple[Leaf, ...]

    @property
    def size(self) -> int:
        return sum(leaf.size for leaf in self.leaves)

    @classmethod
    def from_shapes(
        cls,
        names: Sequence[str],
        shapes: Sequence[tuple[int, ...]],
        pairs: Sequence[bool] | None = None,
    ) -> Layout:
        """Leaves named ``names`` with ``shapes``, in order; ``pairs`` marks (re, im) leaves."""
        leaves, off = [], 0
        flags = [False] * len(names) if pairs is None else list(pairs)
        for name, shape, pair in zip(names, shapes, flags, strict=True):
            leaf = Leaf(name, tuple(int(s) for s in shape), off, bool(pair))
            leaves.append(leaf)
            off += leaf.size
        return cls(tuple(leaves))

    def name_of(self, flat_index: int) -> str:
        """Name of the scalar at ``flat_index``, e.g. ``"x[3, 1]"`` (``"Im z[3]"`` for a pair)."""
        for leaf in self.leaves:
            if leaf.offset <= flat_index < leaf.offset + leaf.size:
                if leaf.shape == ():
                    return leaf.name
                return _scalar_name(leaf, np.unravel_index(flat_index - leaf.offset, leaf.shape))
        raise IndexError(flat_index)

    def names(self) -> list[str]:
        """The names of every scalar, in flat order (:meth:`name_of` of each index, in one
        pass: a full check names ``n m`` entries)."""
        return [
            name
            for leaf in self.leaves
            for name in (
                [leaf.name]
                if leaf.shape == ()
                else [_scalar_name(leaf, idx) for idx in np.ndindex(*leaf.shape)]
            )
        ]

    def with_pairs(self, pairs: Sequence[bool]) -> Layout:
        """The same layout with the leaves flagged in ``pairs`` marked as (re, im) pairs."""
        return Layout(
            tuple(
                Leaf(leaf.name, leaf.shape, leaf.offset, leaf.pair or bool(p))
                for leaf, p in zip(self.leaves, pairs, strict=True)
            )
        )

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Split a flat ``(..., n)`` array into arrays of the leaves' shapes."""
        lead = flat.shape[:-1]
        return [
            flat[..., leaf.offset : leaf.offset + leaf.size].reshape(lead + leaf.shape)
            for leaf in self.leaves
        ]


@dataclass
class Supplied:
    """Derivatives supplied by the user (for functions without autodiff).

    Exactly one may be given. Each is called with the function's full
    argument list (NumPy arrays, in the dtype being checked):

    * ``grad(*args)``: gradient of a scalar function; an array shaped like the
      checked argument, or a tuple of them when several are checked;
    * ``jac(*args)``: Jacobian shaped ``out.shape + in.shape`` (tuple for
      several checked arguments);
    * ``vjp(cotangent, *args)``: ``uᵀJ``, shaped like the checked argument(s);
    * ``jvp(tangents, *args)``: ``J v`` shaped like the output; ``tangents`` is
      a tuple with one array per checked argument.
    """

    grad: Callable[..., Any] | None = None
    jac: Callable[..., Any] | None = None
    vjp: Callable[..., Any] | None = None
    jvp: Callable[..., Any] | None = None

    def given(self) -> list[str]:
        return [k for k in ("grad", "jac", "vjp", "jvp") if getattr(self, k) is not None]


@dataclass
class Target:
    """A function reduced to flat float64 NumPy callables for the numerical core.

    Attributes
    ----------
    x0 : ndarray, shape (n,), float64
        The checked inputs, flattened; exactly the user's working-dtype values.
    y0 : ndarray, shape (m,), float64
        The output at ``x0`` evaluated in the working dtype.
    working_dtype : str
        Name of the user's floating dtype (``"float32"``, ``"bfloat16"``...).
    eps : float
        Machine epsilon of the working dtype (spacing of numbers near 1).
    evaluate : BatchFn
        ``(B, n) → (B, m)``, in the working dtype.
    evaluate64 : BatchFn or None
        ``(B, n) → (B, m)``, promoted to float64; None when impossible.
    vjp, vjp64 : BatchFn or None
        ``(k, m) → (k, n)``: ``U @ J`` in the working dtype / in float64.
    jvp, jvp64 : BatchFn or None
        ``(k, n) → (k, m)``: ``V @ J.T`` in the working dtype / in float64.
    evaluate_mp : callable or None
        ``(x0: ndarray (n,), dx: ndarray (n,), dps: int) → object ndarray (m,)``
        of mpmath numbers: the function at ``x0 + dx``, or None.
    evaluate_quad : BatchFn or None
        ``(B, n) → (B, m)`` on IEEE binary128 arrays (numpy-quaddtype's
        ``QuadPrecDType``): the function run at quad precision, every row of the batch
        in one call; or None (see ``quad_unavailable_reason``, and
        :mod:`polygrad.reference.quad`). Built by the deferred ``"quad"`` work.
    quad_unavailable_reason : str or None
        Why a backend that can run a function on quad arrays could not run this one
        (numpy-quaddtype not installed, an operation without a quad loop, a value
        returned in another dtype); None where it did, or where the backend has no
        quad tier at all.
    vjp_mp : callable or None
        ``(U: ndarray (k, m), dps: int) → object ndarray (k, n)`` of mpmath
        numbers: ``U @ J`` as the code's own rule computes it (the framework's
        VJP program, or a supplied NumPy rule), re-executed at ``x0`` on mpmath
        numbers at ``dps`` digits; or None. It tells a rule that is exact but
        rounds badly in float64 from a wrong one (see :meth:`rule_mp_mode`).
    input_layout, output_layout : Layout
        Names and shapes of the checked inputs and of the outputs.
    backend : str
        Name of the backend that built the target.
    notes : list of str
        Facts the report should mention (why float64 or mp is unavailable...).
    mode_notes : dict of str to list of str
        For an autodiff mode (``"rev"``, ``"fwd"``) whose rules failed or are
        ignored, the notes saying so (each also in ``notes``); see
        :meth:`note_unavailable`.
    deferred : dict
        Work a backend leaves until it is needed, each ``(target) -> None``:
        ``"forward"`` tests that ``jvp``/``jvp64`` work (and sets them to None,
        with a note, if not), run by :meth:`forward_mode`; ``"reverse"`` does the
        same for ``vjp``/``vjp64``, run by :meth:`reverse_mode`; ``"mp"`` sets
        ``evaluate_mp`` (or ``mp_unavailable_reason``), run by :meth:`mp_mode`;
        ``"rule_mp"`` sets ``vjp_mp``, run by :meth:`rule_mp_mode`; ``"quad"`` sets
        ``evaluate_quad`` (or ``quad_unavailable_reason``), run by :meth:`quad_mode`.
        A float32 reverse-mode check then never pays for forward mode's first
        pass or for capturing the mp graph.
    intermediate_kinks : callable or None
        ``() -> bool or None``: whether an operation of ``f`` sits at its kink at the
        point (see :meth:`intermediates_at_a_kink`); None where the backend cannot tell.
    custom_rules : callable or None
        ``() -> bool``: whether ``f`` holds custom gradient rules whose forward
        operations its mp interpreter runs inline (a ``torch.autograd.Function``), so
        that a kink among them cannot be told from a kink autodiff differentiates.
    working_mp_value : callable or None
        ``(dps: int) -> object ndarray (m,) or None``: ``f`` at ``x0`` on mpmath
        numbers run as the working-dtype program (its constants as the working dtype
        computes them: ``finfo(x.dtype).eps``), for a working dtype narrower than
        float64: PyTorch's ``evaluate_mp`` (the captured working program), JAX's
        ``f`` traced again in the working dtypes (its ``evaluate_mp`` is traced in
        float64); None where no such program runs (TensorFlow's float64 run is its
        working graph rewritten, NumPy's code reads no dtype on mpmath numbers). Tells
        code that reads its dtype (see
        :func:`polygrad.pipeline.dtype_dependence.measured_apart`).
    symmetric_reads : callable or None
        ``() -> dict or None``: for each checked leaf (by position in
        ``input_layout``) whose value reaches an operation of ``f``'s captured program
        documented to read a symmetric (Hermitian) matrix (a Cholesky factorization, a
        symmetric eigen-decomposition), the names of those operations; None where the
        program cannot be captured. See :meth:`symmetric_input_operations`.
    """

    x0: np.ndarray
    y0: np.ndarray
    working_dtype: str
    eps: float
    evaluate: BatchFn
    input_layout: Layout
    output_layout: Layout
    backend: str
    evaluate64: BatchFn | None = None
    vjp: BatchFn | None = None
    vjp64: BatchFn | None = None
    jvp: BatchFn | None = None
    jvp64: BatchFn | None = None
    evaluate_mp: Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None = None
    vjp_mp: Callable[[np.ndarray, int], np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)
    mp_unavailable_reason: str | None = None
    evaluate_quad: BatchFn | None = None
    quad_unavailable_reason: str | None = None
    mode_notes: dict[str, list[str]] = field(default_factory=dict)
    deferred: dict[str, Callable[[Target], None]] = field(default_factory=dict)
    intermediate_kinks: Callable[[], bool | None] | None = None
    custom_rules: Callable[[], bool] | None = None
    working_mp_value: Callable[[int], np.ndarray | None] | None = None
    symmetric_reads: Callable[[], dict[int, tuple[str, ...]] | None] | None = None

    _symmetric_asked: bool = field(default=False, init=False, repr=False)
    _symmetric_ops: dict[str, tuple[str, ...]] | None = field(default=None, init=False, repr=False)
    _kinks_asked: bool = field(default=False, init=False, repr=False)
    _kinks_at_point: bool | None = field(default=None, init=False, repr=False)

    def intermediates_at_a_kink(self) -> bool | None:
        """Whether some operation of ``f`` sits exactly at its kink at the point (a tie
        of ``max``, a ReLU at 0): True or False where it can be told, None where it
        cannot. ``intermediate_kinks`` answers where the backend set it (NumPy code, run
        on an array subclass); otherwise ``f``'s captured program is run once at the
        point on mpmath numbers, operation by operation, where an interpreter of
        :mod:`polygrad.mpexec` evaluates it (see :mod:`polygrad.mpexec.kinks`). Asked
        once; the answer is kept."""
        if not self._kinks_asked:
            self._kinks_asked = True
            probe = self.intermediate_kinks or self._recorded_kinks
            self.intermediate_kinks = None
            self._kinks_at_point = probe()
        return self._kinks_at_point

    def symmetric_input_operations(self) -> dict[str, tuple[str, ...]] | None:
        """The operations of ``f`` defined on symmetric matrices, per checked leaf.

        Returns
        -------
        dict of str to tuple of str, or None
            Leaf name -> names of the operations of ``f``'s captured program that are
            documented to read a symmetric (Hermitian) matrix whose value depends on
            that leaf (``"linalg_cholesky_ex"``, ``"eigh"``, ``"Cholesky"``...); leaves
            that reach none are absent. None where the program cannot be captured
            (NumPy code, a trace that fails): then no such operation is known. Asked
            once; the answer is kept.
        """
        if not self._symmetric_asked:
            self._symmetric_asked = True
            probe, self.symmetric_reads = self.symmetric_reads, None
            found = None if probe is None else probe()
            leaves = self.input_layout.leaves
            self._symmetric_ops = None if found is None else {
                leaves[i].name: ops for i, ops in found.items() if i < len(leaves)
            }  # fmt: skip
        return self._symmetric_ops

    def _recorded_kinks(self) -> bool | None:
        """Whether the mp evaluation at the point saw an operation at its kink; None
        where there is none, it fails, or no interpreter of operations ran in it."""
        if not self.mp_mode() or self.evaluate_mp is None:
            return None
        try:
            with recording_kinks() as record:
                self.evaluate_mp(self.x0, np.zeros_like(self.x0), KINK_DIGITS)
        except Exception:  # noqa: BLE001 - f does not run there on mpmath numbers: no answer
            return None
        if not record.ran or (record.found and self._custom_rules()):
            return None  # a kink may lie inside a custom rule's forward, not autodiff's
        return bool(record.found)

    def _custom_rules(self) -> bool:
        probe = self.custom_rules
        return bool(probe is not None and probe())

    def reverse_mode(self) -> bool:
        """Whether VJPs are available (running the deferred ``"reverse"`` test once)."""
        probe = self.deferred.pop("reverse", None)
        if probe is not None and self.vjp is not None:
            probe(self)
        return self.vjp is not None

    def forward_mode(self) -> bool:
        """Whether JVPs are available (running the deferred ``"forward"`` test once)."""
        probe = self.deferred.pop("forward", None)
        if probe is not None and self.jvp is not None:
            probe(self)
        return self.jvp is not None

    def note_unavailable(self, mode: str, note: str) -> None:
        """Say in the notes that ``mode``'s rules (``"rev"``/``"fwd"``) failed or are ignored.

        The note goes to ``notes`` (once) and to ``mode_notes[mode]``, from which an
        error for a mode that was asked for says why it is missing.
        """
        if note not in self.notes:
            self.notes.append(note)
        self.mode_notes.setdefault(mode, []).append(note)

    def has_mode(self, mode: str) -> bool:
        """Whether the autodiff quantities of ``mode`` are available.

        Parameters
        ----------
        mode : {"rev", "fwd"}
            VJPs (``vjp``) or JVPs (``jvp``), each probed on first use where the
            backend defers that (see :meth:`reverse_mode`, :meth:`forward_mode`).

        Returns
        -------
        bool
        """
        return self.reverse_mode() if mode == "rev" else self.forward_mode()

    def mp_mode(self) -> bool:
        """Whether ``evaluate_mp`` is available (building it once if deferred)."""
        build = self.deferred.pop("mp", None)
        if build is not None:
            build(self)
        return self.evaluate_mp is not None

    def quad_mode(self) -> bool:
        """Whether ``evaluate_quad`` is available (building it once if deferred)."""
        build = self.deferred.pop("quad", None)
        if build is not None:
            build(self)
        return self.evaluate_quad is not None

    def rule_mp_mode(self) -> bool:
        """Whether ``vjp_mp`` is available (building it once if deferred)."""
        build = self.deferred.pop("rule_mp", None)
        if build is not None:
            try:
                build(self)
            except Exception:  # noqa: BLE001 - optional evidence: none where it cannot be built
                self.vjp_mp = None
        return self.vjp_mp is not None

    @property
    def n(self) -> int:
        return int(self.x0.size)

    @property
    def m(self) -> int:
        return int(self.y0.size)


def numpy_dtype(dtype: Any) -> np.dtype:
    """``np.dtype(dtype)``, where a name NumPy does not know (``"bfloat16"``,
    ``"float8_e4m3fn"``) is looked up in ml_dtypes.

    Parameters
    ----------
    dtype : dtype-like
        A NumPy dtype, type or name, or the name of an ml_dtypes type.

    Returns
    -------
    numpy.dtype

    Raises
    ------
    TypeError
        NumPy does not know ``dtype`` and it names no ml_dtypes type.
    ImportError
        It is a name NumPy does not know and ml_dtypes is not installed.
    """
    try:
        return np.dtype(dtype)
    except TypeError:
        import ml_dtypes

        if not isinstance(dtype, str) or not hasattr(ml_dtypes, dtype):
            raise
        return np.dtype(getattr(ml_dtypes, dtype))


def _finfo(dtype: Any) -> Any:
    """``finfo`` of a NumPy (or ml_dtypes) floating dtype; of its parts for a complex one
    (a name is resolved by :func:`numpy_dtype`)."""
    dt = numpy_dtype(dtype)
    if dt.kind == "c":
        dt = np.dtype(dt.char.lower()) if dt.char in "FDG" else np.dtype("float64")
    try:
        return np.finfo(dt)
    except ValueError:
        import ml_dtypes  # bfloat16 and friends come from ml_dtypes

        return ml_dtypes.finfo(dt)


def dtype_eps(dtype: Any) -> float:
    """Machine epsilon of a NumPy (or ml_dtypes) floating dtype."""
    return float(_finfo(dtype).eps)


def dtype_tiny(dtype: Any) -> float:
    """Smallest normal number of a NumPy (or ml_dtypes) floating dtype.

    Parameters
    ----------
    dtype : dtype-like
        A floating or complex dtype (``bfloat16`` through ml_dtypes); a complex dtype
        gives its parts' value.

    Returns
    -------
    float
        ``finfo(dtype).tiny`` (1.2e-38 for float32); below it values are subnormal and
        keep fewer digits (IEEE 754).

    Raises
    ------
    TypeError, ValueError
        ``dtype`` is not a floating dtype.
    """
    return float(_finfo(dtype).tiny)


def computed_in_note(inputs: str, computed: str, where: str) -> str:
    """The note for a function that computes in a narrower float than its inputs.

    Parameters
    ----------
    inputs : str
        Name of the checked inputs' dtype (``"float64"``).
    computed : str
        Name of the narrowest floating dtype computed from them (``"float32"``).
    where : str
        The first operation that produced it (``"aten.linear"``, ``"Cast"``...).

    Returns
    -------
    str
        One sentence for ``Target.notes``.
    """
    return (
        f"f computes in {computed} inside (first at {where}), although its checked inputs "
        f"are {inputs} (a cast, autocast, or a layer's dtype policy): the working dtype is "
        f"{computed}, and round-off is judged at its precision"
    )


def narrowest_input_dtype(dtypes: Sequence[Any], notes: list[str]) -> Any:
    """The working dtype of checked inputs of several floating dtypes: the narrowest.

    Each input's gradient is rounded to that input's own dtype (a float32 argument's
    gradient is a float32 array, even where the function computes in float64), so the
    round-off allowed for any entry is at most the narrowest dtype's; the rule, evaluated
    in float64 where it can be, is still judged at float64's. Where the dtypes differ,
    a note says so.

    Parameters
    ----------
    dtypes : sequence of dtype
        The checked inputs' dtypes (NumPy, ml_dtypes, torch or TensorFlow dtypes; one
        kind per call), at least one.
    notes : list of str
        Appended to where the dtypes differ.

    Returns
    -------
    dtype
        The one with the largest machine epsilon (the first of equals).
    """
    names = list(dict.fromkeys(_dtype_name(d) for d in dtypes))
    narrowest = max(dtypes, key=lambda d: dtype_eps(numpy_dtype(_dtype_name(d))))
    if len(names) > 1:
        notes.append(
            f"the checked inputs have several dtypes ({', '.join(names)}): each gradient is "
            "rounded to its own input's dtype, so round-off is judged at the narrowest, "
            f"{_dtype_name(narrowest)} (the rule, evaluated in float64, at float64's)"
        )
    return narrowest


def _scalar_name(leaf: Leaf, index: Sequence[Any]) -> str:
    """``"x[3, 1]"`` for the entry ``index`` of ``leaf``; a (re, im) pair's last axis is
    the ``"Re "``/``"Im "`` prefix (``"Im z[3]"``, ``"Re z"`` for a scalar pair)."""
    idx = [int(i) for i in index]
    part = ("Re ", "Im ")[idx.pop()] if leaf.pair else ""
    return f"{part}{leaf.name}[{', '.join(map(str, idx))}]" if idx else part + leaf.name


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", dtype)).removeprefix("torch.")


def change_under_a_move(evaluate: BatchFn, x0: np.ndarray, y0: np.ndarray, eps: float) -> float:
    """How much the outputs change when every input moves by 1% (of ``1 + |x|``).

    The test behind "the gradient cannot flow" in every backend: autodiff
    connects no output to any input, yet the values depend on the inputs.

    Parameters
    ----------
    evaluate : BatchFn
        ``(1, n) -> (1, m)`` float64, the function in the working dtype.
    x0 : ndarray, shape (n,), float64
        The point.
    y0 : ndarray, shape (m,), float64
        The outputs at ``x0``.
    eps : float
        Machine epsilon of the working dtype.

    Returns
    -------
    float
        The largest change of an output, with signs of the moves drawn at random
        (seed 0); 0.0 when it is within ``64 eps`` of the outputs' scale (a
        function constant in its inputs, whose zero gradient is right).
    """
    signs = np.random.default_rng(0).choice([-1.0, 1.0], x0.shape)
    y1 = evaluate((x0 + 1e-2 * (1.0 + np.abs(x0)) * signs)[None, :])[0]
    scale = float(np.max(np.abs(y0), initial=0.0)) or 1.0
    change = float(np.max(np.abs(y1 - y0), initial=0.0))
    return change if change > 64 * eps * scale else 0.0


def describe_exception(exc: BaseException, limit: int = 200) -> str:
    """``"Type: message"`` in one line, for notes and error messages.

    Parameters
    ----------
    exc : BaseException
        The exception.
    limit : int
        Most characters of the message kept.

    Returns
    -------
    str
        The message's first non-empty line, or, where that line is a heading that
        ends with a colon (TensorFlow's "in user code:" before a traceback, "Graph
        execution error:" before the node), its last line, which names the error;
        prefixed by the exception's type unless the line already starts with it.
    """
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    # a heading (TensorFlow's "in user code:", "Graph execution error:") announces the
    # lines that name the error; the last of them does
    heading = bool(lines) and lines[0].endswith(":") and len(lines) > 1
    line = (lines[-1] if heading else lines[0])[:limit] if lines else ""
    name = type(exc).__name__
    if not line:
        return name
    return line if line.startswith(name) else f"{name}: {line}"


def validate_float_array(a: np.ndarray, name: str) -> None:
    """Raise a clear error for integer, bool, complex, non-numeric or non-finite input.

    Raises
    ------
    InputTypeError
        ``a`` is integer, bool, complex or not numeric.
    InputValueError
        ``a`` contains NaN or Inf.
    """
    kind = a.dtype.kind
    if kind == "b":
        raise InputTypeError(
            f"{name} has dtype bool; gradients are defined only for floating inputs. "
            "Leave it out of argnums, or cast it to a float dtype."
        )
    if kind in "iu":
        raise InputTypeError(
            f"{name} has integer dtype {a.dtype}; gradients are defined only for floating "
            "inputs. Cast it to a floating dtype (x.float() in PyTorch, x.astype(np.float32) "
            "in NumPy or JAX, tf.cast(x, tf.float32) in TensorFlow), or leave it out of "
            "argnums."
        )
    if kind == "c":
        raise InputTypeError(
            f"{name} is complex ({a.dtype}); a backend sees only real inputs: check complex "
            "functions with polygrad.check or polygrad.compare, which realify them (see "
            "polygrad.complex)."
        )
    if kind == "O" and a.ndim == 0:
        raise InputTypeError(not_an_array_message(a.item(), name))
    if kind != "f" and a.dtype.name not in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        raise InputTypeError(f"{name} has dtype {a.dtype}, which is not a floating dtype.")
    if a.size and not np.all(np.isfinite(a.astype(np.float64))):
        bad = [tuple(i) for i in np.argwhere(~np.isfinite(a.astype(np.float64)))[:3].tolist()]
        raise InputValueError(
            f"{name} contains NaN or Inf (first at index {', '.join(map(str, bad))}); a "
            "derivative at a non-finite point cannot be checked. If those entries are a mask "
            "(e.g. -inf logits), pass the mask as a separate argument that is not in argnums."
        )


def not_an_array_message(obj: Any, name: str) -> str:
    """The error for a checked argument that is an object, not an array.

    Parameters
    ----------
    obj : object
        The argument (a PyTorch, Keras or Flax model, or any other object).
    name : str
        Its name in the report (``"x"``, ``"model"``).

    Returns
    -------
    str
        One message: for a model (an object with ``parameters``, ``variables`` or
        ``trainable_variables``), how to check its parameters or leave it out.
    """
    kind = type(obj).__name__
    if any(hasattr(obj, a) for a in ("trainable_variables", "parameters", "variables")):
        return (
            f"{name} is a {kind} (a model), not an array. To check the gradient with respect "
            "to its parameters, pass wrt='parameters' (PyTorch, Keras) or, in JAX, pass the "
            "module or its parameter pytree and select it with argnums; to check the other "
            "arguments, leave it out of argnums (e.g. argnums=1 for f(model, x))."
        )
    return (
        f"{name} is a {kind} object, not an array of floating numbers; leave it out of "
        "argnums (the arguments not in argnums are held fixed)."
    )


def chunked(fn: BatchFn, X: np.ndarray, max_rows: int) -> np.ndarray:
    """Apply a batch function to ``X`` in chunks of at most ``max_rows`` rows."""
    if X.shape[0] <= max_rows:
        return fn(X)
    return np.concatenate([fn(X[i : i + max_rows]) for i in range(0, X.shape[0], max_rows)])


KINK_DIGITS = 30
"""Digits of the one mp evaluation that looks for operations at their kinks (ties are
exact at any precision: the point is a binary float)."""

SMALL_BATCH = 16
"""Batches up to this many rows run one plain call per row: tracing or vectorizing a
function (``tf.function``, ``torch.func.vmap`` on first use) costs more than that."""


WHOLE_BATCH_NUMBERS = 1 << 16
"""Batches of fewer numbers than this (rows times row length) run in one call where a
backend's batches are chunked by :class:`ChunkSizer` (see its ``whole_below``)."""


class ChunkSizer:
    """Chunks a batch function's rows at the size that runs fastest per row.

    Per-row cost depends on the chunk size in ways that cannot be predicted:
    a small function is dominated by the per-call overhead (large chunks win),
    while a convolutional network in float64 can run twice as slow per row in
    chunks of thousands as in chunks of tens (its activations leave the
    cache). The sizer times chunks of each candidate size, smallest first, on
    the real rows (after one untimed warm-up chunk, and keeping the faster of
    two chunks per size, since first calls pay one-time costs), stops at the
    first size that is slower than a smaller one, and keeps the fastest. No row
    is evaluated twice; until the timing is complete, the fastest size so far
    is used for rows too few to time the next size.

    Parameters
    ----------
    max_rows : int
        Largest chunk (the user's ``batch_size``).
    candidates : tuple of int
        Chunk sizes tried (capped at ``max_rows``); ``max_rows`` is always one.
    clock : callable
        Seconds, monotonic (default :func:`time.perf_counter`); tests pass a
        simulated clock.
    whole_below : int
        A batch of fewer than this many numbers (rows times row length, at most
        ``max_rows`` rows) runs in one call, untimed: its rows stay in cache in any
        chunking, and cutting it only adds calls (a check of 10 inputs evaluates
        batches of 40 to 90 points, which chunks of 32 cut into three calls and a
        tail). 0: every batch is chunked.
    """

    def __init__(
        self,
        max_rows: int,
        candidates: tuple[int, ...] = (32, 256),
        clock: Callable[[], float] = time.perf_counter,
        whole_below: int = 0,
    ) -> None:
        self.clock = clock
        self.whole_below = int(whole_below)
        self.max_rows = max(1, int(max_rows))
        sizes = {min(c, self.max_rows) for c in candidates} | {self.max_rows}
        self.candidates = sorted(sizes)
        self.plan = [self.candidates[0]] + [c for c in self.candidates for _ in range(2)]
        self.step = 0
        self.per_row: dict[int, float] = {}
        self.best: int | None = None if len(self.candidates) > 1 else self.max_rows

    def __call__(self, fn: BatchFn, X: np.ndarray) -> np.ndarray:
        """``fn`` applied to ``X`` (``(B, ...)``), chunk by chunk."""
        out, i, B = [], 0, X.shape[0]
        if B <= self.max_rows and X.size < self.whole_below:
            return fn(X)
        while i < B:
            planned = self.best is None and self.step < len(self.plan)
            if planned and B - i >= self.plan[self.step]:
                size = self.plan[self.step]
            else:
                planned = False
                size = self.best or (self._fastest() if self.per_row else self.candidates[0])
            t0 = self.clock()
            out.append(fn(X[i : i + size]))
            elapsed = self.clock() - t0
            i += min(size, B - i)
            if planned:
                self._record(size, elapsed / size)
        if not out:
            return fn(X)
        return out[0] if len(out) == 1 else np.concatenate(out)

    def _record(self, size: int, per_row: float) -> None:
        if self.step > 0:  # the first chunk is the warm-up
            self.per_row[size] = min(self.per_row.get(size, np.inf), per_row)
        self.step += 1
        done_with_size = self.step == len(self.plan) or self.plan[self.step] != size
        if self.step > 1 and done_with_size:
            if self._fastest() != size or self.step == len(self.plan):
                self.best = self._fastest()

    def _fastest(self) -> int:
        return min(self.per_row, key=self.per_row.__getitem__)


class Backend(ABC):
    """A framework seen by polygrad.

    Subclasses set the capability flags and implement :meth:`owns`,
    :meth:`to_numpy` and :meth:`make_target`. A backend module must not
    import its framework at module import time; it imports it when a
    backend instance is created.

    Attributes
    ----------
    name : str
        Short name used with ``backend=`` (``"numpy"``, ``"torch"``...).
    extra : str
        The pip extra that installs the framework (``polygrad-check[torch]``).
    supports_autodiff, supports_float64, supports_vmap, arbitrary_precision : bool
        Capability flags the core branches on. ``supports_autodiff`` false means
        the derivative to check is supplied by the user (``grad=``, ``jac=``,
        ``vjp=`` or ``jvp=``).
    complex_convention : str
        How the framework's complex VJPs relate to polygrad's.
    distribution : str
        The installed distribution whose version is reported; default ``module``.
    """

    name: ClassVar[str]
    module: ClassVar[str] = ""
    extra: ClassVar[str] = ""
    supports_autodiff: ClassVar[bool] = False
    supports_float64: ClassVar[bool] = True
    supports_vmap: ClassVar[bool] = False
    arbitrary_precision: ClassVar[bool] = False

    def __init__(self) -> None:
        if self.module:
            try:
                importlib.import_module(self.module)
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise MissingBackendError(
                    f"the {self.name} backend needs {self.module!r}, which is not installed; "
                    f"install it with: {pip_install(self.extra)}"
                ) from exc

    @classmethod
    def is_installed(cls) -> bool:
        """Whether the framework can be imported (without importing it)."""
        if not cls.module:
            return True
        return importlib.util.find_spec(cls.module) is not None

    @classmethod
    def is_loaded(cls) -> bool:
        """Whether the framework is already imported by the user's program."""
        return not cls.module or cls.module in sys.modules

    @classmethod
    @abstractmethod
    def owns(cls, x: Any) -> bool:
        """Whether ``x`` is an array of this framework. Must not import the framework."""

    @abstractmethod
    def to_numpy(self, x: Any) -> np.ndarray:
        """Convert an array of this framework to NumPy (a copy, on the host)."""

    @abstractmethod
    def make_target(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        supplied: Supplied,
        batch_size: int,
        wrt: str = "inputs",
    ) -> Target:
        """Build the :class:`Target` of ``f`` at ``args``.

        Parameters
        ----------
        f : callable
            The user's function (or model).
        args : tuple
            Its arguments; pytrees (tuple/list/dict) of this framework's arrays.
        argnums : tuple of int
            The arguments checked when ``wrt == "inputs"``.
        supplied : Supplied
            User-supplied derivatives (only for backends without autodiff).
        batch_size : int
            Largest number of points to evaluate in one batched call.
        wrt : {"inputs", "parameters"}
            Check with respect to ``args[argnums]`` or to the trainable
            parameters of ``f`` (a model, or a function closing over them).

        Raises
        ------
        InputTypeError, InputValueError, InputMutationError, ShapeMismatchError
            Bad input, described in the message.
        """

    def gradient_function(
        self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]
    ) -> Callable[..., Any]:
        """A function of the same arguments that returns the gradient of ``f``.

        Used by ``check(order=2)``: the returned function (written in this
        framework, differentiable again) is checked like any other. For a
        non-scalar ``f`` it returns the VJP with a fixed pseudo-random
        cotangent. Backends without autodiff raise ``NotImplementedError``.
        """
        raise NotImplementedError(f"order=2 needs autodiff; the {self.name} backend has none")

    complex_convention: ClassVar[str] = "conjugate-wirtinger"
    """How the framework's complex VJPs relate to polygrad's (see :mod:`polygrad.complex`)."""

    def from_numpy(self, a: np.ndarray) -> Any:
        """This framework's array holding a copy of the NumPy array ``a`` (same dtype)."""
        return np.array(a, copy=True)

    def complex_parts(self, x: Any) -> tuple[Any, Any]:
        """Real and imaginary parts of a complex array of this framework (or of mpmath numbers)."""
        if isinstance(x, np.ndarray) and x.dtype == object:
            import mpmath

            re = np.vectorize(mpmath.re, otypes=[object])(x)
            im = np.vectorize(mpmath.im, otypes=[object])(x)
            return re, im
        return x.real, x.imag

    def make_complex(self, re: Any, im: Any) -> Any:
        """The complex array ``re + i im`` from two real arrays of this framework."""
        return re + 1j * im

    def stack_pair(self, re: Any, im: Any) -> Any:
        """Stack two real arrays on a new last axis: shape ``S`` → ``S + (2,)``."""
        return np.stack([np.asarray(re), np.asarray(im)], axis=-1)

    def native_vjp(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        cotangent: np.ndarray,
    ) -> list[np.ndarray]:
        """The framework's own VJP of ``f`` (one output array) at ``args``, for ``cotangent``.

        Used to show a framework's complex convention: the result is in the
        framework's convention (see :mod:`polygrad.complex`), one NumPy array
        per checked argument (each an array, not a pytree).

        Raises
        ------
        NotImplementedError
            The backend has no autodiff.
        """

        def of_checked(*checked: Any) -> Any:
            new = list(args)
            for i, c in zip(argnums, checked, strict=True):
                new[i] = c
            return f(*new)

        primals = [args[i] for i in argnums]
        grads = self._pullback(of_checked, primals, np.asarray(cotangent))
        return [
            np.zeros(np.shape(self.to_numpy(p))) if g is None else g
            for g, p in zip(grads, primals, strict=True)
        ]

    def _pullback(
        self, g: Callable[..., Any], primals: list[Any], cotangent: np.ndarray
    ) -> list[np.ndarray | None]:
        """The framework's VJP of ``g`` (one output array) at ``primals``, for ``cotangent``.

        The hook behind :meth:`native_vjp`: one NumPy array per primal, or
        None where the output does not depend on it (read as zeros).
        ``cotangent`` holds as many elements as the output, in any shape.
        """
        raise NotImplementedError(f"the {self.name} backend has no autodiff")

    distribution: ClassVar[str] = ""
    label: ClassVar[str] = ""
    """The framework's name as people write it (``"NumPy"``), for messages."""

    def asarray(self, array: Any, dtype: str | None = None) -> Any:
        """This framework's array holding a copy of ``array``, in ``dtype``.

        Parameters
        ----------
        array : array_like
            Any shape; converted with ``np.asarray`` first.
        dtype : str, optional
            Dtype name (``"float32"``, ``"float64"``, ``"bfloat16"``...). Default:
            the NumPy array's dtype.

        Returns
        -------
        Any
            The framework's array; the default makes it with :meth:`from_numpy`.

        Raises
        ------
        InputTypeError
            The framework has no such dtype.
        """
        x = np.array(array, copy=True)
        if dtype is None:
            return self.from_numpy(x)
        try:
            dt = np.dtype(dtype)
        except TypeError:
            try:
                import ml_dtypes

                dt = np.dtype(getattr(ml_dtypes, dtype))
            except (ImportError, AttributeError, TypeError):
                raise InputTypeError(f"{self.label or self.name} has no dtype {dtype!r}") from None
        return self.from_numpy(x.astype(dt))

    def namespace(self) -> Any:
        """The framework's NumPy-style math module (``sin``, ``exp``, ``sum``, ``where``...)."""
        return np

    def devices(self) -> list[str]:
        """The devices the framework can run on, as short names (``"cpu"``, ``"cuda:0"``)."""
        return ["cpu"]

    def version(self) -> str:
        """Version string of the framework."""
        if not self.module:
            return np.__version__
        mod = sys.modules[self.module]
        return str(getattr(mod, "__version__", "?"))


_GRADIENT_TARGET: ContextVar[bool] = ContextVar("polygrad_gradient_target", default=False)


@contextlib.contextmanager
def building_a_gradient_target() -> Iterator[None]:
    """While active, the target being built is a gradient (``order=2``), not the user's
    function: a gradient that autodiff connects to no input (a custom backward that
    detaches, or stops gradients) has a zero derivative as autodiff reads it, which the
    check judges, instead of an error about the user's function (see
    :func:`gradient_target`)."""
    token = _GRADIENT_TARGET.set(True)
    try:
        yield
    finally:
        _GRADIENT_TARGET.reset(token)


def gradient_target() -> bool:
    """Whether :func:`building_a_gradient_target` is active (backends skip the test that
    the gradient can flow from the output to the inputs)."""
    return _GRADIENT_TARGET.get()
