"""Tests of the PyTorch backend: its Target callables, then end-to-end checks."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import torch_case2_cnn, torch_digit, torch_planted_tanh
from torch import nn

import polygrad as pg
from polygrad.backends import get_backend
from polygrad.backends.base import Supplied
from polygrad.backends.torch import TorchBackend
from polygrad.errors import (
    InputMutationError,
    InputTypeError,
    InputValueError,
    MissingBackendError,
    NondeterministicFunctionError,
)
from polygrad.report import SEVERITY

BE = TorchBackend()


def target(f, *args, argnums=(0,), batch_size=64, wrt="inputs"):
    return BE.make_target(f, args, argnums, Supplied(), batch_size, wrt=wrt)


def two_outputs(x):
    """f(x) = [sum(sin x), prod(x**2)]; J = [[cos x], [2 prod(x**2) / x]]."""
    return torch.stack([torch.sin(x).sum(), (x**2).prod()])


def jacobian_two_outputs(x: np.ndarray) -> np.ndarray:
    return np.stack([np.cos(x), 2 * np.prod(x**2) / x])


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ----------------------------------------------------------------- the backend


def test_import_polygrad_does_not_import_torch():
    code = (
        "import sys, polygrad, polygrad.backends, polygrad.backends.torch as t\n"
        "assert not t.TorchBackend.owns(1.0)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_flags_owns_to_numpy_version():
    assert (BE.name, BE.module, BE.extra) == ("torch", "torch", "torch")
    assert BE.supports_autodiff and BE.supports_vmap and BE.supports_float64
    assert BE.owns(torch.zeros(2)) and BE.owns(nn.Linear(1, 1))
    assert not BE.owns(np.zeros(2))
    x = torch.tensor([1.5, -2.0], requires_grad=True)
    out = BE.to_numpy(x)
    assert out.dtype == np.float32 and out.tolist() == [1.5, -2.0]
    assert BE.to_numpy(torch.tensor([1.5], dtype=torch.bfloat16)).dtype.name == "bfloat16"
    assert BE.version() == torch.__version__


def test_missing_torch_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(MissingBackendError, match=r"pip install 'polygrad-check\[torch\]'"):
        get_backend("torch")


# ------------------------------------------------------------ target callables


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_evaluate_vjp_jvp_match_hand_computed(dtype, rng):
    x = torch.tensor([0.5, -1.0, 2.0], dtype=dtype)
    t = target(two_outputs, x)
    npdt = np.float32 if dtype == torch.float32 else np.float64
    assert t.working_dtype == str(dtype).removeprefix("torch.")
    assert t.eps == np.finfo(npdt).eps
    assert [leaf.name for leaf in t.input_layout.leaves] == ["x"]
    assert t.output_layout.leaves[0].shape == (2,)
    np.testing.assert_array_equal(t.x0, [0.5, -1.0, 2.0])
    assert t.mp_mode() and t.mp_unavailable_reason is None
    y_mp = t.evaluate_mp(t.x0, np.zeros_like(t.x0), 30)
    np.testing.assert_allclose([float(v) for v in y_mp], t.evaluate64(t.x0[None])[0], rtol=1e-15)

    X = rng.standard_normal((5, 3))
    Xw = X.astype(npdt)
    want = np.stack([[np.sin(r).sum(dtype=npdt), np.prod(r**2, dtype=npdt)] for r in Xw])
    np.testing.assert_allclose(t.evaluate(X), want, rtol=4 * np.finfo(npdt).eps)
    J = jacobian_two_outputs(t.x0)
    U, V = rng.standard_normal((4, 2)), rng.standard_normal((6, 3))
    tol = 10 * np.finfo(npdt).eps
    np.testing.assert_allclose(t.vjp(U), U @ J, rtol=tol, atol=tol)
    np.testing.assert_allclose(t.jvp(V), V @ J.T, rtol=tol, atol=tol)
    np.testing.assert_allclose(t.vjp64(U), U @ J, rtol=1e-14)
    np.testing.assert_allclose(t.jvp64(V), V @ J.T, rtol=1e-14)
    # the float64 evaluation is not rounded to float32
    np.testing.assert_allclose(t.evaluate64(X)[:, 0], np.sin(X).sum(axis=1), rtol=1e-15)
    assert t.notes == []


def test_batched_equals_unbatched_and_chunking(rng):
    x = torch.linspace(-1, 1, 7)
    f = lambda x: torch.tanh(x[:, None] * x[None, :]).sum(0)  # noqa: E731
    t0 = target(f, x, batch_size=64)
    t1 = target(f, x, batch_size=3)
    X = rng.standard_normal((10, 7))
    direct = np.stack([f(torch.tensor(r, dtype=torch.float32)).double().numpy() for r in X])
    np.testing.assert_allclose(t0.evaluate(X), direct, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(t0.evaluate(X), t1.evaluate(X))
    U = rng.standard_normal((8, 7))
    np.testing.assert_allclose(t0.vjp(U), t1.vjp(U), rtol=1e-6)
    assert t0.evaluate(X).shape == (10, 7) and t0.vjp(U).shape == (8, 7)


def test_pytree_arguments_and_several_argnums():
    def f(p, x, scale):
        return (p["w"] * x).sum() * scale + p["b"]

    p = {
        "w": torch.tensor([1.0, 2.0], dtype=torch.float64),
        "b": torch.tensor(0.5, dtype=torch.float64),
    }
    x = torch.tensor([3.0, -1.0], dtype=torch.float64)
    t = target(f, p, x, 2.0, argnums=(0, 1))
    # a dict's leaves in sorted key order, as JAX flattens it
    assert [leaf.name for leaf in t.input_layout.leaves] == ["p['b']", "p['w']", "x"]
    np.testing.assert_array_equal(t.x0, [0.5, 1, 2, 3, -1])
    # d/db = 1, d/dw = 2x, d/dx = 2w
    np.testing.assert_allclose(t.vjp(np.ones((1, 1))), [[1, 6, -2, 2, 4]])
    assert t.y0.tolist() == [2 * (3 - 2) + 0.5]


def test_data_dependent_control_flow_falls_back_to_rows(rng):
    def f(x):
        return x.sin() if x.sum() > 0 else x.cos()

    t = target(f, torch.tensor([0.3, 0.4], dtype=torch.float64))
    # a batch too large for plain calls tries vmap, which fails: rows, with a note
    X = np.repeat(np.array([[0.1, 0.2], [-1.0, -0.5]]), 20, axis=0)
    want = np.where(X.sum(axis=1, keepdims=True) > 0, np.sin(X), np.cos(X))
    np.testing.assert_allclose(t.evaluate(X), want)
    assert any("one point at a time" in n for n in t.notes)
    np.testing.assert_allclose(t.vjp(np.eye(2)), np.diag(np.cos([0.3, 0.4])))


def test_module_promotion_leaves_the_model_untouched(rng):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(3)
    t = target(model, x)
    X = rng.standard_normal((4, 3))
    ref = model.double()(torch.tensor(X)).detach().numpy()
    model.float()
    np.testing.assert_allclose(t.evaluate64(X), ref, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(t.evaluate(X), ref, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(t.evaluate(X), t.evaluate64(X))  # really float32 vs float64
    assert all(p.dtype == torch.float32 for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert t.notes == []


def test_closure_over_float32_is_promoted_like_arguments():
    """A closed-over float32 matrix reaches the float64 program in float64, exactly as
    when it is passed as an argument; the user's tensor stays float32."""
    torch.manual_seed(0)
    w = torch.randn(3, 3)
    x = torch.randn(3)
    w64 = w.double().numpy()
    for t in (
        target(lambda x: (w @ x).sum(), x),
        target(lambda x, w: (w @ x).sum(), x, w),
        target(lambda m, x: m(x).sum(), nn.Linear(3, 1), x, argnums=(1,)),
    ):
        assert t.evaluate64 is not None and t.vjp64 is not None and t.notes == []
    t = target(lambda x: (w @ x).sum(), x)
    np.testing.assert_allclose(t.vjp64(np.ones((1, 1)))[0], w64.sum(0), rtol=1e-15)
    X = np.random.default_rng(0).standard_normal((3, 3)) / 3
    np.testing.assert_allclose(t.evaluate64(X)[:, 0], (X @ w64.T).sum(1), rtol=1e-14)
    assert w.dtype == torch.float32


def test_parameters_layout_and_vjp():
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 2, 3)
            self.fc = nn.Linear(8, 1)

        def forward(self, x):
            return self.fc(torch.tanh(self.conv1(x)).flatten(1)).sum()

    net = Net()
    net.fc.bias.requires_grad_(False)
    x = torch.randn(1, 1, 4, 4)
    t = target(net, x, wrt="parameters")
    names = [leaf.name for leaf in t.input_layout.leaves]
    assert names == ["conv1.weight", "conv1.bias", "fc.weight"]
    assert t.input_layout.name_of(5) == "conv1.weight[0, 0, 1, 2]"
    assert t.n == 2 * 9 + 2 + 8
    net(x).backward()
    want = np.concatenate(
        [p.grad.double().numpy().ravel() for p in (net.conv1.weight, net.conv1.bias, net.fc.weight)]
    )
    np.testing.assert_allclose(t.vjp(np.ones((1, 1)))[0], want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t.vjp64(np.ones((1, 1)))[0], want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t.jvp(np.eye(t.n))[:, 0], want, rtol=1e-5, atol=1e-7)
    # perturbing the parameters does not change the model
    w0 = net.conv1.weight.clone()
    X = t.x0[None] + 0.1
    assert abs(t.evaluate(X)[0, 0] - t.y0[0]) > 1e-3
    assert torch.equal(net.conv1.weight, w0) and net.conv1.weight.dtype == torch.float32
    # the model passed as an argument, with a plain loss function
    t2 = target(lambda m, x: m(x) ** 2, net, x, wrt="parameters")
    assert [leaf.name for leaf in t2.input_layout.leaves] == names
    np.testing.assert_allclose(t2.vjp(np.ones((1, 1)))[0], 2 * t.y0[0] * want, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ bad input


def test_bad_inputs_raise_clear_errors():
    f = lambda x: x.sum()  # noqa: E731
    with pytest.raises(InputTypeError, match="integer"):
        target(f, torch.tensor([1, 2]))
    with pytest.raises(InputTypeError, match="bool"):
        target(f, torch.tensor([True]))
    with pytest.raises(InputValueError, match="NaN"):
        target(f, torch.tensor([1.0, float("nan")]))
    with pytest.raises(InputTypeError, match="wrt='parameters'"):
        target(lambda m: m.weight.sum(), nn.Linear(1, 1))
    with pytest.raises(InputTypeError, match="autograd"):
        BE.make_target(f, (torch.ones(2),), (0,), Supplied(grad=lambda x: x), 8)
    with pytest.raises(InputTypeError, match="nn.Module"):
        target(f, torch.ones(2), wrt="parameters")
    with pytest.raises(ValueError, match="wrt"):
        target(f, torch.ones(2), wrt="outputs")


def test_in_place_mutation_is_detected():
    def f(x):
        x.mul_(2)
        return x.sum()

    with pytest.raises(InputMutationError, match="in place"):
        target(f, torch.ones(3))


def test_dropout_in_train_mode_is_nondeterministic():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(50, 50), nn.Dropout(0.5), nn.Linear(50, 1))
    x = torch.randn(50)
    with pytest.raises(NondeterministicFunctionError, match=r"model\.eval\(\)"):
        target(model, x)
    model.eval()
    assert target(model, x).notes == []


# ------------------------------------------------------------ custom gradients


class SquareOld(torch.autograd.Function):
    """x**2 with a backward rule, old style (no setup_context, no jvp)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class SquareNew(torch.autograd.Function):
    """x**2 in the functorch style: setup_context, jvp, generated vmap rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 2 * x * t


def test_autograd_function_without_setup_context_falls_back():
    x = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64)
    t = target(SquareOld.apply, x)
    U = np.tile(np.eye(3), (14, 1))  # more rows than plain calls serve: vmap is tried
    np.testing.assert_allclose(t.vjp(U), np.tile(np.diag([1.0, -3.0, 4.0]), (14, 1)))
    np.testing.assert_allclose(t.evaluate(np.ones((40, 3))), np.ones((40, 3)))
    assert not t.forward_mode() and t.jvp64 is None
    assert any("JVP" in n and "not available" in n for n in t.notes)
    assert any("one point at a time" in n for n in t.notes)


def test_autograd_function_with_setup_context_is_batched():
    x = torch.tensor([0.5, -1.5, 2.0])
    t = target(SquareNew.apply, x)
    np.testing.assert_allclose(t.vjp(np.eye(3)), np.diag([1.0, -3.0, 4.0]))
    np.testing.assert_allclose(t.jvp(np.eye(3)), np.diag([1.0, -3.0, 4.0]))
    np.testing.assert_allclose(t.vjp64(np.eye(3)), np.diag([1.0, -3.0, 4.0]))
    assert t.notes == []


@pytest.mark.parametrize(("dtype", "eps"), [(torch.float16, 2.0**-10), (torch.bfloat16, 2.0**-7)])
def test_half_precision_working_dtypes(dtype, eps):
    x = torch.tensor([0.3, 1.1], dtype=dtype)
    t = target(lambda x: (x.sin() ** 2).sum(), x)
    assert t.working_dtype == str(dtype).removeprefix("torch.") and t.eps == eps
    x64 = t.x0
    exact = np.sum(np.sin(x64) ** 2)
    np.testing.assert_allclose(t.evaluate64(x64[None])[0, 0], exact, rtol=1e-15)
    assert abs(t.y0[0] - exact) <= 4 * eps * exact
    np.testing.assert_allclose(t.vjp64(np.ones((1, 1)))[0], np.sin(2 * x64), rtol=1e-15)


# ----------------------------------------------------------- second order


def test_gradient_function_is_differentiable_and_promotable():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 1), nn.Tanh())
    x = torch.randn(1, 3)
    g = BE.gradient_function(lambda m, x: m(x).sum(), (model, x), (1,))
    xr = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(model(xr).sum(), xr)
    torch.testing.assert_close(g(model, x), want)
    t = target(g, model, x, argnums=(1,))
    assert t.evaluate64 is not None and t.notes == []
    # Hessian of tanh(w.x + b): tanh''(z) w w^T
    w = model[0].weight.double().detach()
    z = (x.double() @ w.T + model[0].bias.double()).item()
    hess = (-2 * np.tanh(z) * (1 - np.tanh(z) ** 2)) * (w.T @ w).numpy()
    np.testing.assert_allclose(t.vjp64(np.eye(3)), hess, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(t.vjp(np.eye(3)), hess, rtol=1e-4, atol=1e-6)
    assert model[0].weight.dtype == torch.float32


# ------------------------------------------------------------------ end to end


def branch_op(bug: str, setup_context: bool) -> type[torch.autograd.Function]:
    """``where(x > 0, x² y, sin(x) y)`` with a backward rule that has ``bug``.

    bug: "none", "ignores_grad_output", "sign_on_one_branch", "drops_y", "relative_1e-3".
    """

    def forward_values(x, y):
        return torch.where(x > 0, x * x * y, torch.sin(x) * y)

    def backward_rule(ctx, g):
        x, y = ctx.saved_tensors
        dx = torch.where(x > 0, 2 * x * y, torch.cos(x) * y)
        dy = torch.where(x > 0, x * x, torch.sin(x))
        if bug == "sign_on_one_branch":
            dx = torch.where(x > 0, dx, -dx)
        if bug == "relative_1e-3":
            dx = dx * (1 + 1e-3)
        if bug == "ignores_grad_output":
            return dx, dy
        return g * dx, (None if bug == "drops_y" else g * dy)

    if setup_context:

        class New(torch.autograd.Function):
            generate_vmap_rule = True

            @staticmethod
            def forward(x, y):
                return forward_values(x, y)

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(*inputs)

            backward = staticmethod(backward_rule)

        return New

    class Old(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return forward_values(x, y)

        backward = staticmethod(backward_rule)

    return Old


BUGS = ["ignores_grad_output", "sign_on_one_branch", "drops_y", "relative_1e-3"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("setup_context", [False, True])
@pytest.mark.parametrize("bug", ["none", *BUGS])
def test_custom_autograd_function_rules(bug, setup_context, dtype):
    op = branch_op(bug, setup_context)
    x = torch.tensor([0.7, -1.3, 1.9], dtype=dtype)
    y = torch.tensor([1.1, 0.6, -0.8], dtype=dtype)
    report = pg.check(op.apply, x, y, argnums=(0, 1))
    if bug == "none":
        assert report.verdict == pg.Verdict.PASS and report.ok
    else:
        assert report.verdict == pg.Verdict.MISMATCH and not report.ok


def digit_cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The small MNIST-style CNN of USERS.md (seeded) and a real 28x28 digit in [0, 1]."""
    return (torch_case2_cnn(28), *torch_digit(28))


def cross_entropy(model, x, label):
    return F.cross_entropy(model(x), label)


def test_cnn_input_gradient_target_is_batched_and_exact():
    model, img, label = digit_cnn()
    model.eval()
    t = target(cross_entropy, model, img, label, argnums=(1,))
    assert t.n == 784 and t.m == 1 and t.notes == []
    xr = img.clone().requires_grad_()
    (g,) = torch.autograd.grad(cross_entropy(model, xr, label), xr)
    np.testing.assert_allclose(t.vjp(np.ones((1, 1)))[0], g.double().numpy().ravel(), rtol=1e-6)
    # the float64 evaluation runs on a float64 copy of the model
    X = t.x0[None] + np.random.default_rng(0).uniform(-0.01, 0.01, (3, 784))
    m64 = copy.deepcopy(model).double()
    want = [cross_entropy(m64, torch.tensor(r).reshape(1, 1, 28, 28), label).item() for r in X]
    np.testing.assert_allclose(t.evaluate64(X)[:, 0], want, rtol=1e-14)
    assert model[0].weight.dtype == torch.float32


def test_cnn_input_gradient_check():
    model, img, label = digit_cnn()
    model.eval()
    report = pg.check(cross_entropy, model, img, label, argnums=1, strategy="full")
    assert report.details["inputs"] == 784 and report.details["strategy"] == "full"
    assert not np.any(report.entries.status == SEVERITY[pg.Verdict.MISMATCH])
    assert report.verdict in (pg.Verdict.PASS, pg.Verdict.NONSMOOTH)
    assert report.ok
    model.train()
    with pytest.raises(NondeterministicFunctionError):
        pg.check(cross_entropy, model, img, label, argnums=1)


def test_check_parameters_and_second_order():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(2, 3)
    report = pg.check(lambda m, x: m(x).sum(), model, x, wrt="parameters")
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert report.details["inputs"] == 3 * 4 + 4 + 4 + 1
    assert report.details["input_names"][0] == "0.weight"
    assert report.details["reference"]["method"] == "float64"
    report = pg.check(lambda x: (x.sin() ** 2).sum(), x.double(), order=2)
    assert report.verdict == pg.Verdict.PASS and report.ok
    report = pg.check(lambda m, x: m(x).sum(), model, x, argnums=1, order=2)
    assert report.verdict == pg.Verdict.PASS and report.ok


def test_batchnorm_in_training_mode_is_checked_and_state_restored():
    """A check must not change the model: BatchNorm running statistics in training mode
    are written, not read; the check goes on and the buffers are put back."""
    torch.manual_seed(0)
    bn = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).train()
    state = {k: v.clone() for k, v in bn.state_dict().items()}
    report = pg.check(lambda m, x: m(x).pow(3).sum(), bn, torch.randn(3, 4), argnums=1)
    assert report.verdict == pg.Verdict.PASS and report.ok
    for k, v in bn.state_dict().items():
        assert torch.equal(v, state[k]), k
    bn.eval()
    report = pg.check(lambda m, x: m(x).pow(3).sum(), bn, torch.randn(3, 4), argnums=1)
    assert report.verdict == pg.Verdict.PASS


def test_cnn_on_a_flat_background_calls_ties_nonsmooth_not_mismatch():
    """A digit on an exactly-zero background: every background pixel sits at ties of
    the max-pools (and autodiff picks one branch). ECnoise reads those kinks as noise,
    so the shared noise of a large check must not come from them: no MISMATCH, the
    background NONSMOOTH, the digit PASS."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    img = np.pad(np.kron(digits.images[5] / 16.0, np.ones((3, 3))), 2)
    x = torch.tensor(img[None, None], dtype=torch.float32)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 5 * 5, 10),
    ).eval()
    label = torch.tensor([int(digits.target[5])])
    report = pg.check(lambda m, x: F.cross_entropy(m(x), label), model, x, argnums=1)
    assert report.ok and report.verdict == pg.Verdict.NONSMOOTH
    assert set(report.counts()) == {"NONSMOOTH", "PASS"}
    at_kink = report.entries.status == SEVERITY[pg.Verdict.NONSMOOTH]
    background = img.ravel() == 0
    assert np.mean(at_kink[background]) > 0.5 > np.mean(at_kink[~background])


def test_float64_reference_vouches_for_its_target_not_for_a_tinier_error_bar():
    """float32 var() at an offset of 1e4: the float64 reference is aimed at float32's
    epsilon and its error bars of 1e-14 are incidental (off by a few times), so the
    right float64 rule is not a MISMATCH. The float32 value loses digits to the rounding
    of the mean, which a move of a few ulps re-rounds just as much: PASS, with a note.
    log_softmax with large logits: no MISMATCH either."""
    x = torch.tensor(np.random.default_rng(2).normal(size=50) + 1e4, dtype=torch.float32)
    report = pg.check(lambda x: x.var(unbiased=False), x)
    assert report.verdict == pg.Verdict.PASS, report.counts()
    assert any("moved by up to 2 ulps" in n for n in report.details["notes"])
    logits = torch.tensor(
        [994.98236, 994.9911, 1004.1403, 1002.94135, 985.1522, 1013.1804, 1006.56683, 975.61316]
    )
    soft = pg.check(lambda x: torch.log_softmax(x, 0), logits)
    assert soft.verdict == pg.Verdict.PASS and soft.ok, soft.counts()


@pytest.mark.parametrize("seed", [1, 7, 15])
def test_float32_logsumexp_of_a_long_matmul_is_not_unstable(seed):
    """logsumexp(tanh(x) @ W), W 500 x 20, float32: the logits carry the round-off of
    500-term sums, which the gradient inherits (about 100 eps times its scale on some
    entries). Measured a few ulps away, that round-off is allowed: PASS, for seeds that
    used to give UNSTABLE."""
    rng = np.random.default_rng(seed)
    W = torch.tensor(rng.standard_normal((500, 20)), dtype=torch.float32)
    x = torch.tensor(rng.standard_normal(500), dtype=torch.float32)
    report = pg.check(lambda x, W: torch.logsumexp(torch.tanh(x) @ W, 0), x, W)
    assert report.verdict == pg.Verdict.PASS, report.counts()


@pytest.mark.parametrize(
    "rho, verdict", [(0.9999, pg.Verdict.PASS), (0.999999, pg.Verdict.INCONCLUSIVE)]
)
def test_cholesky_of_a_nearly_singular_matrix(rho, verdict):
    """A 2 x 2 correlation matrix 1e-4 (1e-6) from singular: every step of the first
    ladder makes it indefinite on one side, where torch raises. Those points are not
    finite (not a reason to give up vmap), and the ladder moves down until both sides
    exist: PASS where float64 steps can get inside (1e-4), INCONCLUSIVE where they cannot
    reach the target (1e-6); never NONFINITE or MISMATCH on the right gradient."""
    S = torch.tensor([[1.0, rho], [rho, 1.0]], dtype=torch.float64)
    report = pg.check(lambda S: torch.linalg.cholesky((S + S.T) / 2).sum(), S)
    assert report.verdict == verdict, report.counts()
    assert not any("could not batch" in n for n in report.details["notes"])


@pytest.mark.parametrize(
    "fn, x, dtype",
    [
        (torch.tanh, 5.0, torch.float64),
        (torch.tanh, 8.0, torch.float64),
        (torch.sigmoid, 10.0, torch.float64),
        (torch.tanh, 4.0, torch.float32),
    ],
)
def test_saturating_builtins_are_not_flagged(fn, x, dtype):
    """torch's tanh rule is 1 - y^2: where y is near 1 it loses relative accuracy (6e-9
    at x = 8 in float64), which is the round-off of evaluating it, not a wrong rule. A
    move of a few ulps does not re-round y; a larger one (the smallest that moves the
    value) does, and shows that round-off: PASS, where it used to be MISMATCH (float64)
    or UNSTABLE (float32)."""
    report = pg.check(fn, torch.tensor([x], dtype=dtype))
    assert report.verdict == pg.Verdict.PASS, str(report)


@pytest.mark.parametrize("x0", [5.0, 12.0])
def test_a_wrong_rule_on_a_saturated_entry_is_still_caught(x0):
    """The same tanh with its rule 1e-7 too large: larger moves must not hide it (each
    move is paired with its opposite, so the derivative's own change cancels)."""

    x = torch.tensor([x0, 0.3], dtype=torch.float64)
    assert pg.check(torch_planted_tanh(1e-7).apply, x).verdict == pg.Verdict.MISMATCH


def test_detached_output_and_a_python_float_are_clear_errors_a_constant_is_not():
    """An output cut off from autograd (.detach(), torch.no_grad()) would read as a zero
    gradient: a clear InputTypeError naming the cause, as in TensorFlow; a function
    returning a Python float too. A function that does not depend on its input at all
    has the right zero gradient: PASS."""
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    with pytest.raises(InputTypeError, match=r"gradient cannot flow.*\.detach\(\)"):
        pg.check(lambda x: (x.detach() ** 3).sum(), x)

    def no_grad(x):
        with torch.no_grad():
            return (x**3).sum()

    with pytest.raises(InputTypeError, match="gradient cannot flow"):
        pg.check(no_grad, x)
    with pytest.raises(InputTypeError, match="returned a float, not a tensor"):
        pg.check(lambda x: float((x**2).sum()), x)
    constant = pg.check(lambda x: torch.ones(3, dtype=torch.float64) * 2.0, x)
    assert constant.verdict == pg.Verdict.PASS and constant.ok
    assert np.all(constant.entries.autodiff == 0.0)


def test_an_output_row_that_is_exactly_zero_is_judged_on_the_whole_jacobian():
    """x^2 elementwise at [0, 1, 2] plus sum(x): the row of d(x_0^2)/dx is exactly 0, and
    on its own scale (0) every error bar was too coarse (INCONCLUSIVE); on the scale of
    the whole Jacobian it passes. A nonzero rule there is still caught."""
    x = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    report = pg.check(lambda x: {"a": x.sum(), "b": x**2}, x)
    assert report.counts() == {"PASS": 12}

    class Leaky(SquareOld):  # x**2, with a rule that leaks 1e-6 into every entry
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * (2 * x + 1e-6)

    assert pg.check(Leaky.apply, x).verdict == pg.Verdict.MISMATCH


class _SquareWithoutJVP(torch.autograd.Function):
    """x**2 with a backward rule and no forward-mode rule."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_function_without_a_forward_rule_says_why_forward_mode_is_missing(dtype):
    """No JVP: mode="fwd" is refused with the reason (recorded for the mode, not found by
    searching the notes); mode="both" too; the default reverse mode passes without
    probing forward mode, so without a note on it."""
    x = torch.tensor([0.5, -1.5, 2.0], dtype=dtype)
    for mode in ("fwd", "both"):
        with pytest.raises(ValueError, match=r"needs a JVP.*\(JVP\) is not available"):
            pg.check(lambda x: _SquareWithoutJVP.apply(x).sum(), x, mode=mode)
    report = pg.check(lambda x: _SquareWithoutJVP.apply(x).sum(), x)
    assert report.verdict is pg.Verdict.PASS and report.ok
    np.testing.assert_allclose(report.entries.reference, 2 * x.double().numpy(), rtol=1e-6)
    missing = [n for n in report.notes if n.startswith("forward-mode AD (JVP) is not available")]
    assert missing == []  # reverse mode only: forward mode was never probed
    assert not any(n.startswith("torch.func.vmap could not batch the JVP") for n in report.notes)


def test_vmap_fallback_warnings_do_not_reach_the_user():
    """An operator without a vmap batching rule (kl_div) makes torch.func.vmap warn and
    ask for an issue to be filed; polygrad's batching triggers it, the user's code does
    not, so the check passes without it (and the user's warning filters stay as they were)."""
    import warnings

    t = torch.softmax(torch.tensor([0.3, -1.0, 2.0, 0.5]), 0).log()

    def f(v):
        return F.kl_div(v.log_softmax(0), t, log_target=True, reduction="sum")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        filters = list(warnings.filters)
        report = pg.check(f, torch.tensor([0.1, 0.2, -0.4, 1.0]))
        assert warnings.filters == filters
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert not [w for w in seen if "performance drop" in str(w.message)]


def test_functions_that_use_torch_func_inside():
    """torch.vmap and a per-sample gradient (torch.func.grad under vmap) inside the checked
    function, as a gradient penalty is written: PASS against the closed forms (the
    in-place watch took the transforms' own tensors for the user's)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.float64, generator=gen)
    w = torch.randn(3, dtype=torch.float64, generator=gen)
    report = pg.check(lambda x: torch.vmap(torch.dot)(x, x).sum(), x)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    np.testing.assert_allclose(report.entries.reference, 2 * x.numpy().ravel(), rtol=1e-12)

    def penalty(x):
        g = torch.func.vmap(torch.func.grad(lambda xi: torch.tanh(xi @ w)))(x)
        return (g**2).sum()

    report = pg.check(penalty, x)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
    u = (x @ w).numpy()
    sech2 = 1 - np.tanh(u) ** 2
    expected = -4 * float(w @ w) * (sech2**2 * np.tanh(u))[:, None] * w.numpy()[None, :]
    np.testing.assert_allclose(report.entries.reference, expected.ravel(), rtol=1e-10)


def test_a_check_inside_inference_mode_names_inference_mode():
    """Inside torch.inference_mode() autograd records nothing: the error names the
    caller's inference mode (it blamed a .detach() in the function); torch.no_grad()
    around the check is fine."""
    x = torch.tensor([0.5, -1.0], dtype=torch.float64)
    with torch.inference_mode(), pytest.raises(ValueError, match="inference_mode"):
        pg.check(lambda x: (x.sin() ** 2).sum(), x)
    with torch.no_grad():
        report = pg.check(lambda x: (x.sin() ** 2).sum(), x)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)


def test_mode_both_without_a_jvp_does_not_claim_a_check():
    """A torch.autograd.Function without jvp under mode='both': the error says forward mode
    is unavailable and does not say that reverse mode "is checked" (nothing was)."""

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.tensor([0.5, 1.5], dtype=torch.float64)
    with pytest.raises(ValueError, match="needs a JVP") as info:
        pg.check(lambda x: Square.apply(x).sum(), x, mode="both")
    assert "is checked" not in str(info.value)
    report = pg.check(lambda x: Square.apply(x).sum(), x)
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
