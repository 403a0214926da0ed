"""kvpress's boxed-answer accuracy for AIME25 and Math500 (``evaluation/benchmarks/{aime25,math500}/
calculate_metrics.py``), rule for rule, so kvx's numbers compare with kvpress's.

Both take the text after ``boxed{`` up to the first ``}`` and compare it, as a string, with the row's
answer; there is no normalisation (``\\boxed{ 70}`` is not ``70``) and no brace matching (a nested
``\\boxed{\\frac{1}{2}}`` is read as ``\\frac{1``). They differ in which box counts:

- AIME25 reads the *last* ``boxed{``; an answer with none is read whole up to its first ``}``, so a
  bare ``70`` is correct for 70 (``str.split`` returns the whole text);
- Math500 reads the *first* ``boxed{``; an answer with none is wrong.

``answered`` (kvpress's second count) is whether ``boxed{`` occurs in the answer at all.
"""

from __future__ import annotations

from typing import Literal

BOX = "boxed{"
#: which box each benchmark reads
WHICH = {"aime25": "last", "math500": "first"}

Which = Literal["first", "last"]


def extract_boxed(prediction: str, which: Which) -> str | None:
    """The boxed answer as kvpress reads it: after the ``which`` ``boxed{`` up to the next ``}``; for
    ``last``, the whole text up to its first ``}`` when there is no box; for ``first``, None then."""
    parts = prediction.split(BOX)
    if which == "first":
        return parts[1].split("}")[0] if len(parts) > 1 else None
    return parts[-1].split("}")[0]


def boxed_correct(prediction: str, answer: str, which: Which) -> bool:
    """kvpress's ``score_aime``: the extracted text equals the answer exactly."""
    return extract_boxed(prediction, which) == answer


def answered(prediction: str) -> bool:
    """kvpress's ``answered`` count: the answer holds a box."""
    return BOX in prediction
