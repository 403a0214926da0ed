"""LongBench-v2's multiple-choice metric, as kvpress's
``evaluation/benchmarks/longbenchv2/calculate_metrics.py`` (LongBench's ``pred.py`` ``extract_answer``)
computes it: the answer is right when, with its ``*`` removed, it says "The correct answer is (X)" or
"The correct answer is X" for the right letter X."""

from __future__ import annotations


def correct_choice(prediction: str, letter: str) -> bool:
    """Whether the prediction states ``letter`` in LongBench-v2's answer format (markdown bold ignored)."""
    text = prediction.replace("*", "")
    return f"The correct answer is ({letter})" in text or f"The correct answer is {letter}" in text
