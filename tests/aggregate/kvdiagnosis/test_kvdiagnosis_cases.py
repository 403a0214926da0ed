"""KVDiagnosis Figure 8 / Table 15 paired cases and Figure 9B slot-ECov rank correlation, on hand-made
analysis rows: every expected case and ρ is worked out by hand in the comments."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.kvdiagnosis.cases import cases
from kvx.aggregate.kvdiagnosis.slot_ecov import slot_ecov_cells, slot_ecov_rank

NAN = float("nan")


def row(key: str, category: str | None, **values: object) -> dict[str, object]:
    base: dict[str, object] = {
        "key": key,
        "task": "qasper",
        "category": category,
        "transition": "C→W",
        "status": "supported",
        "source_id": f"src_{key}",
        "reader": "qwen",
        "compressor": "snapkv",
        "setting": "0.5",
        "full_output": f"full {key}",
        "comp_output": f"comp {key}",
        "references": "gold",
        "coverage_status": "measured",
        **{m: NAN for m in ("err", "ecov", "delta_nll", "kl", "top50", "ear")},
    }
    base.update(values)
    return base


def test_most_extreme_case_per_category() -> None:
    rows = pd.DataFrame(
        [
            # low coverage: lowest ECov first (b, c tie at 0.1; the larger ΔNLL wins: c); N/A ECov (a) last
            row("a", "low_mapped_coverage", ecov=NAN, delta_nll=9.0),
            row("b", "low_mapped_coverage", ecov=0.1, delta_nll=2.0),
            row("c", "low_mapped_coverage", ecov=0.1, delta_nll=5.0),
            row("d", "low_mapped_coverage", ecov=0.3, delta_nll=1.0),
            # structural drift: the largest ΔNLL (Figure 8's ThinK case)
            row(
                "e",
                "structural_position_drift",
                compressor="think",
                coverage_status="structural",
                delta_nll=15.435,
            ),
            row(
                "f",
                "structural_position_drift",
                compressor="think",
                coverage_status="structural",
                delta_nll=3.0,
            ),
            # low EAR: the lowest EAR
            row("g", "low_ear_candidate", ear=0.2, ecov=0.99),
            row("h", "low_ear_candidate", ear=0.015, ecov=0.958),
            # decoding/scoring: the smallest |ΔNLL| (|0.01| < |-0.05|)
            row("i", "decoding_scoring_candidate", delta_nll=-0.05, top50=1.0),
            row("j", "decoding_scoring_candidate", delta_nll=0.01, top50=0.9),
            # not C→W: never a case, whatever its category
            row("k", "low_mapped_coverage", transition="C→C", ecov=0.0),
            # C→W without a category (no valid diagnostic): not a case
            row("l", None, ecov=0.0),
        ]
    )
    one = cases(rows, 1).set_index("category")
    assert one.loc["low_mapped_coverage", "key"] == "c"
    assert one.loc["low_mapped_coverage", "n_category_rows"] == 4  # a, b, c, d (k is C→C)
    assert one.loc["low_mapped_coverage", "rule"] == "lowest ecov, then highest delta_nll"
    assert one.loc["structural_position_drift", "key"] == "e"
    assert one.loc["structural_position_drift", "delta_nll"] == pytest.approx(15.435)
    assert one.loc["structural_position_drift", "comp_output"] == "comp e"
    assert one.loc["structural_position_drift", "full_output"] == "full e"
    assert one.loc["low_ear_candidate", "key"] == "h"
    assert one.loc["decoding_scoring_candidate", "key"] == "j"
    assert len(one) == 4
    three = cases(rows, 3)
    low = three[three["category"] == "low_mapped_coverage"]
    assert list(low["key"]) == ["c", "b", "d"] and list(low["rank"]) == [1, 2, 3]
    assert list(cases(rows, 9).query("category == 'low_mapped_coverage'")["key"]) == ["c", "b", "d", "a"]


def test_cases_per_task() -> None:
    rows = pd.DataFrame(
        [
            row("a", "ambiguous", task="qasper", delta_nll=1.0),
            row("b", "ambiguous", task="hotpotqa", delta_nll=0.5),
        ]
    )
    out = cases(rows, 1)
    assert list(zip(out["task"], out["key"], strict=True)) == [("hotpotqa", "b"), ("qasper", "a")]


def test_slot_ecov_rank_correlation() -> None:
    # reader a's cell means 0.1 < 0.2 < 0.3 < 0.4 (ranks 1 2 3 4); reader b's 0.15, 0.1, 0.35, 0.5 (2 1 3 4):
    # d = (1, 1, 0, 0), Σd² = 2, ρ = 1 - 6·2 / (4·(16-1)) = 0.8
    cells_a = {
        ("snapkv", "0.25"): [0.1],
        ("snapkv", "0.5"): [0.15, 0.25],
        ("tova", "0.25"): [0.3],
        ("tova", "0.5"): [0.4],
    }
    cells_b = {
        ("snapkv", "0.25"): [0.15],
        ("snapkv", "0.5"): [0.1],
        ("tova", "0.25"): [0.35],
        ("tova", "0.5"): [0.5],
    }
    rows = []
    for reader, cells in (("a", cells_a), ("b", cells_b)):
        for (compressor, setting), values in cells.items():
            for i, v in enumerate(values):
                rows.append(
                    row(
                        f"{reader}{compressor}{setting}{i}",
                        "x",
                        reader=reader,
                        compressor=compressor,
                        setting=setting,
                        ecov=v,
                    )
                )
    # never counted: a structural row (no ECov), a projected row of another transition, a N/A ECov
    rows.append(row("s", "x", reader="a", compressor="think", coverage_status="structural", ecov=1.0))
    rows.append(row("t", "x", reader="a", compressor="snapkv", setting="0.25", transition="C→C", ecov=0.9))
    rows.append(row("u", "x", reader="b", compressor="snapkv", setting="0.25", ecov=NAN))
    # reader c shares only two cells with a and b: N/A
    rows.append(
        row("c1", "x", reader="c", compressor="snapkv", setting="0.25", coverage_status="projected", ecov=0.2)
    )
    rows.append(row("c2", "x", reader="c", compressor="tova", setting="0.5", ecov=0.6))
    cells = slot_ecov_cells(pd.DataFrame(rows))
    mean = cells.set_index(["reader", "compressor", "setting"])
    assert mean.loc[("a", "snapkv", "0.5"), "ecov"] == pytest.approx(0.2)
    assert mean.loc[("a", "snapkv", "0.5"), "rows"] == 2
    assert mean.loc[("a", "snapkv", "0.25"), "rows"] == 1  # the C→C row is not a failure
    assert ("a", "think", "0.5") not in mean.index
    rank = slot_ecov_rank(cells).set_index(["reader_a", "reader_b"])
    assert rank.loc[("a", "b"), "rho"] == pytest.approx(0.8)
    assert rank.loc[("a", "b"), "n_cells"] == 4 and rank.loc[("a", "b"), "status"] == "ok"
    assert 0 < rank.loc[("a", "b"), "p"] <= 1
    assert rank.loc[("a", "c"), "status"] == "not_applicable" and math.isnan(rank.loc[("a", "c"), "rho"])
    assert "2 shared" in rank.loc[("a", "c"), "reason"]


def test_one_reader_is_not_applicable() -> None:
    cells = slot_ecov_cells(pd.DataFrame([row("a", "x", ecov=0.5), row("b", "x", ecov=0.2, setting="0.25")]))
    out = slot_ecov_rank(cells)
    assert list(out["status"]) == ["not_applicable"] and "needs two" in out["reason"].iloc[0]
    assert np.isnan(out["rho"].iloc[0])


def test_chosen_sources_are_added() -> None:
    rows = pd.DataFrame(
        [
            row("a", "partial_mapped_coverage", source_id="hotpotqa_000076", ecov=0.7, delta_nll=0.4),
            row("b", "partial_mapped_coverage", source_id="other", ecov=0.5, delta_nll=1.0),
            row("c", "low_mapped_coverage", source_id="hotpotqa_000076", transition="C→C", ecov=0.0),
        ]
    )
    out = cases(rows, 1, chosen=["hotpotqa_000076"])
    # the most extreme partial-coverage row is b; the chosen source adds its one C→W row (a), not the C→C c
    assert list(zip(out["key"], out["rank"], out["rule"], strict=True)) == [
        ("b", 1, "lowest ecov, then highest delta_nll"),
        ("a", 0, "chosen"),
    ]
    assert list(out["n_category_rows"]) == [2, 2]


def test_output_hash_and_case_text() -> None:
    from kvx.aggregate.read.rows import CASE_CHARS, _text_hash, case_text

    # blake2b-64 of "x", its top 52 bits: exact as a float
    expected = int.from_bytes(hashlib.blake2b(b"x", digest_size=8).digest(), "big") >> 12
    assert _text_hash("x") == float(expected) and int(_text_hash("x")) == expected < 2**52
    assert _text_hash("x") != _text_hash("y") and math.isnan(_text_hash(None))
    assert case_text("short") == "short" and case_text(None) is None
    long = "a" * (CASE_CHARS + 5)
    assert case_text(long) == "a" * CASE_CHARS + " … [+5 chars]"
