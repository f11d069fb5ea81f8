"""Operator-level float64 promotion for PyTorch programs.

The float64 reference must run the user's own program, whatever objects it
computes with: checked inputs, modules and tensors passed as arguments, but
also modules, parameters, buffers and tensors that the function closes over,
reads from a global or from ``self``, and Python scalars. Copying models
cannot reach a closure; intercepting every operator can. While
:func:`float64_scope` is active, a :class:`torch.overrides.TorchFunctionMode`
sees each torch call the program makes (functions, tensor methods, modules'
functional calls, custom operators) and

* casts every floating tensor operand of lower precision (float16, bfloat16,
  float32) to float64, and complex32/complex64 to complex128, before calling
  the operator; the cast is exact and the user's tensors are never changed
  (an in-place operator on a closed-over tensor acts on the promoted copy);
* rewrites dtype requests inside the user's code to float64: ``.float()``,
  ``.half()``, ``.bfloat16()``, ``.to(torch.float32)``, ``.type(...)`` and
  every ``dtype=`` argument (``torch.zeros(3, dtype=torch.float32)``,
  ``softmax(x, dim, dtype=...)``, ``sum(dtype=...)``);
* creates tensors from Python numbers in float64: a constructor called
  without ``dtype`` (``torch.tensor(0.1)``, ``torch.full``, ``torch.arange``...)
  that would give the default float dtype is called again with float64.

Attribute reads (``w.dtype``, ``w.T``, ``p.data``) pass through unchanged; the
next operator that uses the value casts it. ``torch.compile``-decorated
functions run eagerly inside the scope (``torch.compiler.set_stance
("force_eager")``, where available), so the float64 program is the user's
Python code and the user's compiled graphs and caches are left alone.

What the mode cannot reach is reported, not hidden: the last operator that
raised (a custom operator without a float64 kernel) and the first operator
that returned a lower-precision floating tensor from promoted operands (a
custom kernel that computes in float32 internally) are recorded in a
:class:`PromotionLog`, so that the notes can name the operation that blocked
promotion. The backward pass of a custom ``torch.autograd.Function`` runs in
torch's autograd engine, outside the mode; its operands (the float64
cotangent and saved tensors) are float64, so ordinary type promotion keeps it
in float64 unless it casts explicitly.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Mutation",
    "PromotionLog",
    "float64_scope",
    "narrowest_computed",
    "op_name",
    "outer_mutations",
    "replaced_function_apply",
]


@dataclass
class PromotionLog:
    """What the float64 mode saw that it could not promote (mutable, one per program).

    Attributes
    ----------
    failed : str or None
        Name of the last operator that raised inside the scope.
    narrowed : str or None
        Name of the first operator that returned a float16/bfloat16/float32
        (or complex64) tensor although its floating operands were promoted.
    drew : bool
        Whether a random operator drew in the function's own dtype (and was widened).
    """

    failed: str | None = None
    narrowed: str | None = None
    drew: bool = False


def op_name(func: Any) -> str:
    """A readable name for a torch callable: ``torch.nn.functional.linear``, ``Tensor.float``,
    ``mylib::op``."""
    name = str(getattr(func, "__qualname__", "") or getattr(func, "__name__", "") or func)
    if "::" in name or type(func).__name__ in ("OpOverload", "OpOverloadPacket"):
        return name if "::" in name else str(func)
    module = getattr(func, "__module__", None) or ""
    name = name.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "torch.")
    if module.startswith("torch.nn.functional"):
        return f"torch.nn.functional.{name}"
    if name.startswith(("Tensor.", "torch.")) or not module:
        return name
    return f"{module}.{name}"


@functools.lru_cache(maxsize=1)
def _tables(torch: Any) -> tuple[dict, dict, dict, frozenset]:
    """Dtype map, renamed methods, tensor-type names and constructors re-run in float64."""
    T = torch.Tensor
    wide = {
        torch.float16: torch.float64,
        torch.bfloat16: torch.float64,
        torch.float32: torch.float64,
        torch.complex32: torch.complex128,
        torch.complex64: torch.complex128,
    }
    renamed = {
        T.float: T.double,
        T.half: T.double,
        T.bfloat16: T.double,
        T.cfloat: T.cdouble,
        T.chalf: T.cdouble,
    }
    narrow = ("Float", "Half", "BFloat16")
    type_names: dict[Any, Any] = {f"torch.{k}Tensor": "torch.DoubleTensor" for k in narrow}
    type_names.update({getattr(torch, f"{k}Tensor"): torch.DoubleTensor for k in narrow})
    constructors = frozenset(
        [
            torch.tensor,
            torch.as_tensor,
            torch.asarray,
            torch.full,
            torch.scalar_tensor,
            torch.arange,
            torch.linspace,
            torch.logspace,
        ]
    )
    return wide, renamed, type_names, constructors


def _widen(torch: Any, tables: tuple, a: Any) -> Any:
    """``a`` with lower-precision floating tensors cast and dtype requests widened."""
    wide, _, type_names, _ = tables
    if isinstance(a, torch.Tensor):
        d = wide.get(a.dtype)
        return a if d is None else a.to(d)
    if isinstance(a, torch.dtype):
        return wide.get(a, a)
    if isinstance(a, (str, type)):  # x.type("torch.FloatTensor"), x.type(torch.FloatTensor)
        return type_names.get(a, a)
    if isinstance(a, (list, tuple)) and type(a) in (list, tuple):
        return type(a)(_widen(torch, tables, b) for b in a)
    return a


def _narrow_leaf(torch: Any, wide: dict, out: Any) -> bool:
    """Whether ``out`` (a tensor, or a tuple/list of them) holds a lower-precision float."""
    if isinstance(out, torch.Tensor):
        return out.dtype in wide
    if isinstance(out, (list, tuple)):
        return any(isinstance(o, torch.Tensor) and o.dtype in wide for o in out)
    return False


def _in_place(func: Callable[..., Any]) -> bool:
    """Whether ``func`` writes its first operand: ``fill_``, ``uniform_``, ``add_``."""
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.startswith("_")


def _has_floating(torch: Any, args: tuple, kwargs: dict) -> bool:
    return any(t.is_floating_point() for t in _tensors(torch, [*args, *kwargs.values()]))


def _run_eagerly(torch: Any, stack: contextlib.ExitStack) -> None:
    """Make ``torch.compile``-decorated functions run their Python code (torch >= 2.6).

    Only once ``torch.compile`` has been used in this process (it imports
    ``torch._dynamo``): setting a stance imports the compiler too, which takes about
    2 s, and without it no function can be compiled.
    """
    if "torch._dynamo" not in sys.modules:
        return
    stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if stance is not None:
        stack.enter_context(stance("force_eager"))


@functools.lru_cache(maxsize=1)
def _mode_class(torch: Any) -> type:
    """The :class:`torch.overrides.TorchFunctionMode` that promotes to float64."""

    class Float64Mode(torch.overrides.TorchFunctionMode):
        """Casts lower-precision floating operands and dtype requests to float64."""

        def __init__(self, log: PromotionLog, draws: Any = None) -> None:
            super().__init__()
            self.log = log
            self.tables = _tables(torch)
            self.draws = draws

        def __torch_function__(
            self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if self.draws is not None and _draws_now(torch, func, args, kwargs):
                self.log.drew = True
                return _draw(torch, func, args, kwargs, self.draws)
            wide, renamed, _, constructors = self.tables
            if getattr(func, "__name__", "") == "__get__":  # w.dtype, w.T, p.data...
                out = func(*args, **kwargs)
                # inside the scope every floating tensor is float64 to the code that asks
                # (an RNN compares its input's dtype with its weights' before any operation)
                return wide.get(out, out) if isinstance(out, torch.dtype) else out
            func = renamed.get(func, func)
            # an in-place operation with nothing floating to read but its first operand
            # (fill_, zero_, uniform_: a layer built inside f initialises its parameters
            # so) writes that operand, not a widened copy; one that reads a floating
            # operand (add_, which `acc += term` calls and whose result Python rebinds to
            # acc) computes in float64 on a widened copy
            dest = args[:1] if _in_place(func) and not _has_floating(
                torch, args[1:], kwargs) else ()  # fmt: skip
            args = (*dest, *(_widen(torch, self.tables, a) for a in args[len(dest) :]))
            kwargs = {k: v if k == "out" else _widen(torch, self.tables, v)
                      for k, v in kwargs.items()}  # fmt: skip
            try:
                out = func(*args, **kwargs)
            except Exception:
                self.log.failed = op_name(func)
                raise
            if not _narrow_leaf(torch, wide, out):
                return out
            if func in constructors and "dtype" not in kwargs and isinstance(out, torch.Tensor):
                return func(*args, **kwargs, dtype=wide[out.dtype])
            if self.log.narrowed is None and _has_floating(torch, args[len(dest) :], kwargs):
                self.log.narrowed = op_name(func)
            return out

    return Float64Mode


@contextlib.contextmanager
def float64_scope(torch: Any, log: PromotionLog, draws: Any = None) -> Iterator[None]:
    """Run the code inside in float64 (see the module docstring).

    Parameters
    ----------
    torch : module
        The imported torch module.
    log : PromotionLog
        Records the operators that raised or did not promote; ``failed`` is
        cleared on entry.
    draws : torch.dtype, optional
        The dtype the function draws random numbers in (its working dtype): random
        operators draw in it, as the function itself does, and their draws are widened
        (the same generator draws other numbers in float64). None: in float64.

    Yields
    ------
    None
    """
    log.failed = None
    with contextlib.ExitStack() as stack:
        _run_eagerly(torch, stack)
        stack.enter_context(_functions_widened(torch))
        stack.enter_context(_mode_class(torch)(log, draws))
        yield


@contextlib.contextmanager
def _functions_widened(torch: Any) -> Iterator[None]:
    """While inside, a custom ``torch.autograd.Function`` gets its floating tensor
    arguments as float64 (complex as complex128): exact copies, the user's tensors are
    not changed.

    ``Function.apply`` does not pass through a :class:`TorchFunctionMode`, so the mode
    widens the operators of ``forward`` but not its arguments: a weight closed over in
    float32 and passed to ``apply`` was saved for the backward pass in float32, and the
    backward, which runs outside the mode, met the float64 cotangent with it (``g @ w``:
    a dtype error, and no float64 evaluation of the rule). Every floating argument is
    cast, whatever its dtype reads: inside the mode ``w.dtype`` reads float64 on
    purpose. The class attribute is restored on exit (as :mod:`polygrad.localize` does
    while it records)."""

    def wide(a: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return a
        if a.is_complex():
            return a.to(torch.complex128)
        return a.to(torch.float64) if a.is_floating_point() else a

    def widening(call: Callable[..., Any]) -> Callable[..., Any]:
        def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
            args = tuple(wide(a) for a in args)
            return call(cls, *args, **{k: wide(v) for k, v in kwargs.items()})

        return apply

    with replaced_function_apply(torch, widening):
        yield


@contextlib.contextmanager
def replaced_function_apply(
    torch: Any, make: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> Iterator[None]:
    """While inside, ``torch.autograd.Function.apply`` is ``make(call)``: a function
    ``(cls, *args, **kwargs)`` given ``call``, the ``apply`` it replaces (torch's own, or
    an enclosing replacement), to call the Function with. Restored on exit. The float64
    run (:func:`float64_scope`) and :mod:`polygrad.localize` replace it so."""
    fn_cls = torch.autograd.function.Function
    saved = fn_cls.__dict__["apply"]
    fn_cls.apply = classmethod(make(saved.__func__))
    try:
        yield
    finally:
        fn_cls.apply = saved


# random operators, by how they take what they draw from: "new" (a shape or a tensor to
# shape like; their dtype= is the draw's), "params" (floating tensors of the
# distribution's parameters), "into" (an in-place draw into its first operand), "mask"
# (dropout: the input is scaled by a drawn mask)
_DRAWS = {
    "new": ("rand", "randn", "rand_like", "randn_like", "randint", "randint_like"),
    "params": ("bernoulli", "normal", "poisson", "multinomial", "binomial"),
    "into": ("uniform_", "normal_", "bernoulli_", "exponential_", "cauchy_", "log_normal_",
             "geometric_", "random_"),
    # (alpha dropout is affine in its mask, not a product: it draws as it runs)
    "mask": ("dropout", "dropout1d", "dropout2d", "dropout3d"),
}  # fmt: skip


def _draw_kind(torch: Any, func: Callable[..., Any]) -> str | None:
    """Which kind of random operator ``func`` is (see ``_DRAWS``), or None."""
    name = getattr(func, "__name__", "")
    module = getattr(func, "__module__", "") or ""
    for kind, names in _DRAWS.items():
        if name in names and (kind != "mask" or module.startswith("torch")):
            return kind
    return None


def _draws_now(torch: Any, func: Callable[..., Any], args: tuple, kwargs: dict) -> bool:
    """Whether this call draws: a random operator, a dropout only in training mode."""
    kind = _draw_kind(torch, func)
    if kind != "mask":
        return kind is not None
    return bool(kwargs.get("training", args[2] if len(args) > 2 else True))


def _narrowed(torch: Any, a: Any, draws: Any) -> Any:
    """A float64 tensor or dtype as the function has it (in ``draws``); others unchanged."""
    if isinstance(a, torch.Tensor) and a.dtype == torch.float64:
        return a.to(draws)
    if a is torch.float64:
        return draws
    return a


def _widened(torch: Any, out: Any) -> Any:
    if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype != torch.float64:
        return out.to(torch.float64)
    return out


def _draw(torch: Any, func: Callable[..., Any], args: tuple, kwargs: dict, draws: Any) -> Any:
    """Call a random operator as the function draws with it, in ``draws``, and widen the
    draw: dropout's mask is drawn on ones of that dtype and scales the float64 input."""
    kind = _draw_kind(torch, func)
    if kind == "mask":
        x, rest = args[0], args[1:]
        inplace = bool(kwargs.get("inplace", rest[2] if len(rest) > 2 else False))
        kw = {k: v for k, v in kwargs.items() if k != "inplace"}
        mask = func(torch.ones_like(x, dtype=draws), *rest[:2], **kw)
        mask = mask.to(x.dtype)
        return x.mul_(mask) if inplace else x * mask
    if kind == "into":
        dest = args[0]
        if not (isinstance(dest, torch.Tensor) and dest.dtype == torch.float64):
            return func(*args, **kwargs)
        tmp = torch.empty_like(dest, dtype=draws)
        func(tmp, *(_narrowed(torch, a, draws) for a in args[1:]),
             **{k: _narrowed(torch, v, draws) for k, v in kwargs.items()})  # fmt: skip
        with torch.no_grad():
            dest.copy_(tmp)
        return dest
    out = func(*(_narrowed(torch, a, draws) for a in args),
               **{k: _narrowed(torch, v, draws) for k, v in kwargs.items()})  # fmt: skip
    return _widened(torch, out)


def _tensors(torch: Any, items: Any) -> list[Any]:
    """The tensors among ``items`` and inside the lists/tuples/dicts among them."""
    out: list[Any] = []
    for a in items:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += _tensors(torch, a)
        elif isinstance(a, dict):
            out += _tensors(torch, a.values())
    return out


@functools.lru_cache(maxsize=1)
def _dtype_watch_class(torch: Any) -> type:
    """The mode that records the narrowest float computed from the watched tensors."""

    class DtypeWatch(torch.overrides.TorchFunctionMode):
        """Follows which tensors depend on the inputs; notes the widest eps among them."""

        def __init__(self, inputs: list[Any]) -> None:
            super().__init__()
            self.keep = list(inputs)  # held, so that no id is reused during the call
            self.dependent = {id(t) for t in inputs}
            self.found: tuple[float, Any, str] | None = None

        def __torch_function__(
            self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if getattr(func, "__name__", "") == "__get__":
                return out
            if not any(id(t) in self.dependent for t in _tensors(torch, [*args, *kwargs.values()])):
                return out
            for t in _tensors(torch, [out]):
                self.keep.append(t)
                self.dependent.add(id(t))
                if t.is_floating_point() or t.is_complex():
                    real = t.real.dtype if t.is_complex() else t.dtype
                    e = torch.finfo(real).eps
                    if self.found is None or e > self.found[0]:
                        self.found = (e, real, op_name(func))
            return out

    return DtypeWatch


def narrowest_computed(
    torch: Any, call: Callable[..., Any], inputs: list[Any]
) -> tuple[Any, tuple[Any, str] | None]:
    """``call(*inputs)``, and the widest-eps floating dtype among the values it computes
    from ``inputs`` with the first operator that produced it (None when nothing does).

    Only values that depend on an input count (a float32 constant that the code
    widens before use rounds nothing of the computation); the dependence is followed
    operator by operator through a :class:`torch.overrides.TorchFunctionMode`, so what
    runs inside one C++ operator (a fused kernel) counts by its output only.

    Parameters
    ----------
    torch : module
        PyTorch.
    call : callable
        The user's program on the checked tensors.
    inputs : list of Tensor
        The checked tensors (copies: ``call`` may not change them).

    Returns
    -------
    (object, (torch.dtype, str) or None)
        What ``call`` returned, and the dtype (a real dtype, any shape) with the
        operator's name. Exceptions of ``call`` propagate.
    """
    watch = _dtype_watch_class(torch)(inputs)
    with contextlib.ExitStack() as stack:
        _run_eagerly(torch, stack)
        stack.enter_context(watch)
        out = call(*inputs)
    return out, None if watch.found is None else (watch.found[1], watch.found[2])


@dataclass(frozen=True)
class Mutation:
    """A tensor from outside the function that one call of it changed in place.

    Attributes
    ----------
    tensor : Tensor
        The user's tensor (a closed-over buffer, a global...), already restored.
    op : str
        The operator that changed it ("" when the change came through a view).
    """

    tensor: Any
    op: str


def _version(t: Any) -> int:
    """The tensor's version counter (bumped by every in-place change); -1 if it has none."""
    try:
        return int(t._version)
    except (RuntimeError, AttributeError):  # inference tensors have no version counter
        return -1


def _storage(t: Any) -> int:
    """The address of a tensor's storage (0 where it has none: meta, sparse, functional)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError, AttributeError):
        return 0


def _transform_wrapped(torch: Any, t: Any) -> bool:
    """Whether ``t`` is a tensor of a ``torch.func`` transform (a batched or grad wrapper)."""
    functorch = getattr(torch._C, "_functorch", None)
    test = getattr(functorch, "is_functorch_wrapped_tensor", None)
    return bool(test(t)) if test is not None else False


def _moved(torch: Any, t: Any, held: tuple[Any, int, Any]) -> bool:
    """Whether ``t`` changed since ``held = (t, version, copy)`` was taken.

    Compares values as well as version counters: some kernels update their
    operands without bumping the counter (BatchNorm's running statistics).
    """
    _, version, backup = held
    if _version(t) != version:
        return True
    with torch.no_grad():
        if torch.equal(t, backup):
            return False
        return not (
            t.is_floating_point() and torch.allclose(t, backup, rtol=0, atol=0, equal_nan=True)
        )


@functools.lru_cache(maxsize=1)
def _watch_class(torch: Any) -> type:
    """A :class:`torch.overrides.TorchFunctionMode` that notes in-place changes of outer tensors."""

    class Watch(torch.overrides.TorchFunctionMode):
        """Backs up each tensor from outside the call on first use; notes which ones change."""

        def __init__(self, own: list[Any]) -> None:
            super().__init__()
            self.inner: dict[int, Any] = {id(t): t for t in own}  # not the user's
            self.outer: dict[int, tuple[Any, int, Any]] = {}
            self.changed: dict[int, str] = {}
            # storage allocated by the call itself: a tensor first seen on it is the
            # call's own (an nn.Parameter wrapping a tensor made inside, as a layer
            # built inside f makes and then initialises in place)
            self.fresh: set[int] = set()

        def __torch_function__(
            self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            operands = _tensors(torch, [*args, *kwargs.values()])
            for t in operands:
                if id(t) in self.inner or id(t) in self.outer:
                    continue
                # a tensor of a torch.func transform inside the call (vmap's batched, grad's
                # tracked): the transform made it, so it is the call's own
                if _transform_wrapped(torch, t) or _storage(t) in self.fresh:
                    self.inner[id(t)] = t
                else:
                    self.outer[id(t)] = (t, _version(t), t.detach().clone())
            out = func(*args, **kwargs)
            for t in operands:
                held = self.outer.get(id(t))
                if held is not None and id(t) not in self.changed and _moved(torch, t, held):
                    self.changed[id(t)] = op_name(func)
            used = {_storage(t) for t in operands}
            for t in _tensors(torch, [out]):
                self.inner.setdefault(id(t), t)  # keeps it alive: ids stay unique
                if _storage(t) not in used and _storage(t) != 0:
                    self.fresh.add(_storage(t))
            return out

        def restore(self) -> list[Mutation]:
            """Put back every outer tensor whose version moved (through a view too)."""
            found = []
            with torch.no_grad():
                for key, (tensor, version, backup) in self.outer.items():
                    if _moved(torch, tensor, (tensor, version, backup)):
                        tensor.copy_(backup)
                        found.append(Mutation(tensor, self.changed.get(key, "")))
            return found

    return Watch


def outer_mutations(torch: Any, call: Callable[..., Any], leaves: list[Any]) -> list[Mutation]:
    """Call ``call(*leaves)`` once, eagerly, and list the outer tensors it changed in place.

    Parameters
    ----------
    torch : module
    call : callable
        The user's function of the checked tensors.
    leaves : list of Tensor
        Fresh copies of the checked tensors (changes to them are checked elsewhere).

    Returns
    -------
    list of Mutation
        Tensors the function reads from outside (closed over, globals, module
        buffers, arguments) that the call changed, each restored to its value
        before the call. Exceptions of the call propagate (after restoring).
    """
    watch = _watch_class(torch)(leaves)
    with contextlib.ExitStack() as stack:
        _run_eagerly(torch, stack)
        try:
            with watch:
                call(*leaves)
        finally:
            found = watch.restore()
    return found
