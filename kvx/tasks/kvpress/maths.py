"""kvpress's decoding-compression benchmarks, AIME25 (``alessiodevoto/aime25``, 30 problems) and
MATH-500 (``alessiodevoto/math500``, 500 problems): long reasoning generations scored by the boxed
answer (:mod:`kvx.tasks.kvpress.math_metrics`).

Each row is one source, its prompt unchanged, decoded with the budget the rows carry (kvpress's
``max_new_tokens: null``). The score is kvpress's ``correct`` (1 or 0); ``answered`` (a box anywhere
in the answer) is a metric, and the text kvpress compares with the answer is the score's normalised
text, so a wrong answer shows what was read from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kvx.core.source import Source
from kvx.tasks.base import Score
from kvx.tasks.kvpress.dataset import KvpressTask
from kvx.tasks.kvpress.math_metrics import Which, answered, boxed_correct, extract_boxed


@dataclass
class _BoxedAnswer(KvpressTask):
    """A kvpress math benchmark: one reference, compared with the box ``which`` names."""

    which: ClassVar[Which]

    def answers(self, row: dict[str, Any]) -> list[str]:
        """The answer as kvpress compares it, ``str(answer)``: AIME's integers may be stored as numbers."""
        return [str(row[self.answer_column])]

    def evaluate(self, answer: str, source: Source) -> Score:
        correct = boxed_correct(answer, source.answers[0], self.which)
        read = extract_boxed(answer, self.which)
        return Score(
            float(correct),
            correct,
            "" if read is None else read,
            metrics={"answered": float(answered(answer))},
        )


@dataclass
class Aime25(_BoxedAnswer):
    """``task=aime25``: AIME 2025 I and II, the last box read."""

    hub_id: ClassVar[str] = "alessiodevoto/aime25"
    benchmark: ClassVar[str] = "aime25"
    which: ClassVar[Which] = "last"


@dataclass
class Math500(_BoxedAnswer):
    """``task=math500``: MATH-500, the first box read."""

    hub_id: ClassVar[str] = "alessiodevoto/math500"
    benchmark: ClassVar[str] = "math500"
    which: ClassVar[Which] = "first"
