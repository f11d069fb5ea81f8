"""NumPy code with ufuncs that have no object loop (np.logaddexp, np.isfinite...) gets an
mp reference: the values on mpmath numbers, and checks of code written that way."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import polygrad as pg
from polygrad.backends._mp_ufuncs import NO_OBJECT_LOOP, mp_array_type
from polygrad.backends.mpmath import make_context, mp_array
from polygrad.testing.programs import Node, Program, build, numpy_vjp, to_input

pytestmark = pytest.mark.polygrad_backends("numpy")

DPS = 50


@pytest.fixture(scope="module")
def ctx() -> object:
    return make_context(DPS)


def _close(got: object, want: object) -> bool:
    """Within 1e-45 relative, the want computed and compared at 60 digits."""
    with mpmath.workdps(60):
        w = want() if callable(want) else want
        return bool(abs(mpmath.mpf(got) - w) <= abs(w) * mpmath.mpf(10) ** -45)


def _mp(ctx: object, values: list[float]) -> np.ndarray:
    return mp_array(ctx, np.array(values, dtype=np.float64)).view(mp_array_type(ctx))


def test_logaddexp_is_exact_at_mp_precision(ctx: object) -> None:
    """log(e^a + e^b) to 45 digits, far in the tail where float64 rounds it to 0 or a."""
    a = _mp(ctx, [-80.0, 0.0, 30.5, 700.0])
    got = np.logaddexp(0.0, a)
    for g, v in zip(got.ravel(), (-80.0, 0.0, 30.5, 700.0), strict=True):
        assert _close(g, lambda v=v: mpmath.log1p(mpmath.exp(mpmath.mpf(v))))
    assert float(got[0]) == pytest.approx(math.exp(-80.0), rel=1e-15)  # float64 gives 0 + ...


def test_logaddexp2_copysign_heaviside_float_power(ctx: object) -> None:
    a = _mp(ctx, [-3.0, 0.0, 2.5])
    l2 = np.logaddexp2(a, 1.0)
    assert _close(l2[2], lambda: mpmath.log(mpmath.mpf(2) ** 2.5 + 2, 2))
    tail = np.logaddexp2(a, -200.0)[1]  # log2(1 + 2^-200)
    assert _close(tail, lambda: mpmath.log1p(mpmath.mpf(2) ** -200) / mpmath.ln2)
    assert float(np.logaddexp(a, -np.inf)[2]) == 2.5
    assert [float(v) for v in np.copysign(a, -1.0)] == [-3.0, 0.0, -2.5]
    assert [float(v) for v in np.copysign(2.0, a)] == [-2.0, 2.0, 2.0]
    assert [float(v) for v in np.heaviside(a, 0.5)] == [0.0, 0.5, 1.0]
    fp = np.float_power(np.abs(a), 1.5)
    assert _close(fp[2], lambda: mpmath.mpf(2.5) ** 1.5)


def test_predicates_are_boolean_arrays(ctx: object) -> None:
    a = _mp(ctx, [-1.0, 0.0, 1.0])
    a[1] = ctx.mpf("inf")  # type: ignore[attr-defined]
    assert np.isfinite(a).tolist() == [True, False, True]
    assert np.isinf(a).tolist() == [False, True, False]
    assert np.isnan(a).tolist() == [False, False, False]
    assert np.signbit(a).tolist() == [True, False, False]
    assert np.isfinite(a).dtype == bool


def test_reductions_stay_mp_arrays(ctx: object) -> None:
    """np.logaddexp of a sum (a 0-d result) is still intercepted."""
    a = _mp(ctx, [1.0, 2.0])
    s = np.sum(a)
    assert isinstance(s, mp_array_type(ctx))
    assert _close(np.logaddexp(0.0, s)[()], lambda: mpmath.log(1 + mpmath.exp(3)))


def test_every_listed_ufunc_has_no_object_loop() -> None:
    """The list names exactly ufuncs that plain object arrays cannot run."""
    plain = np.array([mpmath.mpf(1), mpmath.mpf(2)], dtype=object)
    for name in NO_OBJECT_LOOP:
        ufunc = getattr(np, name)
        with pytest.raises(TypeError):
            ufunc(*([plain] * ufunc.nin))


def test_machine_floats_are_refused_not_laundered(ctx: object) -> None:
    """math.erf of an mpmath number is a float64: a later constant must not turn it into
    an mpmath number that would pass for one with 50 digits."""
    a = _mp(ctx, [0.3, -0.2])
    rounded = np.vectorize(math.erf, otypes=[object])(a)
    with pytest.raises(TypeError, match="machine precision"):
        np.logaddexp(0.0, rounded + 1.0)


def test_exact_float_zeros_are_constants_other_floats_are_refused(ctx: object) -> None:
    """0 * 0.25 (np.zeros_like of an object array holds the integer 0, a leaky ReLU's
    slope makes it 0.0) is exact in every precision; 0.5 made at machine precision is not."""
    a = _mp(ctx, [0.3, -0.2])
    zeros = np.zeros(2, dtype=object) * 0.25  # Python floats 0.0, as a rule's mask makes
    assert all(type(v) is float and v == 0 for v in zeros)
    assert np.all(np.exp(a + zeros) == np.exp(a))  # an ufunc takes them
    with pytest.raises(TypeError, match="machine precision"):
        np.exp(a + np.vectorize(lambda v: 0.5, otypes=[object])(a))
    from polygrad.backends.mpmath import mp_evaluator

    evaluate = mp_evaluator(lambda leaves: leaves[0] * 0 * 0.25, [(2,)])
    assert [float(v) for v in evaluate(np.array([0.3, -0.2]), np.zeros(2), 30)] == [0, 0]
    with pytest.raises(TypeError, match="machine precision"):
        half = np.vectorize(lambda v: 0.5, otypes=[object])
        mp_evaluator(lambda leaves: half(leaves[0]), [(2,)])(np.ones(2), np.zeros(2), 30)


def test_constants_cast_to_the_input_s_dtype_run_on_mp() -> None:
    """np.asarray(W, dtype=x.dtype), the usual way to match a weight to the input, makes
    an object array of machine floats on mpmath input: constants of the code, like a float
    scalar, not values computed at machine precision (those are refused as they are
    made). A softplus layer written so gets an mp reference and passes; its rule planted
    x (1 + 1e-9), far below what float64 differences resolve here, is MISMATCH."""
    W = np.array([[0.25], [1.0], [-0.5]])
    tiny = 3.0517578125e-05
    x = np.array([[tiny, tiny, tiny], [-0.0012375924824215478, -0.017917899050888544,
                                       0.00012448652124206127]])  # fmt: skip

    def f(v: np.ndarray) -> np.ndarray:
        return np.logaddexp(0.0, v * v) @ np.asarray(W, dtype=v.dtype)

    def vjp(u: np.ndarray, v: np.ndarray, planted: float = 1.0) -> np.ndarray:
        sigmoid = 1.0 / (1.0 + np.exp(-v * v))
        return (u @ W.T) * sigmoid * 2.0 * v * planted

    for reference in ("mp", "auto"):  # "auto" takes the quad tier where it runs
        report = pg.check(f, x, vjp=vjp, reference=reference)
        assert (
            report.details["reference"]["method"]
            in {"mp": ("mp",), "auto": ("quad", "mp")}[reference]
        )
        assert report.verdict == pg.Verdict.PASS and report.ok
        planted = pg.check(f, x, vjp=lambda u, v: vjp(u, v, 1 + 1e-9), reference=reference)
        assert planted.verdict == pg.Verdict.MISMATCH and not planted.ok


def _softplus_loss(W: np.ndarray, y: np.ndarray) -> tuple[object, object]:
    def loss(x: np.ndarray) -> np.ndarray:
        h = np.logaddexp(0.0, x @ W)  # softplus, as it is usually written
        return np.sum(np.where(np.isfinite(h), h, 0.0) * y)

    def grad(x: np.ndarray) -> np.ndarray:
        sigmoid = np.exp(-np.logaddexp(0.0, -(x @ W)))
        return W @ (sigmoid * y)

    return loss, grad


def test_softplus_loss_gets_an_mp_reference_and_passes() -> None:
    rng = np.random.default_rng(7)
    W, y, x = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=3)
    loss, grad = _softplus_loss(W, y)
    report = pg.check(loss, x, grad=grad, reference="mp")  # auto takes quad where it runs
    assert report.details["reference"]["method"] == "mp"
    assert report.verdict == pg.Verdict.PASS and report.ok


def test_softplus_loss_catches_an_error_below_float64_differences() -> None:
    """A rule off by 1e-11 relative: within a float64 difference's error bar, far outside
    the mp reference's."""
    rng = np.random.default_rng(7)
    W, y, x = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=3)
    loss, grad = _softplus_loss(W, y)
    report = pg.check(loss, x, grad=lambda v: grad(v) * (1 + 1e-11))
    assert report.verdict == pg.Verdict.MISMATCH and not report.ok
    # a high-precision reference: quad differences where numpy-quaddtype runs f, else mp
    assert report.details["reference"]["method"] in ("quad", "mp")
    assert report.counts() == {"MISMATCH": 3}
    # every entry is wrong: the Taylor line does not speak of "a few wrong entries"
    taylor = next(ln for ln in str(report).splitlines() if "Taylor test" in ln)
    assert "a few wrong entries" not in taylor


def test_clip_bounds_and_integer_zeros_run_on_mp() -> None:
    """np.clip(u, -2.0, 1.0) leaves the float bounds, np.maximum(u, 0) the int 0, in an
    object array; both are exact constants, and np.exp of them runs."""

    def f(x: np.ndarray) -> np.ndarray:
        u = np.clip(np.logaddexp(0.0, x), -2.0, 1.0)
        return np.exp(np.maximum(x, 0)) + np.tanh(np.exp(u))

    x = np.array([-0.7, 0.2, 1.5])

    def grad(x: np.ndarray) -> np.ndarray:
        sp = np.logaddexp(0.0, x)
        dsp = np.where(sp < 1.0, 1 / (1 + np.exp(-x)), 0.0)
        e = np.exp(np.clip(sp, -2.0, 1.0))
        return np.where(x > 0, np.exp(x), 0.0) + (1 - np.tanh(e) ** 2) * e * dsp

    report = pg.check(lambda v: np.sum(f(v)), x, grad=grad)
    assert report.details["reference"]["method"] == "mp"
    assert report.verdict == pg.Verdict.PASS and report.ok


def test_tail_of_log_of_softplus_in_float32_passes() -> None:
    """log(0.5 + softplus(x)) at x = -72.8: f does not change in float64 along x (its
    derivative is 5e-32), so only an mp reference decides it (INCONCLUSIVE before)."""
    x_ = Node("x")
    program = Program(
        Node("log", (Node("add_const", (Node("softplus", (x_,)),), (0.5,)),)),
        (1,), "float32", (-72.76217651367188,),
    )  # fmt: skip
    report = pg.check(build(program, "numpy"), to_input(program, "numpy"),
                      vjp=numpy_vjp(program))  # fmt: skip
    want = 1 / (1 + math.exp(72.76217651367188)) / (0.5 + math.log1p(math.exp(-72.76217651367188)))
    assert report.entries.reference[0] == pytest.approx(want, rel=1e-6)
    assert report.verdict == pg.Verdict.PASS and report.ok


@pytest.mark.parametrize("extra", [0, 1])
def test_large_input_runs_f_on_mp_only_when_a_check_asks(extra: int) -> None:
    """f runs once on mpmath numbers to show it can; above EAGER_MP_PROBE_INPUTS inputs
    (where mp only re-examines entries in doubt) that waits until a check asks for mp."""
    from polygrad.backends.base import Supplied
    from polygrad.backends.numpy import EAGER_MP_PROBE_INPUTS, NumpyBackend

    n = EAGER_MP_PROBE_INPUTS + extra
    calls: list[str] = []

    def f(x: np.ndarray) -> np.ndarray:
        calls.append(x.dtype.name)
        return np.sum(np.logaddexp(0.0, x))

    x = np.linspace(-3.0, 3.0, n)
    target = NumpyBackend().make_target(f, (x,), (0,), Supplied(grad=np.tanh), 64)
    assert ("object" in calls) is (extra == 0)
    assert (target.evaluate_mp is None) is (extra == 1)
    assert target.mp_mode()  # built now, where it was deferred
    y = target.evaluate_mp(x, np.zeros_like(x), 30)  # type: ignore[misc]
    assert float(mpmath.fsum(y)) == pytest.approx(float(np.sum(np.logaddexp(0.0, x))), rel=1e-15)


def test_operations_at_their_kinks_are_recorded(ctx: object) -> None:
    """Run on the array subclass, every operation that sits exactly at its kink is named;
    the same operations a little off their kinks are not."""
    from polygrad.backends._mp_ufuncs import recording_kinks

    cls = mp_array_type(ctx)

    def kinks(fn, values: list[float]) -> list[str]:
        with recording_kinks(cls) as found:
            fn(_mp(ctx, values))
        return found

    assert kinks(lambda a: np.maximum(a, 0.0), [0.0, 1.0]) == ["maximum"]
    assert kinks(lambda a: np.maximum(a, 0.0), [0.5, 1.0]) == []
    assert kinks(lambda a: np.where(a > 1.0, a, 2 * a), [1.0, 3.0]) == ["greater"]
    assert kinks(lambda a: np.abs(a), [0.0]) == ["absolute"]
    assert kinks(lambda a: np.abs(a), [1e-300]) == []
    assert kinks(lambda a: np.floor(a), [2.0]) == ["floor"]
    assert kinks(lambda a: np.floor(a), [2.5]) == []
    assert kinks(lambda a: np.rint(a), [2.5]) == ["rint"]
    assert kinks(lambda a: np.max(a), [1.0, 3.0, 3.0]) == ["max"]
    assert kinks(lambda a: np.maximum.reduce(a), [3.0, 1.0, 3.0]) == ["maximum"]
    assert kinks(lambda a: np.max(a), [1.0, 3.0, 2.0]) == []
    assert kinks(lambda a: np.clip(a, -1.0, 1.0), [1.0, 0.0]) == ["clip"]
    assert kinks(lambda a: np.clip(a, -1.0, 1.0), [0.5, 0.0]) == []
    assert kinks(lambda a: np.sort(a), [2.0, 1.0, 2.0]) == ["sort"]
    assert kinks(lambda a: np.sin(a) * np.exp(a), [0.0, 1.0]) == []
    assert cls.kinks is None  # type: ignore[attr-defined]  # recording ends with the block


def test_in_place_writes_through_a_view_of_a_new_array_are_kept(ctx: object) -> None:
    """A gather's VJP as NumPy code writes it: ``out = np.zeros_like(u)``, a view
    ``np.moveaxis(out, -1, 0)`` and ``np.add.at`` through it (repeated indices accumulate).
    zeros_like's int 0 were converted to mpmath numbers only when the view was taken, so
    the view was a copy and the writes were lost: the rule on mpmath numbers was 0."""
    u = _mp(ctx, [0.5, -1.0, 2.0])
    g = _mp(ctx, [1.0, 2.0, 3.0, 4.0])
    out = np.zeros_like(u)
    np.add.at(np.moveaxis(out, -1, 0), [0, 2, 2, 1], np.moveaxis(g, -1, 0))
    assert isinstance(out, mp_array_type(ctx))
    assert [float(v) for v in out] == [1.0, 4.0, 5.0]


def test_a_rule_with_a_gather_runs_on_mp_numbers() -> None:
    """layer_norm(log(softplus(x[[0, 1]]) + 0.5)) at (1, -1) in float64: the entries
    (3e-5) are far below f per input scale, and the rule on mpmath numbers decides them;
    with the gather's writes lost it was 0, and the right rule MISMATCH."""
    gather = Node("gather", (Node("x"),), (0, 1))
    inner = Node("log", (Node("add_const", (Node("softplus", (gather,)),), (0.5,)),))
    program = Program(Node("layer_norm", (inner,)), (2,), "float64", (1.0, -1.0))
    report = pg.check(build(program, "numpy"), to_input(program, "numpy"),
                      vjp=numpy_vjp(program))  # fmt: skip
    assert report.verdict == pg.Verdict.PASS and report.ok, str(report)
