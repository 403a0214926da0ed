"""Replay compressed texts made elsewhere: another pipeline's (ragscale's) or a user's stored artifacts,
served to every reader through the artifact store exactly as kvx's own transforms' outputs are.

The file (``transform.path``) is JSONL in one of two layouts, told apart line by line:

- kvx's: ``{"row_id", "compressor", "text", "sha256", "draw"?, "candidate_pool_sha256"?}`` where
  ``sha256`` is the hex sha256 of the text's UTF-8 bytes (``sha256:`` in front is accepted) and
  ``candidate_pool_sha256`` is the pool kvx keys its own artifacts by (``Source.digest(reader_free=True)``).
- ragscale's ``artifact_manifest.jsonl`` (``ragscale.execute.compile_artifacts``): ``example_id``,
  ``compressor_id``, the text inline in ``compressed_evidence`` (null when ragscale ran with
  ``store_artifact_text: false``) and ``compressed_artifact_hash`` = ``"sha256:"`` + the hex sha256 of
  its UTF-8 bytes (``ragscale.cache.digest``). Its ``candidate_pool_id`` hashes ragscale's own
  rendering of the pool, which kvx does not rebuild: the pool is then recorded as not checked, unless
  ragscale's dataset file is given.

Every text's hash is verified when the transform is validated, before any model loads. A file row
names a task row by the task's source id (``hotpotqa_5a8b57f2...``) or its longest suffix after a
``_`` (the task's own row id, ``5a8b57f2...``); ragscale's own ids (``hpqa-0003``) by the question and
passages of their row in ragscale's dataset file (``transform.dataset``, ``kvx.transforms.ragscale_dataset``).
The replayed text replaces the row's passages.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError, Unsupported
from kvx.core.identity import NEVER, digest
from kvx.core.jsonl import JsonLineError, json_lines
from kvx.core.source import Segment, Source
from kvx.transforms.base import Transform
from kvx.transforms.ragscale_dataset import Case, collapse, question_of, read_dataset, same_pool

#: what the record says of a ragscale pool id (it hashes ragscale's text of the pool, not kvx's)
RAGSCALE_POOL = "not checked: ragscale's candidate_pool_id hashes its own rendering of the pool"
NO_POOL = "not checked: the file gives no candidate_pool_sha256"
MATCHED = (
    "match: the dataset row's question and passages (whitespace collapsed); its pool id by ragscale's rule"
)


def text_sha256(text: str) -> str:
    """The hash both layouts store (ragscale's ``digest``): sha256 of the text's UTF-8 bytes, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One stored artifact of the file: its row, compressor, draw, text (None: not stored) and hashes."""

    row_id: str
    compressor: str
    draw: int
    text: str | None
    sha256: str
    pool_sha256: str | None  # None: the file gives none kvx can check
    pool_check: str  # why the pool is not checked, when it is not
    line: int
    foreign_pool: str | None = None  # ragscale's candidate_pool_id (hex), checked against its dataset


def _bare(value: Any) -> str:
    return str(value).removeprefix("sha256:")


#: (row id, compressor, text, text hash, pool hash) fields of each layout, and the fields it requires
LAYOUTS = {
    "ragscale": (
        ("example_id", "compressor_id", "compressed_evidence", "compressed_artifact_hash", None),
        {"compressor_id", "compressed_evidence", "compressed_artifact_hash"},
    ),
    "kvx": (
        ("row_id", "compressor", "text", "sha256", "candidate_pool_sha256"),
        {"compressor", "text", "sha256"},
    ),
}


def parse_line(obj: dict[str, Any], line: int, where: str) -> Entry:
    """One file line in either layout, its text's hash verified; a ConfigError naming the row if not."""
    layout = "ragscale" if "example_id" in obj else "kvx" if "row_id" in obj else None
    if layout is None:
        raise ConfigError(
            f"{where} line {line}: neither kvx's layout (row_id, compressor, text, sha256) "
            "nor ragscale's artifact manifest (example_id, compressor_id, ...)"
        )
    (row_key, compressor, text_key, hash_key, pool_key), required = LAYOUTS[layout]
    row, draw = str(obj[row_key]), obj.get("draw", 0)
    missing = required - obj.keys()
    if missing:
        raise ConfigError(f"{where} line {line} (row {row}): missing {sorted(missing)}")
    if not isinstance(draw, int) or isinstance(draw, bool) or draw < 0:
        raise ConfigError(f"{where} line {line} (row {row}): draw={draw!r} must be an integer >= 0")
    text, stored = obj[text_key], str(obj[hash_key])
    if text is not None and (not isinstance(text, str) or text_sha256(text) != _bare(stored)):
        raise ConfigError(
            f"{where} line {line}: the text of row {row} does not match its sha256 {stored!r} "
            "(edited after it was written?)"
        )
    pool = obj.get(pool_key) if pool_key else None
    check = RAGSCALE_POOL if layout == "ragscale" else "" if pool else NO_POOL
    foreign = (
        _bare(obj["candidate_pool_id"]) if layout == "ragscale" and obj.get("candidate_pool_id") else None
    )
    return Entry(
        row, str(obj[compressor]), draw, text, _bare(stored), pool and _bare(pool), check, line, foreign
    )


def read_entries(path: str) -> list[Entry]:
    """Every line of the file, verified."""
    where = f"transform.path={path}"
    entries = []
    try:
        for number, obj in json_lines(Path(path)):
            if not isinstance(obj, dict):
                raise ConfigError(f"{where} line {number}: not a JSON object")
            entries.append(parse_line(obj, number, where))
    except JsonLineError as exc:
        raise ConfigError(f"{where} line {exc.line}: not JSON ({exc.reason})") from None
    if not entries:
        raise ConfigError(f"{where}: no artifacts in the file")
    return entries


def select(entries: list[Entry], compressor: str | None, draw: int, where: str) -> dict[str, Entry]:
    """The entries of one compressor and draw by row id; a ConfigError (with "did you mean") for a
    compressor or draw the file does not hold, for several compressors and none chosen, and for a
    row stored twice."""
    ids = sorted({e.compressor for e in entries})
    if compressor is None:
        if len(ids) > 1:
            raise ConfigError(
                f"{where} holds several compressors {ids}: choose one with transform.compressor"
            )
        compressor = ids[0]
    elif compressor not in ids:
        close = difflib.get_close_matches(compressor, ids, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"transform.compressor={compressor!r} is not in {where} (it holds {ids}){hint}")
    mine = [e for e in entries if e.compressor == compressor]
    draws = sorted({e.draw for e in mine})
    if draw not in draws:
        raise ConfigError(f"transform.draw={draw}: {where} holds draws {draws} of compressor {compressor!r}")
    out: dict[str, Entry] = {}
    for entry in mine:
        if entry.draw != draw:
            continue
        if entry.row_id in out:
            raise ConfigError(
                f"{where}: row {entry.row_id} has two artifacts of compressor {compressor!r}, draw {draw} "
                f"(lines {out[entry.row_id].line} and {entry.line})"
            )
        out[entry.row_id] = entry
    return out


def row_keys(source_id: str) -> list[str]:
    """The file row ids that name this source, longest first: the source id, then each suffix after
    a ``_`` (``hotpotqa_5a8b_x`` -> ``5a8b_x``, ``x``)."""
    parts = source_id.split("_")
    return ["_".join(parts[i:]) for i in range(len(parts)) if parts[i:] != [""]]


@dataclass
class Replay(Transform):
    """``transform=replay transform.path=artifacts.jsonl [transform.compressor=ID] [transform.draw=K]
    [transform.dataset=ragscale_dataset.jsonl]``."""

    #: the file; its content (the selected texts' hashes) is the identity, not where it lies
    path: str = field(default="", metadata=NEVER)
    #: the file's compressor id (needed when it holds several); the one chosen is the identity
    compressor: str | None = field(default=None, metadata=NEVER)
    draw: int = 0
    #: ragscale's dataset file, to match its own example ids to kvx rows by question and passages
    dataset: str = field(default="", metadata=NEVER)
    _selected: tuple[str, dict[str, Entry]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _cases: dict[str, Case] = field(default_factory=dict, init=False, repr=False, compare=False)
    _by_question: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def validate(self) -> None:
        check_int("transform.draw", self.draw, 0)
        if not self.path:
            raise ConfigError(
                "transform.path is required: a JSONL file of compressed texts (see docs/rag.md)"
            )
        if not Path(self.path).is_file():
            raise ConfigError(f"transform.path={self.path!r}: no such file")
        if self.dataset and not Path(self.dataset).is_file():
            raise ConfigError(f"transform.dataset={self.dataset!r}: no such file")
        self._entries()

    def _entries(self) -> dict[str, Entry]:
        """The selected entries, read and verified once per process."""
        if self._selected is None:
            entries = read_entries(self.path)
            chosen = select(entries, self.compressor, self.draw, f"transform.path={self.path}")
            if self.dataset:
                self._index(chosen)
            self._selected = (next(iter(chosen.values())).compressor, chosen)
        return self._selected[1]

    def _index(self, chosen: dict[str, Entry]) -> None:
        """The dataset's rows of the chosen artifacts by question, each artifact's pool id checked
        against its dataset row by ragscale's rule (a ConfigError naming the row if it differs)."""
        self._cases = read_dataset(self.dataset)
        for entry in chosen.values():
            case = self._cases.get(entry.row_id)
            if case is None:
                raise ConfigError(
                    f"transform.dataset={self.dataset} has no row {entry.row_id} (of {self.path})"
                )
            if entry.foreign_pool is not None and entry.foreign_pool != case.pool_id:
                raise ConfigError(
                    f"row {entry.row_id}: the artifact was compiled for candidate pool {entry.foreign_pool}, "
                    f"transform.dataset's row hashes to {case.pool_id}"
                )
            self._by_question.setdefault(collapse(case.question), []).append(entry.row_id)

    def fingerprint(self) -> dict[str, Any]:
        """The compressor id and a digest of the selected rows' text and pool hashes: two files are
        never one cell, and one file is always the same cell wherever it lies."""
        entries = self._entries()
        assert self._selected is not None
        rows = sorted((e.row_id, e.sha256, e.pool_sha256) for e in entries.values())
        out = {"compressor_id": self._selected[0], "artifacts_sha256": digest(rows)}
        if self.dataset:  # which kvx row each artifact goes to
            cases = sorted((c.example_id, collapse(c.question), c.docs) for c in self._cases.values())
            out["dataset_sha256"] = digest(cases)
        return out

    def _entry(self, source: Source) -> Entry:
        """The row's artifact: by source id, else (with ragscale's dataset) by question; with the
        dataset, the artifact's dataset row must have this row's question and passages."""
        entries = self._entries()
        entry = next((entries[k] for k in row_keys(source.id) if k in entries), None)
        if not self.dataset:
            if entry is None:
                raise Unsupported(f"no artifact for row {source.id} in {self.path} (draw {self.draw})")
            return entry
        rows = [entry.row_id] if entry is not None else self._by_question.get(question_of(source), [])
        if not rows:
            raise Unsupported(
                f"no artifact for row {source.id} in {self.path} (draw {self.draw}, by question)"
            )
        for row in rows:
            case = self._cases[row]
            if collapse(case.question) == question_of(source) and same_pool(case, source):
                return dataclasses.replace(entries[row], pool_check=MATCHED)
        raise ValueError(
            f"row {source.id}: the artifact of {rows} in {self.dataset} was compiled for another question "
            "or candidate pool (an artifact compiled for another pool is not this row's)"
        )

    def provenance(self, source: Source) -> dict[str, Any]:
        entry = self._entry(source)
        return {
            "artifact_row_id": entry.row_id,
            "artifact_text_sha256": entry.sha256,
            "candidate_pool_check": entry.pool_check or "match",
        }

    def apply(self, source: Source) -> Sequence[Segment]:
        entry = self._entry(source)
        if entry.text is None:
            raise Unsupported(
                f"the artifact of row {source.id} has no text in {self.path} "
                "(ragscale wrote it with store_artifact_text: false)"
            )
        if entry.pool_sha256 is not None and entry.pool_sha256 != source.digest(reader_free=True):
            raise ValueError(
                f"row {source.id}: the artifact was compiled for candidate pool {entry.pool_sha256}, "
                f"this row's pool is {source.digest(reader_free=True)}"
            )
        parts = source.parts()
        if not any(s.role == "passage" for s in parts):
            raise Unsupported(f"source {source.id} has no passage segments to replace")
        rest = [s for s in parts if s.role != "passage"]
        return [*rest, Segment("replay", entry.text, role="passage", title=entry.compressor)]
