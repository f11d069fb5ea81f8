"""Each part of the reference cache's key, changed alone, is a miss, in every framework.

The key of a cached reference holds the function's code, its closure, the
weights it reads, the values of the point, the options that shape the
reference and polygrad's own version (:mod:`polygrad.refcache`). For each part
and each framework, a check of a right rule fills the cache; then only that
part changes, and the same rule, now wrong, is checked again: it must be a
miss and MISMATCH. Were that part left out of the key, the second check would
read the first reference and PASS a wrong rule.

The rule is the framework's custom-gradient mechanism (``torch.autograd.Function``,
``jax.custom_vjp``, ``tf.custom_gradient``), or NumPy's ``grad=``: a rule fixed
once, which the change of one part makes wrong. Inputs are float64, so every
verdict is far from round-off.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import polygrad as pg
from polygrad import refcache

X = np.array([0.5, -1.0, 2.0])
Y = np.array([0.25, 1.5, -0.75])
Rule = Callable[[Any, Any], tuple[Any, Any]]


def _cached(report: pg.Report) -> bool:
    return bool(report.details["reference"]["cached"])


def _const(name: str, value: np.ndarray, like: Any) -> Any:
    """``value`` as an array of ``like``'s framework and dtype (made where the rule runs,
    so JAX makes it in float64 under polygrad's ``enable_x64``)."""
    if name == "torch":
        import torch

        return torch.as_tensor(value, dtype=like.dtype)
    if name == "jax":
        import jax.numpy as jnp

        return jnp.asarray(value, dtype=like.dtype)
    if name == "tensorflow":
        import tensorflow as tf

        return tf.constant(value, dtype=like.dtype)
    return np.asarray(value, dtype=like.dtype)


def with_rule(name: str, forward: Callable[[Any, Any], Any], rule: Rule) -> Callable[..., Any]:
    """``forward(x, y)`` (a scalar) whose VJP is ``g * rule(x, y)``, by the framework's
    custom-gradient mechanism; NumPy's ``forward`` itself (its rule is passed as ``grad``)."""
    if name == "torch":
        import torch

        class Custom(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any, y: Any) -> Any:
                ctx.save_for_backward(x, y)
                return forward(x, y)

            @staticmethod
            def backward(ctx: Any, g: Any) -> Any:
                x, y = ctx.saved_tensors
                dx, dy = rule(x, y)
                return g * dx, g * dy

        def f_torch(x: Any, y: Any) -> Any:
            return Custom.apply(x, y)

        return f_torch
    if name == "jax":
        import jax

        f_jax = jax.custom_vjp(forward)
        f_jax.defvjp(
            lambda x, y: (forward(x, y), (x, y)),
            lambda res, g: tuple(g * d for d in rule(*res)),
        )
        return f_jax  # type: ignore[no-any-return]
    if name == "tensorflow":
        import tensorflow as tf

        @tf.custom_gradient
        def f_tf(x: Any, y: Any) -> Any:
            def grad(g: Any, variables: Any = None) -> Any:
                dx, dy = rule(x, y)
                if variables is None:
                    return g * dx, g * dy
                return (g * dx, g * dy), [tf.zeros_like(v) for v in variables]  # not checked

            return forward(x, y), grad

        return f_tf  # type: ignore[no-any-return]
    return forward


def _check(backend: Any, f: Any, rule: Rule, x: np.ndarray, cache: Path, **options: Any) -> Any:
    argnum = options.get("argnums", 0)
    grad = {"grad": lambda x, y: rule(x, y)[argnum]} if backend.name == "numpy" else {}
    return backend.check(f, x, Y, cache=cache, **grad, **options)


def _right_then_wrong(
    backend: Any,
    tmp_path: Path,
    first: tuple[Any, np.ndarray, dict[str, Any]],
    change: Callable[[], tuple[Any, np.ndarray, dict[str, Any]]],
    rule: Rule,
) -> None:
    """The right rule PASSes (and fills the cache); after ``change`` the same rule is
    wrong: a miss, and MISMATCH."""
    f, x, options = first
    right = _check(backend, f, rule, x, tmp_path, **options)
    assert right.verdict == pg.Verdict.PASS and right.ok, right
    assert not _cached(right)
    assert _cached(_check(backend, f, rule, x, tmp_path, **options))  # the cache works
    f, x, options = change()
    wrong = _check(backend, f, rule, x, tmp_path, **options)
    assert not _cached(wrong), "a stale reference was read"
    assert wrong.verdict == pg.Verdict.MISMATCH and not wrong.ok, wrong


def _cos_cos(name: str, xp: Any) -> Rule:
    """The rule of ``sum(sin(x) * cos(y))``: (cos x cos y, -sin x sin y)."""
    return lambda x, y: (xp.cos(x) * xp.cos(y), -xp.sin(x) * xp.sin(y))


def _from_source(body: str, xp: Any) -> Any:
    namespace: dict[str, Any] = {"xp": xp}
    exec(textwrap.dedent(body), namespace)  # noqa: S102 - two functions that differ in code only
    return namespace["forward"]


def test_changed_code_is_a_miss(backend: Any, tmp_path: Path) -> None:
    xp = backend.namespace
    src = "def forward(x, y):\n    return xp.sum(xp.sin(x) * xp.cos(y)){}\n"
    f_a = with_rule(backend.name, _from_source(src.format(""), xp), _cos_cos(backend.name, xp))
    f_b = with_rule(
        backend.name, _from_source(src.format(" + xp.sum(x) / 2"), xp), _cos_cos(backend.name, xp)
    )
    _right_then_wrong(
        backend, tmp_path, (f_a, X, {}), lambda: (f_b, X, {}), _cos_cos(backend.name, xp)
    )


def test_changed_closure_is_a_miss(backend: Any, tmp_path: Path) -> None:
    """The same code closing over another number (a Python float, not an array)."""
    xp = backend.namespace

    def make(c: float) -> Any:
        def forward(x: Any, y: Any) -> Any:
            return xp.sum(xp.sin(c * x) * xp.cos(y))

        return with_rule(backend.name, forward, rule)

    rule = _cos_cos(backend.name, xp)  # right for c = 1 only
    _right_then_wrong(backend, tmp_path, (make(1.0), X, {}), lambda: (make(1.5), X, {}), rule)


def _weighted(name: str, xp: Any) -> tuple[Any, Callable[[], np.ndarray], Callable[[], None]]:
    """``sum(w * sin(x) * cos(y))`` with ``w`` a model's weights: the forward, the
    weights' current values, and a change of one weight in place."""
    w0 = np.array([1.0, 2.0, 3.0])
    if name == "torch":
        import torch

        layer = torch.nn.Linear(3, 1, bias=False).double()
        with torch.no_grad():
            layer.weight.copy_(torch.as_tensor(w0[None, :]))

        def bump() -> None:
            with torch.no_grad():
                layer.weight[0, 1] += 0.5

        forward = lambda x, y: layer((xp.sin(x) * xp.cos(y))[None, :]).sum()  # noqa: E731
        return forward, lambda: layer.weight.detach().numpy()[0].copy(), bump
    if name == "tensorflow":
        import keras

        dense = keras.layers.Dense(1, use_bias=False, dtype="float64")
        dense.build((None, 3))
        dense.kernel.assign(w0[:, None])
        bump = lambda: dense.kernel.assign(dense.kernel + np.array([[0.0], [0.5], [0.0]]))  # noqa: E731
        forward = lambda x, y: xp.sum(dense(xp.reshape(xp.sin(x) * xp.cos(y), (1, 3))))  # noqa: E731
        return forward, lambda: np.asarray(dense.kernel.numpy())[:, 0].copy(), bump
    params: dict[str, Any] = {"w": xp.asarray(w0)}  # JAX: a params dict; NumPy: an array

    def bump_params() -> None:
        if name == "numpy":
            params["w"][1] += 0.5  # in place, as a training step does
        else:
            params["w"] = params["w"].at[1].add(0.5)

    forward = lambda x, y: xp.sum(params["w"] * xp.sin(x) * xp.cos(y))  # noqa: E731
    return forward, lambda: np.asarray(params["w"], dtype=np.float64).copy(), bump_params


def test_changed_weights_are_a_miss(backend: Any, tmp_path: Path) -> None:
    """A model's weights change in place (a layer, a Keras kernel, a params dict)."""
    name, xp = backend.name, backend.namespace
    forward, weights, bump = _weighted(name, xp)
    w_a = weights()

    def rule(x: Any, y: Any) -> tuple[Any, Any]:  # right for the first weights only
        w = _const(name, w_a, x)
        return w * xp.cos(x) * xp.cos(y), -w * xp.sin(x) * xp.sin(y)

    f = with_rule(name, forward, rule)

    def change() -> tuple[Any, np.ndarray, dict[str, Any]]:
        bump()
        assert not np.array_equal(weights(), w_a)
        return f, X, {}

    _right_then_wrong(backend, tmp_path, (f, X, {}), change, rule)


def test_changed_point_is_a_miss(backend: Any, tmp_path: Path) -> None:
    """The same function at another point of the same shape and dtype."""
    name, xp = backend.name, backend.namespace
    dx, dy = np.cos(X) * np.cos(Y), -np.sin(X) * np.sin(Y)  # the derivative at X only
    rule: Rule = lambda x, y: (_const(name, dx, x), _const(name, dy, y))  # noqa: E731
    f = with_rule(name, lambda x, y: xp.sum(xp.sin(x) * xp.cos(y)), rule)
    moved = X + np.array([0.0, 0.75, 0.0])
    _right_then_wrong(backend, tmp_path, (f, X, {}), lambda: (f, moved, {}), rule)


def test_changed_options_are_a_miss(backend: Any, tmp_path: Path) -> None:
    """The same function and arguments, another ``argnums``: the rule for ``y`` is wrong."""
    xp = backend.namespace
    rule: Rule = lambda x, y: (xp.cos(x) * xp.cos(y),) * 2  # noqa: E731
    f = with_rule(backend.name, lambda x, y: xp.sum(xp.sin(x) * xp.cos(y)), rule)
    _right_then_wrong(
        backend, tmp_path, (f, X, {"argnums": 0}), lambda: (f, X, {"argnums": 1}), rule
    )


def test_changed_polygrad_version_is_a_miss(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference stored by another polygrad version is not read.

    The older version is made to store a reference 1.5 times the true one (a
    reference stage that changed between versions); its rule, right by that
    reference, PASSes there from the cache. Under the current version the same rule
    must be a miss and MISMATCH.
    """
    from polygrad import _version

    name, xp = backend.name, backend.namespace
    rule: Rule = lambda x, y: (1.5 * xp.cos(x) * xp.cos(y), -1.5 * xp.sin(x) * xp.sin(y))  # noqa: E731
    f = with_rule(name, lambda x, y: xp.sum(xp.sin(x) * xp.cos(y)), rule)
    store = refcache.ReferenceCache.store

    def store_older(self: Any, key: str, entry: refcache.CachedReference) -> bool:
        sides = {s: _scaled(getattr(entry.dd, s)) for s in ("central", "left", "right")}
        dd = dataclasses.replace(entry.dd, **sides)
        return store(self, key, dataclasses.replace(entry, dd=dd))

    current = _version.__version__
    refcache._polygrad_state.cache_clear()
    monkeypatch.setattr(_version, "__version__", current + ".older")
    with monkeypatch.context() as m:
        m.setattr(refcache.ReferenceCache, "store", store_older)
        _check(backend, f, rule, X, tmp_path)  # the fresh reference: MISMATCH; stored x 1.5
    older = _check(backend, f, rule, X, tmp_path)
    assert _cached(older) and older.verdict == pg.Verdict.PASS  # the older version's verdict
    monkeypatch.setattr(_version, "__version__", current)
    refcache._polygrad_state.cache_clear()
    now = _check(backend, f, rule, X, tmp_path)
    refcache._polygrad_state.cache_clear()
    assert not _cached(now), "a reference of another polygrad version was read"
    assert now.verdict == pg.Verdict.MISMATCH and not now.ok, now


def _scaled(estimate: Any) -> Any:
    return dataclasses.replace(estimate, value=1.5 * np.asarray(estimate.value))
