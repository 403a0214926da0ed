"""kvpress's AIME25 / Math500 boxed-answer rules, pinned on the benchmarks' own first problems."""

from __future__ import annotations

import pytest

from kvx.tasks.kvpress.math_metrics import WHICH, answered, boxed_correct, extract_boxed

# AIME 2025 I, problem 1 (sum of the bases b > 9 with 17_b dividing 97_b): 70
AIME_ANSWER = "70"
# MATH-500's first problem: (0, 3) in polar coordinates
MATH_ANSWER = r"\left( 3, \frac{\pi}{2} \right)"


def test_each_benchmark_reads_its_own_box():
    assert WHICH == {"aime25": "last", "math500": "first"}


@pytest.mark.parametrize(
    ("prediction", "last", "first"),
    [
        (r"so b = 21 or 49, and the sum is \boxed{70}.", "70", "70"),
        # a first guess boxed, then the final one: AIME25 reads the last, Math500 the first
        (r"maybe \boxed{16}? No: the bases are 21 and 49, \boxed{70}", "70", "16"),
        # no box: AIME25 reads the whole text up to its first "}", Math500 reads nothing
        ("70", "70", None),
        ("The answer is 70.", "The answer is 70.", None),
        ("x^{2} is 70", "x^{2", None),
        # no brace matching: a nested box ends at its first "}"
        (r"\boxed{\frac{1}{2}}", r"\frac{1", r"\frac{1"),
        # no normalisation
        (r"\boxed{ 70}", " 70", " 70"),
        # an unclosed box runs to the end of the text
        (r"\boxed{70", "70", "70"),
    ],
)
def test_extract_boxed(prediction, last, first):
    assert extract_boxed(prediction, "last") == last
    assert extract_boxed(prediction, "first") == first


def test_aime25_scores():
    assert boxed_correct(r"the sum is \boxed{70}.", AIME_ANSWER, "last")
    assert boxed_correct(r"\boxed{16} ... \boxed{70}", AIME_ANSWER, "last")
    assert boxed_correct("70", AIME_ANSWER, "last")  # a bare answer without a box counts
    assert not boxed_correct(r"\boxed{070}", AIME_ANSWER, "last")
    assert not boxed_correct(r"\boxed{70} ... \boxed{16}", AIME_ANSWER, "last")


def test_math500_scores():
    assert boxed_correct(r"\boxed{70} ... \boxed{16}", "70", "first")
    assert not boxed_correct("70", "70", "first")
    # an answer with braces can never match: the box is cut at its first "}"
    assert not boxed_correct(rf"\boxed{{{MATH_ANSWER}}}", MATH_ANSWER, "first")
    assert extract_boxed(rf"\boxed{{{MATH_ANSWER}}}", "first") == r"\left( 3, \frac{\pi"


def test_answered_is_a_box_anywhere():
    assert answered(r"... \boxed{70}")
    assert answered("boxed{")
    assert not answered("70")
