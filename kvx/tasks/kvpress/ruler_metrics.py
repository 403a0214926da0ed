"""kvpress's RULER score (``evaluation/benchmarks/ruler/calculate_metrics.py``), per answer.

kvpress first strips the answer, deletes every control character (``\\x00``-``\\x1f``: newlines and
tabs included, so ``"12\\n34"`` reads ``"1234"``) and strips it again; then a ``qa_*`` task is scored
with ``string_match_part`` (1 when any reference occurs in the answer) and every other task with
``string_match_all`` (the share of references that occur), both case-insensitive. A task's number is
the mean of its answers' scores x 100, rounded to 2 decimals.

Per answer these are kvx's :func:`kvx.tasks.scoring.string_match_all` and
:func:`~kvx.tasks.scoring.string_match_part` (RULER's own), which kvx's generated RULER tasks use; the
one difference is the deletion of control characters, which kvx's generated tasks do not make.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kvx.tasks.scoring import string_match_all, string_match_part

_CONTROL = re.compile(r"[\x00-\x1f]")


def clean_prediction(prediction: str) -> str:
    """The answer as kvpress scores it: stripped, control characters deleted, stripped again."""
    return _CONTROL.sub("", prediction.strip()).strip()


def metric_name(task: str) -> str:
    """The metric kvpress applies to a RULER task: by the part of its name before the first ``_``."""
    return "string_match_part" if task.split("_")[0] == "qa" else "string_match_all"


def ruler_score(prediction: str, references: Sequence[str], task: str) -> float:
    """kvpress's score of one answer to one RULER ``task``, in [0, 1]."""
    match = string_match_part if metric_name(task) == "string_match_part" else string_match_all
    return match(clean_prediction(prediction), references)
