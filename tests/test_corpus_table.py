"""The corpus table's lines (``docs/accuracy.md``): reasons cut at a sentence, numbers read."""

from __future__ import annotations

from benchmarks.corpus import table


def test_a_reason_stored_cut_mid_word_ends_at_a_sentence():
    why = "polygrad: NONSMOOTH — kinks: 3 entries. " + "a one-sided derivative " * 20
    cut = why[: table.STORED_WHY]  # how an older run stored it
    assert cut.endswith("deriv") or not cut.endswith(" ")
    assert table._sentences(cut) == "polygrad: NONSMOOTH — kinks: 3 entries …"
    assert table._sentences("a short reason.") == "a short reason"


def test_a_stored_number_is_read_as_a_number():
    assert table._num(None) == "NaN"
    assert table._num(828945.9562100368) == "8.289e+05"
    assert table._num("x[0]") == "x[0]"
