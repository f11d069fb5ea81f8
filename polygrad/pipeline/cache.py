"""Cache stage: the reference read from, or written to, the on-disk cache.

See :mod:`polygrad.refcache` for the store and :mod:`polygrad.fingerprint`
for what identifies a function. The key holds everything besides the function
and the point that shapes the reference: the options, the backend and its
framework's version, the checked arguments, the modes, and whether the check
compares every entry or projections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..refcache import CachedReference, ReferenceCache, open_cache
from ..reference.differences import DirectionalDerivatives
from .prepare import Options, Prepared

__all__ = ["CacheRequest", "CacheSlot", "cache_request"]


@dataclass(frozen=True)
class CacheSlot:
    """Where the reference of this check is stored: a cache and a key."""

    cache: ReferenceCache
    key: str

    def store(
        self,
        dd: DirectionalDerivatives,
        method: str,
        noise: dict[str, int],
        notes: list[str],
        seconds: float,
    ) -> None:
        """Write the reference (never raises: a full disk only loses the entry)."""
        self.cache.store(self.key, CachedReference(dd, method, dict(noise), tuple(notes), seconds))


@dataclass(frozen=True)
class CacheRequest:
    """The user's function and point with the options that shape the reference."""

    cache: ReferenceCache
    f: Callable[..., Any]
    args: tuple[Any, ...]
    options: dict[str, Any]

    def lookup(
        self, full: bool, notes: list[str]
    ) -> tuple[CacheSlot | None, CachedReference | None]:
        """(slot to store into, stored reference or None); no slot when ``f`` cannot be
        fingerprinted (a note says why)."""
        key, hit = self.cache.lookup(self.f, self.args, notes, dict(self.options, full=full))
        if key is None:
            return None, None
        return CacheSlot(self.cache, key), hit


def cache_request(
    f: Callable[..., Any], args: tuple[Any, ...], prep: Prepared, opts: Options
) -> CacheRequest | None:
    """The cache lookup of this check, or None when ``opts.cache`` asks for none.

    ``f`` and ``args`` are the user's, before any realification or ``order=2``
    transformation, so that the fingerprint sees the user's own code.
    """
    cache = open_cache(opts.cache)
    if cache is None:
        return None
    from ..fingerprint import framework_version

    options = dict(
        reference=opts.reference, strategy=opts.strategy, projections=opts.projections,
        wrt=opts.wrt, order=opts.order, dps=opts.dps, seed=opts.seed,
        batch_size=opts.batch_size, budget=opts.budget, backend=prep.target.backend,
        framework=framework_version(prep.target.backend), argnums=prep.argnums,
        modes=tuple(prep.modes), policy=repr(opts.policy),
    )  # fmt: skip
    return CacheRequest(cache, f, args, options)
