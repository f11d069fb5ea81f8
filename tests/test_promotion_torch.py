"""Float64 references for PyTorch code as people write it.

The float64 program is the user's own function with every operator promoted
(:mod:`polygrad.backends._torch_promote`), so a model, its parameters and
buffers, tensors and Python constants reach it in float64 however the function
reaches them: as arguments, closed over, as globals, through ``self`` or
``functools.partial``, inside a ``torch.compile``-decorated function.

* USERS.md case 2 (a float32 CNN closed over by a lambda, real digit image):
  float64 reference, NONSMOOTH/PASS, the same entries as the model passed as
  an argument;
* closures over float32 layers and lambdas baking float32 weights into
  functional calls: float64 reference and PASS; a 1e-3 error planted in a
  custom ``autograd.Function`` inside: MISMATCH;
* dtype requests inside the user's code (``.float()``, ``dtype=``...) and
  Python constants are computed in float64 (closed forms to 1e-15);
* the user's modules, tensors and torch's default dtype are unchanged, and a
  function that changes a closed-over tensor in place (BatchNorm in training
  mode) is refused, with the tensor named and its values restored;
* where promotion is impossible (a custom operator without a float64 kernel,
  or one that computes in float32), the note names the operator and the
  working-dtype reference does not turn kinks into MISMATCH.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import torch_case2_cnn, torch_digit, torch_planted_tanh
from torch import nn

import polygrad as pg
from polygrad.backends.base import Supplied
from polygrad.backends.torch import TorchBackend
from polygrad.report import SEVERITY

BE = TorchBackend()
MISMATCH = SEVERITY[pg.Verdict.MISMATCH]


def target(f, *args, argnums=(0,)):
    return BE.make_target(f, args, argnums, Supplied(), 64)


digit = torch_digit
case2_cnn = torch_case2_cnn


def snapshot(module: nn.Module) -> dict:
    """Everything a check must leave alone: state (values and dtypes) and training flags."""
    return {
        "state": {k: v.detach().clone() for k, v in module.state_dict().items()},
        "dtypes": [p.dtype for p in module.parameters()],
        "training": [m.training for m in module.modules()],
        "default_dtype": torch.get_default_dtype(),
    }


def assert_unchanged(module: nn.Module, before: dict) -> None:
    after = snapshot(module)
    assert after["dtypes"] == before["dtypes"]
    assert after["training"] == before["training"]
    assert after["default_dtype"] == before["default_dtype"] == torch.float32
    assert after["state"].keys() == before["state"].keys()
    for k, v in before["state"].items():
        assert after["state"][k].dtype == v.dtype and torch.equal(after["state"][k], v), k


def assert_float64_pass(report: pg.Report, verdicts=(pg.Verdict.PASS,)) -> None:
    assert report.details["reference"]["method"] == "float64", report.notes
    assert report.verdict in verdicts and report.ok, (report.verdict, report.counts())
    assert not np.any(report.entries.status == MISMATCH)


# ------------------------------------------------------------- USERS.md case 2


def test_case2_cnn_closed_over_matches_the_argument_form():
    side = 28
    model = case2_cnn(side)
    img, y = digit(side)
    before = snapshot(model)
    closure = pg.check(
        lambda x: F.cross_entropy(model(x.reshape(1, 1, side, side)), y),
        img.reshape(-1),
        strategy="full",
    )
    as_argument = pg.check(
        lambda m, x: F.cross_entropy(m(x), y), model, img, argnums=1, strategy="full"
    )
    for report in (closure, as_argument):
        assert_float64_pass(report, (pg.Verdict.PASS, pg.Verdict.NONSMOOTH))
        assert report.details["inputs"] == side * side
    np.testing.assert_array_equal(closure.entries.status, as_argument.entries.status)
    assert closure.notes == []
    assert_unchanged(model, before)


CNN = case2_cnn(14)


def test_case2_cnn_with_a_loss_object_and_a_global_model():
    img, y = digit(14)
    loss = nn.CrossEntropyLoss()

    def loss_of_image(x):  # CNN is a global, loss and y are closed over
        return loss(CNN(x), y)

    report = pg.check(loss_of_image, img, strategy="full")
    assert_float64_pass(report, (pg.Verdict.PASS, pg.Verdict.NONSMOOTH))
    reference = pg.check(lambda m, x: F.cross_entropy(m(x), y), CNN, img, argnums=1)
    np.testing.assert_array_equal(report.entries.status, reference.entries.status)


# ------------------------------------------------- closures over float32 layers


def seeded(module: nn.Module, seed: int = 0) -> nn.Module:
    """``module`` with its floating parameters and buffers moved off their defaults."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            if t.is_floating_point():
                t.add_(0.3 * torch.randn(t.shape, generator=g))
        for name, buf in module.named_buffers():
            if name.endswith("running_var"):
                buf.abs_().add_(0.5)
    return module.eval()


def layer_cases() -> dict:
    """name -> (body(x), x): float32 layers and weights closed over by ``body``."""
    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=g)

    torch.manual_seed(0)
    ln = seeded(nn.LayerNorm(6))
    bn = seeded(nn.BatchNorm2d(3))
    convt = seeded(nn.ConvTranspose2d(2, 3, 3, stride=2))
    mha = seeded(nn.MultiheadAttention(8, 2, batch_first=True))
    w, b, mean, var = rand(6), rand(6), rand(3), rand(3).abs() + 0.5
    wt = rand(2, 3, 3, 3)
    k, v = rand(1, 2, 5, 4), rand(1, 2, 5, 4)
    m1, m2, c = rand(3, 4, 5), rand(3, 5, 2), rand(4, 2)
    return {
        "LayerNorm": (lambda x: ln(x), rand(2, 6)),
        "BatchNorm2d": (lambda x: bn(x), rand(1, 3, 2, 2)),
        "ConvTranspose2d": (lambda x: convt(x), rand(1, 2, 3, 3)),
        "MultiheadAttention": (lambda x: mha(x, x, x, need_weights=False)[0], rand(1, 3, 8)),
        "F.layer_norm": (lambda x: F.layer_norm(x, (6,), w, b), rand(2, 6)),
        "F.batch_norm": (lambda x: F.batch_norm(x, mean, var, w[:3], b[:3]), rand(2, 3)),
        "F.conv_transpose2d": (lambda x: F.conv_transpose2d(x, wt, stride=2), rand(1, 2, 3, 3)),
        "F.scaled_dot_product_attention": (
            lambda x: F.scaled_dot_product_attention(x, k, v),
            rand(1, 2, 3, 4),
        ),
        "torch.addbmm": (lambda x: torch.addbmm(c, m1 * x, m2), rand(3, 4, 5)),
        "gelu(layer_norm)": (lambda x: F.gelu(ln(x)), rand(2, 6)),
    }


def square_op(relative_error: float) -> type:
    """``x**2`` as an ``autograd.Function`` whose backward is off by ``relative_error``."""

    class Square(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g * (1 + relative_error)

    return Square


LAYERS = layer_cases()


@pytest.mark.parametrize("name", list(LAYERS))
def test_closures_over_float32_layers_get_a_float64_reference(name):
    body, x = LAYERS[name]
    square = square_op(0.0)
    report = pg.check(lambda x: square.apply(body(x)).sum(), x)
    assert_float64_pass(report)
    assert report.notes == []


@pytest.mark.parametrize("name", list(LAYERS))
def test_a_planted_error_inside_a_promoted_closure_is_a_mismatch(name):
    body, x = LAYERS[name]
    square = square_op(1e-3)
    report = pg.check(lambda x: square.apply(body(x)).sum(), x)
    assert report.details["reference"]["method"] == "float64"
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok


def test_gelu_of_a_closed_over_layer_norm_squared():
    body, x = LAYERS["gelu(layer_norm)"]
    report = pg.check(lambda x: (body(x) ** 2).sum(), x)
    assert_float64_pass(report)


# ---------------------------------------------------- however the model is reached


class Classifier:
    """Reads its model from ``self``, as training code does."""

    def __init__(self, model: nn.Module, label: torch.Tensor) -> None:
        self.model = model
        self.label = label

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.model(x), self.label)


def small_net() -> nn.Module:
    torch.manual_seed(3)
    return seeded(nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3)))


NET = small_net()
LABEL = torch.tensor([2, 0])


def global_loss(x):
    return F.cross_entropy(NET(x), LABEL)


def loss_of(model, label, x):
    return F.cross_entropy(model(x), label)


@torch.compile
def compiled_loss(x):
    return F.cross_entropy(NET(x), LABEL)


def test_every_way_of_reaching_the_model_gets_the_same_float64_reference():
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(4))
    before = snapshot(NET)
    ways = {
        "argument": (lambda m, x: loss_of(m, LABEL, x), (NET, x), 1),
        "closure": (lambda x: F.cross_entropy(NET(x), LABEL), (x,), 0),
        "global": (global_loss, (x,), 0),
        "method": (Classifier(NET, LABEL).loss, (x,), 0),
        "partial": (functools.partial(loss_of, NET, LABEL), (x,), 0),
        "torch.compile": (compiled_loss, (x,), 0),
    }
    reports = {k: pg.check(f, *args, argnums=i) for k, (f, args, i) in ways.items()}
    for name, report in reports.items():
        assert_float64_pass(report)
        assert report.counts() == {"PASS": 12}, name
    ref = [
        target(f, *args, argnums=(i,)).evaluate64(x.double().numpy().reshape(1, -1))
        for f, args, i in ways.values()
    ]
    for r in ref[1:]:
        np.testing.assert_allclose(r, ref[0], rtol=1e-15)
    assert_unchanged(NET, before)


# ------------------------------------------- dtype requests and Python constants


def test_dtype_requests_and_python_constants_are_computed_in_float64():
    """Each term rounds in float32 (or float16) unless the request itself is promoted."""
    w = torch.tensor([0.1, 0.2, 0.3])  # float32, closed over

    def f(x):
        terms = [
            x.float() * torch.tensor(0.1),
            x.half().to(torch.float32) * 0.3,
            x.to(torch.float32) * w,
            x.type(torch.float32) + torch.full((3,), 1 / 3),
            torch.softmax(x, 0, dtype=torch.float32),
            torch.zeros(3, dtype=torch.float32) + x.bfloat16() / 7,
            torch.arange(3, dtype=torch.float32) * 0.1 * x.type("torch.FloatTensor"),
            x.type(torch.FloatTensor) / 3,
        ]
        return torch.stack(terms).sum(0, dtype=torch.float16)

    x = np.array([0.7, -1.3, 0.45])
    w64 = np.array([0.1, 0.2, 0.3], dtype=np.float32).astype(np.float64)
    soft = np.exp(x) / np.exp(x).sum()
    want = x * 0.1 + x * 0.3 + x * w64 + x + 1 / 3 + soft + x / 7 + np.arange(3) * 0.1 * x + x / 3
    t = target(f, torch.tensor(x, dtype=torch.float32))
    # x.bfloat16() rounds the input itself to bfloat16: the least precise value computed
    assert t.working_dtype == "bfloat16"
    np.testing.assert_allclose(t.evaluate64(x[None])[0], want, rtol=1e-15)
    assert len(t.notes) == 1 and "computes in bfloat16 inside" in t.notes[0]
    assert w.dtype == torch.float32
    assert torch.get_default_dtype() == torch.float32


# ---------------------------------------- transforms and custom backward passes


class ScaledSin(torch.autograd.Function):
    """``sin(x) * c`` with a float32 constant closed over in both passes (no vmap rule)."""

    c = torch.tensor(0.1)

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x) * ScaledSin.c

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x) * ScaledSin.c


def test_vmap_vjp_jvp_and_python_backward_run_promoted():
    """VJPs (vmapped and row by row through a Python backward) and JVPs of the float64
    program equal the float64 closed form: the closed-over float32 matrix and constants
    enter exactly, Python scalars are not rounded."""
    g = torch.Generator().manual_seed(5)
    W = torch.randn(3, 4, generator=g)
    W64, c64 = W.double().numpy(), float(np.float32(0.1))
    x = torch.randn(4, generator=g)
    x64 = x.double().numpy()
    t_vmap = target(lambda x: torch.sin(W @ x) * 0.1, x)
    t_rows = target(lambda x: ScaledSin.apply(W @ x), x)
    jac_vmap = 0.1 * np.cos(W64 @ x64)[:, None] * W64
    jac_rows = c64 * np.cos(W64 @ x64)[:, None] * W64
    U = np.random.default_rng(0).standard_normal((20, 3))
    V = np.random.default_rng(1).standard_normal((20, 4))
    for t, jac in ((t_vmap, jac_vmap), (t_rows, jac_rows)):
        np.testing.assert_allclose(t.vjp64(U), U @ jac, rtol=1e-13, atol=1e-15)
    assert t_vmap.forward_mode()
    np.testing.assert_allclose(t_vmap.jvp64(V), V @ jac_vmap.T, rtol=1e-13, atol=1e-15)
    assert not any("batch the function" in n for n in t_vmap.notes)


# -------------------------------------------------- where promotion is impossible


@torch.library.custom_op("polygrad_test::relu_float32_only", mutates_args=())
def relu_float32_only(x: torch.Tensor) -> torch.Tensor:
    """A custom kernel that exists only for float32."""
    if x.dtype != torch.float32:
        raise NotImplementedError(f"relu_float32_only has no {x.dtype} kernel")
    return x.clamp_min(0)


@torch.library.custom_op("polygrad_test::tanh_in_float32", mutates_args=())
def tanh_in_float32(x: torch.Tensor) -> torch.Tensor:
    """A custom kernel that computes in float32 whatever its input."""
    return torch.tanh(x.float())


@relu_float32_only.register_fake
def _(x):
    return torch.empty_like(x)


@tanh_in_float32.register_fake
def _(x):
    return torch.empty_like(x, dtype=torch.float32)


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _relu_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * (x > 0)


def _tanh_backward(ctx, g):
    (x,) = ctx.saved_tensors
    return (g * (1 - torch.tanh(x) ** 2)).to(x.dtype)


relu_float32_only.register_autograd(_relu_backward, setup_context=_save_input)
tanh_in_float32.register_autograd(_tanh_backward, setup_context=_save_input)


def test_an_operator_without_a_float64_kernel_is_named_and_kinks_are_not_mismatches():
    """relu through a float32-only kernel at points with exact zeros (kinks): the note
    names the kernel, the reference is float32, and no entry is a MISMATCH."""
    w = torch.tensor([0.8, -1.1, 0.5, 1.7, -0.4, 0.9])
    x = torch.tensor([0.0, 0.0, 0.5, -0.3, 0.0, 1.2])
    report = pg.check(lambda x: (relu_float32_only(x) * w).sum() + 0.25 * (x**2).sum(), x)
    assert report.details["reference"]["method"] != "float64"
    assert any("polygrad_test::relu_float32_only" in n for n in report.notes), report.notes
    assert not any("argument" in n for n in report.notes)
    assert not np.any(report.entries.status == MISMATCH)
    at_kink = report.entries.status[x.numpy() == 0]
    assert np.all(at_kink == SEVERITY[pg.Verdict.NONSMOOTH])


@pytest.mark.xfail(
    strict=True,
    reason="known limit of the working-dtype reference: beside kinks, the smooth entries of "
    "this float32-only relu are INCONCLUSIVE (the kinks inflate the noise estimate), so "
    "report.ok is False on a correct gradient",
)
def test_smooth_entries_beside_kinks_pass_with_a_working_dtype_reference():
    w = torch.tensor([0.8, -1.1, 0.5, 1.7, -0.4, 0.9])
    x = torch.tensor([0.0, 0.0, 0.5, -0.3, 0.0, 1.2])
    report = pg.check(lambda x: (relu_float32_only(x) * w).sum() + 0.25 * (x**2).sum(), x)
    smooth = report.entries.status[x.numpy() != 0]
    assert np.all(smooth == SEVERITY[pg.Verdict.PASS])
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok


def test_an_operator_that_computes_in_float32_is_named():
    x = torch.tensor([0.3, -0.7, 1.1])
    t = target(lambda x: tanh_in_float32(x * 2.0).sum() + x.sum(), x)
    assert t.evaluate64 is None
    assert any("polygrad_test::tanh_in_float32 returned a lower precision" in n for n in t.notes), (
        t.notes
    )
    report = pg.check(lambda x: tanh_in_float32(x * 2.0).sum() + x.sum(), x)
    assert report.verdict == pg.Verdict.PASS and report.ok


# ------------------------------------------------------------- side effects


def test_a_closed_over_batchnorm_in_training_mode_is_checked_and_restored():
    """Its running statistics are written at every evaluation but not read in training
    mode: the check goes on through the batch statistics, names the buffer and the
    operator in a note, and puts the values back after every evaluation."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).train()
    before = snapshot(net)
    report = pg.check(lambda x: net(x).pow(3).sum(), torch.randn(3, 4))
    assert_float64_pass(report)
    assert any("'1.running_mean'" in n and "batch_norm" in n for n in report.notes)
    assert_unchanged(net, before)
    net.eval()
    report = pg.check(lambda x: net(x).pow(3).sum(), torch.randn(3, 4))
    assert_float64_pass(report)
    assert_unchanged(net, {**before, "training": [False, False, False]})


def test_a_closed_over_tensor_updated_in_place_is_refused_and_restored():
    total, count = torch.zeros(3), torch.zeros(2)

    def f(x):
        count.add_(1)
        total[:2] += x[:2].detach()  # through a view
        return (x**2).sum() + total.sum()  # reads back what it wrote

    with pytest.raises(
        pg.InputMutationError, match=r"float32 tensor of shape \(2,\).*add_\) \(and 1 more\)"
    ) as info:
        pg.check(f, torch.tensor([0.5, -1.0, 2.0]))
    assert torch.equal(total, torch.zeros(3)) and torch.equal(count, torch.zeros(2))
    # not a module's statistics: no advice to call model.eval(), which would not help
    assert "model.eval()" not in str(info.value) and "global" in str(info.value)

    # written, not read back: checked, with the tensors put back after every evaluation
    def g(x):
        count.add_(1)
        total[:2] += x[:2].detach()
        return (x**2).sum()

    report = pg.check(g, torch.tensor([0.5, -1.0, 2.0]))
    assert report.verdict is pg.Verdict.PASS and report.ok
    assert any("float32 tensor of shape (2,)" in n and "put back" in n for n in report.notes)
    assert torch.equal(total, torch.zeros(3)) and torch.equal(count, torch.zeros(2))


def test_a_float32_reference_across_cnn_kinks_is_never_a_mismatch():
    """What a function whose promotion is blocked gets: the same CNN judged with the
    working-dtype reference must be NONSMOOTH or INCONCLUSIVE, never MISMATCH."""
    model = case2_cnn(14)
    img, y = digit(14)
    report = pg.check(
        lambda x: F.cross_entropy(model(x), y), img, reference="working", strategy="full"
    )
    assert report.details["reference"]["method"] == "working"
    assert not np.any(report.entries.status == MISMATCH), report.counts()


# ---- low-precision working dtypes (the same square rule) ----------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_5_percent_rule_error_is_a_mismatch_in_every_low_precision_dtype(dtype):
    """bfloat16 has no NumPy dtype: the round-off allowance is skipped, not a crash."""
    x = torch.tensor([0.5, 1.0, 1.5, 2.0], dtype=dtype)
    bad = pg.check(lambda x: square_op(0.05).apply(x).sum(), x)
    assert bad.verdict is pg.Verdict.MISMATCH and not bad.ok
    good = pg.check(lambda x: square_op(0.0).apply(x).sum(), x)
    assert good.verdict is pg.Verdict.PASS and good.ok


def test_a_rule_error_seen_only_in_float64_is_quoted_against_the_float64_tolerance():
    """float16: the 5% error hides in the working tolerance; the first line quotes the test
    it failed (the float64 rule against its own tolerance), not a ratio below 1."""
    x = torch.tensor([0.3, 0.7, 1.3, 1.9], dtype=torch.float16)
    report = pg.check(lambda x: square_op(0.05).apply(x).sum(), x)
    assert report.verdict is pg.Verdict.MISMATCH
    first = str(report).splitlines()[0]
    e = report.entries
    i = int(e.worst(1)[0])
    assert e.difference[i] <= e.tolerance[i]  # hidden in the float16 tolerance
    off64 = abs(e.autodiff64[i] - e.reference[i])
    # the rule's float64 value is 2x * 1.05 against the reference 2x
    assert off64 == pytest.approx(0.05 * 2 * float(x[i]), rel=1e-3)
    assert "float64 evaluation of the rule" in first
    assert f"{off64 / e.tolerance64[i]:.2g} times" in first


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_recurrent_layers_closed_over_get_a_float64_reference(cell: str) -> None:
    """nn.GRU / nn.LSTM compare their input's dtype with their weights' before any
    operation; inside the float64 program both read as float64, so the reference is
    float64 (it was float32 differences, with a note that the float64 run failed)."""
    import torch

    torch.manual_seed(0)
    layer = getattr(torch.nn, cell)(3, 4, batch_first=True)
    xs = torch.randn(2, 4, 3)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    report = pg.check(lambda x: layer(x)[0].pow(2).mean(), xs)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    assert report.details["reference"]["method"] == "float64"
    params = pg.check(lambda m, x: m(x)[0].pow(2).mean(), layer, xs, wrt="parameters")
    assert params.verdict is pg.Verdict.PASS and params.ok, params
    assert params.details["reference"]["method"] == "float64"
    assert all(v.dtype == torch.float32 for v in layer.state_dict().values())
    assert all(torch.equal(before[k], v) for k, v in layer.state_dict().items())


@pytest.mark.parametrize("transposed", [True, False])
def test_custom_backward_over_a_closed_over_float32_constant(transposed: bool) -> None:
    """A custom rule whose backward uses a closed-over float32 matrix: the float64
    evaluation of that rule mixes dtypes and fails (torch runs a custom backward
    outside the promoting mode); the check judges the rule in float32, says so, and
    still tells the right rule (A^T ct) from the transposed one (A ct)."""
    a = torch.tensor(np.random.default_rng(11).standard_normal((6, 6)), dtype=torch.float32)

    class MatVec(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return a @ x

        @staticmethod
        def backward(ctx, ct):
            return (a.T if transposed else a) @ ct

    x = torch.tensor(np.random.default_rng(1).standard_normal(6), dtype=torch.float32)
    report = pg.check(MatVec.apply, x)
    if transposed:
        assert report.verdict is pg.Verdict.PASS and report.ok, report
    else:
        assert report.verdict is pg.Verdict.MISMATCH and not report.ok, report
    assert any("float64 evaluation of the rule failed" in n for n in report.details["notes"])


# -- float64 inputs that the function computes with in float32 --------------------------------


def _float32_inside(act):
    """A float32 layer closed over, fed float64 input cast down, its output cast back."""
    torch.manual_seed(0)
    layer = nn.Linear(5, 4)
    return lambda x: act(layer(x.float())).double()


def test_float64_input_computed_in_float32_is_judged_at_float32():
    x = torch.tensor(np.random.default_rng(3).normal(size=(2, 5)))
    report = pg.check(_float32_inside(torch.tanh), x)
    assert report.verdict == pg.Verdict.PASS and report.ok, report
    assert report.details["working_dtype"] == "float32"
    assert any("computes in float32 inside (first at Tensor.float)" in n for n in report.notes)
    # the reference is the float64 program: .float() promoted
    assert report.details["reference"]["method"] in ("float64", "mp"), report.notes


def test_float64_input_computed_in_float32_still_catches_a_wrong_rule():
    x = torch.tensor(np.random.default_rng(3).normal(size=(2, 5)))
    report = pg.check(_float32_inside(torch_planted_tanh(1e-3).apply), x)
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok, report


def test_float32_constant_does_not_narrow_a_float64_check():
    # torch.tensor(0.1) is float32, but nothing computed from x is: float64 stays
    x = torch.tensor(np.random.default_rng(4).normal(size=6))
    report = pg.check(lambda v: (v * torch.tensor(0.1)).sin().sum(), x)
    assert report.details["working_dtype"] == "float64"
    assert report.verdict == pg.Verdict.PASS and report.ok, report


@pytest.mark.parametrize("layer", ["LayerNorm", "RMSNorm"])
def test_a_layer_built_inside_f_is_the_functions_own(layer):
    """f builds its layer on each call (nn.LayerNorm(8)(x)): the layer initialises its new
    parameters in place (fill_), which is neither a change of the user's tensors nor, under
    float64 promotion, a write to a widened copy. PASS, the reference on torch's own float64
    gradient of the same function. A counter from outside that f writes in place but never
    reads back is checked through what f computes and put back after every evaluation
    (as training-mode running statistics are); one whose value reaches the output is
    still refused."""
    x = torch.linspace(-2.0, 1.5, 8)

    def f(x):
        return (getattr(nn, layer)(8)(x) ** 3).sum()

    x64 = x.double().requires_grad_()
    (want,) = torch.autograd.grad((getattr(nn, layer)(8).double()(x64) ** 3).sum(), x64)
    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    scale = float(want.abs().max())
    np.testing.assert_allclose(report.entries.reference, want.numpy(), atol=1e-7 * scale)
    counter = torch.zeros(())

    def counting(x):
        counter.add_(1.0)
        return (getattr(nn, layer)(8)(x) ** 3).sum()

    counted = pg.check(counting, x)
    assert counted.verdict is pg.Verdict.PASS and counted.ok, counted
    assert counter.item() == 0.0

    def read_back(x):
        counter.add_(1.0)
        return (getattr(nn, layer)(8)(x) ** 3).sum() * counter

    with pytest.raises(pg.errors.InputMutationError):
        pg.check(read_back, x)
    assert counter.item() == 0.0


def test_an_accumulator_made_inside_f_is_promoted():
    """acc = torch.zeros(()); acc += term: the augmented assignment rebinds acc to the
    float64 sum, so f computes in float64 for the reference (PASS, no narrower dtype
    named)."""
    w = torch.tensor([0.5, -1.0, 2.0])
    x = torch.tensor([0.3, 0.9, -0.4])

    def f(x):
        acc = torch.zeros(())
        for i in range(3):
            acc += w[i] * torch.sin(x[i])
        return acc

    report = pg.check(f, x)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    want = w.double() * torch.cos(x.double())
    np.testing.assert_allclose(report.entries.reference, want.numpy(), rtol=1e-8)
    assert report.details["reference"]["method"] in ("float64", "mp")


def _drawn(seed: int, dtype: torch.dtype, kind: str) -> torch.Tensor:
    """The draw each function below makes, in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    if kind == "rand":
        return torch.rand(8, generator=g, dtype=dtype) * 0.9 + 0.1
    return torch.bernoulli(torch.full((8,), 0.5, dtype=dtype), generator=g)


class _ScaledExp(torch.autograd.Function):
    """exp with a rule 1e-3 too large."""

    @staticmethod
    def forward(u):
        return torch.exp(u)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out * 1.001


@pytest.mark.parametrize("kind", ["rand", "bernoulli"])
def test_random_draws_in_the_inputs_dtype_are_drawn_so_for_the_reference(kind):
    """A generator draws other numbers in float64 than in float32 (torch.rand, and a
    bernoulli mask on probabilities of x.dtype): the float64 run draws in x's dtype, as
    f does, and widens. PASS on the closed form with f's own float32 draw; a rule 1e-3
    off is MISMATCH."""
    x = torch.linspace(-1.0, 1.2, 8)

    def make(exp):
        def f(x):
            g = torch.Generator().manual_seed(5)
            if kind == "rand":
                u = torch.rand(x.shape, generator=g, dtype=x.dtype) * 0.9 + 0.1
            else:
                u = torch.bernoulli(torch.full(x.shape, 0.5, dtype=x.dtype), generator=g)
            return exp(x * u).sum()

        return f

    u = _drawn(5, torch.float32, kind).double()
    want = (u * torch.exp(x.double() * u)).numpy()
    assert not torch.equal(_drawn(5, torch.float64, kind), u)  # the draws differ
    report = pg.check(make(torch.exp), x)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    np.testing.assert_allclose(report.entries.reference, want, rtol=1e-6, atol=1e-9)
    assert any("draws random numbers" in n for n in report.notes)
    assert pg.check(make(_ScaledExp.apply), x).verdict is pg.Verdict.MISMATCH


def _linear_fn(factor: float, new_style: bool):
    """x @ w.T as a torch.autograd.Function (old style: ctx in forward; new style:
    setup_context), its input gradient times ``factor``."""

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w * factor, g.T @ x

    if new_style:

        class New(torch.autograd.Function):
            generate_vmap_rule = True

            @staticmethod
            def forward(x, w):
                return x @ w.T

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(*inputs)

        New.backward = staticmethod(backward)
        return New

    class Old(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w.T

    Old.backward = staticmethod(backward)
    return Old


@pytest.mark.parametrize("new_style", [False, True])
def test_a_function_given_a_closed_over_float32_weight_runs_its_rule_in_float64(new_style):
    """Fn.apply(x, W) with W a float32 tensor the loss closes over: apply's arguments are
    now cast to float64 in the float64 run, so the rule's backward (g @ w) is evaluated
    in float64 (it raised a dtype error there, and the rule was judged in float32 only).
    The right rule PASSes against the closed form; a 1e-3 plant is MISMATCH by its
    float64 evaluation; W is left as it was."""
    gen = torch.Generator().manual_seed(0)
    W, x = torch.randn(3, 4, generator=gen), torch.randn(2, 4, generator=gen)
    before = W.clone()
    right = _linear_fn(1.0, new_style)
    report = pg.check(lambda v: torch.tanh(right.apply(v, W)).sum(), x)
    assert report.verdict is pg.Verdict.PASS and report.ok, report
    assert not any("evaluation of the rule failed" in n for n in report.notes)
    W64, x64 = W.double(), x.double()
    want = (1 - torch.tanh(x64 @ W64.T) ** 2) @ W64
    np.testing.assert_allclose(report.entries.reference, want.numpy().ravel(), rtol=1e-6)
    wrong = _linear_fn(1 + 1e-3, new_style)
    planted = pg.check(lambda v: torch.tanh(wrong.apply(v, W)).sum(), x)
    assert planted.verdict is pg.Verdict.MISMATCH and not planted.ok
    assert np.all(np.isfinite(planted.entries.autodiff64))  # judged by its float64 rule
    assert W.dtype == torch.float32 and torch.equal(W, before)
