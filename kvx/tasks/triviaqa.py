"""TriviaQA rc.wikipedia (Joshi et al., 2017): trivia questions with the Wikipedia pages their
evidence was gathered from (ragscale's later robustness benchmark).

Reads the official layout: ``qa/wikipedia-dev.json`` (``{"Data": [{"Question", "QuestionId", "Answer":
{"Value", "Aliases", "NormalizedAliases", ...}, "EntityPages": [{"Filename", "Title", ...}]}]}``) and the
page texts under ``evidence/wikipedia/<Filename>`` (``task.evidence``; default: the ``evidence/wikipedia``
folder beside the ``qa`` folder). ragscale retrieves "a BM25 top-20 pool from its supplied Wikipedia
pages"; neither the paper nor its release says how pages are cut, so kvx cuts each page into passages
of ``task.passage_words`` (100, DPR's passage size) whitespace-separated words, in page order, titled
by the page, and the stored pool is the ``task.pool_size`` (20) passages BM25 scores highest for the
question over all the row's passages, best first (ties: the earlier passage). The raw input is that
pool (``task.raw=all``). A row without any evidence page is excluded before analysis and listed in the
task manifest. There are no evidence spans (TriviaQA's evidence is distant supervision). Scores:
containment, and EM/F1 max over ``Value``, ``Aliases`` and ``NormalizedAliases``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.ranking import bm25_scores, top_k
from kvx.tasks.rag import PoolRow, PoolTask, dedupe, require_data

URL = (
    "https://nlp.cs.washington.edu/triviaqa/ (triviaqa-rc.tar.gz: qa/wikipedia-dev.json, evidence/wikipedia)"
)


@functools.lru_cache(maxsize=2)
def _questions(path: str) -> tuple[dict[str, Any], ...]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("Data"), list):
        raise ConfigError(f"task.path={path}: not TriviaQA's layout (an object with a 'Data' list)")
    return tuple(data["Data"])


def chunk(text: str, words: int) -> list[str]:
    """A page as consecutive passages of ``words`` whitespace-separated words (the last may be short)."""
    tokens = text.split()
    return [" ".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


@dataclass
class TriviaQA(PoolTask):
    """``task=triviaqa task.path=triviaqa-rc/qa/wikipedia-dev.json``."""

    path: str = ""
    evidence: str = ""  # the evidence/wikipedia folder ("": beside the qa folder)
    pool_size: int = 20  # passages BM25 keeps per question
    passage_words: int = 100  # words per passage
    raw: str = field(default="all", metadata=WHEN_SET)
    closed_f1: ClassVar[bool] = False

    def validate(self) -> None:
        super().validate()
        check_int("task.pool_size", self.pool_size, 1)
        check_int("task.passage_words", self.passage_words, 1)
        require_data("task.path", self.path, "TriviaQA's qa/wikipedia-dev.json", URL)
        require_data("task.evidence", str(self._evidence()), "TriviaQA's evidence/wikipedia folder", URL)
        _questions(self.path)
        self.check_ids()

    def _evidence(self) -> Path:
        return (
            Path(self.evidence) if self.evidence else Path(self.path).parent.parent / "evidence" / "wikipedia"
        )

    def _usable(self) -> list[dict[str, Any]]:
        return [q for q in _questions(self.path) if q.get("EntityPages")]

    def row_ids(self) -> list[str]:
        return [str(q["QuestionId"]) for q in self._usable()]

    def excluded(self) -> dict[str, str]:
        return {
            str(q["QuestionId"]): "no Wikipedia evidence page"
            for q in _questions(self.path)
            if not q.get("EntityPages")
        }

    def rows(self) -> list[PoolRow]:
        return self.build(range(len(self._usable())))

    def build(self, indices: Sequence[int]) -> list[PoolRow]:
        usable = self._usable()
        return [self._row(usable[i]) for i in indices]

    def _row(self, q: dict[str, Any]) -> PoolRow:
        passages = []
        for page in q["EntityPages"]:
            file = self._evidence() / page["Filename"]
            if not file.is_file():
                raise ConfigError(f"task.evidence: no page {file} (question {q['QuestionId']}); see {URL}")
            for k, text in enumerate(chunk(file.read_text(encoding="utf-8"), self.passage_words)):
                passages.append((f"{page['Filename']}#{k}", str(page.get("Title") or ""), text))
        if not passages:
            raise ConfigError(f"task.evidence: question {q['QuestionId']}'s pages hold no text")
        question = str(q["Question"])
        scores = bm25_scores(question, [f"{title}\n{text}" for _, title, text in passages])
        pool = tuple(passages[i] for i in top_k(scores, self.pool_size))
        answer = q["Answer"]
        answers = dedupe(
            [answer.get("Value"), *(answer.get("Aliases") or []), *(answer.get("NormalizedAliases") or [])]
        )
        meta = {"n_pages": len(q["EntityPages"]), "n_passages": len(passages)}
        return PoolRow(str(q["QuestionId"]), question, pool, answers, metadata=meta)

    def prefix(self) -> str:
        return "triviaqa"
