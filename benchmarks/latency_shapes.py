"""The latency benchmark's scalar losses and failing twins (see :mod:`benchmarks.latency`).

* *Scalar losses*, n = 10, float32 and float64, in every framework, closed over their
  weights as users write them: a small MLP's log-softmax loss
  ``log_softmax(W2 @ tanh(W1 @ x + b1))[3]`` (``W1`` 8x10, ``W2`` 5x8) and a linear
  model's mean squared error ``mean((A @ x - y)**2)`` (``A`` 16x10). polygrad against
  the framework's checker, as for the elementwise rows (:func:`loss_rows`).
* *Failing twins*: polygrad's check of a function whose custom rule is right against the
  same check with the rule planted ``x (1 + 1e-3)`` (:func:`twin_rows`): the MLP loss
  with its ``tanh`` given a rule (``torch.autograd.Function``, ``jax.custom_vjp``,
  ``tf.custom_gradient``; NumPy: the loss's gradient as ``grad=``), and a clamp to
  ``[-1, 1]`` of a 20x20 input with its rule (NumPy: ``vjp=``). Warm calls of the two
  alternate call by call, so the fail/pass ratio survives a drifting machine.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

Thunk = Callable[[], Any]
Maker = Callable[[], Thunk]

SHAPES = {"mlp": "scalar loss: MLP log-softmax", "mse": "scalar loss: linear MSE"}
"""The scalar-loss rows: key -> the label printed in the table."""
PLANTED = 1 + 1e-3
"""The factor planted in a rule for the failing twin."""
CLAMP_SHAPE = (20, 20)
TWINS = {
    "mlp": "MLP log-softmax loss, n = 10, tanh with a custom rule",
    "clamp": "clamp to [-1, 1], 20x20 input, custom rule",
}
"""The failing-twin rows: key -> the label printed in the table."""
RULES = {
    "numpy": "grad= / vjp= (clamp)",
    "torch": "torch.autograd.Function",
    "jax": "jax.custom_vjp",
    "tensorflow": "tf.custom_gradient",
}


def _rule(framework: str, key: str) -> str:
    """How the rule of twin problem ``key`` is given in ``framework``."""
    if framework == "numpy":
        return "grad=" if key == "mlp" else "vjp="
    return RULES[framework]


def _rng_arrays(seed: int, dtype: str, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0.0, 1.0, s) / np.sqrt(s[-1])).astype(dtype) for s in shapes]


def mlp_weights(dtype: str) -> list[np.ndarray]:
    """``W1`` (8, 10), ``b1`` (8,), ``W2`` (5, 8) in ``dtype``."""
    w1, w2 = _rng_arrays(2, dtype, (8, 10), (5, 8))
    b1 = np.random.default_rng(3).uniform(-0.5, 0.5, 8).astype(dtype)
    return [w1, b1, w2]


def mse_data(dtype: str) -> list[np.ndarray]:
    """``A`` (16, 10) and ``y`` (16,) in ``dtype``."""
    (a,) = _rng_arrays(4, dtype, (16, 10))
    y = np.random.default_rng(5).uniform(-1.0, 1.0, 16).astype(dtype)
    return [a, y]


def loss_point(dtype: str) -> np.ndarray:
    return np.random.default_rng(0).uniform(-2.0, 2.0, 10).astype(dtype)


def clamp_point(dtype: str) -> np.ndarray:
    """A 20x20 point with no entry within 0.05 of the clamp's kinks at -1 and 1."""
    x = np.random.default_rng(6).uniform(-2.0, 2.0, CLAMP_SHAPE)
    return np.where(np.abs(np.abs(x) - 1) < 0.05, 0.8 * x, x).astype(dtype)


# ---- NumPy: functions and their hand-written derivatives --------------------------------


def _np_mlp(dtype: str, scale: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
    w1, b1, w2 = mlp_weights(dtype)

    def f(x: np.ndarray) -> Any:
        z = w2 @ np.tanh(w1 @ x + b1)
        m = z.max()
        return z[3] - m - np.log(np.sum(np.exp(z - m)))

    def grad(x: np.ndarray) -> np.ndarray:
        h = np.tanh(w1 @ x + b1)
        z = w2 @ h
        p = np.exp(z - z.max())
        dz = -p / p.sum()
        dz[3] += 1
        return w1.T @ ((1 - h * h) * (w2.T @ dz)) * scale

    return f, grad


def _np_mse(dtype: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    a, y = mse_data(dtype)
    return (lambda x: np.mean((a @ x - y) ** 2),
            lambda x: 2 / len(y) * a.T @ (a @ x - y))  # fmt: skip


def _numpy_losses(dtype: str) -> dict[str, tuple[Maker, Maker]]:
    import scipy.optimize

    import polygrad as pg

    x = loss_point(dtype)
    out: dict[str, tuple[Maker, Maker]] = {}
    for key, build in (("mlp", lambda: _np_mlp(dtype, 1.0)), ("mse", lambda: _np_mse(dtype))):

        def make_tool(build: Callable[[], Any] = build) -> Thunk:
            f, g = build()
            x64 = x.astype(np.float64)
            return lambda: scipy.optimize.check_grad(lambda v: float(f(v)), g, x64)

        def make_pg(build: Callable[[], Any] = build) -> Thunk:
            f, g = build()
            return lambda: pg.check(f, x, grad=g)

        out[key] = (make_tool, make_pg)
    return out


# ---- PyTorch ----------------------------------------------------------------------------


def _torch_fns(dtype: str) -> dict[str, Callable[[str], Callable[[Any], Any]]]:
    """Each loss, built closed over its weights in the dtype given to the builder."""
    import torch

    def mlp(dt: str) -> Callable[[Any], Any]:
        w1, b1, w2 = (torch.tensor(a.astype(dt)) for a in mlp_weights(dtype))
        return lambda x: torch.log_softmax(w2 @ torch.tanh(w1 @ x + b1), 0)[3]

    def mse(dt: str) -> Callable[[Any], Any]:
        a, y = (torch.tensor(v.astype(dt)) for v in mse_data(dtype))
        return lambda x: ((a @ x - y) ** 2).mean()

    return {"mlp": mlp, "mse": mse}


def _torch_losses(dtype: str) -> dict[str, tuple[Maker, Maker]]:
    import torch

    import polygrad as pg

    x = torch.tensor(loss_point(dtype))
    out: dict[str, tuple[Maker, Maker]] = {}
    for key, build in _torch_fns(dtype).items():

        def make_tool(build: Callable[[str], Any] = build) -> Thunk:
            f64, x64 = build("float64"), x.double().requires_grad_()  # the float64 copy
            return lambda: torch.autograd.gradcheck(f64, (x64,))

        def make_pg(build: Callable[[str], Any] = build) -> Thunk:
            f = build(dtype)
            return lambda: pg.check(f, x)

        out[key] = (make_tool, make_pg)
    return out


# ---- JAX --------------------------------------------------------------------------------


def _jax_fns(dtype: str) -> dict[str, Callable[[], Callable[[Any], Any]]]:
    import jax
    import jax.numpy as jnp

    def mlp() -> Callable[[Any], Any]:
        w1, b1, w2 = (jnp.asarray(a) for a in mlp_weights(dtype))
        return lambda x: jax.nn.log_softmax(w2 @ jnp.tanh(w1 @ x + b1))[3]

    def mse() -> Callable[[Any], Any]:
        a, y = (jnp.asarray(v) for v in mse_data(dtype))
        return lambda x: jnp.mean((a @ x - y) ** 2)

    return {"mlp": mlp, "mse": mse}


def _jax_losses(dtype: str) -> dict[str, tuple[Maker, Maker]]:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.test_util import check_grads

    import polygrad as pg

    x = jnp.asarray(loss_point(dtype))
    out: dict[str, tuple[Maker, Maker]] = {}
    for key, build in _jax_fns(dtype).items():

        def make_tool(build: Callable[[], Any] = build) -> Thunk:
            f = build()
            return lambda: check_grads(f, (x,), order=1, modes=["rev"])

        def make_pg(build: Callable[[], Any] = build) -> Thunk:
            f = build()
            return lambda: pg.check(f, x)

        out[key] = (make_tool, make_pg)
    return out


# ---- TensorFlow -------------------------------------------------------------------------


def _tf_fns(dtype: str) -> dict[str, Callable[[], Callable[[Any], Any]]]:
    import tensorflow as tf

    def mlp() -> Callable[[Any], Any]:
        w1, b1, w2 = (tf.constant(a) for a in mlp_weights(dtype))
        mv = tf.linalg.matvec
        return lambda x: tf.nn.log_softmax(mv(w2, tf.tanh(mv(w1, x) + b1)))[3]

    def mse() -> Callable[[Any], Any]:
        a, y = (tf.constant(v) for v in mse_data(dtype))
        return lambda x: tf.reduce_mean((tf.linalg.matvec(a, x) - y) ** 2)

    return {"mlp": mlp, "mse": mse}


def _tensorflow_losses(dtype: str) -> dict[str, tuple[Maker, Maker]]:
    import tensorflow as tf

    import polygrad as pg

    x = tf.constant(loss_point(dtype))
    out: dict[str, tuple[Maker, Maker]] = {}
    for key, build in _tf_fns(dtype).items():

        def make_tool(build: Callable[[], Any] = build) -> Thunk:
            f = build()

            def go() -> None:
                theo, num = tf.test.compute_gradient(f, [x])
                np.testing.assert_allclose(theo[0], num[0], rtol=1e-3, atol=1e-3)

            return go

        def make_pg(build: Callable[[], Any] = build) -> Thunk:
            f = build()
            return lambda: pg.check(f, x)

        out[key] = (make_tool, make_pg)
    return out


LOSSES: dict[str, Callable[[str], dict[str, tuple[Maker, Maker]]]] = {
    "numpy": _numpy_losses,
    "torch": _torch_losses,
    "jax": _jax_losses,
    "tensorflow": _tensorflow_losses,
}
TOOL_NAMES = {
    "numpy": "scipy check_grad",
    "torch": "torch.autograd.gradcheck (float64 copy)",
    "jax": "jax check_grads",
    "tensorflow": "tf.test.compute_gradient",
}


def loss_rows(framework: str, dtype: str, *shapes: str) -> list[dict[str, Any]]:
    """The scalar-loss rows of ``framework`` in ``dtype`` (``shapes``: keys of
    :data:`SHAPES`, all by default): polygrad against the checker."""
    makers = LOSSES[framework](dtype)
    job = f"loss:{framework},{dtype}"
    return [_loss_row(job, framework, dtype, key, makers[key]) for key in shapes or SHAPES]


def _loss_row(
    job: str, framework: str, dtype: str, key: str, makers: tuple[Maker, Maker]
) -> dict[str, Any]:
    """One scalar-loss row; a check that raises is recorded with its error, not timed."""
    from .latency import _compare

    row = {"job": job, "n": 10, "framework": framework, "dtype": dtype, "shape": SHAPES[key]}
    try:
        return {**row, "strategy": SHAPES[key], **_compare(TOOL_NAMES[framework], *makers)}
    except Exception as exc:  # noqa: BLE001 - a check that raises is recorded
        return {**row, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}


# ---- failing twins: custom rules, right and planted -------------------------------------


def _torch_rule_ops(scale: float) -> dict[str, Callable[[Any], Any]]:
    """``tanh`` and ``clamp(-1, 1)`` as ``torch.autograd.Function``s whose backward is
    multiplied by ``scale``."""
    import torch

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (y,) = ctx.saved_tensors
            return g * (1 - y * y) * scale

    class Clamp(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.save_for_backward(x)
            return x.clamp(-1.0, 1.0)

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (x,) = ctx.saved_tensors
            return g * ((x > -1) & (x < 1)).to(g.dtype) * scale

    return {"tanh": Tanh.apply, "clamp": Clamp.apply}


def _jax_rule_ops(scale: float) -> dict[str, Callable[[Any], Any]]:
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def tanh(x: Any) -> Any:
        return jnp.tanh(x)

    def tanh_fwd(x: Any) -> tuple[Any, Any]:
        y = jnp.tanh(x)
        return y, y

    tanh.defvjp(tanh_fwd, lambda y, g: (g * (1 - y * y) * scale,))

    @jax.custom_vjp
    def clamp(x: Any) -> Any:
        return jnp.clip(x, -1.0, 1.0)

    def clamp_bwd(x: Any, g: Any) -> tuple[Any]:
        return (g * ((x > -1) & (x < 1)).astype(g.dtype) * scale,)

    clamp.defvjp(lambda x: (jnp.clip(x, -1.0, 1.0), x), clamp_bwd)
    return {"tanh": tanh, "clamp": clamp}


def _tf_rule_ops(scale: float) -> dict[str, Callable[[Any], Any]]:
    import tensorflow as tf

    @tf.custom_gradient
    def tanh(x: Any) -> Any:
        y = tf.tanh(x)
        return y, lambda g: g * (1 - y * y) * scale

    @tf.custom_gradient
    def clamp(x: Any) -> Any:
        inside = tf.cast((x > -1) & (x < 1), x.dtype)
        return tf.clip_by_value(x, -1.0, 1.0), lambda g: g * inside * scale

    return {"tanh": tanh, "clamp": clamp}


def _framework_twins(framework: str, dtype: str, scale: float) -> dict[str, Thunk]:
    """polygrad's check of each twin problem with its rule multiplied by ``scale``."""
    import polygrad as pg

    if framework == "torch":
        import torch

        ops, mv, arr = _torch_rule_ops(scale), (lambda w, v: w @ v), torch.tensor
        log_softmax = lambda z: torch.log_softmax(z, 0)  # noqa: E731
    elif framework == "jax":
        import jax
        import jax.numpy as jnp

        ops, mv, arr, log_softmax = (
            _jax_rule_ops(scale),
            (lambda w, v: w @ v),
            jnp.asarray,
            jax.nn.log_softmax,
        )
    else:
        import tensorflow as tf

        ops, mv, arr = _tf_rule_ops(scale), tf.linalg.matvec, tf.constant
        log_softmax = tf.nn.log_softmax
    w1, b1, w2 = (arr(a) for a in mlp_weights(dtype))
    x, xc = arr(loss_point(dtype)), arr(clamp_point(dtype))
    tanh, clamp = ops["tanh"], ops["clamp"]
    mlp = lambda v: log_softmax(mv(w2, tanh(mv(w1, v) + b1)))[3]  # noqa: E731
    return {"mlp": lambda: pg.check(mlp, x), "clamp": lambda: pg.check(clamp, xc)}


def _numpy_twins(dtype: str, scale: float) -> dict[str, Thunk]:
    import polygrad as pg

    f, grad = _np_mlp(dtype, scale)
    x, xc = loss_point(dtype), clamp_point(dtype)

    def clamp(v: np.ndarray) -> np.ndarray:
        return np.clip(v, -1.0, 1.0)

    def clamp_vjp(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return u * ((v > -1) & (v < 1)) * scale

    return {"mlp": lambda: pg.check(f, x, grad=grad),
            "clamp": lambda: pg.check(clamp, xc, vjp=clamp_vjp)}  # fmt: skip


def twins(framework: str, dtype: str, scale: float) -> dict[str, Thunk]:
    """Each twin problem's check (new function objects per call of this function)."""
    if framework == "numpy":
        return _numpy_twins(dtype, scale)
    if framework == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)
    return _framework_twins(framework, dtype, scale)


def twin_rows(framework: str, dtype: str, *problems: str) -> list[dict[str, Any]]:
    """For each problem (keys of :data:`TWINS`, all by default): polygrad's first and warm
    times with the right rule and with the planted one, warm calls alternated
    (:func:`benchmarks.latency._interleaved_warm`)."""
    from .latency import _interleaved_warm, _timed

    rows = []
    for key in problems or TWINS:
        row = {"job": f"twin:{framework},{dtype}", "framework": framework, "dtype": dtype,
               "problem": TWINS[key], "rule": _rule(framework, key)}  # fmt: skip
        make_pass = lambda k=key: twins(framework, dtype, 1.0)[k]  # noqa: E731
        make_fail = lambda k=key: twins(framework, dtype, PLANTED)[k]  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                pass_first, fail_first = _timed(make_pass()), _timed(make_fail())
                pass_warm, fail_warm = _interleaved_warm(make_pass(), make_fail())
                verdicts = make_pass()().verdict.name, make_fail()().verdict.name
            except Exception as exc:  # noqa: BLE001 - a check that raises is recorded
                rows.append({**row, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
                continue
        rows.append({**row, "pass_first": pass_first, "fail_first": fail_first,
                     "pass_warm": pass_warm, "fail_warm": fail_warm,
                     "pass_verdict": verdicts[0], "fail_verdict": verdicts[1]})  # fmt: skip
    return rows
