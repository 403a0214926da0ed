"""Family pools key on the context length: RULER-8K and RULER-16K records never merge into one pool."""

from __future__ import annotations

import pytest

from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.core.identity import digest
from kvx.core.records import dumps
from kvx.testing.crafted import FAST, rec

# (task, family, context_tokens) -> {source: (FullCache correct, compressed correct)}
GRID = {
    ("ruler_a", "ruler", 8192): {"s0": (True, False), "s1": (True, True)},
    ("ruler_b", "ruler", 8192): {"s0": (True, True), "s1": (True, True)},
    ("ruler_a", "ruler", 16384): {"s0": (True, False), "s1": (True, False)},
    ("ruler_b", "ruler", 16384): {"s0": (True, True), "s1": (False, False)},
    ("qa", None, 1024): {"s0": (True, False), "s1": (True, True)},
}


def record(task: str, family: str | None, length: int, source: str, full: bool, ok: bool) -> dict:
    r = rec(task=task, source=f"{source}@{length}", full=full, ok=ok)
    fields = dict(r["cell"]["fields"], context_tokens=length)
    r["cell"] = {"id": digest(fields), "fields": fields}
    if family:
        r["task_family"] = family
    return {k: v for k, v in r.items() if v is not None}


def test_one_family_pool_per_context_length_by_hand(tmp_path):
    rows = [
        record(task, family, length, s, f, c)
        for (task, family, length), sources in GRID.items()
        for s, (f, c) in sources.items()
    ]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "cells.jsonl").write_text(dumps(rows))
    result = analyse(DirectorySource([tmp_path / "r"]), FAST)
    assert not result.problems
    matrix = result.tables["matrix"]
    family = matrix[(matrix["level"] == "family") & (matrix["compressor"] == "snapkv")].set_index("task")
    assert sorted(family.index) == ["ruler/* @16384", "ruler/* @8192"]  # no 8K+16K pool, none for qa
    # 8K: ruler_a s0 C→W, s1 C→C; ruler_b both C→C -> 1 C→W of 4 FullCache-correct
    eight = family.loc["ruler/* @8192"]
    assert (eight["n_sources"], eight["n_fc"], eight["n_cw"], eight["cw_rate"]) == (4, 4, 1, 0.25)
    # 16K: ruler_a both C→W; ruler_b s0 C→C, s1 W→W -> 2 C→W of 3 FullCache-correct
    sixteen = family.loc["ruler/* @16384"]
    assert (sixteen["n_sources"], sixteen["n_fc"], sixteen["n_cw"]) == (4, 3, 2)
    assert sixteen["cw_rate"] == pytest.approx(2 / 3)
    fullcache = matrix[(matrix["level"] == "family") & (matrix["compressor"] == "FullCache")]
    assert dict(zip(fullcache["task"], fullcache["n_fc"])) == {"ruler/* @16384": 3, "ruler/* @8192": 4}
    pooled = matrix[(matrix["level"] == "pooled") & (matrix["compressor"] == "snapkv")].iloc[0]
    assert (pooled["n_sources"], pooled["n_fc"], pooled["n_cw"]) == (10, 9, 4)  # every task, every length
    costs = result.tables["costs"]
    assert set(costs.loc[costs["level"] == "family", "task"]) == {"ruler/* @16384", "ruler/* @8192"}
