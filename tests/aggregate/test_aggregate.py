"""python -m kvx.aggregate: hand-computed tables, crafted invalid inputs, MLflow vs record directory."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.options import Options
from kvx.aggregate.read.sources import MlflowSource
from kvx.aggregate.run import analyse
from kvx.core.records import dumps, validate
from kvx.testing.crafted import FAST, cov, panel, problems, rec, run, write
from kvx.testing.synthetic import Grid, cell_records, controls, log_sweep

# ---------------------------------------------------------------------------------------- matrix


def test_matrix_by_hand(tmp_path: Path) -> None:
    records = [
        rec(source="s0", ok=True),  # C→C
        rec(source="s1", ok=False, score=0.5),  # C→W
        rec(source="s2", full=False, ok=True),  # W→C
        rec(source="s3", status="error"),  # counted, never scored
        rec(source="s0", comp="think", ratio=0.5, status="unsupported"),
        rec(source="s1", comp="think", ratio=0.5, status="unsupported"),
        rec(source="s2", comp="think", ratio=0.5, status="unsupported"),
        rec(source="s3", comp="think", ratio=0.5, status="unsupported"),
    ]
    m = run(write(tmp_path, records)).tables["matrix"].set_index("compressor")
    snap = m.loc["snapkv"]
    assert (snap.n_sources, snap.n_supported, snap.n_error, snap.n_unsupported) == (4, 3, 1, 0)
    assert snap.quality == pytest.approx((1 + 0.5 + 1) / 3) and snap.accuracy == pytest.approx(2 / 3)
    assert (snap.n_fc, snap.n_cw, snap.n_cc, snap.n_wc) == (2, 1, 1, 1) and snap.cw_rate == pytest.approx(0.5)
    think = m.loc["think"]
    assert think.n_unsupported == 4 and math.isnan(think.quality) and math.isnan(think.cw_rate)  # N/A, not 0
    full = m.loc["FullCache"]  # one control per source, errors included when a control exists
    assert (full.n_sources, full.n_fc) == (4, 3) and full.accuracy == pytest.approx(3 / 4)


def test_pooled_rows_are_source_weighted(tmp_path: Path) -> None:
    a = [rec(task="a", source=f"s{i}", ok=i < 1) for i in range(2)]  # a: 1 C→W of 2
    b = [rec(task="b", source=f"s{i}", ok=i < 5) for i in range(6)]  # b: 1 C→W of 6
    m = run(write(tmp_path, a + b)).tables["matrix"]
    pooled = m[(m.task == "pooled") & (m.compressor == "snapkv")].iloc[0]
    assert pooled.n_fc == 8 and pooled.cw_rate == pytest.approx(2 / 8)  # not (1/2 + 1/6) / 2
    assert pooled.quality == pytest.approx(6 / 8)


# ------------------------------------------------------------------------ failure sets, categories


def test_failure_means_use_only_valid_failure_rows(tmp_path: Path) -> None:
    records = [
        rec(source="s0", ok=False, diags=cov(0.2), category="low_mapped_coverage"),
        rec(source="s1", ok=False, diags=cov(0.6), category="partial_mapped_coverage"),
        rec(source="s2", ok=False, diags=cov(None), category="ambiguous"),  # N/A: not in A
        rec(source="s3", ok=True, diags=cov(0.0)),  # C→C: not in F
        rec(source="s0", comp="tova", ok=True, diags=cov(0.9)),  # tova: F empty
    ]
    t = run(write(tmp_path, records)).tables
    f = t["failures"].set_index("compressor")
    assert f.loc["snapkv", "n_failures"] == 3 and f.loc["snapkv", "ecov_n"] == 2
    assert f.loc["snapkv", "ecov_mean"] == pytest.approx(0.4)
    assert f.loc["tova", "n_failures"] == 0 and math.isnan(f.loc["tova", "ecov_mean"])
    c = t["categories"]
    snap = c[c.compressor == "snapkv"].set_index("category")
    assert snap.loc["low_mapped_coverage", "rows"] == 1 and snap.loc["ambiguous", "share"] == pytest.approx(
        1 / 3
    )
    assert snap["rows"].sum() == 3


def test_matched_comparison_jaccard_and_intersection_means(tmp_path: Path) -> None:
    records = [rec(source=f"s{i}", ok=i not in (0, 1, 2), diags=cov(0.1 * i)) for i in range(5)]
    records += [
        rec(source=f"s{i}", comp="tova", ok=i not in (1, 2, 3), diags=cov(None if i == 2 else 0.5))
        for i in range(5)
    ]
    row = run(write(tmp_path, records)).tables["matched"].iloc[0]
    assert (row.compressor_a, row.compressor_b, row.intersection, row.union) == ("snapkv", "tova", 2, 4)
    assert row.jaccard == pytest.approx(0.5)
    assert row.ecov_n == 1  # s1 only: s2 has no valid tova ECov
    assert row.ecov_mean_a == pytest.approx(0.1) and row.ecov_mean_b == pytest.approx(0.5)


def test_separation_is_stratified_by_cell(tmp_path: Path) -> None:
    # snapkv: failures have lower ECov (risk "lower"): AUROC 1; tova: fully reversed: AUROC 0.
    records = [rec(source=f"s{i}", ok=i >= 2, diags=cov([0.1, 0.2, 0.8, 0.9][i])) for i in range(4)]
    records += [
        rec(source=f"s{i}", comp="tova", ok=i >= 1, diags=cov([0.9, 0.1, 0.2, 0.3][i])) for i in range(4)
    ]
    sep = run(write(tmp_path, records)).tables["separation"].set_index("metric")
    # pooled pair count: snapkv 2x2 pairs all concordant (4), tova 1x3 pairs all discordant (0) -> 4/7
    assert sep.loc["ecov", "auroc"] == pytest.approx(4 / 7)
    assert (sep.loc["ecov", "n_strata"], sep.loc["ecov", "n_cw"], sep.loc["ecov", "n_cc"]) == (2, 3, 5)


def test_intervention_report(tmp_path: Path) -> None:
    def iv(**values) -> dict:
        return {"intervention": {"status": "measured", "values": values, "reason": "", "seconds": 0.0}}

    cw = [
        iv(reproduced=True, repaired_evidence=e, repaired_sham=s)
        for e, s in [(True, False), (True, False), (True, True), (False, False), (False, True)]
    ]
    cw.append(iv(reproduced=False, repaired_evidence=False, repaired_sham=False))
    records = [rec(source=f"w{i}", ok=False, diags=d) for i, d in enumerate(cw)]
    records += [
        rec(source=f"c{i}", ok=True, diags=iv(degraded_evidence=i == 0, degraded_sham=False))
        for i in range(4)
    ]
    row = run(write(tmp_path, records)).tables["intervention"].iloc[0]
    assert (row.n_cw_rows, row.n_reproduced, row.repaired_evidence, row.repaired_sham) == (6, 5, 3, 2)
    assert row.repair_rate_evidence == pytest.approx(0.6) and row.paired_diff == pytest.approx(0.2)
    assert (row.evidence_only, row.sham_only) == (2, 1) and row.mcnemar_p == pytest.approx(1.0)
    assert row.n_cc_controls == 4 and row.degradation_rate_evidence == pytest.approx(0.25)


# ------------------------------------------------------------------------------------ audit


def test_reader_upgrade_audit_by_hand(tmp_path: Path) -> None:
    readers = {  # raw means 0.1 / 0.5 / 0.9; compressed 0.5 / 0.6 / 0.6
        "weak": ([1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 1, 1, 0, 0, 0]),
        "mid": ([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 1, 1, 0, 0, 0]),
        "strong": ([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]),
    }
    t = run(
        write(tmp_path, panel(readers)),
        Options(n_splits=200, n_boot=200, seed=1, progress=False, pairs=[("weak", "mid")]),
    ).tables
    pairs = t["audit_pairs"]
    ends = pairs[(pairs.kind == "endpoints") & (pairs.metric == "correct")].iloc[0]
    assert (ends.reader_a, ends.reader_b) == ("weak", "strong")
    assert ends.raw_upgrade == pytest.approx(0.8) and ends.comp_upgrade == pytest.approx(0.1)
    assert ends.retention == pytest.approx(0.1 / 0.8)
    assert ends.raw_upgrade_low <= ends.raw_upgrade <= ends.raw_upgrade_high
    assert ends.retention_low <= ends.retention_high and ends.retention_undefined_draws >= 0
    declared = pairs[(pairs.kind == "declared") & (pairs.metric == "correct")].iloc[0]
    assert declared.retention == pytest.approx(0.1 / 0.4)
    weak = t["audit_readers"].query("reader == 'weak' and metric == 'correct'").iloc[0]
    assert weak.gain == pytest.approx(0.4)
    assert weak.rescue == pytest.approx(4 / 10) and weak.damage == pytest.approx(0.0)  # 4 of 10 rescued
    p = t["audit_panel"].query("metric == 'correct'").iloc[0]
    # rescued 4 + 2 + 0 of all 30 pairs; damaged 0 + 1 + 3 of the 1 + 5 + 9 raw-correct pairs
    assert p.rescue == pytest.approx(6 / 30) and p.damage == pytest.approx(4 / 15)
    assert p.n_readers == 3 and p.artifact_check == "KV cache: no text artifact" and np.isfinite(p.eiv_r)


def test_audit_refuses_different_text_artifacts(tmp_path: Path) -> None:
    readers = {"a": ([1, 0, 1], [1, 1, 0]), "b": ([1, 1, 1], [0, 1, 1])}
    records = panel(readers, text_hash="a" * 64)
    records[4]["compressed_text_sha256"] = "b" * 64  # reader b, row s1
    result = run(write(tmp_path, records))
    refused = problems(result, "artifact_hash")
    assert len(refused) == 1 and "row t|seed=0|s1" in refused.iloc[0].message
    p = result.tables["audit_panel"].iloc[0]
    assert p.artifact_check.startswith("refused") and math.isnan(p.excess_flips)
    assert result.tables["audit_readers"].empty


# ---------------------------------------------------------------------------- invalid inputs


def test_crafted_invalid_inputs_are_each_reported(tmp_path: Path) -> None:
    good = [rec(source=f"s{i}", ok=i > 0) for i in range(4)]
    bad = []
    orphan = copy.deepcopy(good[0]) | {"key": "orphan", "full": None}  # no FullCache partner
    bad.append(json.dumps(orphan))
    bad.append(json.dumps(good[1]))  # duplicate key
    moved = copy.deepcopy(good[2]) | {"key": "moved", "compressor": "tova", "prompt_hash": "f" * 64}
    bad.append(json.dumps(moved))  # same source, different prompt hash
    nan = copy.deepcopy(good[3]) | {"key": "nan-score", "compressor": "knorm"}
    nan["compressed"]["score"] = float("nan")
    bad.append(json.dumps(nan))
    old = copy.deepcopy(good[3]) | {"key": "old", "schema_version": "0"}
    bad.append(json.dumps(old))
    write(tmp_path, good)
    (tmp_path / "bad.jsonl").write_text("\n".join(bad) + "\n{not json\n")
    result = run(tmp_path)
    found = {(p.check, p.key) for p in result.problems}
    assert ("schema", "orphan") in found
    assert any(p.check == "schema" and "full" in p.message for p in result.problems)
    assert ("duplicate_key", good[1]["key"]) in found
    assert ("prompt_hash", "moved") in found or ("prompt_hash", good[2]["key"]) in found
    assert ("nonfinite", "nan-score") in found
    assert ("schema_version", "old") in found
    assert any(p.check == "schema_version" and "mixed" in p.message for p in result.problems)
    assert any(p.check == "parse" and p.key == "line 6" for p in result.problems)
    rows = result.tables["matrix"]
    assert "knorm" not in set(rows.compressor)  # the NaN-score record is left out, loudly
    snap = rows[rows.compressor == "snapkv"].iloc[0]
    assert snap.n_sources == 3  # s2's source is left out: its pairing is in doubt


def test_nan_diagnostic_value_is_missing_not_imputed(tmp_path: Path) -> None:
    r = rec(ok=False, diags=cov(0.5))
    r["diagnostics"]["coverage"]["values"]["ecov"] = float("nan")
    result = run(write(tmp_path, [r, rec(source="s1", ok=False, diags=cov(0.3))]))
    assert len(problems(result, "nonfinite")) == 1
    f = result.tables["failures"].iloc[0]
    assert f.n_failures == 2 and f.ecov_n == 1 and f.ecov_mean == pytest.approx(0.3)


def test_missing_cells_and_sources_are_reported(tmp_path: Path) -> None:
    records = [
        rec(source=f"s{i}", comp=c, ratio=r)
        for i in range(3)
        for c in ("snapkv", "tova")
        for r in (0.25, 0.5)
    ]
    records = [r for r in records if not (r["compressor"] == "tova" and r["setting"]["ratio"] == 0.5)]
    records = [
        r
        for r in records
        if not (r["compressor"] == "snapkv" and r["source_id"] == "s2" and r["setting"]["ratio"] == 0.5)
    ]
    result = run(write(tmp_path, records))
    messages = list(problems(result, "expected_cells").message)
    assert any("tova@0.5 is missing" in m for m in messages)
    assert any("snapkv@0.5 lacks 1 sources: s2" in m for m in messages)


def test_control_ledger_disagreement_is_a_partner_problem(tmp_path: Path) -> None:
    records = [rec(source=f"s{i}") for i in range(3)]
    ledger = controls(records)[:2]  # s2 has no control
    ledger[1]["score"] = 0.5  # s1's control disagrees with the record's FullCache answer
    write(tmp_path, records)
    (tmp_path / f"{records[0]['split']}.controls.jsonl").write_text(dumps(ledger))
    found = {p.key: p.message for p in run(tmp_path).problems if p.check == "partner"}
    assert "no FullCache partner" in found[records[2]["key"]]
    assert "differs from the control ledger" in found[records[1]["key"]]


# ----------------------------------------------------------------------- MLflow and the CLI


@pytest.mark.slow
def test_mlflow_and_exported_directory_give_identical_tables(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    grid = Grid(readers=("smollm2", "gemma3", "tiny"), compressors=("snapkv", "tova", "think"), n_sources=12)
    sweep = log_sweep(uri, grid)
    common = ["--quiet", "--splits", "100", "--boot", "100", "--no-plots"]
    code = main(
        [
            "--tracking-uri",
            uri,
            "--out",
            str(tmp_path / "a"),
            "--export-records",
            str(tmp_path / "r"),
            *common,
        ]
    )
    assert code == 0
    assert main(["--records", str(tmp_path / "r"), "--out", str(tmp_path / "b"), "--no-log", *common]) == 0
    csvs = sorted(p.name for p in (tmp_path / "a").glob("*.csv"))
    assert "matrix.csv" in csvs and "audit_panel.csv" in csvs
    for name in csvs:  # problems too: the export names each file's run and sweep (kvx-export.json)
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text(), name
    assert (tmp_path / "a" / "report.html").stat().st_size > 1000
    matrix = pd.read_csv(tmp_path / "a" / "matrix.csv")
    assert len(matrix[matrix.compressor != "FullCache"]) == 3 * 3 * 2
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("kvx").experiment_id
    agg = client.search_runs([exp], "tags.`kvx.role` = 'aggregate'")
    assert len(agg) == 1 and agg[0].data.tags["kvx.sweeps"] == sweep
    assert {a.path for a in client.list_artifacts(agg[0].info.run_id)} >= {"report.html", "matrix.csv"}


@pytest.mark.slow
def test_stale_sweeps_and_unfinished_jobs_are_reported(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from kvx.stores import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = log_sweep(uri, Grid(n_sources=3))
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("kvx").experiment_id
    crashed = client.create_run(exp, tags={tracking.ROLE: "sweep", tracking.PLANNED_JOBS: "4"}).info.run_id
    client.create_run(exp, tags={tracking.ROLE: "cell", tracking.MLFLOW_PARENT: crashed})  # left RUNNING
    cell = client.search_runs(
        [exp], f"tags.`{tracking.MLFLOW_PARENT}` = '{sweep}' and tags.`kvx.role` = 'cell'"
    )[0]
    client.log_metric(cell.info.run_id, "n_cw", 99)  # a logged count the records do not regenerate
    source = MlflowSource(uri, ["kvx"], [crashed], close_stale=True)
    assert source.stale == [crashed] and client.get_run(crashed).info.status == "RUNNING"  # only read
    tracking.close_stale(uri, source.stale)
    result = analyse(source, FAST)
    checks = {p.check for p in result.problems}
    assert {"stale_parent", "unfinished_run", "expected_cells"} <= checks
    counts = [p for p in analyse(MlflowSource(uri, ["kvx"], [sweep]), FAST).problems if p.check == "counts"]
    assert len(counts) == 1 and counts[0].run == cell.info.run_id and "logged n_cw=99" in counts[0].message
    assert client.get_run(crashed).info.status == "KILLED"
    assert client.get_run(sweep).info.status == "FINISHED"


def test_cli_errors_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", "--quiet"]) == 2
    assert "no such store" in capsys.readouterr().err
    folder = write(tmp_path / "r", [rec(), rec()])  # duplicate key
    args = ["--records", str(folder), "--out", str(tmp_path / "o"), "--quiet", "--no-plots"]
    assert main(args) == 0
    assert main([*args, "--strict"]) == 1
    assert main(["--pair", "onlyone"]) == 2  # argparse's usage error, returned


@pytest.mark.slow
def test_outputs_dir_finds_the_store_runs_with_that_outputs_dir_wrote_and_writes_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    runs = tmp_path / "D"  # as `python -m kvx ... outputs_dir=D` writes it (the rule: test_cli.py)
    log_sweep(f"sqlite:///{runs / 'mlflow.db'}", Grid(n_sources=2))
    quiet = ["--quiet", "--no-plots", "--no-log"]
    assert main(quiet) == 2  # the default outputs_dir: it names what it looked for and how to point it
    err = capsys.readouterr().err
    assert f"no such store: {tmp_path / 'outputs' / 'mlflow.db'}" in err
    assert "default outputs_dir=outputs" in err and "--outputs-dir DIR" in err
    assert "sqlite:////abs/path/mlflow.db" in err
    assert main(["--outputs-dir", "D", *quiet]) == 0
    assert len(list((runs / "aggregate").glob("*/report.html"))) == 1
    assert not (tmp_path / "outputs").exists()  # nothing in the folder the runs did not use
    assert main(["--tracking-uri", f"sqlite:///{str(runs)[1:]}/mlflow.db", *quiet]) == 2  # three slashes
    assert f"did you mean sqlite:///{runs}/mlflow.db?" in capsys.readouterr().err
    shutil.rmtree(runs / "aggregate")
    assert main(["--tracking-uri", f"sqlite:///{runs}/mlflow.db", *quiet]) == 0  # four: beside the store
    assert len(list((runs / "aggregate").glob("*/report.html"))) == 1
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    assert main(["--outputs-dir", "D", *quiet]) == 2  # as for runs, MLFLOW_TRACKING_URI wins
    assert "chosen by MLFLOW_TRACKING_URI" in capsys.readouterr().err


#: what a plugin's text transform beside a sweep's presses adds to each compressor's label
LONG_LABEL = "[transform=kvx-plugin-example:keep_ends]"


@pytest.mark.slow
@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize(
    ("grid", "suffix"),
    [
        (Grid(n_sources=2), ""),
        (Grid(compressors=("snapkv",), ratios=(0.5,), n_sources=1), ""),
        (Grid(n_sources=2), LONG_LABEL),
    ],
    ids=["tiny-sweep", "one-cell", "long-labels"],
)
def test_the_figures_of_a_tiny_aggregate_draw_without_a_warning(
    tmp_path: Path, grid: Grid, suffix: str
) -> None:
    """As small as a first sweep (2 presses x 2 ratios x 2 sources, or one cell of one source), or with
    the long compressor labels of a text transform beside the presses (constrained layout collapsed the
    Jaccard panel to nothing there, warning): every figure is drawn in this process (one worker), so a
    matplotlib warning fails the test."""
    from kvx.aggregate.catalogue import load
    from kvx.aggregate.publish.plots import plot_all

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    log_sweep(uri, grid)
    tables = analyse(MlflowSource(uri, ["kvx"]), FAST).tables
    for frame in tables.values():
        for column in {"compressor", "compressor_a", "compressor_b"} & set(frame.columns):
            long = frame[column].astype(str) != "FullCache"
            frame.loc[long, column] = frame.loc[long, column].astype(str) + suffix
    figures = plot_all(tables, tmp_path / "out", load(figures=True).figures, workers=1)
    assert sum(map(len, figures.values())) >= 4  # heatmaps, frontier, Jaccard, KVDiagnosis tiers


def test_synthetic_records_follow_the_schema() -> None:
    for r in cell_records(Grid(compressors=("think",)), "ruler_niah_single", "smollm2", "think", 0.25):
        validate(r)


def test_contrast_keeps_anchor_and_structural_shares_by_hand(tmp_path: Path) -> None:
    records = []
    for i, (anchor, structural) in enumerate([(1.0, 0.0), (1.0, 1.0), (0.0, 0.0)]):
        r = rec(source=f"s{i}", ok=bool(structural))
        r["contrast"] = {"name_substring": "schema_valid"}
        r["full"]["metrics"] = {"name_substring": 1.0, "schema_valid": 1.0 if i < 2 else 0.0}
        r["compressed"]["metrics"] = {"name_substring": anchor, "schema_valid": structural}
        records.append(r)
    row = run(write(tmp_path, records)).tables["contrast"].iloc[0]
    assert (row.anchor, row.structural, row.n) == ("name_substring", "schema_valid", 3)
    assert row.anchor_full == pytest.approx(1.0) and row.anchor_comp == pytest.approx(2 / 3)
    assert row.anchor_kept == pytest.approx(2 / 3)
    assert row.structural_full == pytest.approx(2 / 3) and row.structural_comp == pytest.approx(1 / 3)
    assert row.structural_kept == pytest.approx(0.5)


def test_seeds_are_control_groups_by_design_and_one_seed_with_two_is_warned(tmp_path: Path) -> None:
    """Each seed draws its own sources (its own control group): a multi-seed sweep is no mix. Two
    groups at one seed (two sweeps' source counts pooled) are."""

    def cell(grid: Grid) -> list[dict]:
        return cell_records(grid, "ruler_niah_single", "smollm2", "snapkv", 0.5)

    seeds = cell(Grid(seed=0, n_sources=3)) + cell(Grid(seed=1, n_sources=3))
    assert problems(run(write(tmp_path / "seeds", seeds)), "splits").empty
    sizes = cell(Grid(n_sources=3)) + cell(Grid(n_sources=4))
    [message] = problems(run(write(tmp_path / "sizes", sizes)), "splits").message
    assert message.startswith("ruler_niah_single x smollm2 at seed 0 mixes 2 control groups")
