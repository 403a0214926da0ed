"""Ledgers kvx did not write: .jsonl.gz folders with manifests beside them, unknown provenance, task
families, categories derived from diagnostic values (or N/A), parallel reading equal to serial."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.options import Options
from kvx.aggregate.publish.plots import category_bars
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.core.records import dumps, validate
from kvx.diagnostics.categories import categorize
from kvx.testing.crafted import FAST, UNKNOWN, cov, external, rec, write_gz


def ledger(tmp_path: Path) -> Path:
    """Two cells of one task over three sources, as .jsonl.gz, with a manifest and a README beside them."""
    folder = tmp_path / "release"
    oks = {"s0": (True, False), "s1": (True, True), "s2": (False, False)}  # (FullCache, compressed)
    for comp in ("snapkv", "tova"):
        rows = [
            external(rec(task="t", source=s, comp=comp, full=f, ok=c if comp == "snapkv" else f))
            for s, (f, c) in oks.items()
        ]
        write_gz(folder / "runs", rows, f"{comp}.jsonl.gz")
    (folder / "manifest.json").write_text(json.dumps({"name": "release", "files": ["runs/*.jsonl.gz"]}))
    (folder / "README.md").write_text("# a release\n")
    (folder / "runs" / "index.jsonl").write_text(json.dumps({"file": "snapkv.jsonl.gz", "rows": 3}) + "\n")
    return folder


def test_external_gz_ledger_with_a_manifest_aggregates_with_no_problems(tmp_path, capsys):
    folder = ledger(tmp_path)
    out = tmp_path / "out"
    assert (
        main(["--records", str(folder), "--out", str(out), "--no-log", "--quiet", "--no-plots", "--strict"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "6 records read, 6 analysed, 0 errors and 0 warnings" in printed
    assert "note: skipped 1 file that is not records: README.md" in printed
    assert "manifest.json: a JSON file without records" in printed
    assert "index.jsonl: its lines are not records" in printed  # JSON lines, but not records
    matrix = pd.read_csv(out / "matrix.csv")
    snap = matrix[(matrix["compressor"] == "snapkv")].iloc[0]
    assert (snap["n_fc"], snap["n_cw"], snap["cw_rate"]) == (2, 1, 0.5)  # s0 C→W, s1 C→C; s2 W→W
    full = matrix[matrix["compressor"] == "FullCache"].iloc[0]
    assert full["accuracy"] == pytest.approx(2 / 3)
    provenance = pd.read_csv(out / "provenance.csv")
    assert set(provenance["field"]) == set(UNKNOWN)
    assert (provenance["records"] == 6).all() and set(provenance["reason"]) == set(UNKNOWN.values())
    page = (out / "report.html").read_text()
    assert "External records: unknown fields" in page and UNKNOWN["seed"] in page
    assert "0" * 64 not in page  # nothing filled in


def test_a_null_without_a_reason_and_a_null_in_kvx_records_are_refused(tmp_path):
    silent = external(rec(source="s0"))
    del silent["provenance"]["unknown"]["seed"]
    own = rec(source="s1", comp="tova")
    own["prompt_hash"] = None  # kvx's own records may leave nothing unknown
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "cells.jsonl").write_text(dumps([silent, own]))
    result = analyse(DirectorySource([tmp_path / "r"]), FAST)
    found = {(p.check, p.message.split(":")[0]) for p in result.problems}
    assert ("schema", "provenance.unknown") in found
    assert any(p.check == "schema" and "prompt_hash" in p.message for p in result.problems)
    assert result.n_rows == 0


def test_family_rows_sit_between_tasks_and_the_pooled_row(tmp_path):
    rows = []
    for task, family in (("ruler_a", "ruler"), ("ruler_b", "ruler"), ("qa", None)):
        for s, (f, c) in {"s0": (True, False), "s1": (True, True)}.items():
            r = rec(task=task, source=s, full=f, ok=c if task != "ruler_b" else True)
            r["task_family"] = family
            rows.append({k: v for k, v in r.items() if v is not None})
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "cells.jsonl").write_text(dumps(rows))
    matrix = analyse(DirectorySource([tmp_path / "r"]), FAST).tables["matrix"]
    compressed = matrix[matrix["compressor"] == "snapkv"]
    assert list(compressed["task"]) == ["qa", "ruler_a", "ruler_b", "ruler/*", "pooled"]
    assert list(compressed["level"]) == ["task", "task", "task", "family", "pooled"]
    family = compressed[compressed["task"] == "ruler/*"].iloc[0]
    # ruler_a: s0 C→W, s1 C→C; ruler_b: both C→C -> 1 C→W of 4 FullCache-correct
    assert (family["n_sources"], family["n_fc"], family["n_cw"], family["cw_rate"]) == (4, 4, 1, 0.25)
    pooled = compressed[compressed["task"] == "pooled"].iloc[0]
    assert (pooled["n_fc"], pooled["n_cw"]) == (6, 2)


def likelihood(delta_nll: float) -> dict:
    return {
        "likelihood": {
            "status": "measured",
            "values": {"delta_nll": delta_nll},
            "reason": "",
            "seconds": 0.0,
            "risk": {"delta_nll": "higher"},
        }
    }


def test_categories_are_derived_from_values_and_na_without_diagnostics(tmp_path):
    # s0: mapped ECov 0.3 -> low_mapped_coverage; s1: ECov 0.95 with ΔNLL 2 -> high_mapped_coverage_drift
    with_values = [
        rec(source="s0", ok=False, diags=cov(0.3)),
        rec(source="s1", ok=False, diags=cov(0.95) | likelihood(2.0)),
        rec(source="s2", ok=True, diags=cov(0.9)),
    ]
    without = [rec(source=s, comp="tova", ok=False) for s in ("s0", "s1", "s2")]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "cells.jsonl").write_text(dumps(with_values + without))
    tables = analyse(DirectorySource([tmp_path / "r"]), FAST).tables
    cats = tables["categories"]
    snap = cats[cats["compressor"] == "snapkv"].set_index("category")
    assert categorize({"coverage_status": "measured", "ecov": 0.3})["category"] == "low_mapped_coverage"
    assert snap.loc["low_mapped_coverage", "rows"] == 1 and snap.loc["low_mapped_coverage", "n_derived"] == 1
    assert snap.loc["high_mapped_coverage_drift", "rows"] == 1
    assert snap.loc["ambiguous", "rows"] == 0 and snap["share"].sum() == pytest.approx(1.0)
    tova = cats[cats["compressor"] == "tova"]
    assert (
        list(tova["category"]) == ["N/A"] and tova["rows"].iloc[0] == 3 and math.isnan(tova["share"].iloc[0])
    )
    pooled = cats[cats["compressor"] == "all"].set_index("category")
    assert pooled.loc["not_categorized", "rows"] == 3  # the pool mixes diagnosed and undiagnosed cells
    assert pooled.loc["not_categorized", "share"] == pytest.approx(3 / 5)
    assert "not_categorized" not in set(cats[cats["compressor"] != "all"]["category"])


def test_category_figures_omit_cells_without_diagnostics(tmp_path):
    rows = [rec(source=s, comp="tova", ok=False) for s in ("s0", "s1")]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "cells.jsonl").write_text(dumps(rows))
    cats = analyse(DirectorySource([tmp_path / "r"]), FAST).tables["categories"]
    assert set(cats["category"]) == {"N/A"}
    assert category_bars(cats, tmp_path / "fig") == []  # no empty bars


def test_parallel_reading_gives_the_serial_tables(tmp_path):
    folder = ledger(tmp_path)
    for i in range(3):  # more batches than workers
        rows = [external(rec(task=f"u{i}", source=s, ok=s != "s0")) for s in ("s0", "s1")]
        write_gz(folder / "more", rows, f"u{i}.jsonl.gz")
    serial = analyse(
        DirectorySource([folder]), Options(n_splits=50, n_boot=50, seed=1, progress=False, workers=1)
    )
    parallel = analyse(
        DirectorySource([folder]), Options(n_splits=50, n_boot=50, seed=1, progress=False, workers=2)
    )
    assert serial.tables.keys() == parallel.tables.keys()
    for name in serial.tables:
        pd.testing.assert_frame_equal(serial.tables[name], parallel.tables[name])


def test_a_corrupt_gz_file_is_a_located_problem(tmp_path):
    folder = ledger(tmp_path)
    (folder / "runs" / "broken.jsonl.gz").write_bytes(b"\x1f\x8b not really gzip")
    result = analyse(DirectorySource([folder]), FAST)
    assert [(p.check, Path(p.run).name) for p in result.problems] == [("parse", "broken.jsonl.gz")]
    assert result.n_rows == 6


def test_the_documented_worked_example_aggregates_strictly(tmp_path, capsys):
    """The external record docs/records.md shows is valid and aggregates with 0 problems beside its ledger."""
    page = (Path(__file__).parents[3] / "docs" / "records.md").read_text(encoding="utf-8")
    section = page.split("## Record directories and external ledgers\n")[1]
    example = section.split("```json\n")[1].split("```")[0]
    record = json.loads(example)
    validate(record)
    folder = tmp_path / "DIR"
    write_gz(folder, [record], "ruler8k.jsonl.gz")
    control = {"source_id": "s17", "prompt_hash": None, "score": 1.0, "correct": True, "output": "4963732"}
    with gzip.open(folder / f"{record['split']}.controls.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(control) + "\n")
    args = ["--records", str(folder), "--out", str(tmp_path / "out"), "--no-log", "--quiet", "--no-plots"]
    assert main([*args, "--strict"]) == 0
    assert "1 records read, 1 analysed, 0 errors and 0 warnings" in capsys.readouterr().out
    provenance = pd.read_csv(tmp_path / "out" / "provenance.csv")
    assert set(provenance["field"]) == set(record["provenance"]["unknown"])


def test_a_folder_without_records_is_refused_with_what_was_skipped(tmp_path, capsys):
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "manifest.json").write_text(json.dumps({"name": "release"}))
    args = ["--records", str(tmp_path / "release"), "--no-log", "--quiet", "--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    skipped = f"skipped {tmp_path}/release/manifest.json: a JSON file without records"
    assert err == [f"kvx.aggregate: --records holds no records ({skipped})"]
