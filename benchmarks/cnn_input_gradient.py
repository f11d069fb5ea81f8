"""Time the 784-pixel input-gradient check of a small MNIST-style CNN.

Compares, in one run and on the same model and input,

* Keras/TensorFlow: ``polygrad.check(..., strategy="full")`` against
  ``tf.test.compute_gradient``;
* PyTorch: ``polygrad.check(..., strategy="full")`` against
  ``torch.autograd.gradcheck`` in float32, in float64 and with ``fast_mode=True``
  (float64).

The CNN is Conv2D(32, 3, relu) -> MaxPool 2 -> Conv2D(64, 3, relu) -> MaxPool 2 ->
Flatten -> Dropout(0.5) -> Dense(10, softmax) with seeded random weights, evaluated in
inference mode in float32. The input is a real digit from
``sklearn.datasets.load_digits`` upsampled to 28x28 (14x14 with ``--quick``) in [0, 1];
the function is the categorical cross-entropy as a function of the pixels.

Run as ``python -m benchmarks.cnn_input_gradient [--quick]``; results are printed as a
table and written to ``benchmarks/results/cnn_input_gradient.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = Path(__file__).resolve().parent / "results" / "cnn_input_gradient.json"
TOLERANCE = 1e-2
"""Absolute tolerance used for the pass/fail of ``tf.test.compute_gradient`` (as gradcheck)."""
NOTE = (
    "No tool is warmed up: each model is called once on the input before any timing "
    "(so its weights exist), and first-call tracing/compilation inside each tool is "
    "included in its time."
)


def digit_image(size: int) -> tuple[np.ndarray, int]:
    """A real digit from ``load_digits`` upsampled to ``size`` x ``size`` in [0, 1].

    Parameters
    ----------
    size : int
        Side length of the square image.

    Returns
    -------
    image : numpy.ndarray
        float32 array of shape ``(size, size)``.
    label : int
        The digit's class.
    """
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    img = digits.images[0] / 16.0
    big = tf.image.resize(img[None, :, :, None], (size, size), method="bilinear")
    return np.clip(big.numpy()[0, :, :, 0], 0.0, 1.0).astype(np.float32), int(digits.target[0])


def keras_cnn(size: int, dtype: str = "float32") -> Any:
    """The case-2 Keras CNN for ``size`` x ``size`` inputs, with seeded weights.

    Parameters
    ----------
    size : int
        Side length of the input image.
    dtype : str
        The layers' dtype (``"float64"`` builds the floor's model; same weights).

    Returns
    -------
    keras.Sequential
    """
    import keras

    keras.utils.set_random_seed(1)
    opts = {"bias_initializer": keras.initializers.RandomNormal(stddev=0.05), "dtype": dtype}
    return keras.Sequential(
        [
            keras.Input((size, size, 1), dtype=dtype),
            keras.layers.Conv2D(32, 3, activation="relu", **opts),
            keras.layers.MaxPooling2D(2, dtype=dtype),
            keras.layers.Conv2D(64, 3, activation="relu", **opts),
            keras.layers.MaxPooling2D(2, dtype=dtype),
            keras.layers.Flatten(dtype=dtype),
            keras.layers.Dropout(0.5, dtype=dtype),
            keras.layers.Dense(10, activation="softmax", **opts),
        ]
    )


def torch_cnn(size: int) -> Any:
    """The case-2 CNN in PyTorch for ``size`` x ``size`` inputs, seeded, in eval mode.

    Parameters
    ----------
    size : int
        Side length of the input image.

    Returns
    -------
    torch.nn.Sequential
        float32.
    """
    import torch
    from torch import nn

    side = ((size - 2) // 2 - 2) // 2
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(64 * side * side, 10),
    ).eval()


FLOOR_STEPS = (2.0**-12, 2.0**-11)
"""Two central differences per pixel: the fewest evaluations of ``f`` that give a
derivative together with an estimate of its error (4 per pixel)."""
FLOOR_BATCH = 256
"""Images per batch of the floor's natively batched float64 model calls."""


def floor_points(image: np.ndarray) -> np.ndarray:
    """The points of two central differences along every pixel, in float64.

    Parameters
    ----------
    image : numpy.ndarray
        The input, any shape with ``n`` entries.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(4 n, *image.shape)``: ``x0 ± h e_i`` for both
        :data:`FLOOR_STEPS`.
    """
    x0 = image.astype(np.float64)
    eye = np.eye(x0.size).reshape(x0.size, *x0.shape)
    return np.concatenate([x0 + s * h * eye for h in FLOOR_STEPS for s in (1.0, -1.0)])


def time_floor(per_example_loss: Callable[[np.ndarray], Any], points: np.ndarray) -> float:
    """Seconds to evaluate ``per_example_loss`` on ``points`` in batches of
    :data:`FLOOR_BATCH`, after one untimed batch (tracing, allocation).

    Parameters
    ----------
    per_example_loss : callable
        ``(B, ...)`` float64 points to ``B`` losses (the model's own batch dimension).
    points : numpy.ndarray
        From :func:`floor_points`.

    Returns
    -------
    float
        Wall-clock seconds.
    """
    per_example_loss(points[:FLOOR_BATCH])
    t0 = time.perf_counter()
    for i in range(0, len(points), FLOOR_BATCH):
        per_example_loss(points[i : i + FLOOR_BATCH])
    return time.perf_counter() - t0


def keras_floor(model: Any, image: np.ndarray, label: int) -> float:
    """:func:`time_floor` of the Keras CNN's loss in float64 (a float64 copy of ``model``).

    Parameters
    ----------
    model : keras.Sequential
        From :func:`keras_cnn` (float32); its weights are copied, not changed.
    image : numpy.ndarray
        ``(size, size)`` input.
    label : int
        The digit's class.

    Returns
    -------
    float
        Seconds.
    """
    import keras
    import tensorflow as tf

    model64 = keras_cnn(image.shape[0], "float64")
    model64.set_weights([w.astype(np.float64) for w in model.get_weights()])
    onehot = tf.one_hot([label], 10, dtype=tf.float64)

    @tf.function
    def losses(x: Any) -> Any:
        targets = tf.repeat(onehot, tf.shape(x)[0], axis=0)
        return keras.losses.categorical_crossentropy(targets, model64(x, training=False))

    return time_floor(lambda p: losses(tf.constant(p)).numpy(), floor_points(image)[..., None])


def torch_floor(model: Any, image: np.ndarray, label: int) -> float:
    """:func:`time_floor` of the PyTorch CNN's loss in float64 (a float64 copy of ``model``).

    Parameters
    ----------
    model : torch.nn.Module
        From :func:`torch_cnn`; copied, not changed.
    image : numpy.ndarray
        ``(size, size)`` input.
    label : int
        The digit's class.

    Returns
    -------
    float
        Seconds.
    """
    import torch
    import torch.nn.functional as F

    model64 = copy.deepcopy(model).double()
    target = torch.tensor([label])

    def losses(p: np.ndarray) -> Any:
        with torch.no_grad():
            x = torch.from_numpy(p)[:, None]
            return F.cross_entropy(model64(x), target.expand(len(x)), reduction="none").numpy()

    return time_floor(losses, floor_points(image))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Call ``fn`` and return its result and the wall time in seconds.

    Parameters
    ----------
    fn : callable
        Function of no arguments.

    Returns
    -------
    result : object
        What ``fn`` returned.
    seconds : float
        Wall-clock seconds the call took.
    """
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def polygrad_row(framework: str, report: Any, seconds: float) -> dict[str, Any]:
    """Summarise a polygrad report as a result row.

    Parameters
    ----------
    framework : str
        ``"tensorflow"`` or ``"torch"``.
    report : polygrad.report.Report
        The report of ``polygrad.check``.
    seconds : float
        Wall time of the check.

    Returns
    -------
    dict
        The result row.
    """
    counts = report.counts()
    evals = report.details.get("reference", {}).get("evaluations")
    return {
        "framework": framework,
        "tool": "polygrad.check(strategy='full')",
        "seconds": seconds,
        "evaluations": None if evals is None else int(evals),
        "evaluations_kind": "reference points (batched)",
        "passed": bool(report.ok),
        "result": f"{report.verdict} ok={report.ok} "
        + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
        "verdict": str(report.verdict),
        "counts": counts,
    }


def run_tensorflow(size: int) -> list[dict[str, Any]]:
    """Time polygrad and ``tf.test.compute_gradient`` on the Keras CNN.

    Parameters
    ----------
    size : int
        Side length of the input image.

    Returns
    -------
    list of dict
        One result row per tool.
    """
    import keras
    import tensorflow as tf

    import polygrad as pg

    model = keras_cnn(size)
    image, label = digit_image(size)
    onehot = tf.one_hot([label], 10)
    x = tf.constant(image[None, :, :, None])

    def loss(m: Any, x: Any) -> Any:
        return tf.reduce_sum(keras.losses.categorical_crossentropy(onehot, m(x, training=False)))

    loss(model, x)  # build the model; not a tool warm-up
    rows = []
    # the model closed over, as users write it (promoted to float64 by capture)
    report, sec = timed(lambda: pg.check(lambda x: loss(model, x), x, strategy="full"))
    rows.append(polygrad_row("tensorflow", report, sec))

    calls = [0]

    def f(x: Any) -> Any:
        calls[0] += 1
        return loss(model, x)

    (theoretical, numerical), sec = timed(lambda: tf.test.compute_gradient(f, [x]))
    diff = float(np.max(np.abs(np.asarray(theoretical[0]) - np.asarray(numerical[0]))))
    passed = diff <= TOLERANCE
    rows.append(
        {
            "framework": "tensorflow",
            "tool": "tf.test.compute_gradient",
            "seconds": sec,
            "evaluations": calls[0],
            "evaluations_kind": "function calls",
            "passed": passed,
            "max_abs_diff": diff,
            "result": f"{'pass' if passed else 'FAIL'} (max abs diff {diff:.3g}, "
            f"tol {TOLERANCE:g})",
        }
    )
    return rows


def run_torch(size: int) -> list[dict[str, Any]]:
    """Time polygrad and ``torch.autograd.gradcheck`` on the PyTorch CNN.

    Parameters
    ----------
    size : int
        Side length of the input image.

    Returns
    -------
    list of dict
        One result row per tool.
    """
    import torch
    import torch.nn.functional as F
    from torch import nn

    import polygrad as pg

    model = torch_cnn(size)
    image, label_int = digit_image(size)
    img = torch.tensor(image)[None, None]
    label = torch.tensor([label_int])

    def cross_entropy(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(m(x), y)  # softmax + categorical cross-entropy

    cross_entropy(model, img, label)  # not a tool warm-up: eager, nothing to trace
    rows = []
    report, sec = timed(  # the model and label closed over, as users write it
        lambda: pg.check(lambda x: cross_entropy(model, x, label), img, strategy="full")
    )
    rows.append(polygrad_row("torch", report, sec))

    model64 = copy.deepcopy(model).double()
    cases = [
        ("torch.autograd.gradcheck float32", model, img, False),
        ("torch.autograd.gradcheck float64", model64, img.double(), False),
        ("torch.autograd.gradcheck float64 fast_mode", model64, img.double(), True),
    ]
    for name, m, x0, fast in cases:
        calls = [0]

        def f(x: torch.Tensor, m: nn.Module = m, calls: list[int] = calls) -> torch.Tensor:
            calls[0] += 1
            return cross_entropy(m, x, label)

        x = x0.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            passed, sec = timed(
                lambda f=f, x=x, fast=fast: torch.autograd.gradcheck(
                    f,
                    (x,),
                    eps=1e-3,
                    atol=1e-2,
                    rtol=1e-2,
                    raise_exception=False,
                    fast_mode=fast,
                )
            )
        rows.append(
            {
                "framework": "torch",
                "tool": name,
                "seconds": sec,
                "evaluations": calls[0],
                "evaluations_kind": "function calls",
                "passed": bool(passed),
                "result": "pass" if passed else "FAIL",
            }
        )
    return rows


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Add each tool's time relative to polygrad's in the same framework.

    Parameters
    ----------
    rows : list of dict
        Result rows; modified in place (``ratio_to_polygrad`` and ``comparison``).
    """
    base = {r["framework"]: r["seconds"] for r in rows if r["tool"].startswith("polygrad")}
    for r in rows:
        ratio = r["seconds"] / base[r["framework"]]
        r["ratio_to_polygrad"] = ratio
        if r["tool"].startswith("polygrad"):
            r["comparison"] = "(reference)"
        elif ratio >= 1.0:
            r["comparison"] = f"polygrad is {ratio:.1f}x faster than {r['tool']}"
        else:
            r["comparison"] = f"polygrad is {1.0 / ratio:.1f}x slower than {r['tool']}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """Render the result rows as a plain-text table.

    Parameters
    ----------
    rows : list of dict
        Result rows with ratios.

    Returns
    -------
    str
        The table.
    """
    head = ["framework", "tool", "wall s", "evals", "result", "vs polygrad"]
    body = [
        [
            r["framework"],
            r["tool"],
            f"{r['seconds']:.3g}",
            "?" if r["evaluations"] is None else str(r["evaluations"]),
            r["result"],
            r["comparison"],
        ]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and write the JSON results.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (``sys.argv[1:]`` when None).

    Returns
    -------
    int
        Exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="14x14 input (smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    size = 14 if args.quick else 28

    t0 = time.perf_counter()
    rows = run_tensorflow(size) + run_torch(size)
    add_ratios(rows)
    total = time.perf_counter() - t0

    print(f"CNN input-gradient check: {size}x{size} = {size * size} pixels, float32, inference")
    print(format_table(rows))
    print()
    for r in rows:
        if r["comparison"] != "(reference)":
            print(r["comparison"])
    print()
    print(NOTE)
    print(
        "evals: function calls counted by a wrapper; for polygrad the number of reference "
        f"points (evaluated in batches). compute_gradient passes when max abs diff <= "
        f"{TOLERANCE:g}. fast_mode runs in float64."
    )
    print(f"total {total:.1f} s")

    import tensorflow as tf
    import torch

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "cnn_input_gradient",
        "quick": args.quick,
        "image_size": size,
        "pixels": size * size,
        "note": NOTE,
        "versions": {
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "cpu_count": os.cpu_count(),
        "total_seconds": total,
        "results": rows,
    }
    args.out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
