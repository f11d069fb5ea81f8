"""The catalogs the frameworks ship, turned into corpus entries.

Nothing here chooses functions: every entry comes from enumerating a catalog
(``dir`` of a namespace, PyTorch's ``module_db``) and is kept or skipped by trying
it (a skip records its reason). Each entry builds, for a point region and a working
dtype, a :class:`Problem`: the function the way users write it (a closure over a
module, layer or parameters), the point, and a float64 version of both for the
framework's own checker and for polygrad's mp reference.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .frameworks import Adapter, adapter
from .points import FUNCTION_REGIONS, MODULE_REGIONS, draw

__all__ = ["Entry", "Problem", "Skip", "entries", "SOURCES"]

FUNCTION_N = 5
"""Entries per argument of an elementwise/special function point."""
SAMPLE_SHAPES = ((2, 6), (2, 5, 4), (1, 6, 6, 3), (1, 4, 4, 4, 2), (6,), (3, 6, 6))
"""Shapes tried, in order, to build a layer that takes one float input."""


class Skip(Exception):
    """The entry cannot be a case here; the message is the recorded reason."""


@dataclass(frozen=True)
class Problem:
    """One case, ready to check.

    Attributes
    ----------
    f, x : callable, array
        The function and the point in the working dtype (framework array).
    f64, x64 : callable, array
        The same in float64 (the point rounded to the working dtype first).
    repro : str
        How the case is written by a user (one line).
    """

    f: Callable[[Any], Any]
    x: Any
    f64: Callable[[Any], Any]
    x64: Any
    repro: str


@dataclass(frozen=True)
class Entry:
    """One catalog entry.

    Attributes
    ----------
    framework : str
        ``"torch"``, ``"jax"`` or ``"tensorflow"``.
    source : str
        The catalog (``"torch.special"``, ``"module_db"``, ``"keras.layers"``...).
    name : str
        The entry's name in its catalog.
    kind : str
        ``"function"`` (point regions of :data:`FUNCTION_REGIONS`) or ``"module"``.
    build : callable
        ``build(region, dtype, seed) -> Problem``; raises :class:`Skip`.
    """

    framework: str
    source: str
    name: str
    kind: str
    build: Callable[[str, str, int], Problem]

    @property
    def regions(self) -> tuple[str, ...]:
        return tuple(FUNCTION_REGIONS if self.kind == "function" else MODULE_REGIONS)


def _first_float(y: Any) -> Any:
    if isinstance(y, (tuple, list)):
        y = y[0]
    if isinstance(y, dict):
        y = next(iter(y.values()))
    return y


def _rounded(a: Adapter, x: np.ndarray, dtype: str) -> tuple[Any, Any]:
    xw = a.array(x, dtype)
    return xw, a.array(a.numpy(xw), "float64")


def _check_output(a: Adapter, f: Callable[[Any], Any], x: Any) -> None:
    try:
        y = a.numpy(_first_float(f(x)))
    except Exception as e:  # noqa: BLE001 - any failure of the catalog entry is a skip
        raise Skip(f"does not run here: {type(e).__name__}: {str(e)[:120]}") from None
    if not np.all(np.isfinite(y)):
        raise Skip("value not finite at this point (outside the domain)")


# ---- functions -------------------------------------------------------------------------


def _function_entry(framework: str, source: str, name: str, fn: Callable[..., Any]) -> Entry:
    def build(region: str, dtype: str, seed: int) -> Problem:
        a = adapter(framework)
        for arity in (1, 2):
            shape = (FUNCTION_N,) if arity == 1 else (2, FUNCTION_N)
            xw, x64 = _rounded(a, draw(region, shape, seed), dtype)
            f = _unary(fn) if arity == 1 else _binary(fn)
            try:
                y = f(x64)
            except Exception:  # noqa: BLE001, S112 - try the next arity
                continue
            if not _is_float(a, y):
                raise Skip("output is not one float array")
            _check_output(a, f, xw)
            _check_output(a, f, x64)
            args = "x" if arity == 1 else "x[0], x[1]"
            return Problem(f, xw, f, x64, f"f = lambda x: {source}.{name}({args})")
        raise Skip("takes neither one nor two float arrays")

    return Entry(framework, source, name, "function", build)


def _unary(fn: Callable[..., Any]) -> Callable[[Any], Any]:
    return lambda x: fn(x)


def _binary(fn: Callable[..., Any]) -> Callable[[Any], Any]:
    return lambda x: fn(x[0], x[1])


def _is_float(a: Adapter, y: Any) -> bool:
    if isinstance(y, (tuple, list, dict)):
        return False
    try:
        return np.issubdtype(np.dtype(str(getattr(y, "dtype", "")).split(".")[-1]), np.floating)
    except TypeError:
        return "float" in str(getattr(y, "dtype", "")) or "bfloat16" in str(y.dtype)


def _functions(framework: str, source: str, namespace: Any) -> list[Entry]:
    out = []
    for name in sorted(dir(namespace)):
        obj = getattr(namespace, name)
        if name.startswith("_") or inspect.isclass(obj) or inspect.ismodule(obj):
            continue
        if callable(obj):
            out.append(_function_entry(framework, source, name, obj))
    return out


def torch_special() -> list[Entry]:
    import torch

    return _functions("torch", "torch.special", torch.special)


def jax_nn() -> list[Entry]:
    import jax

    return _functions("jax", "jax.nn", jax.nn)


def jax_scipy_special() -> list[Entry]:
    import jax.scipy.special

    return _functions("jax", "jax.scipy.special", jax.scipy.special)


def tf_math() -> list[Entry]:
    import tensorflow as tf

    return _functions("tensorflow", "tf.math", tf.math)


# ---- modules and layers ----------------------------------------------------------------


def torch_module_db() -> list[Entry]:
    from torch.testing._internal.common_modules import module_db

    out = []
    for info in module_db:
        out.append(Entry("torch", "module_db", f"{info.name}", "module", _torch_module(info)))
    return out


def _torch_module(info: Any) -> Callable[[str, str, int], Problem]:
    def build(region: str, dtype: str, seed: int) -> Problem:
        import torch

        a = adapter("torch")
        try:
            samples = info.module_inputs_func(
                info, device="cpu", dtype=torch.float64, requires_grad=False, training=False
            )
            s = samples[0]
            torch.manual_seed(0)
            module = info.module_cls(*s.constructor_input.args, **s.constructor_input.kwargs)
        except Exception as e:  # noqa: BLE001 - a catalog entry that does not build is a skip
            raise Skip(f"sample does not build: {type(e).__name__}") from None
        module.eval()
        args = dict(enumerate(s.forward_input.args))
        kw = dict(s.forward_input.kwargs)
        floats = [
            k
            for k, v in [*args.items(), *kw.items()]
            if torch.is_tensor(v) and v.is_floating_point()
        ]
        if not floats:
            raise Skip("no float input")
        i = floats[0]
        x = draw(region, tuple({**args, **kw}[i].shape), seed)
        xw, x64 = _rounded(a, x, dtype)
        f = _torch_closure(copy.deepcopy(module).to(getattr(torch, dtype)), args, kw, i, dtype)
        f64 = _torch_closure(copy.deepcopy(module).double(), args, kw, i, "float64")
        _check_output(a, f, xw)
        _check_output(a, f64, x64)
        return Problem(f, xw, f64, x64, f"f = lambda x: m(x)  # m = {_ctor(module)}")

    return build


def _ctor(module: Any) -> str:
    return repr(module).splitlines()[0][:120]


def _torch_closure(
    module: Any, args: dict[int, Any], kw: dict[str, Any], i: int | str, dtype: str
) -> Callable[[Any], Any]:
    """``x -> module(...)`` with ``x`` in place of positional or keyword input ``i``."""
    import torch

    dt = getattr(torch, dtype)

    def cast(v: Any) -> Any:
        return v.to(dt) if torch.is_tensor(v) and v.is_floating_point() else v

    pos = {k: cast(v) for k, v in args.items()}
    named = {k: cast(v) for k, v in kw.items()}

    def f(x: Any) -> Any:
        a, k = dict(pos), dict(named)
        (a if isinstance(i, int) else k)[i] = x  # type: ignore[index]
        return _first_float(module(*[a[j] for j in sorted(a)], **k))

    return f


def _layer_classes(namespace: Any, base: type) -> list[tuple[str, type]]:
    out = []
    for name in sorted(dir(namespace)):
        obj = getattr(namespace, name)
        if not name.startswith("_") and inspect.isclass(obj) and issubclass(obj, base):
            out.append((name, obj))
    return out


def _try_shapes(
    a: Adapter, region: str, dtype: str, seed: int, make: Callable[[Any], Callable[[Any], Any]]
) -> tuple[Any, Any, Callable[[Any], Any]]:
    """Find the first sample shape on which ``make(x)`` builds a float-output function."""
    for shape in SAMPLE_SHAPES:
        xw, x64 = _rounded(a, draw(region, shape, seed), dtype)
        try:
            f = make(xw)
            if _is_float(a, _first_float(f(xw))):
                return xw, x64, f
        except Exception:  # noqa: BLE001, S112 - try the next shape
            continue
    raise Skip("no sample shape gives one float output")


def keras_layers() -> list[Entry]:
    import keras

    out = []
    for name, cls in _layer_classes(keras.layers, keras.layers.Layer):
        out.append(Entry("tensorflow", "keras.layers", name, "module", _keras_layer(cls)))
    return out


def _keras_layer(cls: type) -> Callable[[str, str, int], Problem]:
    def build(region: str, dtype: str, seed: int) -> Problem:
        import keras

        a = adapter("tensorflow")
        try:
            keras.utils.set_random_seed(0)
            cls(dtype=dtype)
        except Exception as e:  # noqa: BLE001 - required arguments: recorded skip
            raise Skip(f"no default construction: {type(e).__name__}: {str(e)[:100]}") from None

        def make(x: Any) -> Callable[[Any], Any]:
            keras.utils.set_random_seed(0)
            layer = cls(dtype=dtype)
            layer(x)
            return lambda v: _first_float(layer(v))

        xw, x64, f = _try_shapes(a, region, dtype, seed, make)
        layer = f.__closure__[0].cell_contents if f.__closure__ else None  # type: ignore[attr-defined]
        f64 = _keras_float64(cls, x64, layer)
        _check_output(a, f, xw)
        _check_output(a, f64, x64)
        return Problem(
            f, xw, f64, x64, f"f = lambda x: layer(x)  # layer = keras.layers.{cls.__name__}()"
        )

    return build


def _keras_float64(cls: type, x64: Any, layer: Any) -> Callable[[Any], Any]:
    import keras

    keras.utils.set_random_seed(0)
    l64 = cls(dtype="float64")
    l64(x64)
    if layer is not None and layer.get_weights():
        l64.set_weights([np.asarray(w, dtype=np.float64) for w in layer.get_weights()])
    return lambda v: _first_float(l64(v))


def _jax_cast(tree: Any, dtype: str) -> Any:
    import jax
    import jax.numpy as jnp

    def cast(v: Any) -> Any:
        if isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, jnp.floating):
            return v.astype(getattr(jnp, dtype))
        return v

    return jax.tree_util.tree_map(cast, tree)


def flax_linen() -> list[Entry]:
    from flax import linen

    out = []
    for name, cls in _layer_classes(linen, linen.Module):
        out.append(Entry("jax", "flax.linen", name, "module", _linen(cls)))
    return out


def _linen(cls: type) -> Callable[[str, str, int], Problem]:
    def build(region: str, dtype: str, seed: int) -> Problem:
        import jax

        a = adapter("jax")
        try:
            model = cls()
        except Exception as e:  # noqa: BLE001 - required arguments: recorded skip
            raise Skip(f"no default construction: {type(e).__name__}: {str(e)[:100]}") from None

        def make(x: Any) -> Callable[[Any], Any]:
            params = model.init(jax.random.PRNGKey(0), a.array(a.numpy(x), "float32"))
            pw = _jax_cast(params, dtype)
            make.params = params  # type: ignore[attr-defined]
            return lambda v: _first_float(model.apply(pw, v))

        xw, x64, f = _try_shapes(a, region, dtype, seed, make)
        p64 = _jax_cast(make.params, "float64")  # type: ignore[attr-defined]
        f64 = lambda v: _first_float(model.apply(p64, v))  # noqa: E731
        _check_output(a, f, xw)
        _check_output(a, f64, x64)
        return Problem(
            f, xw, f64, x64, f"f = lambda x: m.apply(params, x)  # m = flax.linen.{cls.__name__}()"
        )

    return build


def flax_nnx() -> list[Entry]:
    from flax import nnx

    out = []
    for name, cls in _layer_classes(nnx, nnx.Module):
        out.append(Entry("jax", "flax.nnx", name, "module", _nnx(cls)))
    return out


def _nnx(cls: type) -> Callable[[str, str, int], Problem]:
    def build(region: str, dtype: str, seed: int) -> Problem:
        from flax import nnx

        a = adapter("jax")
        model = None
        for kw in ({"rngs": nnx.Rngs(0)}, {}):
            try:
                model = cls(**kw)
                break
            except Exception:  # noqa: BLE001, S112 - try without rngs
                continue
        if model is None:
            raise Skip("no default construction (required arguments)")
        graph, state = nnx.split(model)

        def at(dt: str) -> Callable[[Any], Any]:
            m = nnx.merge(graph, _jax_cast(state, dt))
            return lambda v: _first_float(m(v))

        xw, x64, f = _try_shapes(a, region, dtype, seed, lambda x: at(dtype))
        f64 = at("float64")
        _check_output(a, f, xw)
        _check_output(a, f64, x64)
        return Problem(f, xw, f64, x64, f"f = lambda x: m(x)  # m = flax.nnx.{cls.__name__}(...)")

    return build


def equinox_nn() -> list[Entry]:
    import equinox as eqx

    out = []
    for name, cls in _layer_classes(eqx.nn, eqx.Module):
        out.append(Entry("jax", "equinox.nn", name, "module", _eqx(cls)))
    return out


def _eqx(cls: type) -> Callable[[str, str, int], Problem]:
    def build(region: str, dtype: str, seed: int) -> Problem:
        import jax

        a = adapter("jax")
        model = None
        for kw in ({"key": jax.random.PRNGKey(0)}, {}):
            try:
                model = cls(**kw)
                break
            except Exception:  # noqa: BLE001, S112 - try without a key
                continue
        if model is None:
            raise Skip("no default construction (required arguments)")

        def at(dt: str) -> Callable[[Any], Any]:
            m = _jax_cast(model, dt)
            return lambda v: _first_float(m(v))

        xw, x64, f = _try_shapes(a, region, dtype, seed, lambda x: at(dtype))
        f64 = at("float64")
        _check_output(a, f, xw)
        _check_output(a, f64, x64)
        return Problem(f, xw, f64, x64, f"f = lambda x: m(x)  # m = equinox.nn.{cls.__name__}(...)")

    return build


SOURCES: dict[str, Callable[[], list[Entry]]] = {
    "torch.special": torch_special,
    "module_db": torch_module_db,
    "jax.nn": jax_nn,
    "jax.scipy.special": jax_scipy_special,
    "flax.linen": flax_linen,
    "flax.nnx": flax_nnx,
    "equinox.nn": equinox_nn,
    "tf.math": tf_math,
    "keras.layers": keras_layers,
}
"""Every catalog, by name; each returns its entries (importing its framework)."""


def entries(sources: list[str] | None = None) -> list[Entry]:
    """All entries of ``sources`` (default: every catalog), in catalog order."""
    out: list[Entry] = []
    for s in sources or list(SOURCES):
        out.extend(SOURCES[s]())
    return out
