"""The KVDiagnosis release's context-demand labels and PyramidKV audit: imported next to the records
(kvx.importers.kvdiagnosis_tables), joined to their records by key, and read by the aggregate's Tables 13-14
and Table 5. The miniature release is kvx.testing.kvdiagnosis_release's, plus a hand-made demand file and
audit."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kvx.importers.__main__ import main
from kvx.testing.kvdiagnosis_release import imported_records, make_release

# (sample, method, retained) -> (task, evidence, distribution demand, access demand); the first two are
# C->W runs of the miniature (SnapKV measured ECov 0.125, EAR 0.4; QuantizedCache structural), the third
# matches no run
DEMAND = {
    ("niah_single_1_000000", "SnapKVPress", 0.25): ("niah_single_1", 1, 2.0, 3),
    ("niah_single_1_000000", "QuantizedCache", 0.25): ("niah_single_1", 1, 1.0, ""),
    ("cwe_000009", "SnapKVPress", 0.25): ("cwe", 3, 0.0, 0),
}
AUDIT = {
    "schema_version": "kvdiagnosis.pyramidkv_adapter_audit.v1",
    "audit_status": "invalid_adapter_confirmed_rows_excluded",
    "pair_count": 2,
    "overall_equality": {"raw_output": {"equal_pairs": 2, "rate": 1.0}},
    "representative_pairs": [],
}


def _demand_csv(path: Path) -> None:
    axes = ("evidence_presence", "cue_integrity", "long_range_retrieval", "exact_token_fidelity")
    header = ["sample_id", "method_name", "retained_budget", "official_task_name"]
    header += [f"{a}_score" for a in (*axes, "answer_format_alignment")]
    header += ["logit_stability_demand_score", "attention_accessibility_demand_score"]
    path.parent.mkdir(parents=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for (sample, method, retained), (task, evidence, dist, access) in DEMAND.items():
            writer.writerow([sample, method, retained, task, evidence, 3, 3, 3, 2, dist, access])


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_release(tmp_path_factory.mktemp("KVDiagnosis"))
    _demand_csv(root / "data/context_demand/ruler8k_context_demand_dataset.csv")
    (root / "data/context_demand/validation_report.json").write_text(json.dumps({"rows": 3}))  # agrees
    (root / "data/audits").mkdir()
    (root / "data/audits/pyramidkv_adapter_audit.json").write_text(json.dumps(AUDIT), encoding="utf-8")
    out = tmp_path_factory.mktemp("imported") / "kvdiagnosis"
    assert main(["kvdiagnosis", str(root), "--out", str(out), "--quiet"]) == 0
    return out


def test_demand_rows_join_their_records(imported: Path) -> None:
    rows = [json.loads(line) for line in (imported / "context_demand.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    records = {
        (
            r["source_id"],
            r["setting"]["method_parameter"]["release_method"],
            r["setting"]["method_parameter"]["retained_budget"],
        ): r["key"]
        for r in imported_records(imported)
    }
    snap, quant, orphan = rows
    assert snap["record_key"] == records[("niah_single_1_000000", "SnapKVPress", 0.25)]
    assert quant["record_key"] == records[("niah_single_1_000000", "QuantizedCache", 0.25)]
    assert orphan["record_key"] is None and "no imported run" in orphan["reason"]
    assert snap["labels"]["evidence_presence"] == 1.0 and snap["labels"]["answer_format_alignment"] == 2.0
    assert snap["distribution_demand"] == 2.0 and snap["access_demand"] == 3.0
    assert quant["access_demand"] is None  # an empty cell is missing, never 0
    manifest = json.loads((imported / "import_manifest.json").read_text())
    written = {f["path"]: f for f in manifest["release_tables"]["files_written"]}
    assert manifest["release_tables"]["mapping"]["distribution_demand"] == "logit_stability_demand_score"
    assert (
        written["context_demand.jsonl"]["rows"] == 3
        and written["context_demand.jsonl"]["joined_to_records"] == 2
    )
    assert manifest["release_tables"]["notes"] == ["1 context-demand rows match no imported run"]
    assert "data/context_demand/ruler8k_context_demand_dataset.csv" in {
        f["path"] for f in manifest["files_read"]
    }
    assert (imported / "pyramidkv_adapter_audit.json").read_text() == json.dumps(AUDIT)


def test_aggregate_reads_the_demand_labels(imported: Path, tmp_path: Path) -> None:
    from kvx.aggregate.__main__ import main as aggregate

    report = tmp_path / "report"
    args = ["--records", str(imported), "--out", str(report), "--no-log", "--quiet", "--no-plots"]
    assert aggregate([*args, "--boot", "20", "--splits", "20", "--workers", "1"]) == 0
    with (report / "kvd_demand_tasks.csv").open() as fh:
        [single] = list(csv.DictReader(fh))
    assert single["task"] == "Single NIAH" and single["rows"] == "2" and single["n_sources"] == "1"
    assert float(single["ecov"]) == pytest.approx(0.125) and single["n_ecov"] == "1"  # QuantizedCache: N/A
    assert float(single["delta_nll"]) == pytest.approx(1.25)
    assert float(single["distribution_demand"]) == pytest.approx((2.0 + 1.0) / 2)
    assert float(single["access_demand"]) == pytest.approx(3.0) and single["n_access_demand"] == "1"
    with (report / "kvd_pyramidkv_release.csv").open() as fh:
        [field] = list(csv.DictReader(fh))
    assert field["field"] == "raw_output" and field["n_equal_pairs"] == "2"


def test_missing_release_tables_are_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_release(tmp_path / "KVDiagnosis")
    out = tmp_path / "out"
    assert main(["kvdiagnosis", str(root), "--out", str(out), "--quiet"]) == 0
    assert not (out / "context_demand.jsonl").exists()
    notes = json.loads((out / "import_manifest.json").read_text())["release_tables"]["notes"]
    assert len(notes) == 2 and "no context-demand labels imported" in notes[0]
    assert "no context-demand labels imported" in capsys.readouterr().out


def test_jsonl_demand_rows_and_bad_rows(tmp_path: Path) -> None:
    from kvx.importers import BadInput
    from kvx.importers.kvdiagnosis_tables import import_side_tables, release_key

    folder = tmp_path / "data/context_demand"
    folder.mkdir(parents=True)
    good = {
        "sample_id": "vt_000001",
        "method_name": "TOVAPress",
        "retained_budget": 0.5,
        "official_task_name": "vt",
    }
    good |= {
        "evidence_presence_score": 3,
        "logit_stability_demand_score": 0.667,
        "attention_accessibility_demand_score": None,
    }
    (folder / "ruler8k_context_demand_dataset.jsonl").write_text(json.dumps(good) + "\n")
    (folder / "validation_report.json").write_text(json.dumps({"rows": 5970}))
    keys = {release_key("ruler8k", "vt_000001", "TOVAPress", 0.5): "ruler8k/vt_000001/key"}
    out = tmp_path / "out"
    out.mkdir()
    report = import_side_tables(tmp_path / "data", keys, out)
    [row] = [json.loads(line) for line in (out / "context_demand.jsonl").read_text().splitlines()]
    assert row["record_key"] == "ruler8k/vt_000001/key" and row["task_name"] == "vt"
    assert row["labels"]["evidence_presence"] == 3.0 and row["labels"]["cue_integrity"] is None
    assert row["distribution_demand"] == 0.667 and row["access_demand"] is None
    assert report["notes"] == [
        "1 context-demand rows read, validation_report.json states 5970",
        "no audits/pyramidkv_adapter_audit.json in the release: no PyramidKV adapter audit imported",
    ]
    bad = dict(good, sample_id="")
    (folder / "ruler8k_context_demand_dataset.jsonl").write_text(
        json.dumps(good) + "\n" + json.dumps(bad) + "\n"
    )
    with pytest.raises(
        BadInput, match=r"ruler8k_context_demand_dataset.jsonl:2: a context-demand row has no sample_id"
    ):
        import_side_tables(tmp_path / "data", keys, out)
