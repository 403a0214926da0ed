"""SQuAD v2 dev as RAG: each question's candidate pool is paragraphs of its own article.

Reads the SQuAD v2.0 dev file shipped with NVIDIA's RULER package, or ``path`` in the official
format (``{"version": "v2.0", "data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``).
The pool holds the question's own paragraph and ``pool_size - 1`` others from the same article
(seeded per question; 0: the whole article), in the article's order, so the distractors are
on-topic as in HotpotQA's distractor setting. Unanswerable questions are flagged and dropped by
default; ``task.unanswerable=keep`` scores them as SQuAD v2 does (only an empty answer is right).
Gold answer spans become evidence when their paragraph is in the raw input.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.tasks.rag import PoolRow, PoolTask
from kvx.tasks.ruler import require_ruler_data, ruler_data_file


@functools.lru_cache(maxsize=2)
def _articles(path: str) -> tuple[dict[str, Any], ...]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ConfigError(f"task.path={path}: not the SQuAD format (an object with a 'data' list)")
    return tuple(data["data"])


@dataclass
class SquadV2(PoolTask):
    """``task=squad_v2_rag task.pool_size=10``: SQuAD v2 questions over paragraph pools."""

    path: str = ""
    pool_size: int = 10  # candidate paragraphs per question, its own included (0: the whole article)

    def validate(self) -> None:
        super().validate()
        check_int("task.pool_size", self.pool_size, 0)
        if self.path and not Path(self.path).is_file():
            raise ConfigError(f"task.path={self.path!r}: no such file")
        if not self.path:
            require_ruler_data("task=squad_v2_rag", "squad.json")
        self.check_ids()

    def _file(self) -> str:
        return self.path or str(ruler_data_file("squad.json"))

    def rows(self) -> list[PoolRow]:
        out = []
        for article in _articles(self._file()):
            paragraphs = article["paragraphs"]
            for home, paragraph in enumerate(paragraphs):
                for qa in paragraph["qas"]:
                    unanswerable = bool(qa.get("is_impossible")) or not qa.get("answers")
                    if unanswerable and self.unanswerable == "drop":
                        continue
                    out.append(self._row(article["title"], paragraphs, home, qa, unanswerable))
        return out

    def _row(self, title: str, paragraphs: list[dict], home: int, qa: dict, unanswerable: bool) -> PoolRow:
        others = [i for i in range(len(paragraphs)) if i != home]
        if self.pool_size:  # seeded by the question, so a row's pool never depends on the split
            others = random.Random(qa["id"]).sample(others, min(self.pool_size - 1, len(others)))
        chosen = sorted([home, *others])
        passages = tuple((f"p{i}", title, paragraphs[i]["context"]) for i in chosen)
        answers = tuple(dict.fromkeys(a["text"] for a in qa.get("answers") or []))
        where = chosen.index(home)
        spans = tuple(
            dict.fromkeys(
                (where, a["answer_start"], a["answer_start"] + len(a["text"]))
                for a in qa.get("answers") or []
            )
        )
        return PoolRow(qa["id"], qa["question"], passages, answers, unanswerable, spans)

    def prefix(self) -> str:
        return "squad"
