"""kvpress's needle in a haystack (``evaluation/benchmarks/needle_in_haystack/utils.py``): the needle
sentence of ``alessiodevoto/paul_graham_essays`` hidden at ``task.needle_depth`` percent of the
essays, cut to the context length.

As kvpress builds it, from the dataset's first row (``context``: the essays; ``needle``, ``question``,
``answer_prefix``, ``max_new_tokens``): the haystack is the essays cut to ``context_tokens`` minus the
needle's tokens minus 150 (kvpress's reserve for the system prompt and question; ``context_tokens``
plays kvpress's ``max_context_length``), the needle goes in at ``int(haystack tokens x depth / 100)``
and the text is wrapped as ``This is a very long story book: <book> ... </book>.``. One (depth,
length) point is one source; the depth x length grid is a sweep (``+experiment=kvpress/needle``).

Kept deviation: kvpress cuts and inserts at token positions of its tokenizer and decodes the tokens
again (the needle can land inside a word, glued to it); kvx cuts at the last whole word that fits and
inserts the needle at the last word boundary at or before the depth's token count, with a space on
each side, measuring with the reader's tokenizer. The score is kvpress's ROUGE with the needle as
hypothesis (:mod:`kvx.tasks.kvpress.needle_metrics`): its ``rouge-1`` ``p``, the share of the needle's
distinct words in the answer, is the score (correct when every one is there), and all nine numbers
are the answer's metrics (``rouge-1_p`` ...), named as in kvpress's ``metrics.json``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.source import Source
from kvx.tasks.base import CountTokens, Score
from kvx.tasks.kvpress.dataset import KvpressTask
from kvx.tasks.kvpress.needle_metrics import needle_scores
from kvx.tasks.ruler import fit_units, too_small

#: kvpress's reserve for the system prompt, question and template (``context_length_limit``)
RESERVE = 150
#: kvpress's ``context_wrapper``
WRAPPER = "This is a very long story book: <book> {context} </book>."
_WORD = re.compile(r"\S+")


@dataclass
class NeedleInHaystack(KvpressTask):
    """``task=needle_in_haystack task.needle_depth=50 context_tokens=4096``: one source, the needle at
    half the haystack's tokens."""

    needle_depth: int = 50  # percent of the haystack's tokens before the needle, 0-100

    hub_id: ClassVar[str] = "alessiodevoto/paul_graham_essays"
    benchmark: ClassVar[str] = "needle_in_haystack"
    answer_column: ClassVar[str] = "needle"

    def validate(self) -> None:
        if check_int("task.needle_depth", self.needle_depth, 0) > 100:
            raise ConfigError(f"task.needle_depth={self.needle_depth} must be a percentage in [0, 100]")
        super().validate()

    def _room(self, n: int, context_tokens: int, count_tokens: CountTokens) -> tuple[dict[str, Any], int]:
        """The first row and the haystack's token budget; ValueError, as ``sources`` fails, for more than
        one source or a context too small for the needle and kvpress's reserve."""
        if n > 1:
            raise ValueError(
                f"asked for {n} sources but needle_in_haystack has one per needle depth and context "
                "length: use n_sources=1 and sweep task.needle_depth and context_tokens"
            )
        row = self.rows()[0]
        fixed = count_tokens(row["needle"]) + RESERVE
        if fixed > context_tokens:
            raise ValueError(too_small(context_tokens, fixed))
        return row, context_tokens - fixed

    def check_budget(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> None:
        self._room(n, context_tokens, count_tokens)

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        if n < 1:
            return []
        row, room = self._room(n, context_tokens, count_tokens)
        essays = row["context"]
        # every word takes a token at least, so no haystack of ``room`` tokens holds more words
        ends = [match.end() for match in itertools.islice(_WORD.finditer(essays), room)]

        def prefix(words: int) -> str:
            return essays[: ends[words - 1]] if words else ""

        def measure(words: int) -> int:
            return count_tokens(prefix(words))

        words, haystack_tokens = fit_units(measure, room, 0, len(ends), hint=len(ends))
        target = int(haystack_tokens * self.needle_depth / 100)
        cut, _ = fit_units(measure, target, 0, words, hint=words * self.needle_depth // 100)
        needle = row["needle"].strip()
        before, after = prefix(cut), essays[len(prefix(cut)) : len(prefix(words))].lstrip()
        body = " ".join(part for part in (before, needle, after) if part)
        context = WRAPPER.format(context=body)
        start = context.index("<book> ") + len("<book> ") + (len(before) + 1 if before else 0)
        return [
            Source(
                id=f"{self.benchmark}_{context_tokens}_{self.needle_depth:03d}",
                context=context,
                question=row["question"],
                answers=self.answers(row),
                evidence=[(start, start + len(needle))],
                answer_prefix=row["answer_prefix"] or "",
                metadata={
                    "row": 0,
                    "needle_depth": self.needle_depth,
                    "haystack_tokens": haystack_tokens,
                    "needle_at_tokens": measure(cut),
                    "prompt_tokens": count_tokens(f"{context}\n{row['question']}"),
                },
            )
        ]

    def evaluate(self, answer: str, source: Source) -> Score:
        scores = needle_scores(source.answers[0], answer)
        metrics = {
            f"{metric}_{stat}": value for metric, stats in scores.items() for stat, value in stats.items()
        }
        return Score.of(scores["rouge-1"]["p"], answer.strip(), metrics=metrics)
