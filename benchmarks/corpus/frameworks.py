"""What the corpus needs from each framework: arrays, one VJP, planted bugs, its checker.

A planted bug wraps the case's function in the framework's own custom-gradient
mechanism (``torch.autograd.Function``, ``jax.custom_vjp``, ``tf.custom_gradient``)
whose VJP is the framework's VJP of that function passed through ``bug``. The
function itself is never edited.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BUGS", "Adapter", "adapter"]

BUGS = ("scale-1e-3", "entry-1pct")
"""Planted bugs: every gradient entry times (1 + 1e-3); the largest entry moved by 1% of it."""

Fn = Callable[[Any], Any]


class Adapter:
    """Array conversion, a VJP, planted bugs and the float64 checker of one framework."""

    name = ""

    def array(self, x: np.ndarray, dtype: str) -> Any:
        raise NotImplementedError

    def numpy(self, y: Any) -> np.ndarray:
        raise NotImplementedError

    def vjp(self, f: Fn, x: Any) -> np.ndarray:
        """The VJP of ``f`` at ``x`` with a fixed random cotangent, as float64 NumPy.

        Not all ones: the VJP of a normalisation (softmax, LayerNorm) with an all-ones
        cotangent is zero, which would hide a planted bug.
        """
        raise NotImplementedError

    def plant(self, f: Fn, bug: str) -> Fn:
        """``f`` with its VJP passed through the planted ``bug`` (one of :data:`BUGS`)."""
        raise NotImplementedError

    def checker(self, f: Fn, x: Any) -> tuple[str, str]:
        """Run the framework's own checker at its defaults: ``("pass"|"fail"|"error", detail)``."""
        raise NotImplementedError

    def timed_checker(self, f: Fn, x: Any) -> tuple[str, str, float]:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            verdict, detail = self.checker(f, x)
        return verdict, detail, time.perf_counter() - t


def _cotangent(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(12345).uniform(0.5, 1.5, shape)


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Torch(Adapter):
    name = "torch"

    def __init__(self) -> None:
        import torch

        self.t = torch

    def array(self, x: np.ndarray, dtype: str) -> Any:
        return self.t.tensor(x, dtype=self.t.float64).to(getattr(self.t, dtype))

    def numpy(self, y: Any) -> np.ndarray:
        return np.asarray(y.detach().to(self.t.float64).numpy())

    def vjp(self, f: Fn, x: Any) -> np.ndarray:
        xr = x.detach().clone().requires_grad_(True)
        y = f(xr)
        ct = self.t.tensor(_cotangent(tuple(y.shape)), dtype=y.dtype)
        (g,) = self.t.autograd.grad(y, xr, ct, allow_unused=False)
        return self.numpy(g)

    def plant(self, f: Fn, bug: str) -> Fn:
        import torch

        change = _torch_bug(bug)

        class Planted(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                with torch.enable_grad():
                    xd = x.detach().requires_grad_(True)
                    y = f(xd)
                ctx.pair = (xd, y)
                return y.detach()

            @staticmethod
            def backward(ctx: Any, ct: Any) -> Any:
                xd, y = ctx.pair
                with torch.enable_grad():
                    (g,) = torch.autograd.grad(y, xd, ct, retain_graph=True)
                return change(g)

        return Planted.apply

    def checker(self, f: Fn, x: Any) -> tuple[str, str]:
        from torch.autograd.gradcheck import GradcheckError

        xr = x.detach().clone().requires_grad_(True)
        try:
            ok = self.t.autograd.gradcheck(f, (xr,), fast_mode=xr.numel() > 2000)
        except GradcheckError as e:
            return "fail", _first(e)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            return "error", _first(e)
        return ("pass", "") if ok else ("fail", "returned False")


def _torch_bug(bug: str) -> Callable[[Any], Any]:
    def scale(g: Any) -> Any:
        return (g.double() * (1.0 + 1e-3)).to(g.dtype)

    def entry(g: Any) -> Any:
        flat = g.reshape(-1).clone()
        k = int(flat.abs().argmax())
        flat[k] = flat[k] + 0.01 * flat[k].abs()
        return flat.reshape(g.shape)

    return {"scale-1e-3": scale, "entry-1pct": entry}[bug]


class Jax(Adapter):
    name = "jax"

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        self.jax, self.jnp = jax, jnp

    def array(self, x: np.ndarray, dtype: str) -> Any:
        return self.jnp.asarray(x, dtype=self.jnp.float64).astype(getattr(self.jnp, dtype))

    def numpy(self, y: Any) -> np.ndarray:
        return np.asarray(self.jnp.asarray(y).astype(self.jnp.float64))

    def vjp(self, f: Fn, x: Any) -> np.ndarray:
        y, pull = self.jax.vjp(f, x)
        (g,) = pull(self.jnp.asarray(_cotangent(y.shape)).astype(y.dtype))
        return self.numpy(g)

    def plant(self, f: Fn, bug: str) -> Fn:
        jax, jnp = self.jax, self.jnp

        def change(g: Any) -> Any:
            if bug == "scale-1e-3":
                return (g.astype(jnp.float64) * (1.0 + 1e-3)).astype(g.dtype)
            flat = g.reshape(-1)
            k = jnp.argmax(jnp.abs(flat))
            return flat.at[k].add(0.01 * jnp.abs(flat[k])).reshape(g.shape)

        @jax.custom_vjp
        def planted(x: Any) -> Any:
            return f(x)

        def fwd(x: Any) -> Any:
            return jax.vjp(f, x)

        def bwd(pull: Any, ct: Any) -> Any:
            (g,) = pull(ct)
            return (change(g),)

        planted.defvjp(fwd, bwd)
        return planted

    def checker(self, f: Fn, x: Any) -> tuple[str, str]:
        from jax.test_util import check_grads

        try:
            check_grads(f, (x,), order=1, modes=["rev"])
        except AssertionError as e:
            return "fail", _first(e)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            return "error", _first(e)
        return "pass", ""


class TensorFlow(Adapter):
    name = "tensorflow"

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf

    def array(self, x: np.ndarray, dtype: str) -> Any:
        return self.tf.cast(self.tf.constant(x, dtype=self.tf.float64), getattr(self.tf, dtype))

    def numpy(self, y: Any) -> np.ndarray:
        return np.asarray(self.tf.cast(y, self.tf.float64).numpy())

    def vjp(self, f: Fn, x: Any) -> np.ndarray:
        with self.tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        ct = self.tf.cast(_cotangent(tuple(y.shape)), y.dtype)
        g = tape.gradient(y, x, output_gradients=ct)
        if g is None:
            raise TypeError("no gradient: the output does not depend on the input")
        return self.numpy(g)

    def plant(self, f: Fn, bug: str) -> Fn:
        tf = self.tf

        def change(g: Any) -> Any:
            if bug == "scale-1e-3":
                return tf.cast(tf.cast(g, tf.float64) * (1.0 + 1e-3), g.dtype)
            flat = tf.reshape(g, (-1,))
            k = tf.argmax(tf.abs(flat))
            bump = tf.one_hot(k, tf.size(flat), dtype=g.dtype) * 0.01 * tf.abs(flat[k])
            return tf.reshape(flat + bump, tf.shape(g))

        @tf.custom_gradient
        def planted(x: Any) -> Any:
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(x)
                y = f(x)

            def grad(ct: Any, variables: Any = None) -> Any:
                g = change(tape.gradient(y, x, output_gradients=ct))
                if variables:
                    return g, [tf.zeros_like(v) for v in variables]
                return g

            return y, grad

        return planted

    def checker(self, f: Fn, x: Any) -> tuple[str, str]:
        tf = self.tf
        try:
            theoretical, numerical = tf.test.compute_gradient(f, [x])
            tf.test.TestCase().assertAllClose(theoretical, numerical)
        except AssertionError as e:
            return "fail", _first(e)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            return "error", _first(e)
        return "pass", ""


_ADAPTERS: dict[str, Adapter] = {}


def adapter(framework: str) -> Adapter:
    """The (cached) adapter of ``framework``: ``"torch"``, ``"jax"`` or ``"tensorflow"``.

    Raises
    ------
    KeyError
        Unknown framework.
    """
    if framework not in _ADAPTERS:
        cls = {"torch": Torch, "jax": Jax, "tensorflow": TensorFlow}[framework]
        _ADAPTERS[framework] = cls()
    return _ADAPTERS[framework]
