"""ragscale's outcome labels, release gate, slices and changed examples
(kvx.aggregate.ragscale.outcomes), each rule pinned to the release (github.com/aimsresearchlab/ragscale
at 5c65b09, src/ragscale/analysis.py ``analyze_metric``, ``slice_rows``, ``_changed_examples``; cli.py's
gate) and every number hand-computed."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.__main__ import GATE_FAILED, main
from kvx.aggregate.ragscale.outcomes import (
    ATTENUATED,
    NOT_SEPARATED,
    PRESERVED,
    REVERSED,
    check_alert,
    first_changed,
    outcome,
    parse_outcomes,
    slice_column,
)

# Ten rows, two readers (a weak, b strong), one binary metric em and a hint question_type:
#   a raw 1 on rows 0-3 (0.4), b raw 1 on rows 0-7 (0.8): raw upgrade 0.4
#   a comp 1 on rows 0-4 (0.5), b comp 1 on rows 0-6 (0.7): compressed upgrade 0.2, retention 0.5
#   question_type x on rows 0-4, y on rows 5-9
A_RAW, B_RAW = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
A_COMP, B_COMP = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]


def _scores(tmp_path: Path, hint: bool = True) -> Path:
    rows = []
    for reader, raw, comp in (("a", A_RAW, A_COMP), ("b", B_RAW, B_COMP)):
        for i in range(10):
            row = {"row_id": f"r{i}", "reader": reader, "compressor": "summary", "raw_em": raw[i]}
            row |= {
                "comp_em": comp[i],
                "raw_answer": f"{reader} raw {i}",
                "comp_answer": f"{reader} comp {i}",
            }
            if hint:
                row["question_type"] = "x" if i < 5 else "y"
            rows.append(row)
    path = tmp_path / "scores.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _run(tmp_path: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(
        ["--scores", str(_scores(tmp_path)), "--out", str(out), "--no-log", "--quiet", "--no-plots"]
        + ["--boot", "50", "--splits", "20", *extra]
    )
    return code, out


# ----------------------------------------------------------------------------- labels


@pytest.mark.parametrize(
    ("raw", "comp", "alert", "expected"),
    [
        (0.04, -0.2, 0.75, NOT_SEPARATED),  # the gap rule comes first, before the sign rule
        (-0.04, 0.04, 0.75, NOT_SEPARATED),
        (0.5, -0.125, 0.75, REVERSED),  # opposite strict signs
        (-0.5, 0.125, 0.75, REVERSED),
        (0.5, 0.25, 0.75, ATTENUATED),  # retention 0.5 < 0.75
        (-0.5, -0.25, 0.75, ATTENUATED),  # the same sign downwards: retention 0.5
        (0.5, 0.375, 0.75, PRESERVED),  # retention exactly 0.75 is not below the alert
        (0.5, 0.25, 0.5, PRESERVED),  # the alert is the user's
        (0.5, 0.0, 0.75, ATTENUATED),  # no compressed upgrade is no reversal (not strict)
        (0.5, 0.75, 0.75, PRESERVED),  # retention above 1
    ],
)
def test_outcome_rules_in_the_release_order(raw: float, comp: float, alert: float, expected: str) -> None:
    assert outcome(raw, comp, alert) == expected


def test_the_gap_is_inclusive_at_five_points() -> None:
    # release: abs(raw_upgrade) < minimum_gap is insufficient separation, so exactly 0.05 is separated
    assert outcome(0.05, 0.05) == PRESERVED and outcome(0.0499, 0.05) == NOT_SEPARATED


def test_fail_on_values_take_kvx_and_release_labels() -> None:
    assert parse_outcomes("attenuated,reversed") == [ATTENUATED, REVERSED]
    assert parse_outcomes("not-separated, not_separated") == [NOT_SEPARATED, NOT_SEPARATED]
    assert parse_outcomes("observed-upgrade-attenuated,insufficient-raw-separation") == [
        ATTENUATED,
        NOT_SEPARATED,
    ]
    with pytest.raises(ValueError, match="'attenuatd' is not an outcome.*did you mean 'attenuated'"):
        parse_outcomes("attenuatd")


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan])
def test_retention_alert_outside_the_unit_interval_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="must lie in \\[0, 1\\]"):
        check_alert(bad)


# ----------------------------------------------------------------------------- gate


def test_audit_pairs_carry_the_outcome(tmp_path: Path) -> None:
    code, out = _run(tmp_path)
    assert code == 0  # no gate asked for
    pairs = pd.read_csv(out / "audit_pairs.csv")
    assert list(pairs["kind"]) == ["endpoints"]
    row = pairs.iloc[0]
    assert (row["reader_a"], row["reader_b"]) == ("a", "b")
    assert row["raw_upgrade"] == pytest.approx(0.4) and row["comp_upgrade"] == pytest.approx(0.2)
    assert row["outcome"] == ATTENUATED and not row["order_reversed"]


def test_fail_on_exits_with_the_gate_code_naming_the_comparison(tmp_path: Path, capsys) -> None:
    code, _ = _run(tmp_path, "--fail-on", "attenuated,reversed")
    assert code == GATE_FAILED == 3
    err = capsys.readouterr().err
    assert "release gate failed (attenuated, reversed)" in err
    assert "em (endpoints): a -> b attenuated (raw +40.0 pp, compressed +20.0 pp)" in err


def test_fail_on_an_outcome_not_seen_passes(tmp_path: Path) -> None:
    assert _run(tmp_path, "--fail-on", "reversed")[0] == 0


def test_retention_alert_alone_gates_attenuated_and_reversed(tmp_path: Path) -> None:
    assert _run(tmp_path, "--retention-alert", "0.4")[0] == 0  # retention 0.5 >= 0.4: preserved
    (tmp_path / "2").mkdir()
    assert _run(tmp_path / "2", "--retention-alert", "0.9")[0] == GATE_FAILED


def test_declared_pair_is_gated_too(tmp_path: Path, capsys) -> None:
    assert _run(tmp_path, "--pair", "a:b", "--fail-on", "attenuated")[0] == GATE_FAILED
    assert "em (declared): a -> b attenuated" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-on", "bogus"], "not an outcome"),
        (["--retention-alert", "2"], "must lie in [0, 1]"),
        (["--min-slice-rows", "0"], "--min-slice-rows=0 must be a positive integer"),
        (["--manifest", "m.jsonl"], "--manifest checks a ragscale --scores file"),
    ],
)
def test_bad_gate_options_are_one_line_errors(args: list[str], message: str, capsys) -> None:
    assert main(args) == 2 and message in capsys.readouterr().err


# ----------------------------------------------------------------------------- slices


def test_slices_by_hint_with_the_minimum_rows_rule(tmp_path: Path) -> None:
    _, out = _run(tmp_path, "--min-slice-rows", "5")
    slices = pd.read_csv(out / "audit_slices.csv")
    assert list(zip(slices["field"], slices["value"], slices["n_rows"], strict=True)) == [
        ("question_type", "x", 5),
        ("question_type", "y", 5),
    ]
    x, y = slices.iloc[0], slices.iloc[1]
    # x: raw b - a = [0, 0, 0, 0, 1] -> 0.2; compressed [0] * 5 -> 0; retention 0 / 0.2
    assert (x["raw_upgrade"], x["comp_upgrade"], x["retention"]) == pytest.approx((0.2, 0.0, 0.0))
    # y: raw [1, 1, 1, 0, 0] -> 0.6; compressed [1, 1, 0, 0, 0] -> 0.4; retention 2 / 3
    assert (y["raw_upgrade"], y["comp_upgrade"], y["retention"]) == pytest.approx((0.6, 0.4, 2 / 3))


def test_a_slice_below_the_minimum_rows_is_left_out(tmp_path: Path) -> None:
    _, out = _run(tmp_path, "--min-slice-rows", "6")
    assert pd.read_csv(out / "audit_slices.csv").empty


def test_slice_retention_is_nan_below_the_gap(tmp_path: Path) -> None:
    # band "edge" = rows 0-3 and 8-9, "mid" = rows 4-7
    path = _scores(tmp_path, hint=False)
    frame = pd.read_csv(path)
    frame["band"] = frame["row_id"].str[1:].astype(int).map(lambda i: "mid" if 4 <= i <= 7 else "edge")
    frame.to_csv(path, index=False)
    out = tmp_path / "out"
    args = ["--scores", str(path), "--out", str(out), "--no-log", "--quiet", "--no-plots", "--boot", "20"]
    assert main([*args, "--min-slice-rows", "4"]) == 0
    slices = pd.read_csv(out / "audit_slices.csv").set_index("value")
    # edge: raw b - a = [0] * 6 -> 0 < 5 pp: retention undefined (NaN), never 0 or inf
    assert slices.at["edge", "n_rows"] == 6 and slices.at["edge", "raw_upgrade"] == 0.0
    assert math.isnan(slices.at["edge", "retention"])
    # mid: raw b - a = [1, 1, 1, 1] -> 1.0; compressed [0, 1, 1, 0] -> 0.5
    assert slices.at["mid", "n_rows"] == 4
    assert (slices.at["mid", "raw_upgrade"], slices.at["mid", "retention"]) == pytest.approx((1.0, 0.5))


def test_slice_by_a_field_no_row_has_is_a_problem(tmp_path: Path) -> None:
    _, out = _run(tmp_path, "--slice-by", "difficulty")
    problems = pd.read_csv(out / "problems.csv")
    assert "no row carries 'difficulty'" in " ".join(problems["message"])
    assert pd.read_csv(out / "audit_slices.csv").empty


def test_record_rows_carry_hints_in_answer_details() -> None:
    rows = pd.DataFrame({"full_d.level": ["hard", None], "other": [1, 2]})
    assert slice_column(rows, "level") == "full_d.level"
    assert slice_column(rows, "other") == "other" and slice_column(rows, "type") is None


# ----------------------------------------------------------------------------- changed examples


def test_changed_examples_with_both_answers(tmp_path: Path) -> None:
    _, out = _run(tmp_path)
    changed = pd.read_csv(out / "audit_changed.csv")
    # row 4: a 0 -> 1 (rescued), b 1 -> 1; row 7: a 0 -> 0, b 1 -> 0 (damaged); every other row unchanged
    assert list(changed["row_id"]) == ["r4", "r7"]
    assert list(changed["transition_a"]) == ["rescued", "unchanged"]
    assert list(changed["transition_b"]) == ["unchanged", "damaged"]
    first = changed.iloc[0]
    assert (first["raw_answer_a"], first["comp_answer_a"]) == ("a raw 4", "a comp 4")
    assert (first["raw_answer_b"], first["comp_answer_b"]) == ("b raw 4", "b comp 4")
    assert first["question_type"] == "x"


def test_the_report_shows_the_first_ten_of_each_comparison() -> None:
    keys = {"task": "t", "evidence": "e", "compressor": "c", "setting": "-", "metric": "em"}
    rows = [
        keys | {"kind": kind, "reader_a": "a", "reader_b": "b", "row_id": f"r{i}"}
        for kind in ("x", "y")
        for i in range(12)
    ]
    shown = first_changed(pd.DataFrame(rows))
    assert len(shown) == 20 and list(shown["row_id"][:10]) == [f"r{i}" for i in range(10)]


def test_hotpotqa_answers_carry_the_rows_type_and_level(tmp_path: Path) -> None:
    """Source metadata stays out of records; the task's score details reach the aggregate (full_d.*)."""
    import json

    from kvx.tasks.hotpotqa import HotpotQA

    rows = [
        {
            "_id": f"h{i}",
            "question": "q",
            "answer": "a",
            "type": "bridge" if i else "comparison",
            "level": "hard",
            "context": [[f"T{j}", [f"S{j}."]] for j in range(10)],
            "supporting_facts": [["T0", 0]],
        }
        for i in range(2)
    ]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(rows))
    sources = HotpotQA(path=str(path)).sources(2, 0, 0, len)
    details = sorted(tuple(HotpotQA(path=str(path)).evaluate("a", s).details.items()) for s in sources)
    assert details == [(("type", "bridge"), ("level", "hard")), (("type", "comparison"), ("level", "hard"))]


def test_a_hint_column_never_overwrites_an_audit_column(tmp_path: Path) -> None:
    path = _scores(tmp_path)
    frame = pd.read_csv(path)
    frame["status"] = "bogus"  # would hide every row from the audit if it were read as the row's status
    frame.to_csv(path, index=False)
    out = tmp_path / "out"
    assert (
        main(["--scores", str(path), "--out", str(out), "--no-log", "--quiet", "--no-plots", "--boot", "20"])
        == 0
    )
    assert len(pd.read_csv(out / "audit_pairs.csv")) == 1
    assert "'status' is a name the audit uses" in " ".join(pd.read_csv(out / "problems.csv")["message"])
