"""TPBench's paper tables (Tables 7, 9, 10, 15, 23 and §6.3) on hand-made records, by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.tpbench.paper_tables import slot_type
from kvx.tasks.dialogue_corpora import Dialogue, Turn
from kvx.tasks.tpbench.probes import build
from kvx.tasks.tpbench.task import CurrentValue, to_source
from kvx.testing.tpbench import record, row, tables, write

#: the paper's tables (Tables 7, 9, 10, 15, 23 and §6.3)
TABLES = (
    "tpbench_p1_seeds",
    "tpbench_slot_types",
    "tpbench_p3_alias_excluded",
    "tpbench_p3_parsed",
    "tpbench_evidence",
    "tpbench_kv_vs_selectors",
)


def detailed(rec: dict, full: bool = True, **details: object) -> dict:
    """A record whose compressed answer (and, with ``full``, its control) carries these details."""
    for side in ("compressed", *(("full",) if full else ())):
        if rec.get(side) is not None:
            rec[side]["details"] |= details
    return rec


def sd(*values: float) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


# ------------------------------------------------------------------------- what the task records


def test_task_records_slot_values_and_where_the_evidence_lies() -> None:
    # food chinese -> italian at T6 (user); T7 (system) restates it; nothing else names italian
    state = {"food": ("chinese",), "area": ("north",)}
    turns = [
        Turn("user", "I want a chinese restaurant in the north.", state),
        Turn("system", "Golden Wok is a chinese place.", None),
        Turn("user", "What is the phone number?", state),
        Turn("system", "It is 01223 350688.", None),
        Turn("user", "Is there parking?", state),
        Turn("system", "Yes, there is.", None),
        Turn("user", "Actually make it italian instead.", {**state, "food": ("italian",)}),
        Turn("system", "Da Vinci is an italian place in the north.", None),
        Turn("user", "Great, thanks a lot for that.", {**state, "food": ("italian",)}),
        Turn("system", "Goodbye.", None),
    ]
    examples, _ = build("p2", [Dialogue("d", tuple(turns), "hand")], "sgd", 1, 42)
    source = to_source(examples[0], "sgd", "x")
    details = (
        CurrentValue().evaluate('{"value": "italian", "support": "T6", "abstain": false}', source).details
    )
    assert (details["slot"], details["old_value"], details["current_value"]) == ("food", "chinese", "italian")
    assert details["update_states_value"] is True and details["evidence_turns"] == 2  # T6, T7
    assert details["system_states_value"] is True


# ----------------------------------------------------------------------------- Table 7: slot type


def test_slot_type_rule_of_the_release() -> None:
    # release scripts/audit/retention_vs_reading.py slot_group: time, then date/day, then place words
    assert slot_type("Restaurants_1.time") == "time"
    assert slot_type("Events_1.date_time") == "time"  # "time" is tested first
    assert slot_type("Hotels_2.check_in_date") == "date" and slot_type("hotel-book day") == "date"
    assert slot_type("Buses_1.departure_date") == "date"  # date before the place word "departure"
    assert (
        slot_type("Flights_1.origin_city") == "place/name"
        and slot_type("Movies_1.theater_name") == "place/name"
    )
    assert slot_type("restaurant-food") == "place/name"  # the release's MultiWOZ names keep the domain
    assert slot_type("Hotels_2.number_of_adults") == "other"  # SGD's service prefix is no place
    assert slot_type("Banks_1.account_type") == "other" and slot_type("train-leaveat") == "other"
    assert slot_type("") == "unknown" and slot_type(None) == "unknown" and slot_type(math.nan) == "unknown"


# (dialogue, seed, slot, strict, retained); d5 carries no slot detail
SLOTS = [
    ("d0", 42, "Restaurants_1.time", 1, True),
    ("d1", 42, "Restaurants_1.time", 0, False),
    ("d2", 42, "Hotels_2.check_in_date", 1, True),
    ("d3", 42, "Events_1.city", 0, True),
    ("d0", 43, "Restaurants_1.time", 0, True),
    ("d2", 43, "Hotels_2.check_in_date", 0, False),
    ("d4", 43, "Banks_1.account_type", 1, False),
    ("d5", 43, None, 1, True),
]


def test_p2_by_slot_type_by_hand(tmp_path: Path) -> None:
    records = []
    for dialogue, seed, slot, ok, kept in SLOTS:
        rec = record(dialogue=dialogue, seed=seed, comp=ok, retained=kept)
        records.append(detailed(rec, slot=slot) if slot else rec)
    t = tables(tmp_path, records)["tpbench_slot_types"]
    recency = t[t["method"] == "recency"].set_index("slot_type")
    assert list(recency.index) == ["time", "date", "place/name", "other", "unknown"]
    assert recency["n"].tolist() == [3, 2, 1, 1, 1]  # the groups cover every answer
    # time: seed 42 strict (1, 0), retained (1, 0); seed 43 strict 0, retained 1
    time = recency.loc["time"]
    assert time["strict_accuracy_seed_mean"] == pytest.approx((1 / 2 + 0) / 2)
    assert time["retention_rate_seed_mean"] == pytest.approx((1 / 2 + 1) / 2)
    assert time["strict_accuracy_retained_seed_mean"] == pytest.approx((1 + 0) / 2)
    # date: seed 42 right and retained, seed 43 wrong and lost: no retained answer at 43, left out
    date = recency.loc["date"]
    assert (date["strict_accuracy_seed_mean"], date["retention_rate_seed_mean"]) == (0.5, 0.5)
    assert date["strict_accuracy_retained_seed_mean"] == 1.0
    other = recency.loc["other"]
    assert (other["strict_accuracy_seed_mean"], other["retention_rate_seed_mean"], other["n_seeds"]) == (
        1,
        0,
        1,
    )
    assert math.isnan(other["strict_accuracy_retained_seed_mean"])
    assert row(t, method="full context", slot_type="time")["n"] == 3
    assert "tpbench_p3_alias_excluded" not in tables(tmp_path / "again", records)  # no P3: absent


# ------------------------------------------------------------------------------- Table 9: alias


# (dialogue, seed, old, new); "Atlanta, GA"/"Atlanta" (comma) and "12:45 PM"/"afternoon 12:45"
# (containment) are aliases, a first fill ("") is not; d5 carries no values (unknown)
PAIRS = [
    ("d0", 42, "Atlanta, GA", "Atlanta"),
    ("d1", 42, "checking", "savings"),
    ("d2", 42, "", "March 5th"),
    ("d3", 42, "LA", "SD"),
    ("d0", 43, "Atlanta, GA", "Atlanta"),
    ("d1", 43, "checking", "savings"),
    ("d4", 43, "12:45 PM", "afternoon 12:45"),
    ("d5", 43, None, None),
]
STRICT = {"uniform_stride": [1, 1, 0, 1, 1, 0, 1, 1], "recency": [1, 0, 0, 0, 1, 1, 0, 0]}


def alias_records() -> list[dict]:
    out = []
    for selector, strict in STRICT.items():
        for (dialogue, seed, old, new), ok in zip(PAIRS, strict):
            loose = 1.0 if selector == "uniform_stride" else float(ok)
            rec = record(
                task="tpbench_p3", dialogue=dialogue, seed=seed, selector=selector, comp=ok, loose=loose
            )
            out.append(detailed(rec, old_value=old, current_value=new) if new else rec)
    return out


def test_p3_without_alias_pairs_by_hand(tmp_path: Path) -> None:
    t = tables(tmp_path, alias_records())["tpbench_p3_alias_excluded"]
    stride = row(t, method="uniform_stride")
    assert (stride["n"], stride["n_excluded"], stride["n_unknown"], stride["n_kept"]) == (8, 3, 1, 4)
    assert (stride["n_by_seed"], stride["excluded_by_seed"]) == ("42:3 43:1", "42:1 43:2")
    # kept: seed 42 d1-d3 right, right, wrong... (1, 0, 1) = 2/3; seed 43 d1 wrong = 0
    assert stride["strict_accuracy_seed_mean"] == pytest.approx((2 / 3 + 0) / 2)
    assert stride["strict_accuracy_seed_sd"] == pytest.approx(sd(2 / 3, 0))
    assert stride["original_strict_accuracy_seed_mean"] == pytest.approx((3 / 4 + 3 / 4) / 2)
    recency = row(t, method="recency")
    # kept: seed 42 (0, 0, 0) = 0; seed 43 d1 right = 1
    assert recency["strict_accuracy_seed_mean"] == pytest.approx(0.5)
    assert recency["original_strict_accuracy_seed_mean"] == pytest.approx((1 / 4 + 2 / 4) / 2)
    assert bool(recency["best_strict"]) and not bool(stride["best_strict"])  # 1/2 > 1/3
    assert stride["loose_accuracy_seed_mean"] == 1.0 and bool(stride["best_loose"])
    full = row(t, method="full context")
    assert full["strict_accuracy_seed_mean"] == 1.0 and not bool(full["best_strict"])  # no selector


# --------------------------------------------------------------------------- §6.3: evidence


# (dialogue, update turn states the value, evidence turns, a system turn states it, update kept,
# answer-bearing turns kept, strict); d4 carries no evidence details and dropped its update turn
EVIDENCE = [
    ("d0", True, 1, False, True, 1, 1),
    ("d1", False, 3, True, False, 2, 1),
    ("d2", True, 2, True, False, 0, 0),
    ("d3", False, 2, True, False, 1, 0),
]


def test_evidence_location_by_hand(tmp_path: Path) -> None:
    records = []
    for dialogue, states, turns, system, kept, answers, ok in EVIDENCE:
        rec = record(dialogue=dialogue, comp=ok, retained=kept)
        detailed(rec, update_states_value=states, evidence_turns=turns, system_states_value=system)
        records.append(detailed(rec, full=False, answer_turns_kept=answers))
    records.append(record(dialogue="d4", comp=1, retained=False))
    t = tables(tmp_path, records)["tpbench_evidence"]
    recency = row(t, method="recency", seed="42")
    assert (recency["n"], recency["n_evidence_unknown"]) == (5, 1)
    # the update turn lacks the value in d1, d3; several evidence turns in d1-d3; a system turn in d1-d3
    assert (recency["n_update_lacks_value"], recency["n_several_evidence_turns"]) == (2, 3)
    assert recency["n_system_states_value"] == 3
    # kept the update turn: d0; only another answer-bearing turn: d1, d3; neither: d2; d4 unknown
    counts = ["n_update_kept", "n_value_without_update", "n_no_evidence_kept", "n_kept_unknown"]
    assert recency[counts].tolist() == [1, 2, 1, 1]
    assert recency["strict_accuracy_update_kept"] == 1.0
    assert recency["strict_accuracy_value_without_update"] == pytest.approx(1 / 2)
    assert recency["strict_accuracy_no_evidence_kept"] == 0.0
    full = row(t, method="full context", seed="42")
    assert (full["n_update_kept"], full["n_update_lacks_value"]) == (5, 2)  # the control keeps every turn


# ------------------------------------------------------------------------ Table 10: Seg.|parsed


# seed -> (strict, segments parsed, whole strict) per dialogue
PARSED = {42: [(1, 1, 1), (0, 1, 1), (0, 0, 1), (0, 0, 0)], 43: [(1, 1, 1), (1, 1, 1), (0, 0, 0)]}


def test_p3_among_parsed_answers_by_hand(tmp_path: Path) -> None:
    records = [
        record(task="tpbench_p3", dialogue=f"d{i}", seed=seed, comp=ok, segments_parsed=p, whole_strict=w)
        for seed, design in PARSED.items()
        for i, (ok, p, w) in enumerate(design)
    ]
    p3 = row(tables(tmp_path, records)["tpbench_p3_parsed"], method="recency")
    assert (p3["n"], p3["n_seeds"], p3["n_parsed"]) == (7, 2, 4)
    assert p3["strict_accuracy_seed_mean"] == pytest.approx((1 / 4 + 2 / 3) / 2)
    assert p3["whole_strict_accuracy_seed_mean"] == pytest.approx((3 / 4 + 2 / 3) / 2)
    assert p3["parse_rate_seed_mean"] == pytest.approx((2 / 4 + 2 / 3) / 2)
    assert p3["strict_accuracy_parsed_seed_mean"] == pytest.approx((1 / 2 + 2 / 2) / 2)


# ----------------------------------------------------------------- Table 15: the best selector


# seed -> right answers of four dialogues per turn selector at 30% of turns
SELECTORS = {
    42: {"recency": 2, "uniform_stride": 3, "mmr": 3},
    43: {"recency": 4, "uniform_stride": 1, "mmr": 0},
}


def kv_records() -> list[dict]:
    out = []
    for seed, right in SELECTORS.items():
        out += [
            record(dialogue=f"d{i}", seed=seed, selector=s, comp=int(i < k))
            for s, k in right.items()
            for i in range(4)
        ]
        snap = [1, 1, 0, "unsupported"] if seed == 42 else [1, 0, 0, "error"]
        out += [
            record(dialogue=f"d{i}", seed=seed, selector=None, press="snapkv", ratio=0.7,
                   comp=ok if isinstance(ok, int) else 0, status="supported" if isinstance(ok, int) else ok)
            for i, ok in enumerate(snap)
        ]  # fmt: skip
    # half the cache kept: no turn selector kept half the turns
    out += [record(dialogue=f"d{i}", selector=None, press="streaming_llm", ratio=0.5) for i in range(2)]
    return out


def test_kv_beside_the_best_selector_at_the_same_seed_by_hand(tmp_path: Path) -> None:
    t = tables(tmp_path, kv_records())["tpbench_kv_vs_selectors"]
    s42 = row(t, method="snapkv", seed="42")
    assert (s42["budget"], s42["selector_budget"], s42["n"], s42["n_unsupported"]) == (
        "cache 0.3",
        "turns 0.3",
        3,
        1,
    )
    # the paper's rule: an unsupported answer means the method was not run on the paper's n: N/A, counted
    assert math.isnan(s42["strict_accuracy"]) and s42["n_error"] == 0
    assert (s42["n_selectors"], s42["best_selector"]) == (3, "mmr/uniform_stride")  # a tie, 3/4 each
    assert s42["best_selector_strict_accuracy"] == pytest.approx(3 / 4)
    s43 = row(t, method="snapkv", seed="43")
    # a reader error is wrong and in n (paper Table 15): 1 right of 4, not kvx's 1 of 3
    assert (s43["n"], s43["n_error"], s43["n_unsupported"]) == (4, 1, 0)
    assert s43["strict_accuracy"] == pytest.approx(1 / 4)
    assert (s43["best_selector"], s43["best_selector_strict_accuracy"]) == ("recency", 1)
    alone = row(t, method="streaming_llm")
    assert (alone["selector_budget"], alone["n_selectors"], alone["best_selector"]) == ("turns 0.5", 0, "")
    assert math.isnan(alone["best_selector_strict_accuracy"])  # N/A, never 0
    assert len(t) == 3 and "full context" not in set(t["method"])


# ------------------------------------------------------------------------ Table 23: P1 with F1


# seed -> (strict, f1) of two dialogues
P1 = {42: [(1, 0.5), (0, 0.3)], 43: [(0, 0.2), (0, 0.0)], 44: [(1, 0.7), (1, 0.3)]}


def test_p1_f1_as_seed_mean_and_sd_by_hand(tmp_path: Path) -> None:
    records = [
        record(task="tpbench_p1", dialogue=f"d{i}", seed=seed, comp=ok, f1=f1)
        for seed, design in P1.items()
        for i, (ok, f1) in enumerate(design)
    ]
    t = tables(tmp_path, records)["tpbench_p1_seeds"]
    recency = row(t, method="recency")
    assert (recency["n"], recency["n_seeds"]) == (6, 3)
    assert recency["f1_seed_mean"] == pytest.approx((0.4 + 0.1 + 0.5) / 3)  # per-seed means 0.4, 0.1, 0.5
    assert recency["f1_seed_sd"] == pytest.approx(sd(0.4, 0.1, 0.5))
    assert recency["strict_accuracy_seed_mean"] == pytest.approx(0.5)  # 1/2, 0, 1
    assert recency["strict_accuracy_seed_sd"] == pytest.approx(0.5)
    full = row(t, method="full context")
    assert (full["f1_seed_mean"], full["f1_seed_sd"]) == (1.0, 0.0)  # the control right every time


# ------------------------------------------------------------------------------- the command


def test_report_of_a_sweep_shows_every_paper_table(tmp_path: Path) -> None:
    p1 = [record(task="tpbench_p1", dialogue=f"d{i}", seed=seed) for seed in (42, 43) for i in range(2)]
    folder = write(tmp_path / "records", p1 + alias_records() + kv_records())
    out = tmp_path / "out"
    assert main(["--records", str(folder), "--out", str(out), "--no-log", "--quiet", "--boot", "50"]) == 0
    section = (out / "tpbench.md").read_text()
    page = (out / "report.html").read_text()
    for name in TABLES:
        assert (out / f"{name}.csv").exists() and (out / f"{name}.md").exists(), name
        assert f"## {name}\n" in section and f">{name}<" in page, name
    evidence = pd.read_csv(out / "tpbench_evidence.csv")
    assert set(evidence["probe"]) == {"P2", "P3"}
    # answers without the evidence details (these records have none) are counted unknown, never as 0
    assert (evidence["n_evidence_unknown"] == evidence["n"]).all()
    assert (
        evidence[["n_update_lacks_value", "n_several_evidence_turns", "n_system_states_value"]]
        .isna()
        .all(None)
    )


def test_tables_of_probes_that_did_not_run_are_absent(tmp_path: Path) -> None:
    t = tables(tmp_path, [record(dialogue=f"d{i}") for i in range(3)])  # P2, one turn selector
    assert {"tpbench_slot_types", "tpbench_evidence"} <= set(t)
    assert not {
        "tpbench_p1_seeds",
        "tpbench_p3_alias_excluded",
        "tpbench_p3_parsed",
        "tpbench_kv_vs_selectors",
    } & set(t)
