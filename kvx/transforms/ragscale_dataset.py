"""ragscale's dataset file (one JSON object per line: ``example_id``, ``question``, ``candidate_pool``,
...), read to tell which kvx row a ragscale artifact was compiled for.

ragscale's example ids are its own (``hpqa-0000`` is a running number), so a row is matched by its
question and its passages; the pool id ragscale stored with the artifact is checked against the
dataset by ragscale's own rule (``ragscale.config.canonical_evidence`` and ``ragscale.cache.digest``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvx.core.errors import ConfigError
from kvx.core.jsonl import JsonLineError, json_lines
from kvx.core.source import Source
from kvx.transforms.extractive import header


@dataclass(frozen=True)
class Case:
    """One dataset row: what kvx compares with its own row, and ragscale's id of its pool."""

    example_id: str
    question: str
    docs: tuple[str, ...]
    pool_id: str  # hex, without "sha256:"


def canonical_evidence(pool: Any) -> str:
    """ragscale's raw evidence string: documents (a string, or a mapping's text / content /
    page_content, else its sorted JSON) joined by a blank line; a string pool as it is."""
    if isinstance(pool, str):
        return pool
    if isinstance(pool, list):
        docs = []
        for doc in pool:
            if isinstance(doc, dict):
                text = doc.get("text", doc.get("content", doc.get("page_content")))
                docs.append(str(text) if text is not None else json.dumps(doc, sort_keys=True))
            else:
                docs.append(str(doc))
        return "\n\n".join(docs)
    return json.dumps(pool, sort_keys=True, ensure_ascii=False)


def _docs(pool: Any) -> tuple[str, ...]:
    if isinstance(pool, list):
        return tuple(canonical_evidence([doc]) for doc in pool)
    return (canonical_evidence(pool),)


def collapse(text: str) -> str:
    """Text with every whitespace run one space: kvx joins HotpotQA's sentences as stored, ragscale
    with a space between them."""
    return " ".join(text.split())


def read_dataset(path: str) -> dict[str, Case]:
    """The dataset's rows by example id; a ConfigError naming the line for a malformed one."""
    where = f"transform.dataset={path}"
    out: dict[str, Case] = {}
    try:
        lines = list(json_lines(Path(path)))
    except JsonLineError as exc:
        raise ConfigError(f"{where} line {exc.line}: not JSON ({exc.reason})") from None
    for number, case in lines:
        missing = {"example_id", "question", "candidate_pool"} - set(case if isinstance(case, dict) else ())
        if missing:
            raise ConfigError(f"{where} line {number}: missing {sorted(missing)}")
        evidence = canonical_evidence(case["candidate_pool"])
        pool = str(case.get("candidate_pool_id") or hashlib.sha256(evidence.encode("utf-8")).hexdigest())
        row = str(case["example_id"])
        out[row] = Case(
            row, str(case["question"]), _docs(case["candidate_pool"]), pool.removeprefix("sha256:")
        )
    return out


def same_pool(case: Case, source: Source) -> bool:
    """Whether the kvx row's passages are the case's documents, in order, as ``[title] body`` with
    whitespace collapsed."""
    passages = [s for s in source.parts() if s.role == "passage"]
    mine = [
        collapse(f"[{s.title}] {s.text.removeprefix(header(s))}" if s.title else s.text) for s in passages
    ]
    return mine == [collapse(doc) for doc in case.docs]


def question_of(source: Source) -> str:
    """The bare question a ragscale dataset stores: the task's ``metadata["query"]``, else the prompt's."""
    return collapse(str(source.metadata.get("query") or source.question))
