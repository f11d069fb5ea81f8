"""Time the re-execution of JAX functions on mpmath numbers (``polygrad.mpexec.jaxpr``).

For a few typical functions (an elementwise chain, a small MLP, softmax
cross-entropy, a scan-based recurrence, a small CNN with pooling), the
float64 jaxpr is evaluated on mpmath numbers at 30 and 50 decimal digits, and
the time is reported per thousand primitive applications (an equation of the
jaxpr evaluated once; an equation inside a loop counts once per trip) and per
evaluation; the mean number of scalar results of an application is recorded
beside it, since the cost of an application grows with the size of its arrays.
The mp reference of ``polygrad.check`` makes ``2 * levels + 1`` evaluations per
checked direction (29 with the default 14 levels), so the
per-evaluation time times that count is the cost of one Jacobian column.

Run as ``python -m benchmarks.mp_reexecution [--quick] [--out FILE]``; results
are printed as a table and written to ``benchmarks/results/mp_reexecution.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "mp_reexecution.json"
DIGITS = (30, 50)


def functions(quick: bool) -> dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]]:
    """The benchmarked functions and their input shapes (smaller with ``quick``)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(0)
    width = 4 if quick else 16
    W1 = rng.standard_normal((width, 8)).astype(np.float32)
    W2 = rng.standard_normal((3, width)).astype(np.float32)
    K = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    side = 4 if quick else 8

    def chain(x: Any) -> Any:
        return jnp.sum(jnp.tanh(jnp.exp(-(x**2)) * jnp.sin(x) + jnp.log1p(x**2)))

    def mlp(x: Any) -> Any:
        h = jnp.tanh(jnp.asarray(W1, x.dtype) @ x)
        return jax.nn.log_softmax(jnp.asarray(W2, x.dtype) @ h)[0]

    def recurrence(x: Any) -> Any:
        def step(c: Any, a: Any) -> tuple[Any, Any]:
            return jnp.tanh(0.9 * c + a), c

        return lax.scan(step, jnp.zeros((), x.dtype), x)[0]

    def cnn(x: Any) -> Any:
        y = lax.conv_general_dilated(
            x.reshape(1, 1, side, side), jnp.asarray(K, x.dtype), (1, 1), "SAME"
        )
        y = lax.reduce_window(
            jax.nn.relu(y), -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"
        )
        return jax.nn.logsumexp(y)

    return {
        "elementwise chain": (chain, (8 if quick else 64,)),
        f"MLP 8-{width}-3 + log_softmax": (mlp, (8,)),
        "scan recurrence": (recurrence, (5 if quick else 20,)),
        f"CNN {side}x{side} conv3x3x2 + maxpool": (cnn, (side * side,)),
    }


def time_one(
    f: Callable[[Any], Any], shape: tuple[int, ...], dps: int, repeats: int
) -> dict[str, Any]:
    """Seconds per evaluation and per thousand primitive applications at ``dps`` digits."""
    import jax

    from polygrad.backends.mpmath import make_context
    from polygrad.mpexec.jaxpr import _Interpreter

    with jax.enable_x64(True):
        x = np.random.default_rng(1).standard_normal(shape)
        closed = jax.make_jaxpr(f)(x)
    ip = _Interpreter(make_context(dps))
    leaves = [np.asarray(x)]
    ip.run(closed, leaves)  # the first run builds the index maps of data-movement primitives
    ip.applications = ip.elements = 0
    t0 = time.perf_counter()
    for _ in range(repeats):
        ip.run(closed, leaves)
    seconds = time.perf_counter() - t0
    per_eval = ip.applications // repeats
    return {
        "dps": dps,
        "applications_per_evaluation": per_eval,
        "scalar_results_per_application": ip.elements / max(ip.applications, 1),
        "seconds_per_evaluation": seconds / repeats,
        "seconds_per_1000_applications": 1000 * seconds / max(ip.applications, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table and write the JSON results.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status (0).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, few repeats")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    opts = parser.parse_args(argv)
    import jax
    import mpmath

    repeats = 2 if opts.quick else 10
    rows = []
    print(
        f"{'function':<34} {'dps':>4} {'apps/eval':>10} {'scalars/app':>11} {'s/eval':>10} "
        f"{'s/1000 apps':>12}"
    )
    for name, (f, shape) in functions(opts.quick).items():
        for dps in DIGITS:
            r = {"function": name, "input_shape": list(shape), **time_one(f, shape, dps, repeats)}
            rows.append(r)
            print(
                f"{name:<34} {dps:>4} {r['applications_per_evaluation']:>10} "
                f"{r['scalar_results_per_application']:>11.1f} "
                f"{r['seconds_per_evaluation']:>10.4f} {r['seconds_per_1000_applications']:>12.4f}"
            )
    result = {
        "description": __doc__.splitlines()[0],
        "quick": opts.quick,
        "repeats": repeats,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "jax": jax.__version__,
        "mpmath": mpmath.__version__,
        "mpmath_backend": mpmath.libmp.BACKEND,
        "results": rows,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
