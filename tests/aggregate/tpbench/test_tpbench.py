"""TPBench analyses of ``python -m kvx.aggregate`` on hand-made records with hand-computed answers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.catalogue import load
from kvx.aggregate.read.rows import project
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import analyse
from kvx.aggregate.stats.resampling import cluster_interval
from kvx.aggregate.tpbench.probes import tpbench_rows
from kvx.testing.cli import SOLO_LEASE, run_kvx
from kvx.testing.tpbench import FAST, record, row, tables, write

#: the per-probe tables, as the catalogue declares them
TABLES = load().producer("tpbench_p1").names

ROOT = Path(__file__).resolve().parents[3]


# Four dialogues, two probe seeds; full context right on d0-d2 in both seeds.
FULL = [1, 1, 1, 0]
RECENCY = {42: ([1, 0, 0, 0], [1, 1, 0, 0]), 43: ([1, 1, 0, 0], [1, 1, 0, 0])}  # (strict, retained)
STRIDE = {42: ([1, 1, 0, 1], [1, 1, 1, 0]), 43: ([1, 1, 0, None], [1, 1, 1, 0])}  # None: unsupported


def p2_records() -> list[dict]:
    out = []
    for selector, design in (("recency", RECENCY), ("uniform_stride", STRIDE)):
        for seed, (strict, retained) in design.items():
            for i, (ok, kept) in enumerate(zip(strict, retained)):
                status = "unsupported" if ok is None else "supported"
                out.append(
                    record(
                        dialogue=f"d{i}",
                        seed=seed,
                        selector=selector,
                        full=FULL[i],
                        comp=ok or 0,
                        retained=bool(kept),
                        status=status,
                        superseded=float(i == 2),
                        abstain=float(i == 3),
                    )
                )
    return out


# ------------------------------------------------------------------------------------------- rows


def test_rows_carry_answer_details_and_transform_fields() -> None:
    declared: dict = {}
    turns = project(record(selector="uniform_stride", comp=0, retained=False), "o", "s", declared, set())
    assert turns["transform"] == "turns:uniform_stride" and turns["turn_fraction"] == 0.3
    assert turns["deletion"] == "" and turns["corpus"] == "sgd"
    assert turns["full_d.dialogue_id"] == "d0" and turns["comp_d.dialogue_id"] == "d0"
    assert turns["full_d.answer_retained"] == 1.0 and turns["comp_d.answer_retained"] == 0.0
    assert turns["comp_d.turns_kept"] == 3.0 and turns["comp_m.strict"] == 0.0
    deleted = project(record(selector=None, which="update_control"), "o", "s", declared, set())
    assert deleted["transform"] == "delete_turns" and deleted["deletion"] == "update_control"
    assert math.isnan(deleted["turn_fraction"])
    kv = project(record(selector=None, press="snapkv", ratio=0.7), "o", "s", declared, set())
    assert kv["transform"] == "none" and kv["deletion"] == "" and math.isnan(kv["turn_fraction"])


def test_methods_budgets_and_one_full_context_per_source() -> None:
    records = [
        record(dialogue="d0", selector="recency"),
        record(dialogue="d0", selector=None, press="snapkv", ratio=0.7),
        record(dialogue="d0", selector=None, which="update"),
        record(dialogue="d0", selector=None),  # press none, no transform: full context only
    ]
    rows = pd.DataFrame([project(r, "o", "s", {}, set()) for r in records])
    tp = tpbench_rows(rows)
    labels = set(zip(tp["method"], tp["budget"]))
    assert labels == {
        ("full context", "full"),
        ("recency", "turns 0.3"),
        ("snapkv", "cache 0.3"),  # kvpress ratio 0.7 removed: 0.3 of the cache kept, never "turns"
        ("delete:update", "deletion"),
    }
    assert (tp["method"] == "full context").sum() == 1  # four records of one source, one control


def test_two_variants_of_one_press_stay_two_methods(tmp_path: Path) -> None:
    records = [
        record(
            dialogue=f"d{i}", selector=None, press="snapkv", ratio=0.5, press_fields={"press.window_size": w}
        )
        for w in (16, 64)
        for i in range(3)
    ]
    p2 = tables(tmp_path, records)["tpbench_p2"]
    kv = p2[p2["family"] == "kv"].set_index("method")
    assert kv["n"].to_dict() == {"snapkv[window_size=16]": 3, "snapkv[window_size=64]": 3}
    assert set(kv["budget"]) == {"cache 0.5"}


# --------------------------------------------------------------------------------------- accuracy


def test_accuracy_seed_spread_counts_and_rates_by_hand(tmp_path: Path) -> None:
    t = tables(tmp_path, p2_records())
    p2 = t["tpbench_p2"]
    assert set(p2["method"]) == {"full context", "recency", "uniform_stride"}
    recency = row(p2, method="recency", budget="turns 0.3")
    # seed 42: 1/4, seed 43: 2/4 -> pooled 3/8, mean 0.375, sd |0.5 - 0.25| / sqrt(2)
    assert (recency["n"], recency["n_seeds"], recency["n_dialogues"]) == (8, 2, 4)
    assert recency["strict_accuracy"] == pytest.approx(3 / 8)
    assert recency["strict_accuracy_seed_mean"] == pytest.approx(0.375)
    assert recency["strict_accuracy_seed_sd"] == pytest.approx(0.25 / math.sqrt(2))
    assert recency["superseded_rate"] == pytest.approx(2 / 8)  # d2 in both seeds
    assert recency["abstain_rate"] == pytest.approx(2 / 8)  # d3 in both seeds
    assert recency["parse_failure_rate"] == pytest.approx(0.0)
    assert recency["update_kept_rate"] == pytest.approx(4 / 8)
    stride = row(p2, method="uniform_stride")
    # the unsupported d3 of seed 43 is counted, never scored: seed 42 3/4, seed 43 2/3
    assert (stride["n"], stride["n_unsupported"], stride["n_error"]) == (7, 1, 0)
    assert stride["strict_accuracy"] == pytest.approx(5 / 7)
    assert stride["strict_accuracy_seed_mean"] == pytest.approx((3 / 4 + 2 / 3) / 2)
    assert stride["strict_accuracy_seed_sd"] == pytest.approx((3 / 4 - 2 / 3) / math.sqrt(2))
    # the paper's rule: the unsupported answer (a method not run, e.g. llmlingua2 offline) leaves the
    # paper's accuracy N/A with the count beside, never 5 of 7; recency has no error: the same as kvx's
    assert (stride["paper_n"], stride["n_unsupported"]) == (7, 1)
    assert math.isnan(stride["paper_strict_accuracy"]) and math.isnan(
        stride["paper_strict_accuracy_seed_mean"]
    )
    assert (recency["paper_n"], recency["paper_strict_accuracy"]) == (8, pytest.approx(3 / 8))
    full = row(p2, method="full context")
    assert (full["budget"], full["n"], full["n_unsupported"]) == ("full", 8, 0)  # one per source and seed
    assert full["strict_accuracy"] == pytest.approx(6 / 8) and full["strict_accuracy_seed_sd"] == 0.0
    for r in (recency, stride, full):
        assert r["strict_accuracy_ci_low"] <= r["strict_accuracy"] <= r["strict_accuracy_ci_high"]
    assert recency["strict_accuracy_ci_low"] < recency["strict_accuracy_ci_high"]
    assert t["tpbench_p1"].empty and t["tpbench_p3"].empty  # written, with their columns, but no rows
    assert "f1_mean" in t["tpbench_p1"] and "parse_rate" in t["tpbench_p3"]


def test_cluster_interval_resamples_dialogues_and_is_seeded() -> None:
    # one dialogue: every resample is the dialogue itself, so the interval collapses to its mean
    assert cluster_interval([1, 0, 1, 0], ["a"] * 4, n_boot=500, seed=3) == (0.5, 0.5)
    # two dialogues (all right, all wrong): resamples give 0, 1/2 or 1
    low, high = cluster_interval([1, 1, 0, 0], ["a", "a", "b", "b"], n_boot=2000, seed=3)
    assert (low, high) == (0.0, 1.0)
    rng = np.random.default_rng(0)
    values, clusters = rng.integers(0, 2, 60), rng.integers(0, 15, 60)  # uneven dialogue sizes
    first = cluster_interval(values, clusters, n_boot=1000, seed=11)
    assert first == cluster_interval(values, clusters, n_boot=1000, seed=11)
    assert first != cluster_interval(values, clusters, n_boot=1000, seed=12)
    assert first[0] <= values.mean() <= first[1]
    assert all(math.isnan(v) for v in cluster_interval([math.nan], ["a"], n_boot=10, seed=0))


# ------------------------------------------------------------------------------------ retention


def test_retention_and_reading_by_hand(tmp_path: Path) -> None:
    retention = tables(tmp_path, p2_records())["tpbench_retention"]
    recency = row(retention, method="recency")
    # retained d0, d1 in both seeds: right 1, 0 (seed 42) and 1, 1 (seed 43); never right otherwise
    assert (recency["n"], recency["n_retained"], recency["n_not_retained"]) == (8, 4, 4)
    assert recency["retention_rate"] == pytest.approx(0.5)
    assert recency["strict_accuracy_retained"] == pytest.approx(3 / 4)
    assert recency["strict_accuracy_not_retained"] == pytest.approx(0.0)
    stride = row(retention, method="uniform_stride")
    # retained d0-d2 in both seeds (right, right, wrong); not retained: d3 of seed 42, right; d3 of seed
    # 43 unsupported: under the paper's rule the method was not run on the paper's n, so no score (N/A)
    assert (stride["n_retained"], stride["n_not_retained"], stride["n_unsupported"]) == (6, 1, 1)
    assert math.isnan(stride["retention_rate"]) and math.isnan(stride["strict_accuracy_retained"])
    assert math.isnan(stride["strict_accuracy_not_retained"])
    full = row(retention, method="full context")
    assert full["retention_rate"] == 1.0 and math.isnan(full["strict_accuracy_not_retained"])


# ----------------------------------------------------------------------------- rankings and rho


# Correct answers of four dialogues per selector, one seed: P1 ranks earliest, stride, mmr,
# recency; P2 ranks mmr, recency, stride, earliest. P1-loose is all right for everyone (a tie).
P1_RIGHT = {"recency": 1, "earliest": 4, "uniform_stride": 3, "mmr": 2}
P2_RIGHT = {"recency": 3, "earliest": 0, "uniform_stride": 2, "mmr": 4}


def ranking_records() -> list[dict]:
    out = []
    for task, right in (("tpbench_p1", P1_RIGHT), ("tpbench_p2", P2_RIGHT)):
        for selector, k in right.items():
            for i in range(4):
                out.append(record(task=task, dialogue=f"d{i}", selector=selector, comp=int(i < k), loose=1.0))
    # a cache method in P2 only: another budget, so it enters neither rho nor the turn ranking
    out += [record(dialogue=f"d{i}", selector=None, press="snapkv", ratio=0.7) for i in range(4)]
    return out


def test_rankings_spearman_and_rank_change_by_hand(tmp_path: Path) -> None:
    t = tables(tmp_path, ranking_records())
    ranks = t["tpbench_rankings"]
    p1 = ranks[(ranks["probe"] == "P1") & (ranks["budget"] == "turns 0.3")].set_index("method")
    assert p1["strict_rank"].to_dict() == {"earliest": 1.0, "uniform_stride": 2.0, "mmr": 3.0, "recency": 4.0}
    assert set(p1["loose_rank"]) == {2.5}  # four-way tie: average rank
    assert "full context" not in set(ranks["method"])
    assert row(ranks, probe="P2", budget="cache 0.3")["strict_rank"] == 1.0  # alone at its budget
    rho = row(t["tpbench_spearman"], budget="turns 0.3")
    # P1 ranks (recency, earliest, stride, mmr) = (4, 1, 2, 3), P2 = (2, 4, 3, 1):
    # d = (2, -3, -1, 2), sum d^2 = 18, rho = 1 - 6 * 18 / (4 * (16 - 1)) = -0.8
    assert rho["n_methods"] == 4 and rho["methods"] == "earliest; mmr; recency; uniform_stride"
    assert rho["rho_p1_strict_p2_strict"] == pytest.approx(-0.8)
    assert math.isnan(rho["rho_p1_loose_p2_strict"])  # P1-loose is constant: rho undefined
    assert len(t["tpbench_spearman"]) == 1  # the cache budget has no P1 partner
    change = t["tpbench_rank_change"].set_index("method")
    assert change.loc["mmr", "kind"] == "content" and change.loc["recency", "kind"] == "position"
    assert change.loc["earliest", ["p1_strict_rank", "p2_strict_rank"]].tolist() == [1.0, 4.0]


def test_rankings_and_rho_under_the_papers_rule(tmp_path: Path) -> None:
    records = ranking_records()
    # (P1 then P2, each recency, earliest, uniform_stride, mmr on d0-d3) stride's P1 answer on d0
    # (right) a reader error; random right everywhere but its P1 answer on d3, unsupported
    records[8] = record(task="tpbench_p1", dialogue="d0", selector="uniform_stride", status="error")
    for task in ("tpbench_p1", "tpbench_p2"):
        for i in range(4):
            status = "unsupported" if (task, i) == ("tpbench_p1", 3) else "supported"
            records.append(record(task=task, dialogue=f"d{i}", selector="random", loose=1.0, status=status))
    t = tables(tmp_path, records)
    ranks = t["tpbench_rankings"]
    p1 = ranks[(ranks["probe"] == "P1") & (ranks["budget"] == "turns 0.3")].set_index("method")
    # stride 2/4 with its error wrong in n (kvx's rule: 2/3, rank 2), tied with mmr's 2/4; random not
    # run on P1's n: no accuracy, no rank (kvx's rule: 3/3, rank 1), counted
    assert p1["strict_accuracy_seed_mean"].to_dict() == pytest.approx(
        {"earliest": 1.0, "uniform_stride": 0.5, "mmr": 0.5, "recency": 0.25, "random": math.nan}, nan_ok=True
    )
    assert p1["strict_rank"].dropna().to_dict() == {
        "earliest": 1.0,
        "uniform_stride": 2.5,
        "mmr": 2.5,
        "recency": 4.0,
    }
    assert math.isnan(p1.loc["random", "strict_rank"]) and math.isnan(p1.loc["random", "loose_rank"])
    # P1-loose: stride's error is wrong there too (3/4), the other three right everywhere
    assert p1["loose_rank"].dropna().to_dict() == {
        "earliest": 2.0,
        "uniform_stride": 4.0,
        "mmr": 2.0,
        "recency": 2.0,
    }
    assert (p1.loc["uniform_stride", "n"], p1.loc["uniform_stride", "n_error"]) == (4, 1)
    assert (p1.loc["random", "n"], p1.loc["random", "n_unsupported"]) == (3, 1)
    assert set(p1["n_methods"]) == {4} and set(p1["n_unranked"]) == {1}
    p2 = ranks[(ranks["probe"] == "P2") & (ranks["budget"] == "turns 0.3")].set_index("method")
    assert p2.loc["random", "strict_rank"] == 1.5  # run on all of P2: ranked there, tied with mmr
    rho = row(t["tpbench_spearman"], budget="turns 0.3")
    # over the four methods with all three accuracies: P1 ranks (recency, earliest, stride, mmr) =
    # (4, 1, 2.5, 2.5), P2 (2, 4, 3, 1): deviations (1.5, −1.5, 0, 0) and (−0.5, 1.5, 0.5, −1.5),
    # rho = −3 / √(4.5 · 5); P1-loose (2, 2, 4, 2): rho = 1 / √(3 · 5)
    assert rho["n_methods"] == 4 and rho["methods"] == "earliest; mmr; recency; uniform_stride"
    assert rho["rho_p1_strict_p2_strict"] == pytest.approx(-3 / math.sqrt(22.5))
    assert rho["rho_p1_loose_p2_strict"] == pytest.approx(1 / math.sqrt(15))
    assert (rho["n_unranked"], rho["unranked"]) == (1, "random")
    change = t["tpbench_rank_change"].set_index("method")
    assert len(change) == 5 and change.loc["random", ["p1_strict_rank", "p2_strict_rank"]].isna().all()
    random, stride = change.loc["random"], change.loc["uniform_stride"]
    assert (random["p1_n_unsupported"], random["p2_n_unsupported"], random["p2_strict_accuracy"]) == (
        1,
        0,
        1.0,
    )
    assert (stride["p1_n_error"], stride["p1_strict_rank"], stride["p2_strict_rank"]) == (1, 2.5, 3.0)


# ----------------------------------------------------------------------------- matched deletions


def deletion_records() -> list[dict]:
    full = [1] * 10 + [0, 0]
    update = [1, 1] + [0] * 9 + [1]
    update_control = [1] * 9 + [0, 1, 0]
    out = []
    for i in range(12):
        out.append(
            record(
                selector=None,
                which="update",
                dialogue=f"d{i}",
                full=full[i],
                comp=update[i],
                superseded=float(2 <= i <= 5),
            )
        )
        out.append(
            record(
                selector=None, which="update_control", dialogue=f"d{i}", full=full[i], comp=update_control[i]
            )
        )
        out.append(record(selector=None, which="answers", dialogue=f"d{i}", full=full[i], comp=0))
        status = "unsupported" if i < 2 else "supported"  # no matched control turn for d0, d1
        out.append(
            record(
                selector=None,
                which="answers_control",
                dialogue=f"d{i}",
                full=full[i],
                comp=full[i],
                status=status,
            )
        )
    return out


def test_matched_deletion_controls_by_hand(tmp_path: Path) -> None:
    deletion = tables(tmp_path, deletion_records())["tpbench_deletion"]
    update = row(deletion, deletion="update", seed="42")
    assert (update["n_sources"], update["n_paired"], update["matched"]) == (12, 12, "12 of 12")
    # control right on d0-d8, d10; deletion right on d0, d1, d11:
    # b = control right, deletion wrong = d2-d8, d10 = 8; c = the reverse = d11 = 1
    # p = 2 P[Bin(9, 1/2) <= 1] = 2 (1 + 9) / 2^9 = 20 / 512
    assert (update["b"], update["c"]) == (8, 1)
    assert update["mcnemar_p"] == pytest.approx(20 / 512)
    assert update["full_strict_accuracy"] == pytest.approx(10 / 12)
    assert update["deleted_strict_accuracy"] == pytest.approx(3 / 12)
    assert update["control_strict_accuracy"] == pytest.approx(10 / 12)
    assert (
        update["deleted_superseded_rate"] == pytest.approx(4 / 12) and update["control_superseded_rate"] == 0
    )
    # among the 10 full-context-correct: deletion C→W d2-d9 = 8, control C→W d9 = 1;
    # b_fc = d2-d8 = 7, c_fc = 0, p = 2 / 2^7
    assert (update["n_full_correct"], update["deleted_cw"], update["control_cw"]) == (10, 8, 1)
    assert (update["b_fc"], update["c_fc"]) == (7, 0)
    assert update["fc_mcnemar_p"] == pytest.approx(2 / 128)
    answers = row(deletion, deletion="answers", seed="42")
    # the two unsupported controls are counted, and their sources left out of the pairs
    assert (answers["n_paired"], answers["matched"], answers["n_control_unmatched"]) == (10, "10 of 12", 2)
    assert (answers["b"], answers["c"]) == (8, 0)  # d2-d9 right under the control, none after deletion
    assert answers["mcnemar_p"] == pytest.approx(2 / 256)
    assert answers["full_strict_accuracy"] == pytest.approx(8 / 10)  # on the same 10 sources
    assert len(deletion) == 2  # one seed: no pooled row
    p2 = tables(tmp_path / "again", deletion_records())["tpbench_p2"]
    assert row(p2, method="delete:answers_control")["n_unsupported"] == 2


# ------------------------------------------------------------------------------- the command


def test_command_writes_tpbench_tables_section_and_figure(tmp_path: Path) -> None:
    folder = write(tmp_path / "records", ranking_records() + deletion_records())
    out = tmp_path / "out"
    assert main(["--records", str(folder), "--out", str(out), "--no-log", "--quiet", "--boot", "50"]) == 0
    for name in TABLES:
        assert (out / f"{name}.csv").exists() and (out / f"{name}.md").exists()
    assert list(out.glob("tpbench_rank_change_*.png"))
    assert [p.name for p in out.glob("tpbench_figure3_*.png")] == ["tpbench_figure3_sgd_tpbench_p2_r_42.png"]
    page = (out / "report.html").read_text()
    assert 'id="tpbench"' in page and "TPBench probes" in page
    section = (out / "tpbench.md").read_text()
    assert section.startswith("# TPBench probes") and "## tpbench_deletion" in section
    assert "](tpbench_rank_change_" in section


def test_command_without_tpbench_records_writes_nothing_of_it(tmp_path: Path) -> None:
    from kvx.testing.synthetic import Grid, cell_records

    grid = Grid(n_sources=4, diagnostics=False, intervention=False)
    folder = write(tmp_path / "records", cell_records(grid, "ruler_niah_single", "smollm2", "snapkv", 0.5))
    out = tmp_path / "out"
    assert main(["--records", str(folder), "--out", str(out), "--no-log", "--quiet", "--boot", "50"]) == 0
    assert not list(out.glob("tpbench*"))
    assert "TPBench" not in (out / "report.html").read_text()


def test_rank_change_figure(tmp_path: Path) -> None:
    from kvx.aggregate.publish.plots import tpbench_rank_change

    assert tpbench_rank_change(pd.DataFrame(), tmp_path) == []
    t = analyse(DirectorySource([write(tmp_path / "records", ranking_records())]), FAST).tables
    paths = tpbench_rank_change(t["tpbench_rank_change"], tmp_path / "figures")
    assert [p.name for p in paths] == ["tpbench_rank_change_r_turns-0.3.png"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_aggregate_of_a_tiny_tpbench_run(tmp_path: Path, blank_store) -> None:
    """Records of a real (tiny, random) reader through the paper's presets (``python -m kvx
    +experiment=tpbench/...``) into ``python -m kvx.aggregate``: every TPBench table is in the report."""
    blank_store(tmp_path)
    common = ["reader=tiny", "n_sources=3", "max_new_tokens=4", "progress=false", "task.corpus=synthetic"]
    common += SOLO_LEASE
    runs = [
        [
            "+experiment=tpbench/main",
            "task=tpbench_p1,tpbench_p2,tpbench_p3",
            "task.synthetic_dialogues=60",  # a field of a swept group
            "turn_selector=recency,uniform_stride",
            "seed=42",
        ],
        ["+experiment=tpbench/deletion", "transform.which=update,update_control", "seed=42"],
        ["+experiment=tpbench/kv", "task=tpbench_p3", "press=snapkv"],  # seed 42, keeping 30% of the cache
    ]
    for args in runs:
        run_kvx(tmp_path, *common, *args)
    out = tmp_path / "agg"
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    args = ["--tracking-uri", uri, "--out", str(out), "--no-log", "--quiet", "--boot", "50", "--splits", "50"]
    assert main(args) == 0
    p2 = pd.read_csv(out / "tpbench_p2.csv")
    assert {"full context", "recency", "uniform_stride", "delete:update", "delete:update_control"} <= set(
        p2["method"]
    )
    assert set(p2.loc[p2["method"] == "recency", "budget"]) == {"turns 0.3"}
    supported = p2["n"] + p2["n_unsupported"] + p2["n_error"]
    assert (supported > 0).all() and (p2["n"] <= 3).all()
    deletion = pd.read_csv(out / "tpbench_deletion.csv", keep_default_na=False)
    assert deletion["deletion"].tolist() == ["update"]
    assert pd.read_csv(out / "tpbench_spearman.csv")["n_methods"].tolist() == [2]
    assert list(out.glob("tpbench_rank_change_*.png")) and (out / "tpbench.md").exists()
    p3 = pd.read_csv(out / "tpbench_p3.csv")
    assert set(p3.loc[p3["method"] == "snapkv", "budget"]) == {"cache 0.3"}
    report = (out / "report.html").read_text(encoding="utf-8")
    paper = [
        "tpbench_p1_seeds", "tpbench_slot_types", "tpbench_p3_alias_excluded", "tpbench_p3_parsed",
        "tpbench_evidence", "tpbench_kv_vs_selectors", "tpbench_crossover", "tpbench_gap", "tpbench_tokens",
    ]  # fmt: skip
    for name in paper:
        assert (out / f"{name}.csv").exists(), name
        assert name in report, name


def test_figure_3_is_drawn_from_the_update_deletion(tmp_path: Path) -> None:
    """TPBench Figure 3 (the paper's three columns: full context, update turn removed, matched control)
    from the miniature's deletion table: one PNG for its one corpus, reader and seed; an empty table
    draws nothing."""
    from kvx.aggregate.publish.tpbench_plots import tpbench_figure3

    deletion = tables(tmp_path, deletion_records())["tpbench_deletion"]
    [path] = tpbench_figure3(deletion, tmp_path / "figures")
    assert path.name == "tpbench_figure3_sgd_tpbench_p2_r_42.png" and path.stat().st_size > 10_000
    assert tpbench_figure3(deletion.iloc[:0], tmp_path / "none") == []
