"""``polygrad demo``: the two questions polygrad was built for, run on every installed framework.

1. *"The error grows as the step shrinks"* — the log-density of a normal
   distribution, ``f(x) = Σ -(x_i - loc)² / (2 scale_i²)``, float32, at
   ``x = 1`` (n = 1, ``scale`` drawn from U[0.5, 1.5) with seed 0): NumPy (with its
   exact gradient supplied), TensorFlow (hand-written and
   ``tfp.distributions.Normal``), PyTorch and JAX. Each is checked (PASS
   expected) and swept: the sweep plot shows the V-shaped error of a plain
   central difference and the step to use.
2. *A planted bug*: a custom gradient that forgets the factor 2 of a chain
   rule (``torch.autograd.Function`` where PyTorch is installed, else a
   hand-written NumPy gradient) — caught as MISMATCH, with the Taylor test's
   slope 1 as independent evidence.
3. *"My manual gradient of a CNN disagrees with autodiff"* — the gradient of
   the cross-entropy loss of a small seeded CNN (Conv–ReLU–MaxPool twice,
   Dense–softmax) with respect to a real 28×28 digit (``load_digits`` from
   scikit-learn, 8×8 upsampled bilinearly), checked in one batched pass (Keras when
   TensorFlow is installed, else PyTorch), the model, the label and the loss
   object closed over as in the user's code. The image is used as it is: where
   a ReLU sits at 0 or a max-pooling window ties, the loss has a kink, and
   those pixels are NONSMOOTH (not an error; the check is ok). The user's own
   loop (central differences, ``h = 1e-4``, ``max |a - b| / max(1e-8, |a| + |b|)``)
   is re-run and its number explained (``compare_with=``).

Case 1 in TensorFlow also re-runs that user's ``tf.test.compute_gradient`` at
``delta = 2^-13`` and splits its number into round-off, truncation and
autodiff error. What the demo imports beyond the frameworks is the ``demo``
extra (scikit-learn, scipy, matplotlib); ``all`` includes it.

Every example is guarded: a backend that raises is reported and the demo
goes on. Plots (PNG, needs matplotlib) and JSON reports are written to the
output folder.
"""

from __future__ import annotations

import importlib.util
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._install import pip_install
from ._native_logs import quiet_native_logs
from .render_terms import your_terms_lines

__all__ = ["DemoResult", "run_demo", "demo"]

N_DIM = 1
EVAL_AT = 1.0
USER_STEPS = 2.0 ** -np.arange(5, 14)
USER_TOOL: dict[str, Any] = {"compare_with": "tf.test.compute_gradient", "compare_step": 2.0**-13}
"""Case 1's own check, re-run and explained in the report: compute_gradient at its smallest step."""
CASE2_TOOL: dict[str, Any] = {"compare_with": "central differences", "compare_step": 1e-4}
"""Case 2's own check: a loop of central differences, ``h = 1e-4``, the relative metric."""


@dataclass
class Outcome:
    """One example's result line."""

    example: str
    framework: str
    status: str  # verdict, "SKIPPED" or "ERROR"
    expected: str  # a verdict, or alternatives joined by " or "
    detail: str = ""
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    more: list[str] = field(default_factory=list)  # lines printed below the result line

    @property
    def as_expected(self) -> bool:
        return self.status in self.expected.split(" or ")


@dataclass
class DemoResult:
    """Everything the demo did: outcomes, skipped examples with the extra to install."""

    outcomes: list[Outcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.as_expected for o in self.outcomes if o.status not in ("SKIPPED",))


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _scale(n: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(0.5, 1.5, size=n)


def _value_line(report: Any, i: int) -> str:
    """Entry ``i``: autodiff and reference, with their gap beside the tolerance that judges it;
    the two values with the digits that show where they part."""
    e = report.entries
    diff, tol = float(e.difference[i]), float(e.tolerance[i])
    within = "within" if diff <= tol else "far outside"
    d = _digits(float(e.reference[i]), diff)
    return (
        f"{e.names[i]}: autodiff {e.autodiff[i]:.{d}g}, reference {e.reference[i]:.{d}g} "
        f"(error bar ± {e.reference_error[i]:.1g}); |diff| {diff:.2g}, {within} the "
        f"tolerance {tol:.2g}"
    )


def _digits(value: float, diff: float) -> int:
    """Significant digits that show two numbers ``diff`` apart near ``value`` as different
    (at least 6, at most 17)."""
    if diff <= 0 or value == 0 or not np.isfinite(value / diff):
        return 6
    return int(min(17, max(6, np.ceil(np.log10(abs(value) / diff)) + 2)))


def _kink_lines(report: Any) -> list[str]:
    """The entries at a kink (NONSMOOTH) of a check, said as what they are, with one example."""
    from .report import SEVERITY, Verdict

    e = report.entries
    at_kink = np.flatnonzero(e.status == SEVERITY[Verdict.NONSMOOTH])
    smooth = len(e.names) - at_kink.size
    if at_kink.size == 0:
        return [f"all {smooth} entries: f is smooth there, and autodiff agrees with the reference"]
    i = int(at_kink[np.argmax(e.difference[at_kink])])
    return [
        f"{smooth} entries where f is smooth agree with the reference; {at_kink.size} sit at a "
        "kink of the CNN (a ReLU at 0 or a max-pooling tie), where f has no derivative: its "
        "left and right derivatives differ, and a central difference returns neither. That is "
        "NONSMOOTH, which is not a gradient error (the check is ok).",
        f"e.g. {e.names[i]}: left derivative {e.left[i]:.4g}, right {e.right[i]:.4g}, autodiff "
        f"{e.autodiff[i]:.4g}, central difference {e.reference[i]:.4g} (|diff| "
        f"{e.difference[i]:.2g}, against a tolerance of {e.tolerance[i]:.2g} for a smooth entry)"
        + _beyond_sides(e, i),
    ]


def _beyond_sides(e: Any, i: int) -> str:
    """Why autodiff may lie beyond both one-sided derivatives at a kink, where it does."""
    lo, hi = sorted((float(e.left[i]), float(e.right[i])))
    if lo <= float(e.autodiff[i]) <= hi:
        return ""
    return (
        "; autodiff lies beyond both, which a conservative gradient may do where several ReLUs "
        "and pooling windows switch at once (each takes one side of its own kink)"
    )


def _plain_difference(s: Any) -> str:
    """What a plain float32 central difference reads over the user's steps, and its best
    step with what that step rests on."""
    worst_user = max(s.measured_error_at(h) for h in USER_STEPS if h in s.steps)
    best = s.optimal_step
    line = (
        f"a plain float32 central difference is off by {s.measured_error_at(2.0**-13):.1g} "
        f"at h = 2^-13 (round-off; at most {worst_user:.1g} over the user's steps 2^-5 to "
        f"2^-13) and by {s.measured_error_at(best):.1g} at h = {best:.3g}, the step that its "
        "measured round-off and truncation predict to be best"
    )
    if best >= float(np.max(s.steps)):
        line += (
            " (the largest swept): this f is quadratic (f''' = 0, measured "
            f"{float(np.max(np.abs(s.third_derivative))):.1g}), so a central difference has no "
            "truncation error at any step and only round-off, which falls like 1/h, is left; a "
            "function with curvature has a smaller best step (the sweep plot shows both)"
        )
    return line


class _Demo:
    def __init__(self, out: Path, say: Callable[[str], None]) -> None:
        self.out = out
        self.say = say
        self.result = DemoResult()
        self.plots = _installed("matplotlib")

    # ---- helpers ------------------------------------------------------------------
    def _save_json(self, name: str, data: dict[str, Any]) -> str:
        p = self.out / f"{name}.json"
        p.write_text(json.dumps(data, indent=2))
        return str(p)

    def _plot(self, obj: Any, name: str) -> str | None:
        if not self.plots:
            return None
        p = self.out / f"{name}.png"
        obj.plot(p)
        return str(p)

    def run(self, example: str, framework: str, expected: str, fn: Callable[[], Outcome]) -> None:
        t0 = time.perf_counter()
        try:
            outcome = fn()
        except Exception as exc:  # noqa: BLE001 - a failing backend must not stop the demo
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            outcome = Outcome(example, framework, "ERROR", expected, f"raised {tb}")
            (self.out / f"error-{framework}-{example.split()[0].lower()}.txt").write_text(
                traceback.format_exc()
            )
        outcome.seconds = time.perf_counter() - t0
        self.result.outcomes.append(outcome)
        mark = "as expected" if outcome.as_expected else "UNEXPECTED"
        self.say(
            f"  [{mark:>11}] {outcome.example:<26} {outcome.framework:<23} "
            f"{outcome.status:<10} {outcome.seconds:5.1f} s  {outcome.detail}"
        )
        for line in outcome.more:
            self.say(f"      {line.strip()}")

    def skip(self, what: str, why: str) -> None:
        self.result.skipped.append(f"{what}: {why}")
        self.say(f"  [    skipped] {what}: {why}")

    # ---- case 1 -------------------------------------------------------------------
    def case1(
        self, framework: str, f: Callable[..., Any], x: Any, scale: Any, **options: Any
    ) -> Outcome:
        import polygrad as pg
        from polygrad.sweep import sweep

        tag = f"case1-{framework.replace(' ', '-').replace('(', '').replace(')', '')}"

        def g(x: Any) -> Any:  # closes over scale, as the user's script did
            return f(x, scale)

        grad = options.pop("grad", None)
        if grad is not None:
            options["grad"] = lambda x: grad(x, scale)
        report = pg.check(g, x, **options)
        files = [self._save_json(tag, report.to_dict())]
        s = sweep(g, x, backend=options.get("backend"))
        files.append(self._save_json(tag + "-sweep", s.to_dict()))
        plot = self._plot(s, tag + "-sweep")
        if plot:
            files.append(plot)
        more = [_plain_difference(s)]
        if report.details.your_terms is not None:  # the user's own tool, explained
            more += your_terms_lines(report.details.your_terms)
        return Outcome(
            "case 1 normal log-density",
            framework,
            str(report.verdict),
            "PASS",
            _value_line(report, 0),
            files=files,
            more=more,
        )

    def all_case1(self) -> None:
        sc = _scale(N_DIM)
        x0 = np.full(N_DIM, EVAL_AT)

        def np_f(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
            return np.sum(-((x - 0.0) ** 2) / (2 * scale**2))

        def np_grad(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
            return -(x - 0.0) / scale**2

        self.run(
            "case 1",
            "numpy (exact gradient)",
            "PASS",
            lambda: self.case1(
                "numpy", np_f, x0.astype(np.float32), sc.astype(np.float32), grad=np_grad
            ),
        )
        self._case1_tensorflow(x0, sc)
        self._case1_torch(x0, sc)
        self._case1_jax(x0, sc)

    def _case1_tensorflow(self, x0: np.ndarray, sc: np.ndarray) -> None:
        if _installed("tensorflow"):

            def tf_hand() -> Outcome:
                import tensorflow as tf

                def f(x: Any, scale: Any) -> Any:
                    return tf.reduce_sum(-((x - 0.0) ** 2) / (2 * scale**2))

                return self.case1(
                    "tensorflow",
                    f,
                    tf.constant(x0, tf.float32),
                    tf.constant(sc, tf.float32),
                    **USER_TOOL,
                )

            self.run("case 1", "tensorflow", "PASS", tf_hand)
            if _installed("tensorflow_probability") and _installed("tf_keras"):  # TFP needs both

                def tf_tfp() -> Outcome:
                    import tensorflow as tf
                    import tensorflow_probability as tfp

                    scale = tf.constant(sc, tf.float32)
                    normal = tfp.distributions.Normal(tf.zeros_like(scale), scale)

                    def f(x: Any, scale: Any) -> Any:  # the distribution is closed over
                        return tf.reduce_sum(normal.log_prob(x))

                    x = tf.constant(x0, tf.float32)
                    return self.case1("tensorflow (tfp)", f, x, scale, **USER_TOOL)

                self.run("case 1", "tensorflow (tfp)", "PASS", tf_tfp)
            else:
                self.skip(
                    "case 1 with tensorflow_probability",
                    f"not installed ({pip_install('tfp')})",
                )
        else:
            self.skip("case 1 with TensorFlow", f"not installed ({pip_install('tensorflow')})")

    def _case1_torch(self, x0: np.ndarray, sc: np.ndarray) -> None:
        if _installed("torch"):

            def torch_case() -> Outcome:
                import torch

                def f(x: Any, scale: Any) -> Any:
                    return torch.sum(-((x - 0.0) ** 2) / (2 * scale**2))

                return self.case1(
                    "torch",
                    f,
                    torch.tensor(x0, dtype=torch.float32),
                    torch.tensor(sc, dtype=torch.float32),
                )

            self.run("case 1", "torch", "PASS", torch_case)
        else:
            self.skip("case 1 with PyTorch", f"not installed ({pip_install('torch')})")

    def _case1_jax(self, x0: np.ndarray, sc: np.ndarray) -> None:
        if _installed("jax"):

            def jax_case() -> Outcome:
                import jax.numpy as jnp

                def f(x: Any, scale: Any) -> Any:
                    return jnp.sum(-((x - 0.0) ** 2) / (2 * scale**2))

                return self.case1(
                    "jax", f, jnp.asarray(x0, jnp.float32), jnp.asarray(sc, jnp.float32)
                )

            self.run("case 1", "jax", "PASS", jax_case)
        else:
            self.skip("case 1 with JAX", f"not installed ({pip_install('jax')})")

    # ---- planted bug ----------------------------------------------------------------
    def planted_bug(self) -> None:
        import polygrad as pg

        x0 = np.array([0.3, -1.1, 0.8, 1.7])

        def finish(report: Any, t: Any, framework: str) -> Outcome:
            files = [self._save_json("bug-report", report.to_dict())]
            plot = self._plot(t, "bug-taylor")
            if plot:
                files.append(plot)
            worst = report.entries.worst(1)[0]
            detail = (
                f"worst entry {_value_line(report, worst)}; Taylor slope {t.slope:.2f} "
                "(2 for a right gradient, 1 for a wrong one)"
            )
            loc = report.localization
            if loc is not None and loc.located is not None:
                detail += f"; the wrong rule, localized: {loc.located.site.op}"
            return Outcome(
                "custom gradient, bug",
                framework,
                str(report.verdict),
                "MISMATCH",
                detail,
                files=files,
            )

        if _installed("torch"):

            def torch_bug() -> Outcome:
                import torch

                class SinSquare(torch.autograd.Function):
                    """sin(x²) with a hand-written backward that forgets the 2 of d(x²)/dx."""

                    @staticmethod
                    def forward(ctx: Any, x: Any) -> Any:
                        ctx.save_for_backward(x)
                        return torch.sin(x * x)

                    @staticmethod
                    def backward(ctx: Any, g: Any) -> Any:
                        (x,) = ctx.saved_tensors
                        return g * torch.cos(x * x) * x  # planted bug: should be 2 * x

                def f(x: Any) -> Any:
                    return SinSquare.apply(x).sum()

                x = torch.tensor(x0, dtype=torch.float32)
                return finish(pg.check(f, x), pg.taylor_test(f, x), "torch autograd.Function")

            self.run("custom gradient, bug", "torch autograd.Function", "MISMATCH", torch_bug)
        else:

            def np_bug() -> Outcome:
                def f(x: np.ndarray) -> np.ndarray:
                    return np.sum(np.sin(x * x))

                def grad(x: np.ndarray) -> np.ndarray:
                    return np.cos(x * x) * x  # planted bug: should be 2 * x

                x = x0.astype(np.float32)
                return finish(
                    pg.check(f, x, grad=grad), pg.taylor_test(f, x, grad=grad), "numpy hand-written"
                )

            self.run("custom gradient, bug", "numpy hand-written", "MISMATCH", np_bug)

    # ---- case 2 -------------------------------------------------------------------
    @staticmethod
    def digit() -> tuple[np.ndarray, int]:
        from scipy.ndimage import zoom  # scipy comes with scikit-learn
        from sklearn.datasets import load_digits

        d = load_digits()
        img = d.images[0] / 16.0  # 8x8, values in [0, 1]
        big = np.clip(zoom(img, 3.5, order=1), 0.0, 1.0)  # bilinear, 28x28 (anti-aliased)
        return big, int(d.target[0])  # as it is: its background is exactly 0

    def case2(self) -> None:
        if not (_installed("sklearn") and _installed("scipy")):
            self.skip(
                "case 2 (CNN input gradient)",
                f"needs scikit-learn and scipy for the digit image ({pip_install('demo')})",
            )
            return
        use_keras = _installed("tensorflow") and (_installed("keras") or _installed("tf_keras"))
        if use_keras:
            self.run("case 2 CNN input gradient", "keras", "PASS", self.case2_keras)
        elif _installed("torch"):
            self.run("case 2 CNN input gradient", "torch", "PASS", self.case2_torch)
        else:
            self.skip(
                "case 2 (CNN input gradient)",
                f"needs Keras or PyTorch ({pip_install('tensorflow')} or {pip_install('torch')})",
            )

    def _case2_outcome(self, report: Any, framework: str) -> Outcome:
        files = [self._save_json("case2-cnn-report", report.to_dict())]
        if self.plots:
            from .plot import plot_report

            p = self.out / "case2-cnn-entries.png"
            plot_report(report, p)
            files.append(str(p))
        counts = ", ".join(f"{v} {k}" for k, v in sorted(report.counts().items()))
        ref = report.details.reference
        d = report.details
        checked = (
            f"{len(report.entries.names)} pixels in one batched pass"
            if d.strategy == "full"
            else f"{len(report.entries.names)} random projections of the {d.inputs}-pixel "
            "gradient (strategy='auto' estimated a full check beyond its time budget here)"
        )
        detail = (
            f"{checked} ({counts}); "
            f"{ref.method} reference, {ref.evaluations} model evaluations in "
            f"{ref.seconds:.1f} s"
        )
        more = _kink_lines(report)
        if report.details.your_terms is not None:  # the user's own loop, explained
            more += your_terms_lines(report.details.your_terms)
        # kinks are expected in a ReLU/max-pool CNN: NONSMOOTH entries do not fail the check
        status = str(report.verdict) if report.ok else f"{report.verdict} (not ok)"
        return Outcome(
            "case 2 CNN input gradient",
            framework,
            status,
            "PASS or NONSMOOTH",
            detail,
            files=files,
            more=more,
        )

    def case2_keras(self) -> Outcome:
        import keras
        import tensorflow as tf

        import polygrad as pg

        keras.utils.set_random_seed(0)
        img, label = self.digit()
        model = keras.Sequential(
            [
                keras.Input((28, 28, 1)),
                keras.layers.Conv2D(8, 3, activation="relu"),
                keras.layers.MaxPooling2D(2),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.MaxPooling2D(2),
                keras.layers.Flatten(),
                keras.layers.Dropout(0.5),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        y = np.zeros((1, 10), np.float32)
        y[0, label] = 1.0

        cce = keras.losses.CategoricalCrossentropy()

        def loss_of_image(x: Any) -> Any:  # model, y, cce closed over, as in the user's code
            return cce(y, model(tf.reshape(x, (1, 28, 28, 1))))

        report = pg.check(loss_of_image, tf.constant(img, tf.float32), **CASE2_TOOL)
        return self._case2_outcome(report, "keras")

    def case2_torch(self) -> Outcome:
        import torch

        import polygrad as pg

        torch.manual_seed(0)
        img, label = self.digit()
        model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 3),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Dropout(0.5),
            torch.nn.Linear(16 * 5 * 5, 10),
        ).eval()
        target = torch.tensor([label])

        def loss(x: Any) -> Any:
            return torch.nn.functional.cross_entropy(model(x), target)

        x = torch.tensor(img[None, None], dtype=torch.float32)
        return self._case2_outcome(pg.check(loss, x, **CASE2_TOOL), "torch")


def _summary_lines(res: DemoResult) -> list[str]:
    """What the verdicts mean, for the cases that ran."""
    lines = [
        "PASS means autodiff agrees with a float64 reference: |diff| within the tolerance",
        "(twice the reference's error bar plus float32's round-off). The growing disagreement",
        "of the plain difference in case 1 is round-off of the check itself (the *-sweep.png",
        "plots show the V-shaped curve and the best step). MISMATCH for the planted bug is",
        "far outside the tolerance (as expected), and its Taylor test falls like h^1, not h^2.",
    ]
    cnn = [o for o in res.outcomes if o.example.startswith("case 2")]
    if cnn and cnn[0].status == "NONSMOOTH":
        lines += [
            "NONSMOOTH in case 2 marks the pixels at a kink of the CNN (a ReLU at 0, a",
            "max-pooling tie): left and right derivatives differ there, which is not a",
            "gradient error (the check is ok). The user's relative metric is large because",
            "pixels whose gradient is below the round-off of h = 1e-4 rule its max.",
        ]
    return lines


def run_demo(
    out: str | Path = "polygrad-demo", quick: bool = False, say: Callable[[str], None] = print
) -> int:
    """Run the demo, print a summary, write plots and JSON reports to ``out``.

    Parameters
    ----------
    out : str or Path
        Output folder (created).
    quick : bool
        Skip the CNN example (for fast tests).
    say : callable
        Where lines of output go.

    Returns
    -------
    int
        0 when every example that ran gave its expected verdict, 1 otherwise.
    """
    d = demo(out, quick=quick, say=say)
    return 0 if d.ok else 1


def demo(
    out: str | Path = "polygrad-demo", quick: bool = False, say: Callable[[str], None] = print
) -> DemoResult:
    """Run the demo and return its :class:`DemoResult` (see :func:`run_demo`).

    TensorFlow's native log lines are kept off stderr while it runs (see
    :mod:`polygrad._native_logs`); the environment is restored afterwards.
    """
    with quiet_native_logs():
        return _demo(out, quick, say)


def _demo(out: str | Path, quick: bool, say: Callable[[str], None]) -> DemoResult:
    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dm = _Demo(out, say)
    say("polygrad demo: checking real gradients against a reference with a known error.")
    say("Each line: [as expected?] example, framework, verdict, time, what the numbers say.")
    say("")
    say("Case 1: f(x) = sum -(x - loc)^2 / (2 scale^2), float32, x = 1. A plain")
    say("central difference disagrees with autodiff more as the step shrinks; polygrad says")
    say("whether that is round-off and which step to use.")
    dm.all_case1()
    say("")
    say("A custom gradient with a planted bug (the 2 of d(x^2)/dx forgotten):")
    dm.planted_bug()
    say("")
    say("Case 2: gradient of a CNN's loss with respect to a 28x28 digit image:")
    if quick:
        dm.skip("case 2 (CNN input gradient)", "left out (--quick)")
    else:
        dm.case2()
    res = dm.result
    res.seconds = time.perf_counter() - t0
    say("")
    n_ok = sum(o.as_expected for o in res.outcomes)
    ran = [o for o in res.outcomes if o.status != "SKIPPED"]
    say(f"Summary: {n_ok} of {len(ran)} examples gave the expected verdict in {res.seconds:.0f} s.")
    for line in _summary_lines(res):
        say("  " + line)
    for o in res.outcomes:
        if not o.as_expected:
            say(f"  unexpected: {o.example} ({o.framework}) gave {o.status}: {o.detail}")
    if res.skipped:
        say("  skipped: " + "; ".join(res.skipped))
    if not dm.plots:
        say(f"  plots were not drawn: matplotlib is not installed ({pip_install('plot')})")
    (out / "summary.json").write_text(
        json.dumps(
            {
                "seconds": res.seconds,
                "outcomes": [o.__dict__ for o in res.outcomes],
                "skipped": res.skipped,
            },
            indent=2,
            default=str,
        )
    )
    say(f"  plots and JSON reports: {out}")
    return res
