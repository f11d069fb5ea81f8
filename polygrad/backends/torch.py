"""The PyTorch backend: ``torch.func`` transforms, batched with ``vmap``.

torch is imported only when a :class:`TorchBackend` is created, never when
``polygrad`` is imported.

How a user's function is seen
-----------------------------
* ``wrt="inputs"``: ``f(*args)`` as a function of the tensors in
  ``args[argnums]`` (pytrees of tensors are allowed).
* ``wrt="parameters"``: ``f(*args)`` as a function of the trainable
  parameters (``requires_grad=True``) of the ``torch.nn.Module`` objects
  involved: ``f`` itself when it is a module, the module of a bound method
  such as ``model.loss``, and every module passed as a top-level argument
  (``check(lambda m, x: loss(m(x)), model, x, wrt="parameters")``). The
  parameters are substituted with :func:`torch.func.functional_call`, so the
  model is never modified. With one module, entries are named like
  ``"conv1.weight[0, 0, 1, 2]"``; with several, a module passed as argument
  ``i`` is prefixed ``"arg{i}."``.

Evaluation is batched with :func:`torch.func.vmap` in chunks of the size that
runs fastest (at most ``batch_size`` points; a few points are evaluated with
plain calls); a function that vmap cannot batch (data-dependent
Python control flow, ``.item()``, an ``autograd.Function`` without a vmap
rule...) is evaluated one point at a time, and the report says so. VJPs use
:func:`torch.func.vjp` vmapped over the cotangents, falling back to
:func:`torch.autograd.grad` one row at a time; JVPs use :func:`torch.func.jvp`,
falling back to ``torch.autograd.forward_ad``, and are left out (with a note)
when forward mode is not supported.

The float64 reference runs the user's own program with the checked tensors in
float64 and every operator promoted to float64 on the fly
(:mod:`polygrad.backends._torch_promote`): modules, parameters, buffers and
tensors reach it in float64 whether they are arguments, closed over, globals
or attributes read by a method, and ``torch.compile``-decorated functions run
eagerly there. The user's objects are never changed (in-place operators act
on promoted copies). Evaluation, VJPs and JVPs of the float64 program all run
inside the promotion scope, under ``vmap`` as well. When the program cannot
run in float64 (a custom operator without a float64 kernel) or an operator
returns a lower precision from float64 operands, ``evaluate64`` is None and
the notes name that operator; the reference is then computed in the working
dtype.

Before anything else the function is called once, eagerly, with every tensor
it reads from outside (closed over, global, module buffers, arguments) backed
up: a call that changes one in place and reads the values written back into
its output (a buffer it accumulates into and uses, ``nn.Embedding(max_norm=...)``
renormalizing its weight) is refused with an ``InputMutationError`` that names
the tensor, and the values are put back. Tensors written but not read back
(BatchNorm and InstanceNorm running statistics in training mode, told apart by
a second call with the written tensors poisoned) are put back after every
evaluation instead, bit for bit, and the check goes on, with a note.

The mp reference (``evaluate_mp``) traces the function once, when a check first
asks for it (:meth:`Target.mp_mode`), to an ATen graph with ``make_fx`` and
re-executes it on mpmath numbers
(:mod:`polygrad.mpexec.torch_graph`); float32 parameters and constants
enter exactly and no float32 rounding is applied. A function that cannot be
traced, whose graph depends on the input values, or that uses an operator
without an mpmath rule (or a random one) gets ``evaluate_mp = None`` and an
``mp_unavailable_reason`` naming the cause.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

import numpy as np

from .._names import argument_names, leaf_name
from .._pytree import flatten, unflatten
from ..errors import InputMutationError, InputTypeError, NondeterministicFunctionError
from ._capture_cache import CAPTURES, frozen_state
from ._common import check_not_mutated, output_layout
from ._flow import steps_only
from ._quad_eval import defer_quad, quad_of_mp_program
from ._torch_promote import PromotionLog, float64_scope, narrowest_computed, outer_mutations
from .base import (
    SMALL_BATCH,
    WHOLE_BATCH_NUMBERS,
    Backend,
    ChunkSizer,
    Layout,
    Supplied,
    Target,
    change_under_a_move,
    chunked,
    computed_in_note,
    gradient_target,
    narrowest_input_dtype,
    not_an_array_message,
    validate_float_array,
)

__all__ = ["TorchBackend"]

MP_UNAVAILABLE = "high-precision (mpmath) evaluation is unavailable for this function"

PER_ROW_BATCH = 3
"""Small batches of up to this many rows run one plain call per row, larger ones through
``torch.func.vmap``: one vmap call costs about what two to four plain calls do (a
function of 10 inputs promoted to float64 here: 0.45 ms a plain call, 1.1 to 1.9 ms a
vmap call of 17 to 32 rows, where 16 plain calls took 7 ms)."""


@contextlib.contextmanager
def _vmap_fallback_quiet() -> Iterator[None]:
    """Silence ``torch.func.vmap``'s warning that an operator has no batching rule (it
    runs one row at a time instead, with the same result): polygrad's batching raises
    it, not the user's code, and it asks the user to file an issue."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="There is a performance drop", category=UserWarning
        )
        yield


def _batched(rows: int, numbers: int) -> bool:
    """Whether ``rows`` points (``numbers`` input numbers in all) go through vmap.

    A batch of up to :data:`PER_ROW_BATCH` rows runs row by row; so does one of up to
    :data:`SMALL_BATCH` rows of a large input (at least
    :data:`~polygrad.backends.base.WHOLE_BATCH_NUMBERS` numbers), whose calls cost
    their arithmetic, not their overhead, and whose vmap would hold every row's
    intermediates at once (9 rows of an input of 1e6: 0.2 GB more at the peak).
    """
    limit = PER_ROW_BATCH if numbers < WHOLE_BATCH_NUMBERS else SMALL_BATCH
    return rows > limit


def _first_line(exc: BaseException) -> str:
    """``"TypeName: first sentence of the message"``, at most about 160 characters."""
    lines = str(exc).strip().splitlines()
    text = lines[0].split(". ")[0] if lines else ""
    return f"{type(exc).__name__}: {text[:160]}"


def _add_note(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


def _flat_output(torch: Any, out: Any) -> Any:
    """Concatenate a function's output pytree into one 1-D floating tensor.

    A complex output of shape ``S`` enters as its real pairs ``(Re, Im)`` of
    shape ``S + (2,)`` (see :mod:`polygrad.complex`): autograd's rules for
    ``real`` and ``imag`` map a real cotangent onto the complex one.

    Raises
    ------
    InputTypeError
        An output is not a floating or complex tensor (integer, bool, other object).
    """
    leaves, _, _ = flatten(out)
    tensors = []
    for leaf in leaves:
        t = leaf if isinstance(leaf, torch.Tensor) else torch.as_tensor(leaf)
        if t.is_complex():
            t = torch.stack((t.real, t.imag), dim=-1)
        if not t.is_floating_point():
            raise InputTypeError(
                f"the function returned a value of dtype {t.dtype}; a gradient check needs "
                "floating outputs"
            )
        tensors.append(t)
    if not tensors:
        raise InputTypeError("the function returned no tensor")
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    return torch.cat([t.reshape(-1).to(dtype) for t in tensors])


def _signature(tensors: Sequence[Any]) -> tuple[tuple[Any, ...], ...]:
    """Shapes, dtypes and devices of the checked tensors: what a capture depends on."""
    return tuple((tuple(t.shape), str(t.dtype), str(t.device)) for t in tensors)


def _to_float64_numpy(torch: Any, t: Any) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


@functools.lru_cache(maxsize=1)
def _module_classes(torch: Any) -> tuple[type, type]:
    """Two small ``nn.Module`` classes, defined once torch is imported."""
    return _holder_class(torch), _gradient_class(torch)


def _holder_class(torch: Any) -> type:
    """``Holder``: an ``nn.Module`` calling ``fn(*args)`` that registers the checked modules."""

    class Holder(torch.nn.Module):
        """Calls ``fn(*args)``; registers the modules whose parameters are checked."""

        def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], modules: list[Any]):
            super().__init__()
            object.__setattr__(self, "_fn", fn)  # not registered: only ``modules`` are
            object.__setattr__(self, "_args", args)
            for j, mod in enumerate(modules):
                self.add_module(f"m{j}", mod)

        def forward(self) -> Any:
            return self._fn(*self._args)

    return Holder


def _gradient_class(torch: Any) -> type:
    """``Gradient``: an ``nn.Module`` returning the gradient of ``f`` (see its docstring)."""

    class Gradient(torch.nn.Module):
        """The gradient (or VJP with a fixed cotangent) of ``f`` w.r.t. ``args[argnums]``.

        A module holding ``f`` (or its model), so that ``wrt="parameters"``
        finds the model's parameters through it.
        """

        def __init__(self, f: Callable[..., Any], argnums: tuple[int, ...], cot: np.ndarray):
            super().__init__()
            self.argnums = argnums
            self.cot = cot
            owner = getattr(f, "__self__", None)
            if isinstance(f, torch.nn.Module):
                self.model = f
                self.method = None
            elif isinstance(owner, torch.nn.Module):
                self.model = owner
                self.method = cast(Any, f).__func__
            else:
                object.__setattr__(self, "plain", f)
                self.method = None

        def _fn(self) -> Callable[..., Any]:
            if "model" not in self._modules:
                return self.plain
            if self.method is not None:
                return types.MethodType(self.method, self.model)
            return self.model

        def forward(self, *args: Any) -> Any:
            fn, argnums = self._fn(), self.argnums

            def h(*checked: Any) -> Any:
                new = list(args)
                for i, c in zip(argnums, checked, strict=True):
                    new[i] = c
                return _flat_output(torch, fn(*new))

            checked = tuple(args[i] for i in argnums)
            try:
                out, vjp_fn = torch.func.vjp(h, *checked)
                grads = vjp_fn(torch.as_tensor(self.cot, dtype=out.dtype, device=out.device))
            except Exception:  # noqa: BLE001 - e.g. an autograd.Function without setup_context
                grads = self._autograd(h, checked)
            # a backward that detaches (or runs under no_grad) gives a gradient autograd
            # connects to no input: its second derivative, as autograd reads it, is 0, and
            # the check judges that (a zero term keeps the graph connected, exactly)
            grads = [
                g + 0 * c if isinstance(g, torch.Tensor) and isinstance(c, torch.Tensor) else g
                for g, c in zip(grads, checked, strict=True)
            ]
            return grads[0] if len(argnums) == 1 else tuple(grads)

        def _autograd(self, h: Callable[..., Any], checked: tuple[Any, ...]) -> list[Any]:
            with torch.enable_grad():
                leaves, _, td = flatten(list(checked))
                req = [t if t.requires_grad else t.detach().requires_grad_() for t in leaves]
                out = h(*unflatten(td, req))
                cot = torch.as_tensor(self.cot, dtype=out.dtype, device=out.device)
                grads = torch.autograd.grad(out, req, cot, create_graph=True, allow_unused=True)
            grads = [
                torch.zeros_like(t) if g is None else g for g, t in zip(grads, req, strict=True)
            ]
            return unflatten(td, grads)

    return Gradient


def _modules_of(torch: Any, f: Any, args: tuple[Any, ...]) -> list[Any]:
    """The ``nn.Module`` objects a check calls: ``f``, its owner, and the arguments."""
    found = [f, getattr(f, "__self__", None), *flatten(args)[0]]
    out: list[Any] = []
    for m in found:
        if isinstance(m, torch.nn.Module) and all(m is not o for o in out):
            out.append(m)
    return out


def _check_module_state(torch: Any, modules: list[Any], before: list[dict[str, Any]]) -> None:
    """Restore and raise if calling the function changed a module's parameters or buffers.

    Raises
    ------
    InputMutationError
        A parameter or buffer changed (e.g. BatchNorm running statistics in
        training mode); its old values have been restored.
    """
    for m, old in zip(modules, before, strict=True):
        now = m.state_dict()
        changed = [k for k, v in old.items() if k in now and not torch.equal(now[k], v)]
        if changed:
            with torch.no_grad():
                for k, v in old.items():
                    now[k].copy_(v)
            raise InputMutationError(
                f"calling the function changed {changed[0]!r} of the {type(m).__name__} "
                f"module{f' (and {len(changed) - 1} more)' if len(changed) > 1 else ''}, "
                "e.g. BatchNorm running statistics in training mode; a gradient check needs a "
                "function without side effects. Call model.eval() first. The module's "
                "parameters and buffers have been restored."
            )


def _reachable_modules(torch: Any, f: Any) -> list[Any]:
    """Modules ``f`` reaches directly: closure cells, globals it names, partial arguments, owner.

    Only used to name a changed tensor in an error message.
    """
    seen: list[Any] = []
    owner = getattr(f, "__self__", None)
    found = [f, owner, *getattr(owner, "__dict__", {}).values()]
    if isinstance(f, functools.partial):
        found += [f.func, *f.args, *f.keywords.values()]
    code = getattr(f, "__code__", None)
    found += [c.cell_contents for c in getattr(f, "__closure__", None) or () if c is not None]
    names = getattr(code, "co_names", ())
    found += [v for k, v in getattr(f, "__globals__", {}).items() if k in names]
    for m in found:
        if isinstance(m, torch.nn.Module) and all(m is not o for o in seen):
            seen.append(m)
    return seen


def _refuse_outer_mutations(
    torch: Any, f: Any, raw: Callable[..., Any], primals: list[Any], modules: list[Any]
) -> tuple[Callable[..., Any], str | None]:
    """Call the function once; refuse it if it changed a tensor from outside that it reads.

    Catches what the module check cannot see: buffers of modules the function
    closes over or reads from a global (BatchNorm in training mode) and plain
    tensors updated in place. A write whose values the output does not read back
    (:func:`_writes_read_back`: BatchNorm's running statistics in training mode,
    which are written, while the output uses the batch's own statistics) is kept
    from the user's tensors instead: every later call puts them back.

    Returns
    -------
    raw : callable
        ``raw`` itself, or ``raw`` restoring the written tensors after each call.
    note : str or None
        What was written and restored, for the report.

    Raises
    ------
    InputMutationError
        The call changed a tensor it does not own and its output reads it; its values
        have been restored.
    """
    found = outer_mutations(torch, raw, [p.clone() for p in primals])
    if not found:
        return raw, None
    found.sort(key=lambda m: not m.tensor.is_floating_point())
    first = found[0].tensor
    names = {
        id(v): (k, m)
        for m in [*modules, *_reachable_modules(torch, f)]
        for k, v in m.state_dict(keep_vars=True).items()
    }
    buffer = id(first) in names and not isinstance(first, torch.nn.Parameter)
    if id(first) in names:
        key, mod = names[id(first)]
        what = f"{key!r} of the {type(mod).__name__} module"
    else:
        dtype = str(first.dtype).removeprefix("torch.")
        what = f"a {dtype} tensor of shape {tuple(first.shape)} that it reads from outside"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    op = f" ({found[0].op})" if found[0].op else ""
    tensors = [m.tensor for m in found]
    if not _writes_read_back(torch, raw, primals, tensors):
        return _restoring(torch, raw, tensors), (
            f"f writes {what} in place{op}{more} and its output does not read the values "
            "written (as BatchNorm's running statistics in training mode): they were put "
            "back after every evaluation, so your tensors are unchanged, and the gradient "
            "checked is that of the call itself (through the batch statistics)"
        )
    # a module's buffer is most often a normalization's running statistics; a parameter
    # or a plain tensor is written by the function's own code (an optimizer step, a
    # renormalized embedding, a global counter)
    how = (
        "e.g. a buffer it updates and then reads: keep that state outside the function"
        if buffer
        else "e.g. an optimizer step, an in-place update of a global or a layer that "
        "rescales its own weight (nn.Embedding(max_norm=...)): compute without writing to it"
    )
    raise InputMutationError(
        f"calling the function changed {what} in place{op}{more}, and its output reads the "
        f"values written; a gradient check needs a function without side effects ({how}). "
        "The changed values have been restored."
    )


def _poisoned(torch: Any, t: Any) -> Any:
    """A tensor like ``t`` with values no computation gives back unchanged: NaN for
    floating tensors, each value moved for integer ones, negated for booleans."""
    if t.is_floating_point() or t.is_complex():
        return torch.full_like(t, float("nan"))
    if t.dtype == torch.bool:
        return ~t
    return t + 7919


def _writes_read_back(
    torch: Any, raw: Callable[..., Any], primals: list[Any], tensors: list[Any]
) -> bool:
    """Whether the output of ``raw`` at the primals reads the outer ``tensors`` it writes.

    Two calls, the second with the written tensors poisoned (:func:`_poisoned`): an
    output that changes (or is not finite) reads them. The tensors are restored.
    """
    backups = [t.detach().clone() for t in tensors]
    try:
        with torch.no_grad():
            out_a = _flat_output(torch, raw(*[p.clone() for p in primals]))
            for t, b in zip(tensors, backups, strict=True):
                t.copy_(_poisoned(torch, b))
            out_b = _flat_output(torch, raw(*[p.clone() for p in primals]))
    finally:
        _put_back(torch, tensors, backups)
    return not bool(torch.equal(out_a, out_b))


def _put_back(torch: Any, tensors: list[Any], backups: list[Any]) -> None:
    """Copy ``backups`` into ``tensors`` (bit for bit), outside autograd.

    Written through ``.data``, which leaves the version counter alone: a backward pass
    that saved the tensor (BatchNorm's saves its running statistics, unused in training
    mode) would otherwise refuse to run. ``torch.func`` transforms and ``__torch_function__``
    modes are switched off meanwhile: inside ``vjp``/``jvp`` a write to a tensor from
    outside is refused, and the float64 promotion mode would write to its own copy.
    """
    off = getattr(torch._C, "_DisableFuncTorch", contextlib.nullcontext)
    with torch.no_grad(), off(), torch._C.DisableTorchFunction():
        for t, b in zip(tensors, backups, strict=True):
            t.data.copy_(b)


def _restoring(torch: Any, raw: Callable[..., Any], tensors: list[Any]) -> Callable[..., Any]:
    """``raw`` putting ``tensors`` back to their present values after every call."""
    backups = [t.detach().clone() for t in tensors]

    def call(*leaves: Any) -> Any:
        try:
            return raw(*leaves)
        finally:
            _put_back(torch, tensors, backups)

    return call


def _restoring_build(build64: Callable[[], tuple], raw: Callable[..., Any]) -> Callable[[], tuple]:
    """``build64`` with its program replaced by ``raw`` (the restoring one)."""

    def build() -> tuple[Callable[..., Any], list[Any]]:
        return raw, build64()[1]

    return build


def _check_gradient_flows(
    torch: Any, work: _Program, primals: list[Any], y0: np.ndarray, eps: float
) -> str | None:
    """Raise when autograd connects no output to any input, yet the values depend on them.

    A ``.detach()``, ``torch.no_grad()`` or a round trip through NumPy on the way to the
    output would make autodiff read a zero gradient; a constant function (whose zero
    gradient is right) passes, and so does a piecewise-constant one (an index from
    ``argmax``, a comparison cast back to float) that is constant on both sides of the
    point although the guard's 1% move crosses a step
    (:func:`~polygrad.backends._flow.steps_only`).

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
    if gradient_target():  # order=2: a disconnected gradient's zero derivative is judged
        return None
    with torch.enable_grad():
        req = [p.detach().clone().requires_grad_() for p in primals]
        if work.call(*req).requires_grad:
            return None
    x0 = np.concatenate([_to_float64_numpy(torch, p).ravel() for p in primals])
    change = change_under_a_move(work.evaluate, x0, y0, eps)
    if not change:
        return None  # a constant function: autodiff's zero gradient is right
    steps = steps_only(work.evaluate, x0, y0, eps, change)
    if steps is not None:  # an argmax, a comparison near a step: zero is right, and judged
        return steps.note("autograd records no path")
    raise InputTypeError(
        "the gradient cannot flow: autograd connects the function's output to none of its "
        f"inputs, although its values change with them (largest change {change:.3g} for a "
        "1% move); autodiff would read this as a zero gradient. Cause: a .detach(), "
        "torch.no_grad() or a round trip through NumPy on the way to the output. Compute "
        "the output with torch operations on the input tensors."
    )


class _Program:
    """The user's function at one precision, as a function of its checked leaves.

    Parameters
    ----------
    torch : module
    raw : callable
        ``raw(*leaves) -> output pytree`` for the given checked tensors (each
        shaped like the corresponding primal); ``call`` flattens it to 1-D.
    primals : list of Tensor
        The checked tensors at ``x0``, in this program's dtypes and devices.
    batch_size : int
        Largest number of rows passed to one vmapped call.
    notes : list of str
        The target's notes, appended to when a fallback is taken.
    scope : callable, optional
        ``scope()`` returns the context every evaluation, VJP and JVP runs in
        (the float64 promotion mode); none by default.
    """

    def __init__(
        self,
        torch: Any,
        raw: Callable[..., Any],
        primals: list[Any],
        batch_size: int,
        notes: list[str],
        scope: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    ):
        self.torch = torch
        self.scope = scope
        self.raw = raw
        self.out_leaves: list[Any] = []
        self.out_paths: list[str] = []
        self.primals = primals
        self.batch_size = max(1, int(batch_size))
        self._sizer = ChunkSizer(self.batch_size, whole_below=WHOLE_BATCH_NUMBERS)
        self.notes = notes
        self.sizes = [p.numel() for p in primals]
        self.out_dtype = None
        self.out_device = None
        self._vmap_eval = True
        self._vmap_vjp = True
        self._vjp_fn: Callable[..., Any] | None = None
        self._graph: tuple[list[Any], Any] | None = None
        self._jvp_mode = "vmap"
        self._fallback_notes: dict[str, str] = {}  # what ("VJP", "JVP"...) -> its note

    # ----------------------------------------------------------------- helpers
    def leaves_from(self, X: np.ndarray) -> list[Any]:
        """Split ``(B, n)`` float64 rows into batched leaves ``(B, *shape)``."""
        torch = self.torch
        # a view of the rows, not a copy (each part is copied once, to the leaf's dtype)
        X = np.ascontiguousarray(X, dtype=np.float64)
        T = torch.from_numpy(X if X.flags.writeable else X.copy())
        parts, off = [], 0
        for p, size in zip(self.primals, self.sizes, strict=True):
            part = T[:, off : off + size].reshape((T.shape[0], *p.shape))
            parts.append(part.to(device=p.device, dtype=p.dtype))
            off += size
        return parts

    def _rows(self, grads: Sequence[Any], k: int) -> np.ndarray:
        """Flatten per-leaf batched results ``(k, *shape)`` into ``(k, n)`` float64."""
        flat = [_to_float64_numpy(self.torch, g).reshape(k, -1) for g in grads]
        return np.concatenate(flat, axis=1) if flat else np.zeros((k, 0))

    def _note_fallback(self, what: str, exc: BaseException) -> None:
        note = (
            f"torch.func.vmap could not batch the {what} ({_first_line(exc)}); "
            "it is computed one point at a time"
        )
        self._fallback_notes[what] = note
        _add_note(self.notes, note)

    def call(self, *leaves: Any) -> Any:
        """The output for the checked tensors ``leaves``, flattened to one 1-D tensor."""
        return _flat_output(self.torch, self.raw(*leaves))

    def first_call(self) -> Any:
        """Call once on copies of the primals; raise if they were modified in place.

        Returns the flattened output and records the output leaves in ``out_leaves``.
        """
        with self.scope(), _vmap_fallback_quiet():
            return self._first_call()

    def _first_call(self) -> Any:
        torch = self.torch
        leaves = [p.clone() for p in self.primals]
        raw_out = self.raw(*leaves)
        self.out_leaves, self.out_paths, _ = flatten(raw_out)
        for leaf in self.out_leaves:
            if not isinstance(leaf, torch.Tensor):
                raise InputTypeError(
                    f"the function returned a {type(leaf).__name__}, not a tensor; return "
                    "the tensor itself (float(), .item() or .numpy() cut it off from "
                    "autograd)"
                )
        out = _flat_output(torch, raw_out)
        check_not_mutated(
            [_to_float64_numpy(torch, t) for t in leaves],
            [_to_float64_numpy(torch, t) for t in self.primals],
        )
        self.out_dtype, self.out_device = out.dtype, out.device
        return out

    # -------------------------------------------------------------- evaluate
    def evaluate(self, X: np.ndarray) -> np.ndarray:
        """``(B, n) -> (B, m)`` float64."""
        with self.scope(), _vmap_fallback_quiet():
            return self._sizer(self._evaluate_chunk, X)

    def _evaluate_chunk(self, X: np.ndarray) -> np.ndarray:
        torch = self.torch
        leaves = self.leaves_from(X)
        if self._vmap_eval and _batched(X.shape[0], X.size):
            try:
                with torch.no_grad():
                    return _to_float64_numpy(torch, torch.func.vmap(self.call)(*leaves))
            except Exception as exc:  # noqa: BLE001 - anything vmap cannot batch
                # point by point: if a point itself raises (a matrix that is no longer
                # positive definite), the failure is the function's there, not vmap's,
                # and it propagates (the check treats such points as not finite)
                rows = [self.call(*(leaf[b] for leaf in leaves)) for b in range(X.shape[0])]
                self._vmap_eval = False
                self._note_fallback("function", exc)
                return np.stack([_to_float64_numpy(torch, r) for r in rows])
        rows = [self.call(*(leaf[b] for leaf in leaves)) for b in range(X.shape[0])]
        return np.stack([_to_float64_numpy(torch, r) for r in rows])

    # ------------------------------------------------------------------- vjp
    def vjp(self, U: np.ndarray) -> np.ndarray:
        """``(k, m) -> (k, n)`` = ``U @ J``."""
        with self.scope(), _vmap_fallback_quiet():
            return chunked(self._vjp_chunk, U, self.batch_size)

    def _vjp_chunk(self, U: np.ndarray) -> np.ndarray:
        torch = self.torch
        k = U.shape[0]
        Ut = torch.tensor(np.asarray(U, dtype=np.float64)).to(self.out_device, self.out_dtype)
        if self._vmap_vjp and _batched(k, k * sum(self.sizes)):
            try:
                if self._vjp_fn is None:
                    _, self._vjp_fn = torch.func.vjp(self.call, *self.primals)
                return self._rows(torch.func.vmap(self._vjp_fn)(Ut), k)
            except Exception as exc:  # noqa: BLE001 - e.g. autograd.Function without vmap
                self._vmap_vjp = False
                self._vjp_fn = None
                self._note_fallback("VJP", exc)
        if self._graph is None:
            with torch.enable_grad():
                req = [p.detach().clone().requires_grad_() for p in self.primals]
                self._graph = (req, self.call(*req))
        req, out = self._graph
        if not out.requires_grad:
            # the output does not depend on the inputs through autograd (detached, or
            # computed outside torch): its gradient, as autograd sees it, is zero
            _add_note(
                self.notes,
                "the output does not depend on the inputs through autograd (a .detach(), "
                ".item(), .numpy() or torch.no_grad() on the way?): autodiff gives 0",
            )
            return np.zeros((k, sum(self.sizes)))
        rows = []
        for u in Ut:
            grads = torch.autograd.grad(out, req, u, retain_graph=True, allow_unused=True)
            rows.append(
                [torch.zeros_like(r) if g is None else g for g, r in zip(grads, req, strict=True)]
            )
        per_leaf = [torch.stack([row[j] for row in rows]) for j in range(len(req))]
        return self._rows(per_leaf, k)

    # ------------------------------------------------------------------- jvp
    def jvp(self, V: np.ndarray) -> np.ndarray:
        """``(k, n) -> (k, m)`` = ``V @ J.T``."""
        with self.scope(), _vmap_fallback_quiet():
            return chunked(self._jvp_chunk, V, self.batch_size)

    def _jvp_chunk(self, V: np.ndarray) -> np.ndarray:
        torch = self.torch
        tangents = self.leaves_from(V)
        primals = tuple(self.primals)
        if self._jvp_mode == "vmap":
            try:

                def push(*t: Any) -> Any:
                    return torch.func.jvp(self.call, primals, t)[1]

                return _to_float64_numpy(torch, torch.func.vmap(push)(*tangents))
            except Exception as exc:  # noqa: BLE001
                self._jvp_mode = "forward_ad"
                self._note_fallback("JVP", exc)
        fwad = torch.autograd.forward_ad
        rows = []
        for b in range(V.shape[0]):
            with fwad.dual_level():
                duals = [fwad.make_dual(p, t[b]) for p, t in zip(primals, tangents, strict=True)]
                out = self.call(*duals)
                tangent = fwad.unpack_dual(out).tangent
                rows.append(torch.zeros_like(out) if tangent is None else tangent)
        return np.stack([_to_float64_numpy(torch, r) for r in rows])

    def jvp_or_none(self, rng: np.random.Generator, label: str, target: Target) -> Callable | None:
        """The JVP if forward mode works for this function, else None (with a note)."""
        n = sum(self.sizes)
        try:
            with warnings.catch_warnings():  # torch's forward AD warns once about torch.jit
                warnings.simplefilter("ignore", DeprecationWarning)
                self.jvp(rng.standard_normal((1, n)))
        except Exception as exc:  # noqa: BLE001 - forward mode unsupported
            batched = self._fallback_notes.pop("JVP", None)  # moot: there is no JVP to batch
            self.notes[:] = [n for n in self.notes if n != batched]
            if target.mode_notes.get("fwd"):  # already said for the other program
                return None
            why = f"forward-mode AD (JVP) is not available{label} ({_first_line(exc)})"
            _add_note(self.notes, why + "; only reverse mode (VJP) is checked")
            target.note_unavailable("fwd", why)  # what an error for mode='fwd' says
            return None
        return self.jvp


class TorchBackend(Backend):
    """PyTorch tensors and ``torch.nn.Module`` models, differentiated with ``torch.func``."""

    name = "torch"
    module = "torch"
    extra = "torch"
    supports_autodiff = True
    supports_float64 = True
    supports_vmap = True
    arbitrary_precision = False

    def __init__(self) -> None:
        super().__init__()
        import torch

        self.torch = torch

    @classmethod
    def owns(cls, x: Any) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(x, (torch.Tensor, torch.nn.Module))

    def to_numpy(self, x: Any) -> np.ndarray:
        """A host copy of a tensor; bfloat16 becomes ``ml_dtypes.bfloat16`` (float32 without it)."""
        t = x.detach().cpu() if isinstance(x, self.torch.Tensor) else self.torch.as_tensor(x)
        if t.dtype == self.torch.bfloat16:
            try:
                import ml_dtypes

                return t.float().numpy().astype(ml_dtypes.bfloat16)
            except ImportError:  # pragma: no cover - ml_dtypes ships with most installs
                return t.float().numpy()
        return t.resolve_conj().resolve_neg().numpy().copy()

    def version(self) -> str:
        return str(self.torch.__version__)

    def from_numpy(self, a: np.ndarray) -> Any:
        """A tensor of ``a``'s values; ``ml_dtypes.bfloat16`` becomes ``torch.bfloat16``
        (through float32, which holds every bfloat16 value exactly)."""
        if a.dtype.name == "bfloat16":
            wide = self.torch.from_numpy(np.asarray(a, dtype=np.float32).copy())
            return wide.to(self.torch.bfloat16)
        return self.torch.from_numpy(np.array(a, copy=True))

    def asarray(self, array: Any, dtype: str | None = None) -> Any:
        x = np.array(array, copy=True)
        attr = dtype if dtype is not None else x.dtype.name
        fw_dtype = getattr(self.torch, attr, None)
        if not isinstance(fw_dtype, self.torch.dtype):
            raise InputTypeError(f"torch has no dtype {attr!r}")
        return self.torch.tensor(x).to(fw_dtype)

    def namespace(self) -> Any:
        return self.torch

    def devices(self) -> list[str]:
        torch = self.torch
        out = ["cpu"]
        if torch.cuda.is_available():
            out += [
                f"cuda:{i} ({torch.cuda.get_device_name(i)})"
                for i in range(torch.cuda.device_count())
            ]
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            out.append("mps (no float64)")
        return out

    def make_complex(self, re: Any, im: Any) -> Any:
        return self.torch.complex(re, im)

    def stack_pair(self, re: Any, im: Any) -> Any:
        return self.torch.stack([re, im], dim=-1)

    def _pullback(
        self, g: Callable[..., Any], primals: list[Any], cotangent: np.ndarray
    ) -> list[np.ndarray | None]:
        torch = self.torch
        with torch.enable_grad():
            checked = [p.detach().clone().requires_grad_() for p in primals]
            out = g(*checked)
            cot = torch.as_tensor(cotangent).to(out.dtype).reshape(out.shape)
            grads = torch.autograd.grad(out, checked, cot, allow_unused=True)
        return [None if v is None else v.detach().cpu().resolve_conj().numpy() for v in grads]

    # ---------------------------------------------------------------- targets
    def make_target(
        self,
        f: Callable[..., Any],
        args: tuple[Any, ...],
        argnums: tuple[int, ...],
        supplied: Supplied,
        batch_size: int,
        wrt: str = "inputs",
    ) -> Target:
        """Build the :class:`~polygrad.backends.base.Target` of a torch function.

        Parameters
        ----------
        f : callable or torch.nn.Module
            The function or model.
        args : tuple
            Its arguments: pytrees of tensors, models, other Python objects.
        argnums : tuple of int
            The checked arguments when ``wrt="inputs"`` (ignored otherwise).
        supplied : Supplied
            Must be empty: torch functions are differentiated by autograd.
        batch_size : int
            Largest number of points per vmapped call.
        wrt : {"inputs", "parameters"}
            Check w.r.t. ``args[argnums]``, or w.r.t. the trainable parameters
            of the modules involved (see the module docstring).

        Returns
        -------
        Target
            Callables on float64 NumPy arrays; ``evaluate_mp`` re-executes the
            function's ATen graph on mpmath numbers
            (:mod:`polygrad.mpexec.torch_graph`), or is None with
            ``mp_unavailable_reason`` naming the operator or the tracing
            problem.

        Raises
        ------
        InputTypeError
            A checked input is integer, bool, complex or a module; an output is
            not floating; derivatives were supplied.
        InputValueError
            A checked input contains NaN or Inf.
        InputMutationError
            The function modified a checked input in place.
        NondeterministicFunctionError
            Two calls at the same point returned different values (dropout in
            training mode, unseeded noise).
        ValueError
            Unknown ``wrt``, or the check was called inside ``torch.inference_mode()``.
        """
        torch = self.torch
        _refuse_misuse(torch, supplied)
        if wrt == "inputs":
            names, primals, raw, build64 = self._inputs(f, args, argnums)
        elif wrt == "parameters":
            names, primals, raw, build64 = self._parameters(f, args)
        else:
            raise ValueError(f"wrt must be 'inputs' or 'parameters', got {wrt!r}")

        notes: list[str] = []
        modules = _modules_of(torch, f, args)
        state = [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules]
        raw, kept = _refuse_outer_mutations(torch, f, raw, primals, modules)
        if kept is not None:
            notes.append(kept)
            build64 = _restoring_build(build64, raw)
        work = _Program(torch, raw, primals, batch_size, notes)
        out_a = work.first_call()
        out_b, narrow = narrowest_computed(torch, work.call, [p.clone() for p in primals])
        _check_module_state(torch, modules, state)
        in_dtype = functools.reduce(torch.promote_types, [p.dtype for p in primals])
        wd = _working_dtype(torch, primals, out_a, narrow, notes)
        eps = float(torch.finfo(wd).eps)
        self._check_deterministic(out_a, out_b, eps, notes)

        x0 = np.concatenate([_to_float64_numpy(torch, p).ravel() for p in primals])
        y0 = work.evaluate(x0[None, :])[0]
        flows = _check_gradient_flows(torch, work, primals, y0, eps)
        notes.extend([flows] if flows else [])
        shapes = [np.empty(tuple(t.shape), complex if t.is_complex() else float)
                  for t in work.out_leaves]  # fmt: skip
        out_layout = output_layout(shapes, work.out_paths)

        wide: _Program | None = work
        if wd != torch.float64:
            draws = in_dtype if in_dtype != torch.float64 else None  # what x.dtype draws in
            wide = self._promoted(build64, batch_size, notes, draws)
        key = (wrt, tuple(argnums), tuple(names), _signature(primals))
        frozen = functools.partial(frozen_state, f, args, argnums if wrt == "inputs" else None)
        deferred = self._deferred(work, wide, primals, x0, y0.size, key, frozen)
        # its mp program is the working one (built as the target's, from the same cache)
        mp_program = functools.partial(self._mp_program, key, frozen, work, primals)
        target = Target(
            x0=x0,
            y0=y0,
            working_dtype=str(wd).removeprefix("torch."),
            eps=eps,
            evaluate=work.evaluate,
            evaluate64=wide.evaluate if wide is not None else None,
            vjp=work.vjp,
            vjp64=wide.vjp if wide is not None else None,
            jvp=work.jvp,
            jvp64=wide.jvp if wide is not None else None,
            input_layout=Layout.from_shapes(names, [tuple(p.shape) for p in primals]),
            output_layout=out_layout,
            backend=self.name,
            notes=notes,
            deferred=deferred,
            custom_rules=lambda: _unbounded_custom_functions(torch, work.call, primals),
            symmetric_reads=lambda: _symmetric_reads(work.call, primals),
            working_mp_value=None if wide is work else functools.partial(
                _mp_at_the_point, mp_program, x0),
        )  # fmt: skip
        # built when a check asks for it
        defer_quad(
            target, functools.partial(quad_of_mp_program, build=_quad_from_graph), interpreted=True
        )
        return target

    def _deferred(
        self, work: _Program, wide: _Program | None, primals: list[Any], x0: np.ndarray,
        m: int, key: tuple[Any, ...], state: Callable[[], Any],
    ) -> dict[str, Callable[[Target], None]]:  # fmt: skip
        """The target's parts built only when a check asks for them: forward mode (the
        first forward-mode pass through a model costs more than a whole reverse-mode
        check), the ATen graph on mpmath numbers and the rule on them (capturing costs
        more than a float32 check; cached per function, argument signature and frozen
        state, see :mod:`polygrad.backends._capture_cache`)."""
        rng = np.random.default_rng(0)

        def probe_forward(target: Target) -> None:
            target.jvp = work.jvp_or_none(rng, "", target)
            if wide is work:
                target.jvp64 = target.jvp
            elif wide is not None:
                target.jvp64 = wide.jvp_or_none(rng, " in float64", target)

        def build_mp(target: Target) -> None:
            target.evaluate_mp, target.mp_unavailable_reason = self._mp_program(
                key, state, work, primals
            )

        def build_rule_mp(target: Target) -> None:
            rule = CAPTURES.get("torch.rule_mp", key, state(),
                                lambda: self._vjp_mp(work, primals, m))  # fmt: skip
            target.vjp_mp = None if rule is None else (lambda U, dps: rule(x0, U, dps))

        return {"forward": probe_forward, "mp": build_mp, "rule_mp": build_rule_mp}

    def _mp_program(
        self, key: tuple[Any, ...], state: Callable[[], Any], work: _Program, primals: list[Any]
    ) -> tuple[Callable[..., np.ndarray] | None, str | None]:
        """``(evaluate_mp, reason)`` of the captured working program, cached per function,
        argument signature and frozen state (see :mod:`._capture_cache`)."""
        return CAPTURES.get(  # type: ignore[no-any-return]
            "torch.mp", key, state(), lambda: self._mp_evaluator(work, primals)
        )

    def gradient_function(
        self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]
    ) -> Callable[..., Any]:
        """A differentiable torch function returning the gradient of ``f`` w.r.t. ``args[argnums]``.

        Returns
        -------
        torch.nn.Module
            Called with the same arguments as ``f``; returns a tensor shaped
            like the checked argument (a tuple for several). It is a module
            (holding ``f`` when ``f`` is one); the float64 reference promotes it
            like any other function. For a non-scalar ``f`` it returns the VJP with a fixed
            pseudo-random cotangent (standard normal, seed 0). It is built on
            :func:`torch.func.vjp` (composable with vmap and with further
            differentiation), falling back to ``torch.autograd.grad`` with
            ``create_graph=True``.
        """
        torch = self.torch
        _, gradient_cls = _module_classes(torch)
        m = _flat_output(torch, f(*args)).numel()
        cot = np.ones(1) if m == 1 else np.random.default_rng(0).standard_normal(m)
        return gradient_cls(f, tuple(argnums), cot)

    # ---------------------------------------------------------------- helpers
    def _checked_tensor(self, leaf: Any, name: str) -> Any:
        """Validate one checked input and return a detached copy of it as a tensor."""
        torch = self.torch
        if isinstance(leaf, torch.nn.Module):  # np.asarray would iterate a Sequential
            raise InputTypeError(not_an_array_message(leaf, name))
        if not isinstance(leaf, torch.Tensor):
            arr = np.asarray(leaf)
            validate_float_array(arr, name)
            leaf = torch.as_tensor(arr)
        if leaf.is_floating_point():
            validate_float_array(_to_float64_numpy(torch, leaf), name)
        else:
            validate_float_array(leaf.detach().cpu().resolve_conj().numpy(), name)
        return leaf.detach().clone()

    def _inputs(
        self, f: Callable[..., Any], args: tuple[Any, ...], argnums: tuple[int, ...]
    ) -> tuple[list[str], list[Any], Callable[..., Any], Callable[[], tuple]]:
        """Names, primals, ``raw(*leaves)`` and the float64 builder for ``wrt="inputs"``."""
        torch = self.torch
        treedefs, names, primals = {}, [], []
        arg_names = argument_names(f, len(args))
        for i in argnums:
            leaves, paths, td = flatten(args[i])
            treedefs[i] = td
            for leaf, path in zip(leaves, paths, strict=True):
                name = leaf_name(arg_names, i, path, argnums)
                primals.append(self._checked_tensor(leaf, name))
                names.append(name)

        def bind(fn: Callable[..., Any], base: tuple[Any, ...]) -> Callable[..., Any]:
            def raw(*leaves: Any) -> Any:
                new, off = list(base), 0
                for i in argnums:
                    k = treedefs[i].num_leaves
                    new[i] = unflatten(treedefs[i], list(leaves[off : off + k]))
                    off += k
                return fn(*new)

            return raw

        raw = _hooks_without_grad_ignored(torch, bind(f, args))

        def build64() -> tuple[Callable[..., Any], list[Any]]:
            return raw, [p.to(torch.float64) for p in primals]

        return names, primals, raw, build64

    def _parameters(
        self, f: Callable[..., Any], args: tuple[Any, ...]
    ) -> tuple[list[str], list[Any], Callable[..., Any], Callable[[], tuple]]:
        """Names, primals, ``raw(*leaves)`` and the float64 builder for ``wrt="parameters"``."""
        torch = self.torch
        holder_cls, _ = _module_classes(torch)
        owners: list[tuple[str, Any]] = []
        owner = getattr(f, "__self__", None)
        if isinstance(f, torch.nn.Module):
            owners.append(("", f))
        elif isinstance(owner, torch.nn.Module):
            owners.append(("", owner))
        for i, a in enumerate(args):
            if isinstance(a, torch.nn.Module) and all(a is not m for _, m in owners):
                owners.append((f"arg{i}", a))
        if not owners:
            raise InputTypeError(
                "wrt='parameters' needs a torch.nn.Module: pass the model as the function "
                "(or a bound method such as model.loss), or pass it as an argument of the function"
            )
        holder = holder_cls(f, tuple(args), [m for _, m in owners])
        keys, names, primals = [], [], []
        for key, p in holder.named_parameters():
            if not p.requires_grad:
                continue
            j, rest = key.split(".", 1)
            label = owners[int(j[1:])][0]
            name = f"{label}.{rest}" if len(owners) > 1 and label else rest
            keys.append(key)
            names.append(name)
            primals.append(self._checked_tensor(p, name))
        if not keys:
            raise InputTypeError("the model has no trainable parameters (requires_grad=True)")

        def bind(h: Any) -> Callable[..., Any]:
            def raw(*leaves: Any) -> Any:
                return torch.func.functional_call(h, dict(zip(keys, leaves, strict=True)), ())

            return raw

        raw = _hooks_without_grad_ignored(torch, bind(holder))

        def build64() -> tuple[Callable[..., Any], list[Any]]:
            return raw, [p.to(torch.float64) for p in primals]

        return names, primals, raw, build64

    def _promoted(
        self, build64: Callable[[], tuple], batch_size: int, notes: list[str], draws: Any
    ) -> _Program | None:
        """The float64 program, or None (with a note naming the blocking operator).

        The program is the user's function run in :func:`float64_scope`, which
        promotes every operator's operands, closed-over ones included; random
        operators draw in ``draws`` (the working dtype), as the function does.
        """
        torch = self.torch
        log = PromotionLog()
        raw64, primals64 = build64()
        scope = functools.partial(float64_scope, torch, log, draws)
        prog = _Program(torch, raw64, primals64, batch_size, notes, scope)
        try:
            out = prog.first_call()
        except Exception as exc:  # noqa: BLE001 - any failure means: no float64 reference
            where = f" in {log.failed}" if log.failed else ""
            _add_note(
                notes,
                f"the function could not be evaluated in float64 ({_first_line(exc)}{where}); "
                "the reference is computed in the working dtype, with wider error bars",
            )
            return None
        if log.narrowed is not None or out.dtype != torch.float64:
            got = str(out.dtype).removeprefix("torch.")
            what = (
                f"{log.narrowed} returned a lower precision than its float64 operands"
                if log.narrowed
                else f"the function returns {got} for float64 input"
            )
            _add_note(
                notes,
                f"the function cannot be promoted to float64: {what}; the reference is "
                "computed in the working dtype, with wider error bars",
            )
            return None
        if log.drew:
            _add_note(
                notes,
                "the function draws random numbers, and what a generator draws depends on "
                f"the dtype drawn: its float64 run draws each as it does, in "
                f"{str(draws).removeprefix('torch.')}, and widens it",
            )
        return prog

    def _mp_evaluator(
        self, work: _Program, primals: list[Any]
    ) -> tuple[Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None, str | None]:
        """``(evaluate_mp, None)``, or ``(None, reason)`` when the graph cannot run on mpmath."""
        from ..mpexec.torch_graph import torch_mp_evaluator

        try:
            return torch_mp_evaluator(work.call, primals), None
        except Exception as exc:  # noqa: BLE001 - any failure means: no mp reference
            return None, f"{MP_UNAVAILABLE}: {exc}"

    @staticmethod
    def _vjp_mp(
        work: _Program, primals: list[Any], m: int
    ) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None:
        """The VJP of ``work`` on mpmath numbers, or None where its graph cannot run there."""
        from ..mpexec.torch_vjp import torch_vjp_mp

        try:
            with work.scope():
                return torch_vjp_mp(work.call, primals, m)
        except Exception:  # noqa: BLE001 - optional evidence: none where it does not run
            return None

    def _check_deterministic(self, out_a: Any, out_b: Any, eps: float, notes: list[str]) -> None:
        """Raise if two calls at the same point differ by more than a few ULPs."""
        torch = self.torch
        a, b = _to_float64_numpy(torch, out_a), _to_float64_numpy(torch, out_b)
        if np.array_equal(a, b, equal_nan=True):
            return
        same_nan = np.array_equal(np.isnan(a), np.isnan(b))
        diff = np.where(np.isnan(a) | np.isnan(b), 0.0, np.abs(a - b))
        worst = float(diff.max())
        scale = max(float(np.nanmax(np.abs(a), initial=0.0)), np.finfo(np.float64).tiny)
        if not same_nan or worst > 16 * eps * scale:
            i = int(np.argmax(diff))
            raise NondeterministicFunctionError(
                f"the function returned different values for the same input (output {i}: "
                f"{float(a[i]):.17g} then {float(b[i]):.17g}); a gradient check needs a "
                "deterministic function. "
                "Put the model in eval mode (model.eval()) to disable dropout, or seed the "
                "randomness inside the function."
            )
        _add_note(
            notes,
            f"the function is not bitwise reproducible (differences up to {worst:.3g}); "
            "this is treated as noise",
        )


def _symmetric_reads(
    call: Callable[..., Any], primals: list[Any]
) -> dict[int, tuple[str, ...]] | None:
    """Checked tensors (by position) whose values reach an ATen operator that reads a
    symmetric matrix (:func:`polygrad.mpexec.torch_capture.symmetric_reads`); None where
    ``f`` cannot be traced."""
    from ..mpexec.torch_capture import capture_graph, symmetric_reads

    try:
        gm = capture_graph(call, primals)
    except Exception:  # noqa: BLE001 - not capturable: no operation is known
        return None
    return symmetric_reads(gm, len(primals))


def _unbounded_custom_functions(torch: Any, call: Callable[..., Any], primals: list[Any]) -> bool:
    """Whether ``f`` holds a ``torch.autograd.Function`` whose forward the mp capture
    cannot bound: False where the ATen capture marks the operations traced with
    gradients off (the mp interpreter then looks into each such region as a whole)."""
    from ..mpexec.torch_capture import marks_no_grad

    if marks_no_grad():
        return False
    return _holds_custom_functions(torch, call, primals)  # pragma: no cover - older PyTorch


def _holds_custom_functions(torch: Any, call: Callable[..., Any], primals: list[Any]) -> bool:
    """Whether autograd's graph of ``call`` at ``primals`` holds a node of a custom
    ``torch.autograd.Function`` (its backward is the user's; the captured ATen graph runs
    its forward inline)."""
    try:
        with torch.enable_grad():
            out = call(*[p.detach().clone().requires_grad_() for p in primals])
    except Exception:  # noqa: BLE001 - cannot tell: assume it does
        return True
    seen, todo = set(), [getattr(out, "grad_fn", None)]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):  # a custom Function
            return True
        todo.extend(n for n, _ in getattr(node, "next_functions", ()))
    return False


def _refuse_misuse(torch: Any, supplied: Supplied) -> None:
    """Raise where no torch gradient can be checked: inside ``torch.inference_mode()``, or
    with derivatives supplied (autograd differentiates torch functions).

    Raises
    ------
    ValueError, InputTypeError
    """
    if torch.is_inference_mode_enabled():
        raise ValueError(
            "check() was called inside torch.inference_mode(), where autograd records "
            "nothing, so no gradient can be computed; call it outside (torch.no_grad() "
            "around it is fine: polygrad turns gradients on where it needs them)"
        )
    if supplied.given():
        raise InputTypeError(
            "torch functions are differentiated by autograd; grad=/jac=/vjp=/jvp= are for "
            "NumPy functions. To check a hand-written gradient, put it in a "
            "torch.autograd.Function."
        )


def _working_dtype(
    torch: Any, primals: list[Any], out: Any, narrow: tuple[Any, str] | None, notes: list[str]
) -> Any:
    """The working dtype: the narrowest of the inputs' and the output's, or narrower where
    the function computes in a narrower dtype on the way (said in ``notes``)."""
    narrowest_in = narrowest_input_dtype([p.dtype for p in primals], notes)
    wd = max((narrowest_in, out.dtype), key=lambda d: torch.finfo(d).eps)
    if narrow is not None and torch.finfo(narrow[0]).eps > torch.finfo(wd).eps:
        name = str(narrow[0]).removeprefix("torch.")
        notes.append(computed_in_note(str(wd).removeprefix("torch."), name, narrow[1]))
        wd = narrow[0]
    return wd


class _NoHandle:
    """What ``register_hook`` returns where it registers nothing."""

    def remove(self) -> None:
        """Nothing to remove."""


@functools.lru_cache(maxsize=1)
def _hook_mode(torch: Any) -> type:
    """A :class:`torch.overrides.TorchFunctionMode` in which ``Tensor.register_hook`` on a
    tensor that does not require gradients registers nothing (and does not raise)."""

    class HooksNeedGrad(torch.overrides.TorchFunctionMode):
        def __torch_function__(
            self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: Any = None
        ) -> Any:
            if func is torch.Tensor.register_hook and not getattr(args[0], "requires_grad", 1):
                return _NoHandle()
            return func(*args, **(kwargs or {}))

    return HooksNeedGrad


def _hooks_without_grad_ignored(torch: Any, raw: Callable[..., Any]) -> Callable[..., Any]:
    """``raw`` with ``Tensor.register_hook`` a no-op on tensors that do not require
    gradients: a hook acts only in a backward pass, and polygrad evaluates ``f`` without
    gradients (its values, the mutation check), where PyTorch refuses to register one
    ("cannot register a hook on a tensor that doesn't require gradient"). Where
    gradients flow (autodiff), the hook is registered and changes the gradient as in
    the user's own backward pass: a check judges it with the rest of the rule. The mode
    (a Python call per operation) runs only for a function that registers a hook: the
    first call PyTorch refuses runs again in it, and so does every later call."""

    hooks = [False]  # f registers hooks: every later call runs in the mode

    def call(*leaves: Any) -> Any:
        if not hooks[0]:
            try:  # no mode, no cost, for the functions that register no hook
                return raw(*leaves)
            except RuntimeError as exc:
                if _HOOK_REFUSED not in str(exc):
                    raise
                hooks[0] = True
        with _hook_mode(torch)():
            return raw(*leaves)

    return call


_HOOK_REFUSED = "cannot register a hook on a tensor that doesn't require gradient"
"""PyTorch's error for ``register_hook`` on a tensor that does not require gradients."""


def _mp_at_the_point(
    program: Callable[[], tuple[Callable[..., np.ndarray] | None, str | None]],
    x0: np.ndarray,
    dps: int,
) -> np.ndarray | None:
    """``f`` at ``x0`` on mpmath numbers (the captured working program), or None."""
    evaluate_mp, _ = program()
    return None if evaluate_mp is None else evaluate_mp(x0, np.zeros_like(x0), dps)


def _quad_from_graph(evaluate_mp: Any, q: Any) -> Callable[[np.ndarray], np.ndarray]:
    """``evaluate_quad`` from the ATen graph the mp reference runs
    (:mod:`polygrad.mpexec.torch_quad`)."""
    from ..mpexec.torch_quad import quad_graph_evaluator

    return quad_graph_evaluator(evaluate_mp.program, q)
