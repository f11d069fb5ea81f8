"""Rules of the PyTorch graph interpreter for ``torch.special`` functions.

Each is the mathematical function on mpmath numbers, with PyTorch's values at its poles
and domain edges: ``polygamma`` (NaN at the poles), the modified Bessel functions
``i0``, ``i1`` and their exponentially scaled forms, ``log_ndtr`` and ``ndtri``,
``xlog1py`` (0 where ``x`` is 0), ``entr`` (``-x log x``; 0 at 0, ``-inf`` below),
``sinc`` (1 at 0), the Hurwitz ``zeta`` and the multivariate ``mvlgamma``. A float64
kernel with a smooth error (``trigamma`` near 4 is off by 3e-11) then does not pass as
the function's derivative: the mp reference is the function the code means.
"""

from __future__ import annotations

from typing import Any

from .elementwise import real
from .jaxpr_rules import _polygamma
from .torch_env import _Env, _rule


@_rule("aten.polygamma.default")
def _polygamma_rule(E: _Env, a: dict[str, Any]) -> Any:
    n = int(a["n"])
    return E.map(real(E.ctx, lambda x: _polygamma(E.ctx, n, x)), a["self"])


def _bessel(E: _Env, a: dict[str, Any], order: int, scaled: bool) -> Any:
    c = E.ctx

    def fn(x: Any) -> Any:
        v = c.besseli(order, x)
        return v * c.exp(-abs(x)) if scaled else v

    return E.map(real(c, fn), a["self"])


_rule("aten.i0.default", "aten.special_i0.default")(lambda E, a: _bessel(E, a, 0, False))
_rule("aten.special_i0e.default")(lambda E, a: _bessel(E, a, 0, True))
_rule("aten.special_i1.default")(lambda E, a: _bessel(E, a, 1, False))
_rule("aten.special_i1e.default")(lambda E, a: _bessel(E, a, 1, True))


@_rule("aten.special_log_ndtr.default")
def _log_ndtr(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    return E.map(real(c, lambda x: c.log(c.ncdf(x))), a["self"])


@_rule("aten.special_ndtri.default")
def _ndtri(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx

    def fn(p: Any) -> Any:
        if p == 0 or p == 1:
            return -E.inf if p == 0 else E.inf
        if p < 0 or p > 1:
            return E.nan
        return c.sqrt(2) * c.erfinv(2 * p - 1)

    return E.map(real(c, fn), a["self"])


@_rule("aten.special_xlog1py.default")
def _xlog1py(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    return E.map(lambda x, y: x * 0 if x == 0 and not c.isnan(y) else x * c.log1p(y),
                 a["self"], a["other"])  # fmt: skip


@_rule("aten.special_entr.default")
def _entr(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx

    def fn(x: Any) -> Any:
        if c.isnan(x):
            return x
        if x > 0:
            return -x * c.log(x)
        return x * 0 if x == 0 else -E.inf

    return E.map(fn, a["self"])


@_rule("aten.sinc.default")
def _sinc(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    return E.map(lambda x: c.mpf(1) if x == 0 else c.sinpi(x) / (c.pi * x), a["self"])


@_rule("aten.special_zeta.default")
def _zeta(E: _Env, a: dict[str, Any]) -> Any:
    c = E.ctx
    return E.map(real(c, lambda s, q: c.zeta(s, q)), a["self"], a["other"])


@_rule("aten.mvlgamma.default")
def _mvlgamma(E: _Env, a: dict[str, Any]) -> Any:
    c, p = E.ctx, int(a["p"])

    def fn(x: Any) -> Any:
        terms = sum(c.loggamma(x - c.mpf(j) / 2) for j in range(p))
        return terms + p * (p - 1) * c.log(c.pi) / 4

    return E.map(real(c, fn), a["self"])
