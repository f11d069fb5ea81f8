"""A new user's trial: a layer that writes state it does not read (BatchNorm in training
mode), and a fixed-point loop whose stopping test is not met at every point the check
evaluates.

* BatchNorm's running statistics are written in training mode, while its output uses
  the batch's own statistics: the gradient through the batch statistics is well
  defined. The check goes on, the user's buffers are bit for bit what they were, and
  a write that the output reads back (a buffer a module accumulates into and uses, an
  input changed in place) is still refused.
* An implicit layer, ``z = tanh(W z + x)`` iterated by ``jax.lax.while_loop`` until the
  update is below a tolerance: at points of the check far from the user's (long steps
  of the round-off explanation) the iteration need not converge, and a loop that never
  stops must not hang the check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import polygrad as pg

# ---------------------------------------------------------------- batch norm (PyTorch)


def _batchnorm(torch: Any) -> tuple[Any, Any]:
    """A BatchNorm1d(4) in training mode with running statistics away from their
    defaults, and a batch of 8 float64 rows."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(4).double().train()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-1.0, 1.0)
        bn.running_var.uniform_(0.5, 2.0)
        bn.num_batches_tracked.fill_(3)
    return bn, torch.randn(8, 4, dtype=torch.float64)


def _closed_forms(torch: Any, bn: Any, x: Any) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of sum(BN(x)^3), batch statistics (biased variance), in closed form:
    with respect to x, and to (weight, bias)."""
    with torch.no_grad():
        inv = 1 / torch.sqrt(x.var(0, unbiased=False) + bn.eps)
        xhat = (x - x.mean(0)) * inv
        dy = 3 * (xhat * bn.weight + bn.bias) ** 2
        g = dy * bn.weight
        dx = inv / x.shape[0] * (x.shape[0] * g - g.sum(0) - xhat * (g * xhat).sum(0))
        dparams = torch.cat([(dy * xhat).sum(0), dy.sum(0)])
    return dx.numpy().ravel(), dparams.numpy()


@pytest.mark.parametrize("wrt", ["inputs", "parameters"])
def test_training_mode_batchnorm_passes_and_keeps_its_running_statistics(wrt):
    torch = pytest.importorskip("torch")
    bn, x = _batchnorm(torch)
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    dx, dparams = _closed_forms(torch, bn, x)
    if wrt == "inputs":
        report = pg.check(lambda x: (bn(x) ** 3).sum(), x)
        truth = dx
    else:
        report = pg.check(lambda m, x: (m(x) ** 3).sum(), bn, x, wrt="parameters")
        truth = dparams
    assert report.verdict is pg.Verdict.PASS and report.ok, str(report)
    np.testing.assert_allclose(report.entries.autodiff, truth, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(report.entries.reference, truth, rtol=1e-8, atol=1e-8)
    assert any("running_mean" in n and "put back" in n for n in report.notes), report.notes
    for k, v in bn.state_dict().items():  # bit for bit, num_batches_tracked included
        assert v.dtype == before[k].dtype and torch.equal(v, before[k]), k
    assert bn.training


def test_instance_norm_tracking_running_statistics_passes_and_keeps_them():
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    norm = torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True).double().train()
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    report = pg.check(lambda x: (norm(x) ** 3).sum(), torch.randn(2, 3, 5, dtype=torch.float64))
    assert report.verdict is pg.Verdict.PASS and report.ok, str(report)
    for k, v in norm.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_a_buffer_written_and_read_back_is_still_refused():
    """The output reads what the call wrote: the function changes from call to call."""
    torch = pytest.importorskip("torch")

    class Accumulating(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.ones(3, dtype=torch.float64))

        def forward(self, x: Any) -> Any:
            self.scale.mul_(1.5)
            return (x * self.scale).sum()

    m = Accumulating()
    with pytest.raises(pg.InputMutationError, match=r"'scale' of the Accumulating.*reads"):
        pg.check(m, torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    assert torch.equal(m.scale, torch.ones(3, dtype=torch.float64))


def test_an_input_changed_in_place_is_still_refused():
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    with pytest.raises(pg.InputMutationError, match="modified its input in place"):
        pg.check(lambda x: x.mul_(2).sum(), x)
    assert torch.equal(x, torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
