"""KVDiagnosis Tables 13-14 and Figure 12 (context demand) and Table 5 (SnapKV/PyramidKV audit) on hand-made
analysis rows and release tables; every expected mean is worked out in the comments."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.kvdiagnosis.demand import NO_LABELS, demand_tables, task_group
from kvx.aggregate.kvdiagnosis.pyramidkv import pyramidkv_pairs, release_audit
from kvx.aggregate.publish.kvdiagnosis_plots import _profile_cell, settings_profile
from kvx.aggregate.publish.kvdiagnosis_release_plots import demand_profile_plot
from kvx.aggregate.read.release_tables import ReleaseTables

NAN = float("nan")
AXES = (
    "evidence_presence",
    "cue_integrity",
    "long_range_retrieval",
    "exact_token_fidelity",
    "answer_format_alignment",
)


def row(key: str, **values: object) -> dict[str, object]:
    base: dict[str, object] = {
        "key": key,
        "task": "ruler8k",
        "transition": "C→W",
        "status": "supported",
        "source_id": key.split("/")[0],
        "reader": "qwen",
        "revision": "r",
        "seed": "unknown",
        "compressor": "snapkv",
        "setting": "0.75",
        "coverage_status": "measured",
        "comp_output_hash": NAN,
        "comp_score": NAN,
        "comp_correct": NAN,
        **{m: NAN for m in ("err", "ecov", "delta_nll", "kl", "top50", "ear")},
    }
    base.update(values)
    return base


def demand(key: str | None, task: str, evidence: float, dist: float | None, access: float | None) -> dict:
    labels = {f"label.{a}": 3.0 for a in AXES} | {"label.evidence_presence": evidence}
    return {
        "record_key": key,
        "task_name": task,
        "distribution_demand": dist,
        "access_demand": access,
        **labels,
    }


ROWS = pd.DataFrame(
    [
        row("s1/snap", err=0.2, ecov=0.1, delta_nll=3.0, kl=2.0, top50=0.5, ear=0.1),
        row("s2/snap", err=0.4, ecov=0.3, delta_nll=1.0, kl=1.0, top50=0.7, ear=NAN),  # no attention trace
        row(
            "s1/think",
            compressor="think",
            setting="0.5",
            coverage_status="structural",
            delta_nll=8.0,
            top50=0.4,
        ),
        row("c1/snap", err=0.6, ecov=0.5, delta_nll=0.5, top50=0.9, ear=0.3),
        row("s3/snap", transition="C→C", ecov=0.9),  # not a failure: in no table
        row("s4/snap", ecov=0.05, delta_nll=4.0),  # a C→W row the release did not label
        row("u1/think", compressor="think", setting="0.75", status="unsupported", transition=None),
    ]
)
RELEASE = ReleaseTables(
    demand=pd.DataFrame(
        [
            demand("s1/snap", "niah_single_1", 1.0, 2.0, 3.0),
            demand("s2/snap", "niah_single_2", 1.0, 1.0, None),
            demand("s1/think", "niah_single_1", 1.0, 3.0, 2.0),
            demand("c1/snap", "cwe", 3.0, 0.5, 1.0),
            demand(None, "cwe", 3.0, 9.0, 9.0),  # joins no record: in no table
        ]
    )
)


def test_task_groups() -> None:
    assert task_group("niah_single_3") == "Single NIAH"
    assert task_group("ruler_niah_multikey_2") == "Multi-key NIAH"
    assert task_group("niah_multivalue") == "Multi-value NIAH"
    assert task_group("niah_multiquery") == "Multi-query NIAH"
    assert task_group("vt") == "Variable tracking"
    assert task_group("ruler_cwe") == "CWE" and task_group("fwe") == "FWE"
    assert task_group("qasper") == "qasper"


def test_table_13_by_task() -> None:
    tasks = demand_tables(ROWS, RELEASE)["kvd_demand_tasks"].set_index("task")
    assert list(tasks.index) == ["CWE", "Single NIAH"]
    single = tasks.loc["Single NIAH"]
    assert single["rows"] == 3 and single["n_sources"] == 2  # s1 (twice) and s2
    assert single["ecov"] == pytest.approx((0.1 + 0.3) / 2) and single["n_ecov"] == 2  # think: structural N/A
    assert single["err"] == pytest.approx((0.2 + 0.4) / 2)
    assert single["delta_nll"] == pytest.approx((3.0 + 1.0 + 8.0) / 3)
    assert single["top50"] == pytest.approx((0.5 + 0.7 + 0.4) / 3)
    assert single["ear"] == pytest.approx(0.1) and single["n_ear"] == 1
    assert single["evidence_presence"] == pytest.approx(1.0)
    assert single["distribution_demand"] == pytest.approx((2.0 + 1.0 + 3.0) / 3)
    assert single["access_demand"] == pytest.approx((3.0 + 2.0) / 2) and single["n_access_demand"] == 2
    cwe = tasks.loc["CWE"]
    assert cwe["rows"] == 1 and cwe["evidence_presence"] == 3.0 and cwe["access_demand"] == 1.0


def test_table_14_by_setting() -> None:
    cells = demand_tables(ROWS, RELEASE)["kvd_demand_settings"].set_index(["compressor", "setting"])
    snap = cells.loc[("snapkv", "0.75")]
    # four C→W rows (s1, s2, c1, s4); demand over the three labelled ones; the C→C row s3 is out
    assert snap["rows"] == 4 and snap["coverage"] == "measured"
    assert snap["ecov"] == pytest.approx((0.1 + 0.3 + 0.5 + 0.05) / 4)
    assert snap["distribution_demand"] == pytest.approx((2.0 + 1.0 + 0.5) / 3)
    assert snap["n_distribution_demand"] == 3
    assert snap["access_demand"] == pytest.approx((3.0 + 1.0) / 2)
    think = cells.loc[("think", "0.5")]
    assert think["coverage"] == "structural" and math.isnan(think["ecov"]) and think["n_ecov"] == 0
    na = cells.loc[("think", "0.75")]
    assert na["status"] == "unsupported" and math.isnan(na["rows"])


def test_figure_11_draws_table_14_with_its_na_cells(tmp_path: Path) -> None:
    cells = demand_tables(ROWS, RELEASE)["kvd_demand_settings"].set_index(["compressor", "setting"])
    snap, think, na = (cells.loc[k] for k in [("snapkv", "0.75"), ("think", "0.5"), ("think", "0.75")])
    value, text = _profile_cell("ecov")(snap)
    assert value == pytest.approx(0.2375) and text == "0.238"  # (0.1 + 0.3 + 0.5 + 0.05) / 4
    assert _profile_cell("ecov")(think)[1] == "N/A (S)"  # structural: undefined, never 1
    assert math.isnan(_profile_cell("ecov")(think)[0])
    assert _profile_cell("delta_nll")(na)[1] == "N/A\nunsupported"
    table = cells.reset_index()
    drawn = settings_profile(table, tmp_path)
    assert [p.name for p in drawn] == [f"kvd-settings-profile_{t}.png" for t in dict.fromkeys(table["task"])]
    assert settings_profile(table.iloc[0:0], tmp_path) == []


def test_figure_12_profile(tmp_path: Path) -> None:
    profile = demand_tables(ROWS, RELEASE)["kvd_demand_profile"]
    ev = profile[(profile["panel"] == "labels") & (profile["axis"] == "evidence_presence")].set_index("value")
    assert ev.loc[1.0, "rows"] == 3 and ev.loc[3.0, "rows"] == 1  # of the 4 labelled C→W rows
    assert ev.loc[1.0, "share"] == pytest.approx(3 / 4)
    access = profile[profile["axis"] == "access_demand"].set_index("value")
    assert dict(access["rows"]) == {1.0: 1, 2.0: 1, 3.0: 1}  # s2 has no access score: left out, not 0
    assert [p.name for p in demand_profile_plot(profile, tmp_path)] == ["kvd_demand_profile.png"]


def test_no_labels_is_not_applicable(tmp_path: Path) -> None:
    tables = demand_tables(ROWS, ReleaseTables())
    assert list(tables["kvd_demand_tasks"]["status"]) == ["not_applicable"]
    assert tables["kvd_demand_tasks"]["reason"].iloc[0] == NO_LABELS
    snap = tables["kvd_demand_settings"].set_index(["compressor", "setting"]).loc[("snapkv", "0.75")]
    assert snap["reason"] == NO_LABELS and snap["ecov"] == pytest.approx(0.95 / 4)  # records still give ECov
    assert demand_profile_plot(tables["kvd_demand_profile"], tmp_path) == []


def test_pyramidkv_pairs_from_records() -> None:
    both = {"setting": "0.5", "coverage_status": "measured"}
    rows = pd.DataFrame(
        [
            row(
                "a/s",
                compressor="snapkv",
                comp_output_hash=7.0,
                comp_score=1.0,
                delta_nll=0.5,
                ecov=0.4,
                **both,
            ),
            row(
                "a/p",
                compressor="pyramidkv",
                comp_output_hash=7.0,
                comp_score=1.0,
                delta_nll=0.5,
                ecov=0.4,
                **both,
            ),
            row(
                "b/s",
                compressor="snapkv",
                comp_output_hash=8.0,
                comp_score=0.0,
                delta_nll=1.0,
                ecov=0.2,
                **both,
            ),
            row(
                "b/p",
                compressor="pyramidkv",
                comp_output_hash=9.0,
                comp_score=0.0,
                delta_nll=2.0,
                ecov=NAN,
                **both,
            ),
            row(
                "c/s", compressor="snapkv", comp_output_hash=10.0, comp_score=0.0, **both
            ),  # no pyramidkv pair
        ]
    )
    out = pyramidkv_pairs(rows).iloc[0]
    assert out["n_pairs"] == 2
    assert (out["n_output_compared"], out["n_output_equal"]) == (2, 1)
    assert (out["n_score_compared"], out["n_score_equal"]) == (2, 2)
    assert (out["n_delta_nll_compared"], out["n_delta_nll_equal"]) == (2, 1)
    assert (out["n_ecov_compared"], out["n_ecov_equal"]) == (1, 1)  # b's PyramidKV ECov is N/A: not compared
    assert not out["all_outputs_equal"] and out["example_source"] == "a"
    assert out["snapkv_output_hash"] == "0000000000007" and out["pyramidkv_output_hash"] == "0000000000007"
    missing = pyramidkv_pairs(rows[rows["compressor"] == "snapkv"])
    assert missing["status"].iloc[0] == "not_applicable" and "pyramidkv" in missing["reason"].iloc[0]


def test_release_audit_table() -> None:
    pair = {"retained_index_sha256": "514e8b39ca" + "0" * 54, "output_sha256": "d1626650b9" + "1" * 54}
    audit = {
        "audit_status": "invalid_adapter_confirmed_rows_excluded",
        "pair_count": 4,
        "overall_equality": {
            "raw_output": {"equal_pairs": 4, "rate": 1.0},
            "score": {"equal_pairs": 3, "rate": 0.75},
        },
        "representative_pairs": [
            {
                "dataset": "ruler8k",
                "sample_id": "cwe_000000",
                "retained_budget": 0.75,
                "SnapKVPress": pair,
                "PyramidKVPress": pair,
                "retained_indices_equal": True,
                "outputs_equal": True,
            },
            {
                "dataset": "qasper_hotpotqa",
                "sample_id": "hotpotqa_000000",
                "retained_budget": 0.25,
                "SnapKVPress": pair,
                "PyramidKVPress": {**pair, "output_sha256": "f" * 64},
                "retained_indices_equal": True,
                "outputs_equal": False,
            },
        ],
    }
    out = release_audit(audit)
    pairs = out[out["kind"] == "pair"].set_index("sample")
    assert pairs.loc["cwe_000000", "kv"] == "75%" and pairs.loc["cwe_000000", "index_hash"] == "514e8b39ca"
    assert pairs.loc["cwe_000000", "output_hash"] == "d1626650b9" and pairs.loc["cwe_000000", "equal"]
    assert not pairs.loc["hotpotqa_000000", "equal"] and not pairs.loc["hotpotqa_000000", "hashes_identical"]
    fields = out[out["kind"] == "field"].set_index("field")
    assert fields.loc["score", "n_equal_pairs"] == 3 and fields.loc["score", "n_pairs"] == 4
    assert release_audit(None)["status"].iloc[0] == "not_applicable"


def test_release_tables_next_to_records(tmp_path: Path) -> None:
    from kvx.aggregate.read.release_tables import release_tables

    class Dir:  # what release_tables reads of a DirectorySource
        roots = [tmp_path]

    good = {
        "record_key": "k",
        "task_name": "cwe",
        "labels": {"evidence_presence": 3.0},
        "access_demand": None,
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "a/context_demand.jsonl").write_text(json.dumps(good) + "\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b/context_demand.jsonl").write_text("{not json\n")
    (tmp_path / "a/pyramidkv_adapter_audit.json").write_text(json.dumps({"pair_count": 7800}))
    out = release_tables(Dir())  # type: ignore[arg-type]
    assert list(out.demand["record_key"]) == ["k"] and out.demand["label.evidence_presence"].iloc[0] == 3.0
    assert out.audit == {"pair_count": 7800}
    assert len(out.notes) == 1 and "b/context_demand.jsonl:1: invalid JSON" in out.notes[0]
