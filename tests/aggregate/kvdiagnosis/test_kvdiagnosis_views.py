"""KVDiagnosis's cross-workload views on hand-made workload rows with hand-computed answers: Figures 4B
and 9C (failure-set Jaccard per workload and tier), Figure 9A (Qasper + HotpotQA pooled, ThinK left out)
and RQ4's failure-row ΔNLL pooled over a method's settings."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.kvdiagnosis.fidelity import delta_nll
from kvx.aggregate.kvdiagnosis.jaccard import workload_jaccard
from kvx.aggregate.kvdiagnosis.qa_pool import qa_tiers
from kvx.aggregate.publish.kvdiagnosis_plots import jaccard_tiers, qa_tier_lines
from kvx.aggregate.read.rows import Metric

R8 = "ruler/* @8192"
SETTING = {"light": "0.25", "intermediate": "0.5", "aggressive": "0.75", "": "0.3"}
DNLL = Metric("delta_nll", "likelihood", "delta_nll", "higher")


def row(
    workload: str, method: str, tier: str, unit: str, transition: str | None, status: str = "supported", **kw
) -> dict:
    return {
        "workload": workload,
        "reader": kw.pop("reader", "r"),
        "method": method,
        "compressor": method,
        "tier": tier,
        "setting": SETTING[tier],
        "unit": unit,
        "status": status,
        "transition": transition,
        DNLL.name: kw.pop("dnll", math.nan),
    }


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def one(table: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for column, value in where.items():
        mask &= table[column] == value
    assert mask.sum() == 1, (where, mask.sum())
    return table[mask].iloc[0]


# ------------------------------------------------------------------------- Figures 4B / 9C


def jaccard_rows() -> pd.DataFrame:
    """RULER-8K: the same source id under two subtasks is two sources (units carry the task)."""
    cw, cc = "C→W", "C→C"
    rows = [
        # light: snapkv fails {t1/s0, t1/s1, t2/s1}, tova {t1/s1, t2/s1, t2/s0}: ∩ 2, ∪ 4
        *(row(R8, "snapkv", "light", u, cw) for u in ("t1|s0", "t1|s1", "t2|s1")),
        row(R8, "snapkv", "light", "t2|s0", cc),
        *(row(R8, "tova", "light", u, cw) for u in ("t1|s1", "t2|s1", "t2|s0")),
        row(R8, "tova", "light", "t1|s0", cc),
        # intermediate: no failure on either side: 0/0, undefined
        row(R8, "snapkv", "intermediate", "t1|s0", cc),
        row(R8, "tova", "intermediate", "t1|s0", cc),
        # aggressive: ThinK unsupported (no failure set), snapkv/tova ∩ 1 of ∪ 2
        row(R8, "snapkv", "aggressive", "t1|s0", cw),
        row(R8, "tova", "aggressive", "t1|s0", cw),
        row(R8, "tova", "aggressive", "t1|s1", cw),
        row(R8, "think", "aggressive", "t1|s0", None, status="unsupported"),
        # a cell in no tier is compared nowhere
        row(R8, "snapkv", "", "t1|s1", cw),
        # Qasper is its own workload: its failures never meet RULER-8K's
        row("qasper", "snapkv", "light", "q|s0", cw),
        row("qasper", "tova", "light", "q|s1", cw),
    ]
    return frame(rows)


def test_jaccard_per_workload_and_tier_by_hand() -> None:
    table = workload_jaccard(jaccard_rows())
    light = one(table, workload=R8, tier="light", method_a="snapkv", method_b="tova")
    assert (light.n_a, light.n_b, light.intersection, light.union) == (3, 3, 2, 4)
    assert light.jaccard == pytest.approx(0.5) and light.reason == ""
    mid = one(table, workload=R8, tier="intermediate")
    assert mid.union == 0 and math.isnan(mid.jaccard) and mid.reason == "neither method has a C→W row"
    agg = one(table, workload=R8, tier="aggressive", method_a="snapkv", method_b="tova")
    assert (agg.intersection, agg.union, agg.jaccard) == (1, 2, 0.5)
    think = one(table, workload=R8, tier="aggressive", method_a="snapkv", method_b="think")
    assert math.isnan(think.jaccard) and think.reason == "think: no supported record at this tier"
    qa = one(table, workload="qasper", tier="light")
    assert (qa.intersection, qa.union, qa.jaccard) == (0, 2, 0.0)  # measured 0, not N/A
    # tiers in the paper's column order; the untiered 0.3 cell pairs with nothing
    assert table[table["workload"] == R8]["tier"].tolist() == ["light", "intermediate", *["aggressive"] * 3]


# ------------------------------------------------------------------------- Figure 9A


def tiers_table() -> pd.DataFrame:
    """``kvd_tiers``'s cell level (what ``qa_tiers`` reads) for two readers."""

    def cell(workload: str, method: str, tier: str, n_fc: int, n_cw: int, reader: str = "q", **kw) -> dict:
        counts = {"n_records": 10, "n_unsupported": 0, "n_error": 0, "n_supported": 10} | kw
        return {"level": "cell", "workload": workload, "reader": reader, "method": method, "tier": tier,
                "n_cells": 1, **counts, "n_fc": n_fc, "n_cw": n_cw}  # fmt: skip

    rows = [
        cell("qasper", "snapkv", "light", 4, 1),
        cell("hotpotqa", "snapkv", "light", 6, 2),
        cell("hotpotqa", "hqq", "light", 6, 3),
        cell("hotpotqa", "think", "light", 6, 6),  # ThinK: left out of the pool
        cell(R8, "snapkv", "light", 100, 50),  # RULER: not QA
        cell("qasper[context_tokens=8192]", "tova", "aggressive", 5, 5),  # kvx's label of Qasper
        cell("qasper", "think", "aggressive", 0, 0, n_supported=0, n_unsupported=10),
        cell("qasper", "snapkv", "light", 3, 0, reader="m"),
        {
            "level": "workload",
            "workload": "qasper",
            "reader": "q",
            "method": "all",
            "tier": "light",
            "n_cells": 9,
            "n_records": 90,
            "n_unsupported": 0,
            "n_error": 0,
            "n_supported": 90,
            "n_fc": 99,
            "n_cw": 99,
        },  # fmt: skip
    ]
    return pd.DataFrame(rows)


def test_figure9a_pools_qasper_and_hotpotqa_without_think_by_hand() -> None:
    table = qa_tiers(tiers_table())
    q_light = one(table, reader="q", tier="light")
    # (1 + 2 + 3) / (4 + 6 + 6): ThinK's 6/6 and RULER's 50/100 left out, the workload rows never re-added
    assert (q_light.n_cw, q_light.n_fc, q_light.n_cells) == (6, 16, 3)
    assert q_light.cw_rate == pytest.approx(6 / 16) and q_light.left_out == 1
    assert q_light.workloads == "hotpotqa, qasper" and q_light.methods == "hqq, snapkv"
    q_aggr = one(table, reader="q", tier="aggressive")
    assert (q_aggr.n_cw, q_aggr.n_fc, q_aggr.cw_rate, q_aggr.left_out) == (5, 5, 1.0, 1)
    m_light = one(table, reader="m", tier="light")
    assert m_light.cw_rate == 0.0 and m_light.reason == ""
    assert table["tier"].tolist() == ["light", "light", "aggressive"]  # readers sorted, tiers in order
    assert qa_tiers(tiers_table().query("workload == @R8")) is None  # no QA workload: no table


def test_figure9a_a_tier_of_only_think_says_why() -> None:
    table = qa_tiers(tiers_table().query("method == 'think'"))
    assert set(table["n_fc"]) == {0} and table["cw_rate"].isna().all()
    assert set(table["reason"]) == {"no FullCache-correct supported pair in the pool"}


# ------------------------------------------------------------------------- RQ4 ΔNLL


def dnll_rows() -> pd.DataFrame:
    cw, cc = "C→W", "C→C"
    rows = [
        # streaming_llm: C→W ΔNLL 1, 2 (light) and 6 (aggressive, the same source as 2): pooled over rows
        row(R8, "streaming_llm", "light", "a", cw, dnll=1.0),
        row(R8, "streaming_llm", "light", "b", cw, dnll=2.0),
        row(R8, "streaming_llm", "aggressive", "b", cw, dnll=6.0),
        row(R8, "streaming_llm", "aggressive", "c", cw),  # a C→W row without a ΔNLL: n 3 of n_cw 4
        row(R8, "streaming_llm", "light", "c", cc, dnll=0.5),
        row(R8, "streaming_llm", "aggressive", "a", cc, dnll=3.0),
        row(R8, "streaming_llm", "light", "d", "W→W", dnll=9.0),  # neither side
        # think: light only, its aggressive setting unsupported; no C→C row
        row(R8, "think", "light", "a", cw, dnll=8.0),
        row(R8, "think", "aggressive", "a", None, status="unsupported"),
        # tova: only C→C rows
        row(R8, "tova", "light", "a", cc, dnll=0.1),
    ]
    return frame(rows)


def test_rq4_delta_nll_pooled_over_settings_by_hand() -> None:
    table = delta_nll(dnll_rows(), [DNLL], n_boot=200, seed=1)
    s = one(table, method="streaming_llm")
    assert (s.n_supported, s.n_cw, s.n, s.settings) == (7, 4, 3, "light, aggressive")
    assert s["mean"] == pytest.approx(3.0) and s["median"] == 2.0  # (1 + 2 + 6) / 3, rows weighted
    assert (s.cc_n, s.cc_mean, s.cc_median) == (2, 1.75, 1.75)
    # AUROC of C→W {1, 2, 6} over C→C {0.5, 3}: pairs above 1+1+2 = 4 of 6
    assert s.auroc == pytest.approx(4 / 6) and s.reason == ""
    # sources a, b (b twice): every resample's mean lies within [1, 4] (a alone, b alone)
    assert 1.0 <= s.low <= s["mean"] <= s.high <= 4.0
    t = one(table, method="think")
    assert (t.n_supported, t.n, t["mean"], t.settings) == (1, 1, 8.0, "light")
    assert math.isnan(t.auroc) and t.reason == "no C→C row with a valid ΔNLL: no AUROC"
    v = one(table, method="tova")
    assert v.n_cw == 0 and math.isnan(v["mean"]) and v.reason == "no C→W row"
    assert delta_nll(dnll_rows(), [], n_boot=200, seed=1) is None  # no ΔNLL recorded: no table


# ------------------------------------------------------------------------- figures


@pytest.mark.slow
def test_the_views_are_drawn(tmp_path: Path) -> None:
    jac = jaccard_tiers(workload_jaccard(jaccard_rows()), tmp_path)
    lines = qa_tier_lines(qa_tiers(tiers_table()), tmp_path)
    assert [p.name for p in jac] == ["kvd-jaccard_r.png"] and [p.name for p in lines] == ["kvd-qa-tiers.png"]
    assert all(p.stat().st_size > 1000 for p in [*jac, *lines])
