"""Command line: ``polygrad check | sweep | taylor | backends | demo | init-nox``.

Exit status: 0 when the check passes (``report.ok``), 1 on a failing verdict,
2 on bad usage (unknown file or function, unparsable point, a NumPy function
without a derivative, input errors reported by polygrad).

Examples::

    polygrad check model.py:loss --at "1.0, 2.0" --dtype float32
    polygrad check mylib.py:f --grad mylib.py:f_grad --at "0.5" --json report.json
    polygrad sweep model.py:loss --at "1.0" --dtype float32 --plot sweep.png
    polygrad backends
    polygrad demo --out polygrad-demo
    polygrad init-nox --frameworks torch,jax --path myproject
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ._install import pip_install
from ._native_logs import quiet_native_logs

__all__ = ["main", "load_function", "parse_point"]

FRAMEWORKS = ("torch", "jax", "tensorflow")
_DIST = {"numpy": "numpy", "torch": "torch", "jax": "jax", "tensorflow": "tensorflow"}


class UsageError(Exception):
    """Bad command-line usage: reported on stderr, exit status 2."""


def _load_module(path: str) -> ModuleType:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no such file: {path}")
    name = "_polygrad_user_" + "".join(c if c.isalnum() else "_" for c in p.stem)
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    sys.path.insert(0, str(p.resolve().parent))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod


def load_function(
    spec: str, default_module: ModuleType | None = None
) -> tuple[Callable, ModuleType]:
    """Load ``path/to/file.py:function`` (or ``function`` from ``default_module``).

    Returns
    -------
    function, module

    Raises
    ------
    UsageError
        The file or the function does not exist.
    """
    if ":" in spec:
        path, _, name = spec.rpartition(":")
        mod = _load_module(path)
    elif default_module is not None:
        name, mod = spec, default_module
    else:
        raise UsageError(f"expected path/to/file.py:function, got {spec!r}")
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise UsageError(f"{mod.__file__} defines no function {name!r}")
    return fn, mod


def parse_point(text: str) -> np.ndarray:
    """``"1.0, 2.0"`` → ``array([1., 2.])``; JSON nested lists give arrays of that shape.

    Raises
    ------
    UsageError
        The text is not a comma-separated list of numbers or a JSON array.
    """
    t = text.strip()
    if not t.startswith("["):
        t = "[" + t + "]"
    try:
        value = json.loads(t)
        arr = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise UsageError(f'--at {text!r}: expected numbers such as "1.0, 2.0" ({exc})') from exc
    if arr.size == 0:
        raise UsageError("--at: the point is empty")
    return arr


def _framework_of(mod: ModuleType) -> str:
    """The framework a user module works with, from the modules it imported."""
    found = []
    for value in vars(mod).values():
        if isinstance(value, ModuleType):
            root = value.__name__.split(".")[0]
            if root in FRAMEWORKS and root not in found:
                found.append(root)
    if len(found) > 1:
        raise UsageError(
            f"{mod.__file__} imports several frameworks ({', '.join(found)}); choose one with "
            "--backend"
        )
    return found[0] if found else "numpy"


def _to_backend(x: np.ndarray, backend: str, dtype: str) -> Any:
    if backend == "numpy":
        return x.astype(dtype)
    if backend == "torch":
        import torch

        return torch.tensor(x, dtype=getattr(torch, dtype))
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        if dtype == "float64":
            jax.config.update("jax_enable_x64", True)
        return jnp.asarray(x, dtype=dtype)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.constant(x, dtype=getattr(tf, dtype))
    raise UsageError(f"unknown backend {backend!r}")


def _prepare(args: argparse.Namespace) -> tuple[Callable, tuple[Any, ...], dict[str, Any], str]:
    from .backends import _ALIASES, BACKEND_MODULES

    f, mod = load_function(args.function)
    # a supplied gradient means a NumPy function, whatever else the file imports
    backend = args.backend or ("numpy" if getattr(args, "grad", None) else _framework_of(mod))
    backend = _ALIASES.get(backend.lower(), backend.lower())
    if backend not in BACKEND_MODULES:
        raise UsageError(
            f"unknown backend {args.backend!r}; choose from {', '.join(BACKEND_MODULES)}"
        )
    _, extra, module = BACKEND_MODULES[backend]
    if module and importlib.util.find_spec(module) is None:
        raise UsageError(
            f"the {backend} backend needs {module!r}, which is not installed; install it with: "
            + pip_install(extra)
        )
    x = _to_backend(parse_point(args.at), backend, args.dtype)
    options: dict[str, Any] = {"backend": backend}
    for key in ("grad", "jac"):
        spec = getattr(args, key, None)
        if spec:
            options[key] = load_function(spec, mod)[0]
    if (
        backend == "numpy"
        and args.command in ("check", "taylor")
        and not (options.get("grad") or options.get("jac"))
    ):
        name = args.function.rpartition(":")[2]
        for key in ("grad", "jac"):
            cand = getattr(mod, f"{name}_{key}", None)
            if callable(cand):
                options[key] = cand
                break
        else:
            raise UsageError(
                f"a NumPy function has no autodiff: pass its derivative with --grad "
                f"file.py:function (or --jac), or define {name}_grad next to {name}"
            )
    return f, (x,), options, backend


def _write_json(path: str | None, data: dict[str, Any]) -> None:
    if path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(data, indent=2))


def _cmd_check(args: argparse.Namespace) -> int:
    from . import check
    from .render import render_text

    f, fargs, options, _ = _prepare(args)
    report = check(f, *fargs, mode=args.mode, **options)
    print(render_text(report, color=False if args.no_color else None))
    _write_json(args.json, report.to_dict())
    if args.plot:
        from .plot import plot_report

        plot_report(report, args.plot)
    return 0 if report.ok else 1


def _parse_steps(text: str | None) -> np.ndarray | None:
    if not text:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            out.append(2.0 ** float(part[2:]) if part.startswith("2^") else float(part))
        except ValueError as exc:
            raise UsageError(
                f'--steps: cannot read {part!r} (use e.g. "2^-5, 2^-6" or 1e-3)'
            ) from exc
    return np.asarray(out)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import sweep

    f, fargs, options, _ = _prepare(args)
    options.pop("grad", None)
    options.pop("jac", None)
    result = sweep(f, *fargs, steps=_parse_steps(args.steps), **options)
    print(result)
    _write_json(args.json, result.to_dict())
    if args.plot:
        result.plot(args.plot)
        print(f"  plot written to {args.plot}")
    return 0


def _cmd_taylor(args: argparse.Namespace) -> int:
    from .taylor import taylor_test

    f, fargs, options, _ = _prepare(args)
    result = taylor_test(f, *fargs, **options)
    print(result)
    _write_json(args.json, result.to_dict())
    if args.plot:
        result.plot(args.plot)
        print(f"  plot written to {args.plot}")
    return 0 if result.ok is not False else 1


def backend_info(import_frameworks: bool = True) -> list[dict[str, Any]]:
    """Installed frameworks, versions, float64 support and devices.

    Frameworks that are not installed are never imported; installed ones are
    imported only when ``import_frameworks`` (to list their devices).
    """
    from .backends import BACKEND_MODULES, _backend_class

    rows = []
    for key, (_, extra, module) in BACKEND_MODULES.items():
        installed = not module or importlib.util.find_spec(module) is not None
        row: dict[str, Any] = {"backend": key, "installed": installed, "extra": extra}
        if not installed:
            rows.append(row)
            continue
        try:
            row["version"] = importlib.metadata.version(_DIST[key])
        except importlib.metadata.PackageNotFoundError:
            row["version"] = "?"
        cls = _backend_class(key)
        row["float64"] = bool(cls.supports_float64)
        row["autodiff"] = bool(cls.supports_autodiff)
        if import_frameworks:
            try:
                row["devices"] = _devices(key)
            except Exception as exc:  # noqa: BLE001 - a broken install is reported, not fatal
                row["devices"] = []
                row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows


def _devices(key: str) -> list[str]:
    if key == "numpy":
        return ["cpu"]
    if key == "torch":
        import torch

        out = ["cpu"]
        if torch.cuda.is_available():
            out += [
                f"cuda:{i} ({torch.cuda.get_device_name(i)})"
                for i in range(torch.cuda.device_count())
            ]
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            out.append("mps (no float64)")
        return out
    if key == "jax":
        import jax

        return [f"{d.platform}:{d.id}" for d in jax.devices()]
    if key == "tensorflow":
        import tensorflow as tf

        return [d.name.replace("/physical_device:", "") for d in tf.config.list_physical_devices()]
    return []


def _cmd_backends(args: argparse.Namespace) -> int:
    rows = backend_info(import_frameworks=not args.no_devices)
    if args.json:
        _write_json(args.json, {"backends": rows})
    print(f"{'backend':<11} {'installed':<10} {'version':<14} {'float64':<8} devices")
    for r in rows:
        if not r["installed"]:
            print(f"{r['backend']:<11} {'no':<10} {'-':<14} {'-':<8} " + pip_install(r["extra"]))
            continue
        dev = ", ".join(r.get("devices", [])) or ("-" if args.no_devices else "none found")
        if "error" in r:
            dev += f"  (error: {r['error']})"
        print(
            f"{r['backend']:<11} {'yes':<10} {r['version']:<14} "
            f"{'yes' if r['float64'] else 'no':<8} {dev}"
        )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.out, quick=args.quick)


def _cmd_init_nox(args: argparse.Namespace) -> int:
    from .testing.nox_template import write_noxfile

    names = [n for n in args.frameworks.split(",") if n.strip()] if args.frameworks else None
    try:
        path = write_noxfile(args.path, names, force=args.force)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise UsageError(f"--frameworks: {exc}") from exc
    sessions = [
        line.split('"')[1]
        for line in path.read_text().splitlines()
        if line.startswith("@nox.session(name=")
    ]
    print(f"wrote {path} with sessions {', '.join(sessions)}; run them with: nox")
    return 0


def _add_point_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("function", help="path/to/file.py:function")
    p.add_argument("--at", required=True, help='the point, e.g. "1.0, 2.0" or "[[1, 2], [3, 4]]"')
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float16", "bfloat16", "float32", "float64"],
        help="working dtype of the input (default float32)",
    )
    p.add_argument(
        "--backend", help="numpy, torch, jax or tensorflow (default: from the file's imports)"
    )
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="polygrad",
        description="Is this autodiff gradient right, or is the disagreement only round-off?",
    )
    parser.add_argument("--version", action="version", version=f"polygrad {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("check", help="check the gradient of a function at a point")
    _add_point_options(p)
    p.add_argument("--grad", metavar="FILE.py:FUNC", help="gradient of a NumPy function")
    p.add_argument("--jac", metavar="FILE.py:FUNC", help="Jacobian of a NumPy function")
    p.add_argument("--mode", default="auto", choices=["auto", "rev", "fwd", "both"])
    p.add_argument("--plot", metavar="FILE", help="heat map of per-entry errors (PNG/SVG)")
    p.add_argument("--no-color", action="store_true", help="plain text even on a terminal")
    p.set_defaults(run=_cmd_check)

    p = sub.add_parser("sweep", help="finite-difference error against the step (V curve)")
    _add_point_options(p)
    p.add_argument("--steps", help='steps, e.g. "2^-5, 2^-6, 2^-7" (default: a wide range)')
    p.add_argument("--plot", metavar="FILE", help="save the log-log plot (PNG/SVG)")
    p.set_defaults(run=_cmd_sweep)

    p = sub.add_parser("taylor", help="Taylor-remainder test (slope 2: right, 1: wrong)")
    _add_point_options(p)
    p.add_argument("--grad", metavar="FILE.py:FUNC", help="gradient of a NumPy function")
    p.add_argument("--jac", metavar="FILE.py:FUNC", help="Jacobian of a NumPy function")
    p.add_argument("--plot", metavar="FILE", help="save the log-log plot (PNG/SVG)")
    p.set_defaults(run=_cmd_taylor)

    p = sub.add_parser("backends", help="installed frameworks, versions, float64, devices")
    p.add_argument("--no-devices", action="store_true", help="do not import frameworks")
    p.add_argument("--json", metavar="FILE")
    p.set_defaults(run=_cmd_backends)

    p = sub.add_parser("demo", help="run the built-in examples and write plots and reports")
    p.add_argument("--out", default="polygrad-demo", help="output folder (default ./polygrad-demo)")
    p.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=_cmd_demo)

    p = sub.add_parser(
        "init-nox", help="write a noxfile.py with one gradient-test session per framework"
    )
    p.add_argument(
        "--frameworks",
        metavar="NAMES",
        help="comma-separated: numpy, torch, jax, tensorflow (default: all four)",
    )
    p.add_argument("--path", default=".", metavar="DIR", help="project folder (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite an existing noxfile.py")
    p.set_defaults(run=_cmd_init_nox)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 pass, 1 failing verdict, 2 usage)."""
    from .errors import PolygradError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        with quiet_native_logs():
            return int(args.run(args))
    except UsageError as exc:
        print(f"polygrad {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (PolygradError, TypeError, ValueError) as exc:
        print(f"polygrad {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - the user's function raised
        print(f"polygrad {args.command}: the function raised an exception:", file=sys.stderr)
        traceback.print_exc()
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
