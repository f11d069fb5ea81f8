"""check(): autodiff against a reference derivative with a known error → verdicts.

The check is a pipeline of stages passing frozen dataclasses:
:mod:`~polygrad.pipeline.prepare` (options, target, modes) ->
:mod:`~polygrad.pipeline.plan` (arithmetic, full or projections, mp, directions) ->
:mod:`~polygrad.pipeline.reference` (the reference, with fallback and mp escalation) ->
:mod:`~polygrad.pipeline.autodiff` (VJPs/JVPs beside the reference) ->
:mod:`~polygrad.pipeline.judge` (the verdict rule) ->
:mod:`~polygrad.pipeline.explain` (notes and details). Where entries of a symmetric
matrix argument fail, :mod:`~polygrad.pipeline.subspace` checks that argument again
along symmetric directions (a gradient that assumes a symmetric input). Constants
``c_ad`` etc. are fields of :class:`polygrad.policy.Policy`.

The decision rule (all quantities per compared entry):

* the reference ``r ± e`` comes from :mod:`polygrad.reference` (mp, float64
  or working-dtype differences, with Richardson extrapolation and an error
  bar that is the larger of the truncation estimate and the propagated noise);
* the autodiff value is allowed the round-off of its own dtype,
  ``c_ad · eps · scale``, where ``scale`` is the size of the quantity (the
  entry plus the RMS of its row for Jacobian entries; the entry plus the
  2-norm of its terms for projections); where the reference's Jacobian is
  exactly 0, autodiff's own sets the scale, and where both are exactly 0
  (``floor`` away from its jumps, a stationary point), the function's size
  per input scale, ``|f_i| / s_j`` (:func:`polygrad.pipeline.autodiff.function_scale`);
* where the rule is evaluated in float64 (promotion, or float64 code), each
  evaluation is also allowed ``c_ad · eps · |f_i| / s_j`` of its dtype: the
  round-off a right rule inherits from intermediates of the size of ``f``
  (``1 - tanh(x)^2`` from a ``tanh(x)`` one ulp below 1, the cancelling terms
  of a layer norm's VJP); a narrow dtype without a float64 evaluation gets no
  such allowance (nothing would then tell it from a wrong rule);
* ``tolerance = 2 e + c_ad · eps · scale`` (``e`` at least the accuracy a
  finite-difference reference was aimed at; where some entry fails, plus twice
  the largest move of the autodiff value a few ulps away, see
  :mod:`polygrad.dither`): MISMATCH when the float64
  evaluation of the rule (or, without one, the working-dtype evaluation) is
  further than that from the reference; UNSTABLE when only the working-dtype
  value is; NONSMOOTH when the left and right derivatives differ beyond their
  error bars (or a side jumps), also where autodiff returns NaN/Inf there (the
  norm at 0); NONFINITE when only one side is finite (the values: a finite
  reference with an infinite error bar is undecided); INCONCLUSIVE when the
  reference error bar is wider than ``sqrt(eps)·scale`` of the working dtype
  (where nothing sets a scale, only an infinite error bar is too wide).
"""

from __future__ import annotations

import concurrent.futures
import functools
import gc
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from .._random_state import preserving_random_state
from ..backends.base import Supplied
from ..errors import GradientCheckError
from ..localize import CheckedCall, localize_by_default
from ..policy import DEFAULT_POLICY, Policy
from ..report import Report, Verdict
from .assess import Assessment
from .cache import cache_request
from .explain import explain
from .judge import overall
from .judgment import judgment
from .plan import Plan, make_plan
from .prepare import Options, Prepared, prepare, symmetric_positions
from .reference import Reference, compute_reference

__all__ = ["assert_gradients", "check", "make_report", "without_gc_pauses"]

_F = TypeVar("_F", bound=Callable[..., Any])


def without_gc_pauses(fn: _F) -> _F:
    """Run ``fn`` with the objects that exist before it hidden from the garbage collector.

    A check allocates many short-lived objects, which triggers full
    collections; each one traverses everything the program holds, and with
    TensorFlow and Keras loaded that takes about 0.2 s. ``gc.freeze()`` moves
    the objects that exist before the call to a permanent generation, so
    collections during the call only traverse what the call allocates (and
    still free its reference cycles); ``gc.unfreeze()`` returns them after.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled() or gc.get_freeze_count():
            return fn(*args, **kwargs)
        gc.freeze()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.unfreeze()

    return wrapper  # type: ignore[return-value]


@preserving_random_state
@without_gc_pauses
def check(
    f: Callable[..., Any],
    *args: Any,
    argnums: int | tuple[int, ...] = 0,
    backend: str | None = None,
    grad: Callable[..., Any] | None = None,
    jac: Callable[..., Any] | None = None,
    vjp: Callable[..., Any] | None = None,
    jvp: Callable[..., Any] | None = None,
    mode: str = "auto",
    reference: str = "auto",
    strategy: str = "auto",
    projections: int = 8,
    wrt: str = "inputs",
    order: int = 1,
    dps: int = 50,
    seed: int = 0,
    batch_size: int = 4096,
    budget: float = 60.0,
    nonsmooth: str = "allow",
    policy: Policy | None = None,
    compare_with: str | None = None,
    compare_step: float | None = None,
    cache: bool | str | os.PathLike[str] | None = None,
    executor: concurrent.futures.Executor | None = None,
    symmetric: int | tuple[int, ...] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    surrogate: bool = False,
    localize: bool | None = None,
) -> Report:
    """Check the derivative of ``f`` at ``args`` against a reference with a known error.

    Parameters
    ----------
    f : callable
        The function (or model). Its output may be a scalar, an array, or a
        tuple/list/dict of arrays.
    *args
        Arguments: arrays of one framework (NumPy, PyTorch, JAX, TensorFlow),
        Python floats, or tuples/lists/dicts of them.
    argnums : int or tuple of int
        Which arguments to differentiate (as in ``jax.grad``).
    backend : str, optional
        ``"numpy"``, ``"torch"``, ``"jax"`` or ``"tensorflow"``; by default
        chosen from the array types.
    grad, jac, vjp, jvp : callable, optional
        The derivative to check, for functions without autodiff (NumPy): see
        :class:`polygrad.backends.base.Supplied` for the calling conventions.
    mode : {"auto", "rev", "fwd", "both"}
        Check reverse mode (VJP), forward mode (JVP) or both. ``"auto"``:
        reverse when available.
    reference : {"auto", "mp", "float64", "working"}
        Source of the reference derivative. ``"auto"`` uses mp when the
        function runs on mpmath numbers, the working dtype is float64 and the
        problem is small; otherwise float64 differences; otherwise
        working-dtype differences (with honestly wider error bars).
    strategy : {"auto", "full", "projections"}
        Compare every Jacobian entry, or random projections ``uᵀJw``.
        ``"auto"``: full when its estimated cost is within ``budget`` seconds.
    projections : int
        Number of random directions in projection mode.
    wrt : {"inputs", "parameters"}
        Differentiate with respect to the arguments or the model's parameters.
    order : {1, 2}
        2 checks the gradient of the gradient (Hessian-vector products) with respect
        to the checked inputs; not with ``wrt="parameters"`` (``ValueError``).
    dps : int
        Decimal digits for the mp reference.
    seed : int
        Seed of the random directions and cotangents.
    batch_size : int
        Largest number of points evaluated in one call.
    budget : float
        Seconds a full Jacobian check may take before projections are used.
    nonsmooth : {"allow", "within", "fail"}
        What ``report.ok`` makes of NONSMOOTH entries. ``"allow"`` (default):
        a point of non-differentiability is not a gradient error. ``"within"``:
        autodiff must lie between the left and right derivatives — right for
        one elementary kink (relu, abs, max), too strict for compositions, where
        autodiff may legitimately return other values (Bolte & Pauwels,
        "A mathematical model for automatic differentiation in machine
        learning", NeurIPS 2020). ``"fail"``: any NONSMOOTH entry fails.
    policy : Policy, optional
        The tunables (tolerances, ladder lengths, budgets): see
        :class:`polygrad.policy.Policy`; :data:`~polygrad.policy.DEFAULT_POLICY` by default.
    compare_with : str, optional
        Your own finite-difference check: ``"gradcheck"``,
        ``"tf.test.compute_gradient"``, ``"jax check_grads"`` or ``"fd"`` (a plain
        central difference judged by ``max |a - b| / max(1e-8, |a| + |b|)``).
        The report then states what that check reads here, how much of it is
        round-off, truncation or kinks, and its best step (see
        :mod:`polygrad.your_terms`).
    compare_step : float, optional
        The step of that check, absolute, in the input's units (``eps`` of
        ``gradcheck`` and ``check_grads``, ``delta`` of ``compute_gradient``);
        default: the tool's own default.
    cache : bool or path, optional
        Keep the reference on disk and reuse it when the same function (code,
        closure, weights) is checked at the same point with the same options
        (see :mod:`polygrad.refcache`). True: the user cache folder (or
        ``$POLYGRAD_CACHE_DIR``); a path: that folder. Default: no cache.
    executor : concurrent.futures.Executor, optional
        Compute the reference's directions in shards on this executor (a
        process pool, Dask's ``Client.get_executor()``); same verdict as in
        one process (see :mod:`polygrad.sharding`).
    symmetric : int or tuple of int, optional
        Positions of checked arguments that ``f`` is defined on as symmetric matrices
        (real, last two axes equal; a batch of them; every matrix of a pytree argument):
        where the full-space Jacobian fails on such an argument, the gradient is judged
        along symmetric directions (``E_ii``, ``E_ij + E_ji``) instead, the convention of
        a rule that assumes a symmetric input. Without it, that convention applies only
        where ``f`` applies an operation defined on symmetric matrices (Cholesky, a
        symmetric eigen-decomposition) to the argument, as its captured program shows;
        elsewhere a full-space MISMATCH stands, and the report says whether the rule is
        right on the symmetric subspace. The report names the convention and why it
        applied (see :mod:`polygrad.pipeline.subspace`).
    rtol, atol : float, optional
        The accuracy you expect of the gradient, as in
        :func:`numpy.testing.assert_allclose`: an entry also passes where
        ``|autodiff - reference| <= atol + rtol * |reference|``. For gradients that
        are approximate by design (an implicit layer solved to a tolerance, a
        truncated series). They only widen the check's own tolerance (round-off and
        the reference's error bar), never narrow it; the report's tolerance column
        shows the one used and ``|diff|`` the error measured. Default: none.
    surrogate : bool
        The rule is deliberately not the derivative of ``f`` (a straight-through
        estimator, gradient clipping or reversal in a custom rule). Its values are
        still compared and shown, and checked finite; entries where the rule differs
        from ``f``'s derivative are INCONCLUSIVE (by design, not judged), the check's
        verdict is then INCONCLUSIVE and ``ok`` is True; a NaN or Inf gradient where
        ``f`` is differentiable is still NONFINITE (not ok). Default False.
    localize : bool or None
        After a MISMATCH, also run :meth:`Report.localize`: the op, the layer and the
        source line whose own rule is wrong (after a NONFINITE, the first whose backward
        turns finite values into NaN or inf: see :mod:`polygrad.localize`); the text
        report shows the located node first. Nothing is run for a check that does not
        fail. True: the full walk (a budget of 30 s). None (default): the walk runs
        within the check's own time (``policy.localize_share`` of it, at least
        ``policy.localize_floor_seconds``), so a failing check costs at most its own
        time again, or that floor where it is more; one cut short or finding nothing is
        a line at the end of the report. False: not run (``report.localize()`` can be
        called later).

    Returns
    -------
    Report
        ``report.verdict``, ``report.ok``, ``print(report)``, ``report.to_dict()``.

    Raises
    ------
    InputTypeError
        Integer or bool inputs. (Complex inputs are checked through their
        realification, in polygrad's convention: see :mod:`polygrad.complex`.)
    InputValueError
        NaN/Inf in the inputs, or a non-finite function value at the point; an
        argument declared ``symmetric`` is not symmetric there.
    ShapeMismatchError
        A supplied derivative has the wrong shape.
    NondeterministicFunctionError
        Two evaluations at the same input differ (e.g. dropout in training mode).
    InputMutationError
        The function modifies its input in place.
    MissingBackendError
        The framework for these arrays is not installed.
    UnpicklableFunctionError
        ``executor`` runs in other processes and ``f`` cannot be serialised.
    ValueError
        An option that does not apply: a mode the function provides no derivative for,
        ``order=2`` with complex values or with ``wrt="parameters"``; ``symmetric`` naming
        an argument that is not checked or that is not a real square matrix; ``rtol``
        or ``atol`` negative or not finite.
    """
    t_start = time.perf_counter()
    opts = Options(mode, reference, strategy, projections, wrt, order, dps, seed, batch_size,
                   budget, nonsmooth, policy or DEFAULT_POLICY, compare_with,
                   compare_step, cache, executor, symmetric_positions(symmetric),
                   rtol, atol, surrogate)  # fmt: skip
    prep = prepare(f, args, argnums, Supplied(grad, jac, vjp, jvp), backend, opts)
    plan = make_plan(prep.target, opts, cache_request(f, args, prep, opts))
    ref = compute_reference(prep.target, plan, opts, prep)
    state = judgment(prep, plan, ref, opts)  # assessed, then every pass (pipeline.judgment)
    report = make_report(state.prep, state.plan, state.ref, state.judged, opts, t_start)
    report.checked_call = CheckedCall(f, args, prep.argnums, prep.backend.name, prep.supplied,
                                      opts.order)  # fmt: skip
    if localize and report.verdict in (Verdict.MISMATCH, Verdict.NONFINITE):
        report.localize()
    elif localize is None:
        report.localization = localize_by_default(report, opts.policy)
    return report


def make_report(
    prep: Prepared, plan: Plan, ref: Reference, judged: Assessment, opts: Options, t_start: float
) -> Report:
    """The :class:`Report` of one implementation judged in full (verdict, details)."""
    verdict, ok = overall(judged.entries, opts.nonsmooth, opts.surrogate)
    details = replace(
        explain(prep, plan, ref, judged, verdict, ok, opts), seconds=time.perf_counter() - t_start
    )
    quantity = judged.quantity or ("Jacobian entries" if plan.full else "projections uᵀJw")
    return Report(verdict=verdict, ok=ok, entries=judged.entries, quantity=quantity,
                  details=details)  # fmt: skip


def assert_gradients(f: Callable[..., Any], *args: Any, **options: Any) -> Report:
    """Run :func:`check` and raise :class:`GradientCheckError` unless ``report.ok``.

    Takes the same arguments as :func:`check`. Returns the report when it
    passes, so it can be inspected further.

    Raises
    ------
    GradientCheckError
        An ``AssertionError`` whose message is the full text report.
    """
    __tracebackhide__ = True  # noqa: F841 - pytest: show the report, not this frame
    report = check(f, *args, **options)
    if not report.ok:
        raise GradientCheckError(report)
    return report
