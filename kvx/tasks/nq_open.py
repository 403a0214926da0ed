"""NQ-Open (Lee et al., 2019, from Natural Questions): open-domain questions, each with one stored
retrieved pool (ragscale's lexical boundary benchmark).

The official NQ-open files (``NQ-open.dev.jsonl``: ``{"question", "answer": [...]}``) hold questions
only; the pools come in the DPR / FiD retrieval layout that RECOMP and FiD read: a JSON list (or JSONL)
of ``{"question", "answers": [...], "ctxs": [{"id", "title", "text", ...}]}`` in retrieval order, which
carries NQ-open's questions and answers (``answer`` is read where ``answers`` is absent). The stored
pool is ``ctxs`` as stored; the raw input is all of it (``task.raw=first_k task.raw_k=20`` reads the
first twenty). A row's id is its ``id`` field, else the split named in the file name (test, dev or
train) and its 0-based position: ragscale's ``test2104``.

Scores: containment, and EM/F1 max over the accepted answers (the same lexical interface as the other
pool tasks; not Google's document-level NQ evaluator). A row whose every reference normalizes to empty
(ragscale A.3: ``test2104``'s reference is ``")"``) cannot be scored: it is excluded before analysis,
and the task manifest lists it with its malformed value.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.tasks.jsonl import check_rows, json_rows
from kvx.tasks.rag import PoolRow, PoolTask, dedupe, require_data
from kvx.tasks.scoring import squad_normalize

URL = (
    "https://github.com/google-research-datasets/natural-questions/tree/master/nq_open (questions); "
    "pools in the DPR/FiD layout: https://github.com/facebookresearch/FiD (get-data.sh) or "
    "https://github.com/facebookresearch/DPR (retriever results)"
)


def split_name(path: str) -> str:
    """The split a file name names (``test``, ``dev`` or ``train``; else ``row``): ids' prefix."""
    name = Path(path).name.lower()
    return next((split for split in ("test", "dev", "train") if split in name), "row")


@functools.lru_cache(maxsize=2)
def _load(path: str) -> tuple[tuple[PoolRow, ...], tuple[tuple[str, str], ...]]:
    """(usable rows, excluded (id, reason)) in file order."""
    rows, excluded = [], []
    prefix = split_name(path)
    for index, (where, row) in enumerate(json_rows(Path(path))):
        ident = str(row.get("id") or f"{prefix}{index}")
        ctxs = row.get("ctxs")
        if not ctxs:
            raise ConfigError(
                f"task.path={path}: {where} has no ctxs: NQ-open's own jsonl holds questions only; give the "
                "pools in the DPR/FiD layout ({question, answers, ctxs: [{id, title, text}]})"
            )
        answers = row.get("answers", row.get("answer")) or []
        answers = [answers] if isinstance(answers, str) else list(answers)
        if not any(squad_normalize(str(a)) for a in answers):
            excluded.append((ident, f"every reference normalizes to empty: {answers!r}"))
            continue
        passages = []
        for position, ctx in enumerate(ctxs):
            if not isinstance(ctx, dict) or not isinstance(ctx.get("text"), str):
                raise ConfigError(f"task.path={path}: {where} ctx {position} has no text")
            passages.append((str(ctx.get("id", position)), str(ctx.get("title") or ""), ctx["text"]))
        rows.append(PoolRow(ident, str(row["question"]), tuple(passages), dedupe(answers)))
    return tuple(rows), tuple(excluded)


@dataclass
class NQOpen(PoolTask):
    """``task=nq_open task.path=NQ/test.json``: one stored retrieved pool per question."""

    path: str = ""
    raw: str = field(default="all", metadata=WHEN_SET)
    closed_f1: ClassVar[bool] = False

    def validate(self) -> None:
        super().validate()
        require_data("task.path", self.path, "NQ-Open pools in the DPR/FiD retrieval layout", URL)
        check_rows(self.path, ["question"])
        _load(self.path)  # a row without a pool fails here, naming the layout
        self.check_ids()

    def rows(self) -> list[PoolRow]:
        return list(_load(self.path)[0])

    def excluded(self) -> dict[str, str]:
        return dict(_load(self.path)[1])

    def prefix(self) -> str:
        return "nq"

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        return {"file": self.path, **super().manifest(n, seed)}
