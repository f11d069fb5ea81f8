"""On-disk cache of reference derivatives across runs.

A test suite checks the same functions at the same points on every run; the
reference (the expensive half of a check) changes only when the function, the
point or the options that shape it change. An entry is keyed by

* the function's fingerprint (:mod:`polygrad.fingerprint`: its code, closure,
  globals, weights, recursively),
* the arguments (all of them, their dtypes and bytes), ``argnums``, the
  autodiff modes and the options that change the reference (``reference``,
  ``strategy``, ``projections``, ``wrt``, ``order``, ``dps``, ``seed``,
  ``batch_size``, ``budget``, ``backend``) and whether the check is full,
* polygrad's version and a digest of its own source files, NumPy's version
  and the backend's framework version,

and holds the reference itself (values, error bars, steps, noise, one-sided
estimates and jump flags as raw bytes in a ``.bin``; method, notes, counts and
each array's place, dtype and shape, with a digest of the bytes, as JSON). Any
change of these is a different key, so a stale entry is never read; a file
that cannot be read back exactly (truncated, corrupted, another format) is a
miss. Entries are written atomically (a temporary file, then a rename), so
parallel test workers can share a folder.

Location: ``cache=<folder>``, else ``$POLYGRAD_CACHE_DIR``, else the user
cache folder (``platformdirs.user_cache_dir("polygrad")`` when platformdirs is
installed; otherwise ``$XDG_CACHE_HOME/polygrad`` or ``~/.cache/polygrad``,
``~/Library/Caches/polygrad`` on macOS, ``%LOCALAPPDATA%\\polygrad\\Cache`` on
Windows), in a ``references`` subfolder. ``polygrad cache info`` shows it,
``polygrad cache clear`` empties it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .fingerprint import Unfingerprintable, fingerprint
from .reference.differences import DirectionalDerivatives
from .reference.richardson import Estimate

__all__ = [
    "CACHE_ENV",
    "CachedReference",
    "ReferenceCache",
    "clear",
    "default_dir",
    "info",
    "open_cache",
    "pop_session_default",
    "push_session_default",
    "session_default",
]

CACHE_ENV = "POLYGRAD_CACHE_DIR"
FORMAT = 2
_SUFFIXES = (".bin", ".json")
_ESTIMATES = ("central", "right", "left")
_ARRAYS = ("value", "error", "step", "noise")


def default_dir() -> Path:
    """The cache folder used when none is given: ``$POLYGRAD_CACHE_DIR`` or the user cache.

    Returns
    -------
    pathlib.Path
        The ``references`` folder (it need not exist yet).
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser() / "references"
    return _user_cache() / "references"


def _user_cache() -> Path:
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("polygrad"))
    except ImportError:
        pass
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "polygrad" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "polygrad"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "polygrad"


@dataclass(frozen=True)
class CachedReference:
    """What the reference stage of :func:`polygrad.check` produced, as stored.

    Attributes
    ----------
    dd : DirectionalDerivatives
        The reference derivatives, arrays of shape ``(d, m)``.
    method : str
        ``"mp"``, ``"float64"`` or ``"working"``.
    noise_info : dict
        ``evaluations``, ``detected`` and ``total`` of the noise measurement.
    notes : tuple of str
        The notes the reference stage added to the report.
    seconds : float
        How long the reference took when it was computed.
    """

    dd: DirectionalDerivatives
    method: str
    noise_info: dict[str, int]
    notes: tuple[str, ...]
    seconds: float


@lru_cache(maxsize=1)
def _polygrad_state() -> str:
    """polygrad's version and the sizes and times of its source files (a changed
    reference stage under an unchanged version number is a different key)."""
    from ._version import __version__

    root = Path(__file__).resolve().parent
    stats = []
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        stats.append((str(path.relative_to(root)), st.st_size, st.st_mtime_ns))
    return fingerprint(__version__, stats)


class ReferenceCache:
    """One cache folder: ``load`` and ``store`` of :class:`CachedReference` by key.

    Parameters
    ----------
    root : path
        The folder (created on the first ``store``).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def key(self, f: Any, args: tuple[Any, ...], options: dict[str, Any]) -> str:
        """The key of ``f`` at ``args`` under ``options``.

        Raises
        ------
        Unfingerprintable
            ``f`` or ``args`` hold a value that cannot be hashed.
        """
        return fingerprint(
            "polygrad-reference", FORMAT, _polygrad_state(), np.__version__,
            sorted(options.items()), f, args,
        )  # fmt: skip

    def lookup(
        self, f: Any, args: tuple[Any, ...], notes: list[str], options: dict[str, Any]
    ) -> tuple[str | None, CachedReference | None]:
        """(key, stored entry or None); key None when ``f`` cannot be fingerprinted.

        Appends to ``notes`` why the cache is not used, or that the entry was read.
        """
        try:
            key = self.key(f, args, options)
        except Unfingerprintable as exc:
            notes.append(
                f"the reference was not cached: {exc} cannot be fingerprinted, so a change "
                "of it would not be seen"
            )
            return None, None
        hit = self.load(key)
        if hit is not None:
            notes.append(
                f"the reference was read from the cache in {self.root} (computed in "
                f"{hit.seconds:.2g} s; `polygrad cache clear` empties it)"
            )
        return key, hit

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / (key + ".bin"), folder / (key + ".json")

    def load(self, key: str) -> CachedReference | None:
        """The entry stored under ``key``; None if absent or unreadable."""
        blob_path, meta_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT or meta.get("key") != key:
                return None
            return _decode(meta, _unpack(meta["arrays"], blob_path.read_bytes()))
        except Exception:  # noqa: BLE001 - a missing or damaged entry is a miss
            return None

    def store(self, key: str, entry: CachedReference) -> bool:
        """Write ``entry`` under ``key`` atomically; False if it cannot be stored."""
        try:
            meta, arrays = _encode(entry)
        except _NotStorable:
            return False
        manifest, blob = _pack(arrays)
        meta.update(format=FORMAT, key=key, arrays=manifest)
        blob_path, meta_path = self._paths(key)
        try:
            blob_path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(blob_path, lambda fh: fh.write(blob))
            _atomic_write(meta_path, lambda fh: fh.write(json.dumps(meta).encode()))
        except OSError:
            return False
        return True


def _pack(arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], bytes]:
    """The arrays' bytes end to end, and a manifest of each one's place, dtype and shape
    with a digest of the whole (one read and no archive to parse on a load)."""
    parts, manifest, offset = [], {}, 0
    for name, a in arrays.items():
        data = np.ascontiguousarray(a).tobytes()
        manifest[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset,
                          "size": len(data)}  # fmt: skip
        parts.append(data)
        offset += len(data)
    blob = b"".join(parts)
    digest = hashlib.blake2b(blob, digest_size=16).hexdigest()
    return {"digest": digest, "entries": manifest}, blob


def _unpack(manifest: dict[str, Any], blob: bytes) -> dict[str, np.ndarray]:
    """The arrays of :func:`_pack`; raises where the bytes are not the ones written."""
    if hashlib.blake2b(blob, digest_size=16).hexdigest() != manifest["digest"]:
        raise ValueError("the stored arrays do not match their digest")
    out = {}
    for name, spec in manifest["entries"].items():
        dtype = np.dtype(spec["dtype"])
        if dtype.hasobject:
            raise ValueError("object arrays are not stored")
        start, size = int(spec["offset"]), int(spec["size"])
        data = np.frombuffer(blob[start : start + size], dtype=dtype)
        out[name] = data.reshape(tuple(spec["shape"])).copy()
    return out


def _atomic_write(path: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _NotStorable(Exception):
    pass


def _mp_to_json(a: np.ndarray) -> list[Any]:
    """Object arrays of mpmath numbers as exact ``(sign, mantissa, exponent, bits)``."""
    out: list[Any] = []
    for v in a.ravel():
        raw = getattr(v, "_mpf_", None)
        if raw is not None:
            out.append(["mpf", int(raw[0]), str(int(raw[1])), int(raw[2]), int(raw[3])])
        elif isinstance(v, (float, np.floating, int)):
            out.append(["float", float(v)])
        else:
            raise _NotStorable(type(v).__name__)
    return out


def _mp_from_json(items: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    import mpmath

    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        if item[0] == "mpf":
            out[i] = mpmath.mp.make_mpf((item[1], int(item[2]), item[3], item[4]))
        else:
            out[i] = float(item[1])
    return out.reshape(shape)


def _encode(entry: CachedReference) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {
        "jump_right": np.asarray(entry.dd.jump_right),
        "jump_left": np.asarray(entry.dd.jump_left),
    }
    estimates: dict[str, Any] = {}
    for name in _ESTIMATES:
        est: Estimate = getattr(entry.dd, name)
        for field in _ARRAYS:
            arrays[f"{name}.{field}"] = np.asarray(getattr(est, field), dtype=np.float64)
        mp = {}
        for field in ("value_mp", "error_mp"):
            a = getattr(est, field)
            if a is not None:
                a = np.asarray(a)
                if a.dtype == object:
                    mp[field] = {"shape": list(a.shape), "items": _mp_to_json(a)}
                else:
                    arrays[f"{name}.{field}"] = a.astype(np.float64)
        estimates[name] = {"method": est.method, "evaluations": int(est.evaluations), "mp": mp}
    meta = {
        "method": entry.method,
        "noise_info": {k: int(v) for k, v in entry.noise_info.items()},
        "notes": list(entry.notes),
        "seconds": float(entry.seconds),
        "estimates": estimates,
    }
    return meta, arrays


def _decode(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> CachedReference:
    ests = {}
    shape = arrays["jump_right"].shape
    for name in _ESTIMATES:
        em = meta["estimates"][name]
        fields = {f: arrays[f"{name}.{f}"] for f in _ARRAYS}
        if any(a.shape != shape or a.dtype != np.float64 for a in fields.values()):
            raise ValueError("inconsistent shapes")
        extra: dict[str, Any] = {}
        for field in ("value_mp", "error_mp"):
            if field in em["mp"]:
                spec = em["mp"][field]
                extra[field] = _mp_from_json(spec["items"], tuple(spec["shape"]))
            elif f"{name}.{field}" in arrays:
                extra[field] = arrays[f"{name}.{field}"]
        ests[name] = Estimate(
            **fields, method=str(em["method"]), evaluations=int(em["evaluations"]), **extra
        )
    jr, jl = arrays["jump_right"], arrays["jump_left"]
    if jr.dtype != bool or jl.shape != shape or jl.dtype != bool:
        raise ValueError("inconsistent jump flags")
    dd = DirectionalDerivatives(ests["central"], ests["right"], ests["left"], jr, jl)
    return CachedReference(
        dd=dd,
        method=str(meta["method"]),
        noise_info={str(k): int(v) for k, v in meta["noise_info"].items()},
        notes=tuple(str(n) for n in meta["notes"]),
        seconds=float(meta["seconds"]),
    )


def open_cache(
    cache: bool | str | os.PathLike[str] | ReferenceCache | None,
) -> ReferenceCache | None:
    """The cache that ``check(..., cache=...)`` uses.

    Parameters
    ----------
    cache : bool, path or None
        False/None: no cache; True: :func:`default_dir`; a path: that folder.

    Returns
    -------
    ReferenceCache or None
    """
    if cache is None or cache is False:
        return None
    if cache is True:
        return ReferenceCache(default_dir())
    if isinstance(cache, ReferenceCache):
        return cache
    return ReferenceCache(Path(os.fspath(cache)).expanduser())


_SESSIONS: list[ReferenceCache | None] = []


def push_session_default(cache: bool | str | os.PathLike[str] | None) -> None:
    """Start a test session whose :class:`polygrad.testing.BackendHandle` checks use
    ``cache`` by default (the pytest plugin; sessions nest, as pytester's do)."""
    _SESSIONS.append(open_cache(cache))


def pop_session_default() -> None:
    """End the innermost session started by :func:`push_session_default`."""
    if _SESSIONS:
        _SESSIONS.pop()


def session_default() -> ReferenceCache | None:
    """The cache of the innermost test session (None outside a pytest session)."""
    return _SESSIONS[-1] if _SESSIONS else None


def _entries(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.glob("*/*") if p.suffix in _SUFFIXES or p.name.startswith(".tmp-")]


def info(root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Where the cache is, how many references it holds and their size in bytes."""
    folder = Path(root) if root is not None else default_dir()
    files = _entries(folder)
    return {
        "path": str(folder),
        "entries": sum(1 for p in files if p.suffix == ".json"),
        "bytes": sum(p.stat().st_size for p in files),
    }


def clear(root: str | os.PathLike[str] | None = None) -> int:
    """Delete every cached reference under ``root`` (default: :func:`default_dir`).

    Returns
    -------
    int
        The number of entries removed.
    """
    folder = Path(root) if root is not None else default_dir()
    removed = 0
    for path in _entries(folder):
        with contextlib.suppress(OSError):
            path.unlink()
            removed += path.suffix == ".json"
    for sub in folder.glob("*") if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            sub.rmdir()
    return removed
