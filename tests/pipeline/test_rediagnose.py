"""Diagnostics added to a finished cell run only the diagnostic passes: its records come out as a run
with those diagnostics from the start would write them (answers identical, values within float
tolerance), no answer is decoded again, and stored results that stand are not measured again."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from kvx.core.records import as_dicts, validate
from kvx.core.registry import registry
from kvx.pipeline import decode
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.pipeline.rediagnose import Answered, kept_diagnostics
from kvx.tasks.ruler import NiahSingle

DIAGNOSTICS = ("coverage", "likelihood", "decoding", "attention")


def cells(diagnostics: tuple[str, ...]) -> list[Cell]:
    """SnapKV decodes batched with the control; HQQ alone, on a quantized cache (group 16: tiny's heads); one
    source each keeps the test to seconds (every pass is per source)."""
    made = [(registry("diagnostic").get(name)()) for name in diagnostics]
    out = []
    for name, fields in (("snapkv", {}), ("hqq", {"group_size": 16})):
        comp = registry("compressor").get(name)(**fields)
        cell = Cell("ruler_niah_single", NiahSingle(), "tiny", name, comp, 0.5, 0, 1, 300, 4)
        cell.diagnostics = list(zip(diagnostics, made, strict=True))
        out.append(cell)
    return out


def close(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats within tolerance (a cache rebuilt and a question fed again, not the decode's own);
    the seconds a result cost are not compared."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            if k != "seconds":
                close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5) or a == b, (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_kept_diagnostics_are_the_shared_leading_labels() -> None:
    labels = [("coverage", "coverage"), ("likelihood", "likelihood"), ("intervention", "intervention(c=1)")]
    assert kept_diagnostics("coverage,likelihood", labels) == ("coverage", "likelihood")
    assert kept_diagnostics("coverage,likelihood,intervention(c=1)", labels) == tuple(n for n, _ in labels)
    assert kept_diagnostics("likelihood,coverage", labels) == ()  # another order: nothing stands
    assert kept_diagnostics("coverage,likelihood(top_k=5)", labels) == ("coverage",)  # other fields
    assert kept_diagnostics("", labels) == ()


def test_diagnostics_added_to_a_finished_cell_equal_a_run_with_them(
    tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = Engine(tmp_path / "a", 2**30).run_cells(cells(()), tiny, progress=False)
    together = as_dicts_all(Engine(tmp_path / "b", 2**30).run_cells(cells(DIAGNOSTICS), tiny, progress=False))

    decoded: list[str] = []  # every answer decode goes through these two
    for name in ("greedy_decode_batch", "greedy_decode"):
        original = getattr(decode, name)
        monkeypatch.setattr(
            decode, name, lambda *a, _f=original, _n=name, **k: decoded.append(_n) or _f(*a, **k)
        )
    engine = Engine(tmp_path / "c", 2**30)
    answered = [Answered({r.key: r for r in records}) for records in plain]
    added = engine.run_cells(cells(DIAGNOSTICS), tiny, progress=False, answered=answered)
    assert decoded == []  # no answer decoded again; every source of both cells diagnosed
    assert sorted(engine.rediagnosed.values()) == [1, 1] and not engine.decodes

    for records, joint in zip(as_dicts_all(added), together, strict=True):
        for record, expected in zip(records, joint, strict=True):
            validate(record)
            assert record["cell"] == expected["cell"] and record["key"] == expected["key"]  # one identity
            for side in ("full", "compressed"):
                for field in ("output", "token_ids", "correct", "score", "stop_reason"):
                    assert record[side][field] == expected[side][field]
            assert record["transition"] == expected["transition"]
            close(record["diagnostics"], expected["diagnostics"])
            assert record.get("category") == expected.get("category")
    statuses = {d["status"] for r in as_dicts_all(added)[1] for d in r["diagnostics"].values()}
    assert "structural" in statuses and "error" not in statuses  # HQQ's quantized cache was measured

    # the same diagnostics again: every stored result stands, nothing is compressed or prefilled
    again = Engine(tmp_path / "d", 2**30)
    kept = [Answered({r.key: r for r in records}, DIAGNOSTICS) for records in added]
    same = again.run_cells(cells(DIAGNOSTICS), tiny, progress=False, answered=kept)
    assert (again.compressions, again.prefills) == (0, 0)
    assert as_dicts_all(same) == as_dicts_all(added)


def as_dicts_all(results: list) -> list[list[dict]]:
    return [as_dicts(records) for records in results]
