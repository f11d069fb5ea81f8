"""check() and compare() reach their verdicts through one loop (polygrad.pipeline.judgment).

Each implementation in a comparison gets the verdict check() gives it alone: the
passes that change what is compared (the symmetric subspace, the working dtype) run
for every implementation, not only for the one the reference comes from.
"""

import numpy as np
import pytest

import polygrad as pg
from polygrad import Verdict
from polygrad.pipeline.judgment import PASSES

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


def test_the_loop_records_every_pass_in_order():
    from polygrad.backends.base import Supplied
    from polygrad.pipeline.judgment import judgment
    from polygrad.pipeline.plan import make_plan
    from polygrad.pipeline.prepare import Options, prepare
    from polygrad.pipeline.reference import compute_reference
    from polygrad.policy import DEFAULT_POLICY

    opts = Options("auto", "auto", "auto", 8, "inputs", 1, 50, 0, 4096, 60.0, "allow",
                   DEFAULT_POLICY)  # fmt: skip
    x = np.array([0.3, -1.2])
    prep = prepare(lambda x: np.sum(np.sin(x)), (x,), 0, Supplied(grad=np.cos), None, opts)
    plan = make_plan(prep.target, opts)
    state = judgment(prep, plan, compute_reference(prep.target, plan, opts, prep), opts)
    assert [r.name for r in state.passes] == [name for name, _ in PASSES]
    assert not any(r.changed for r in state.passes)
    assert state.ref_prep is state.prep
    np.testing.assert_allclose(state.judged.entries.reference, np.cos(x), rtol=1e-12)
