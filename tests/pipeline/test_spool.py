"""Spooled records: a source-major run that is stopped resumes at the sources it reached."""

from __future__ import annotations

import json

import pytest

from kvx.core.records import as_dicts
from kvx.core.registry import registry
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.stores.spool import Spool
from kvx.tasks.ruler import NiahSingle
from kvx.testing.records import unmeasured

N = 3


def cell(name: str) -> Cell:
    comp = registry("compressor").get(name)()
    return Cell("ruler_niah_single", NiahSingle(), "tiny", name, comp, 0.5, 0, N, 400, 4)


def stopped_after(monkeypatch, sources: int) -> None:
    """Make the source path raise Ctrl-C once ``sources`` sources are done."""
    import kvx.pipeline.engine as engine_module

    original, seen = engine_module.run_source, []

    def run_source(stages, reader, members, source, *args, **kwargs):
        if len(seen) == sources:
            raise KeyboardInterrupt
        seen.append(source.id)
        return original(stages, reader, members, source, *args, **kwargs)

    monkeypatch.setattr(engine_module, "run_source", run_source)


def unmeasured_all(records):
    return [unmeasured(r) for r in as_dicts(records)]


def test_a_stopped_run_resumes_at_the_sources_it_reached(tiny, tmp_path, monkeypatch):
    grid = [cell("snapkv"), cell("tova")]
    stopped_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        Engine(tmp_path / "out", 2**30).run_cells(grid, tiny, progress=False)
    monkeypatch.undo()
    assert len(list((tmp_path / "out" / "partial").glob("*.jsonl"))) == 2  # one spool per open cell

    again = Engine(tmp_path / "out", 2**30)
    got = again.run_cells(grid, tiny, progress=False)
    ids = [c.identity(tiny.identity).id for c in grid]
    assert again.resumed == {ids[0]: 2, ids[1]: 2}
    assert again.prefills == 1  # only the source the first run did not reach
    fresh = Engine(tmp_path / "fresh", 2**30).run_cells(grid, tiny, progress=False)
    assert [unmeasured_all(r) for r in got] == [unmeasured_all(r) for r in fresh]
    assert not list((tmp_path / "out" / "partial").glob("*"))  # complete: spools removed


def test_error_records_and_torn_lines_are_not_reused_and_resume_false_starts_over(tiny, tmp_path):
    c = cell("tova")
    engine = Engine(tmp_path, 2**30)
    records = engine.run_cells([c], tiny, progress=False)[0]
    identity = c.identity(tiny.identity).id
    spool = Spool(engine.partial, identity, identity)
    broken = records[1].to_dict() | {"status": "error", "reason": "transient", "compressed": None}
    spool.add(records[0])
    spool.path.write_text(spool.path.read_text() + json.dumps(broken) + "\n" + '{"key": "torn')
    assert list(spool.load()) == [records[0].key]

    again = Engine(tmp_path, 2**30)
    again.run_cells([c], tiny, progress=False)[0]
    assert again.resumed[identity] == 1
    spool.add(records[0])
    over = Engine(tmp_path, 2**30)
    over.run_cells([c], tiny, progress=False, resume=False)
    assert over.resumed[identity] == 0 and not spool.path.exists()


def test_records_of_another_schema_version_are_recomputed_not_reused(tiny, tmp_path):
    """A spool is unfinished work: a record an earlier (or later) kvx spooled would be written out under
    this version's stamp with its fields as that version had them, so it is computed again instead."""
    c = cell("tova")
    engine = Engine(tmp_path, 2**30)
    records = engine.run_cells([c], tiny, progress=False)[0]
    identity = c.identity(tiny.identity).id
    spool = Spool(engine.partial, identity, identity)
    spool.add(records[0])
    older = records[1].to_dict() | {"schema_version": "1"}
    spool.path.write_text(spool.path.read_text() + json.dumps(older) + "\n")
    assert list(spool.load()) == [records[0].key]
