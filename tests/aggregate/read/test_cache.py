"""An aggregate keeps what it validated and drew: an unchanged record file is not read again, an unchanged
table is not drawn again, and anything that changed (the file, the reading code) is read afresh. A kept
entry that is damaged or gone is a miss, never an error; the tables are those of a fresh read."""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate import workers
from kvx.aggregate.__main__ import main
from kvx.aggregate.publish import kept_figures
from kvx.aggregate.read import cache, sources
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.testing.crafted import PARALLEL, SERIAL, one_file


def _same(a, b) -> None:
    assert a.n_records == b.n_records and a.tables.keys() == b.tables.keys()
    for name in a.tables:
        pd.testing.assert_frame_equal(a.tables[name], b.tables[name])
    assert [p.as_dict() for p in a.problems] == [p.as_dict() for p in b.problems]


def _no_reading(monkeypatch) -> None:
    def refuse(*_):
        raise AssertionError("a kept file was read again")

    monkeypatch.setattr(sources, "_part_batches", refuse)  # (a large file's first line says it is records)
    monkeypatch.setattr(sources, "_read_text", refuse)


@pytest.mark.parametrize("options", [SERIAL, PARALLEL])
@pytest.mark.parametrize("parts", [1, 4])
def test_an_unchanged_file_is_loaded_not_read(tmp_path, monkeypatch, options, parts):
    path, _ = one_file(tmp_path)
    size = math.ceil(len(gzip.decompress(path.read_bytes())) / parts)
    kept = tmp_path / "cache"
    fresh = analyse(DirectorySource([path.parent], part_bytes=size), options)
    first = analyse(DirectorySource([path.parent], part_bytes=size, cache=kept), options)
    assert len(list(kept.rglob("*.kept"))) == parts  # one entry per part
    _no_reading(monkeypatch)
    source = DirectorySource([path.parent], part_bytes=size, cache=kept)
    assert all(b.cached is not None for b in source.batches())
    again = analyse(source, options)
    _same(fresh, first)
    _same(fresh, again)


def test_a_changed_file_is_read_afresh(tmp_path):
    path, rows = one_file(tmp_path)
    kept = tmp_path / "cache"
    before = analyse(DirectorySource([path.parent], cache=kept), SERIAL)
    text = gzip.decompress(path.read_bytes()).decode().splitlines()
    path.write_bytes(gzip.compress(("\n".join(text[:6]) + "\n").encode()))  # half the records
    after = analyse(DirectorySource([path.parent], cache=kept), SERIAL)
    assert (before.n_records, after.n_records) == (12, 6)
    _same(after, analyse(DirectorySource([path.parent]), SERIAL))


def test_other_reading_code_misses(tmp_path, monkeypatch):
    path, _ = one_file(tmp_path)
    kept = tmp_path / "cache"
    analyse(DirectorySource([path.parent], cache=kept), SERIAL)
    monkeypatch.setattr(cache, "fingerprint", lambda *_: "another kvx")
    assert all(b.cached is None for b in DirectorySource([path.parent], cache=kept).batches())


@pytest.mark.parametrize("parts", [1, 3])
def test_a_damaged_entry_is_read_from_the_file(tmp_path, parts):
    path, _ = one_file(tmp_path)
    size = math.ceil(len(gzip.decompress(path.read_bytes())) / parts)
    kept = tmp_path / "cache"
    fresh = analyse(DirectorySource([path.parent], part_bytes=size, cache=kept), SERIAL)
    entries = sorted(kept.rglob("*.kept"), key=os.path.getmtime)
    entries[-1].write_bytes(b"not a kept validation")
    source = DirectorySource([path.parent], part_bytes=size, cache=kept)
    assert all(b.cached is not None for b in source.batches())  # every entry is there ...
    _same(fresh, analyse(source, SERIAL))  # ... and the damaged one is read from the file
    assert cache.load(entries[-1]) is not None  # and kept again


def test_an_unreadable_file_is_not_kept(tmp_path):
    path, _ = one_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-40])  # cut short: the gzip stream ends early
    kept = tmp_path / "cache"
    result = analyse(DirectorySource([path.parent], cache=kept), SERIAL)
    assert any(p.check == "parse" and "unreadable" in p.message for p in result.problems)
    assert not list(kept.rglob("*.kept"))  # read again next time: the reason may pass


def test_prune_drops_the_least_recently_used(tmp_path):
    root = tmp_path / "cache"
    entries = [cache.key_path(root / "records", i) for i in range(4)]
    for i, entry in enumerate(entries):
        assert cache.store(entry, b"x" * 1000) is None
        os.utime(entry, ns=(i * 10**9, i * 10**9))
    cache.load(entries[0])  # used now: kept
    sizes = [entry.stat().st_size for entry in entries]
    cache.prune(root, keep_bytes=sizes[0] + sizes[3])
    assert [entry.exists() for entry in entries] == [True, False, False, True]


def test_prune_drops_what_a_killed_aggregate_left_half_written(tmp_path):
    root = tmp_path / "cache"
    old, new = root / "records" / "ab" / "old.tmp", root / "records" / "ab" / "new.tmp"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"half")
    new.write_bytes(b"half")
    os.utime(old, (0, 0))
    cache.prune(root)
    assert not old.exists() and new.exists()  # a recent one may be another aggregate's, still writing


def test_a_store_that_cannot_be_written_says_why(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    reason = cache.store(cache.key_path(blocker, "k"), [1])  # its folder would be inside a file
    assert reason is not None and "not cached" in reason


def test_an_unchanged_table_is_not_drawn_again(tmp_path):
    calls = []

    def plot(frame: pd.DataFrame, out: Path) -> list[Path]:
        calls.append(len(frame))
        path = out / "sub" / f"fig{len(frame)}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"png" * len(frame))
        return [path]

    root = tmp_path / "cache"
    table = pd.DataFrame({"a": [1, 2, 3]})
    first = kept_figures.draw(plot, table, tmp_path / "one", root)
    again = kept_figures.draw(plot, table.copy(), tmp_path / "two", root)
    assert calls == [3]
    assert again == [tmp_path / "two" / "sub" / "fig3.png"]
    assert again[0].read_bytes() == first[0].read_bytes()
    kept_figures.draw(plot, table.head(2), tmp_path / "two", root)  # another table: drawn
    kept_figures.draw(plot, table, tmp_path / "three", None)  # no cache: drawn
    assert calls == [3, 2, 3]


def _double(x: int) -> int:
    return 2 * x


def _fail(x: int) -> int:
    raise ValueError(f"bad {x}")


@pytest.mark.parametrize("n", [1, 2])
def test_forked_returns_or_raises_what_the_function_does(n):
    assert workers.forked(n, _double, 21)() == 42
    with pytest.raises(ValueError, match="bad 3"):
        workers.forked(n, _fail, 3)()


def test_the_cli_keeps_records_and_figures_unless_told_not_to(tmp_path, monkeypatch):
    path, _ = one_file(tmp_path)
    monkeypatch.setenv("KVX_CACHE_DIR", str(tmp_path / "user-cache"))
    args = ["--records", str(path.parent), "--no-log", "--quiet", "--workers", "1", "--boot", "20"]
    assert main([*args, "--out", str(tmp_path / "a"), "--no-cache"]) == 0
    assert not (tmp_path / "user-cache").exists()
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    kept = tmp_path / "user-cache" / "aggregate"
    assert list((kept / "records").rglob("*.kept")) and list((kept / "figures").rglob("*.kept"))
    _no_reading(monkeypatch)
    assert main([*args, "--out", str(tmp_path / "c")]) == 0
    for csv in (tmp_path / "b").glob("*.csv"):
        assert csv.read_bytes() == (tmp_path / "c" / csv.name).read_bytes(), csv.name
    figures = sorted(p.name for p in (tmp_path / "b").glob("*.png"))
    assert figures and figures == sorted(p.name for p in (tmp_path / "c").glob("*.png"))
