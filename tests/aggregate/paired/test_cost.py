"""The cost table and the accuracy–cost frontier of ``python -m kvx.aggregate``, computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from kvx.aggregate.__main__ import main
from kvx.aggregate.paired.costs import NO_BYTES, NO_RATE, NO_SUPPORTED, frontier, pareto
from kvx.aggregate.publish.plots import frontier_plot
from kvx.aggregate.read.rows import project
from kvx.core.records import ANSWER_COSTS, COMPRESSION_COSTS
from kvx.testing.crafted import problems, rec, run, write
from kvx.testing.synthetic import controls

MIB = 2**20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cost(kv_bytes: int, question_ms: float = 10.0, decode: float | None = 5.0, **extra) -> dict:
    """An answer's ``cost`` with the fields the schema requires (``extra``: the optional ones)."""
    return {
        "kv_bytes": kv_bytes,
        "question_ms": question_ms,
        "decode_ms_per_token": decode,
        "new_tokens": 4,
        "decode_rows": 1,
        **extra,
    }


def costed(record: dict, comp: dict | None, full: dict | None) -> dict:
    if comp is not None:
        record["compressed"]["cost"] = comp
    if full is not None:
        record["full"]["cost"] = full
    return record


def compressed_cost(kv_bytes: int, **fields) -> dict:
    return cost(kv_bytes, **({"compress_s": 0.5, "prefill_s": 1.0, "masked_share": 0.0} | fields))


def cost_row(costs: pd.DataFrame, compressor: str, setting: str = "0.5", task: str = "t") -> pd.Series:
    return costs.set_index(["level", "task", "compressor", "setting"]).loc[
        ("task", task, compressor, setting)
    ]


# ------------------------------------------------------------------------------------- the rows


def test_rows_flatten_both_sides_and_leave_absent_costs_nan() -> None:
    record = costed(
        rec(),
        compressed_cost(300, question_ms=7.5, decode=None, masked_share=0.25, prefill_s=None),
        cost(400, question_ms=9.0, masked_share=0.0),
    )
    row = project(record, "o", "s", {}, set())
    assert (row["comp_kv_bytes"], row["full_kv_bytes"]) == (300.0, 400.0)
    assert (row["comp_question_ms"], row["full_question_ms"]) == (7.5, 9.0)
    assert (row["comp_masked_share"], row["comp_compress_s"]) == (0.25, 0.5)
    assert math.isnan(row["comp_decode_ms_per_token"]) and math.isnan(row["comp_prefill_s"])  # null
    assert (row["full_new_tokens"], row["full_decode_rows"], row["retained_share"]) == (4.0, 1.0, 0.5)
    bare = project(rec(), "o", "s", {}, set())  # an older record: no cost on either side
    columns = [f"full_{n}" for n in ANSWER_COSTS] + [f"comp_{n}" for n in ANSWER_COSTS + COMPRESSION_COSTS]
    # 6 answer costs on each side, 6 compression costs (3 of them a decoding press's cache bytes)
    assert len(columns) == 18 and all(math.isnan(bare[c]) for c in columns)
    unsupported = project(rec(status="unsupported"), "o", "s", {}, set())
    assert math.isnan(unsupported["comp_kv_bytes"]) and math.isnan(unsupported["full_kv_bytes"])


# -------------------------------------------------------------------------------- the cost table


def test_cost_table_by_hand(tmp_path: Path) -> None:
    records = [
        costed(rec(source="s0", ok=True), compressed_cost(1 * MIB, question_ms=10.0), cost(4 * MIB)),
        costed(
            rec(source="s1", ok=False), compressed_cost(3 * MIB, question_ms=40.0, decode=None), cost(4 * MIB)
        ),
        # no compressed cost: out of the bytes sums and the compressed medians, never counted as 0
        costed(rec(source="s2", ok=True), None, cost(8 * MIB, question_ms=30.0)),
        # tova: Σ/Σ = (1 + 6) / (4 + 8) MiB, not the mean of the record ratios (0.25 + 0.75) / 2
        *(
            costed(rec(source=s, comp="tova", ok=True), compressed_cost(c * MIB), cost(f * MIB))
            for s, c, f in (("s0", 1, 4), ("s2", 6, 8))
        ),
        costed(rec(source="s1", comp="tova", ok=True), compressed_cost(2 * MIB), None),
    ]
    t = run(write(tmp_path, records)).tables
    costs, matrix = t["costs"], t["matrix"]
    assert list(costs[["level", "task", "reader", "compressor", "setting"]].itertuples(index=False)) == list(
        matrix[["level", "task", "reader", "compressor", "setting"]].itertuples(index=False)
    )  # one row per matrix row, same order: the table sits beside the matrix
    snap = cost_row(costs, "snapkv")
    assert (snap.n_supported, snap.n_bytes, snap.retained_share) == (3, 2, 0.5)
    assert snap.bytes_ratio == 0.5  # (1 + 3) / (4 + 4) MiB
    assert (snap.kv_mib_median, snap.full_kv_mib_median) == (2.0, 4.0)  # s2's full 8 MiB: median of 4, 4, 8
    assert snap.question_ms_median == 25.0 and snap.decode_ms_per_token_median == 5.0  # null left out
    assert (snap.compress_s_median, snap.prefill_s_median, snap.masked_share_median) == (0.5, 1.0, 0.0)
    assert (snap.new_tokens_median, snap.decode_rows_median) == (4.0, 1.0)
    m = matrix.set_index("compressor").loc["snapkv"]
    assert (snap.accuracy, snap.cw_rate) == (m.accuracy, m.cw_rate) == (2 / 3, 1 / 3)  # s1 C→W of 3 C
    tova = cost_row(costs, "tova")
    assert tova.n_bytes == 2 and tova.bytes_ratio == 7 / 12
    full = cost_row(costs, "FullCache", "")
    assert (full.n_supported, full.n_bytes, full.bytes_ratio, full.retained_share) == (3, 3, 1.0, 1.0)
    assert (full.kv_mib_median, full.full_kv_mib_median, full.question_ms_median) == (4.0, 4.0, 10.0)
    assert math.isnan(full.compress_s_median) and math.isnan(full.prefill_s_median)
    assert full.accuracy == 1.0 and math.isnan(full.cw_rate)  # the matrix's own values
    points = t["frontier"].set_index(["metric", "compressor"])
    assert points.loc[("accuracy", "FullCache"), ["bytes_ratio", "rate"]].tolist() == [1.0, 1.0]
    assert points.loc[("cw_rate", "FullCache"), ["bytes_ratio", "rate"]].tolist() == [1.0, 0.0]
    assert points.loc[("accuracy", "tova"), ["bytes_ratio", "on_front"]].tolist() == [7 / 12, True]


def test_records_without_cost_are_nan_and_left_out_of_the_frontier(tmp_path: Path) -> None:
    records = [rec(source=f"s{i}", ok=i > 0) for i in range(3)]  # older records: no cost at all
    records += [rec(source=f"s{i}", comp="think", status="unsupported") for i in range(3)]
    t = run(write(tmp_path, records)).tables
    snap = cost_row(t["costs"], "snapkv")
    assert snap.n_bytes == 0 and math.isnan(snap.bytes_ratio) and math.isnan(snap.kv_mib_median)
    assert math.isnan(snap.question_ms_median) and snap.accuracy == 2 / 3  # never imputed as 0
    assert math.isnan(cost_row(t["costs"], "FullCache", "").bytes_ratio)
    f = t["frontier"].set_index(["metric", "compressor"])
    assert len(f) == 2 * 3  # every row listed in both panels, none dropped
    assert f.loc[("accuracy", "snapkv"), "left_out"] == NO_BYTES
    assert f.loc[("cw_rate", "FullCache"), "left_out"] == NO_BYTES
    assert f.loc[("accuracy", "think"), "left_out"] == NO_SUPPORTED
    assert t["frontier"]["on_front"].isna().all()
    assert frontier_plot(t["frontier"], tmp_path / "figures") == []  # nothing placed: no figure


def test_fullcache_bytes_come_from_any_cell_whose_control_has_them(tmp_path: Path) -> None:
    """One control per source, the same answer in every cell: a cell run before costs were recorded
    (listed first) must not hide the bytes a later cell's copy of it carries."""
    records = [rec(source=f"s{i}") for i in range(2)]  # older cell: no cost anywhere
    records += [
        costed(rec(source=f"s{i}", comp="tova"), compressed_cost(MIB), cost(4 * MIB)) for i in range(2)
    ]
    full = cost_row(run(write(tmp_path, records)).tables["costs"], "FullCache", "")
    assert (full.n_bytes, full.bytes_ratio, full.full_kv_mib_median) == (2, 1.0, 4.0)


def test_served_answers_cost_tokens_and_money_summed_beside_the_bytes(tmp_path: Path) -> None:
    """Two served sources: prompt tokens 100 + 300, completion 10 + 20, money 0.5 + 1.5; a third reports
    no usage (null tokens, no price): left out of the sums, never counted as 0. FullCache sums its
    controls: 200 + 400 + 0 prompt tokens."""

    def served(prompt: int | None, completion: int | None, price: float | None) -> dict:
        return {"endpoint": "http://127.0.0.1:8000/v1", "model": "m", "prompt_tokens": prompt,
                "completion_tokens": completion, "price": price, "cached": False}  # fmt: skip

    records = []
    for source, comp, full in (
        ("s0", served(100, 10, 0.5), served(200, 12, 1.0)),
        ("s1", served(300, 20, 1.5), served(400, 14, 2.0)),
        ("s2", served(None, None, None), served(None, None, None)),
    ):
        record = rec(source=source)
        record["compressed"]["served"], record["full"]["served"] = comp, full
        for side in ("compressed", "full"):
            record[side]["token_ids"] = None  # an endpoint returns text
        records.append(record)
    costs = run(write(tmp_path, records)).tables["costs"]
    row = cost_row(costs, "snapkv")
    assert (row.prompt_tokens_sum, row.completion_tokens_sum, row.price_sum) == (400.0, 30.0, 2.0)
    full = cost_row(costs, "FullCache", "")
    assert (full.prompt_tokens_sum, full.completion_tokens_sum, full.price_sum) == (600.0, 26.0, 3.0)
    assert row.n_bytes == 0 and math.isnan(row.bytes_ratio)  # no KV bytes through an endpoint
    bare = cost_row(run(write(tmp_path / "old", [rec()])).tables["costs"], "snapkv")
    assert math.isnan(bare.prompt_tokens_sum) and math.isnan(bare.price_sum)  # older records: NaN


# ---------------------------------------------------------------------------------- the frontier


def test_pareto_front_by_hand() -> None:
    cost = np.array([0.25, 0.5, 0.5, 0.75, 1.0, 0.5, 0.3])
    value = np.array([0.5, 0.8, 0.8, 0.7, 0.9, 0.6, 0.5])
    # two equal points both stay; (0.75, 0.7) is beaten by (0.5, 0.8); (0.5, 0.6) by (0.5, 0.8) at equal
    # bytes; (0.3, 0.5) by (0.25, 0.5) at equal value
    assert pareto(cost, value).tolist() == [True, True, True, False, True, False, False]
    assert pareto(np.array([1.0]), np.array([0.0])).tolist() == [True]


def _hand_costs() -> pd.DataFrame:
    rows = [  # compressor, setting, n_supported, bytes_ratio, accuracy, cw_rate
        ("FullCache", "", 10, 1.0, 0.9, math.nan),
        ("a", "0.25", 10, 0.3, 0.6, 0.4),
        ("a", "0.5", 10, 0.5, 0.8, 0.05),
        ("b", "0.5", 10, 0.5, 0.85, 0.1),
        ("b", "0.75", 10, 0.8, 0.85, 0.0),
        ("c", "0.5", 10, math.nan, 0.7, 0.2),  # no KV bytes
        ("d", "0.5", 10, 0.4, 0.0, math.nan),  # no FullCache-correct source
        ("e", "0.5", 0, math.nan, math.nan, math.nan),  # every record unsupported
    ]
    frame = pd.DataFrame(
        rows, columns=["compressor", "setting", "n_supported", "bytes_ratio", "accuracy", "cw_rate"]
    )
    return frame.assign(level="task", task="t", reader="r", retained_share=0.5)


def test_frontier_fronts_point_the_right_way() -> None:
    f = frontier(_hand_costs())
    assert list(f["metric"]) == ["accuracy"] * 8 + ["cw_rate"] * 8
    acc = f[f["metric"] == "accuracy"].set_index(["compressor", "setting"])
    cw = f[f["metric"] == "cw_rate"].set_index(["compressor", "setting"])
    # accuracy, higher is better: a@0.5 loses to b@0.5 at equal bytes, b@0.75 to b@0.5 at equal accuracy
    assert acc["on_front"].dropna().to_dict() == {
        ("FullCache", ""): True,
        ("a", "0.25"): True,
        ("a", "0.5"): False,
        ("b", "0.5"): True,
        ("b", "0.75"): False,
        ("d", "0.5"): False,  # 0% at 0.4 is beaten by a@0.25
    }
    # C→W, lower is better: FullCache (C→W 0 at 1) loses to b@0.75 (0 at 0.8), b@0.5 to a@0.5
    assert cw.loc[("FullCache", ""), "rate"] == 0.0
    assert cw["on_front"].dropna().to_dict() == {
        ("FullCache", ""): False,
        ("a", "0.25"): True,
        ("a", "0.5"): True,
        ("b", "0.5"): False,
        ("b", "0.75"): True,
    }
    assert acc.loc[("c", "0.5"), "left_out"] == cw.loc[("c", "0.5"), "left_out"] == NO_BYTES
    assert acc.loc[("d", "0.5"), "left_out"] == "" and cw.loc[("d", "0.5"), "left_out"] == NO_RATE
    assert acc.loc[("e", "0.5"), "left_out"] == NO_SUPPORTED
    assert str(f["on_front"].dtype) == "boolean" and f["on_front"].isna().sum() == 2 + 3


def test_frontier_plot_writes_one_png_per_task_and_reader(tmp_path: Path) -> None:
    hand = _hand_costs()
    two = pd.concat([hand, hand.assign(task="u", bytes_ratio=np.nan)], ignore_index=True)
    paths = frontier_plot(frontier(two), tmp_path)
    assert [p.name for p in paths] == ["frontier_t_r.png"]  # u has no placed point: no figure
    assert paths[0].read_bytes()[:8] == PNG_MAGIC and paths[0].stat().st_size > 10_000
    assert frontier_plot(pd.DataFrame(), tmp_path / "none") == []


# ------------------------------------------------------------------------------- the report, CLI


def test_report_shows_the_cost_table_and_the_frontier(tmp_path: Path) -> None:
    records = [
        costed(rec(source=f"s{i}", comp=c, ok=(i + k) % 3 > 0), compressed_cost(b * MIB), cost(4 * MIB))
        for k, (c, b) in enumerate((("snapkv", 2), ("tova", 1)))
        for i in range(3)
    ]
    folder = write(tmp_path / "r", records)
    out = tmp_path / "o"
    assert main(["--records", str(folder), "--out", str(out), "--no-log", "--quiet", "--workers", "1"]) == 0
    assert (out / "frontier_t_r.png").read_bytes()[:8] == PNG_MAGIC
    page = (out / "report.html").read_text()
    assert "Costs &amp; accuracy–cost frontier</h2>" in page
    assert "Timings are noisy on shared machines" in page and "only ratios within one run" in page
    assert page.index('id="matrix"') < page.index('id="costs"') < page.index('id="failures"')
    assert 'href="costs.csv"' in page and 'href="frontier.csv"' in page
    assert 'alt="frontier_t_r"' in page
    table = pd.read_csv(out / "costs.csv")
    assert table.set_index("compressor").loc["tova", "bytes_ratio"] == 0.25
    assert "| bytes_ratio |" in (out / "costs.md").read_text()
    assert set(pd.read_csv(out / "frontier.csv")["on_front"]) == {True, False}


# -------------------------------------------------------------------- timings are never validated


def test_costs_never_decide_validation(tmp_path: Path) -> None:
    """The same source's FullCache answer with other timings and bytes in another cell, in the control
    ledger, and a non-finite timing: no partner problem, and the record stays in the analysis."""
    records = [
        costed(rec(source=f"s{i}", ok=True), compressed_cost(MIB, question_ms=10.0 + i), cost(4 * MIB))
        for i in range(2)
    ]
    records += [
        costed(
            rec(source=f"s{i}", comp="tova", ok=True), compressed_cost(MIB), cost(5 * MIB, question_ms=99.0)
        )
        for i in range(2)
    ]
    folder = write(tmp_path, records)
    ledger = controls(records)
    ledger[0]["cost"] = cost(6 * MIB, question_ms=1.0)
    (folder / f"{records[0]['split']}.controls.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in ledger)
    )
    nan = costed(rec(source="s2", ok=True), compressed_cost(MIB, question_ms=math.nan), cost(4 * MIB))
    (folder / "nan.jsonl").write_text(json.dumps(nan) + "\n")  # NaN is not valid JSON: written by hand
    (folder / f"{records[0]['split']}.controls.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in [*ledger, *controls([nan])])
    )
    result = run(folder)
    assert problems(result, "partner").empty and problems(result, "prompt_hash").empty
    found = problems(result, "nonfinite")
    assert list(found.key) == [nan["key"]] and "treated as missing" in found.iloc[0].message
    snap = cost_row(result.tables["costs"], "snapkv")
    assert snap.n_supported == 3 and snap.question_ms_median == 10.5  # s2's NaN timing left out, s2 kept
