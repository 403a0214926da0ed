"""User JSONL files as tasks, plus the loading and subsampling that file-backed tasks share.

Files go through ``datasets.load_dataset("json")`` so large files are read once into a cached Arrow
table instead of into Python objects on every run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.checks import check_choice
from kvx.core.errors import ConfigError
from kvx.core.source import Segment, Source
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.scoring import containment, normalize_answer, string_match_all, string_match_part

#: the field a JSONL task reads source ids from unless ``task.id_field`` names another ("": none)
DEFAULT_ID_FIELD = "id"

SCORERS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "containment": containment,
    "string_match_all": string_match_all,
    "string_match_part": string_match_part,
}


def load_rows(path: str) -> Any:
    """The rows of a JSON or JSONL file as a ``datasets.Dataset``; ValueError naming a missing path."""
    if not path:
        raise ValueError("this task needs a data file: set task.path=/path/to/file.jsonl")
    if not Path(path).is_file():
        raise ValueError(f"task data file not found: {path}")
    import datasets

    return datasets.load_dataset("json", data_files=str(Path(path).resolve()), split="train")


def check_rows(path: str, fields: Sequence[str], optional: Sequence[str] = ()) -> None:
    """Every row of a JSONL file (or JSON list) is an object holding ``fields``, and the ``optional``
    fields its first row holds.

    Read line by line before any model loads, so an empty or malformed file fails in one line naming
    the file and the line instead of a traceback from ``datasets`` after the run has started.
    """
    if not path:
        raise ConfigError("task.path is empty: set task.path=/path/to/file.jsonl")
    if not Path(path).is_file():
        raise ConfigError(f"task.path={path!r}: no such file")
    n_rows = 0
    try:
        for where, row in json_rows(Path(path)):
            if not isinstance(row, dict):
                raise ConfigError(f"task.path={path}: {where} is not a JSON object")
            if not n_rows:
                fields = [*fields, *(name for name in optional if name in row)]
            missing = [name for name in fields if name not in row]
            if missing:
                first = [name for name in missing if name in optional]
                raise ConfigError(
                    f"task.path={path}: {where} has no field(s) {missing}; it has {sorted(row)}"
                    + (f" (the first row has {first}, so every row needs it)" if first else "")
                )
            n_rows += 1
    except UnicodeDecodeError as exc:
        raise ConfigError(f"task.path={path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not n_rows:
        raise ConfigError(f"task.path={path} is empty: it holds no JSON rows")


def json_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) for each row of a JSON list file or each non-blank line of a JSONL file."""
    with path.open(encoding="utf-8") as handle:
        head = handle.read(4096).lstrip()
        handle.seek(0)
        if head.startswith("["):
            try:
                rows = json.load(handle)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"task.path={path}: line {exc.lineno} is not valid JSON ({exc.msg})"
                ) from None
            yield from ((f"item {index}", row) for index, row in enumerate(rows))
            return
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield f"line {number}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"task.path={path}: line {number} is not valid JSON ({exc.msg})") from None


def seeded_order(num_rows: int, n: int, seed: int) -> list[int]:
    """The first ``n`` rows of a seeded permutation: fixed per seed; a larger ``n`` extends a smaller one."""
    if n > num_rows:
        raise ValueError(f"asked for {n} sources but the file has only {num_rows} rows")
    order = list(range(num_rows))
    random.Random(seed).shuffle(order)
    return order[:n]


def _segments(items: Sequence[Any], row: int) -> list[Segment]:
    """Segments given as strings (ids are their positions) or as objects with ``text`` and
    optionally ``id``, ``role`` (or ``speaker``) and ``title``."""
    out = []
    for position, item in enumerate(items or []):
        if isinstance(item, str):
            out.append(Segment(str(position), item))
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            role = item.get("role") or item.get("speaker") or ""
            ident = item.get("id")
            out.append(
                Segment(
                    str(position if ident is None else ident),
                    item["text"],
                    str(role),
                    str(item.get("title") or ""),
                )
            )
        else:
            raise ValueError(f"row {row}: segment {position} is neither a string nor an object with a text")
    if not out:
        raise ValueError(f"row {row}: no segments")
    return out


def _evidence(items: Sequence[Any], context: str, row: int) -> list[tuple[int, int]]:
    """Evidence given as [start, end] offsets, or as strings located at their first occurrence."""
    spans = []
    for item in items:
        if isinstance(item, str):
            start = context.find(item)
            if start < 0:
                raise ValueError(f"row {row}: evidence text not found in the context: {item[:80]!r}")
            spans.append((start, start + len(item)))
        else:
            start, end = (int(x) for x in item)
            if not 0 <= start <= end <= len(context):
                raise ValueError(f"row {row}: evidence span {item} lies outside the context")
            spans.append((start, end))
    return spans


@dataclass
class JsonlTask(Task):
    """Questions from a user JSONL file: one object per line with context, question and answers.

    ``answers_field`` holds a string or a list of strings. ``evidence_field`` (optional) holds a list of
    [start, end] character offsets into the context or of verbatim context substrings. ``id_field``
    holds each source's id, as a researcher expects of a field named ``id`` (the default); where the
    rows have no ``id`` field, or with ``id_field=""``, a source's id is the file stem and row number.
    With ``segments_field`` the context is structured (dialogue turns, a passage pool) and text
    transforms can keep or drop its segments.
    """

    scorer_version: ClassVar[str] = "2"  # 2: containment normalises ASCII punctuation only

    path: str = ""
    context_field: str = "context"
    question_field: str = "question"
    answers_field: str = "answers"
    evidence_field: str = ""
    id_field: str = DEFAULT_ID_FIELD
    scorer: str = "containment"
    #: a list of strings, or of {"text", "id", "role", "title"} objects (dialogue turns, passages):
    #: the context's segments, joined by ``separator``; ``context_field`` is then not read
    segments_field: str = ""
    separator: str = "\n\n"

    def __post_init__(self) -> None:
        check_choice("task.scorer", self.scorer, SCORERS)

    def validate(self) -> None:
        context = "segments_field" if self.segments_field else "context_field"
        required = (context, "question_field", "answers_field")
        for key in required:
            if not getattr(self, key):
                raise ConfigError(f"task.{key} is empty: name the JSON field that holds it")
        fields = [getattr(self, key) for key in (*required, "evidence_field") if getattr(self, key)]
        default_id = self.id_field == DEFAULT_ID_FIELD  # used where the rows have it
        if self.id_field and not default_id:
            fields.append(self.id_field)
        check_rows(self.path, fields, optional=[self.id_field] if default_id else [])

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        rows = load_rows(self.path)
        absent = self.id_field == DEFAULT_ID_FIELD and DEFAULT_ID_FIELD not in rows.column_names
        id_field = "" if absent else self.id_field
        fields = [
            self.segments_field or self.context_field,
            self.question_field,
            self.answers_field,
            self.evidence_field,
            id_field,
        ]
        missing = [name for name in fields if name and name not in rows.column_names]
        if missing:
            raise ValueError(f"{self.path} has no field(s) {missing}; it has {rows.column_names}")
        out = []
        for index in seeded_order(len(rows), n, seed):
            row = rows[index]
            segments = _segments(row[self.segments_field], index) if self.segments_field else None
            context = (
                self.separator.join(s.text for s in segments) if segments else str(row[self.context_field])
            )
            question = str(row[self.question_field])
            answers = row[self.answers_field]
            answers = [answers] if isinstance(answers, str) else [str(answer) for answer in answers or []]
            if not answers:
                raise ValueError(f"{self.path} row {index}: no answers in field {self.answers_field!r}")
            if id_field and row[id_field] is None:
                raise ValueError(f"{self.path} row {index}: no id in field {id_field!r}")
            out.append(
                Source(
                    id=str(row[id_field]) if id_field else f"{Path(self.path).stem}_{index:06d}",
                    context=context,
                    question=question,
                    answers=answers,
                    evidence=_evidence(row[self.evidence_field] or [], context, index)
                    if self.evidence_field
                    else [],
                    metadata={"row": index, "prompt_tokens": count_tokens(f"{context}\n{question}")},
                    segments=tuple(segments or ()),
                    separator=self.separator,
                )
            )
        if len({source.id for source in out}) < len(out):
            raise ValueError(f"{self.path}: field {id_field!r} has duplicate ids")
        return out

    def evaluate(self, answer: str, source: Source) -> Score:
        normalized = normalize_answer(answer) if self.scorer == "containment" else answer.strip()
        return Score.of(SCORERS[self.scorer](answer, source.answers), normalized)
