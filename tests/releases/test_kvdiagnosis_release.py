"""KVDiagnosis's published tables, recomputed by kvx from the release's own ledgers.

Runs on a clone of github.com/ChosenQC/KVDiagnosis named by ``KVX_KVDIAGNOSIS_RELEASE`` (skipped
without one): ``python -m kvx.importers kvdiagnosis`` then ``python -m kvx.aggregate --records``, and
every number below is the paper's, copied from its Tables 3, 11 and 12 and from its §5 text (Figures 4A,
7 and 8, RULER-16K's ThinK and QuantizedCache drift), rounded as printed. The release's large RULER
``selected_failures/`` files are not needed.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pandas as pd
import pytest

from kvx.aggregate.__main__ import main as aggregate
from kvx.importers.__main__ import main as import_release
from tests.releases.published import release

pytestmark = pytest.mark.slow

WORKLOADS = ("ruler8k", "ruler16k", "qasper", "hotpotqa")
# Table 3: sources, records, N/A, runs, FC-eligible, C->W, unique affected sources
TABLE3 = {
    "ruler8k": (1100, 26400, 1100, 25300, 22264, 5970, 968),
    "ruler16k": (1100, 26400, 1100, 25300, 21873, 5396, 951),
    "qasper": (200, 4800, 200, 4600, 1357, 327, 49),
    "hotpotqa": (200, 4800, 200, 4600, 3404, 827, 126),
    "Total": (2600, 62400, 2600, 59800, 48898, 12520, 2094),
}
# Table 11: FullCache task / binary score (%) and n_FC per workload, in WORKLOADS order
FULLCACHE = ((97.1, 88.0, 968), (96.8, 86.5, 951), (29.5, 29.5, 59), (74.0, 74.0, 148))
# Table 11: method -> tier -> (task score %, C->W rate %) per workload; tiers 75/50/25% (8b/4b/2b)
TABLE11 = {
    "streaming_llm": (
        (79.7, 29.6, 76.8, 31.8, 25.0, 20.3, 68.0, 10.1),
        (57.2, 56.5, 54.9, 58.4, 21.5, 33.9, 57.5, 24.3),
        (32.9, 81.5, 33.6, 77.6, 17.5, 44.1, 50.0, 33.8),
    ),
    "snapkv": (
        (96.6, 2.5, 96.8, 1.4, 31.5, 1.7, 71.5, 3.4),
        (90.8, 11.5, 95.3, 3.6, 27.5, 8.5, 69.0, 6.8),
        (82.9, 25.4, 86.3, 16.8, 27.5, 11.9, 63.0, 14.9),
    ),
    "tova": (
        (96.9, 1.2, 96.7, 0.9, 30.0, 0.0, 72.5, 2.0),
        (95.2, 5.0, 95.5, 3.5, 29.0, 10.2, 70.0, 5.4),
        (84.6, 22.0, 85.5, 17.5, 27.5, 16.9, 65.5, 11.5),
    ),
    "keydiff": (
        (96.6, 5.4, 96.3, 4.1, 24.5, 18.6, 64.5, 16.2),
        (90.7, 14.5, 90.9, 12.0, 18.0, 40.7, 51.5, 34.5),
        (78.6, 30.3, 78.9, 28.1, 13.5, 57.6, 25.5, 66.2),
    ),
    "think": (
        (97.7, 2.2, 97.2, 1.8, 28.0, 10.2, 68.5, 10.8),
        (0.0, 100.0, 0.0, 100.0, 6.5, 78.0, 12.5, 83.8),
        None,
    ),
    "chunkkv": (
        (89.9, 17.7, 89.4, 17.2, 24.0, 23.7, 60.5, 23.6),
        (76.6, 37.1, 78.3, 32.6, 21.0, 37.3, 45.0, 43.9),
        (58.5, 53.0, 62.4, 47.1, 18.5, 40.7, 28.5, 66.9),
    ),
    "adakv": (
        (96.9, 1.5, 96.8, 0.7, 30.5, 0.0, 71.5, 3.4),
        (93.4, 7.3, 96.3, 2.4, 27.5, 10.2, 70.0, 5.4),
        (84.1, 24.1, 88.3, 13.8, 27.0, 11.9, 65.5, 12.2),
    ),
    "hqq": (
        (97.0, 0.9, 96.9, 0.4, 29.5, 1.7, 72.5, 2.0),
        (97.1, 2.8, 96.0, 2.9, 29.5, 5.1, 70.0, 5.4),
        (20.0, 84.8, 9.2, 92.8, 8.5, 71.2, 21.0, 72.3),
    ),
}
RATIOS = ("0.25", "0.5", "0.75")  # kvpress's share removed: 75/50/25% kept
BITS = ("8", "4", "2")
# Figure 4A (§4): C->W rate (%) of the light and aggressive tiers, rounded to whole percents
FIGURE4A = {"light": (8, 7, 10, 9), "aggressive": (46, 42, 36, 40)}
# Table 12: RULER-8K C->W rows per tier
TABLE12 = {"aggressive": 3108, "intermediate": 2271, "light": 591}


def pct(share: float, places: str = "0.1") -> float:
    """A share as the paper prints it: a percentage rounded half up (54.85 -> 54.9), not to even."""
    exact = Decimal(repr(round(100 * float(share), 9)))
    return float(exact.quantize(Decimal(places), rounding=ROUND_HALF_UP))


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    root = release("kvdiagnosis", "data")
    work = tmp_path_factory.mktemp("kvdiagnosis-release")
    assert import_release(["kvdiagnosis", str(root), "--out", str(work / "imported")]) == 0
    assert aggregate(["--records", str(work / "imported"), "--out", str(work / "agg")]) == 0
    names = ("kvd_accounting", "matrix", "kvd_tiers", "kvd_corpus", "kvd_workload_categories")
    names += ("kvd_modal_categories", "kvd_cases", "kvd_pyramidkv_release")
    names += ("kvd_jaccard", "kvd_qa_tiers", "kvd_delta_nll")
    return {name: pd.read_csv(work / "agg" / f"{name}.csv", dtype={"setting": str}) for name in names}


def test_table3_run_accounting(tables: dict[str, pd.DataFrame]) -> None:
    columns = ["n_sources", "n_records", "n_unsupported", "n_runs", "n_fc", "n_cw", "n_affected_sources"]
    got = tables["kvd_accounting"].set_index("workload")[columns]
    assert {w: tuple(int(v) for v in got.loc[w]) for w in TABLE3} == TABLE3


def _cell(matrix: pd.DataFrame, workload: str, method: str, tier: int) -> pd.Series:
    rows = matrix[(matrix.level == "task") & (matrix.task == workload)]
    if method == "hqq":
        rows = rows[rows.compressor == f"hqq[bits={BITS[tier]}]"]
    else:
        rows = rows[(rows.compressor == method) & (rows.setting == RATIOS[tier])]
    assert len(rows) == 1, (workload, method, tier)
    return rows.iloc[0]


def test_table11_every_cell(tables: dict[str, pd.DataFrame]) -> None:
    matrix = tables["matrix"]
    for workload, (task, binary, n_fc) in zip(WORKLOADS, FULLCACHE, strict=True):
        row = matrix[
            (matrix.level == "task") & (matrix.task == workload) & (matrix.compressor == "FullCache")
        ]
        got = row.iloc[0]
        assert (pct(got.quality), pct(got.accuracy), int(got.n_fc)) == (
            task,
            binary,
            n_fc,
        )
    checked = 0
    for method, tiers in TABLE11.items():
        for tier, printed in enumerate(tiers):
            for w, workload in enumerate(WORKLOADS):
                row = _cell(matrix, workload, method, tier)
                if printed is None:  # ThinK at 25%: N/A, recorded unsupported for every source
                    assert row.n_supported == 0 and row.n_unsupported == row.n_sources
                    continue
                got = (pct(row.quality), pct(row.cw_rate))
                assert got == printed[2 * w : 2 * w + 2], (method, tier, workload)
                checked += 1
    assert checked == 92  # 23 supported method-settings x 4 workloads (+ ThinK/25% N/A and 4 FullCache rows)


def test_figure4a_tier_rates(tables: dict[str, pd.DataFrame]) -> None:
    tiers = tables["kvd_tiers"]
    for tier, printed in FIGURE4A.items():
        got = []
        for workload in WORKLOADS:
            row = tiers[(tiers.level == "workload") & (tiers.workload == workload) & (tiers.tier == tier)]
            got.append(int(pct(row.iloc[0].cw_rate, "1")))
        assert tuple(got) == printed, tier


def test_table12_ruler8k_tiers(tables: dict[str, pd.DataFrame]) -> None:
    corpus = tables["kvd_corpus"]
    rows = corpus[(corpus.workload == "ruler8k") & (corpus.item == "tier")]
    assert dict(zip(rows.group, rows.rows, strict=True)) == TABLE12


def test_figure7_low_or_partial_coverage_on_qa(tables: dict[str, pd.DataFrame]) -> None:
    """§5.3: "212/327 Qasper failures (64.8%) and 535/827 HotpotQA failures (64.7%)"."""
    shares = tables["kvd_workload_categories"].set_index(["workload", "category"])
    for workload, printed in {"qasper": (212, 327, 64.8), "hotpotqa": (535, 827, 64.7)}.items():
        low = shares.loc[(workload, "low_mapped_coverage")]
        partial = shares.loc[(workload, "partial_mapped_coverage")]
        rows = int(low.rows + partial.rows)
        assert (rows, int(low.n_cw), pct(rows / low.n_cw)) == printed


def test_ruler16k_drift_of_structural_methods(tables: dict[str, pd.DataFrame]) -> None:
    """§5.3: ThinK at 50% flips all 951 with mean ΔNLL 7.958 and GPR 0.015; QuantizedCache at 2b flips
    883 of 951 with ΔNLL 2.230 and GPR 0.260."""
    cells = tables["kvd_modal_categories"]
    ruler16k = cells[cells.workload == "ruler16k"].set_index(["compressor", "setting"])
    for key, printed in {
        ("think", "0.5"): (951, 7.958, 0.015),
        ("hqq[bits=2]", "-"): (883, 2.230, 0.260),
    }.items():
        row = ruler16k.loc[key]
        assert (int(row.n_cw), round(row.delta_nll_mean, 3), round(row.gpr_mean, 3)) == printed


def test_figure8_qasper_case(tables: dict[str, pd.DataFrame]) -> None:
    """§5.3 and Figure 8: the Qasper case is ThinK at 50% with ΔNLL 15.435."""
    cases = tables["kvd_cases"]
    case = cases[
        (cases.task == "qasper") & (cases.category == "structural_position_drift") & (cases["rank"] == 1)
    ]
    row = case.iloc[0]
    assert (row.compressor, row.setting, round(row.delta_nll, 3)) == ("think", "0.5", 15.435)


def test_table5_pyramidkv_pair_hashes(tables: dict[str, pd.DataFrame]) -> None:
    """Table 5: each representative pair's index and output hash prefixes, identical across the labels."""
    audit = tables["kvd_pyramidkv_release"]
    pairs = audit[audit.kind == "pair"].set_index(["dataset", "sample", "kv"])
    printed = {
        ("ruler8k", "cwe_000000", "75%"): ("514e8b39ca", "d1626650b9"),
        ("ruler16k", "cwe_000000", "50%"): ("07e043e559", "900b8707ae"),
        ("qasper_hotpotqa", "hotpotqa_000000", "25%"): ("2b930b7d86", "acc60cc7bd"),
    }
    for key, hashes in printed.items():
        row = pairs.loc[key]
        assert (row.index_hash, row.output_hash, bool(row.equal)) == (*hashes, True)


def test_figure4b_snapkv_tova_jaccard(tables: dict[str, pd.DataFrame]) -> None:
    """§5.4: 11 of 12 workload-setting cells at or below 0.385; Qasper 0.70 at 25%; HotpotQA 0.38 -> 0.22."""
    jaccard = tables["kvd_jaccard"]
    pair = jaccard[(jaccard.method_a == "snapkv") & (jaccard.method_b == "tova")].set_index(
        ["workload", "tier"]
    )
    assert len(pair) == 12
    assert int((pair.jaccard.round(3) <= 0.385).sum()) == 11
    assert round(pair.loc[("qasper", "aggressive")].jaccard, 2) == 0.70
    hotpotqa = pair.loc["hotpotqa"].jaccard
    assert (round(hotpotqa["intermediate"], 2), round(hotpotqa["aggressive"], 2)) == (0.38, 0.22)


def test_figure9a_qwen_qa_rate_by_tier(tables: dict[str, pd.DataFrame]) -> None:
    """§5.5: the pooled QA C->W rate (Qasper + HotpotQA, ThinK left out) rises from 8.9% to 38.7% on Qwen."""
    tiers = tables["kvd_qa_tiers"].set_index("tier")
    assert (pct(tiers.loc["light"].cw_rate), pct(tiers.loc["aggressive"].cw_rate)) == (8.9, 38.7)


def test_rq4_ruler16k_failure_delta_nll(tables: dict[str, pd.DataFrame]) -> None:
    """§5.5: Qwen's RULER-16K failure-row ΔNLL pooled over each method's settings: StreamingLLM 2.113,
    ThinK 7.819, QuantizedCache 2.153."""
    pooled = tables["kvd_delta_nll"]
    ruler16k = pooled[pooled.workload == "ruler16k"].set_index("method")["mean"]
    assert {m: round(ruler16k[m], 3) for m in ("streaming_llm", "think", "hqq")} == {
        "streaming_llm": 2.113,
        "think": 7.819,
        "hqq": 2.153,
    }
