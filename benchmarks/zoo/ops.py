"""One small array namespace per framework, so that each zoo function is written once.

:func:`ops` returns an :class:`Ops` object for a framework and a dtype. Zoo
functions are written against it (``o.sum``, ``o.exp``, ``o.logsumexp``,
``o.custom``...) and so run unchanged in NumPy, PyTorch, JAX and TensorFlow.
Frameworks are imported only when an :class:`Ops` for them is made.

Custom gradient rules (the place where the zoo plants its bugs) are made with
:meth:`Ops.custom`, which wraps ``torch.autograd.Function``,
``jax.custom_vjp`` and ``tf.custom_gradient``; in NumPy, which has no autodiff,
the rule is called directly by the case's hand-written gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Ops", "ops", "FRAMEWORKS"]

FRAMEWORKS = ("numpy", "torch", "jax", "tensorflow")

Fwd = Callable[..., Any]
"""``fwd(o, *xs) -> y``: the forward computation of a custom operation."""
Bwd = Callable[..., Any]
"""``bwd(o, xs, y, ct) -> tuple of cotangents``: its gradient rule (a VJP)."""


class Ops:
    """Array operations of one framework in one floating dtype.

    Parameters
    ----------
    framework : {"numpy", "torch", "jax", "tensorflow"}
        The framework.
    dtype : str
        ``"float64"``, ``"float32"``, ``"float16"`` or ``"bfloat16"``.

    Raises
    ------
    ValueError
        An unknown framework, or a dtype the framework does not have.
    """

    def __init__(self, framework: str, dtype: str) -> None:
        if framework not in FRAMEWORKS:
            raise ValueError(f"unknown framework {framework!r}; choose one of {FRAMEWORKS}")
        self.framework = framework
        self.dtype = dtype
        self._rules: dict[tuple[Fwd, Bwd], Callable[..., Any]] = {}
        if framework == "numpy":
            if dtype == "bfloat16":
                raise ValueError("NumPy has no bfloat16 arithmetic of its own")
            self.m: Any = np
            self.dt: Any = np.dtype(dtype)
        elif framework == "torch":
            import torch

            self.m = torch
            self.dt = getattr(torch, dtype)
        elif framework == "jax":
            import jax
            import jax.numpy as jnp

            # float64 arrays need x64; arrays are always made with an explicit dtype
            jax.config.update("jax_enable_x64", True)
            self.m = jnp
            self.dt = getattr(jnp, dtype)
        else:
            import tensorflow as tf

            self.m = tf
            self.dt = getattr(tf, dtype)

    # ---- conversion -------------------------------------------------------------------
    def const(self, a: Any) -> Any:
        """A constant array of this framework and dtype from a NumPy array or a number."""
        a = np.asarray(a, dtype=np.float64)
        if self.framework == "numpy":
            return a.astype(self.dt)
        if self.framework == "torch":
            return self.m.tensor(a, dtype=self.dt)
        if self.framework == "jax":
            return self.m.asarray(a, dtype=self.dt)
        return self.m.constant(a, dtype=self.dt)

    def to_numpy(self, t: Any) -> np.ndarray:
        """A float64 NumPy copy of an array of this framework."""
        if self.framework == "torch":
            return t.detach().to(self.m.float64).numpy()
        if self.framework == "tensorflow":
            return self.m.cast(t, self.m.float64).numpy()
        return np.asarray(t).astype(np.float64)

    # ---- elementwise and reductions ---------------------------------------------------
    def sum(self, x: Any, axis: int | None = None) -> Any:
        if self.framework == "torch":
            return self.m.sum(x) if axis is None else self.m.sum(x, dim=axis)
        if self.framework == "tensorflow":
            return self.m.reduce_sum(x, axis=axis)
        return self.m.sum(x, axis=axis)

    def mean(self, x: Any, axis: int | None = None) -> Any:
        if self.framework == "torch":
            return self.m.mean(x) if axis is None else self.m.mean(x, dim=axis)
        if self.framework == "tensorflow":
            return self.m.reduce_mean(x, axis=axis)
        return self.m.mean(x, axis=axis)

    def max(self, x: Any) -> Any:
        """Maximum over all entries (ties share the gradient as the framework decides)."""
        if self.framework == "torch":
            return self.m.amax(x)
        if self.framework == "tensorflow":
            return self.m.reduce_max(x)
        return self.m.max(x)

    def _fn(self, name: str, tf_name: str | None = None) -> Any:
        if self.framework == "tensorflow":
            return getattr(self.m.math, tf_name or name)
        return getattr(self.m, name)

    def exp(self, x: Any) -> Any:
        return self._fn("exp")(x)

    def log(self, x: Any) -> Any:
        return self._fn("log")(x)

    def log1p(self, x: Any) -> Any:
        return self._fn("log1p")(x)

    def sqrt(self, x: Any) -> Any:
        return self._fn("sqrt")(x)

    def sin(self, x: Any) -> Any:
        return self._fn("sin")(x)

    def cos(self, x: Any) -> Any:
        return self._fn("cos")(x)

    def tanh(self, x: Any) -> Any:
        return self._fn("tanh")(x)

    def abs(self, x: Any) -> Any:
        return self._fn("abs")(x)

    def sign(self, x: Any) -> Any:
        return self._fn("sign")(x)

    def where(self, c: Any, a: Any, b: Any) -> Any:
        if self.framework == "tensorflow":
            return self.m.where(c, a, b)
        return self.m.where(c, a, b)

    def relu(self, x: Any) -> Any:
        if self.framework == "torch":
            return self.m.relu(x)
        if self.framework == "tensorflow":
            return self.m.nn.relu(x)
        return self.m.maximum(x, 0)

    def heaviside(self, x: Any) -> Any:
        """1 where ``x > 0``, else 0, in this dtype (a jump; its derivative is 0 elsewhere)."""
        one, zero = self.const(1.0), self.const(0.0)
        return self.where(x > 0, one + 0 * x, zero * x)

    def softplus(self, x: Any) -> Any:
        if self.framework == "torch":
            return self.m.nn.functional.softplus(x)
        if self.framework == "tensorflow":
            return self.m.math.softplus(x)
        if self.framework == "jax":
            import jax

            return jax.nn.softplus(x)
        return np.logaddexp(0, x)

    def sigmoid(self, x: Any) -> Any:
        if self.framework == "torch":
            return self.m.sigmoid(x)
        if self.framework == "tensorflow":
            return self.m.math.sigmoid(x)
        if self.framework == "jax":
            import jax

            return jax.nn.sigmoid(x)
        return 1 / (1 + np.exp(-x))

    def logsumexp(self, x: Any) -> Any:
        """The framework's own stable log-sum-exp over a 1-D array."""
        if self.framework == "torch":
            return self.m.logsumexp(x, dim=0)
        if self.framework == "tensorflow":
            return self.m.math.reduce_logsumexp(x)
        if self.framework == "jax":
            import jax

            return jax.nn.logsumexp(x)
        mx = np.max(x)
        return mx + np.log(np.sum(np.exp(x - mx)))

    def softmax(self, x: Any) -> Any:
        return self.exp(x - self.logsumexp(x))

    def norm(self, x: Any) -> Any:
        """The framework's own 2-norm of a 1-D array."""
        if self.framework == "torch":
            return self.m.linalg.vector_norm(x)
        if self.framework == "tensorflow":
            return self.m.norm(x)
        return self.m.linalg.norm(x)

    def matvec(self, A: Any, x: Any) -> Any:
        if self.framework == "tensorflow":
            return self.m.linalg.matvec(A, x)
        return A @ x

    def transpose(self, A: Any) -> Any:
        if self.framework == "tensorflow":
            return self.m.transpose(A)
        return A.T

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self.m.reshape(x, shape)

    def concat(self, xs: list[Any]) -> Any:
        if self.framework == "torch":
            return self.m.cat(xs)
        if self.framework == "tensorflow":
            return self.m.concat(xs, axis=0)
        return self.m.concatenate(xs)

    def zeros_like(self, x: Any) -> Any:
        return self.m.zeros_like(x)

    # ---- custom gradient rules --------------------------------------------------------
    def custom(self, fwd: Fwd, bwd: Bwd) -> Callable[..., Any]:
        """A differentiable operation whose gradient is the hand-written rule ``bwd``.

        Parameters
        ----------
        fwd : callable
            ``fwd(o, *xs) -> y``.
        bwd : callable
            ``bwd(o, xs, y, ct) -> tuple`` of one cotangent per input (same shapes).

        Returns
        -------
        callable
            ``op(*xs) -> y``; in PyTorch a ``torch.autograd.Function``, in JAX a
            ``jax.custom_vjp``, in TensorFlow a ``tf.custom_gradient`` function.
            In NumPy it simply computes ``fwd`` (the rule is used by the case's
            hand-written gradient).
        """
        key = (fwd, bwd)
        if key not in self._rules:
            self._rules[key] = self._make_custom(fwd, bwd)
        return self._rules[key]

    def _make_custom(self, fwd: Fwd, bwd: Bwd) -> Callable[..., Any]:
        o = self
        if self.framework == "numpy":
            return lambda *xs: fwd(o, *xs)
        if self.framework == "torch":
            import torch

            class Rule(torch.autograd.Function):
                @staticmethod
                def forward(ctx: Any, *xs: Any) -> Any:
                    y = fwd(o, *xs)
                    ctx.save_for_backward(*xs, y)
                    return y

                @staticmethod
                def backward(ctx: Any, ct: Any) -> Any:
                    *xs, y = ctx.saved_tensors
                    return tuple(bwd(o, tuple(xs), y, ct))

            return Rule.apply
        if self.framework == "jax":
            import jax

            @jax.custom_vjp
            def op(*xs: Any) -> Any:
                return fwd(o, *xs)

            def op_fwd(*xs: Any) -> Any:
                y = fwd(o, *xs)
                return y, (xs, y)

            def op_bwd(res: Any, ct: Any) -> Any:
                xs, y = res
                return tuple(bwd(o, xs, y, ct))

            op.defvjp(op_fwd, op_bwd)
            return op
        tf = self.m

        @tf.custom_gradient
        def tf_op(*xs: Any) -> Any:
            y = fwd(o, *xs)

            def grad(ct: Any) -> Any:
                out = list(bwd(o, xs, y, ct))
                return out if len(out) > 1 else out[0]

            return y, grad

        return tf_op

    # ---- autodiff ---------------------------------------------------------------------
    def value_and_grad(self, f: Callable[[Any], Any], x: Any) -> tuple[float, np.ndarray]:
        """``f(x)`` and its framework-autodiff gradient, both as float64 NumPy.

        Raises
        ------
        TypeError
            For NumPy, which has no autodiff.
        """
        if self.framework == "torch":
            xr = x.detach().clone().requires_grad_(True)
            y = f(xr)
            (g,) = self.m.autograd.grad(y, xr)
            return float(y.detach().double()), self.to_numpy(g)
        if self.framework == "jax":
            import jax

            y, g = jax.value_and_grad(f)(x)
            return float(y), self.to_numpy(g)
        if self.framework == "tensorflow":
            tf = self.m
            xv = tf.identity(x)
            with tf.GradientTape() as tape:
                tape.watch(xv)
                y = f(xv)
            g = tape.gradient(y, xv)
            return float(tf.cast(y, tf.float64)), self.to_numpy(g)
        raise TypeError("NumPy has no autodiff; the case supplies its gradient")


def ops(framework: str, dtype: str) -> Ops:
    """The :class:`Ops` namespace of ``framework`` in ``dtype`` (see :class:`Ops`)."""
    return Ops(framework, dtype)
