"""The reports of the two cases of the users' guide and of a planted error, as printed.

Each test renders the report of code written the way its user wrote it, and
checks the first line, the ok marker, the NONSMOOTH explanation and the
"your check" section against numbers computed here independently: the
user's own tool run by hand (``tf.test.compute_gradient``, a loop of central
differences, ``torch.autograd.gradcheck``'s formula) and hand derivatives.
"""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402
import torch  # noqa: E402

import polygrad as pg  # noqa: E402
from polygrad.render import render_text  # noqa: E402

KINKS_DOC = "docs/why-fd-fails.md"


def _text(report: pg.Report) -> str:
    return render_text(report, color=False)


@pytest.fixture(scope="module")
def case1():
    """Case 1: the TFP log-density summed over n = 1000 dimensions at x = 100, float32."""
    n = 1000
    loc = tf.constant(0.0)
    scale = tf.constant(np.random.default_rng(0).uniform(0.5, 1.5, n).astype(np.float32))
    dist = tfp.distributions.Normal(loc, scale)

    def f(x):  # closes over the distribution, as the user wrote it
        return tf.reduce_sum(dist.log_prob(x))

    x = tf.fill([n], 100.0)
    delta = 2.0**-13
    report = pg.check(f, x, compare_with="tf.test.compute_gradient", compare_step=delta)
    return f, x, delta, report


def _compute_gradient_error(f, x, delta):
    theoretical, numerical = tf.test.compute_gradient(f, [x], delta=delta)
    return float(np.max(np.abs(numerical[0] - theoretical[0])))


def test_case_1_first_line_and_your_terms(case1):
    f, x, delta, report = case1
    text = _text(report)
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert text.splitlines()[0].startswith("polygrad: PASS [ok] — autodiff agrees")
    t = report.details["your_terms"]
    assert (t["tool"], t["step_name"], t["step"]) == ("tf.test.compute_gradient", "delta", delta)
    # the exact gradient is -x / scale^2, so autodiff's part is float32 rounding only
    assert t["autodiff_error"] < 1e-3
    # f''' = 0: the reading is round-off; compute_gradient run by hand reads one of the same
    # size (not the same digits: round-off depends on the order in which f sums its terms)
    theirs = _compute_gradient_error(f, x, delta)
    assert theirs > 1e3 * t["autodiff_error"]
    assert 0.1 < t["value"] / theirs < 10
    assert t["roundoff"] > 0.99 * t["value"]
    assert "round-off dominates: not a gradient error" in text
    assert json.loads(report.to_json())["details"]["your_terms"] == t
    assert f"tf.test.compute_gradient with delta = {delta:.3g} (2^-13)" in text


def test_case_1_best_delta_helps_the_users_own_tool(case1):
    f, x, delta, report = case1
    t = report.details["your_terms"]
    best = t["best_step"]
    assert best > delta and np.log2(best) == round(np.log2(best))
    theirs_at_best = _compute_gradient_error(f, x, best)
    # round-off falls like 1 / delta: the user's own reading drops with the step the report gives
    assert theirs_at_best < _compute_gradient_error(f, x, delta) * 50 * delta / best
    assert t["best_value"] < t["value"] * 50 * delta / best
    assert f"best delta for tf.test.compute_gradient here: {best:.3g}" in _text(report)


@pytest.fixture(scope="module")
def case2():
    """Case 2 in small: a Keras CNN on an 8x8 digit, model and loss object closed over."""
    from sklearn.datasets import load_digits

    tf.keras.utils.set_random_seed(0)
    X, Y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    onehot = tf.keras.utils.to_categorical(Y, 10)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8, 8, 1)),
            tf.keras.layers.Conv2D(8, 3, activation="relu", padding="same", use_bias=False),
            tf.keras.layers.MaxPooling2D(2),
            tf.keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
            tf.keras.layers.MaxPooling2D(2),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dropout(0.5),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile("adam", "categorical_crossentropy")
    model.fit(X[:256], onehot[:256], epochs=1, batch_size=32, verbose=0)
    y = onehot[:1]
    cce = tf.keras.losses.CategoricalCrossentropy()

    def loss_of_image(x):  # model, y, cce: closure
        return cce(y, model(tf.reshape(x, (1, 8, 8, 1))))

    x = tf.constant(X[0].reshape(-1))
    report = pg.check(loss_of_image, x, compare_with="fd", compare_step=1e-4)
    return loss_of_image, x, report


def test_case_2_nonsmooth_explained_in_the_report(case2):
    _, _, report = case2
    text = _text(report)
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok
    first = text.splitlines()[0]
    assert first.startswith("polygrad: NONSMOOTH [ok] — ")
    assert "NONSMOOTH passes by default" in first
    assert "Bolte & Pauwels" in text and "relu at 0" in text
    assert KINKS_DOC not in text  # no path a pip install does not have
    # no worst row says "outside" without the reason on the same line
    for line in text.splitlines():
        if "lies outside them" in line:
            assert "composite kink" in line


def test_case_2_relative_metric_in_your_terms(case2):
    f, x, report = case2
    t = report.details["your_terms"]
    assert t["metric"] == "max |a - b| / max(1e-8, |a| + |b|)" and t["step"] == 1e-4
    # the user's loop: one model call per perturbed pixel, GradientTape for autodiff
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = f(x)
    a = tape.gradient(loss, x).numpy().astype(float)
    xs = x.numpy()
    b = np.empty_like(a)
    for i in range(xs.size):
        e = np.zeros_like(xs)
        e[i] = 1e-4
        b[i] = (float(f(tf.constant(xs + e))) - float(f(tf.constant(xs - e)))) / 2e-4
    theirs = float(np.max(np.abs(a - b) / np.maximum(1e-8, np.abs(a) + np.abs(b))))
    # round-off of h = 1e-4 swamps the small entries: both read a relative error of order 1
    assert theirs > 0.1 and t["value"] > 0.1
    i = int(t["worst"].strip("x[]"))
    np.testing.assert_allclose(t["worst_autodiff"], a[i], rtol=1e-5)
    assert t["autodiff_error"] < 1e-6
    assert t["swamped"] >= 1 and t["kinks"] == report.counts()["NONSMOOTH"]
    assert f"{t['swamped']} of 64 entries are at most twice the round-off" in _text(report)


class _PlantedSinTimesX(torch.autograd.Function):
    """f(x) = x sin x elementwise, whose backward forgets the sin x of the product rule."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * torch.cos(x)


def test_mismatch_in_gradcheck_terms():
    x = torch.linspace(0.5, 2.0, 6, dtype=torch.float64)
    report = pg.check(_PlantedSinTimesX.apply, x, compare_with="gradcheck")
    text = _text(report)
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok
    assert text.splitlines()[0].startswith(
        "polygrad: MISMATCH [NOT OK] — the gradient rule is wrong"
    )
    t = report.details["your_terms"]
    assert (t["tool"], t["step"]) == ("torch.autograd.gradcheck", 1e-6)
    assert t["passes"] is False and "FAILS" in text
    assert not torch.autograd.gradcheck(_PlantedSinTimesX.apply, (x.clone().requires_grad_(),),
                                        raise_exception=False)  # fmt: skip
    # gradcheck's numbers by hand: central differences with eps = 1e-6, the planted error
    # is sin x on the diagonal
    xs = x.numpy()
    eps = 1e-6
    numeric = np.diag(((xs + eps) * np.sin(xs + eps) - (xs - eps) * np.sin(xs - eps)) / (2 * eps))
    analytic = np.diag(xs * np.cos(xs))
    theirs = float(np.max(np.abs(analytic - numeric)))
    np.testing.assert_allclose(t["value"], theirs, rtol=1e-6)
    i = int(t["worst"].rsplit("output ", 1)[1])
    np.testing.assert_allclose(t["autodiff_error"], abs(np.sin(xs[i])), rtol=1e-6)
    assert "autodiff's own error dominates" in text


def test_unknown_tool_is_a_clear_error():
    with pytest.raises(ValueError, match="compare_with='numdiff'; choose one of"):
        pg.check(lambda x: np.sum(x**2), np.ones(3), grad=lambda x: 2 * x, compare_with="numdiff")
    with pytest.raises(ValueError, match="the step must be a positive"):
        pg.check(lambda x: np.sum(x**2), np.ones(3), grad=lambda x: 2 * x, compare_with="fd",
                 compare_step=-1.0)  # fmt: skip


def test_noise_figures_are_named_and_worded_by_what_was_measured():
    """f = x + 1 computed as (1e4 + x) - 1e4 + 1: f is not near 0, but its noise is far
    more than rounding |f| explains; the report says that, with |f|, and names each noise."""
    report = pg.check(
        lambda x: (1e4 + x) - 1e4 + 1,
        np.array([0.5]),
        grad=lambda x: np.ones(1),
        reference="float64",
    )
    text = _text(report)
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert "near 0" not in text
    noise = [line for line in text.splitlines() if line.startswith("  noise of f in float64")]
    assert len(noise) == 1
    assert "|f| = 1.5" in noise[0] and "more than rounding f's value explains" in noise[0]
    assert "larger terms that cancel" in noise[0]


def test_noise_at_a_kink_is_said_to_be_the_kink_not_cancellation():
    """max of tied entries: the noise sample steps across the kink, and its spread, 2e7
    ulps of |f|, is the kink's, which the report names (not cancelling terms); the same
    line for f = (1e4 + x) - 1e4 + 1 above still names cancellation."""
    report = pg.check(lambda x: torch.max(x), torch.tensor([2.0, 2.0, 1.0]))
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok
    noise = [ln for ln in _text(report).splitlines() if ln.startswith("  noise of f in float64")]
    assert len(noise) == 1
    assert "f has a kink here" in noise[0] and "cancel" not in noise[0]


def test_mp_noise_far_below_one_unit_of_its_digits_is_said_relative_to_f(without_quad):
    """An mp reference evaluates f at more digits than its nominal 50: its noise, 1e-75 of
    |f|, is said as a fraction of |f| below its last digit, not as 1e-25 of an ulp."""
    x = np.linspace(0.1, 1.0, 5)
    report = pg.check(lambda x: np.sum(np.sin(x) * x), x, grad=lambda x: np.cos(x) * x + np.sin(x))
    assert report.details.reference.method == "mp" and report.verdict == pg.Verdict.PASS
    noise = [line for line in _text(report).splitlines() if line.startswith("  noise of f in mp")]
    assert len(noise) == 1
    assert "below its last digit" in noise[0] and "ulp" not in noise[0]
    f_abs = float(np.sum(np.sin(x) * x))
    assert f"|f| = {f_abs:.3g}" in noise[0]


def test_entries_judged_on_their_row_scale_are_counted():
    """Row 0 holds 2e20 and 1e-3: the float64 reference's error bar at the small entry is far
    larger than the entry, so it is judged on the row's scale; the report counts it."""

    def g(x):
        return np.array([1e20 * x[0] ** 2 + 1e-3 * x[1], x[1] ** 3])

    def jac(x):
        return np.array([[2e20 * x[0], 1e-3], [0.0, 3 * x[1] ** 2]])

    report = pg.check(g, np.array([1.0, 2.0]), jac=jac, reference="float64")
    assert report.verdict == pg.Verdict.PASS and report.ok
    e = report.entries
    wide = np.abs(e.reference_error) > np.abs(e.reference)
    assert "f[0] / x[1]" in [e.names[i] for i in np.flatnonzero(wide)]
    line = [s for s in _text(report).splitlines() if s.startswith("  resolution:")][0]
    assert line.startswith(
        f"  resolution: {int(wide.sum())} of 4 entries have a reference error bar larger than"
    )
    assert f"an error up to {float(np.max(e.tolerance[wide])):.2g} in them" in line
    assert "an mp reference" in line


def test_heat_map_shows_kinks_as_kinks(case2, tmp_path):
    """The case-2 CNN's kink entries: off the red error scale, in their own legend entry."""
    _, _, report = case2
    fig = report.plot(tmp_path / "entries.png")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["kink (NONSMOOTH: not an error)"]  # no failure outline: none fails
    kink = (report.entries.status == 1).reshape(1, 64)  # outputs x inputs
    scale = ax.get_images()[0].get_array()
    assert np.all(np.ma.getmaskarray(scale) == kink)  # kinks are not on the error scale
    assert (tmp_path / "entries.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_gives_absolute_steps_and_a_legend_of_drawn_lines(tmp_path):
    """Case 1 in NumPy: f''' = 0, so no truncation line is drawn and none is in the legend;
    steps are given in the input's units (h × 128 at x = 100), with the best delta."""
    n = 1000
    scale = np.random.default_rng(0).uniform(0.5, 1.5, n).astype(np.float32)
    s = pg.sweep(lambda x: np.sum(-(x**2) / (2 * scale**2)), np.full(n, 100.0, np.float32))
    text = str(s)
    assert np.all(s.scales == 128.0) and not s.coordinate_directions
    assert "moves every input x_j at once by h × s_j" in text and "s = 128 for all" in text
    row = [line for line in text.splitlines() if line.strip().startswith("2^-13 ")][0]
    assert row.split()[1] == f"{2.0**-13 * 128:.3g}"
    delta, err = s.tool_step()
    assert f"check_grads (one input moved at a time, in your units): {delta:.3g}" in text
    # a coordinate-wise central difference with that delta: noise / (sqrt 2 delta) at most
    np.testing.assert_allclose(err, np.max(s.noise) / (np.sqrt(2) * delta), rtol=0.05)
    fig = s.plot(tmp_path / "sweep.png")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    lo, hi = ax.get_ylim()
    for line in ax.get_lines():
        y = np.asarray(line.get_ydata(), float)
        if line.get_label() in labels:
            assert np.any((y >= lo) & (y <= hi))
    assert not any("truncation" in label for label in labels)
    best = [t.get_text() for t in ax.texts][0]
    assert f"predicted error of {s.optimal_error:.2g}" in best.replace("\n", " with a ")
    assert f"predicted error of {s.optimal_error:.2g}" in text


def _planted_sin(scale):
    """sin with a custom JVP that returns ``scale`` times the right one."""
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return jnp.sin(x), scale * jnp.cos(x) * t

    return f


@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_jax_check_grads_in_its_terms(scale):
    """check_grads' JVP test along its random direction: the report's verdict on it is the one
    jax.test_util.check_grads gives, and its JVP the one jax.jvp gives along that direction."""
    import jax
    import jax.numpy as jnp
    from jax.test_util import check_grads

    f = _planted_sin(scale)
    x = jnp.linspace(0.1, 1.0, 5, dtype=jnp.float32)
    report = pg.check(f, x, compare_with="jax check_grads", mode="fwd")
    t = report.details["your_terms"]
    assert (t["tool"], t["step"], t["entries"]) == ("jax.test_util.check_grads", 1e-4, 5)
    try:
        check_grads(f, (x,), order=1, modes=("fwd",))
        theirs = True
    except AssertionError:
        theirs = False
    assert t["passes"] is theirs is (scale == 1.0)
    v = np.random.RandomState(0).randn(5).astype(np.float32)
    _, jvp = jax.jvp(f, (x,), (jnp.asarray(v),))
    i = int(t["worst"].rsplit("output ", 1)[1])
    np.testing.assert_allclose(t["worst_autodiff"], float(jvp[i]), rtol=1e-6)
    assert report.ok is (scale == 1.0)


def test_your_terms_from_the_command_line(tmp_path):
    """``polygrad check --compare-with fd --compare-step 2^-10``: the section, in its terms."""
    import subprocess
    import sys

    src = tmp_path / "model.py"
    src.write_text(
        "import numpy as np\n\n\ndef f(x):\n    return np.sum(np.sin(x) * x)\n\n\n"
        "def f_grad(x):\n    return np.sin(x) + x * np.cos(x)\n"
    )
    args = [sys.executable, "-m", "polygrad", "check", f"{src}:f", "--at", "0.5, 1.5"]
    r = subprocess.run(
        [*args, "--dtype", "float32", "--compare-with", "fd", "--compare-step", "2^-10"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("polygrad: PASS [ok]")
    assert "your check: central differences with h = 0.000977 (2^-10)" in r.stdout
    bad = subprocess.run([*args, "--compare-with", "numdiff"], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert bad.returncode == 2 and "compare_with='numdiff'; choose one of" in bad.stderr


@pytest.mark.parametrize("strategy", ["full", "projections"])
def test_truncation_part_is_the_textbook_one(strategy):
    """x sin x with eps = 1e-2 in float64: gradcheck's error is truncation, g''' eps² / 6 with
    g''' = -3 sin x - x cos x, whether the check lends its reference (full) or not."""
    x = np.linspace(0.2, 2.0, 20)
    eps = 1e-2
    report = pg.check(
        lambda x: np.sum(np.sin(x) * x),
        x,
        grad=lambda x: np.sin(x) + x * np.cos(x),
        compare_with="torch.autograd.gradcheck",
        compare_step=eps,
        strategy=strategy,
    )
    assert report.verdict == pg.Verdict.PASS and report.ok
    t = report.details["your_terms"]
    third = np.abs(-3 * np.sin(x) - x * np.cos(x))
    np.testing.assert_allclose(t["value"], np.max(third) * eps**2 / 6, rtol=1e-3)
    i = int(t["worst"].strip("x[]"))
    np.testing.assert_allclose(t["truncation"], third[i] * eps**2 / 6, rtol=1e-3)
    assert t["roundoff"] < 1e-3 * t["truncation"] and t["autodiff_error"] < 1e-9
    assert "truncation (f's curvature x eps²) dominates" in _text(report)


def test_gradcheck_round_off_in_float64_and_its_best_eps():
    """A right torch gradient in float64 with gradcheck's eps = 1e-6: its error is round-off
    (the parts add up to it), and gradcheck's own formula, run by hand at the report's best
    eps, reads less than at 1e-6."""

    def f(x):
        return torch.sum(x * torch.sin(x))

    x = torch.linspace(0.5, 2.0, 6, dtype=torch.float64)
    report = pg.check(f, x, compare_with="gradcheck")
    assert report.verdict == pg.Verdict.PASS and report.ok
    t = report.details["your_terms"]
    assert t["passes"] is True and t["roundoff"] > 10 * t["truncation"]
    diff = abs(t["worst_numeric"] - t["worst_autodiff"])
    assert diff <= (t["roundoff"] + t["truncation"] + t["autodiff_error"]) * (1 + 1e-9)
    assert "round-off dominates: not a gradient error" in _text(report)

    def by_hand(eps):
        xs = x.numpy()
        grad = np.sin(xs) + xs * np.cos(xs)
        out = []
        for j in range(xs.size):
            e = np.zeros_like(xs)
            e[j] = eps
            up, down = f(torch.tensor(xs + e)), f(torch.tensor(xs - e))
            out.append(float(up - down) / (2 * eps))
        return float(np.max(np.abs(np.array(out) - grad)))

    assert t["best_step"] > 1e-6 and by_hand(t["best_step"]) < by_hand(1e-6)


def test_round_off_line_reads_the_noise_not_the_curvature_of_large_inputs():
    """A float32 log-sum-exp of logits near 1000: its values round at ulp(1000) = 6.1e-5,
    while its length scale is 1, far below the inputs' scale s = 1024. The round-off line
    reads the noise (sampled at shrinking steps, the least counting), not the curvature
    that ECnoise's step of 2^-10 s = 1 sees (it read 0.071), and states the errors of a
    plain central difference per unit of the input: noise / (h s)."""
    x = torch.tensor([1000.0, 1001.0, 999.5, -50.0])
    report = pg.check(lambda v: torch.logsumexp(v, 0), x)
    assert report.verdict is pg.Verdict.PASS and report.ok
    naive = report.details.naive_central_difference
    ulp = float(np.spacing(np.float32(1001.4)))
    assert ulp / 16 <= naive.noise <= 2 * ulp
    s = report.details.reference.median_scale
    assert s == 1024.0
    line = next(ln for ln in _text(report).splitlines() if "round-off:" in ln)
    assert f"e.g. {naive.noise / (2.0**-13 * s):.2g} at h = 2^-13" in line
    # the best step stays within the steps where the third derivative describes f
    assert naive.optimal_step <= 0.25


def _stable_bce(framework: str) -> Any:
    """Binary cross-entropy with logits as codebases write it: max(z, 0) - z y +
    log(1 + exp(-|z|)), smooth in z (softplus(z) - z y), with kinks in max and abs."""
    if framework == "torch":
        y = torch.tensor([0.0, 1.0, 1.0, 0.0])
        return lambda z: torch.mean(
            torch.clamp(z, min=0) - z * y + torch.log1p(torch.exp(-z.abs()))
        )
    if framework == "jax":
        import jax.numpy as jnp

        yj = jnp.array([0.0, 1.0, 1.0, 0.0])
        return lambda z: jnp.mean(jnp.maximum(z, 0) - z * yj + jnp.log1p(jnp.exp(-jnp.abs(z))))
    yt = tf.constant([0.0, 1.0, 1.0, 0.0])
    return lambda z: tf.reduce_mean(tf.maximum(z, 0.0) - z * yt + tf.math.log1p(tf.exp(-tf.abs(z))))


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
def test_a_smooth_loss_with_kinked_intermediates_is_named_so(framework):
    """At z = 0 the hand-written stable BCE is differentiable (sigmoid(0) - y), but max and
    abs sit at their kinks, and autodiff takes one side of each: its value is not the
    derivative. NONSMOOTH (ok by default), and the report says that f is differentiable
    there and an intermediate is at its kink, not that f has a kink."""
    z = np.array([-3.0, 0.0, 0.7, 15.0], np.float32)
    if framework == "torch":
        x: Any = torch.tensor(z)
    elif framework == "jax":
        import jax.numpy as jnp

        x = jnp.asarray(z)
    else:
        x = tf.constant(z)
    report = pg.check(_stable_bce(framework), x)
    e = report.entries
    i = e.names.index("x[1]")
    assert e.verdicts()[i] == pg.Verdict.NONSMOOTH and report.ok
    truth = (0.5 - 1.0) / 4  # (sigmoid(0) - y) / n
    assert e.reference[i] == pytest.approx(truth, rel=1e-6)
    assert e.left[i] == pytest.approx(truth, rel=1e-4) and e.right[i] == pytest.approx(
        truth, rel=1e-4
    )
    headline = _text(report).splitlines()[0]
    assert "f is differentiable (its left and right derivatives agree)" in headline
    assert "sits at a kink of f" not in headline


def test_infinite_one_sided_slope_is_a_kink_of_f_and_sets_no_resolution():
    """The safe sqrt, where(x > 0, sqrt(where(x > 0, x, 1)), 0), at x = 0: f's left
    derivative is 0, its right one +inf, so f turns vertical there (f itself is not
    differentiable, unlike an intermediate's kink under a differentiable f); the infinite
    error bar across it says nothing of what the smooth entry x = -1 (derivative 0)
    allows, 64 float32 eps of its row's scale."""

    def f(x):
        return torch.where(x > 0, torch.sqrt(torch.where(x > 0, x, 1.0)), 0.0).sum()

    report = pg.check(f, torch.tensor([-1.0, 0.0, 0.5, 2.0]))
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok
    assert report.counts() == {"NONSMOOTH": 1, "PASS": 3}
    text = _text(report)
    assert "1 of 4 entries sits where f jumps or turns vertical" in text
    assert "f is differentiable (its left and right derivatives agree)" not in text
    resolution = [ln for ln in text.splitlines() if ln.startswith("  resolution:")]
    assert resolution and "1 of 4 entries" in resolution[0]
    tol = float(resolution[0].split("an error up to ")[1].split(" ")[0])
    # x = -1's own tolerance, 64 float32 eps of a scale below 1 (it read 6.5e6, the kink's)
    assert tol == pytest.approx(float(report.entries.tolerance[0]), rel=0.05)
    assert tol < 64 * 2.0**-23
