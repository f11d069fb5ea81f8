"""The JAX backend: autodiff through ``jax.vjp``/``jax.jvp``, batched with ``jax.vmap``.

JAX is imported only when a :class:`JaxBackend` is created. float64 work runs
inside the ``jax.enable_x64`` context manager, so the user's global
``jax_enable_x64`` setting is never changed; working-dtype work runs under the
user's own setting, exactly as their code runs.

Promotion to float64 is tried in two ways:

1. call ``f`` on float64 inputs (and float64 copies of the arguments that are
   not checked); JAX's type promotion usually lifts float32 constants the
   function closes over;
2. when ``f`` still returns a narrow float (it casts explicitly, or uses
   ``preferred_element_type``), re-execute its jaxpr with every floating
   constant, literal and dtype parameter promoted to float64. Custom
   derivative rules (``jax.custom_jvp``/``custom_vjp``) cannot be promoted this
   way, so float64 autodiff is then unavailable and the report says so.

Evaluations, VJPs and JVPs are ``jax.jit(jax.vmap(...))`` over rows, on the
device of the user's arrays. Every call runs the same number of rows (the
last chunk is padded), so a point's value never depends on the batch it was
computed in, and each callable compiles once. A function that cannot be
vmapped (NumPy inside, a custom rule without batching support...) is run one
row at a time, and a note says so.

The mp reference (``Target.evaluate_mp``) traces ``f`` once, in float64, to a
jaxpr and re-executes it on mpmath numbers (:mod:`polygrad.mpexec.jaxpr`). Every
primitive is checked before the check starts; one without an mpmath rule leaves
``evaluate_mp`` unset, and ``mp_unavailable_reason`` names it.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._names import argument_names, leaf_name
from ..errors import InputTypeError
from ..reference.differences import rows_per_batch
from ._capture_cache import CAPTURES, frozen_state
from ._common import as_float_output, output_layout
from ._flow import steps_only
from ._jax_programs import compiled_for
from ._jax_state import guarded, state_cells
from ._quad_eval import defer_quad
from .base import (
    Backend,
    Layout,
    Supplied,
    Target,
    change_under_a_move,
    chunked,
    computed_in_note,
    describe_exception,
    dtype_eps,
    gradient_target,
    narrowest_input_dtype,
    validate_float_array,
)

__all__ = ["JaxBackend"]

# Primitives whose sub-jaxpr is simply called: the promoter inlines them.
_CALL_PRIMITIVES = {"jit", "pjit", "closed_call", "core_call", "remat", "checkpoint"}
_CUSTOM_PRIMITIVES = {"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"}
# Rows per vmapped call (see _Batched): bounded so that padding a small request stays cheap.
_MAX_ROWS = 128


def _probe_reverse(target: Target, work: _Derivatives) -> None:
    """No reverse mode (``vjp``, ``vjp64`` None, with the reason in the notes) where JAX
    cannot transpose ``f`` (a ``lax.while_loop``): ``mode="auto"`` then checks forward
    mode, as for any function without a VJP."""
    why = work.reverse_failure()
    if why is not None:
        target.vjp = target.vjp64 = None
        target.note_unavailable("rev", why + "; forward mode (JVP) is checked instead")


def _forward_mode(jvp: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``jvp`` with JAX's error for a ``custom_vjp`` function (no JVP rule) made clear."""

    def checked(V: np.ndarray) -> np.ndarray:
        try:
            return jvp(V)
        except TypeError as exc:
            if "custom_vjp" not in str(exc):
                raise
            raise ValueError(
                "forward mode (JVP) is not available: the function uses jax.custom_vjp, "
                "which defines only a reverse-mode rule; check it with mode='rev' (the default)"
            ) from None

    return checked


class _CannotPromote(Exception):
    """The jaxpr contains something the float64 promoter does not handle."""


def _x64() -> contextlib.AbstractContextManager[Any]:
    import jax

    return jax.enable_x64(True)


def _is_narrow_float(dtype: Any) -> bool:
    """A float narrower than float64, or ``complex64`` (a pair of float32)."""
    import jax.numpy as jnp

    if jnp.issubdtype(dtype, jnp.complexfloating):
        return np.dtype(dtype).itemsize < 16
    return bool(jnp.issubdtype(dtype, jnp.floating)) and np.dtype(dtype).itemsize < 8


def _wide(dtype: Any) -> Any:
    """The float64 counterpart of a narrow dtype: ``complex128`` for ``complex64``."""
    import jax.numpy as jnp

    return np.complex128 if jnp.issubdtype(dtype, jnp.complexfloating) else np.float64


def _promote_value(v: Any) -> Any:
    """A float64 copy of a narrow floating array/scalar; anything else unchanged."""
    import jax.numpy as jnp

    dtype = getattr(v, "dtype", None)
    if dtype is None and isinstance(v, float):
        return jnp.asarray(v, dtype=jnp.float64)
    if dtype is not None and _is_narrow_float(dtype):
        return jnp.asarray(v, dtype=_wide(dtype))
    return v


def _promote_arg(v: Any) -> Any:
    """Promote a non-checked argument leaf: floating arrays become float64, the rest stays."""
    dtype = getattr(v, "dtype", None)
    return _promote_value(v) if dtype is not None else v


class _Promoter:
    """Evaluate a closed jaxpr with every floating type promoted to float64.

    Attributes
    ----------
    dropped_rules : list of str
        Names of custom-derivative primitives whose primal was inlined (their
        rule is lost, so the promoted function must not be differentiated).
    blocker : str or None
        The first primitive that raised on promoted operands or returned a
        narrower float than float64 (``pure_callback`` of NumPy code...): the
        operation that blocks promotion, named in the notes.
    """

    def __init__(self) -> None:
        self.dropped_rules: list[str] = []
        self.blocker: str | None = None

    def run(self, closed: Any, *args: Any) -> list[Any]:
        from jax.extend.core import ClosedJaxpr, DropVar, Literal

        if not isinstance(closed, ClosedJaxpr):  # an open jaxpr (remat)
            closed = ClosedJaxpr(closed, [])
        jaxpr = closed.jaxpr
        env: dict[Any, Any] = {}
        # random draws, and what is computed from them alone, at the working precision
        drawn: dict[Any, Any] = {}
        own: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return _promote_value(v.val) if isinstance(v, Literal) else env[v]

        def read_own(v: Any) -> Any:
            return v.val if isinstance(v, Literal) else drawn.get(v, own.get(v))

        for var, const in zip(jaxpr.constvars, closed.consts, strict=True):
            env[var], own[var] = _promote_value(const), const
        for var, arg in zip(jaxpr.invars, args, strict=True):
            env[var] = arg
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if _is_draw(eqn, drawn, own):
                outs = eqn.primitive.bind(*[read_own(v) for v in eqn.invars], **eqn.params)
                outs = outs if eqn.primitive.multiple_results else [outs]
                for var, out in zip(eqn.outvars, outs, strict=True):
                    if not isinstance(var, DropVar):
                        drawn[var], env[var] = out, _promote_value(out)
                continue
            invals = [read(v) for v in eqn.invars]
            if name in _CALL_PRIMITIVES or name in _CUSTOM_PRIMITIVES:
                sub = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
                if name in _CUSTOM_PRIMITIVES:
                    info = getattr(getattr(sub, "jaxpr", sub), "debug_info", None)
                    self.dropped_rules.append(str(getattr(info, "func_name", None) or name))
                outs = self.run(sub, *invals)
            else:
                outs = self._bind(eqn, invals)
            for var, out in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, DropVar):
                    env[var] = out
        return [read(v) for v in jaxpr.outvars]

    def _bind(self, eqn: Any, invals: list[Any]) -> list[Any]:
        """Bind one equation's primitive on promoted operands, noting where promotion stops."""
        try:
            params = {k: self._param(v) for k, v in eqn.params.items()}
            outs = eqn.primitive.bind(*invals, **params)
        except Exception:
            self.blocker = self.blocker or eqn.primitive.name
            raise
        outs = outs if eqn.primitive.multiple_results else [outs]
        if self.blocker is None and any(_is_narrow_float(getattr(o, "dtype", int)) for o in outs):
            self.blocker = eqn.primitive.name
        return list(outs)

    def _param(self, v: Any) -> Any:
        import jax
        from jax.extend.core import ClosedJaxpr, Jaxpr

        if isinstance(v, Jaxpr):
            raise _CannotPromote("an open sub-jaxpr")
        if isinstance(v, ClosedJaxpr):
            avals = [
                jax.ShapeDtypeStruct(
                    a.shape, _wide(a.dtype) if _is_narrow_float(a.dtype) else a.dtype
                )
                for a in v.in_avals
            ]
            return jax.make_jaxpr(lambda *a: self.run(v, *a))(*avals)
        if isinstance(v, tuple) and any(isinstance(e, (Jaxpr, ClosedJaxpr)) for e in v):
            return tuple(self._param(e) for e in v)
        if isinstance(v, np.dtype) and _is_narrow_float(v):
            return np.dtype(_wide(v))
        return v


# JAX's random primitives: what they draw depends on the dtype asked for, so a promoted
# function draws as f draws, in its own dtypes, and widens the numbers drawn
_RANDOM_PRIMITIVES = {
    "random_bits", "random_seed", "random_wrap", "random_unwrap", "random_split",
    "random_fold_in", "threefry2x32", "rng_bit_generator", "rng_uniform",
}  # fmt: skip


def _is_draw(eqn: Any, drawn: dict[Any, Any], own: dict[Any, Any]) -> bool:
    """A random primitive, or an equation of random draws and constants alone."""
    from jax.extend.core import Literal

    if eqn.primitive.name in _RANDOM_PRIMITIVES:
        return all(isinstance(v, Literal) or v in drawn or v in own for v in eqn.invars)
    ins = [v for v in eqn.invars if not isinstance(v, Literal)]
    return any(v in drawn for v in ins) and all(v in drawn or v in own for v in ins)


def _draws_random(closed: Any) -> bool:
    """Whether a jaxpr (or one nested in it) calls a random primitive."""
    from jax.extend.core import subjaxprs

    todo = [getattr(closed, "jaxpr", closed)]
    while todo:
        jaxpr = todo.pop()
        if any(e.primitive.name in _RANDOM_PRIMITIVES for e in jaxpr.eqns):
            return True
        todo.extend(subjaxprs(jaxpr))
    return False


def _draws_random_when_traced(flat: _FlatFunction) -> bool:
    """Whether ``f``'s jaxpr draws random numbers; False where it cannot be traced."""
    import jax

    try:
        closed = jax.make_jaxpr(flat)(*flat.leaves)
    except Exception:  # noqa: BLE001 - untraceable (NumPy inside): it runs row by row
        return False
    return _draws_random(closed)


# A traced value turned into a Python or NumPy number inside f: JAX cannot differentiate
# through it, and its own error does not say which part of a gradient check needs the trace.
_TRACER_CONVERSION = (
    "the function turns a JAX array into a Python or NumPy value ({kind}: float(), int(), "
    ".item(), np.asarray() or an `if` on a traced value), so JAX cannot differentiate "
    "through it; polygrad differentiates f with jax.vjp and batches it with jax.vmap, "
    "where every array is traced. Return the JAX array itself (jnp.sum(...), not "
    "float(jnp.sum(...))), use jnp functions instead of NumPy ones, and jnp.where or "
    "jax.lax.cond instead of Python control flow on array values."
)


# JAX caches how it converts a NumPy constant for one x64 mode and reuses it in the other
_MODE_MISMATCH = (
    "JAX ran this function with a NumPy constant converted for the other "
    "jax_enable_x64 mode (it was traced or jitted with x64 off and is now called with it "
    "on, or the reverse), and XLA refused the buffer: JAX caches the conversion of NumPy "
    "arrays across the two modes. Close over jnp arrays instead (jnp.asarray(y)), or call "
    "jax.clear_caches() after switching the mode."
)


_USER_MODE_ONLY: weakref.WeakSet[Any] = weakref.WeakSet()
"""Functions whose trace under x64 broke their calls in the user's mode, once seen."""


def _traced_in_user_mode(f: Any) -> bool:
    try:
        return f in _USER_MODE_ONLY
    except TypeError:  # not weakly referenceable
        return False


def _trace_in_user_mode(flat: _FlatFunction) -> None:
    flat.user_mode_only = True
    with contextlib.suppress(TypeError):
        _USER_MODE_ONLY.add(flat.f)


class _ModeMismatchError(InputTypeError):
    """JAX's caches gave a NumPy constant converted for the other x64 mode."""


def _mode_mismatch(exc: BaseException) -> bool:
    """Whether ``exc`` is JAX refusing a NumPy constant converted for the other x64 mode
    (an executable's buffer, a jit lowering with mixed float widths, or a primitive
    meeting a NumPy index array still int64 beside JAX's int32: ``z[labels, 0]`` with
    ``labels = np.array([0, 1, 2])``, x64 off, after a trace with it on)."""
    text = str(exc)
    return (
        "RuntimeProgramInputMismatch" in text
        or ("verifier errors" in text and "requires compatible types" in text)
        or _mixed_widths(text)
    )


def _mixed_widths(text: str) -> bool:
    """Whether a JAX dtype error names a 64-bit and a 32-bit dtype of one kind."""
    if "requires arguments to have the same dtypes" not in text:
        return False
    return any(f"{k}64" in text and f"{k}32" in text for k in ("int", "uint", "float"))


def _not_a_number(leaf: Any) -> bool:
    """Whether a pytree leaf is no number or array (a function, a string, an object):
    such leaves of a checked argument are held fixed, as ``equinox``'s filters do."""
    if isinstance(leaf, (str, bytes)) or callable(leaf):
        return not hasattr(leaf, "shape")
    try:
        return np.asarray(leaf).dtype == object
    except Exception:  # noqa: BLE001 - not convertible: no number
        return True


def _held_fixed(leaf: Any, inside: bool) -> bool:
    """Whether a leaf of a checked argument is held fixed: no number or array, or, inside
    a pytree (``inside``: a module, a dict), an integer or boolean array (an index
    buffer, a step or random-key counter), as ``eqx.partition(tree,
    eqx.is_inexact_array)`` would; a checked argument that is itself such an array is
    an error (see :func:`~polygrad.backends.base.validate_float_array`)."""
    if _not_a_number(leaf):
        return True
    return inside and np.dtype(getattr(leaf, "dtype", np.asarray(leaf).dtype)).kind in "biu"


def _tracer_conversion_errors(jax: Any) -> tuple[type[BaseException], ...]:
    """JAX's errors for a traced value converted to a concrete one (bool, int, float, array)."""
    e = jax.errors
    return (e.ConcretizationTypeError, e.TracerArrayConversionError, e.TracerIntegerConversionError)


class _FlatFunction:
    """``f`` seen as a function of the list of its checked leaves.

    Parameters
    ----------
    f : callable
        The user's JAX function.
    args : tuple
        Its arguments; pytrees (any JAX pytree) of arrays and Python values.
    argnums : tuple of int
        The checked arguments.

    Raises
    ------
    InputTypeError, InputValueError
        A checked leaf is not a finite floating array.
    """

    def __init__(self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]):
        import jax
        import jax.numpy as jnp

        self.f, self.args, self.argnums = f, args, argnums
        self.treedefs: dict[int, Any] = {}
        self.fixed: dict[int, list[tuple[int, Any]]] = {}  # (position, leaf) held fixed
        self.fixed_names: list[str] = []
        self.leaves: list[Any] = []
        names: list[str] = []
        arg_names = argument_names(f, len(args))
        for i in argnums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"argnums contains {i}, but f was given {len(args)} arguments")
            with_path, td = jax.tree_util.tree_flatten_with_path(args[i])
            self.treedefs[i], self.fixed[i] = td, []
            for pos, (path, leaf) in enumerate(with_path):
                name = leaf_name(arg_names, i, jax.tree_util.keystr(path), argnums)
                # a module's activation function, an index buffer, an RNG counter
                if _held_fixed(leaf, bool(path)):
                    self.fixed[i].append((pos, leaf))
                    self.fixed_names.append(name)
                    continue
                validate_float_array(np.asarray(leaf), name)
                self.leaves.append(leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf))
                names.append(name)
        self.layout = Layout.from_shapes(names, [tuple(a.shape) for a in self.leaves])
        self.dtypes = [np.dtype(a.dtype) for a in self.leaves]
        host = [np.asarray(a).astype(np.float64).ravel() for a in self.leaves]
        self.x0 = np.concatenate(host) if host else np.empty(0)
        self.out_paths: list[str] = []  # of the output pytree, set by each call
        self.device = next(
            (next(iter(a.devices())) for a in self.leaves if isinstance(a, jax.Array)), None
        )
        # new leaves are committed to that device only where the user's are: a jitted
        # function (jax.nn.sigmoid, the user's own @jax.jit) keeps one compilation per
        # placement, and a committed copy of an uncommitted input compiles it again
        self.placement = self.device if any(_committed(a) for a in self.leaves) else None
        self.complex_outputs: list[bool] = []
        # traced in the user's x64 mode only: JAX caches how it converts a NumPy constant
        # used directly in an operation (not through jnp.asarray) across the two modes,
        # so once f is traced with x64 on, its calls with x64 off fail ("expected
        # f32[3] ... got f64[3]"); see JaxBackend.make_target
        self.user_mode_only = _traced_in_user_mode(f)

    def __call__(self, *leaves: Any, args: Sequence[Any] | None = None) -> list[Any]:
        """Output leaves of ``f`` with the checked leaves replaced by ``leaves``."""
        import jax
        import jax.numpy as jnp

        full = list(self.args if args is None else args)
        off = 0
        for i in self.argnums:
            k = self.treedefs[i].num_leaves - len(self.fixed[i])
            mine = list(leaves[off : off + k])
            off += k
            for pos, leaf in self.fixed[i]:  # in increasing position
                mine.insert(pos, leaf)
            full[i] = self.treedefs[i].unflatten(mine)
        try:
            out = self.f(*full)
        except _tracer_conversion_errors(jax) as exc:
            raise InputTypeError(_TRACER_CONVERSION.format(kind=type(exc).__name__)) from exc
        except (jax.errors.JaxRuntimeError, ValueError, TypeError) as exc:
            if not _mode_mismatch(exc):
                raise
            raise _ModeMismatchError(_MODE_MISMATCH) from exc
        with_path = jax.tree_util.tree_flatten_with_path(out)[0]
        self.out_paths = [jax.tree_util.keystr(path) for path, _ in with_path]
        outs = [jnp.asarray(o) for _, o in with_path]
        # a complex output of shape S enters as its real pairs (Re, Im), shape S + (2,)
        self.complex_outputs = [bool(jnp.iscomplexobj(o)) for o in outs]
        return [
            jnp.stack([o.real, o.imag], axis=-1) if c else o
            for o, c in zip(outs, self.complex_outputs, strict=True)
        ]

    def capture_key(self) -> tuple[Any, ...]:
        """What selects a capture besides the frozen state: argnums, structure, shapes, dtypes."""
        return (
            tuple(self.argnums),
            tuple(str(self.treedefs[i]) for i in self.argnums),
            tuple((tuple(a.shape), np.dtype(a.dtype).str) for a in self.leaves),
            str(self.device),
        )

    def frozen(self) -> tuple[Any, ...]:
        """``f``, the arguments that are not checked and the leaves held fixed: what a
        capture freezes."""
        held = tuple(leaf for i in self.argnums for _, leaf in self.fixed[i])
        return (*frozen_state(self.f, self.args, self.argnums), *held)

    def promoted_args(self) -> list[Any]:
        """The arguments with every floating array promoted to float64 (call under x64)."""
        import jax

        return [jax.tree_util.tree_map(_promote_arg, a) for a in self.args]

    def to_leaves(self, X: np.ndarray, dtypes: Sequence[Any]) -> list[Any]:
        """Rows ``(B, n)`` → one device array ``(B, *shape)`` per checked leaf, in ``dtypes``."""
        import jax

        return [
            jax.device_put(np.ascontiguousarray(part).astype(dt), self.placement)
            for part, dt in zip(self.layout.split(X), dtypes, strict=True)
        ]


def _committed(a: Any) -> bool:
    """Whether ``a`` is a JAX array committed to its device (``jax.device_put`` with a
    device); a NumPy array or an uncommitted one (``jnp.asarray``) is not."""
    return bool(getattr(a, "committed", False))


def _rows(arrays: Sequence[Any], B: int) -> np.ndarray:
    """Batched leaves ``(B, ...)`` → one float64 ``(B, total)`` array."""
    parts = [np.asarray(a).astype(np.float64).reshape(B, -1) for a in arrays]
    return np.concatenate(parts, axis=1) if parts else np.empty((B, 0))


class _Batched:
    """A batch function with a one-row-at-a-time fallback when ``vmap`` fails.

    Parameters
    ----------
    batch : callable
        ``(B, a) → (B, b)`` float64, vmapped.
    row : callable
        The same for one row ``(a,) → (b,)``, without vmap.
    batch_size : int
        Most rows per batched call. Every call runs exactly
        ``min(batch_size, _MAX_ROWS)`` rows, fewer for a wide input or output (see
        :func:`polygrad.reference.differences.rows_per_batch`), the last chunk
        padded: XLA
        may round differently for different batch shapes, and a point's value
        must not depend on which points share its batch. It also means one
        compilation per callable.
    ctx : callable
        Returns the context manager the calls run in (x64 or nothing).
    notes : list of str
        Gets a note the first time the fallback is taken.
    what : str
        What is batched, for the note.
    out_width : int
        ``b``, the numbers per output row: a VJP of a scalar function returns rows as
        wide as its input, and a batch of them must stay within the same byte budget
        as a batch of inputs (128 padded rows of 1e6 float64 were 1 GB, three times
        over in the conversions).
    """

    def __init__(
        self,
        batch: Callable[[np.ndarray], np.ndarray],
        row: Callable[[np.ndarray], np.ndarray],
        batch_size: int,
        ctx: Callable[[], contextlib.AbstractContextManager[Any]],
        notes: list[str],
        what: str,
        out_width: int = 0,
    ):
        self.batch, self.row = batch, row
        self.batch_size = max(1, min(int(batch_size), _MAX_ROWS))
        self.ctx, self.notes, self.what = ctx, notes, what
        self.out_width = int(out_width)
        self.vmap_ok = True

    def _padded(self, X: np.ndarray, rows: int) -> np.ndarray:
        """Run exactly ``rows`` rows (repeating the last), so results never depend on B."""
        B = X.shape[0]
        last = X[-1:] if B else np.zeros((1, X.shape[1]))
        X = np.concatenate([X, np.repeat(last, rows - B, axis=0)])
        return self.batch(X)[:B]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        # fixed per callable (its widths are): fewer rows for a large input or output
        rows = rows_per_batch(max(X.shape[1], self.out_width), self.batch_size)
        with self.ctx():
            if self.vmap_ok:
                try:
                    return chunked(lambda A: self._padded(A, rows), X, rows)
                except Exception as exc:  # noqa: BLE001 - any vmap failure: go row by row
                    self.vmap_ok = False
                    self.notes.append(
                        f"jax.vmap failed for the {self.what} ({type(exc).__name__}); it was "
                        "computed one row at a time"
                    )
            return np.stack([self.row(x) for x in X])


class _Derivatives:
    """Batched evaluate/VJP/JVP of ``g`` at fixed primal leaves, in one precision."""

    def __init__(
        self,
        g: Callable[..., list[Any]],
        flat: _FlatFunction,
        dtypes: Sequence[Any],
        batch_size: int,
        ctx: Callable[[], contextlib.AbstractContextManager[Any]],
        notes: list[str],
        label: str,
        route: str = "",
    ):
        self.g, self.flat, self.dtypes = g, flat, list(dtypes)
        with ctx():
            self.primals = [p[0] for p in flat.to_leaves(flat.x0[None], self.dtypes)]
            # a concrete call, not eval_shape: f may be untraceable (then vmap falls back)
            self.cot_specs = [(o.shape, o.dtype) for o in self._float_g(*self.primals)]
        # jitted once per function, argument signature and frozen state: a later check of
        # the same function (another point) reuses the compilation, and a new function
        # object with the same jaxpr (a parametrized test's new lambda) shares it
        self.ctx, self._context = ctx, (label, route, flat.capture_key())
        self._eval_jit, self._vjp_jit, self._jvp_jit = CAPTURES.get(
            "jax.jit", self._context, flat.frozen(), self._jits
        )

        self._batching = (batch_size, notes, label)

    def batched(self) -> tuple[_Batched, _Batched, _Batched]:
        """The batched evaluation, VJP and JVP of ``g`` (``(B, a) -> (B, b)`` float64).

        Returned, not kept on ``self``: each holds this object through its bound
        methods, and an attribute holding them back would make a reference cycle, which
        keeps the primals alive after the check until the garbage collector runs.
        """
        batch_size, notes, label = self._batching
        n = self.flat.x0.size
        m = sum(int(np.prod(shape)) for shape, _ in self.cot_specs)

        def make(batch: Callable, row: Callable, what: str, width: int) -> _Batched:
            return _Batched(batch, row, batch_size, self.ctx, notes, f"{what} ({label})", width)

        return (
            make(self._evaluate, self._evaluate_row, "evaluation", m),
            make(self._vjp, self._vjp_row, "VJP", n),
            make(self._jvp, self._jvp_row, "JVP", m),
        )

    def reverse_failure(self) -> str | None:
        """None where JAX differentiates ``g`` in reverse mode, else why it cannot
        (``lax.while_loop`` has no transpose): traced abstractly, nothing is computed,
        once per function and signature."""
        return CAPTURES.get("jax.reverse", self._context, self.flat.frozen(), self._reverse_failure)

    def _reverse_failure(self) -> str | None:
        import jax
        import jax.numpy as jnp

        def pull(*primals: Any) -> Any:
            _, vjp = jax.vjp(self._float_g, *primals)
            return vjp([jnp.zeros(shape, dtype) for shape, dtype in self.cot_specs])

        try:
            with self.ctx():
                jax.eval_shape(pull, *self.primals)
        except Exception as exc:  # noqa: BLE001 - the reason goes to the notes
            return f"reverse mode failed: {describe_exception(exc)}"
        return None

    # -- helpers -----------------------------------------------------------------
    def _jits(self) -> tuple[Any, Any, Any]:
        """Batched evaluation, VJP and JVP, each under ``jax.jit`` (compiled on first call),
        shared with every function of the same jaxpr where that can be told
        (:func:`polygrad.backends._jax_programs.compiled_for`)."""
        import jax

        with self.ctx():
            shared = compiled_for(self.g, self.primals, self.dtypes[0], self._context)
        loops = _bounded_loops(self.g, self.primals, self.ctx)
        if loops is not None:  # evaluations far from the point may never leave a loop
            return loops, jax.jit(self._vjp_batch), jax.jit(self._jvp_batch)
        if shared is not None:
            return shared
        return jax.jit(jax.vmap(self.g)), jax.jit(self._vjp_batch), jax.jit(self._jvp_batch)

    def _float_g(self, *leaves: Any) -> list[Any]:
        """``g`` with integer outputs cast to float, so every output has a cotangent."""
        import jax.numpy as jnp

        return [
            o if jnp.issubdtype(o.dtype, jnp.inexact) else o.astype(self.dtypes[0])
            for o in self.g(*leaves)
        ]

    def _cotangents(self, U: np.ndarray) -> list[Any]:
        import jax

        specs = self.cot_specs
        layout = Layout.from_shapes([str(i) for i in range(len(specs))], [s for s, _ in specs])
        return [
            jax.device_put(np.ascontiguousarray(u).astype(dt), self.flat.placement)
            for u, (_, dt) in zip(layout.split(U), specs, strict=True)
        ]

    def _vjp_batch(self, primals: list[Any], cots: list[Any]) -> Any:
        import jax

        _, pull = jax.vjp(self._float_g, *primals)
        return jax.vmap(pull)(cots)

    def _jvp_batch(self, primals: list[Any], tangents: list[Any]) -> Any:
        import jax

        def one(*t: Any) -> list[Any]:
            return jax.jvp(self._float_g, tuple(primals), tuple(t))[1]

        return jax.vmap(one)(*tangents)

    # -- batched (vmap) and single-row versions -------------------------------------
    def _evaluate(self, X: np.ndarray) -> np.ndarray:
        out = _rows(self._eval_jit(*self.flat.to_leaves(X, self.dtypes)), X.shape[0])
        if isinstance(self._eval_jit, _BoundedEvaluation):
            self._eval_jit.report(self._batching[1], self._batching[2])
        return out

    def _evaluate_row(self, x: np.ndarray) -> np.ndarray:
        leaves = [a[0] for a in self.flat.to_leaves(x[None], self.dtypes)]
        if isinstance(self._eval_jit, _BoundedEvaluation):
            out = _rows([o[None] for o in self._eval_jit.row(*leaves)], 1)[0]
            self._eval_jit.report(self._batching[1], self._batching[2])
            return out
        return _rows([o[None] for o in self.g(*leaves)], 1)[0]

    def _vjp(self, U: np.ndarray) -> np.ndarray:
        return _rows(self._vjp_jit(self.primals, self._cotangents(U)), U.shape[0])

    def _vjp_row(self, u: np.ndarray) -> np.ndarray:
        import jax

        _, pull = jax.vjp(self._float_g, *self.primals)
        cots = [c[0] for c in self._cotangents(u[None])]
        return _rows([c[None] for c in pull(cots)], 1)[0]

    def _jvp(self, V: np.ndarray) -> np.ndarray:
        tangents = self.flat.to_leaves(V, self.dtypes)
        return _rows(self._jvp_jit(self.primals, tangents), V.shape[0])

    def _jvp_row(self, v: np.ndarray) -> np.ndarray:
        import jax

        tangents = tuple(t[0] for t in self.flat.to_leaves(v[None], self.dtypes))
        out = jax.jvp(self._float_g, tuple(self.primals), tangents)[1]
        return _rows([o[None] for o in out], 1)[0]


LOOP_TRIPS_FACTOR = 16
"""A ``while`` loop is cut short after this many times the trips it takes at the point..."""
LOOP_TRIPS_MIN = 1000
"""...and never before this many."""


class _BoundedEvaluation:
    """The batched evaluation of a function whose ``while`` loops are bounded
    (:mod:`polygrad.mpexec.jaxpr_loops`): a loop still running after
    ``LOOP_TRIPS_FACTOR`` times its trips at the point (at least ``LOOP_TRIPS_MIN``)
    stops, and the point's value is NaN, with a note."""

    def __init__(self, closed: Any, bound: Any, base: int) -> None:
        import jax

        from ..mpexec.jaxpr_loops import bounded

        self.bound, self.base, self.noted = bound, base, 0
        self.row = bounded(closed, bound)
        self.batch = jax.jit(jax.vmap(self.row))

    def __call__(self, *leaves: Any) -> Any:
        return self.batch(*leaves)

    def report(self, notes: list[str], label: str) -> None:
        """Note (once, updated) how many evaluations had a loop cut short."""
        import jax

        jax.effects_barrier()  # the loops' counts reach the host through callbacks
        if self.bound.cut == self.noted:
            return
        old = [n for n in notes if n.startswith(_CUT_NOTE_START) and f"({label})" in n]
        for n in old:
            notes.remove(n)
        self.noted = self.bound.cut
        notes.append(
            f"{_CUT_NOTE_START}{self.bound.cap} trips ({LOOP_TRIPS_FACTOR} x the {self.base} "
            f"it takes at the point, at least {LOOP_TRIPS_MIN}) in {self.bound.cut} "
            f"evaluation(s) of f ({label}) away from the point: its stopping test was not "
            "met there (a fixed-point or Newton iteration that does not converge, a "
            "tolerance below round-off); those evaluations were taken as not finite (NaN) "
            "instead of running on"
        )


_CUT_NOTE_START = "a while_loop of f was stopped after "


def _bounded_loops(
    g: Callable[..., list[Any]], primals: list[Any], ctx: Callable[[], Any]
) -> _BoundedEvaluation | None:
    """The bounded evaluation of ``g`` where its jaxpr holds a ``while`` loop, else None
    (also where ``g`` cannot be traced: its plain evaluation then decides)."""
    import jax

    from ..mpexec.jaxpr_loops import LoopBound, has_while, loop_trips

    try:
        with ctx():
            closed = jax.make_jaxpr(lambda *a: list(g(*a)))(*primals)
            if not has_while(closed):
                return None
            base = loop_trips(closed, primals)
    except Exception:  # noqa: BLE001 - not traceable here: evaluated as before
        return None
    bound = LoopBound(max(LOOP_TRIPS_MIN, LOOP_TRIPS_FACTOR * base))
    return _BoundedEvaluation(closed, bound, base)


class JaxBackend(Backend):
    """JAX arrays (``jax.Array``); gradients by ``jax.vjp``/``jax.jvp``, batched by ``jax.vmap``."""

    name = "jax"
    module = "jax"
    extra = "jax"
    supports_autodiff = True
    supports_float64 = True
    supports_vmap = True
    arbitrary_precision = False

    @classmethod
    def owns(cls, x: Any) -> bool:
        jax = sys.modules.get("jax")
        return jax is not None and isinstance(x, jax.Array)

    def to_numpy(self, x: Any) -> np.ndarray:
        """A host copy of ``x`` (any device), in its own dtype."""
        return np.array(x, copy=True)

    complex_convention = "wirtinger"

    def from_numpy(self, a: np.ndarray) -> Any:
        """A ``jax.Array`` of ``a``'s dtype (float64 kept, whatever the x64 setting)."""
        import jax.numpy as jnp

        with _x64():
            return jnp.asarray(a)

    def asarray(self, array: Any, dtype: str | None = None) -> Any:
        """A ``jax.Array``; float64 is made under ``jax.enable_x64`` (the flag is not changed)."""
        import jax.numpy as jnp

        x = np.array(array, copy=True)
        try:
            target = np.dtype(jnp.dtype(dtype)) if dtype is not None else x.dtype
        except TypeError as exc:
            raise InputTypeError(f"jax has no dtype {dtype!r}") from exc
        if target.itemsize == (16 if target.kind == "c" else 8):  # 64-bit parts need x64
            with _x64():
                return jnp.asarray(x, dtype=target)
        return jnp.asarray(x, dtype=target)

    def namespace(self) -> Any:
        import jax.numpy as jnp

        return jnp

    def devices(self) -> list[str]:
        import jax

        return [f"{d.platform}:{d.id}" for d in jax.devices()]

    def make_complex(self, re: Any, im: Any) -> Any:
        import jax

        return jax.lax.complex(re, im)

    def stack_pair(self, re: Any, im: Any) -> Any:
        import jax.numpy as jnp

        return jnp.stack([re, im], axis=-1)

    def _pullback(
        self, g: Callable[..., Any], primals: list[Any], cotangent: np.ndarray
    ) -> list[np.ndarray | None]:
        import jax
        import jax.numpy as jnp

        wide = any(np.dtype(getattr(p, "dtype", np.float32)).itemsize >= 8 for p in primals)
        with _x64() if wide else contextlib.nullcontext():
            out, pull = jax.vjp(g, *primals)
            grads = pull(jnp.asarray(cotangent, dtype=out.dtype).reshape(out.shape))
            return [np.asarray(v) for v in grads]

    def make_target(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        supplied: Supplied,
        batch_size: int,
        wrt: str = "inputs",
    ) -> Target:
        """Build the :class:`~polygrad.backends.base.Target` of a JAX function.

        Parameters
        ----------
        f : callable
            A JAX function of ``args`` (may be jitted; may use custom rules).
        args : tuple
            Its arguments: pytrees of ``jax.Array`` (NumPy arrays and Python
            floats are converted with ``jnp.asarray`` under the current x64
            setting) and any non-array values.
        argnums : tuple of int
            The checked arguments; their floating leaves are the flat inputs.
        supplied : Supplied
            Must be empty: JAX differentiates ``f`` itself.
        batch_size : int
            Most rows per vmapped call.
        wrt : {"inputs"}
            ``"parameters"`` is rejected: in JAX the parameters are arguments.

        Returns
        -------
        Target
            Callables on float64 NumPy arrays (shapes in :mod:`.base`); the
            working dtype is the JAX promotion of the checked leaves' dtypes.

        Raises
        ------
        ValueError
            ``wrt="parameters"``, or derivatives were supplied.
        InputTypeError, InputValueError
            A checked leaf is integer, bool, complex or non-finite, or the checked
            arguments hold no floating leaf. (Leaves that are no numbers or arrays, such
            as a module's activation function, and the integer and boolean arrays inside
            a pytree, such as an index buffer, are held fixed, with a note.)
        """

        _refuse_misuse(wrt, supplied)
        flat = _FlatFunction(f, args, argnums)
        if not flat.leaves:
            raise InputTypeError(
                "nothing to check: the checked arguments hold no floating arrays"
                + (f" (held fixed: {', '.join(flat.fixed_names[:5])})" if flat.fixed_names else "")
            )
        is64 = any(np.dtype(d).itemsize >= 8 for d in flat.dtypes)
        notes: list[str] = []
        wd = np.dtype(narrowest_input_dtype(flat.dtypes, notes))
        if flat.fixed_names:
            notes.append(_held_fixed_note(flat.fixed_names))
        # a closed-over NNX or Keras variable that f writes is put back, with an error
        with guarded(state_cells((f, *args))):
            narrow = CAPTURES.get(
                "jax.narrowest", flat.capture_key(), flat.frozen(),
                lambda: _narrowest_computed(flat),
            )  # fmt: skip
            if narrow is not None:  # f casts its inputs down: it computes in that dtype
                notes.append(computed_in_note(wd.name, narrow[0].name, narrow[1]))
                wd = narrow[0]

            def working_ctx() -> contextlib.AbstractContextManager[Any]:
                return _x64() if is64 else contextlib.nullcontext()

            out_leaves = self._plain_call(flat, working_ctx)
            work = _Derivatives(flat, flat, flat.dtypes, batch_size, working_ctx, notes, wd.name)
            evaluate, vjp, jvp = work.batched()
            y0 = evaluate(flat.x0[None])[0]
        with working_ctx():
            flows = _check_gradient_flows(flat, evaluate, y0, dtype_eps(wd))
        notes.extend([flows] if flows else [])
        ev64, vjp64, jvp64 = evaluate, vjp, jvp
        if wd != np.dtype(np.float64):  # narrower inputs, or f computes narrower inside
            ev64, vjp64, jvp64 = self._promote(flat, wd, batch_size, notes)

        # the jaxpr behind the mp evaluator, cached like the compiled callables
        evaluate_mp, mp_reason = CAPTURES.get(
            "jax.mp", flat.capture_key(), flat.frozen(), lambda: _mp_evaluator(flat)
        )
        target = Target(
            x0=flat.x0,
            y0=y0,
            working_dtype=wd.name,
            eps=dtype_eps(wd),
            evaluate=evaluate,
            evaluate64=ev64,
            vjp=vjp,
            vjp64=vjp64,
            jvp=_forward_mode(jvp),
            jvp64=_forward_mode(jvp64) if jvp64 is not None else None,
            evaluate_mp=evaluate_mp,
            input_layout=flat.layout,
            output_layout=output_layout(out_leaves, flat.out_paths, flat.complex_outputs),
            backend=self.name,
            notes=notes,
            mp_unavailable_reason=mp_reason,
            deferred={
                "rule_mp": lambda t: _set_vjp_mp(t, flat),
                "reverse": lambda t: _probe_reverse(t, work),
            },  # fmt: skip
            symmetric_reads=lambda: _symmetric_reads(flat, working_ctx),
            working_mp_value=(
                None if wd == np.dtype(np.float64) else lambda dps: _working_mp_value(flat, dps)
            ),
        )
        # built when a check asks for it
        defer_quad(target, lambda _: _quad_evaluator(flat), interpreted=True)
        return target

    @staticmethod
    def _plain_call(flat: _FlatFunction, ctx: Callable[[], Any]) -> list[Any]:
        """The output leaves at the point, in the user's mode, after the first trace of
        ``f`` under x64 (the narrowest dtype's).

        Where that trace left JAX's caches converting one of ``f``'s NumPy constants for
        the other mode (a NumPy float64 array used directly in an operation, x64 off),
        the call fails: JAX's caches are cleared, which puts the user's own calls of
        ``f`` right again, and ``f`` is traced in the user's mode only from then on.
        """
        import jax

        try:
            with ctx():
                return as_float_output([np.asarray(o) for o in flat(*flat.leaves)])[1]
        except _ModeMismatchError:
            jax.clear_caches()
            _trace_in_user_mode(flat)
        try:
            with ctx():
                return as_float_output([np.asarray(o) for o in flat(*flat.leaves)])[1]
        except _ModeMismatchError as exc:  # the user switched modes, with f traced in both
            raise InputTypeError(str(exc)) from exc

    def _promote(
        self, flat: _FlatFunction, wd: np.dtype, batch_size: int, notes: list[str]
    ) -> tuple[Any, Any, Any]:
        """float64 evaluate/VJP/JVP, or None where ``f`` cannot be promoted."""
        import jax

        dtypes64 = [np.float64] * len(flat.dtypes)
        user_mode_only = flat.user_mode_only
        with _x64():
            args64 = flat.promoted_args()

            def direct(*leaves: Any) -> list[Any]:
                return flat(*leaves, args=args64)

            def computes_in_float64() -> bool:
                return (
                    _all_float64(direct, flat)
                    and not _narrow_intermediates(direct, flat)
                    and not _draws_random_when_traced(flat)
                )

            key = flat.capture_key()
            if not user_mode_only and CAPTURES.get(
                "jax.float64", key, flat.frozen(), computes_in_float64
            ):
                d = _Derivatives(
                    direct, flat, dtypes64, batch_size, _x64, notes, "float64", "direct"
                )
                return d.batched()
        # f keeps a narrow dtype for float64 input: promote its jaxpr instead.
        promoter = _Promoter()
        try:
            closed = jax.make_jaxpr(flat)(*flat.leaves)

            def promoted(*leaves: Any) -> list[Any]:
                return promoter.run(closed, *leaves)

            with _x64():
                ok = _all_float64(promoted, flat)
        except Exception as exc:  # noqa: BLE001 - any failure means: no float64 version
            ok, why = False, f"{type(exc).__name__}: {exc}"
        else:
            why = "it still returns a narrower float"
        if not ok:
            where = f" at {promoter.blocker}" if promoter.blocker else ""
            notes.append(
                f"f computes in {wd.name} even for float64 input and its jaxpr could not be "
                f"promoted{where} ({why}); the reference is computed in the working dtype"
            )
            return None, None, None
        d = _Derivatives(promoted, flat, dtypes64, batch_size, _x64, notes, "float64", "jaxpr")
        if user_mode_only:
            notes.append(
                "f uses a NumPy 64-bit constant directly in a JAX operation while "
                "jax_enable_x64 is off, and JAX caches its conversion across the two modes: "
                "tracing f with x64 on broke its calls with x64 off, so JAX's caches were "
                "cleared (your own calls of f work again) and f was traced in your mode only, "
                "its jaxpr re-executed in float64 for the reference with the constants as f "
                "computes with them (close over jnp.asarray(...) of it for exact constants)"
            )
        elif _draws_random(closed):
            notes.append(
                "f draws random numbers (jax.random), and what it draws depends on the dtype "
                "drawn: its jaxpr was re-executed in float64 for the reference with each "
                f"number drawn as f draws it (in {wd.name}) and then widened"
            )
        else:
            notes.append(
                "f does not compute in float64 for float64 input (it casts, or mixes in "
                "float32 constants); its jaxpr was re-executed with every floating constant "
                "and dtype promoted to float64 for the reference"
            )
        if promoter.dropped_rules:
            notes.append(
                "the custom derivative rules of "
                + ", ".join(sorted(set(promoter.dropped_rules)))
                + " cannot be promoted to float64, so autodiff is checked in the working "
                "dtype only (a wrong rule cannot be told apart from an unstable one)"
            )
            return d.batched()[0], None, None
        return d.batched()

    def gradient_function(
        self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]
    ) -> Callable[..., Any]:
        """A JAX function of the same arguments returning the gradient of ``f``.

        For a scalar ``f`` this is ``jax.grad(f, argnums)``; otherwise the VJP
        with a fixed pseudo-random (seed 0) standard-normal cotangent, cast to
        the output's dtype at each call. One checked argument gives its
        gradient; several give a tuple.
        """
        import jax
        import jax.numpy as jnp

        argnums = tuple(argnums)
        outs = jax.tree_util.tree_leaves(jax.eval_shape(f, *args))
        if any(jnp.iscomplexobj(o) for o in outs):  # complex outputs as (real, imag) pairs
            f = _real_pairs(f)
            outs = jax.tree_util.tree_leaves(jax.eval_shape(f, *args))
        which = argnums[0] if len(argnums) == 1 else argnums
        if len(outs) == 1 and outs[0].shape == ():
            return jax.grad(f, argnums=which)
        rng = np.random.default_rng(0)
        cot_np = [rng.standard_normal(o.shape) for o in outs]

        def vjp_with_fixed_cotangent(*a: Any) -> Any:
            def of_checked(*checked: Any) -> Any:
                full = list(a)
                for i, c in zip(argnums, checked, strict=True):
                    full[i] = c
                return f(*full)

            out, pull = jax.vjp(of_checked, *[a[i] for i in argnums])
            leaves, td = jax.tree_util.tree_flatten(out)
            cot = [jnp.asarray(c, dtype=o.dtype) for c, o in zip(cot_np, leaves, strict=True)]
            grads = pull(jax.tree_util.tree_unflatten(td, cot))
            return grads[0] if len(argnums) == 1 else grads

        return vjp_with_fixed_cotangent


def _real_pairs(f: Callable[..., Any]) -> Callable[..., list[Any]]:
    """``f`` with each complex output leaf (shape ``S``) as its (Re, Im) pairs (``S + (2,)``)."""
    import jax
    import jax.numpy as jnp

    def pairs(*args: Any) -> list[Any]:
        outs = [jnp.asarray(o) for o in jax.tree_util.tree_leaves(f(*args))]
        return [jnp.stack([o.real, o.imag], axis=-1) if jnp.iscomplexobj(o) else o for o in outs]

    return pairs


def _symmetric_reads(
    flat: _FlatFunction, ctx: Callable[[], Any]
) -> dict[int, tuple[str, ...]] | None:
    """Checked leaves (by position) whose values reach a primitive that reads a symmetric
    matrix (:func:`polygrad.mpexec.jaxpr_coverage.symmetric_reads`); None where ``f``
    cannot be traced."""
    import jax

    from ..mpexec.jaxpr_coverage import symmetric_reads

    try:
        with ctx():
            closed = jax.make_jaxpr(flat)(*flat.leaves)
    except Exception:  # noqa: BLE001 - not capturable: no operation is known
        return None
    return symmetric_reads(closed)


def _mp_evaluator(flat: _FlatFunction) -> tuple[Callable[..., np.ndarray] | None, str | None]:
    """``evaluate_mp`` from ``f``'s jaxpr (:mod:`polygrad.mpexec.jaxpr`), or why there is none.

    ``f`` is traced in float64 (so its float literals keep float64 precision);
    when it does not accept float64 input (mixed-dtype ``lax`` calls), in the
    working dtypes: casts are the identity on mpmath numbers either way.
    """
    from ..mpexec.jaxpr import build_evaluate_mp

    if flat.user_mode_only:  # traced in the user's mode only: its constants as f uses them
        return build_evaluate_mp(flat, flat.leaves, flat.dtypes, x64=False)

    def of_leaves(*leaves: Any) -> list[Any]:
        return flat(*leaves, args=flat.promoted_args())

    ev, why = build_evaluate_mp(of_leaves, flat.leaves)
    if ev is None and why is not None and why.startswith("f could not be traced"):
        ev2, why2 = build_evaluate_mp(flat, flat.leaves, flat.dtypes)
        if ev2 is not None or not (why2 or "").startswith("f could not be traced"):
            return ev2, why2
    return ev, why


def _working_mp_value(flat: _FlatFunction, dps: int) -> np.ndarray | None:
    """``f`` at the point on mpmath numbers, traced in the working dtypes (its literals
    and ``finfo(x.dtype)`` as the working program has them), or None where that trace
    has no mp evaluator; the evaluator is cached like the float64-traced one."""
    from ..mpexec.jaxpr import build_evaluate_mp

    ev, _ = CAPTURES.get("jax.mp.working", flat.capture_key(), flat.frozen(),
                         lambda: build_evaluate_mp(flat, flat.leaves, flat.dtypes))  # fmt: skip
    return None if ev is None else ev(flat.x0, np.zeros_like(flat.x0), dps)


def _quad_evaluator(flat: _FlatFunction) -> tuple[Callable[..., np.ndarray] | None, str | None]:
    """``evaluate_quad`` from ``f``'s jaxpr vmapped over the check's points
    (:mod:`polygrad.mpexec.jaxpr_quad`), cached like the mp evaluator; or None and why.

    ``f`` is traced as the mp evaluator traces it: in float64, or in the working dtypes
    where only that works, or in the user's mode where ``f`` is traced only there.
    """
    from ..reference.quad import quad_dtype, quad_missing_reason

    q = quad_dtype()
    if q is None:
        return None, quad_missing_reason()
    return CAPTURES.get(  # type: ignore[no-any-return]
        "jax.quad", flat.capture_key(), flat.frozen(), lambda: _traced_quad(flat, q)
    )


def _traced_quad(
    flat: _FlatFunction, q: Any
) -> tuple[Callable[..., np.ndarray] | None, str | None]:
    """The quad evaluator of :func:`_quad_evaluator` (built once per function)."""
    import jax

    from ..mpexec.jaxpr_quad import quad_jaxpr_evaluator, quad_unsupported

    shapes = [tuple(np.shape(a)) for a in flat.leaves]

    def of_leaves(*leaves: Any) -> list[Any]:
        return list(flat(*leaves, args=flat.promoted_args()))

    tries = [(flat, list(flat.dtypes), False)] if flat.user_mode_only else [
        (of_leaves, [np.float64] * len(shapes), True), (flat, list(flat.dtypes), True)]  # fmt: skip
    why = "f could not be traced to a jaxpr"
    for fn, dtypes, x64 in tries:

        def trace(B: int, fn: Any = fn, dtypes: Any = dtypes, x64: bool = x64) -> Any:
            avals = [jax.ShapeDtypeStruct((B, *s), d) for s, d in zip(shapes, dtypes, strict=True)]
            with jax.enable_x64(True) if x64 else contextlib.nullcontext():
                return jax.make_jaxpr(jax.vmap(lambda *a: list(fn(*a))))(*avals)

        try:
            closed = trace(1)
        except Exception as exc:  # noqa: BLE001 - untraceable under vmap: no quad reference
            why = f"f could not be traced to a batched jaxpr ({type(exc).__name__}: {exc})"
            continue
        bad = quad_unsupported(closed)
        if bad:
            return None, "no quad rule for " + "; ".join(bad[:3])
        return quad_jaxpr_evaluator(trace, shapes, q, traced={1: closed}), None
    return None, why


def _set_vjp_mp(target: Target, flat: _FlatFunction) -> None:
    """Set ``target.vjp_mp`` from the jaxpr of ``f``'s VJP (cached like the mp evaluator):
    traced as the mp evaluator traces ``f`` (float64, or the user's mode where only that
    works), see :func:`polygrad.mpexec.jaxpr_vjp.build_vjp_mp`."""
    from ..mpexec.jaxpr_vjp import build_vjp_mp

    def build() -> Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None:
        if flat.user_mode_only:
            return build_vjp_mp(flat, flat.leaves, flat.dtypes, x64=False)

        def of_leaves(*leaves: Any) -> list[Any]:
            return flat(*leaves, args=flat.promoted_args())

        return build_vjp_mp(of_leaves, flat.leaves, [np.float64] * len(flat.leaves))

    rule = CAPTURES.get("jax.rule_mp", flat.capture_key(), flat.frozen(), build)
    x0 = flat.x0
    target.vjp_mp = None if rule is None else (lambda U, dps: rule(x0, U, dps))


def _all_float64(g: Callable[..., list[Any]], flat: _FlatFunction) -> bool:
    """Whether ``g`` (called under x64 on float64 leaves) returns only float64 floats."""
    import jax
    import jax.numpy as jnp

    leaves = [jax.device_put(np.asarray(a).astype(np.float64), flat.placement) for a in flat.leaves]
    try:
        outs = g(*leaves)
    except Exception:  # noqa: BLE001 - f does not accept float64 input
        return False
    return all(o.dtype == np.float64 for o in outs if jnp.issubdtype(o.dtype, jnp.inexact))


def _narrow_intermediates(g: Callable[..., list[Any]], flat: _FlatFunction) -> bool:
    """Whether ``g`` on float64 leaves computes any value in a narrower float (under x64).

    An untraceable ``g`` (NumPy inside) counts as having none: its jaxpr is unknown.
    """
    import jax
    from jax.extend.core import subjaxprs

    avals = [jax.ShapeDtypeStruct(a.shape, np.float64) for a in flat.leaves]
    try:
        todo = [jax.make_jaxpr(g)(*avals).jaxpr]
    except Exception:  # noqa: BLE001
        return False
    while todo:
        jaxpr = todo.pop()
        for eqn in jaxpr.eqns:
            if any(_is_narrow_float(getattr(v.aval, "dtype", np.int32)) for v in eqn.outvars):
                return True
        todo.extend(subjaxprs(jaxpr))
    return False


def _narrowest_computed(flat: _FlatFunction) -> tuple[np.dtype, str] | None:
    """The narrowest float ``f`` computes from its checked leaves, and the first primitive
    that produced it (under x64, the leaves as they are); None when there is none
    narrower than the leaves or ``f`` cannot be traced.

    Only values that depend on a checked leaf count: a float32 constant that ``f``
    widens before use rounds nothing of the computation. An equation with inner jaxprs
    (``pjit``, ``custom_jvp_call``, ``scan``...) that reads a dependent value is scanned
    inside: its inputs that stand for dependent operands depend (all of them where they
    do not map one to one onto the operands). A complex value counts as its real part's
    dtype.
    """
    import jax
    from jax.extend.core import jaxprs_in_params

    # x64 off in the user's mode: the leaves are 32-bit at most, and f's own mode shows
    # any narrower float as well (see _FlatFunction.user_mode_only)
    with _x64() if not flat.user_mode_only else contextlib.nullcontext():
        try:
            closed = jax.make_jaxpr(flat)(*flat.leaves)
        except Exception:  # noqa: BLE001 - untraceable f: nothing is known
            return None
    widest = max(dtype_eps(d) for d in flat.dtypes)
    found: tuple[float, np.dtype, str] | None = None
    todo = [(closed.jaxpr, [True] * len(closed.jaxpr.invars))]
    while todo:
        jaxpr, marks = todo.pop()
        tainted = {id(v) for v, t in zip(jaxpr.invars, marks, strict=True) if t}
        for eqn in jaxpr.eqns:
            reads = [id(v) in tainted for v in eqn.invars]
            if not any(reads):
                continue
            tainted.update(id(v) for v in eqn.outvars)
            for sub in jaxprs_in_params(eqn.params):
                # operands map one to one onto pjit/custom_jvp bodies; otherwise all count
                same = len(sub.invars) == len(reads)
                todo.append((sub, reads if same else [True] * len(sub.invars)))
            for v in eqn.outvars:
                dt = getattr(v.aval, "dtype", None)
                if dt is None or not jax.numpy.issubdtype(dt, jax.numpy.inexact):
                    continue
                complex_ = jax.numpy.issubdtype(dt, jax.numpy.complexfloating)
                real = np.finfo(dt).dtype if complex_ else np.dtype(dt)
                e = dtype_eps(real)
                if e > widest and (found is None or e > found[0]):
                    found = (e, real, str(eqn.primitive))
    return None if found is None else (found[1], found[2])


def _tangent_free(closed: Any) -> bool:
    """Whether no output of a JVP jaxpr depends on its tangent inputs (the second half
    of its inputs); an equation depends on an input when any of its operands does."""
    jaxpr = closed.jaxpr
    half = len(jaxpr.invars) // 2
    tainted = {id(v) for v in jaxpr.invars[half:]}
    for eqn in jaxpr.eqns:
        if any(id(v) in tainted for v in eqn.invars):
            tainted.update(id(v) for v in eqn.outvars)
    return not any(id(v) in tainted for v in jaxpr.outvars)


def _check_gradient_flows(
    flat: Any, evaluate: Callable[[np.ndarray], np.ndarray], y0: np.ndarray, eps: float
) -> str | None:
    """Raise when no output depends on the inputs' tangents, yet the values depend on them.

    A ``jax.lax.stop_gradient`` of the whole output (or a NumPy round trip through
    ``pure_callback``) would make autodiff read a zero gradient; a constant function,
    whose zero gradient is right, passes, and so does a piecewise-constant one
    (``floor``, ``round``) that is constant on both sides of the point although the
    guard's 1% move crosses a step (:func:`~polygrad.backends._flow.steps_only`).

    Returns
    -------
    str or None
        A note for the report when the zero gradient is judged because the function
        is piecewise constant at the point; None otherwise.

    Raises
    ------
    InputTypeError
        The gradient cannot flow from the output to the inputs.
    """
    import jax

    if gradient_target():  # order=2: a disconnected gradient's zero derivative is judged
        return None

    def push(primals: list[Any], tangents: list[Any]) -> Any:
        return jax.jvp(lambda *p: flat(*p), primals, tangents)[1]

    leaves = list(flat.leaves)

    def tangent_free() -> bool:
        try:
            closed = jax.make_jaxpr(push)(leaves, [np.zeros_like(a) for a in leaves])
        except Exception:  # noqa: BLE001 - the checks that follow report what fails
            return False
        return _tangent_free(closed)

    if not CAPTURES.get("jax.flow", flat.capture_key(), flat.frozen(), tangent_free):
        return None
    # a rule that ignores its tangents but returns something else is a wrong rule, for
    # the comparison to find; a cut-off output has a tangent of exactly zero
    tangent = push(leaves, [np.ones_like(a) for a in leaves])
    if any(np.any(np.asarray(t) != 0) for t in jax.tree_util.tree_leaves(tangent)):
        return None
    change = change_under_a_move(evaluate, flat.x0, y0, eps)
    if not change:
        return None  # a constant function: autodiff's zero gradient is right
    steps = steps_only(evaluate, flat.x0, y0, eps, change)
    if steps is not None:  # floor, round, sign near a step: zero is right, and judged
        return steps.note("JAX's derivatives of every path are zero")
    raise InputTypeError(
        "the gradient cannot flow: no output of the function depends on its inputs through "
        f"JAX's derivatives, although its values change with them (largest change "
        f"{change:.3g} for a 1% move); autodiff would read this as a zero gradient. Cause: "
        "jax.lax.stop_gradient of the output, or a computation outside JAX (pure_callback, "
        "NumPy) on the way. Compute the output with jax.numpy operations on the inputs."
    )


def _refuse_misuse(wrt: str, supplied: Supplied) -> None:
    """Raise for options that do not apply to JAX: ``wrt="parameters"`` (the parameters
    are arguments in JAX) and supplied derivatives (JAX differentiates ``f``).

    Raises
    ------
    ValueError
    """
    if wrt != "inputs":
        raise ValueError(
            "wrt='parameters' is for models that hold their parameters (PyTorch, Keras); "
            "in JAX the parameters are arguments: pass them (a pytree of arrays, or the "
            "module itself, e.g. an equinox or flax nnx module) as an argument of f and "
            "select it with argnums, e.g. check(loss, model, x, argnums=0)"
        )
    if supplied.given():
        raise ValueError(
            f"JAX differentiates f itself; {', '.join(supplied.given())}= is only for NumPy "
            "functions. Wrap a hand-written rule in jax.custom_vjp/custom_jvp to check it."
        )


def _held_fixed_note(names: list[str]) -> str:
    """The note naming the leaves of the checked arguments that are held fixed."""
    shown = ", ".join(names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return (
        "leaves of the checked arguments that are no floating arrays (functions, "
        "objects, integer or boolean arrays inside a pytree) are held fixed, as "
        f"eqx.partition(tree, eqx.is_inexact_array) does: {shown}{more}"
    )
