"""A large record file is read as several batches (parts ending at line ends), so every worker reads it:
the parts hold the file's lines in order, problems keep the file's line numbers, and the tables equal
those of the file read as one batch."""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path

import pandas as pd

from kvx.aggregate.options import Options
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.core.records import dumps
from kvx.testing.crafted import PARALLEL, SERIAL, external, one_file, rec, write_gz


def test_a_large_file_is_read_as_parts_holding_its_lines_in_order(tmp_path):
    path, rows = one_file(tmp_path)
    text = gzip.decompress(path.read_bytes())
    source = DirectorySource([path.parent], part_bytes=math.ceil(len(text) / 5))
    batches = list(source.batches())
    assert len(source) == len(batches) == 5  # known before reading: the pool and progress bar use it
    assert [b.part for b in batches] == [0, 1, 2, 3, 4]
    assert all(b.data.endswith(b"\n") for b in batches)  # whole lines only
    assert b"".join(b.data for b in batches) == text
    lines = [line for b in batches for line in b.read() if line]
    assert lines == dumps(rows).splitlines()
    # each part's first line number is the file's: 1 + the lines of the parts before it
    assert [b.first_line for b in batches] == [
        1 + sum(p.data.count(b"\n") for p in batches[:i]) for i in range(5)
    ]
    assert DirectorySource([path.parent]).parts[path] == 1  # small: one batch, read by a worker


def test_parts_give_the_tables_of_the_whole_file(tmp_path):
    path, _ = one_file(tmp_path)
    size = len(gzip.decompress(path.read_bytes()))
    whole = analyse(DirectorySource([path.parent]), SERIAL)
    for options in (SERIAL, PARALLEL):
        parts = analyse(DirectorySource([path.parent], part_bytes=size // 4), options)
        assert parts.n_records == whole.n_records == 12
        assert parts.tables.keys() == whole.tables.keys()
        for name in whole.tables:
            pd.testing.assert_frame_equal(parts.tables[name], whole.tables[name])


def test_a_bad_line_in_a_later_part_is_located_by_its_line_in_the_file(tmp_path):
    path, rows = one_file(tmp_path)
    lines = dumps(rows).splitlines()
    lines[9] = "{not json"
    text = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(text))
    source = DirectorySource([path.parent], part_bytes=len(text) // 4)
    assert len(source) == 4
    result = analyse(source, SERIAL)
    assert [(p.check, p.key) for p in result.problems if p.check == "parse"] == [("parse", "line 10")]
    assert result.n_records == 12


def test_a_file_cut_short_keeps_the_parts_read_and_reports_the_rest(tmp_path):
    path, rows = one_file(tmp_path)
    text = dumps(rows).encode()
    zipper = zlib.compressobj(wbits=31)  # gzip, flushed after 2/3 of the lines and never finished
    cut = sum(len(line) for line in text.splitlines(keepends=True)[:8])
    body = zipper.compress(text[:cut]) + zipper.flush(zlib.Z_SYNC_FLUSH)
    path.write_bytes(body + struct.pack("<I", len(text)))  # the whole text's size where a trailer ends
    source = DirectorySource([path.parent], part_bytes=math.ceil(len(text) / 4))
    assert len(source) == 4
    result = analyse(source, SERIAL)
    [problem] = result.problems
    assert (problem.check, problem.severity, Path(problem.run).name) == ("parse", "error", "t.jsonl.gz")
    assert problem.message.startswith("unreadable: after line ")
    read = int(problem.message.split("after line ")[1].split(":")[0])
    assert 3 <= result.n_records == read < 8  # the parts read in full stay, their records counted


def test_a_large_file_of_other_json_lines_is_skipped_whole(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "index.jsonl").write_text('{"file": "a"}\n' * 200)
    _, _ = one_file(tmp_path)
    source = DirectorySource([folder], part_bytes=100)
    assert source.parts[folder / "index.jsonl"] == 1
    result = analyse(source, SERIAL)
    assert any("index.jsonl: its lines are not records" in note for note in source.notes)
    assert result.n_records == 12 and not result.problems


def test_a_record_holding_a_line_separator_character_is_one_line(tmp_path):
    """JSON Lines ends lines at \\n only: U+2028 (written raw by ensure_ascii=False) is inside a string."""
    record = external(rec(task="t", source="s0"))
    record["compressed"]["output"] = "yes\u2028and\x0bmore"
    write_gz(tmp_path / "r", [record], "t.jsonl.gz")
    result = analyse(DirectorySource([tmp_path / "r"]), SERIAL)
    assert result.n_records == 1 and not result.problems


def test_exporting_a_file_read_in_parts_writes_all_of_it(tmp_path):
    path, rows = one_file(tmp_path)
    size = len(gzip.decompress(path.read_bytes()))
    options = Options(n_splits=50, n_boot=50, seed=1, progress=False, workers=1, export=tmp_path / "x")
    analyse(DirectorySource([path.parent], part_bytes=size // 3), options)
    assert (tmp_path / "x" / "r" / "t.jsonl").read_text(encoding="utf-8") == dumps(rows)
