"""Properties of the record path, store -> aggregate read: whatever text a record holds (NUL, line and
paragraph separators, NEL, a BOM, quotes, backslashes, very long answers) and whatever its status, the
records a cell stores (``kvx.core.records.dumps``, the ``records.jsonl`` artifact; the spool a resumed cell
reuses) are the rows the aggregate reads: as many, with the same keys, texts and statuses, none merged,
dropped or invented. A lone surrogate, which UTF-8 cannot encode, is stored escaped and read back
exactly, as it is from an external record's JSON that escapes it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvx.aggregate.options import Options
from kvx.aggregate.read.rows import _text_hash
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.read.validation import Validated
from kvx.aggregate.run import validate
from kvx.core.records import Answer, Record, dumps
from kvx.stores.spool import Spool
from kvx.testing.synthetic import controls, ratio_record

PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: characters that have cut, merged or re-encoded texts somewhere (pandas' hash tables, line splitting)
SPECIAL = ["\x00", "\u2028", "\u2029", "\x85", "\r", "\n", "\r\n", "\x0b", "\x0c", "\ufeff", "\\", '"', "|"]
PIECE = st.one_of(st.text(max_size=6), st.sampled_from(SPECIAL))
PLAIN = st.lists(PIECE, max_size=5).map("".join)
#: texts that agree up to a NUL, which pandas' string hash tables take for the end of a string
NEAR = st.tuples(st.sampled_from(["", "~", "ans"]), PLAIN).map(lambda t: f"{t[0]}\x00{t[1]}")
TEXT = st.one_of(PLAIN, NEAR)
#: now and then a very long answer (a model that never stopped)
ANSWER = st.one_of(TEXT, st.tuples(TEXT, st.integers(1, 20_000)).map(lambda t: (t[0] or "x") * t[1]))
STATUSES = ("supported", "unsupported", "error")
COMPRESSORS = ("snapkv", "tova")
SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)


def _answer(text: str, correct: bool) -> Answer:
    return Answer(text, text.strip(), float(correct), correct, [1], "eos")


@st.composite
def studies(draw: st.DrawFn, text: st.SearchStrategy[str] = TEXT) -> list[Record]:
    """A complete study of one task and reader: every cell over every source, each record of any status,
    the FullCache answer of a source the same in every cell (as one control gives it)."""
    sources = draw(st.lists(text.filter(bool), min_size=1, max_size=4, unique=True))
    cells = draw(st.lists(st.sampled_from(COMPRESSORS), min_size=1, max_size=2, unique=True))
    full = {s: _answer(draw(ANSWER), draw(st.booleans())) for s in sources}
    references = {s: draw(st.lists(text, max_size=2)) for s in sources}
    out = []
    for comp in cells:
        for source in sources:
            status = draw(st.sampled_from(STATUSES))
            r = ratio_record(
                "t",
                source,
                "r",
                comp,
                0.5,
                references=references[source],
                split="t|r",
                prompt_hash=f"{abs(hash(source)):064x}"[-64:],
                n_context_tokens=10,
                n_question_tokens=2,
                config_hash="h",
                versions={},
                full=None if status == "unsupported" else full[source],
            )
            if status == "supported":
                r.pair(full[source], _answer(draw(ANSWER), draw(st.booleans())))
            else:
                r.fail(status, draw(text.filter(bool)))  # the schema asks a reason of both
            out.append(r)
    return out


def store(folder: Path, records: list[Record]) -> None:
    """The cell's artifacts as the app logs them: ``dumps`` written as UTF-8 (MLflow's ``log_text``)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "records.jsonl", "w", encoding="utf-8") as fh:
        fh.write(dumps(records))
    ledger = {c["source_id"]: c for c in controls([r.to_dict() for r in records])}
    with open(folder / "t|r.controls.jsonl", "w", encoding="utf-8") as fh:
        fh.write(dumps(list(ledger.values())))


def read(folder: Path) -> tuple[pd.DataFrame, Validated]:
    """The aggregate's read stage (``kvx.aggregate.run.analyse`` up to the analyses), in this process."""
    rows, validated, _ = validate(DirectorySource([folder]), Options(workers=1, progress=False))
    return rows, validated


def _text(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def assert_read_back(folder: Path, records: list[Record]) -> None:
    """Every record is one row with its own key, status, source id, references and answers."""
    rows, validated = read(folder)
    assert [p for p in validated.problems if p.severity == "error"] == []
    assert validated.n_records == len(records) and len(rows) == len(records)
    want = {r.key: r for r in records}
    assert len(want) == len(records) and set(rows["key"]) == set(want)
    assert len(set(rows["unit"])) == len({r.source_id for r in records})  # one FullCache control a source
    for row in rows.to_dict("records"):
        r = want[row["key"]]
        assert (row["status"], row["source_id"], row["task"], row["compressor"]) == (
            r.status,
            r.source_id,
            r.task,
            r.compressor,
        )
        assert _text(row["full_output"]) == (r.full.output if r.full else None)
        assert _text(row["references"]) == (" | ".join(r.references) or None)
        comp = r.compressed.output if r.compressed else None
        hashed = row["comp_output_hash"]
        assert (math.isnan(hashed) and comp is None) or hashed == _text_hash(comp)


@pytest.mark.slow
@PROPERTY
@given(studies())
def test_stored_records_are_the_rows_the_aggregate_reads(records: list[Record]) -> None:
    with TemporaryDirectory() as folder:
        store(Path(folder), records)
        lines = (Path(folder) / "records.jsonl").read_text(encoding="utf-8").split("\n")
        assert [json.loads(line) for line in lines[:-1]] == [r.to_dict() for r in records]  # as stored
        assert_read_back(Path(folder), records)


@PROPERTY
@given(studies())
def test_a_resumed_cell_reuses_its_spooled_records_unchanged(records: list[Record]) -> None:
    """A cell stopped half-way and rerun: its spooled records come back as they were (error records are
    recomputed by design, never reused) and the study it then stores reads back whole."""
    with TemporaryDirectory() as folder:
        spool = Spool(Path(folder) / "partial", "cell", "config-hash")
        for r in records:
            spool.add(r)
        kept = spool.load()
        assert {k: r.to_dict() for k, r in kept.items()} == {
            r.key: r.to_dict() for r in records if r.status != "error"
        }
        resumed = [kept.get(r.key, r) for r in records]  # the errors recomputed: the same records here
        store(Path(folder) / "records", resumed)
        assert_read_back(Path(folder) / "records", records)


@PROPERTY
@given(studies(), st.data())
def test_a_lone_surrogate_is_stored_escaped_and_read_back_exactly(
    records: list[Record], data: st.DataObject
) -> None:
    """UTF-8 cannot hold a lone surrogate (a served reply's JSON may carry one, half an emoji): a record
    holding one is stored with it escaped (``\\udXXX``), as an external record's JSON may also escape it,
    and the aggregate and a resumed cell read it back exactly, a distinct source."""
    target = data.draw(st.sampled_from(records))
    surrogate = data.draw(SURROGATE)
    target.source_id = target.source_id + surrogate  # one source's id, in this cell only: a distinct source
    target.key = target.key.replace("/r@rev1/", f"{surrogate}/r@rev1/", 1)
    with TemporaryDirectory() as folder:
        spool = Spool(Path(folder) / "partial", "cell", "h")
        spool.add(target)
        assert {k: r.to_dict() for k, r in spool.load().items()} == (
            {} if target.status == "error" else {target.key: target.to_dict()}
        )
        store(Path(folder) / "stored", records)
        escaped = Path(folder) / "external"
        escaped.mkdir()
        (escaped / "records.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
        for written in (Path(folder) / "stored", escaped):
            rows, validated = read(written)
            assert validated.n_records == len(records) == len(rows)
            assert list(rows["key"]).count(target.key) == 1
            assert rows.loc[rows["key"] == target.key, "source_id"].item() == target.source_id
