"""KVDiagnosis's per-workload tables and figures (Tables 3, 12, 16; Figures 4A, 5, 7, 10) on hand-made
records with hand-counted answers."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.catalogue import load
from kvx.aggregate.kvdiagnosis.workloads import method_of, task_group, tier_of, workload
from kvx.aggregate.options import Options
from kvx.aggregate.publish import kvdiagnosis_plots
from kvx.aggregate.publish.plots import plot_all
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.core.identity import digest
from kvx.core.records import Answer, Record, dumps, validate
from kvx.testing.synthetic import RISK

FAST = Options(n_splits=20, n_boot=20, seed=1, progress=False, workers=1)
R8, R4 = "ruler/* @8192", "ruler/* @4096"
QA = "qasper[context_tokens=8192]"  # context_tokens varies in the selection: every task label names it


def answer(ok: bool) -> Answer:
    text = "yes" if ok else "no"
    return Answer(text, text, float(ok), ok, [1], "eos")


def diag(name: str, status: str, **values: float) -> dict:
    return {name: {"status": status, "values": values, "reason": "", "seconds": 0.0, "risk": RISK[name]}}


def rec(
    task: str,
    source: str,
    press: str,
    setting: float | int,
    full: bool,
    ok: bool | None,
    ctx: int = 8192,
    status: str = "supported",
    diags: dict | None = None,
    category: str | None = None,
) -> dict:
    """One record of ``press`` at kvpress ratio ``setting`` (``hqq``: at ``setting`` bits), its cell
    carrying the task's context size as kvx's own cells do."""
    family = "ruler" if task.startswith("ruler") else None
    bits = press == "hqq"
    kind, value = ("none", None) if bits else ("ratio", setting)
    fields = {"task": task, "reader": "r", "press": press, "setting.kind": kind, "setting.value": value}
    fields |= {"press.bits": setting} if bits else {}
    fields |= {"seed": 0, "context_tokens": ctx}
    cell_id = digest(fields)
    r = Record(
        key=f"{task}/{source}/r@rev1/{press}/{setting}/{ctx}",
        status="supported",
        reason="",
        task=task,
        task_family=family,
        source_id=source,
        references=["yes"],
        reader="r",
        model_revision="rev1",
        compressor=press,
        seed=0,
        setting={
            "kind": kind,
            "value": value,
            "ratio": 0.0 if bits else setting,
            "retained_share": setting / 16 if bits else 1 - setting,
            "method_parameter": {"bits": setting} if bits else {},
        },
        prompt_hash=f"{hash((task, source, ctx)) % 16**8:064x}",
        n_context_tokens=10,
        n_question_tokens=2,
        config_hash="h",
        cell={"id": cell_id, "fields": fields},
        versions={},
        split=f"{task}|{ctx}|r",
        full=None if status == "unsupported" else answer(full),
        diagnostics=diags,
        category=None if category is None else {"category": category, "matched": [category]},
    )
    if status == "supported":
        r.pair(r.full, answer(bool(ok)))
    else:
        r.fail(status, "why")
    return r.to_dict()


# FullCache correctness per (task, source); RULER-8K: three tasks, four sources; Qasper: two
FULL = {
    ("ruler_niah_single_1", "s0"): True,
    ("ruler_niah_single_1", "s1"): True,
    ("ruler_niah_single_2", "s0"): True,
    ("ruler_vt", "s0"): False,
    ("qasper", "s0"): True,
    ("qasper", "s1"): False,
}
#: (press, setting) -> the (task, source) answered wrongly under it; everything else right
WRONG = {
    ("snapkv", 0.25): {("ruler_niah_single_1", "s1")},
    ("snapkv", 0.75): {*FULL},
    ("hqq", 2): {("ruler_niah_single_1", "s0"), ("qasper", "s1")},
    ("snapkv", 0.3): {("ruler_niah_single_2", "s0"), ("qasper", "s0")},
}
#: the C→W rows' stored diagnostics and recorded category (None: derived here, or none)
DIAGNOSED = {
    ("snapkv", 0.25, "ruler_niah_single_1", "s1"): (
        diag("coverage", "measured", err=0.3, ecov=0.3),
        "low_mapped_coverage",
    ),
    ("snapkv", 0.75, "ruler_niah_single_1", "s0"): (
        diag("coverage", "measured", err=0.2, ecov=0.2) | diag("attention", "measured", ear=0.3),
        "low_mapped_coverage",
    ),
    ("snapkv", 0.75, "ruler_niah_single_1", "s1"): (
        diag("coverage", "measured", err=0.6, ecov=0.6),
        "partial_mapped_coverage",
    ),
    ("snapkv", 0.75, "ruler_niah_single_2", "s0"): (diag("coverage", "not_applicable"), None),
    ("hqq", 2, "ruler_niah_single_1", "s0"): (
        diag("coverage", "structural") | diag("likelihood", "measured", delta_nll=2.0, gpr=0.1),
        None,
    ),
    ("snapkv", 0.75, "qasper", "s0"): (
        diag("coverage", "projected", err=0.9, ecov=0.95)
        | diag("likelihood", "measured", delta_nll=0.05, gpr=0.9),
        None,
    ),
    ("snapkv", 0.3, "ruler_niah_single_2", "s0"): (
        diag("likelihood", "measured", delta_nll=0.05, gpr=0.95),
        None,
    ),
    ("snapkv", 0.3, "qasper", "s0"): (None, "ambiguous"),
}


def records() -> list[dict]:
    out = []
    for (task, source), full in FULL.items():
        for press, setting in WRONG:
            ok = (task, source) not in WRONG[(press, setting)]
            status = (
                "error" if (press, setting, task, source) == ("snapkv", 0.25, "qasper", "s1") else "supported"
            )
            diags, category = DIAGNOSED.get((press, setting, task, source), (None, None))
            out.append(
                rec(task, source, press, setting, full, ok, status=status, diags=diags, category=category)
            )
        out.append(rec(task, source, "think", 0.75, full, None, status="unsupported"))
    out.append(rec("ruler_niah_single_1", "s9", "snapkv", 0.25, True, False, ctx=4096))  # RULER-4K: one C→W
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    folder = tmp_path_factory.mktemp("records")
    recs = records()
    for r in recs:
        validate(r)
    (folder / "cells.jsonl").write_text(dumps(recs))
    return analyse(DirectorySource([folder]), FAST).tables


def one(frame: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        mask &= frame[column] == value
    assert mask.sum() == 1, (where, mask.sum())
    return frame[mask].iloc[0]


# ---------------------------------------------------------------------------------------- labels


def test_workload_pools_ruler_by_context_and_other_tasks_by_family() -> None:
    assert workload("ruler_vt", "ruler", 8192) == workload(
        "ruler_niah_single_1[context_tokens=8192]", "ruler", 8192
    )
    assert workload("ruler_vt", "ruler", 8192) == R8 != workload("ruler_vt", "ruler", 4096)
    assert workload("ruler8k", "ruler", None) == "ruler8k"  # the release imported per dataset: its own
    assert workload("ruler8k_niah_single_1", "ruler8k", None) == "ruler8k"  # imported per subtask
    assert workload("qasper", "", None) == "qasper"


def test_task_group_pools_numbered_variants_only() -> None:
    assert task_group("ruler8k_niah_single_3") == "ruler8k_niah_single"
    assert task_group("ruler_niah_multikey_1[n_sources=4]") == "ruler_niah_multikey[n_sources=4]"
    assert task_group("ruler8k_vt") == "ruler8k_vt" and task_group("tpbench_p1") == "tpbench_p1"


def test_tier_of_retention_ratios_and_quantized_bits() -> None:
    assert [tier_of("snapkv", r, 1 - r, None)[0] for r in (0.25, 0.5, 0.75)] == [
        "light",
        "intermediate",
        "aggressive",
    ]
    assert [tier_of("hqq", math.nan, b / 16, b)[0] for b in (8, 4, 2)] == [
        "light",
        "intermediate",
        "aggressive",
    ]
    assert tier_of("hqq", math.nan, 0.25, None) == ("intermediate", "")  # bits from the retained share
    assert tier_of("hqq", 0.75, math.nan, None) == ("aggressive", "")  # kvx hqq's ratio -> 2 bits
    assert tier_of("snapkv", 0.3, 0.7, None) == ("", "ratio 0.3 is not 0.25, 0.5 or 0.75")
    assert tier_of("hqq", math.nan, 3 / 16, None) == ("", "3 bits is not 8, 4 or 2")
    assert tier_of("none", math.nan, math.nan, None)[0] == ""
    assert tier_of("hqq", math.nan, math.nan, None) == ("", "QuantizedCache without a recorded bit width")


def test_method_pools_quantized_bit_widths_only() -> None:
    assert method_of("hqq[bits=4]", "hqq") == "hqq"
    assert method_of("hqq[bits=4, group_size=32]", "hqq") == "hqq[group_size=32]"
    assert method_of("snapkv[window_size=16]", "snapkv") == "snapkv[window_size=16]"


# ---------------------------------------------------------------------------------------- tables


def test_table3_run_accounting_by_hand(tables: dict[str, pd.DataFrame]) -> None:
    acc = tables["kvd_accounting"]
    cols = [
        "n_sources",
        "n_records",
        "n_unsupported",
        "n_error",
        "n_runs",
        "n_fc",
        "n_cw",
        "n_affected_sources",
    ]
    # RULER-8K: 4 sources x 5 cells; ThinK unsupported; 3 FullCache-correct sources x 4 supported cells
    assert one(acc, workload=R8)[cols].tolist() == [4, 20, 4, 0, 16, 12, 6, 3]
    # Qasper: 2 sources x 5 cells, one errored run; only s0 is FullCache-correct (4 supported cells)
    assert one(acc, workload=QA)[cols].tolist() == [2, 10, 2, 1, 7, 4, 2, 1]
    assert one(acc, workload=R4)[cols].tolist() == [1, 1, 0, 0, 1, 1, 1, 1]
    assert one(acc, workload="Total")[cols].tolist() == [7, 31, 6, 1, 24, 17, 9, 5]


def test_figure4a_rates_pool_the_cells_of_a_tier(tables: dict[str, pd.DataFrame]) -> None:
    t = tables["kvd_tiers"]
    pooled = t[t["level"] == "workload"]
    light, aggressive = one(pooled, workload=R8, tier="light"), one(pooled, workload=R8, tier="aggressive")
    assert (light.n_cw, light.n_fc, light.cw_rate) == (1, 3, pytest.approx(1 / 3))
    # snapkv@0.75 3/3 + hqq 2 bits 1/3 + ThinK@0.75 unsupported (adds to neither): 4/6
    assert (aggressive.n_cells, aggressive.n_cw, aggressive.n_fc) == (3, 4, 6)
    assert aggressive.cw_rate == pytest.approx(4 / 6) and aggressive.n_unsupported == 4
    assert one(pooled, workload=QA, tier="light").cw_rate == 0.0  # 0 of 1: measured, not N/A
    assert one(pooled, workload=QA, tier="aggressive")[["n_cw", "n_fc"]].tolist() == [1, 2]
    assert not ((pooled["workload"] == R8) & (pooled["tier"] == "intermediate")).any()
    cells = t[t["level"] == "cell"]
    think = one(cells, workload=R8, compressor="think")
    assert think.tier == "aggressive" and think.n_fc == 0 and math.isnan(think.cw_rate)
    excluded = one(cells, workload=R8, setting="0.3")
    assert excluded.tier == "" and excluded.excluded == "ratio 0.3 is not 0.25, 0.5 or 0.75"
    assert one(cells, workload=R8, compressor="hqq")[["tier", "method"]].tolist() == ["aggressive", "hqq"]


def test_figure5_counts_by_task_and_method(tables: dict[str, pd.DataFrame]) -> None:
    tf = tables["kvd_task_failures"]
    single = one(tf, workload=R8, task="ruler_niah_single", method="snapkv")
    # 0.25: ns1/s1; 0.75: ns1/s0, ns1/s1, ns2/s0; 0.3: ns2/s0 (every setting, tiered or not)
    assert (single.n_cw, single.n_fc) == (5, 9)
    assert (
        single.tasks == "ruler_niah_single_1[context_tokens=8192], ruler_niah_single_2[context_tokens=8192]"
    )
    assert one(tf, workload=R8, task="ruler_niah_single", method="hqq").n_cw == 1
    assert one(tf, workload=R8, task="ruler_niah_single", method="think").n_supported == 0
    assert one(tf, workload=R8, task="ruler_vt", method="snapkv")[["n_cw", "n_fc"]].tolist() == [0, 0]
    # grouped by the task's name: the label's [context_tokens=4096] belongs to the workload already
    assert one(tf, workload=R4, method="snapkv").task == "ruler_niah_single"


def test_table12_corpus_items_by_hand(tables: dict[str, pd.DataFrame]) -> None:
    c = tables["kvd_corpus"]

    def items(name: str) -> dict[tuple[str, str], int]:
        part = c[c["workload"] == name]
        assert (part["n_cw"] == part["n_cw"].iloc[0]).all()
        return {(i, g): n for i, g, n in part[["item", "group", "rows"]].itertuples(index=False)}

    assert items(R8) == {
        ("tier", "light"): 1,
        ("tier", "intermediate"): 0,
        ("tier", "aggressive"): 4,
        ("tier", "excluded"): 1,
        ("coverage_status", "recorded"): 5,
        ("coverage_status", "measured"): 3,
        ("coverage_status", "not_applicable"): 1,
        ("coverage_status", "structural"): 1,
        ("numeric_err_ecov", ""): 3,
        ("ear", ""): 1,
        ("most_frequent_method", "snapkv"): 5,
        ("least_frequent_method", "hqq"): 1,  # ThinK has no supported record: it does not compete
    }
    qa = items(QA)
    assert qa[("coverage_status", "recorded")] == 1 and qa[("coverage_status", "projected")] == 1
    assert qa[("least_frequent_method", "hqq")] == 0 and qa[("numeric_err_ecov", "")] == 1
    assert one(c, workload=R8, item="numeric_err_ecov").share == pytest.approx(3 / 6)


def test_figure7_category_shares_per_workload(tables: dict[str, pd.DataFrame]) -> None:
    wc = tables["kvd_workload_categories"]
    r8 = wc[wc["workload"] == R8].set_index("category")
    assert (r8["n_cw"] == 6).all()
    assert r8.loc["low_mapped_coverage", "rows"] == 2 and r8.loc["partial_mapped_coverage", "rows"] == 1
    assert r8.loc["structural_position_drift", ["rows", "n_derived"]].tolist() == [1, 1]  # ΔNLL 2 derived
    assert r8.loc["not_categorized", "rows"] == 2 and r8.loc["not_categorized", "share"] == pytest.approx(
        2 / 6
    )
    qa = wc[wc["workload"] == QA].set_index("category")
    assert qa.loc["decoding_scoring_candidate", "share"] == 0.5 and qa.loc["ambiguous", "share"] == 0.5
    assert "not_categorized" not in qa.index
    r4 = one(wc, workload=R4)  # no diagnostics at all: one N/A row, no share
    assert r4.category == "N/A" and r4.rows == 1 and math.isnan(r4.share)


def test_table16_modal_category_per_cell(tables: dict[str, pd.DataFrame]) -> None:
    m = tables["kvd_modal_categories"]
    agg = one(m, workload=R8, compressor="snapkv", setting="0.75")
    assert agg.modal_category == "low_mapped_coverage / partial_mapped_coverage"  # a tie, both named
    assert (agg.n_cw, agg.n_categorized, agg.n_modal) == (3, 2, 1) and agg.modal_share == pytest.approx(1 / 3)
    assert (
        agg.coverage == "measured / not_applicable"
        and agg.ecov_mean == pytest.approx(0.4)
        and agg.ecov_n == 2
    )
    hqq = one(m, workload=R8, compressor="hqq")
    assert hqq.modal_category == "structural_position_drift" and hqq.delta_nll_mean == 2.0 and hqq.ecov_n == 0
    assert one(m, workload=R8, compressor="think").reason == "unsupported"
    none = one(m, workload=R8, setting="0.3")
    # ΔNLL alone, no coverage state: every Table 4 rule needs one, so no category (not "ambiguous")
    assert none.modal_category == "N/A" and none.reason == "no C→W row has a category"
    assert none.delta_nll_mean == 0.05 and none.delta_nll_n == 1
    assert one(m, workload=QA, setting="0.25").reason == "no C→W rows"
    assert one(m, workload=R8, setting="0.25")[["modal_category", "reason"]].tolist() == [
        "low_mapped_coverage",
        "",
    ]


# ---------------------------------------------------------------------------------------- figures


@pytest.mark.slow
def test_every_figure_is_drawn(tables: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    declared = [f for f in load(figures=True).figures if f.draw.__module__ == kvdiagnosis_plots.__name__]
    mine = {f.table: tables[f.table] for f in declared}  # the other tables' figures are tested elsewhere
    figures = plot_all(mine, tmp_path, declared, workers=1)
    names = {f.key: sorted(p.name for p in figures.get(f.key, [])) for f in declared}
    assert names["kvd_tier_heatmap"] == ["kvd-tier-rate_r.png"]
    assert len(names["kvd_tier_bars"]) == 3  # RULER-8K, RULER-4K, Qasper
    # a task-by-method view needs two or more tasks: RULER-8K only
    assert names["kvd_task_heatmap"] == ["kvd-task-method_ruler-8192_r.png"]
    assert len(names["kvd_task_bars"]) == 1 and names["kvd_category_dots"] == ["kvd-category-dots_r.png"]
    assert all(p.stat().st_size > 1000 for paths in figures.values() for p in paths)


def test_report_shows_the_workload_section(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "cells.jsonl").write_text(dumps(records()))
    out = tmp_path / "out"
    assert (
        main(
            [
                "--records",
                str(folder),
                "--out",
                str(out),
                "--no-log",
                "--quiet",
                "--boot",
                "20",
                "--splits",
                "20",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="kvdiagnosis"' in html and "kvd_accounting" in html and "kvd_modal_categories" in html
    assert (out / "kvdiagnosis.md").is_file() and (out / "kvd-tier-rate_r.png").is_file()


RULER_SUBTASKS = (
    *(f"ruler_niah_single_{i}" for i in (1, 2, 3)),
    *(f"ruler_niah_multikey_{i}" for i in (1, 2, 3)),
    "ruler_niah_multivalue",
    "ruler_niah_multiquery",
    "ruler_vt",
    "ruler_cwe",
    "ruler_fwe",
)


def test_a_synthetic_ruler_sweep_categorizes_all_seven_families(tmp_path: Path) -> None:
    """With evidence for every family (CWE and FWE included), a sweep over RULER's 11 subtasks has Table 4
    categories for each of the seven families, not N/A for two of them."""
    from kvx.testing.synthetic import Grid, write_records

    grid = Grid(tasks=RULER_SUBTASKS, compressors=("snapkv",), n_sources=12, intervention=False)
    write_records(tmp_path / "records", grid)
    cats = analyse(DirectorySource([tmp_path / "records"]), FAST).tables["categories"]
    named = cats[~cats["category"].isin(["N/A", "not_categorized"]) & (cats["rows"] > 0)]
    families = {task_group(task) for task in named["task"] if task.startswith("ruler_")}
    assert families == {
        "ruler_niah_single",
        "ruler_niah_multikey",
        "ruler_niah_multivalue",
        "ruler_niah_multiquery",
        "ruler_vt",
        "ruler_cwe",
        "ruler_fwe",
    }
