"""RAG question answering over a stored candidate pool (ragscale section 4): the shared layout,
raw policy and scoring of pool tasks, and the user JSONL pool format as a task.

A row is a question, its candidate passages in supplied order (ids, titles, texts) and its
reference answers (plus aliases). The raw reader input is the pool in supplied order, or its first
``raw_k`` passages; text compressors (``transform=``) see that same raw input, so raw and compressed
conditions share question, pool, prompt and scoring and differ only in the evidence. Passages are
laid out as HotpotQA's RULER QA prompt lays out documents, one ``passage`` segment each.

JSONL pool format, one object per line::

    {"id": "q1", "question": "...", "answers": ["..."], "aliases": ["..."],
     "candidates": [{"id": "p1", "title": "...", "text": "..."}, ...], "unanswerable": false}

``aliases`` and ``unanswerable`` are optional; an unanswerable row has no answers and is scored
as SQuAD v2 scores one (only an empty answer is right) when kept (``task.unanswerable=keep``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.checks import check_choice, check_int
from kvx.core.errors import ConfigError
from kvx.core.source import Segment, Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.jsonl import check_rows, json_rows, seeded_order
from kvx.tasks.scoring import containment, exact_match, normalize_answer, token_f1

INSTRUCTION = (
    "Answer the question based on the given documents. "
    "Only give me the answer and do not output any other words."
)
PREAMBLE = f"{INSTRUCTION}\n\nThe following are given documents."
UNANSWERABLE = ("drop", "keep")

Span = tuple[int, int]


def pool_segments(
    paragraphs: Sequence[tuple[str, Sequence[str]]],
) -> tuple[list[Segment], list[list[Span | None]]]:
    """RULER-layout segments (the preamble, then ``Document n:\\n<title>\\n<sentences>`` per passage,
    joined by a blank line) and, per passage, each sentence's stripped span in the joined context
    (None for a blank sentence)."""
    segments = [Segment("preamble", PREAMBLE, role="instruction")]
    offset = len(PREAMBLE) + 2
    spans: list[list[Span | None]] = []
    for number, (title, sentences) in enumerate(paragraphs, 1):
        text = f"Document {number}:\n{title}\n"
        sentence_spans: list[Span | None] = []
        for sentence in sentences:
            lead = len(sentence) - len(sentence.lstrip())
            stripped = sentence.strip()
            start = offset + len(text) + lead
            sentence_spans.append((start, start + len(stripped)) if stripped else None)
            text += sentence
        spans.append(sentence_spans)
        segments.append(Segment(f"doc{number}", text, role="passage", title=title))
        offset += len(text) + 2
    return segments, spans


def raw_policy(raw_k: int, n_candidates: int) -> str:
    """The raw reader input as words, recorded with every row."""
    if raw_k and raw_k < n_candidates:
        return f"supplied order, first {raw_k} of {n_candidates}"
    return f"supplied order, all {n_candidates}"


@dataclass(frozen=True)
class PoolRow:
    """One stored row: what every reader and compressor sees of it."""

    id: str
    question: str
    passages: tuple[tuple[str, str, str], ...]  # (id, title, text) in supplied order
    answers: tuple[str, ...]  # reference answers then aliases; () when unanswerable
    unanswerable: bool = False
    #: (passage index, start, end): answer spans inside a passage's text, when known
    answer_spans: tuple[tuple[int, int, int], ...] = ()


def pool_source(row: PoolRow, raw_k: int, prefix: str, count_tokens: CountTokens, **meta: Any) -> Source:
    """The row's raw reader input as a source: its first ``raw_k`` passages (0: all) in supplied order."""
    kept = row.passages[:raw_k] if raw_k else row.passages
    segments, spans = pool_segments([(title, [text]) for _, title, text in kept])
    evidence = []
    for index, start, end in row.answer_spans:
        if index < len(kept) and spans[index][0] is not None:
            lead = len(kept[index][2]) - len(kept[index][2].lstrip())
            base = spans[index][0][0] - lead  # type: ignore[index]
            evidence.append((base + start, base + end))
    question = f"{INSTRUCTION}\n\nQuestion: {row.question}"
    source = Source.from_segments(
        segments,
        "\n\n",
        id=f"{prefix}_{row.id}",
        question=question,
        answers=list(row.answers) or [""],
        evidence=evidence,
        answer_prefix="Answer:",
        metadata={
            "query": row.question,  # what retrievers and text compressors rank by
            "candidate_ids": [pid for pid, _, _ in kept],
            "n_candidates": len(row.passages),
            "raw_policy": raw_policy(raw_k, len(row.passages)),
            "unanswerable": row.unanswerable,
            **meta,
        },
    )
    source.metadata["prompt_tokens"] = count_tokens(f"{source.context}\n{question}")
    return source


def score_rag(answer: str, source: Source) -> Score:
    """KVDiagnosis containment as the score (EM for an unanswerable row, where containment of the
    empty reference means nothing); SQuAD/HotpotQA EM and token F1 (max over aliases) as metrics."""
    metrics = {"em": exact_match(answer, source.answers), "f1": token_f1(answer, source.answers)}
    value = metrics["em"] if source.metadata.get("unanswerable") else containment(answer, source.answers)
    return Score.of(value, normalize_answer(answer), metrics=metrics)


@dataclass
class PoolTask(Task):
    """A pool task's shared fields: the raw policy and what to do with unanswerable rows."""

    raw_k: int = 0  # the raw input: the first raw_k passages in supplied order (0: all)
    unanswerable: str = "drop"  # drop: answerable rows only; keep: scored as SQuAD v2 does
    scorer_version: ClassVar[str] = "rag-2"  # 2: containment normalises ASCII punctuation only

    def __post_init__(self) -> None:
        check_choice("task.unanswerable", self.unanswerable, UNANSWERABLE)

    def validate(self) -> None:
        check_int("task.raw_k", self.raw_k, 0)

    @abstractmethod
    def rows(self) -> list[PoolRow]:
        """Every usable row in file order (after the unanswerable policy)."""

    @abstractmethod
    def prefix(self) -> str:
        """What source ids start with (``<prefix>_<row id>``)."""

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        prefix = self.prefix()
        sources = [pool_source(row, self.raw_k, prefix, count_tokens) for row in self.split(n, seed)]
        ids = [s.id for s in sources]
        if len(set(ids)) < len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})[:5]
            raise ValueError(f"duplicate row ids: {repeated}")
        return sources

    def split(self, n: int, seed: int) -> list[PoolRow]:
        rows = self.rows()
        return [rows[i] for i in seeded_order(len(rows), n, seed)]

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        rows = self.split(n, seed)
        return {
            "rows": len(rows),
            "raw_policy": sorted({raw_policy(self.raw_k, len(r.passages)) for r in rows}),
            "unanswerable": self.unanswerable,
            "n_unanswerable": sum(r.unanswerable for r in rows),
        }

    def evaluate(self, answer: str, source: Source) -> Score:
        return score_rag(answer, source)


@dataclass
class RagJsonl(PoolTask):
    """``task=rag_jsonl task.path=pools.jsonl``: the user JSONL pool format (module docstring)."""

    path: str = ""

    def validate(self) -> None:
        super().validate()
        check_rows(self.path, ["question", "candidates"])

    def rows(self) -> list[PoolRow]:
        out = []
        for index, (_, row) in enumerate(json_rows(Path(self.path))):
            unanswerable = bool(row.get("unanswerable")) or not row.get("answers")
            if unanswerable and self.unanswerable == "drop":
                continue
            answers = row.get("answers") or []
            answers = [answers] if isinstance(answers, str) else list(answers)
            passages = []
            for position, cand in enumerate(row["candidates"] or []):
                if not isinstance(cand, dict) or not isinstance(cand.get("text"), str):
                    raise ConfigError(f"task.path={self.path}: row {index} candidate {position} has no text")
                passages.append((str(cand.get("id") or position), str(cand.get("title") or ""), cand["text"]))
            if not passages:
                raise ConfigError(f"task.path={self.path}: row {index} has no candidates")
            ident = str(row.get("id") or f"{index:06d}")
            aliases = [str(a) for a in row.get("aliases") or []]
            out.append(
                PoolRow(
                    ident, str(row["question"]), tuple(passages), (*map(str, answers), *aliases), unanswerable
                )
            )
        if not out:
            raise ConfigError(
                f"task.path={self.path}: no rows left after task.unanswerable={self.unanswerable}"
            )
        return out

    def prefix(self) -> str:
        return Path(self.path).stem
