"""Text of the "your check in your terms" section of a report (see :mod:`polygrad.your_terms`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .your_terms import tool_tolerance

if TYPE_CHECKING:
    from .your_terms import YourTerms

__all__ = ["your_terms_lines", "step_text"]


def _g(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "not measured"
    x = float(x)
    return "nan" if np.isnan(x) else f"{x:.{digits}g}"


def step_text(h: float) -> str:
    """An absolute step, with its power of two when it is one (``0.000122 (2^-13)``)."""
    k = np.log2(h) if h > 0 else np.nan
    exact = np.isfinite(k) and float(k) == round(float(k))
    return f"{h:.3g}" + (f" (2^{int(round(float(k)))})" if exact else "")


def _headline(t: YourTerms) -> str:
    head = (
        f"  your check: {t.tool} with {t.step_name} = {step_text(t.step)} "
        f"(absolute, in the input's units), in {t.dtype}, over {t.entries} "
        + ("sampled " if t.sampled else "")
        + f"{'entry' if t.entries == 1 else 'entries'}: "
    )
    diff = abs(t.worst_numeric - t.worst_autodiff)
    allowed = tool_tolerance(t.tool, t.dtype, t.worst_numeric)
    tol = "the tool sets no tolerance" if allowed is None else f"its tolerance {_g(allowed)}"
    at = (
        f"at {t.worst}: autodiff {_g(t.worst_autodiff, 6)}, numeric {_g(t.worst_numeric, 6)}, "
        f"|difference| {_g(diff)}, {tol}"
    )
    if t.passes is not None:
        word = "passes" if t.passes else "FAILS"
        return head + (
            f"its test {t.metric} {word}; max |autodiff - numeric| = {_g(t.value)} "
            f"(worst against its tolerance {at})"
        )
    return head + f"{t.metric} = {_g(t.value)} ({at})"


def _parts(t: YourTerms) -> str:
    if t.roundoff is None:
        return "    no float64 evaluation of f: round-off and truncation cannot be told apart here"
    bend = "kink of f crossed by the step" if t.kink is not None else "truncation"
    bend_value = t.kink if t.kink is not None else t.truncation
    ad = (
        "autodiff's gap to the nearer one-sided derivative" if t.kink is not None
        else "autodiff error"
    )  # fmt: skip
    return (
        f"    its |numeric - autodiff| there: round-off {_g(t.roundoff)} (f's noise / "
        f"{t.step_name}), {bend} {_g(bend_value)}, {ad} {_g(t.autodiff_error)}; "
        f"{_dominant(t)}"
    )


def _dominant(t: YourTerms) -> str:
    parts = {
        "roundoff": t.roundoff or 0.0,
        "bend": (t.kink if t.kink is not None else t.truncation) or 0.0,
        "autodiff": t.autodiff_error or 0.0,
    }
    top = max(parts, key=lambda k: parts[k])
    if top == "autodiff" and t.kink is not None:
        return (
            "at a kink autodiff's gap is to the nearer one-sided derivative, which a "
            "conservative gradient of a composition (ReLU inside max-pooling) may leave: "
            "NONSMOOTH above, not a gradient error"
        )
    if top == "autodiff":
        return "autodiff's own error dominates: the verdict above judges it"
    if top == "bend" and t.kink is not None:
        return (
            "the kink dominates: a difference across a kink is no derivative, not a gradient error"
        )
    if top == "bend":
        return f"truncation (f's curvature x {t.step_name}²) dominates: not a gradient error"
    return (
        "round-off dominates: not a gradient error (round-off depends on the order in which f "
        "sums its terms, so your own run reads a number of this size, not these digits)"
    )


def _relative_note(t: YourTerms) -> str | None:
    """For the relative metric: say when a near-zero entry rules the max."""
    if not t.metric.startswith("max |a - b| /"):
        return None
    k = t.swamped
    if not k:
        return None
    return (
        f"    {k} of {t.entries} entries are at most twice the round-off of this step "
        f"(|gradient| at the worst entry {_g(abs(t.worst_autodiff))}, median |gradient| "
        f"{_g(t.typical)}): their "
        "relative error is of order 1 whatever the gradient, so a max of relative errors is ruled "
        "by them; the absolute |numeric - autodiff| and its parts are what tell"
    )


def your_terms_lines(t: YourTerms) -> list[str]:
    """The section's lines, from ``report.details.your_terms``."""
    lines = [_headline(t), _parts(t)]
    rel = _relative_note(t)
    if rel:
        lines.append(rel)
    if t.kinks:
        lines.append(f"    {t.kinks} of the entries sit at a kink of f (NONSMOOTH above)")
    if t.best_step is not None:
        lines.append(_best_step_line(t))
    return lines


def _best_step_line(t: YourTerms) -> str:
    """The best step measured for the tool, and what its prediction assumed."""
    txt = (
        f"    best {t.step_name} for {t.tool} here: {step_text(_f(t.best_step))} "
        "(absolute; the best measured on powers of two from your step to the one that its "
        f"round-off and truncation predict); measured there, it reads {_g(t.best_value)}"
    )
    if t.best_value_smooth is not None:
        txt += (
            f" ({_g(t.best_value_smooth)} over the entries where f is smooth: a "
            "difference across a kink is no derivative at any step)"
        )
    if t.truncation_unresolved is not None:
        txt += (
            f"; the truncation at your step was below what can be measured "
            f"({_g(t.truncation_unresolved)}), so the prediction assumes it stays that small "
            "at larger steps, as it does where f's third derivative is 0 (a quadratic f)"
        )
        if t.best_step_capped:
            txt += ", and stops at a quarter of the input's scale"
        txt += "; where f curves, the best step is smaller"
    if t.best_value is not None and t.value is not None and t.best_value >= t.value:
        txt += (
            f"; no step in that range brings this metric below your {_g(t.value)}: the entries "
            "whose gradient is below the round-off rule it at every step, so read the absolute "
            "|numeric - autodiff| and its parts above instead"
        )
    return txt


def _f(x: float | None) -> float:
    return float("nan") if x is None else float(x)
