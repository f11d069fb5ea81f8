"""The quad tier for PyTorch: the captured ATen graph run on binary128 arrays, every point
of a check in one pass.

Each rule is checked against PyTorch's own float64 result at the same points, the
reference of a model's loss against a closed form evaluated with mpmath, and each verdict
against the truth (a right rule PASS, a rule wrong by 1e-9 MISMATCH); a graph the quad
interpreter cannot run goes on to mpmath and says why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import mlp_loss_grad_mp

import polygrad as pg
from polygrad.mpexec.quad_ops import NoQuadRuleError
from polygrad.mpexec.torch_graph import torch_mp_evaluator
from polygrad.mpexec.torch_quad import quad_graph_evaluator
from polygrad.reference.quad import quad_dtype

pytestmark = pytest.mark.polygrad_backends("torch")

RNG = np.random.default_rng(12)
W1 = RNG.normal(size=(8, 6)) / np.sqrt(6)
B1 = RNG.uniform(-0.5, 0.5, 8)
W2 = RNG.normal(size=(5, 8)) / np.sqrt(8)
X6 = RNG.uniform(-1.5, 1.5, 6)
T_W1, T_B1, T_W2 = (torch.tensor(a) for a in (W1, B1, W2))
TARGETS = torch.tensor([1, 2])


def mlp_loss(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(T_W2 @ torch.tanh(T_W1 @ x + T_B1), 0)[3]


torch.manual_seed(0)
NET = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()

# programs covering every rule of the quad interpreter, each checked against torch float64
PROGRAMS = {
    "linear layers and cross entropy": lambda x: F.cross_entropy(NET(x.reshape(2, 3)), TARGETS),
    "matmul shapes": lambda x: torch.cat(
        [
            (x.reshape(2, 3) @ x.reshape(3, 2)).reshape(-1),
            T_W1 @ x,
            x @ T_W1.T,
            torch.bmm(x.reshape(1, 2, 3), x.reshape(1, 3, 2)).reshape(-1),
            torch.dot(x, x)[None],
            torch.mv(T_W1, x),
            torch.addmm(T_B1[:2], x.reshape(2, 3), T_W1[:3, :2], alpha=0.5, beta=2.0).reshape(-1),
        ]
    ),  # fmt: skip
    "reductions": lambda x: torch.stack(
        [
            x.sum(),
            x.mean(),
            x.amax(),
            x.min(),
            x.prod(),
            x.reshape(2, 3).sum(1)[1],
            x.reshape(2, 3).mean(0)[2],
            torch.logsumexp(x, 0),
        ]
    ),  # fmt: skip
    "softmax and losses": lambda x: torch.cat(
        [
            torch.softmax(x.reshape(2, 3), 1).reshape(-1),
            F.log_softmax(x, 0),
            F.mse_loss(x, torch.ones(6, dtype=torch.float64))[None],
            F.mse_loss(x, torch.zeros(6, dtype=torch.float64), reduction="sum")[None],
            F.nll_loss(F.log_softmax(x.reshape(2, 3), 1), TARGETS)[None],
        ]
    ),  # fmt: skip
    "elementwise": lambda x: torch.cat(
        [
            torch.exp(x),
            torch.log1p(x**2),
            torch.expm1(x),
            torch.atan(x),
            torch.sinh(x),
            torch.cosh(x),
            torch.asinh(x),
            torch.sigmoid(x),
            torch.rsqrt(1 + x**2),
            torch.tanh(x),
            torch.atan2(x, x.flip(0)),
            torch.pow(1.5 + x, 0.3 + x.flip(0) ** 2),
            x**-3,
            2.0 - 3 * x,
            x / (2 + x**2),
            F.silu(x),
            torch.relu(x),
            1 / (3 + x),
        ]
    ),  # fmt: skip
    "where clamp masks": lambda x: torch.cat(
        [
            torch.where(x > 0.1, torch.clamp(x, -0.7, 0.7), x**3),
            x.clamp(min=0.2),
            x.masked_fill(x < 0, 0.5),
            torch.maximum(x, x.flip(0)),
            torch.minimum(x, 0.3 * x),
        ]
    ),
    "indexing and shapes": lambda x: torch.cat(
        [
            x[torch.tensor([4, 0, 2])] * x[1:4],
            x.reshape(2, 3).t().reshape(-1),
            x.reshape(2, 3).permute(1, 0)[2],
            x.reshape(3, 2)[:, 1],
            x.unsqueeze(0).expand(2, 6)[1],
            x.reshape(2, 3).transpose(0, 1).flatten(),
            x[x.argmax(0, keepdim=True)],
            torch.stack([x[0], x[5]]),
        ]
    ),  # fmt: skip
    "activations and norms": lambda x: torch.cat(
        [
            F.softplus(x),
            F.softplus(x, beta=2.0, threshold=1.0),
            F.gelu(x, approximate="tanh"),
            F.leaky_relu(x, 0.2),
            F.elu(x),
            F.hardtanh(x, -0.5, 0.5),
            torch.logit(torch.sigmoid(x)),
            F.layer_norm(x.reshape(2, 3), (3,), T_W1[0, :3], T_B1[:3]).reshape(-1),
            F.layer_norm(x, (6,)),
            torch.split(x, 4)[1],
            torch.split(x, [1, 5])[1],
            torch.unbind(x.reshape(2, 3))[1],
            torch.where(~(x > 0), x, 2 * x),
        ]
    ),  # fmt: skip
    "rounding": lambda x: torch.round(3 * x) + torch.floor(2 * x) * torch.ceil(x) + torch.sign(x),
}


def _quad_and_float64(fn: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    def call(x: torch.Tensor) -> torch.Tensor:
        return fn(x).reshape(-1)

    program = torch_mp_evaluator(call, [torch.tensor(X[0])]).program  # type: ignore[attr-defined]
    q = quad_dtype()
    got = quad_graph_evaluator(program, q)(X.astype(q)).astype(np.float64)
    want = np.stack([call(torch.tensor(row)).detach().numpy() for row in X])
    return got, want


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_rule_agrees_with_torch_in_float64(name: str) -> None:
    X = np.stack([X6, -0.5 * X6[::-1], X6 + 0.25])
    got, want = _quad_and_float64(PROGRAMS[name], X)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_an_operator_without_a_quad_rule_is_named() -> None:
    program = torch_mp_evaluator(lambda x: torch.erf(x).reshape(-1), [torch.tensor(X6)]).program  # type: ignore[attr-defined]
    with pytest.raises(NoQuadRuleError, match="aten.erf"):
        quad_graph_evaluator(program, quad_dtype())


def test_the_loss_of_a_model_has_a_quad_reference_matching_the_closed_form() -> None:
    x = torch.tensor(X6, requires_grad=True)
    report = pg.check(mlp_loss, x, cache=False)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details.reference.method == "quad"
    true = np.array([float(v) for v in mlp_loss_grad_mp(W1, B1, W2, X6)])
    e = report.entries
    assert np.all(np.abs(e.reference - true) <= 4e-16 * np.abs(true))
    assert np.all(e.reference_error <= 1e-15 * np.max(np.abs(true)))


def _tanh_with_rule(scale: float) -> Any:
    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, v: torch.Tensor) -> torch.Tensor:
            y = torch.tanh(v)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (y,) = ctx.saved_tensors
            return g * (1 - y**2) * scale

    return Tanh.apply


@pytest.mark.parametrize("scale", [1.0, 1 + 1e-9])
def test_a_rule_wrong_by_1e9_is_caught_and_a_right_one_passes(scale: float) -> None:
    tanh = _tanh_with_rule(scale)

    def loss(x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(T_W2 @ tanh(T_W1 @ x + T_B1), 0)[3]

    report = pg.check(loss, torch.tensor(X6, requires_grad=True), cache=False)
    assert report.details.reference.method == "quad"
    if scale == 1.0:
        assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    else:
        assert report.verdict == pg.Verdict.MISMATCH and not report.ok, str(report)


def test_a_kink_at_the_point_goes_on_to_mp_and_is_nonsmooth() -> None:
    x = torch.tensor([0.0, 0.7, -0.4], dtype=torch.float64, requires_grad=True)
    report = pg.check(lambda v: (torch.relu(v) * torch.cos(v)).sum(), x, cache=False)
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok, str(report)
    assert report.details.reference.method == "quad"
    assert any("quad-precision differences did not settle 1 of 3" in n for n in report.notes)


def test_without_a_quad_rule_the_check_uses_mp_and_says_why() -> None:
    x = torch.tensor([0.3, -0.8, 1.1], dtype=torch.float64, requires_grad=True)
    report = pg.check(lambda v: (torch.erf(v) * v).sum(), x, cache=False)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details.reference.method == "mp"
    assert any("quad-precision reference is unavailable (no quad rule for aten.erf" in n
               for n in report.notes), report.notes  # fmt: skip


def test_the_quad_evaluator_is_built_once_per_captured_graph() -> None:
    from polygrad.backends.base import Supplied
    from polygrad.backends.torch import TorchBackend

    x = torch.tensor(X6)
    t1 = TorchBackend().make_target(mlp_loss, (x,), (0,), Supplied(), 64)
    t2 = TorchBackend().make_target(mlp_loss, (x,), (0,), Supplied(), 64)
    assert t1.quad_mode() and t2.quad_mode()
    assert t1.evaluate_quad is t2.evaluate_quad


def test_a_layer_normed_model_with_its_loss_object_runs_on_quad() -> None:
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 8), torch.nn.LayerNorm(8), torch.nn.SiLU(), torch.nn.Linear(8, 3)
    ).double()
    loss_fn = torch.nn.CrossEntropyLoss()
    labels = torch.tensor([0, 2])
    x = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    report = pg.check(lambda v: loss_fn(model(v), labels), x, cache=False)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    assert report.details.reference.method == "quad"
    params = pg.check(lambda m: loss_fn(m(x.detach()), labels), model, wrt="parameters",
                      cache=False)  # fmt: skip
    assert params.verdict == pg.Verdict.PASS and params.ok, str(params)
