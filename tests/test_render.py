"""The text report: its first line answers "is my gradient right?", then the evidence.

Each case's expected numbers (the Jacobian, the one-sided derivatives at a
kink, the size of a planted error) are computed here by hand, not read back
from the report.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import polygrad as pg
from polygrad.render import _g, render_text


def _first_line(report: pg.Report) -> str:
    return render_text(report, color=False).splitlines()[0]


def test_pass_case_1_in_numpy():
    """USERS.md case 1 (float32, n = 1000, x = 100): PASS, ok, and why, on the first line."""
    n = 1000
    scale = np.random.default_rng(0).uniform(0.5, 1.5, n).astype(np.float32)

    def logdensity(x):
        return np.sum(-(x**2) / (2 * scale**2))

    def grad(x):
        return -x / scale**2

    report = pg.check(logdensity, np.full(n, 100.0, np.float32), grad=grad)
    assert report.verdict == pg.Verdict.PASS and report.ok
    assert _first_line(report) == (
        "polygrad: PASS [ok] — autodiff agrees with the reference within the combined "
        "error bars on all 1000 entries."
    )
    # the reference is the exact gradient -x / scale^2 of the float64 function, whose
    # scale**2 is still a float32 product (scale is a float32 global)
    exact = -100.0 / (scale**2).astype(np.float64)
    assert np.all(np.abs(report.entries.reference - exact) <= report.entries.reference_error)
    assert "kinks:" not in str(report)


def _kink_of_a_composition(x):
    """x + relu(x): left derivative 1, right 2 at 0; written as x = relu(x) - relu(-x)."""
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    return np.sum(relu(x) - relu(-x) + relu(x))


def _its_autodiff_gradient(x):
    """What reverse mode computes for the sum above with relu'(0) = 0: 0 at the kink."""
    step = lambda v: (v > 0).astype(float)  # noqa: E731
    return step(x) + step(-x) + step(x)


def test_nonsmooth_passes_by_default_and_says_why():
    x = np.array([0.0, 0.7])
    report = pg.check(_kink_of_a_composition, x, grad=_its_autodiff_gradient)
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok
    row = report.entries.row(0)
    # one-sided derivatives of x + relu(x) at 0, by hand; autodiff's 0 lies outside [1, 2]
    assert (row["left"], row["right"], row["autodiff"]) == (1.0, 2.0, 0.0)
    assert not row["within_one_sided"]
    assert report.entries.verdicts()[1] == pg.Verdict.PASS  # f'(0.7) = 2, smooth there
    assert _first_line(report) == (
        "polygrad: NONSMOOTH [ok] — the gradient agrees with the reference at the 1 entry "
        "where f is smooth; 1 of 2 entries sits at a kink of f, where f has no derivative "
        "(its left and right derivatives differ), which is not a gradient error: NONSMOOTH "
        'passes by default (check(..., nonsmooth="allow")).'
    )
    text = render_text(report, color=False)
    assert "left derivative 1, right derivative 2; autodiff lies outside them" in text
    assert "does NOT lie" not in text
    kinks = next(line for line in text.splitlines() if line.startswith("  kinks:"))
    assert "1 entry is NONSMOOTH" in kinks
    assert "conservative gradient (Bolte & Pauwels, NeurIPS 2020)" in kinks
    # the explanation is in the report itself: a pip install has no docs/ folder to link to
    assert "docs/" not in kinks and "maximum(x, 0) at 0: 1 in TensorFlow" in kinks


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ("within", "autodiff lies outside the one-sided derivatives at 1 of them"),
        ("fail", 'nonsmooth="fail" fails any kink'),
    ],
)
def test_nonsmooth_under_a_stricter_option_is_not_ok(option, reason):
    x = np.array([0.0, 0.7])
    report = pg.check(_kink_of_a_composition, x, grad=_its_autodiff_gradient, nonsmooth=option)
    assert report.verdict == pg.Verdict.NONSMOOTH and not report.ok
    line = _first_line(report)
    assert line.startswith("polygrad: NONSMOOTH [NOT OK] — ")
    assert reason in line


def test_mismatch_names_the_entry_and_the_size():
    x = np.array([0.5, 1.0, -2.0])
    planted = np.array([0.0, 1.5, 0.0])  # entry 1 is off by 1.5

    def grad(x):
        return 2 * x + planted

    report = pg.check(lambda x: np.sum(x**2), x, grad=grad)
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok
    line = _first_line(report)
    m = re.fullmatch(
        r"polygrad: MISMATCH \[NOT OK\] — the gradient rule is wrong: 1 of 3 entries differs from "
        r"the reference by far more than round-off and the reference's error bar allow "
        r"\(worst x\[1\]: off by ([0-9.e+-]+), ([0-9.e+-]+) times its tolerance\)\.",
        line,
    )
    assert m, line
    assert float(m.group(1)) == 1.5
    i = 1
    times = abs(2 * x[i] + planted[i] - 2 * x[i]) / report.entries.tolerance[i]
    assert float(m.group(2)) == pytest.approx(times, rel=0.05)  # printed to 2 digits


def test_marker_is_coloured_on_a_terminal_only():
    report = pg.check(lambda x: np.sum(x**2), np.array([1.0]), grad=lambda x: 2 * x)
    coloured = render_text(report, color=True).splitlines()[0]
    assert "\x1b[1;32m[ok]\x1b[0m" in coloured
    assert "\x1b[" not in _first_line(report)


def test_nan_prints_as_nan_and_missing_as_dash():
    assert _g(float("nan")) == "nan"
    assert _g(None) == "-"
    assert _g(float("inf")) == "+inf"


def test_taylor_line_gives_no_percentage_of_zero():
    """A gradient that is identically 0 is wrong by the whole derivative, not by 'x% of 0'."""
    x = np.array([1.0, 2.0, 3.0])
    t = pg.taylor_test(lambda x: np.sum(x**2), x, grad=lambda x: 0 * x)
    assert t.verdict == "wrong" and t.directional_derivative == 0.0
    text = t.explain()
    assert "% of" not in text
    assert "the gradient's directional derivative is 0" in text
    # the error is the true directional derivative 2 x . v along the test's direction
    true = float(2 * x @ t.direction)
    assert t.first_order_error == pytest.approx(abs(true), rel=1e-6)


def test_inconclusive_first_line_names_the_entry_and_its_relative_error_bar(without_quad):
    """A derivative of 1e-7 of the value (softplus at -16 beside four at 1, no mp
    reference: np.minimum returns a Python int on mpmath input): the first line says
    which entry the reference could not resolve and how coarse its error bar is."""

    def softplus(x):
        return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0))))

    x = np.array([1.0, 1.0, -16.0, 1.0, 1.0])
    v = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    slope = 1.0 / (1.0 + np.exp(16.0))  # sigmoid(-16), the exact derivative along v
    report = pg.check(
        lambda t: np.sum(softplus(x + t[0] * v)), np.zeros(1), grad=lambda t: np.array([slope])
    )
    assert report.verdict == pg.Verdict.INCONCLUSIVE
    e = report.entries
    assert abs(e.reference[0] - slope) <= e.reference_error[0]
    first = _first_line(report)
    rel = e.reference_error[0] / abs(e.reference[0])
    assert f"at x[0] the reference's error bar is ±{e.reference_error[0]:.2g}" in first
    assert f"{rel:.2g} of the entry" in first
    # the only note says the quad reference is not installed (see the fixture)
    assert all("numpy-quaddtype is not installed" in n for n in report.notes)
    assert ("notes below" in first) == bool(report.notes)


def test_taylor_line_at_a_kink_does_not_call_the_gradient_wrong():
    """sum(|x|) at a point with x[0] = 0: the steps cross the kink, the Taylor remainder
    is first order (slope 1), and the report says why instead of 'wrong by about ...'."""
    report = pg.check(lambda x: np.sum(np.abs(x)), np.array([0.0, 1.0, -2.0]), grad=np.sign)
    assert report.verdict == pg.Verdict.NONSMOOTH and report.ok
    text = render_text(report, color=False)
    line = next(ln for ln in text.splitlines() if "Taylor test" in ln)
    assert f"h^{report.details['taylor']['slope']:.2f}" in line
    assert "no evidence against the gradient" in line and "wrong by about" not in line


def test_a_subnormal_output_is_named_underflow_not_hidden_cancellation():
    """softmax at logits 50 and -50 in float32: exp(-100) = 3.7e-44 is subnormal and
    keeps about two digits; nothing cancels."""

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    def softmax_vjp(u, z):
        s = softmax(z)
        return s * (u - np.sum(u * s))

    z = np.array([50.0, 49.0, -50.0, 0.0], dtype=np.float32)
    report = pg.check(softmax, z, vjp=softmax_vjp)
    assert report.verdict == pg.Verdict.PASS and report.ok, report
    h = report.details.hidden_cancellation
    assert h is not None and h.output == "f[2]"
    exact = np.exp(-100.0) / (np.exp(0.0) + np.exp(-1.0) + np.exp(-100.0) + np.exp(-50.0))
    assert h.accurate == pytest.approx(exact, rel=1e-12)
    assert 0 < h.value < np.finfo(np.float32).tiny
    assert h.cause("float32") == "underflow"
    assert "underflow, see the note" in str(report).splitlines()[0]


def test_a_reference_of_zeros_states_its_error_bars_absolutely():
    """A straight-through estimator checked as if it were the gradient: round(x) is flat
    away from half-integers, every reference value is 0 (error bars near 1e-47), and the
    reference line says so instead of a median relative error bar of NaN."""
    x = np.array([0.9, 5.1, -6.6, 1.8])
    report = pg.check(lambda x: np.sum(np.round(x)), x, grad=np.ones_like)
    assert report.verdict is pg.Verdict.MISMATCH
    np.testing.assert_array_equal(report.entries.reference, 0.0)
    line = next(s for s in str(report).splitlines() if s.lstrip().startswith("reference:"))
    assert "every reference value is 0, median error bar" in line and "nan" not in line


def test_a_gradient_beyond_the_working_dtypes_range_is_named_an_overflow():
    """A float16 function whose derivative (1.2e5) exceeds float16's largest number: autodiff
    returns inf, the reference is finite, and the headline says the gradient overflows."""
    import torch

    x = torch.tensor([1e-3, -2e-3, 5e-4], dtype=torch.float16)
    report = pg.check(lambda x: (x * 300.0).sum() * 400.0, x)
    assert report.verdict is pg.Verdict.NONFINITE and not report.ok
    np.testing.assert_allclose(report.entries.reference, 1.2e5, rtol=1e-6)
    headline = str(report).splitlines()[0]
    assert "beyond float16's largest finite number (6.55e+04)" in headline, headline


def test_within_one_sided_is_said_at_kinks_only():
    """A MISMATCH entry's row does not claim that autodiff lies between one-sided
    derivatives (it says nothing there); a kink's row says whether it does."""
    x = np.array([0.0, 0.7])
    report = pg.check(lambda x: np.sum(np.abs(x)), x, grad=lambda x: 2 * np.sign(x))
    rows = [report.entries.row(i) for i in range(2)]
    assert [r["verdict"] for r in rows] == ["NONSMOOTH", "MISMATCH"]
    assert rows[0]["within_one_sided"] is True  # 0 lies in [-1, 1]
    assert rows[1]["within_one_sided"] is None


# ---- "your check": values beside their gap and tolerance, what the best step assumes ------


def _quadratic_case_1():
    """USERS.md case 1 at n = 1 in float32: f''' = 0, the derivative -x / s^2 by hand."""
    s = np.float32(np.random.default_rng(0).uniform(0.5, 1.5))
    return (lambda x: np.sum(-(x**2) / (2 * s**2))), (lambda x: -x / s**2), s


def _terms_lines(report: pg.Report) -> list[str]:
    text = render_text(report, color=False).splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("  your check:"))
    return text[start : start + 4]


def test_your_check_line_gives_the_gap_and_the_tools_tolerance():
    f, grad, s = _quadratic_case_1()
    x = np.ones(1, np.float32)
    report = pg.check(f, x, grad=grad, compare_with="gradcheck", compare_step=1e-3)
    t = report.details.your_terms
    assert t.worst_autodiff == pytest.approx(-1.0 / float(s) ** 2, rel=1e-6)
    # gradcheck allows atol + rtol |numeric| with atol = 1e-5, rtol = 1e-3
    allowed = 1e-5 + 1e-3 * abs(t.worst_numeric)
    diff = abs(t.worst_numeric - t.worst_autodiff)
    head = _terms_lines(report)[0]
    assert f"|difference| {diff:.2g}, its tolerance {allowed:.2g}" in head
    report = pg.check(f, x, grad=grad, compare_with="compute_gradient", compare_step=2.0**-13)
    assert "the tool sets no tolerance" in _terms_lines(report)[0]


def test_best_step_says_what_it_assumes_where_truncation_is_not_measured():
    """f''' = 0: the truncation at the user's step is below what can be measured, and the
    best step says it rests on that; sin has curvature, measured, and no such clause."""
    f, grad, _ = _quadratic_case_1()
    x = np.ones(1, np.float32)
    report = pg.check(f, x, grad=grad, compare_with="compute_gradient", compare_step=2.0**-13)
    t = report.details.your_terms
    assert t.truncation_unresolved is not None and t.truncation_unresolved > 0
    best = next(line for line in _terms_lines(report) if "best delta" in line)
    assert "the prediction assumes it stays that small" in best
    assert "third derivative is 0" in best and "where f curves, the best step is smaller" in best
    curved = pg.check(
        lambda x: np.sum(np.sin(x)),
        np.ones(1, np.float32),
        grad=np.cos,
        compare_with="compute_gradient",
        compare_step=2.0**-6,
    )
    t = curved.details.your_terms
    # |sin'''| h^2 / 6 at h = 2^-6: about 2e-5, far above what it is read against
    assert t.truncation_unresolved is None
    assert t.max_truncation == pytest.approx(np.cos(1.0) * 2.0**-12 / 6, rel=0.01)
    best = next(line for line in _terms_lines(curved) if "best delta" in line)
    assert "assumes" not in best


def test_your_check_at_a_composite_kink_calls_no_gap_an_autodiff_error():
    """x + relu(x) at 0 with autodiff 0: outside its one-sided derivatives [1, 2], which a
    conservative gradient may be; the central difference reads 1.5. The gap to the nearer
    side (1) is no autodiff error."""
    x = np.array([0.0, 0.7])
    report = pg.check(
        _kink_of_a_composition,
        x,
        grad=_its_autodiff_gradient,
        compare_with="compute_gradient",
        compare_step=2.0**-10,
    )
    t = report.details.your_terms
    assert t.worst == "x[0]" and t.worst_autodiff == 0.0
    assert t.worst_numeric == pytest.approx(1.5)
    assert t.autodiff_error == pytest.approx(1.0) and t.kink == pytest.approx(0.5)
    parts = _terms_lines(report)[1]
    assert "NONSMOOTH above, not a gradient error" in parts
    assert "autodiff's own error dominates" not in parts


def test_an_undecided_float64_entry_does_not_ask_for_a_float64_rule():
    """A float64 Huber gradient wrong past the tie (``<`` for ``<=``, and 2 delta): at
    |r| = delta exactly the rule's moves jump by the entry's size, and the entry is
    INCONCLUSIVE; the headline says what moved (the rule, over a few ulps), not that a
    float64 evaluation of the rule would decide (it is float64 already)."""
    delta, y = 1.0, np.array([0.3, -1.0, 2.0])

    def huber(p):
        r = p - y
        a = np.abs(r)
        return np.sum(np.where(a <= delta, 0.5 * r**2, delta * (a - 0.5 * delta)))

    def bad_grad(p):
        r = p - y
        return np.where(np.abs(r) < delta, r, 2 * delta * np.sign(r))

    report = pg.check(huber, y + np.array([delta, 0.2, -delta]), grad=bad_grad)
    assert not report.ok and report.verdict in (pg.Verdict.INCONCLUSIVE, pg.Verdict.MISMATCH)
    head = str(report).splitlines()[0]
    assert "a float64 evaluation of the rule" not in head, head
    if report.verdict == pg.Verdict.INCONCLUSIVE:
        assert "moved that far when the input moved by a few ulps" in head, head


def test_the_entry_column_fits_long_names_and_keeps_the_ends_beyond_its_width():
    """A parameter path of 40 characters (a Keras kernel, an encoder's weights) is shown
    whole: it was cut to 28 (``sequential...se/kernel[1, 3]`` lost the layer); beyond 48
    characters a name keeps its start and its index."""
    import numpy as np

    import polygrad as pg
    from polygrad.render import NAME_WIDTH

    def loss(encoder_projection_weights_in_block_1, bias):
        return np.sum(np.tanh(encoder_projection_weights_in_block_1 + bias))

    w, b = np.array([0.1, -0.3, 0.7]), np.array([0.2, 0.1, 0.0])
    wrong = pg.check(loss, w, b, grad=lambda w, b: 1.01 / np.cosh(w + b) ** 2)
    assert wrong.verdict is pg.Verdict.MISMATCH
    table = str(wrong).split("worst entries:")[1].splitlines()
    header, rows = table[1], [r for r in table[2:] if "MISMATCH" in r]
    name = "encoder_projection_weights_in_block_1[0]"
    assert any(r.split()[0] == name for r in rows)
    assert header.index("verdict") == rows[0].index("MISMATCH")  # the columns line up

    def long_loss(a_parameter_whose_name_is_far_longer_than_any_table_column, bias):
        return np.sum(np.tanh(a_parameter_whose_name_is_far_longer_than_any_table_column + bias))

    wrong = pg.check(long_loss, w, b, grad=lambda w, b: 1.01 / np.cosh(w + b) ** 2)
    shown = [r.split()[0] for r in str(wrong).split("worst entries:")[1].splitlines()[2:]
             if "MISMATCH" in r]  # fmt: skip
    assert shown and all(len(s) == NAME_WIDTH and s.startswith("a_parameter_whos...")
                         for s in shown)  # fmt: skip
    assert any(s.endswith("_column[0]") for s in shown)


def test_a_jump_is_said_to_be_a_jump_not_a_kink():
    """sign(x) cos(x) at 0 jumps by 2: NONSMOOTH, and the report says f jumps (or turns
    vertical) there, with an infinite one-sided derivative, not that it has a kink of
    ReLU's kind; abs at 0 is still a kink."""
    x = np.array([0.0, 0.5])
    jump = pg.check(lambda x: np.sum(np.sign(x) * np.cos(x)), x,
                    grad=lambda x: -np.sign(x) * np.sin(x))  # fmt: skip
    assert jump.verdict is pg.Verdict.NONSMOOTH and jump.ok
    assert np.isinf(jump.entries.left[0]) and np.isinf(jump.entries.right[0])
    text = str(jump)
    assert "sits where f jumps or turns vertical" in text.splitlines()[0]
    kinks = next(s for s in text.splitlines() if s.lstrip().startswith("kinks:"))
    assert "f jumps there" in kinks and "ReLU, abs, max" not in kinks
    kink = pg.check(lambda x: np.sum(np.abs(x)), x, grad=np.sign)
    line = next(s for s in str(kink).splitlines() if s.lstrip().startswith("kinks:"))
    assert "f has a kink there" in line and "jumps" not in str(kink)
