"""TPBench §6.1.2 crossover, Table 8 gaps to full context and Appendix B token scaling, by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.stats.releases import seed_weighted_interval
from kvx.aggregate.tpbench.budgets import (
    RELEASE_BOOT_SEED,
    RELEASE_N_BOOT,
    crossover_alpha,
    gaps,
)
from kvx.aggregate.tpbench.probes import FULL
from kvx.core.records import ERROR, SUPPORTED, UNSUPPORTED
from kvx.testing.tpbench import record, row, tables, write

TABLES = ("tpbench_crossover", "tpbench_gap", "tpbench_tokens")

# ------------------------------------------------------------------------------------ crossover


def test_crossover_alpha_of_the_paper_instance() -> None:
    # §6.1.2, SGD r=0.30: earliest (P1 0.480, P2 0.156) against embedding MMR (0.178, 0.309):
    # difference 0.302 α − 0.153 (1 − α) = 0 at α = 0.153 / 0.455
    alpha = crossover_alpha(0.480 - 0.178, 0.156 - 0.309)
    assert alpha == pytest.approx(0.153 / 0.455) and round(alpha, 3) == 0.336
    assert crossover_alpha(0.178 - 0.480, 0.309 - 0.156) == pytest.approx(alpha)  # same point from b's side
    assert math.isnan(crossover_alpha(0.1, 0.2))  # ahead on both: no swap
    assert math.isnan(crossover_alpha(0.0, 0.2))  # tied on P1, ahead on P2: equal only at α = 1
    assert math.isnan(crossover_alpha(0.0, 0.0)) and math.isnan(crossover_alpha(math.nan, 0.1))


# Four dialogues, one seed, right answers per method: earliest leads P1, mmr leads P2, recency is
# behind mmr on both and tied with earliest on P1.
P1_RIGHT = {"earliest": 3, "mmr": 1, "recency": 3}
P2_RIGHT = {"earliest": 1, "mmr": 3, "recency": 2}


def crossover_records() -> list[dict]:
    out = []
    for task, right in (("tpbench_p1", P1_RIGHT), ("tpbench_p2", P2_RIGHT)):
        for selector, k in right.items():
            out += [record(task=task, dialogue=f"d{i}", selector=selector, comp=int(i < k)) for i in range(4)]
    return out


def test_crossover_table_by_hand(tmp_path: Path) -> None:
    t = tables(tmp_path, crossover_records())["tpbench_crossover"]
    strict = t[t["score"] == "strict"]
    assert len(strict) == 3 and set(t["score"]) == {"strict", "loose"}  # 3 pairs of 3 methods
    pair = row(strict, method_a="earliest", method_b="mmr")
    # Δ1 = 3/4 − 1/4 = 1/2, Δ2 = 1/4 − 3/4 = −1/2: α/2 − (1 − α)/2 = 0 at α = 1/2
    assert (pair["p1_accuracy_diff"], pair["p2_accuracy_diff"]) == (0.5, -0.5)
    assert pair["crossover_alpha"] == pytest.approx(0.5) and pair["ahead_above"] == "earliest"
    other = row(strict, method_a="mmr", method_b="recency")
    # Δ1 = 1/4 − 3/4 = −1/2, Δ2 = 3/4 − 2/4 = 1/4: −α/2 + (1 − α)/4 = 0 at α = (1/4) / (3/4) = 1/3
    assert other["crossover_alpha"] == pytest.approx(1 / 3) and other["ahead_above"] == "recency"
    tied = row(strict, method_a="earliest", method_b="recency")
    assert math.isnan(tied["crossover_alpha"]) and tied["ahead_above"] == ""
    assert tied["note"] == "none: tied on P1, recency ahead on the other: no swap"
    assert "full context" not in set(t["method_a"]) | set(t["method_b"])


def test_crossover_under_the_papers_rule(tmp_path: Path) -> None:
    records = crossover_records()
    # (P1 then P2, each earliest, mmr, recency on d0-d3) mmr's P2 answer on d2 (right) a reader error,
    # recency's P1 answer on d3 (wrong) unsupported
    records[18] = record(task="tpbench_p2", dialogue="d2", selector="mmr", status="error")
    records[11] = record(task="tpbench_p1", dialogue="d3", selector="recency", status="unsupported")
    strict = tables(tmp_path, records)["tpbench_crossover"].query("score == 'strict'")
    pair = row(strict, method_a="earliest", method_b="mmr")
    # mmr's P2 is 2/4 with the error wrong in n (kvx's rule: 2/3, α = (5/12) / (11/12) = 5/11):
    # Δ1 = 3/4 − 1/4 = 1/2, Δ2 = 1/4 − 2/4 = −1/4, α = (1/4) / (3/4) = 1/3
    assert (pair["p2_accuracy_b"], pair["p2_accuracy_diff"]) == (0.5, -0.25)
    assert pair["crossover_alpha"] == pytest.approx(1 / 3) and pair["ahead_above"] == "earliest"
    assert (pair["n_error"], pair["n_unsupported"]) == (1, 0)
    for other in ("earliest", "mmr"):  # recency was not run on P1's n: no accuracy, no α (never 3/3)
        a, b = sorted((other, "recency"))
        with_recency = row(strict, method_a=a, method_b=b)
        assert math.isnan(with_recency["p1_accuracy_b" if b == "recency" else "p1_accuracy_a"])
        assert math.isnan(with_recency["crossover_alpha"]) and with_recency["ahead_above"] == ""
        assert (
            with_recency["note"]
            == "none: recency not run (an unsupported answer): N/A under the paper's rule"
        )
        assert (with_recency["n_error"], with_recency["n_unsupported"]) == (int(other == "mmr"), 1)


# ------------------------------------------------------------------------------------ the gaps


def test_seed_weighted_interval_enumerated_by_hand() -> None:
    # every dialogue has the same gap: every resample is that gap
    assert seed_weighted_interval([-1.0, -1.0, -1.0], [42] * 3, ["a", "b", "c"]) == (-1.0, -1.0, -1.0)
    # seed 42: d0 −1, d1 0 (mean −1/2); seed 43: d0 −1 (mean −1): estimate (−1/2 − 1) / 2 = −3/4,
    # not the pooled −2/3. d0 carries weight 1/2 + 1 = 3/2 and sum −3/2, d1 weight 1/2 and sum 0:
    # a resample of two clusters gives d0 d0 = −1 (1/4), d0 d1 = −3/4 (1/2), d1 d1 = 0 (1/4),
    # so the 2.5th and 97.5th percentiles of 5,000 draws are −1 and 0
    values, seeds, clusters = [-1.0, 0.0, -1.0], ["42", "42", "43"], ["d0", "d1", "d0"]
    estimate, low, high = seed_weighted_interval(values, seeds, clusters)
    assert estimate == pytest.approx(-0.75) and (low, high) == (-1.0, 0.0)
    # rows in another order: the same clusters, the same draws
    assert seed_weighted_interval(values[::-1], seeds[::-1], clusters[::-1]) == (estimate, low, high)
    # one resample draws clusters integers(K, size=(1, K)) from default_rng(seed): here (d1, d0) ...
    assert np.random.default_rng(3).integers(2, size=(1, 2)).tolist() == [[1, 0]]
    assert seed_weighted_interval(values, seeds, clusters, n_boot=1, seed=3)[1] == pytest.approx(-0.75)
    assert all(math.isnan(v) for v in seed_weighted_interval([math.nan], ["42"], ["a"]))
    assert (RELEASE_N_BOOT, RELEASE_BOOT_SEED) == (5000, 20260928)


def test_seed_weighted_interval_is_the_releases_cluster_interval_to_the_bit() -> None:
    """score_answers.py's ``cluster_interval`` (kentech-sail/TPBench), step by step: weights 1/n_seed,
    per-cluster sums in the order the rows name them (sorted here, as kvx takes them), 5,000 draws of
    ``integers(K, size=(5000, K))`` from ``default_rng(20260928)``, the (K, 2) draws summed over their
    strided axis, and ``np.quantile(boot, [.025, .975])``."""
    rng = np.random.default_rng(7)
    dialogues = [f"d{i:02d}" for i in range(23)]
    rows = [(seed, d, float(rng.normal())) for seed in (42, 43, 44) for d in dialogues if rng.random() < 0.8]
    rows.sort(key=lambda r: r[1])
    n_seed = {s: sum(r[0] == s for r in rows) for s in (42, 43, 44)}
    clusters: dict[str, list[float]] = {}
    for seed, d, v in rows:
        clusters.setdefault(d, [0.0, 0.0])
        weight = 1 / n_seed[seed]
        clusters[d][0] += weight * v
        clusters[d][1] += weight
    arr = np.array(list(clusters.values()))
    idx = np.random.default_rng(20260928).integers(len(arr), size=(5000, len(arr)))
    sample = arr[idx].sum(axis=1)
    boot = sample[:, 0] / sample[:, 1]
    release = (float(arr[:, 0].sum() / arr[:, 1].sum()), *np.quantile(boot, [0.025, 0.975]).tolist())
    mine = seed_weighted_interval([r[2] for r in rows], [r[0] for r in rows], [r[1] for r in rows])
    assert mine[1:] == tuple(release[1:])  # the interval, to the bit
    assert mine[0] == pytest.approx(release[0], rel=1e-15)  # the estimate: pandas sums in another order
    # the last bits are the release's only by its order of additions: the same draws summed along a
    # contiguous axis (pairwise), as kvx did before, give another low end here
    contiguous = np.quantile(arr[idx, 0].sum(axis=1) / arr[idx, 1].sum(axis=1), [0.025, 0.975])
    assert contiguous[0] != release[1]


def gap_records() -> list[dict]:
    """Full context right on d0-d3 in seeds 42 and 43. Recency right on d0, d1 (seed 42) and d0
    (seed 43, d1 unsupported); earliest the same but its seed-43 d1 a reader error; uniform stride
    right everywhere."""
    out = []
    for selector in ("recency", "earliest"):
        for seed in (42, 43):
            for i in range(4):
                out.append(
                    record(dialogue=f"d{i}", seed=seed, selector=selector, comp=int(i < 2 - (seed == 43)))
                )
    out[5] = record(dialogue="d1", seed=43, selector="recency", status="unsupported")
    out[13] = record(dialogue="d1", seed=43, selector="earliest", status="error")
    for seed in (42, 43):
        for i in range(4):
            out.append(record(dialogue=f"d{i}", seed=seed, selector="uniform_stride", comp=1))
    return out


def test_gap_to_full_context_by_hand(tmp_path: Path) -> None:
    gap = tables(tmp_path, gap_records())["tpbench_gap"]
    assert set(gap["method"]) == {"recency", "earliest", "uniform_stride"}
    earliest = row(gap, method="earliest")
    # the paper's rule: the error is a wrong answer in n. Pairs: seed 42 d0-d3 (gaps 0, 0, −1, −1),
    # seed 43 d0-d3 (0, −1, −1, −1): per-seed gaps −1/2 and −3/4, estimate −5/8 (kvx's rule, the
    # error left out: −(1/2 + 2/3)/2)
    counted = ("n_pairs", "n_seeds", "n_dialogues", "n_unpaired", "n_error", "n_unsupported")
    assert tuple(earliest[list(counted)]) == (8, 2, 4, 0, 1, 0)
    assert (earliest["full_n_error"], earliest["full_n_unsupported"]) == (0, 0)
    assert earliest["strict_accuracy"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert earliest["full_strict_accuracy"] == 1.0
    assert earliest["strict_accuracy_gap"] == pytest.approx(-5 / 8)
    # each seed weighs its answers 1/4: the dialogues' mean gaps are d0 0, d1 −1/2, d2 −1, d3 −1 (equal
    # weights), a resample the mean of four of them. P(all −1) = 1/16 > 2.5%: the low end is −1; a mean
    # above −1/4 (d0 four times, or three and d1) has P = 5/256 < 2.5% < P(mean ≥ −1/4) = 19/256: the
    # high end is −1/4
    assert (earliest["strict_accuracy_gap_ci_low"], earliest["strict_accuracy_gap_ci_high"]) == (-1.0, -0.25)
    assert (earliest["n_resamples"], earliest["resample_seed"]) == (5000, 20260928)
    recency = row(gap, method="recency")
    # an unsupported answer: not run on the paper's n, its scores N/A (never the gap over 7 pairs)
    assert tuple(recency[list(counted)]) == (7, 2, 4, 0, 0, 1)
    scores = [c for c in gap.columns if "accuracy" in c]
    assert recency[scores].isna().all()
    stride = row(gap, method="uniform_stride")
    # right wherever full context is: gap 0 in every resample
    assert (stride["n_pairs"], stride["n_unpaired"], stride["n_error"], stride["n_unsupported"]) == (
        8,
        0,
        0,
        0,
    )
    assert (stride["strict_accuracy_gap"], stride["strict_accuracy_gap_ci_low"]) == (0.0, 0.0)
    assert stride["loose_accuracy_gap_ci_high"] == 0.0  # loose = strict in these records
    again = tables(tmp_path / "again", gap_records())["tpbench_gap"]
    pd.testing.assert_frame_equal(gap, again)  # seeded: the same numbers every run


def test_an_answer_whose_control_was_not_scored_pairs_with_a_wrong_full_context(tmp_path: Path) -> None:
    records = [record(dialogue=f"d{i}", comp=0) for i in range(3)]
    no_control = record(dialogue="d3", comp=1)
    del no_control["full"]["metrics"]["strict"]  # a control without the probe's score: a full-context error
    gap = row(tables(tmp_path, [*records, no_control])["tpbench_gap"], method="recency")
    # the paper's rule: full context's error on d3 is wrong and in n, so d3 pairs (1 − 0); kvx's rule
    # left it unpaired (3 pairs, gap −1). Gaps −1, −1, −1, +1: estimate −1/2; a resample of four draws
    # k times d3: P(k = 0) = 81/256 (low end −1), P(k ≥ 3) = 13/256 > 2.5% > P(k = 4) = 1/256 (high 1/2)
    assert (gap["n_pairs"], gap["n_unpaired"], gap["full_n_error"], gap["n_error"]) == (4, 0, 1, 0)
    assert gap["full_strict_accuracy"] == 0.75 and gap["strict_accuracy"] == 0.25
    assert (gap["strict_accuracy_gap"], gap["strict_accuracy_gap_ci_low"]) == (-0.5, -1.0)
    assert gap["strict_accuracy_gap_ci_high"] == 0.5


def analysis_row(method: str, source: str, status: str = SUPPORTED, strict: float = 1.0) -> dict:
    """One answer in ``tpbench_rows``' layout (P3, seed 42), for the cases records cannot make alone."""
    family, budget = ("full", "full") if method == FULL else ("turns", "turns 0.3")
    score = strict if status == SUPPORTED else math.nan
    return {"probe": "P3", "corpus": "sgd", "task": "tpbench_p3", "reader": "r", "seed": "42",
            "source_id": source, "split": "42", "status": status, "method": method, "family": family,
            "budget": budget, "m.strict": score, "m.loose": score, "cluster": source}  # fmt: skip


def test_full_context_unsupported_or_missing_on_a_methods_sources() -> None:
    rows = [analysis_row(FULL, f"s{i}") for i in range(3)] + [analysis_row(FULL, "s3", UNSUPPORTED)]
    rows += [analysis_row("recency", f"s{i}", strict=float(i == 0)) for i in range(3)]
    rows += [analysis_row("earliest", f"s{i}", strict=0.0) for i in (0, 1, 2)]
    rows += [analysis_row("recency", "s3"), analysis_row("earliest", "s4", ERROR)]  # s4: no full context
    gap = gaps(pd.DataFrame(rows)).set_index("method")
    # recency on s3: full context was not run there, so recency's gap is N/A (never over s0-s2 only)
    assert gap.loc["recency", ["n_pairs", "full_n_unsupported", "n_unsupported"]].tolist() == [3, 1, 0]
    assert gap.loc["recency", [c for c in gap.columns if "accuracy" in c]].isna().all()
    # earliest: s0-s2 paired (gaps −1), its error on s4 has no full-context answer at all: unpaired, counted
    earliest = gap.loc["earliest"]
    assert (earliest["n_pairs"], earliest["n_unpaired"], earliest["n_error"]) == (3, 1, 1)
    assert (earliest["strict_accuracy"], earliest["strict_accuracy_gap"]) == (0.0, -1.0)
    assert (earliest["strict_accuracy_gap_ci_low"], earliest["strict_accuracy_gap_ci_high"]) == (-1.0, -1.0)


# ------------------------------------------------------------------------------- token scaling


def with_tokens(r: dict, context: int, question: int, share: float) -> dict:
    """A record whose transform kept ``share`` of ``context`` prompt tokens (``_transform_info``)."""
    name = r["cell"]["fields"]["transform"]
    r["transform"] = {
        "name": name,
        "context_sha256": "0" * 64,
        "kept_segment_ids": [],
        "retained_token_share": share,
    }
    r |= {"n_context_tokens": context, "n_question_tokens": question}
    return r


def test_token_scaling_by_hand(tmp_path: Path) -> None:
    records = [
        with_tokens(record(dialogue="d0"), 90, 10, 0.3),  # L_full 100, L_comp 27 + 10 = 37
        with_tokens(record(dialogue="d1"), 190, 10, 0.5),  # L_full 200, L_comp 95 + 10 = 105
        record(dialogue="d0", selector="uniform_stride"),  # no transform block: no token counts
        record(dialogue="d0", selector=None, press="snapkv", ratio=0.7),
    ]
    t = tables(tmp_path, records)["tpbench_tokens"]
    recency = row(t, method="recency")
    assert recency["n"] == 2 and recency["context_share_mean"] == pytest.approx(0.4)
    assert recency["q_mean"] == pytest.approx((0.37 + 0.525) / 2)
    assert recency["q2_mean"] == pytest.approx((0.37**2 + 0.525**2) / 2)
    assert recency["kv_factor"] == pytest.approx(300 / 142)
    assert recency["attention_factor"] == pytest.approx((100**2 + 200**2) / (37**2 + 105**2))
    stride = row(t, method="uniform_stride")
    assert stride["n"] == 0 and math.isnan(stride["q_mean"]) and "token counts" in stride["note"]
    snapkv = row(t, method="snapkv")
    assert math.isnan(snapkv["kv_factor"]) and snapkv["note"].startswith("a cache method prefills")
    assert "full context" not in set(t["method"])
    assert recency["note"] == ""
    partial = [*records[:2], record(dialogue="d2")]  # a third answer without counts: counted, never dropped
    assert row(tables(tmp_path / "partial", partial)["tpbench_tokens"], method="recency")["note"] == (
        "2 of 3 carry token counts"
    )


def test_appendix_b_factors_at_q_030(tmp_path: Path) -> None:
    # every prompt kept to 30% (no question tokens): 1/q = 3.3 and 1/q² = 11.1 (Appendix B)
    records = [with_tokens(record(dialogue=f"d{i}"), 100 * (i + 1), 0, 0.3) for i in range(3)]
    recency = row(tables(tmp_path, records)["tpbench_tokens"], method="recency")
    assert recency["q_mean"] == pytest.approx(0.3) and recency["q2_mean"] == pytest.approx(0.09)
    assert round(recency["kv_factor"], 1) == 3.3 and round(recency["attention_factor"], 1) == 11.1


# ------------------------------------------------------------------------------- the command


def test_report_of_a_tpbench_sweep_shows_each_table(tmp_path: Path) -> None:
    records = crossover_records()
    with_tokens(records[-1], 50, 5, 0.2)  # recency's P2 answer on d3 kept 10 of 50 context tokens
    folder = write(tmp_path / "records", records)
    out = tmp_path / "out"
    assert main(["--records", str(folder), "--out", str(out), "--no-log", "--quiet", "--boot", "50"]) == 0
    section = (out / "tpbench.md").read_text()
    page = (out / "report.html").read_text()
    for name in TABLES:
        assert (out / f"{name}.csv").exists() and f"## {name}" in section and f"<h3>{name}</h3>" in page
    crossing = pd.read_csv(out / "tpbench_crossover.csv")
    assert row(crossing, score="strict", method_a="earliest", method_b="mmr")["crossover_alpha"] == 0.5
    assert "Crossover (§6.1.2)" in section
    assert set(pd.read_csv(out / "tpbench_gap.csv")["n_resamples"]) == {5000}  # the release's, not --boot
    tokens = pd.read_csv(out / "tpbench_tokens.csv")
    assert row(tokens, probe="P2", method="recency")["q_mean"] == pytest.approx(15 / 55)


def test_no_tpbench_records_no_tables(tmp_path: Path) -> None:
    from kvx.aggregate.tpbench.budgets import tpbench_gap_tables

    assert tpbench_gap_tables(pd.DataFrame(), {}) == {}  # a whole run: test_aggregate_tpbench's
