"""RAG question answering over a stored candidate pool (ragscale section 4): the shared layout,
raw policies, fixed slices and scoring of pool tasks, and the user JSONL pool format as a task.

A row is a question, its stored candidate pool in supplied order (ids, titles, texts) and its
reference answers (plus aliases). The raw reader input is chosen from the pool by the raw policy
(``task.raw``):

- ``first_k``: the first ``task.raw_k`` passages in supplied order (0: all of them);
- ``all``: every passage in supplied order;
- ``bm25_top_k``: the ``task.raw_k`` passages BM25 scores highest for the question over the row's own
  pool (title and text), kept in supplied order; ties keep the earlier passage.

Text compressors (``transform=``) read the raw input (``task.compress_from=raw``, the default) or the
whole stored pool (``pool``: MuSiQue, whose compressors see all twenty paragraphs behind a first-eight
raw input); the pool then travels with the source (``Source.pool``) and keys its artifacts. Raw and
compressed conditions share question, pool, prompt and scoring and differ only in the evidence.
Passages are laid out as HotpotQA's RULER QA prompt lays out documents, one ``passage`` segment
each, unless a task lays them out its own way (LongMemEval's sessions).

``task.ids=FILE`` (one row id per line, blank lines and ``#`` comments skipped) or a list
(``task.ids=[q3,q0]``) fixes the slice: the rows are taken in the given order and ``n_sources`` takes
the first ``n`` (the seed then chooses nothing), so a paper's frozen slice replays row for row.

JSONL pool format, one object per line::

    {"id": "q1", "question": "...", "answers": ["..."], "aliases": ["..."],
     "candidates": [{"id": "p1", "title": "...", "text": "..."}, ...], "unanswerable": false}

``aliases`` and ``unanswerable`` are optional; an unanswerable row has no answers and is scored
as SQuAD v2 scores one (only an empty answer is right) when kept (``task.unanswerable=keep``).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.checks import check_choice, check_int
from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.core.ranking import bm25_scores, top_k
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
RAW_POLICIES = ("first_k", "all", "bm25_top_k")
COMPRESS_FROM = ("raw", "pool")

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


def raw_policy(raw_k: int, n_candidates: int, raw: str = "first_k") -> str:
    """The raw reader input as words, recorded with every row (the words of the policies that existed
    before ``task.raw`` are unchanged, so those rows keep their content hashes)."""
    if raw == "bm25_top_k" and raw_k < n_candidates:
        return f"bm25 top {raw_k} of {n_candidates}, supplied order"
    if raw == "first_k" and raw_k and raw_k < n_candidates:
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
    #: (passage index, start, end): evidence spans inside a passage's text (answer spans, or whole
    #: supporting passages)
    evidence: tuple[tuple[int, int, int], ...] = ()
    #: what the source's metadata adds for this row (LongMemEval's question type and id)
    metadata: Mapping[str, Any] = field(default_factory=dict)


def raw_indices(raw: str, raw_k: int, row: PoolRow) -> list[int]:
    """The passages of the raw reader input, by index in the pool, in supplied order."""
    n = len(row.passages)
    if raw == "all" or not raw_k or raw_k >= n:
        return list(range(n))
    if raw == "first_k":
        return list(range(raw_k))
    texts = [f"{title}\n{text}" for _, title, text in row.passages]
    return sorted(top_k(bm25_scores(row.question, texts), raw_k))


def ids_label(ids: str | Sequence[str]) -> str:
    """How errors name a ``task.ids`` setting: the file's path, or the list as written."""
    return ids if isinstance(ids, str) else f"[{','.join(map(str, ids))}]"


def read_ids(ids: str | Sequence[str]) -> list[str]:
    """The row ids a ``task.ids`` setting names, in its order: a list, or a file of one id per line;
    ConfigError for a missing or empty file, a folder, or an id named twice."""
    label = ids_label(ids)
    if isinstance(ids, str):
        if Path(ids).is_dir():
            raise ConfigError(
                f"task.ids={ids} is a folder: only task=qasper and task=hotpotqa read a release's ids "
                "from its folder (the KVDiagnosis release); give a file of row ids or a list"
            )
        if not Path(ids).is_file():
            raise ConfigError(f"task.ids={ids!r}: no such file")
        listed = [line.strip() for line in Path(ids).read_text(encoding="utf-8").splitlines()]
        listed = [i for i in listed if i and not i.startswith("#")]
    else:
        listed = [str(i).strip() for i in ids]
    if not listed:
        raise ConfigError(f"task.ids={label} lists no row id")
    repeated = sorted({i for i in listed if listed.count(i) > 1})
    if repeated:
        raise ConfigError(f"task.ids={label} lists {repeated[:5]} more than once")
    return listed


def select_ids(
    ids: str | Sequence[str],
    row_ids: Sequence[str],
    excluded: Mapping[str, str] | None = None,
    label: str = "",
) -> list[int]:
    """The positions in ``row_ids`` of the rows ``task.ids`` names, in its order. Every id not in the
    data is named in one ConfigError (with the closest ids); an excluded one names its reason.
    ``label``: how errors name the setting when ``ids`` was derived from it (a release's ids)."""
    label = label or ids_label(ids)
    where = {ident: index for index, ident in enumerate(row_ids)}
    out, unknown = [], []
    for ident in read_ids(ids):
        if ident in where:
            out.append(where[ident])
        elif excluded and ident in excluded:
            raise ConfigError(
                f"task.ids={label}: row {ident!r} is excluded before analysis: {excluded[ident]}"
            )
        else:
            unknown.append(ident)
    if len(unknown) == 1:
        close = difflib.get_close_matches(unknown[0], list(where), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ConfigError(f"task.ids={label}: row {unknown[0]!r} is not in the data{hint}")
    if unknown:
        named = ", ".join(map(repr, unknown[:20])) + (
            f" and {len(unknown) - 20} more" if len(unknown) > 20 else ""
        )
        raise ConfigError(f"task.ids={label}: {len(unknown)} rows are not in the data: {named}")
    return out


def take(
    ids: str | Sequence[str],
    row_ids: Sequence[str],
    n: int,
    seed: int,
    excluded: Mapping[str, str] | None = None,
    label: str = "",
) -> list[int]:
    """The rows of a split: the first ``n`` that ``task.ids`` names, else ``n`` in seeded order."""
    if not ids:
        return seeded_order(len(row_ids), n, seed)
    return first_n(select_ids(ids, row_ids, excluded, label), n, label or ids_label(ids))


def first_n(chosen: list[int], n: int, label: str) -> list[int]:
    """The first ``n`` rows ``task.ids`` chose; ConfigError when it chose fewer."""
    if n > len(chosen):
        raise ConfigError(f"n_sources={n} but task.ids={label} lists only {len(chosen)} rows")
    return chosen[:n]


def ids_manifest(ids: str | Sequence[str]) -> dict[str, Any]:
    """What fixed the slice: the ids file with its content hash, or the listed ids."""
    if isinstance(ids, str):
        return {"ids_file": ids, "ids_sha256": hashlib.sha256(Path(ids).read_bytes()).hexdigest()}
    return {"ids": [str(i) for i in ids]}


def require_data(name: str, path: str, what: str, url: str) -> Path:
    """``path`` as a Path; a ConfigError naming where the public data lives when it is unset or absent."""
    if not path:
        raise ConfigError(f"{name} is empty: point it at {what} (public data: {url})")
    if not Path(path).exists():
        raise ConfigError(f"{name}={path!r}: no such file or folder; {what} is public at {url}")
    return Path(path)


def dedupe(values: Sequence[Any]) -> tuple[str, ...]:
    """Answers and aliases as strings, first occurrence kept, blanks dropped."""
    return tuple(dict.fromkeys(str(v) for v in values if v is not None and str(v) != ""))


def score_rag(answer: str, source: Source, closed: bool = True) -> Score:
    """KVDiagnosis containment as the score (EM for an unanswerable row, where containment of the
    empty reference means nothing); SQuAD/HotpotQA EM and token F1 (max over aliases) as metrics.
    ``closed``: HotpotQA's F1 rule that yes/no/noanswer score only when equal (ragscale A.3 names it
    for HotpotQA alone; its generic ``token_f1`` has no such rule)."""
    metrics = {
        "em": exact_match(answer, source.answers),
        "f1": token_f1(answer, source.answers, closed=closed),
    }
    value = metrics["em"] if source.metadata.get("unanswerable") else containment(answer, source.answers)
    return Score.of(value, normalize_answer(answer), metrics=metrics)


@dataclass
class PoolTask(Task):
    """A pool task's shared fields: the raw policy, what compressors read, the slice and what to do
    with unanswerable rows."""

    raw_k: int = 0  # first_k / bm25_top_k: how many passages (0: all)
    unanswerable: str = "drop"  # drop: answerable rows only; keep: scored as SQuAD v2 does
    raw: str = field(default="first_k", metadata=WHEN_SET)  # first_k | all | bm25_top_k
    compress_from: str = field(default="raw", metadata=WHEN_SET)  # raw | pool: what compressors read
    ids: Any = field(
        default="", metadata=WHEN_SET
    )  # a file of row ids or a list: the fixed slice, in its order
    scorer_version: ClassVar[str] = "rag-2"  # 2: containment normalises ASCII punctuation only
    #: HotpotQA's yes/no F1 rule (``score_rag``); benchmarks scored by their own scripts turn it off
    closed_f1: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_choice("task.unanswerable", self.unanswerable, UNANSWERABLE)
        check_choice("task.raw", self.raw, RAW_POLICIES)
        check_choice("task.compress_from", self.compress_from, COMPRESS_FROM)

    def validate(self) -> None:
        check_int("task.raw_k", self.raw_k, 0)
        if self.raw == "bm25_top_k" and not self.raw_k:
            raise ConfigError("task.raw=bm25_top_k needs task.raw_k >= 1: how many passages BM25 keeps")
        default = next(f.default for f in dataclasses.fields(self) if f.name == "raw_k")
        if self.raw == "all" and self.raw_k != default:
            raise ConfigError(f"task.raw_k={self.raw_k} is unused by task.raw=all: use task.raw=first_k")

    def check_ids(self) -> None:
        """With ``task.ids``: every listed id is a row of the data (call once the data is known)."""
        if self.ids:
            select_ids(self.ids, self.row_ids(), self.excluded())

    @abstractmethod
    def rows(self) -> list[PoolRow]:
        """Every usable row in file order (after the unanswerable policy and the exclusions)."""

    @abstractmethod
    def prefix(self) -> str:
        """What source ids start with (``<prefix>_<row id>``)."""

    def row_ids(self) -> list[str]:
        """The usable rows' ids in file order (tasks whose rows are costly to build read them alone)."""
        return [row.id for row in self.rows()]

    def build(self, indices: Sequence[int]) -> list[PoolRow]:
        """The rows at ``indices`` of ``row_ids()``."""
        rows = self.rows()
        return [rows[i] for i in indices]

    def excluded(self) -> dict[str, str]:
        """Rows left out before analysis (id -> reason), listed in the manifest; never silent."""
        return {}

    def layout(self, row: PoolRow, picked: Sequence[int]) -> list[Segment]:
        """The context's segments for the passages at ``picked``: RULER's QA layout. Each passage's
        segment ends with the passage's text (evidence spans are placed by that rule)."""
        segments, _ = pool_segments([(row.passages[i][1], [row.passages[i][2]]) for i in picked])
        return segments

    def prompt(self, row: PoolRow) -> tuple[str, str]:
        """(question, answer prefix) of the reader prompt."""
        return f"{INSTRUCTION}\n\nQuestion: {row.question}", "Answer:"

    def source(self, row: PoolRow, count_tokens: CountTokens) -> Source:
        """The row's raw reader input as a source (with the stored pool when compressors read it and
        it holds more)."""
        picked = raw_indices(self.raw, self.raw_k, row)
        out = self._source(row, picked)
        if self.compress_from == "pool" and picked != list(range(len(row.passages))):
            out = dataclasses.replace(out, pool=self._source(row, range(len(row.passages))))
        out.metadata["prompt_tokens"] = count_tokens(f"{out.context}\n{out.question}")
        return out

    def _source(self, row: PoolRow, picked: Sequence[int]) -> Source:
        segments = self.layout(row, picked)
        separator = "\n\n"
        where = {index: position for position, index in enumerate(picked)}
        starts, offset = [], 0
        for segment in segments:
            starts.append((offset, segment))
            offset += len(segment.text) + len(separator)
        passages = [(start, seg) for start, seg in starts if seg.role == "passage"]
        evidence = []
        for index, start, end in row.evidence:
            if index in where:
                base, seg = passages[where[index]]
                text = row.passages[index][2]
                assert seg.text.endswith(text), "a passage's segment ends with its text"
                base += len(seg.text) - len(text)
                evidence.append((base + start, base + end))
        question, answer_prefix = self.prompt(row)
        return Source.from_segments(
            segments,
            separator,
            id=f"{self.prefix()}_{row.id}",
            question=question,
            answers=list(row.answers) or [""],
            evidence=evidence,
            answer_prefix=answer_prefix,
            metadata={
                "query": row.question,  # what retrievers and text compressors rank by
                "candidate_ids": [row.passages[i][0] for i in picked],
                "n_candidates": len(row.passages),
                "raw_policy": raw_policy(self.raw_k, len(row.passages), self.raw),
                "unanswerable": row.unanswerable,
                **row.metadata,
            },
        )

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        sources = [self.source(row, count_tokens) for row in self.split(n, seed)]
        ids = [s.id for s in sources]
        if len(set(ids)) < len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})[:5]
            raise ValueError(f"duplicate row ids: {repeated}")
        return sources

    def split(self, n: int, seed: int) -> list[PoolRow]:
        return self.build(take(self.ids, self.row_ids(), n, seed, self.excluded()))

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        rows = self.split(n, seed)
        out: dict[str, Any] = {
            "rows": len(rows),
            "raw_policy": sorted({raw_policy(self.raw_k, len(r.passages), self.raw) for r in rows}),
            "unanswerable": self.unanswerable,
            "n_unanswerable": sum(r.unanswerable for r in rows),
        }
        if self.compress_from == "pool":
            out["compress_from"] = "pool: compressors read every stored passage"
        if self.ids:
            out.update(ids_manifest(self.ids))
        excluded = self.excluded()
        if excluded:
            out["excluded"] = [{"id": ident, "reason": reason} for ident, reason in excluded.items()]
        return out

    def evaluate(self, answer: str, source: Source) -> Score:
        return score_rag(answer, source, closed=self.closed_f1)


@dataclass
class RagJsonl(PoolTask):
    """``task=rag_jsonl task.path=pools.jsonl``: the user JSONL pool format (module docstring)."""

    path: str = ""

    def validate(self) -> None:
        super().validate()
        check_rows(self.path, ["question", "candidates"])
        self.check_ids()

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
