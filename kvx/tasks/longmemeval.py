"""LongMemEval (Wu et al., 2025): questions about a user's long chat history, answered from the
sessions a retriever returns (ragscale's semantic-judge replication).

Reads the official ``longmemeval_s.json`` / ``longmemeval_oracle.json`` layout (the cleaned release's
``longmemeval_s_cleaned.json`` too): a JSON list of ``{"question_id", "question_type", "question",
"answer", "question_date", "haystack_dates", "haystack_session_ids", "haystack_sessions": [[{"role",
"content", "has_answer"}]], "answer_session_ids"}``. ragscale's pool is a BM25 top-20 of the row's
roughly 48 sessions, and the raw reader receives that pool (``task.raw=all``); compressors read the
same pool. Sessions are indexed as LongMemEval's flat BM25 session retriever indexes them (the user
turns' contents joined by a space; ``src/retrieval/run_retrieval.py``) and scored with kvx's BM25
(``kvx.core.ranking``); ties keep the earlier session.

The reader prompt is LongMemEval's own (``src/generation/run_generation.py``, commit 9e0b455f, direct
reading, JSON history, both sides of each session): the retrieved sessions sorted by date (a stable
sort of the ranking), each ``### Session n:\\nSession Date: ...\\nSession Content:\\n\\n<JSON turns without
has_answer>`` (one ``passage`` segment each) after the instruction, then the current date, the question
and ``Answer:``. Evidence spans are the answer sessions (``answer_session_ids``) present in the pool.

The paper's score is LongMemEval's semantic judge (``judge=longmemeval``): sources carry
``question_type``, ``question_id``, the bare ``question`` and ``answer``, so it applies. The lexical
score beside it (containment, EM/F1 against the reference) is no LongMemEval score.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.ranking import bm25_scores, top_k
from kvx.core.source import Segment
from kvx.tasks.rag import PoolRow, PoolTask, require_data

URL = "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned (longmemeval_s_cleaned.json)"
#: run_generation.py's direct-reading template, cut where the history and the question go
INSTRUCTION = (
    "I will give you several history chats between you and a user. Please answer the question based on "
    "the relevant chat history."
)
PREAMBLE = f"{INSTRUCTION}\n\n\nHistory Chats:\n"
FIELDS = (
    "question_id",
    "question_type",
    "question",
    "answer",
    "question_date",
    "haystack_dates",
    "haystack_session_ids",
    "haystack_sessions",
)


@functools.lru_cache(maxsize=2)
def _questions(path: str) -> tuple[dict[str, Any], ...]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, list):
        raise ConfigError(f"task.path={path}: not LongMemEval's layout (a JSON list of questions)")
    for index, row in enumerate(data):
        missing = [name for name in FIELDS if name not in row]
        if missing:
            raise ConfigError(f"task.path={path}: item {index} has no field(s) {missing}")
    return tuple(data)


def session_text(date: str, turns: Sequence[dict[str, Any]]) -> str:
    """One session as LongMemEval's JSON history shows it, without the ``### Session n:`` line."""
    shown = [{k: v for k, v in turn.items() if k != "has_answer"} for turn in turns]
    return f"Session Date: {date}\nSession Content:\n\n{json.dumps(shown)}"


@dataclass
class LongMemEval(PoolTask):
    """``task=longmemeval task.path=longmemeval_s.json``; score with ``judge=longmemeval``."""

    path: str = ""
    pool_size: int = 20  # sessions BM25 keeps per question
    raw: str = field(default="all", metadata=WHEN_SET)
    closed_f1: ClassVar[bool] = False
    max_new_tokens: ClassVar[int] = 64  # free-form answers for a judge (ragscale's readers: 64)

    def validate(self) -> None:
        super().validate()
        check_int("task.pool_size", self.pool_size, 1)
        require_data("task.path", self.path, "LongMemEval's longmemeval_s.json", URL)
        _questions(self.path)
        self.check_ids()

    def row_ids(self) -> list[str]:
        return [str(q["question_id"]) for q in _questions(self.path)]

    def rows(self) -> list[PoolRow]:
        return self.build(range(len(_questions(self.path))))

    def build(self, indices: Sequence[int]) -> list[PoolRow]:
        questions = _questions(self.path)
        return [self._row(questions[i]) for i in indices]

    def _row(self, q: dict[str, Any]) -> PoolRow:
        sessions, dates, ids = q["haystack_sessions"], q["haystack_dates"], q["haystack_session_ids"]
        keys = [" ".join(t["content"] for t in s if t.get("role") == "user") for s in sessions]
        ranked = top_k(bm25_scores(str(q["question"]), keys), self.pool_size)
        pool = sorted(ranked, key=lambda i: dates[i])  # stable: equal dates keep the ranking
        passages = tuple((str(ids[i]), "", session_text(dates[i], sessions[i])) for i in pool)
        answer_sessions = set(map(str, q.get("answer_session_ids") or []))
        evidence = tuple((k, 0, len(p[2])) for k, p in enumerate(passages) if p[0] in answer_sessions)
        meta = {
            "question_id": str(q["question_id"]),
            "question_type": q["question_type"],
            "question": str(q["question"]),
            "answer": str(q["answer"]),
            "question_date": q["question_date"],
            "n_sessions": len(sessions),
        }
        return PoolRow(
            str(q["question_id"]), str(q["question"]), passages, (str(q["answer"]),), False, evidence, meta
        )

    def layout(self, row: PoolRow, picked: Sequence[int]) -> list[Segment]:
        sessions = [
            Segment(f"session{n}", f"### Session {n}:\n{row.passages[i][2]}", role="passage")
            for n, i in enumerate(picked, 1)
        ]
        return [Segment("preamble", PREAMBLE, role="instruction"), *sessions]

    def prompt(self, row: PoolRow) -> tuple[str, str]:
        return f"\n\n\nCurrent Date: {row.metadata['question_date']}\nQuestion: {row.question}\nAnswer:", ""

    def prefix(self) -> str:
        return "longmemeval"
