"""Command line: ``polygrad check | sweep | taylor | backends | demo | init-nox``.

Exit status: 0 when the check passes (``report.ok``), 1 on a failing verdict,
2 on bad usage (unknown file or function, a bad expression or array file, a
factory that does not return ``(f, args)``, a NumPy function without a
derivative, input errors reported by polygrad).

Examples::

    polygrad check model.py:loss --at "1.0, 2.0" --dtype float32
    polygrad check model.py:loss --arg "np.full(1000, 100.0)" --arg @scale.npy --json
    polygrad check cnn.py:make --factory --json
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
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ._cli_inputs import (
    FLOAT_DTYPES,
    Call,
    UsageError,
    call_factory,
    convert_arguments,
    parse_argnums,
    parse_point,
    read_argument,
)
from ._install import pip_install
from ._native_logs import quiet_native_logs

__all__ = ["UsageError", "main", "load_function", "parse_point"]


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


def _framework_of(mod: ModuleType) -> str:
    """The backend a user module works with, from the framework modules it imported."""
    from .backends import DEFAULT_BACKEND, backend_entries

    by_module = {e.module: e.name for e in backend_entries().values() if e.module}
    found = []
    for value in vars(mod).values():
        if isinstance(value, ModuleType):
            key = by_module.get(value.__name__.split(".")[0])
            if key is not None and key not in found:
                found.append(key)
    if len(found) > 1:
        raise UsageError(
            f"{mod.__file__} imports several frameworks ({', '.join(found)}); choose one with "
            "--backend"
        )
    return found[0] if found else DEFAULT_BACKEND


def _gradient_supplied(args: argparse.Namespace, mod: ModuleType) -> bool:
    """``--grad``/``--jac`` given, or ``{name}_grad``/``{name}_jac`` defined next to the
    function: the derivative of a NumPy function."""
    if getattr(args, "grad", None) or getattr(args, "jac", None):
        return True
    name = args.function.rpartition(":")[2]
    return any(callable(getattr(mod, f"{name}_{key}", None)) for key in ("grad", "jac"))


def _command_function(command: str) -> Callable[..., Any]:
    from . import check, sweep, taylor_test

    functions: dict[str, Callable[..., Any]] = {
        "check": check,
        "sweep": sweep,
        "taylor": taylor_test,
    }
    return functions[command]


def _backend_name(name: str, explicit: str | None) -> str:
    """The canonical backend name; a framework that is not installed is a usage error."""
    from .backends import backend_entries, canonical_name

    backend = canonical_name(name)
    if backend is None:
        raise UsageError(
            f"unknown backend {explicit!r}; choose from {', '.join(backend_entries())}"
        )
    entry = backend_entries()[backend]
    if entry.module and importlib.util.find_spec(entry.module) is None:
        how = pip_install(entry.extra) if entry.extra else f"pip install {entry.module}"
        raise UsageError(
            f"the {backend} backend needs {entry.module!r}, which is not installed; install "
            f"it with: {how}"
        )
    return backend


def _flag_options(args: argparse.Namespace) -> dict[str, Any]:
    """Options given on the command line (they override a factory's)."""
    out: dict[str, Any] = {}
    argnums = parse_argnums(getattr(args, "argnums", None))
    if argnums is not None:
        out["argnums"] = argnums
    for key in ("mode", "reference", "strategy", "compare_with"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value
    if getattr(args, "localize", None) is not None:
        out["localize"] = args.localize
    step = _parse_steps(getattr(args, "compare_step", None))
    if step is not None:
        if step.size != 1:
            raise UsageError("--compare-step takes one step, e.g. 2^-13 or 1e-4")
        out["compare_step"] = float(step[0])
    return out


def _supplied_derivatives(
    args: argparse.Namespace, mod: ModuleType, backend: str | None
) -> dict[str, Any]:
    """``--grad``/``--jac``, or ``{name}_grad``/``{name}_jac`` next to a NumPy function."""
    out = {}
    for key in ("grad", "jac"):
        spec = getattr(args, key, None)
        if spec:
            out[key] = load_function(spec, mod)[0]
    if backend is None or args.command not in ("check", "taylor") or out:
        return out
    from .backends import backend_class

    if backend_class(backend).supports_autodiff:
        return out
    name = args.function.rpartition(":")[2]
    for key in ("grad", "jac"):
        cand = getattr(mod, f"{name}_{key}", None)
        if callable(cand):
            return {key: cand}
    raise UsageError(
        f"a NumPy function has no autodiff: pass its derivative with --grad "
        f"file.py:function (or --jac), or define {name}_grad next to {name}"
    )


def _prepare_factory(args: argparse.Namespace) -> Call:
    """``make()`` in the user's file builds the function and its arguments."""
    spec = args.function if args.factory is True else args.factory
    if args.factory is not True and args.function:
        raise UsageError(
            f"got both {args.function!r} and --factory {args.factory!r}; give the factory "
            "once: file.py:make --factory, or --factory file.py:make"
        )
    if not spec:
        raise UsageError("--factory: expected path/to/file.py:make")
    if args.inputs or args.dtype:
        raise UsageError(
            "with a factory, make() returns the arguments in their framework and dtype; "
            "--arg, --at and --dtype do not apply"
        )
    make, mod = load_function(spec)
    name = spec.rpartition(":")[2]
    f, fargs, options = call_factory(make, name, _command_function(args.command))
    options.update(_flag_options(args))
    if args.backend:
        options["backend"] = _backend_name(args.backend, args.backend)
    options.update(_supplied_derivatives(args, mod, None))
    return Call(f, fargs, options)


def _prepare(args: argparse.Namespace) -> Call:
    from ._args import normalize_argnums
    from .backends import DEFAULT_BACKEND

    if args.factory is not None:
        return _prepare_factory(args)
    if not args.function:
        raise UsageError("expected path/to/file.py:function (or --factory file.py:make)")
    if not args.inputs:
        raise UsageError('give the point: --arg EXPR once per argument, or --at "1.0, 2.0"')
    f, mod = load_function(args.function)
    # a supplied gradient (--grad, or f_grad / f_jac next to f) means a NumPy function,
    # whatever else the file imports
    guess = DEFAULT_BACKEND if _gradient_supplied(args, mod) else _framework_of(mod)
    backend = _backend_name(args.backend or guess, args.backend)
    values = [read_argument(kind, text) for kind, text in args.inputs]
    options: dict[str, Any] = {"backend": backend, **_flag_options(args)}
    diff = normalize_argnums(options.get("argnums", 0), len(values))
    fargs = convert_arguments(values, backend, args.dtype, diff)
    options.update(_supplied_derivatives(args, mod, backend))
    return Call(f, fargs, options)


def _print(text: str) -> None:
    """``text`` on stdout; a reader that stopped reading (``| head``) is not an error.

    The rest of the output is discarded (stdout is pointed at the null device, as
    Python's documentation advises), so the exit status stays the check's.
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _emit(args: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    """The text on stdout, or with ``--json`` alone the JSON instead; ``--json FILE`` writes it."""
    if args.json == "-":
        _print(json.dumps(data, indent=2))
        return
    _print(text)
    if args.json:
        p = Path(args.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(data, indent=2))


def _note(args: argparse.Namespace, text: str) -> None:
    """A side remark: on stdout, or on stderr when stdout carries JSON."""
    print(text, file=sys.stderr if args.json == "-" else sys.stdout)


def _cmd_check(args: argparse.Namespace) -> int:
    from . import check
    from .render import render_text

    call = _prepare(args)
    report = check(call.f, *call.args, **call.options)
    _emit(args, render_text(report, color=False if args.no_color else None), report.to_dict())
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

    call = _prepare(args)
    options = {k: v for k, v in call.options.items() if k not in ("grad", "jac")}
    result = sweep(call.f, *call.args, steps=_parse_steps(args.steps), **options)
    _emit(args, str(result), result.to_dict())
    if args.plot:
        result.plot(args.plot)
        _note(args, f"  plot written to {args.plot}")
    return 0


def _cmd_taylor(args: argparse.Namespace) -> int:
    from .taylor import taylor_test

    call = _prepare(args)
    result = taylor_test(call.f, *call.args, **call.options)
    _emit(args, str(result), result.to_dict())
    if args.plot:
        result.plot(args.plot)
        _note(args, f"  plot written to {args.plot}")
    return 0 if result.ok is not False else 1


def backend_info(import_frameworks: bool = True) -> list[dict[str, Any]]:
    """Registered and discovered backends: installed?, version, float64 support, devices.

    Frameworks that are not installed are never imported; installed ones are
    imported only when ``import_frameworks`` (to list their devices).
    """
    from .backends import backend_entries

    entries = backend_entries(load=True).values()
    return [_backend_row(entry, import_frameworks) for entry in entries]


def _backend_row(entry: Any, import_frameworks: bool) -> dict[str, Any]:
    from .backends import backend_class, get_backend

    row: dict[str, Any] = {
        "backend": entry.name,
        "installed": entry.installed,
        "extra": entry.extra,
        "origin": entry.origin,
    }
    if entry.error is not None:
        row["error"] = entry.error
    if not row["installed"]:
        return row
    try:
        cls = backend_class(entry.name)
    except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, not fatal
        return {**row, "installed": False, "error": f"{type(exc).__name__}: {exc}"}
    row["extra"] = entry.extra or cls.extra
    try:
        row["version"] = importlib.metadata.version(cls.distribution or cls.module)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        row["version"] = "?"
    row["float64"] = bool(cls.supports_float64)
    row["autodiff"] = bool(cls.supports_autodiff)
    if import_frameworks:
        try:
            row["devices"] = get_backend(entry.name).devices()
        except Exception as exc:  # noqa: BLE001 - a broken install is reported, not fatal
            row["devices"] = []
            row["error"] = f"{type(exc).__name__}: {exc}"
    return row


def _install_hint(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"error: {row['error']}"
    return pip_install(row["extra"]) if row["extra"] or row["origin"] == "polygrad" else "-"


def _cmd_backends(args: argparse.Namespace) -> int:
    rows = backend_info(import_frameworks=not args.no_devices)
    if args.json:
        p = Path(args.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"backends": rows}, indent=2))
    print(f"{'backend':<11} {'installed':<10} {'version':<14} {'float64':<8} devices")
    for r in rows:
        source = "" if r["origin"] == "polygrad" else f"  [{r['origin']}]"
        if not r["installed"]:
            print(f"{r['backend']:<11} {'no':<10} {'-':<14} {'-':<8} {_install_hint(r)}{source}")
            continue
        dev = ", ".join(r.get("devices", [])) or ("-" if args.no_devices else "none found")
        if "error" in r:
            dev += f"  (error: {r['error']})"
        print(
            f"{r['backend']:<11} {'yes':<10} {r['version']:<14} "
            f"{'yes' if r['float64'] else 'no':<8} {dev}{source}"
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


class _Input(argparse.Action):
    """``--at`` and ``--arg`` append ``(kind, text)`` to one list, in command-line order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        kind = "at" if option_string == "--at" else "arg"
        namespace.inputs = [*(namespace.inputs or []), (kind, str(values))]


def _add_point_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("function", nargs="?", help="path/to/file.py:function (or :make with --factory)")
    p.add_argument(
        "--arg",
        action=_Input,
        dest="inputs",
        metavar="EXPR",
        help="one argument of the function, repeated in order: a Python expression with np "
        'in scope ("np.full(1000, 100.0)"), or @file.npy, or @file.npz:key',
    )
    p.add_argument(
        "--at",
        action=_Input,
        dest="inputs",
        metavar="NUMBERS",
        help='an argument as numbers, e.g. "1.0, 2.0" or "[[1, 2], [3, 4]]"',
    )
    p.add_argument(
        "--factory",
        nargs="?",
        const=True,
        metavar="FILE.py:MAKE",
        help="make() returns (f, args) or (f, args, options): build models in your own code",
    )
    p.add_argument("--argnums", metavar="I,J", help='differentiated arguments, e.g. "0" or "0,2"')
    p.add_argument(
        "--dtype",
        choices=FLOAT_DTYPES,
        help="cast the floating arguments to this dtype (default: NumPy arrays keep theirs, "
        "numbers and lists are float32)",
    )
    p.add_argument(
        "--backend", help="numpy, torch, jax or tensorflow (default: from the file's imports)"
    )
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="print the result as JSON instead of the text; --json FILE writes the JSON to FILE "
        "and prints the text",
    )


def _add_check_options(p: argparse.ArgumentParser) -> None:
    """The options of ``polygrad check`` beyond the point's."""
    p.add_argument("--grad", metavar="FILE.py:FUNC", help="gradient of a NumPy function")
    p.add_argument("--jac", metavar="FILE.py:FUNC", help="Jacobian of a NumPy function")
    p.add_argument("--mode", choices=["auto", "rev", "fwd", "both"], help="default auto")
    p.add_argument("--reference", choices=["auto", "mp", "float64", "working"], help="default auto")
    p.add_argument("--strategy", choices=["auto", "full", "projections"], help="default auto")
    p.add_argument(
        "--compare-with",
        metavar="TOOL",
        help='your own check, stated in its terms: "gradcheck", "tf.test.compute_gradient", '
        '"jax check_grads" or "fd"',
    )
    p.add_argument(
        "--compare-step", metavar="STEP", help="its step (eps/delta/h), absolute, e.g. 2^-13"
    )
    p.add_argument(
        "--localize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after a MISMATCH (or NONFINITE), name the op, layer and source line whose "
        "rule is wrong (or that first makes NaN): in full with --localize; by default "
        "within the check's own time; never with --no-localize",
    )
    p.add_argument("--plot", metavar="FILE", help="heat map of per-entry errors (PNG/SVG)")
    p.add_argument("--no-color", action="store_true", help="plain text even on a terminal")


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
    _add_check_options(p)
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

    p = sub.add_parser("cache", help="where cached references live; clear them")
    p.add_argument("action", choices=["info", "clear"], help="show the folder, or empty it")
    p.add_argument(
        "--dir",
        metavar="DIR",
        help="the folder given as check(..., cache=DIR) "
        "(default: $POLYGRAD_CACHE_DIR/references or the user cache folder)",
    )
    p.set_defaults(run=_cmd_cache)
    return parser


def _cmd_cache(args: argparse.Namespace) -> int:
    """``polygrad cache info|clear``: the on-disk reference cache (:mod:`polygrad.refcache`)."""
    from . import refcache

    root = Path(args.dir) if args.dir else refcache.default_dir()
    if args.action == "clear":
        print(f"removed {refcache.clear(root)} cached references from {root}")
        return 0
    stats = refcache.info(root)
    print(f"reference cache: {stats['path']}")
    print(f"entries: {stats['entries']}, {stats['bytes'] / 1e6:.2f} MB")
    plugin = Path(".pytest_cache") / "d" / "polygrad" / "references"
    if not args.dir and not os.environ.get(refcache.CACHE_ENV) and plugin.is_dir():
        here = refcache.info(plugin)
        entries = f"{here['entries']} entr{'y' if here['entries'] == 1 else 'ies'}"
        print(
            f"this project's pytest plugin cache: {plugin} ({entries}, "
            f"{here['bytes'] / 1e6:.2f} MB; `pytest --cache-clear` or --dir empties it)"
        )
    return 0


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
