"""MuSiQue (Trivedi et al., 2022): multi-hop questions over up to twenty supplied paragraphs, about 90%
of them distractors (ragscale's second confirmatory benchmark).

Reads the official ``musique_ans_v1.0_{dev,train}.jsonl`` (or the ``full`` files): one object per line
with ``id``, ``paragraphs`` (``idx``, ``title``, ``paragraph_text``, ``is_supporting``), ``question``,
``answer``, ``answer_aliases``, ``answerable`` and ``question_decomposition``. The stored pool is every
paragraph in supplied order; ragscale's canonical raw input is the first eight (``task.raw_k=8``, the
release's ``naive_top_k``), while compressors read all of them (``task.compress_from=pool``; a summary
may draw on all twenty). ``task.raw=all`` is the paper's matched-input check. Evidence spans are the
supporting paragraphs, whole. Scores: containment, and EM/F1 max over ``answer`` and
``answer_aliases`` (MuSiQue's own SQuAD-style metric: no yes/no rule). Unanswerable rows of the full
files follow ``task.unanswerable``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.identity import WHEN_SET
from kvx.tasks.jsonl import check_rows, json_rows
from kvx.tasks.rag import PoolRow, PoolTask, dedupe, require_data

URL = "https://github.com/StonyBrookNLP/musique (download_data.sh: musique_ans_v1.0_dev.jsonl)"


@functools.lru_cache(maxsize=2)
def _lines(path: str) -> tuple[dict[str, Any], ...]:
    return tuple(row for _, row in json_rows(Path(path)))


@dataclass
class MuSiQue(PoolTask):
    """``task=musique task.path=musique_ans_v1.0_dev.jsonl``."""

    path: str = ""
    raw_k: int = 8  # ragscale's canonical raw input: the first eight paragraphs
    compress_from: str = field(default="pool", metadata=WHEN_SET)
    closed_f1: ClassVar[bool] = False

    def validate(self) -> None:
        super().validate()
        require_data("task.path", self.path, "MuSiQue's musique_ans_v1.0_dev.jsonl", URL)
        check_rows(self.path, ["id", "paragraphs", "question", "answer"])
        self.check_ids()

    def rows(self) -> list[PoolRow]:
        out = []
        for row in _lines(self.path):
            unanswerable = row.get("answerable") is False
            if unanswerable and self.unanswerable == "drop":
                continue
            paragraphs = row["paragraphs"]
            passages = tuple(
                (f"p{p.get('idx', i)}", str(p["title"]), str(p["paragraph_text"]))
                for i, p in enumerate(paragraphs)
            )
            support = [i for i, p in enumerate(paragraphs) if p.get("is_supporting")]
            answers = () if unanswerable else dedupe([row["answer"], *(row.get("answer_aliases") or [])])
            evidence = tuple((i, 0, len(passages[i][2])) for i in support)
            meta = {
                "hops": len(row.get("question_decomposition") or []),
                "supporting": [passages[i][0] for i in support],
            }
            out.append(
                PoolRow(str(row["id"]), str(row["question"]), passages, answers, unanswerable, evidence, meta)
            )
        return out

    def prefix(self) -> str:
        return "musique"
