"""compare(): one function in several frameworks, judged against one reference.

``polygrad.compare({"tf": f_tf, "jax": f_jax, "torch": f_torch}, x)``

1. converts the arguments (NumPy arrays, or any backend's arrays) to every
   framework, in the requested ``dtype``;
2. evaluates every implementation at the same point and compares the
   **primal** values with the reference value: a forward mismatch is reported
   as such (column ``forward``), not as a gradient problem;
3. computes one reference derivative by the stages of :func:`polygrad.check`
   (:mod:`polygrad.pipeline`), from one implementation, chosen among those
   whose primal values agree with the most others (preferring one that runs
   on mpmath numbers);
4. computes every implementation's VJPs/JVPs (or full Jacobian) on the same
   cotangents/tangents and judges them against that reference with the
   stages of :func:`polygrad.check` (same verdicts, same tolerances, the same
   round-off allowances and the same mp re-examination of entries in doubt).

Complex inputs and outputs are checked through their realification in each
framework (see :mod:`polygrad.complex`); the comparison names each
framework's complex VJP convention. At a kink every implementation gets the
one-sided derivatives and whether its value lies between them.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ._args import normalize_argnums
from ._pytree import flatten, tree_map
from ._random_state import preserving_random_state
from .backends import (
    DEFAULT_BACKEND,
    backend_entries,
    canonical_name,
    get_backend,
    owning_backend,
    select_backend,
)
from .backends.base import Backend, Supplied, Target
from .complex import CONVENTIONS, _copies, from_polygrad, realify, to_polygrad
from .errors import InputTypeError, ShapeMismatchError
from .localize import CheckedCall, localize_by_default
from .pipeline.autodiff import Setting
from .pipeline.check import make_report
from .pipeline.dtype_dependence import working_only
from .pipeline.judge import overall
from .pipeline.judgment import CheckState, judgment, setting_of
from .pipeline.plan import make_plan
from .pipeline.prepare import Options, Prepared, prepare, symmetric_positions
from .pipeline.reference import compute_reference
from .policy import DEFAULT_POLICY, Policy
from .reference.steps import F64_EPS
from .report import SEVERITY, Report, Verdict, _jsonable

__all__ = ["Comparison", "ComparisonEntry", "compare"]

C_AD = DEFAULT_POLICY.c_ad
_DERIVATIVE_KEYS = ("grad", "jac", "vjp", "jvp")


@dataclass(frozen=True)
class ComparisonEntry:
    """One implementation's result in a :class:`Comparison`.

    Attributes
    ----------
    name : str
        The key of the implementation in the mapping passed to :func:`compare`.
    backend : str
        ``"numpy"``, ``"torch"``, ``"jax"`` or ``"tensorflow"``.
    version : str
        Version of the framework.
    working_dtype : str
        The real dtype the implementation computed in (``"float32"`` for
        ``complex64`` inputs).
    forward : Verdict
        ``PASS`` when the primal values agree with the reference value within
        ``forward_tolerance``; ``MISMATCH`` (or ``NONFINITE``) otherwise.
    forward_error, forward_tolerance : float
        Largest ``|f - f_ref|`` over the outputs, and the largest allowed
        (round-off of the working dtype times the condition of ``f``).
    gradient : Verdict
        The worst verdict of the derivative entries (as in :class:`Report`).
    ok : bool
        Forward values agree and the gradient is ok under the ``nonsmooth`` policy.
    max_error : float
        Largest ``|autodiff - reference|`` over the entries.
    error_bar : float
        Largest reference error bar over the entries.
    report : Report
        The full per-entry report of this implementation against the shared reference;
        it keeps this implementation's call, so ``report.localize()`` walks its program
        (its ``localization`` once run, by ``compare(..., localize=True)`` or by hand).
    complex_convention : str or None
        The framework's complex VJP convention (a key of
        :data:`polygrad.complex.CONVENTIONS`) when inputs or outputs are complex.
    complex_native : dict or None
        For complex inputs (one array per checked argument, one output array):
        ``cotangent`` (polygrad's, all ones), ``native`` (the framework's own
        VJP for the cotangent of its convention), ``converted`` (``native`` in
        polygrad's convention) and ``agrees`` (``converted`` equals the VJP of
        the realified function within round-off). Complex arrays are
        ``{"real": [...], "imag": [...]}`` in :meth:`to_dict`.
    kinks : list of dict
        One per NONSMOOTH entry: ``name``, ``autodiff``, ``left``, ``right``,
        ``within`` (autodiff between the one-sided derivatives, within tolerance).
    """

    name: str
    backend: str
    version: str
    working_dtype: str
    forward: Verdict
    forward_error: float
    forward_tolerance: float
    gradient: Verdict
    ok: bool
    max_error: float
    error_bar: float
    report: Report
    complex_convention: str | None = None
    complex_native: dict[str, Any] | None = None
    kinks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        """The forward verdict when the primal values disagree, else the gradient verdict."""
        return self.forward if self.forward != Verdict.PASS else self.gradient

    def to_dict(self, max_entries: int = 20) -> dict[str, Any]:
        """JSON-serialisable summary (with the ``max_entries`` worst entries)."""
        return _jsonable(
            {
                "name": self.name,
                "backend": self.backend,
                "version": self.version,
                "working_dtype": self.working_dtype,
                "verdict": str(self.verdict),
                "forward": str(self.forward),
                "forward_error": self.forward_error,
                "forward_tolerance": self.forward_tolerance,
                "gradient": str(self.gradient),
                "ok": self.ok,
                "max_error": self.max_error,
                "error_bar": self.error_bar,
                "complex_convention": self.complex_convention,
                "complex_native": _complex_json(self.complex_native),
                "kinks": self.kinks,
                "report": self.report.to_dict(max_entries),
            }
        )


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: one row per implementation.

    Attributes
    ----------
    entries : dict of str to ComparisonEntry
        Per implementation, in the order given.
    reference : dict
        The shared reference: ``source`` (the implementation it came from),
        ``method`` (``"mp"``, ``"float64"`` or ``"working"``), ``dps``, the
        reference primal values and the report details of the reference run.
    details : dict
        Inputs, outputs, strategy, modes, complex conventions, timings, notes.
    """

    entries: dict[str, ComparisonEntry]
    reference: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every implementation is ok."""
        return all(e.ok for e in self.entries.values())

    def verdicts(self) -> dict[str, Verdict]:
        """Implementation name → its verdict."""
        return {k: e.verdict for k, e in self.entries.items()}

    def __getitem__(self, name: str) -> ComparisonEntry:
        return self.entries[name]

    def to_dict(self, max_entries: int = 20) -> dict[str, Any]:
        """JSON-serialisable form: ``ok``, ``reference``, ``details`` and every implementation."""
        return {
            "ok": self.ok,
            "verdicts": {k: str(v) for k, v in self.verdicts().items()},
            "reference": _jsonable(self.reference),
            "details": _jsonable(self.details),
            "implementations": {k: e.to_dict(max_entries) for k, e in self.entries.items()},
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string (``kwargs`` go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        return _render(self)

    def __repr__(self) -> str:
        verdicts = ", ".join(f"{k}={v}" for k, v in self.verdicts().items())
        return f"<polygrad.Comparison ok={self.ok} ({verdicts})>"


# ------------------------------------------------------------------------------ rendering
def _g(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{float(x):.{digits}g}"  # nan and inf print as such


def _render(c: Comparison) -> str:
    d, ref = c.details, c.reference
    src = ref["method"] + (f" at {ref['dps']} digits" if ref["method"] == "mp" else " differences")
    lines = [
        f"polygrad.compare: {'OK' if c.ok else 'FAILED'} — {len(c.entries)} implementations, "
        f"{d['inputs']} input(s) -> {d['outputs']} output(s), {d['quantity']}, "
        f"mode {'+'.join(d['modes'])}",
        f"  reference: {src} of {ref['source']!r} (the implementation whose primal values "
        "agree with the most others)",
        "",
    ]
    header = (
        "implementation",
        "backend",
        "dtype",
        "forward",
        "verdict",
        "max |AD-ref|",
        "error bar",
        "ok",
    )
    rows = [header]
    for e in c.entries.values():
        rows.append(
            (
                e.name,
                f"{e.backend} {e.version}",
                e.working_dtype,
                str(e.forward),
                str(e.gradient),
                _g(e.max_error),
                _g(e.error_bar, 2),
                "yes" if e.ok else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        cells = "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True))
        lines.append(("  " + cells).rstrip())
    for e in c.entries.values():
        if e.forward != Verdict.PASS:
            lines.append(
                f"  {e.name}: the function value differs from the reference by "
                f"{_g(e.forward_error)} (allowed {_g(e.forward_tolerance, 2)}): a forward "
                "mismatch, so its gradient is of a different function"
            )
    kinks = [(e.name, k) for e in c.entries.values() for k in e.kinks]
    if kinks:
        lines.append("")
        lines.append(
            "  non-smooth points (one-sided derivatives; is autodiff within [left, right]?)"
        )
        for name, k in kinks[:12]:
            lines.append(
                f"    {name}: {k['name']}: autodiff {_g(k['autodiff'], 6)}, left "
                f"{_g(k['left'], 6)}, right {_g(k['right'], 6)} -> "
                + ("within" if k["within"] else "NOT within")
            )
        if len(kinks) > 12:
            lines.append(f"    ... {len(kinks) - 12} more")
    conv = d.get("complex_conventions")
    if conv:
        lines.append("")
        lines.append(
            "  complex: gradients compared in polygrad's convention dL/da + i dL/db "
            "(= 2 dL/dz̄ for real L); each framework's own convention:"
        )
        for name, cv in conv.items():
            lines.append(f"    {name}: {cv} — {CONVENTIONS[cv]}")
            nat = c.entries[name].complex_native
            if nat:
                lines.append(
                    f"      own VJP for cotangent {_cfmt(nat['cotangent'])}: "
                    f"{_cfmt(nat['native'][0])} -> polygrad's {_cfmt(nat['converted'][0])} ("
                    + ("agrees with" if nat["agrees"] else "DIFFERS from")
                    + " the VJP of the realified function)"
                )
    lines += [f"  note: {note}" for note in d.get("notes", [])]
    lines += _localized(c)
    return "\n".join(lines)


def _localized(c: Comparison) -> list[str]:
    """The localization of each implementation whose report holds one, under its name."""
    lines: list[str] = []
    for e in c.entries.values():
        loc = e.report.localization
        if loc is not None:
            first, *rest = loc.lines()
            lines += ["", f"  {e.name}: {first}", *(f"  {line}" for line in rest)]
    return lines


def _cfmt(a: Any, k: int = 3) -> str:
    vals = np.ravel(np.asarray(a))
    text = ", ".join(f"{complex(v):.4g}".strip("()") for v in vals[:k])
    return text + (", ..." if vals.size > k else "")


def _complex_json(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _complex_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_complex_json(v) for v in x]
    if isinstance(x, np.ndarray) and x.dtype.kind == "c":
        return {"real": x.real.tolist(), "imag": x.imag.tolist()}
    return x


# ------------------------------------------------------------------------- resolution
def _backend_from_name(name: str) -> str | None:
    """The backend a key names: a backend name or alias, alone or before ``-``, ``_``, ``:``."""
    key = name.lower()
    for sep in ("-", "_", ":", " ", "."):
        key = key.split(sep)[0]
    return canonical_name(key) if key else None


def _owning_backend(out: Any) -> str | None:
    """The backend whose arrays ``out`` (a pytree) holds, or None."""
    leaves = flatten(out)[0]
    if not leaves:
        return None
    owners = {owning_backend(leaf) for leaf in leaves}
    if len(owners) == 1 and None not in owners:
        return owners.pop()
    if owners == {None} and all(isinstance(np.asarray(leaf), np.ndarray) for leaf in leaves):
        return DEFAULT_BACKEND
    return None


def _infer_backend(name: str, f: Callable[..., Any], args_np: tuple[Any, ...]) -> str:
    """The framework of ``f``: the one whose arrays in gives its arrays out.

    Frameworks are tried only among those already imported.

    Raises
    ------
    InputTypeError
        No framework fits; the message says how to name it.
    """
    import sys

    for key, entry in backend_entries(load=True).items():
        if key == DEFAULT_BACKEND or entry.error is not None or entry.module not in sys.modules:
            continue
        be = get_backend(key)
        try:
            out = f(*_to_backend(be, args_np))
        except Exception:  # noqa: BLE001 - not this framework
            continue
        if _owning_backend(out) == key:
            return key
    raise InputTypeError(
        f"cannot tell the framework of implementation {name!r}: name it after its framework "
        "('torch', 'jax', 'tf', 'numpy', optionally followed by '-' and a label) or pass "
        "{'f': f, 'backend': 'jax'}"
    )


def _resolve(
    name: str, spec: Any, args_np: tuple[Any, ...]
) -> tuple[Backend, Callable[..., Any], Supplied]:
    """(backend, function, supplied derivatives) of one implementation.

    ``spec`` is a function; ``(f, grad)`` (a NumPy function with its gradient);
    or a dict ``{"f": f, "backend": ..., "grad"/"jac"/"vjp"/"jvp": ...}``.
    """
    backend: str | None = None
    supplied = Supplied()
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"f", "backend", *_DERIVATIVE_KEYS}
        if "f" not in spec or unknown:
            raise TypeError(
                f"implementation {name!r}: a dict needs 'f' and may have 'backend', 'grad', "
                f"'jac', 'vjp', 'jvp' (got {sorted(spec)})"
            )
        f = spec["f"]
        backend = spec.get("backend")
        supplied = Supplied(**{k: spec[k] for k in _DERIVATIVE_KEYS if k in spec})
        if backend is None and supplied.given():
            backend = DEFAULT_BACKEND
    elif isinstance(spec, tuple):
        if len(spec) != 2 or not all(callable(s) for s in spec):
            raise TypeError(
                f"implementation {name!r}: a tuple must be (f, grad) for a NumPy function"
            )
        f, supplied, backend = spec[0], Supplied(grad=spec[1]), DEFAULT_BACKEND
    elif callable(spec):
        f = spec
    else:
        raise TypeError(f"implementation {name!r} is {type(spec).__name__}, not a function")
    if not callable(f):
        raise TypeError(f"implementation {name!r}: f is not callable")
    if backend is None:
        backend = _backend_from_name(name)
    if backend is None:
        owner = select_backend((f,)).name  # a torch.nn.Module...
        backend = owner if owner != DEFAULT_BACKEND else None
    if backend is None:
        backend = _infer_backend(name, f, args_np)
    return get_backend(backend), f, supplied


# -------------------------------------------------------------------------- arguments
def _as_numpy_args(
    args: tuple[Any, ...], dtype: str | None, argnums: tuple[int, ...]
) -> tuple[Any, ...]:
    """The arguments as NumPy arrays, cast to ``dtype`` if given; Python numbers become
    arrays only in the checked arguments (``argnums``): elsewhere each implementation
    gets the ``3`` or ``0.5`` its code is written for (``x / t`` with ``t`` an int tensor
    is a dtype error in TensorFlow, with ``t = 3`` it is not)."""
    src = select_backend(args)

    def leaf(x: Any, checked: bool) -> Any:
        if isinstance(x, (bool, np.bool_)) or x is None or isinstance(x, str):
            return x
        if not checked and isinstance(x, (int, float, complex)):
            return x
        if src.owns(x) or isinstance(x, (float, int, complex, np.generic, np.ndarray)):
            a = np.asarray(src.to_numpy(x) if src.owns(x) else x)
        else:
            return x
        if dtype is not None and a.dtype.kind in "fc":
            real = np.dtype(dtype)
            if real.kind != "f":
                raise ValueError(f"dtype={dtype!r}: give a real floating dtype (float32...)")
            a = a.astype(np.result_type(real, 1j) if a.dtype.kind == "c" else real)
        return a

    return tuple(tree_map(functools.partial(leaf, checked=i in argnums), a)
                 for i, a in enumerate(args))  # fmt: skip


def _to_backend(be: Backend, args_np: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        tree_map(lambda x: be.from_numpy(x) if isinstance(x, np.ndarray) else x, a) for a in args_np
    )


# ----------------------------------------------------------------------------- compare
@dataclass
class _Impl:
    name: str
    backend: Backend
    f: Callable[..., Any]
    supplied: Supplied
    args: tuple[Any, ...]
    target: Target
    complex_any: bool
    realified: tuple[Callable[..., Any], tuple[Any, ...], Supplied]


@preserving_random_state
def compare(
    implementations: Mapping[str, Any],
    *args: Any,
    argnums: int | tuple[int, ...] = 0,
    dtype: str | None = None,
    mode: str = "auto",
    reference: str = "auto",
    strategy: str = "auto",
    projections: int = 8,
    dps: int = 50,
    seed: int = 0,
    batch_size: int = 4096,
    budget: float = 60.0,
    nonsmooth: str = "allow",
    policy: Policy | None = None,
    symmetric: int | tuple[int, ...] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    surrogate: bool = False,
    localize: bool | None = None,
) -> Comparison:
    """Check one function implemented in several frameworks against one reference.

    Parameters
    ----------
    implementations : mapping of str to implementation
        Name → a function of any supported framework; ``(f, grad)`` for a
        NumPy function with its gradient (polygrad's convention for complex
        inputs); or ``{"f": f, "backend": "jax", "vjp": ...}``. The framework
        is taken from ``"backend"``, else from the name when it is (or starts
        with, before ``-``/``_``/``:``) a backend name or alias (``"tf"``,
        ``"torch"``, ``"jax"``, ``"numpy"``...), else from the function (a
        ``torch.nn.Module``...), else by calling it with each imported
        framework's arrays.
    *args
        The point: NumPy arrays, Python numbers, or arrays of any one
        framework, in tuples/lists/dicts; converted to every implementation's
        framework.
    argnums : int or tuple of int
        The differentiated arguments.
    dtype : str, optional
        Cast floating arguments to this real dtype (complex arguments to the
        complex dtype of that precision) before converting them; by default
        the arguments keep their dtypes.
    mode, reference, strategy, projections, dps, seed, batch_size, budget, nonsmooth
        As in :func:`polygrad.check`, applied to the implementation the
        reference comes from (one whose primal values agree with the majority,
        preferably one that runs on mpmath numbers): ``reference="auto"`` chooses
        the reference by check's rule, so every implementation gets the verdict
        check() would give it.
    policy : Policy, optional
        The tunables, as in :func:`polygrad.check`.
    symmetric : int or tuple of int, optional
        Positions of arguments every implementation takes as symmetric matrices, as in
        :func:`polygrad.check`.
    rtol, atol : float, optional
        The accuracy expected of every implementation's gradient, as in
        :func:`polygrad.check` (``atol + rtol * |reference|``, as in
        :func:`numpy.testing.assert_allclose`; they only widen the check's own
        tolerance). Default: none.
    surrogate : bool
        Every implementation's rule is a surrogate by design, as in
        :func:`polygrad.check`. Default False.
    localize : bool or None
        Run :meth:`polygrad.Report.localize` on the report of each implementation whose
        gradient verdict is MISMATCH or NONFINITE: the op, the layer and the source line
        of that implementation whose own rule is wrong (or whose VJP makes NaN or Inf);
        the comparison's text shows it under the implementation's name. True: the full
        walk; None (default): within the check's own time, as in
        :func:`polygrad.check`; False: not run (``c[name].report.localize()`` can be
        called later: every implementation's report keeps its call).

    Returns
    -------
    Comparison
        ``print(c)`` gives the table; ``c.ok``, ``c["jax"].verdict``,
        ``c.to_dict()``.

    Raises
    ------
    ValueError
        No implementations, or an unknown option value.
    TypeError, InputTypeError
        An implementation is not a function or its framework cannot be told.
    ShapeMismatchError
        Implementations have different numbers of inputs or outputs.
    InputValueError, NondeterministicFunctionError, InputMutationError
        As in :func:`polygrad.check` (the message names the implementation).
    """
    t_start = time.perf_counter()
    if not implementations:
        raise ValueError("compare() needs at least one implementation")
    if not args:
        raise TypeError("compare(implementations, *args): pass the point of the comparison")
    p = policy or DEFAULT_POLICY
    opts = Options(mode, reference, strategy, projections, "inputs", 1, dps, seed, batch_size,
                   budget, nonsmooth, p, symmetric=symmetric_positions(symmetric), rtol=rtol,
                   atol=atol, surrogate=surrogate)  # fmt: skip
    argnums_t = normalize_argnums(argnums, len(args))
    args_np = _as_numpy_args(args, dtype, argnums_t)
    impls = _implementations(implementations, args_np, argnums_t, batch_size)
    ref_impl = _choose_reference(impls, reference)
    ref_prep, plan, ref = _reference_stages(ref_impl, argnums_t, opts)
    setting = setting_of(plan, ref)
    ref_state = judgment(ref_prep, plan, ref, opts)  # the loop check() runs
    ref_report = make_report(ref_state.prep, ref_state.plan, ref_state.ref, ref_state.judged,
                             opts, t_start)  # fmt: skip
    # the primal from the program the reference ended on (the working dtype's, where the
    # float64 run is another function)
    y_ref, y_ref_err = _reference_primal(ref_state.ref_prep.target, ref_state.ref.method, dps)
    # where the reference run's float64 run is measured to be another function, every
    # implementation is judged against its working program (as check() judges each alone)
    apart = ref_state.float64_apart
    src, src_plan, src_ref = (ref_state.ref_prep, ref_state.plan, ref_state.ref) if apart else (
        ref_prep, plan, ref)  # fmt: skip
    entries = {}
    for impl in impls:  # the same loop judges every implementation against one reference
        report = ref_report
        if impl is not ref_impl:
            state = judgment(_prepared(impl, src, apart), src_plan, src_ref, opts, src)
            report = _report(impl, state, ref_report, ref_impl.name, nonsmooth, surrogate)
        _keep_call(impl, report, argnums_t, localize, opts.policy)
        fwd = _forward(impl.target, y_ref, y_ref_err, setting, p.c_ad)
        entries[impl.name] = _entry(impl, report, fwd, argnums_t)
    reference_info = _reference_info(ref_impl, ref.method, dps, y_ref, y_ref_err, ref_report)
    details = _details(impls, ref_impl, ref_report, ref_prep, dtype)
    details["seconds"] = time.perf_counter() - t_start
    return Comparison(entries=entries, reference=reference_info, details=details)


def _reference_stages(
    ref_impl: _Impl, argnums: tuple[int, ...], opts: Options
) -> tuple[Prepared, Any, Any]:
    """prepare, plan and reference for the implementation the reference comes from."""
    try:
        ref_prep = prepare(ref_impl.f, ref_impl.args, argnums, ref_impl.supplied,
                           ref_impl.backend.name, opts)  # fmt: skip
        plan = make_plan(ref_prep.target, opts)
        return ref_prep, plan, compute_reference(ref_prep.target, plan, opts)
    except Exception as exc:
        exc.add_note(f"(in the reference run of implementation {ref_impl.name!r})")
        raise


def _reference_info(
    ref_impl: _Impl, method: str, dps: int, y: np.ndarray, y_err: np.ndarray, report: Report
) -> dict[str, Any]:
    """The comparison's ``reference`` dict."""
    return {
        "source": ref_impl.name,
        "backend": ref_impl.backend.name,
        "method": method,
        "dps": dps if method == "mp" else None,
        "primal": y,
        "primal_error": y_err,
        "details": report.details.reference.to_dict(),
    }


def _implementations(
    implementations: Mapping[str, Any],
    args_np: tuple[Any, ...],
    argnums_t: tuple[int, ...],
    batch_size: int,
) -> list[_Impl]:
    """Every implementation resolved, converted and flattened to a :class:`Target`.

    Raises
    ------
    ShapeMismatchError
        Implementations have different numbers of inputs or outputs.
    """
    impls: list[_Impl] = []
    for name, spec in implementations.items():
        try:
            be, f, supplied = _resolve(str(name), spec, args_np)
            be_args = _to_backend(be, args_np)
            f_r, args_r, supplied_r, cinfo = realify(be, f, be_args, argnums_t, supplied)
            target = be.make_target(f_r, args_r, argnums_t, supplied_r, batch_size, "inputs")
        except Exception as exc:
            exc.add_note(f"(in implementation {name!r} of polygrad.compare)")
            raise
        complex_out = any(leaf.pair for leaf in target.output_layout.leaves)
        impls.append(_Impl(str(name), be, f, supplied, be_args, target,
                           cinfo.any or complex_out, (f_r, args_r, supplied_r)))  # fmt: skip
    sizes = {(i.target.n, i.target.m) for i in impls}
    if len(sizes) > 1:
        shown = ", ".join(f"{i.name}: {i.target.n} in / {i.target.m} out" for i in impls)
        raise ShapeMismatchError(f"the implementations differ in input/output sizes ({shown})")
    return impls


def _prepared(impl: _Impl, ref_prep: Prepared, working: bool = False) -> Prepared:
    """An implementation other than the reference's, ready for :func:`assess`; with
    ``working``, on its working dtype alone (no float64 evaluation of its rule: judged
    against the working program's reference, a float64 run of code that reads its
    dtype would be another function's rule).

    Raises
    ------
    ValueError
        It provides neither a VJP nor a JVP.
    """
    t = working_only(impl.target) if working else impl.target
    modes = [md for md in ref_prep.modes if t.has_mode(md)] or [
        md for md in ("rev", "fwd") if t.has_mode(md)
    ]
    if not modes:
        raise ValueError(f"implementation {impl.name!r} provides neither a VJP nor a JVP")
    f_r, args_r, supplied_r = impl.realified
    return Prepared(impl.backend, f_r, args_r, ref_prep.argnums, supplied_r, impl.complex_any,
                    t, modes, list(t.notes))  # fmt: skip


def _report(
    impl: _Impl,
    state: CheckState,
    ref_report: Report,
    ref_name: str,
    nonsmooth: str,
    surrogate: bool = False,
) -> Report:
    """One implementation's judged state as a :class:`Report` beside the reference's."""
    judged = state.judged
    verdict, ok = overall(judged.entries, nonsmooth, surrogate)
    t, modes = impl.target, _modes_of(impl, ref_report)
    has64 = (t.vjp64 is not None) if "rev" in modes else (t.jvp64 is not None)
    notes = [*t.notes, *judged.notes, f"judged against the reference computed from {ref_name!r}"]
    details = replace(
        ref_report.details,
        backend=t.backend,
        working_dtype=t.working_dtype,
        eps=t.eps,
        modes=tuple(modes),
        rules=replace(ref_report.details.rules, has_float64_autodiff=has64),
        notes=tuple(notes),
        escalation=judged.escalation,
        convention=judged.convention,
        subspace=judged.subspace,
    ).with_evidence()  # the supporting evidence was the reference run's, not this implementation's
    quantity = judged.quantity or ("Jacobian entries" if state.plan.full else "projections uᵀJw")
    return replace(ref_report, verdict=verdict, ok=ok, entries=judged.entries, details=details,
                   quantity=quantity)  # fmt: skip


def _keep_call(impl: _Impl, report: Report, argnums: tuple[int, ...], localize: bool | None,
               policy: Policy) -> None:  # fmt: skip
    """Keep the implementation's own call in its report (for :meth:`Report.localize`),
    and localize a failed gradient when asked, or by default within the check's own time
    (``localize=None``). (A report made from the reference's by ``dataclasses.replace``
    starts with the reference's call and localization.)"""
    report.checked_call = CheckedCall(impl.f, impl.args, argnums, impl.backend.name,
                                      impl.supplied)  # fmt: skip
    report.localization = None
    if localize and report.verdict in (Verdict.MISMATCH, Verdict.NONFINITE):
        report.localize()
    elif localize is None:
        report.localization = localize_by_default(report, policy)


def _modes_of(impl: _Impl, ref_report: Report) -> list[str]:
    t = impl.target
    return [md for md in ref_report.details.modes if t.has_mode(md)] or [
        md for md in ("rev", "fwd") if t.has_mode(md)
    ]


def _entry(
    impl: _Impl, report: Report, fwd: tuple[Verdict, float, float], argnums: tuple[int, ...]
) -> ComparisonEntry:
    """One row of the comparison."""
    e = report.entries
    with np.errstate(all="ignore"):
        diff = np.abs(e.autodiff - e.reference)
    at_kink = e.status == SEVERITY[Verdict.NONSMOOTH]
    kinks = [
        {
            "name": e.names[j],
            "autodiff": float(e.autodiff[j]),
            "left": float(e.left[j]),
            "right": float(e.right[j]),
            "within": bool(e.within_one_sided[j]),
        }
        for j in np.flatnonzero(at_kink)
    ]
    conv = impl.backend.complex_convention if impl.complex_any else None
    return ComparisonEntry(
        name=impl.name,
        backend=impl.backend.name,
        version=impl.backend.version(),
        working_dtype=impl.target.working_dtype,
        forward=fwd[0],
        forward_error=fwd[1],
        forward_tolerance=fwd[2],
        gradient=report.verdict,
        ok=bool(report.ok and fwd[0] == Verdict.PASS),
        max_error=float(np.nanmax(diff[~at_kink])) if np.any(~at_kink) else float("nan"),
        error_bar=float(np.nanmax(e.reference_error)) if e.reference_error.size else 0.0,
        report=report,
        complex_convention=conv,
        complex_native=_native(impl, argnums) if impl.complex_any else None,
        kinks=kinks,
    )


def _details(
    impls: list[_Impl], ref_impl: _Impl, ref_report: Report, ref_prep: Prepared, dtype: Any
) -> dict[str, Any]:
    """The comparison's details: sizes, strategy, conventions, notes."""
    ref_t = ref_prep.target
    notes = [
        f"{impl.name}: {note}"
        for impl in impls
        for note in (ref_report.notes if impl is ref_impl else impl.target.notes)
    ]
    notes += [
        f"{impl.name}: its inputs differ from those of the reference run (largest difference "
        f"{np.max(np.abs(impl.target.x0 - ref_t.x0)):.3g}); compare in one dtype"
        for impl in impls
        if not np.array_equal(impl.target.x0, ref_t.x0)
    ]
    conventions = {i.name: i.backend.complex_convention for i in impls if i.complex_any}
    return {
        "inputs": ref_t.n,
        "outputs": ref_t.m,
        "input_names": list(ref_report.details.input_names),
        "quantity": ref_report.quantity,
        "strategy": ref_report.details.strategy,
        "modes": ref_prep.modes,
        "dtype": dtype,
        "complex_conventions": conventions,
        "notes": list(dict.fromkeys(notes)),
    }


def _native(impl: _Impl, argnums: tuple[int, ...]) -> dict[str, Any] | None:
    """The framework's own complex VJP, converted to polygrad's convention and cross-checked.

    None for NumPy implementations (their derivatives are given in polygrad's
    convention) and when a checked argument or the output is not one array.
    """
    be, t = impl.backend, impl.target
    if t.vjp is None or not be.supports_autodiff:
        return None
    if any(len(flatten(impl.args[i])[0]) != 1 for i in argnums):
        return None
    try:
        out = impl.f(*_copies(be, impl.args))
        if len(flatten(out)[0]) != 1:
            return None
        out_np = np.asarray(be.to_numpy(out))
        u = np.ones(out_np.shape, dtype=complex if out_np.dtype.kind == "c" else float)
        conv = be.complex_convention
        native = be.native_vjp(impl.f, impl.args, argnums, from_polygrad(u, conv))
    except Exception:  # noqa: BLE001 - only an illustration of the convention
        return None
    converted = [to_polygrad(g, conv) for g in native]
    u_real = np.stack([u.real, u.imag], axis=-1) if u.dtype.kind == "c" else u
    g_real = t.vjp(u_real.reshape(1, -1))[0]
    agrees = True
    for conv_k, part in zip(converted, t.input_layout.split(g_real), strict=True):
        mine = part[..., 0] + 1j * part[..., 1] if np.iscomplexobj(conv_k) else part
        scale = np.max(np.abs(mine), initial=0.0) + 1e-300
        agrees &= bool(np.all(np.abs(conv_k - mine) <= C_AD * t.eps * scale))
    return {"cotangent": u, "native": native, "converted": converted, "agrees": agrees}


def _choose_reference(impls: list[_Impl], reference: str) -> _Impl:
    """The implementation whose primal values agree with the most others.

    Ties go to one that runs on mpmath numbers (unless ``reference`` excludes
    mp), then to one with a float64 evaluation, then to the first given.
    """
    ys = [i.target.y0 for i in impls]
    scores = []
    for a, ia in enumerate(impls):
        agree = 0
        for b, ib in enumerate(impls):
            eps = max(ia.target.eps, ib.target.eps)
            scale = np.abs(ys[a]) + np.abs(ys[b]) + np.sqrt(np.mean(ys[a] ** 2))
            with np.errstate(all="ignore"):
                ok = np.all(np.abs(ys[a] - ys[b]) <= 4 * C_AD * eps * scale)
            agree += int(bool(ok)) if a != b else 0
        mp = reference in ("auto", "mp") and ia.target.mp_mode()
        scores.append((agree, mp, ia.target.evaluate64 is not None, -a))
    return impls[max(range(len(impls)), key=lambda k: scores[k])]


def _reference_primal(target: Target, method: str, dps: int) -> tuple[np.ndarray, np.ndarray]:
    """The function value at ``x0`` from the reference source, with its error bar."""
    if method == "mp" and target.mp_mode():
        assert target.evaluate_mp is not None
        try:
            y = target.evaluate_mp(target.x0, np.zeros_like(target.x0), dps)
            y = np.array([float(v) for v in y])
            return y, np.abs(y) * F64_EPS
        except Exception:  # noqa: BLE001 - fall back to float64
            pass
    if target.evaluate64 is not None:
        y = target.evaluate64(target.x0[None, :])[0]
        return y, 4 * F64_EPS * (np.abs(y) + np.sqrt(np.mean(y**2)))
    y = target.y0
    return y, 4 * target.eps * (np.abs(y) + np.sqrt(np.mean(y**2)))


def _forward(
    target: Target,
    y_ref: np.ndarray,
    y_ref_err: np.ndarray,
    st: Setting,
    c_ad: float = C_AD,
) -> tuple[Verdict, float, float]:
    """Forward verdict, largest error and its tolerance.

    The tolerance is ``C_AD · eps · (|f| + RMS f + Σ_j |∂f/∂x_j| |x_j|)`` plus
    the reference value's own error: round-off of the evaluation including
    the effect of rounding the inputs to the working dtype (the condition of
    ``f``), from the reference derivatives when the full Jacobian was computed.
    """
    y = target.y0
    scale = np.abs(y_ref) + np.sqrt(np.mean(y_ref**2))
    if st.full:
        J = np.where(np.isfinite(st.dd.central.value), st.dd.central.value, 0.0)  # (n, m), scaled
        xs = np.abs(target.x0) / st.s
        scale = scale + np.sum(np.abs(J) * xs[:, None], axis=0)
    tol = c_ad * target.eps * scale + 2 * y_ref_err
    with np.errstate(all="ignore"):
        err = np.abs(y - y_ref)
    finite = np.isfinite(y)
    if not np.array_equal(finite, np.isfinite(y_ref)):
        return Verdict.NONFINITE, float("inf"), float(np.max(tol))
    err = np.where(finite, err, 0.0)
    worst = int(np.argmax(err / np.maximum(tol, 1e-300)))
    verdict = Verdict.PASS if np.all(err <= tol) else Verdict.MISMATCH
    return verdict, float(err[worst]), float(tol[worst])
