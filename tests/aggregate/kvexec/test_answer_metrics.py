"""Answer metrics per cell (MLflow, matrix), the press-averaged contrast (kv-exec-bench Figure 1) and the
degradation onset: hand-computed on tiny in-process frames."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.kvexec.answer_metrics import paired_answers
from kvx.aggregate.kvexec.contrast import contrast_by_ratio
from kvx.aggregate.kvexec.onset import NONE, onset
from kvx.aggregate.read.sources import Batch
from kvx.aggregate.read.validation import Validated, _check_counts
from kvx.aggregate.stats.resampling import mean_interval, paired_bootstrap_difference
from kvx.core.records import cell_metrics
from kvx.tasks.code_exec import CodeExec
from kvx.tasks.tool_call import ToolCall

NAN = float("nan")
PRESSES = ("Random", "StreamingLLM", "SnapKV", "Knorm", "ExpectedAttention")


# ------------------------------------------------------------------------------------ cell metrics


def _record(status: str, full: dict | None, comp: dict | None, transition: str | None = "C→C") -> dict:
    def answer(metrics: dict | None) -> dict | None:
        return None if metrics is None else {"score": 1.0, "correct": True, "metrics": metrics}

    return {"status": status, "transition": transition, "full": answer(full), "compressed": answer(comp)}


RECORDS = [
    _record("supported", {"json_valid": 1.0, "schema_valid": 1.0}, {"json_valid": 1.0, "schema_valid": 0.0}),
    _record("supported", {"json_valid": 1.0, "schema_valid": 0.0}, {"json_valid": 1.0}),  # lacks one
    _record("supported", {"json_valid": 0.0, "schema_valid": 1.0}, {"json_valid": 0.0, "schema_valid": 1.0}),
    _record("unsupported", {"json_valid": 1.0, "schema_valid": 1.0}, None, None),  # its control counts
]


def test_cell_metrics_mean_each_answer_metric_over_the_answers_that_carry_it() -> None:
    m = cell_metrics(RECORDS)
    assert m["m.json_valid"] == pytest.approx(2 / 3)  # supported compressed answers only
    assert m["m.schema_valid"] == pytest.approx(1 / 2)  # the record without it is missing, not 0
    assert m["full_m.json_valid"] == pytest.approx(3 / 4)  # every control, as full_mean_score
    assert m["full_m.schema_valid"] == pytest.approx(3 / 4)
    assert not any(k.startswith(("m.", "full_m.")) for k in cell_metrics([_record("supported", {}, {})]))


def _problems(logged: dict[str, float]) -> list[str]:
    out = Validated()
    _check_counts(Batch("run-1", "sweep", "records", logged=logged), RECORDS, out)
    return [p.message for p in out.problems]


def test_logged_metric_means_are_checked_against_the_records_and_older_runs_still_validate() -> None:
    counts = {k: v for k, v in cell_metrics(RECORDS).items() if not k.startswith(("m.", "full_m."))}
    assert _problems(counts) == []  # a run logged before cells had answer metrics
    assert _problems(cell_metrics(RECORDS)) == []
    assert _problems({**counts, "m.json_valid": 0.5}) == [
        "logged m.json_valid=0.5 but the records give 0.666667"
    ]
    assert _problems({**counts, "full_m.args_exact": 1.0}) == [
        "logged full_m.args_exact=1 but no record carries that metric"
    ]


# -------------------------------------------------------------------------------------- matrix


def test_matrix_has_each_metric_mean_and_count_per_cell_and_fullcache(tmp_path: Path) -> None:
    from kvx.testing.crafted import FAST, rec, run, write

    records = []
    for i, (full, comp) in enumerate(
        [((1.0, 1.0), (1.0, 0.0)), ((1.0, 0.0), (0.0, None)), ((0.0, 1.0), (1.0, 1.0))]
    ):
        r = rec(task="tool_call", source=f"s{i}")
        r["full"]["metrics"] = {"json_valid": full[0], "schema_valid": full[1]}
        r["compressed"]["metrics"] = {"json_valid": comp[0]} | (
            {} if comp[1] is None else {"schema_valid": comp[1]}
        )
        records.append(r)
    result = run(write(tmp_path, records), dataclasses.replace(FAST, workers=1))  # no forks: 1 s less
    m = result.tables["matrix"].set_index("compressor")
    assert m.loc["snapkv", "m.json_valid"] == pytest.approx(2 / 3) and m.loc["snapkv", "m.json_valid_n"] == 3
    assert (
        m.loc["snapkv", "m.schema_valid"] == pytest.approx(1 / 2) and m.loc["snapkv", "m.schema_valid_n"] == 2
    )
    assert m.loc["FullCache", "m.json_valid"] == pytest.approx(2 / 3)
    assert m.loc["FullCache", "m.schema_valid"] == pytest.approx(2 / 3)
    by_ratio = result.tables["contrast_by_ratio"].set_index("metric")
    assert by_ratio.loc["json_valid", "kept"] == pytest.approx((2 / 3) / (2 / 3))
    assert by_ratio.loc["schema_valid", "kept"] == pytest.approx(0.5 / 1.0)  # pairs s0, s2 only
    assert set(result.tables["onset"]["metric"]) == {"json_valid", "schema_valid"}


# ------------------------------------------------------------------------- contrast (Figure 1)


def _rows(cells: list[tuple], metrics: tuple[str, ...]) -> pd.DataFrame:
    """Analysis rows: one per (compressor, setting, ratio, retained_share, status, source, full, comp)."""
    out = []
    for compressor, setting, ratio, share, status, source, full, comp in cells:
        row = {"task": "tool_call", "reader": "qwen", "compressor": compressor, "setting": setting}
        row |= {"ratio": ratio, "retained_share": share, "status": status, "unit": source}
        for name, f, c in zip(metrics, full, comp, strict=True):
            row |= {f"full_m.{name}": f, f"comp_m.{name}": c if status == "supported" else NAN}
        out.append(row)
    return pd.DataFrame(out)


PAIRS = {"tool_call": {"json_valid": "schema_valid", "name_substring": "schema_valid"}}


def test_tool_call_and_code_exec_declare_the_papers_contrast() -> None:
    assert ToolCall.contrast == PAIRS["tool_call"]
    assert CodeExec.contrast == {"edit_sim": "pass"}


def test_press_average_reproduces_the_papers_figure_1_numbers() -> None:
    """Paper Table perpress at ratio 0.75: json_valid 0, 0, 0.89, 1.00, 1.00 (base 1.00) retains
    2.89 / 5 = 0.578 (paper: 0.58); schema_valid 0, 0, 0.11, 0.33, 0.33 (base 0.78) retains
    0.77 / 0.78 / 5 = 0.197 (paper: 0.20)."""
    json_valid = (0.0, 0.0, 0.89, 1.0, 1.0)
    schema_valid = (0.0, 0.0, 0.11, 0.33, 0.33)
    cells = [
        (press, "0.75", 0.75, 0.25, "supported", "q0", (1.0, 0.78), (j, s))
        for press, j, s in zip(PRESSES, json_valid, schema_valid, strict=True)
    ]
    rows = _rows(cells, ("json_valid", "schema_valid"))
    table = contrast_by_ratio(rows, paired_answers(rows), PAIRS).set_index("metric")
    assert table.loc["json_valid", "kept"] == pytest.approx(0.578)
    assert (
        table.loc["schema_valid", "kept"] == pytest.approx(0.77 / 0.78 / 5) and round(0.77 / 3.9, 3) == 0.197
    )
    assert table.loc["json_valid", "role"] == "anchor" and table.loc["schema_valid", "role"] == "structural"
    assert (table["n_compressors"] == 5).all() and (table["n_defined"] == 5).all()


def test_press_average_of_the_nine_requests_and_undefined_presses() -> None:
    """The same table as counts of nine requests (8/9, 1/9, 3/9, base 7/9): schema_valid keeps
    (0 + 0 + 1/7 + 3/7 + 3/7) / 5 = 0.2 exactly. A press whose FullCache mean is 0 and one with no
    supported answer are named and counted, never averaged in as 0 or 1."""
    comp_json = {"Random": 0, "StreamingLLM": 0, "SnapKV": 8, "Knorm": 9, "ExpectedAttention": 9}
    comp_schema = {"Random": 0, "StreamingLLM": 0, "SnapKV": 1, "Knorm": 3, "ExpectedAttention": 3}
    cells = []
    for press in PRESSES:
        for i in range(9):
            full = (1.0, float(i < 7))
            comp = (float(i < comp_json[press]), float(i < comp_schema[press]))
            cells.append((press, "0.75", 0.75, 0.25, "supported", f"q{i}", full, comp))
    cells.append(("Zero", "0.75", 0.75, 0.25, "supported", "q0", (0.0, 0.0), (0.0, 0.0)))
    cells.append(("Refused", "0.75", 0.75, 0.25, "unsupported", "q0", (1.0, 1.0), (NAN, NAN)))
    rows = _rows(cells, ("json_valid", "schema_valid"))
    table = contrast_by_ratio(rows, paired_answers(rows), PAIRS).set_index("metric")
    schema = table.loc["schema_valid"]
    assert schema["kept"] == pytest.approx(0.2)
    assert (schema["n_compressors"], schema["n_defined"]) == (7, 5)
    assert schema["undefined"] == "Refused: no supported answer; Zero: FullCache mean 0"
    assert table.loc["json_valid", "kept"] == pytest.approx((8 / 9 + 2) / 5)


def test_contrast_by_ratio_is_empty_without_answer_metrics() -> None:
    rows = _rows([("snapkv", "0.5", 0.5, 0.5, "supported", "q0", (), ())], ())
    assert contrast_by_ratio(rows, paired_answers(rows), {}).empty
    assert onset(rows, paired_answers(rows)).empty


# --------------------------------------------------------------------------------------- onset


def _onset_rows() -> pd.DataFrame:
    """snapkv: schema_valid full (1, 1, 1, 0) over four sources; compressed 0.25: same (drop 0),
    0.5: (1, 1, 0, 0) (drop 0.25), 0.75: (0, 0, 0, 0) (drop 0.75); 0.1 unsupported; a fixed
    setting '-' with neither a ratio nor a retained share. knorm: 0.5 drops 0.05 only."""
    full = [1.0, 1.0, 1.0, 0.0]
    comp = {"0.75": [0, 0, 0, 0], "0.25": [1, 1, 1, 0], "0.5": [1, 1, 0, 0]}  # out of order on purpose
    cells = []
    for setting, values in comp.items():
        for i, (f, c) in enumerate(zip(full, values, strict=True)):
            cells.append(
                ("snapkv", setting, float(setting), 1 - float(setting), "supported", f"q{i}", (f,), (c,))
            )
    cells.append(("snapkv", "0.1", 0.1, 0.9, "unsupported", "q0", (1.0,), (NAN,)))
    cells.append(("snapkv", "-", NAN, NAN, "supported", "q0", (1.0,), (0.0,)))
    for i in range(20):
        cells.append(("knorm", "0.5", 0.5, 0.5, "supported", f"q{i}", (1.0,), (float(i > 0),)))
    return _rows(cells, ("schema_valid",))


def test_onset_is_the_first_setting_in_increasing_compression_that_drops_by_the_threshold() -> None:
    rows = _onset_rows()
    table = onset(rows, paired_answers(rows), 0.10, n_boot=500, seed=3).set_index("compressor")
    snapkv = table.loc["snapkv"]
    assert (snapkv["onset_setting"], snapkv["onset_ratio"], snapkv["n"]) == ("0.5", 0.5, 4)
    assert (snapkv["full_mean"], snapkv["comp_mean"], snapkv["drop"]) == pytest.approx((0.75, 0.5, 0.25))
    # per-source drops 0, 0, 1, 0: a resample's mean is Binomial(4, 1/4) / 4, P(0) = 0.32 and
    # P(>= 3/4) = 0.051, so the 2.5th percentile is 0 and the 97.5th 3/4
    assert (snapkv["drop_low"], snapkv["drop_high"]) == (0.0, 0.75)
    assert snapkv["n_settings"] == 2  # 0.25 then 0.5; 0.1 has no supported answer
    assert snapkv["skipped"] == "0.1 (no supported answer); - (no compression order)"
    knorm = table.loc["knorm"]
    assert knorm["onset_setting"] == NONE and math.isnan(knorm["drop"])
    assert knorm["reason"] == "no setting drops by 0.1 or more (largest drop 0.050, at 0.5)"
    strict = onset(rows, paired_answers(rows), 0.5, n_boot=50).set_index("compressor")
    assert strict.loc["snapkv", "onset_setting"] == "0.75"


def test_onset_threshold_is_reached_despite_float_rounding_and_budgets_order_by_retained_share() -> None:
    cells = [
        ("tova", "64 tok", NAN, 0.2, "supported", "q0", (1.0,), (0.4,)),  # compression 0.8
        ("tova", "256 tok", NAN, 0.8, "supported", "q0", (1.0,), (0.9,)),  # 0.2: drop 1.0 - 0.9
    ]
    rows = _rows(cells, ("edit_sim",))
    [row] = onset(rows, paired_answers(rows), 0.1, n_boot=50).to_dict("records")
    assert (row["onset_setting"], row["drop"]) == ("256 tok", pytest.approx(0.1))
    assert math.isnan(row["onset_ratio"]) and (row["drop_low"], row["drop_high"]) == pytest.approx((0.1, 0.1))
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        onset(rows, paired_answers(rows), 0.0)


def test_mean_interval_resamples_rows_and_matches_the_binary_paired_bootstrap() -> None:
    assert mean_interval(np.array([0.5, 0.5, 0.5]), n_boot=100, seed=1) == (0.5, 0.5, 0.5)
    x = np.array([1, 1, 0, 1, 0, 1, 1, 0])
    y = np.array([0, 1, 1, 1, 0, 0, 0, 0])
    assert mean_interval(x - y, n_boot=300, seed=7) == pytest.approx(
        paired_bootstrap_difference(x, y, 300, 7)
    )
    with pytest.raises(ValueError, match="no rows"):
        mean_interval(np.array([]))


def test_cli_refuses_an_onset_threshold_outside_0_1(capsys: pytest.CaptureFixture[str]) -> None:
    from kvx.aggregate.__main__ import parse_args

    assert parse_args(["--onset-drop", "0.2"]).onset_drop == 0.2
    with pytest.raises(SystemExit):
        parse_args(["--onset-drop", "1.5"])
    assert "--onset-drop=1.5 must be in (0, 1]" in capsys.readouterr().err


def test_a_metric_name_mlflow_refuses_is_logged_under_a_safe_key() -> None:
    from kvx.core.records import answer_metric_means

    means = answer_metric_means([{"metrics": {"pass@1": 1.0}}, {"metrics": {"pass@1": 0.0}}], "m.")
    assert means == {"m.pass_1": 0.5}
