"""check() and compare() reach their verdicts through one loop (polygrad.pipeline.judgment).

Each implementation in a comparison gets the verdict check() gives it alone: the
passes that change what is compared (the symmetric subspace, the working dtype) run
for every implementation, not only for the one the reference comes from.
"""

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict
from polygrad.report import SEVERITY

P32 = np.array([1e-7, 1e-4, 0.3], np.float32)


def _spd(n=3, seed=1):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def _log_eps(framework):
    """``-sum(log(p + eps))`` with the eps of the input's dtype: float64 is another function."""
    if framework == "torch":
        import torch

        return lambda p: -torch.log(p + torch.finfo(p.dtype).eps).sum()
    import jax.numpy as jnp

    return lambda p: -jnp.sum(jnp.log(p + jnp.finfo(p.dtype).eps))


def _logdet(framework):
    """``log det X`` through a Cholesky factor: read on the symmetric subspace."""
    if framework == "torch":
        import torch

        return lambda x: 2 * torch.log(torch.diagonal(torch.linalg.cholesky(x))).sum()
    import jax.numpy as jnp

    return lambda x: 2 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(x))))


def _as(framework, x):
    if framework == "torch":
        import torch

        return torch.tensor(x)
    import jax.numpy as jnp

    return jnp.asarray(x)


def _verdicts_agree(make, x):
    impls = {fw: make(fw) for fw in ("torch", "jax")}
    c = pg.compare(impls, x)
    alone = {fw: pg.check(fn, _as(fw, x)) for fw, fn in impls.items()}
    for fw in impls:
        assert c[fw].verdict == alone[fw].verdict, (fw, str(c), str(alone[fw]))
    return c, alone


def test_working_dtype_case_same_verdict_in_compare_and_check():
    c, alone = _verdicts_agree(_log_eps, P32)
    for fw, report in alone.items():
        assert report.verdict == Verdict.PASS and report.ok, str(report)
        assert c[fw].verdict == Verdict.PASS


def test_symmetric_subspace_case_same_verdict_in_compare_and_check():
    c, alone = _verdicts_agree(_logdet, _spd().astype(np.float32))
    # PyTorch's Cholesky reads the lower triangle and its gradient is the symmetric
    # problem's; JAX's symmetrizes its input, so alone it passes on the full space (and
    # against PyTorch's reference, on the subspace): the verdict is the same
    assert alone["torch"].details.convention == "symmetric-subspace"
    assert c["torch"].report.details.convention == "symmetric-subspace"
    for fw, report in alone.items():
        assert report.verdict == Verdict.PASS and report.ok, str(report)
        assert c[fw].verdict == Verdict.PASS


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_pass_that_is_not_the_references_runs_for_each_implementation(framework):
    """The reference comes from NumPy (no dtype trick): the other implementation's own
    float32 program is still judged as check() judges it."""
    other = _log_eps(framework)
    c = pg.compare(
        {"numpy": (lambda p: -np.sum(np.log(p + np.finfo(p.dtype).eps)),
                   lambda p: -1.0 / (p + np.finfo(p.dtype).eps)),
         framework: other},
        P32,
    )  # fmt: skip
    assert c[framework].verdict == pg.check(other, _as(framework, P32)).verdict


def _state(f, x, **supplied):
    from polygrad.backends.base import Supplied
    from polygrad.pipeline.assess import assess
    from polygrad.pipeline.judgment import CheckState, run_frames, setting_of
    from polygrad.pipeline.plan import make_plan
    from polygrad.pipeline.prepare import Options, prepare
    from polygrad.pipeline.reference import compute_reference
    from polygrad.policy import DEFAULT_POLICY

    opts = Options("auto", "auto", "auto", 8, "inputs", 1, 50, 0, 4096, 60.0, "allow",
                   DEFAULT_POLICY)  # fmt: skip
    prep = prepare(f, (x,), 0, Supplied(**supplied), None, opts)
    plan = make_plan(prep.target, opts)
    ref = compute_reference(prep.target, plan, opts, prep)
    judged = assess(prep, setting_of(plan, ref), ref.method, opts)
    return run_frames(CheckState(prep, plan, ref, judged, prep), opts), opts


def test_the_loop_records_every_pass_in_order():
    from polygrad.pipeline.judgment import EVIDENCE, FRAMES, gather_and_decide

    x = np.array([0.3, -1.2])
    framed, opts = _state(lambda x: np.sum(np.sin(x)), x, grad=np.cos)
    state = gather_and_decide(framed, opts)
    assert [r.name for r in state.passes] == [name for name, _ in (*FRAMES, *EVIDENCE)]
    assert not any(r.changed for r in state.passes)
    assert state.ref_prep is state.prep
    np.testing.assert_allclose(state.judged.entries.reference, np.cos(x), rtol=1e-12)


def _relu_inside_a_smooth_function(v):
    """``relu(v) - relu(-v) = v``: smooth, but at v = 0 both ReLUs sit at their kink, and the
    rule autodiff would give (relu'(0) = 0) returns 0 there."""
    return np.sum(np.maximum(v, 0.0) - np.maximum(-v, 0.0))


def _relu_rule(v):
    return (v > 0).astype(v.dtype) + (-v > 0).astype(v.dtype)


X_KINK = np.array([0.0, 0.5, -1.0])
NONSMOOTH_PASS_PASS = (SEVERITY[Verdict.NONSMOOTH], SEVERITY[Verdict.PASS], SEVERITY[Verdict.PASS])


def test_the_evidence_decides_the_same_in_every_order():
    """A kink of an intermediate at the point: the verdict does not depend on which
    evidence pass runs first (the decision is a union over all of them)."""
    from itertools import permutations

    from polygrad.pipeline.judgment import EVIDENCE, gather_and_decide

    framed, opts = _state(_relu_inside_a_smooth_function, X_KINK, grad=_relu_rule)
    results = [gather_and_decide(framed, opts, order) for order in permutations(EVIDENCE)]
    statuses = {tuple(r.judged.entries.status) for r in results}
    assert len(statuses) == 1
    assert statuses.pop() == NONSMOOTH_PASS_PASS
    assert all(any(r.changed for r in res.passes) for res in results)


def test_decide_is_a_union_of_the_evidence():
    from polygrad.pipeline.judgment import Evidence, decide

    framed, _ = _state(_relu_inside_a_smooth_function, X_KINK, grad=_relu_rule)
    base = framed.judged
    mismatch, kink = SEVERITY[Verdict.MISMATCH], SEVERITY[Verdict.NONSMOOTH]
    assert list(base.entries.status) == [mismatch, SEVERITY[Verdict.PASS], SEVERITY[Verdict.PASS]]
    none = np.zeros(3, bool)
    first = Evidence("a", np.array([True, False, False]), none, ("kink at x[0]",))
    nothing = Evidence("b", none, np.array([True, False, False]), ("no kink at x[0]",))
    other = Evidence("c", np.array([False, False, True]), none, ("kink at x[2]",))
    one = decide(base, [nothing, first])
    assert tuple(one.entries.status) == NONSMOOTH_PASS_PASS
    assert "no kink at x[0]" not in one.notes and "kink at x[0]" in one.notes
    alone = decide(base, [nothing])
    assert alone.entries.status[0] == mismatch and "no kink at x[0]" in alone.notes
    orders = {tuple(decide(base, list(p)).entries.status)
              for p in ([first, nothing, other], [other, nothing, first])}  # fmt: skip
    assert orders == {(kink, SEVERITY[Verdict.PASS], kink)}


def _norm_with_eps():
    """``sqrt(sum(x²) + finfo(x.dtype).eps)`` in three frameworks, as users write it
    (TensorFlow's float64 run is its float32 graph rewritten, the eps kept; PyTorch's and
    JAX's run the code again on float64, another function)."""
    import jax.numpy as jnp
    import tensorflow as tf
    import torch

    return {
        "jax": lambda x: jnp.sqrt(jnp.sum(x**2) + jnp.finfo(x.dtype).eps),
        "torch": lambda x: torch.sqrt((x**2).sum() + torch.finfo(x.dtype).eps),
        "tf": lambda x: tf.sqrt(tf.reduce_sum(x**2) + np.finfo(x.dtype.as_numpy_dtype).eps),
    }


@pytest.mark.polygrad_backends("torch", "jax", "tensorflow")
def test_code_that_reads_its_dtype_gets_the_same_verdict_in_compare_and_check():
    """At ``x`` near 1e-4 the float32 eps is 1/6 of ``sum(x²)``. compare() judged every
    implementation against the reference implementation's float64 run (the eps-free
    function): TensorFlow, whose own check passes, was MISMATCH, and so was PyTorch once
    JAX's working program was the reference but PyTorch's float64 rule was still
    consulted. Each is PASS, as alone, against ``x / sqrt(sum(x²) + 2^-23)``."""
    x = np.array([1e-4, -2e-4, 3e-4])
    c = pg.compare(_norm_with_eps(), x, dtype="float32")
    x32 = x.astype(np.float32).astype(np.float64)
    exact = x32 / np.sqrt(np.sum(x32**2) + 2.0**-23)
    for fw in ("jax", "torch", "tf"):
        report = c[fw].report
        assert report.verdict == Verdict.PASS and report.ok, (fw, str(c))
        np.testing.assert_allclose(report.entries.reference, exact, rtol=1e-4)
