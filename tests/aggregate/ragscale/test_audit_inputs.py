"""Audit inputs beyond kvx's own cells: precomputed score files (with the same artifact-hash checks),
evidence swaps (retriever swap: BM25 vs dense order of the same pool), families and task metrics."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.options import Options
from kvx.aggregate.ragscale.audit import audit
from kvx.aggregate.ragscale.swap import swapped
from kvx.aggregate.scores import audit_scores, read_scores
from kvx.aggregate.stats.eiv import eiv_bootstrap

FAST = Options(n_splits=200, n_boot=200, seed=1, progress=False)
PANEL = {  # raw means 0.1 / 0.5 / 0.9; compressed 0.5 / 0.6 / 0.6 (test_aggregate's hand-computed panel)
    "weak": ([1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 1, 1, 0, 0, 0]),
    "mid": ([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 1, 1, 0, 0, 0]),
    "strong": ([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]),
}


def score_table(hashes: bool = True) -> pd.DataFrame:
    rows = []
    for reader, (raw, comp) in PANEL.items():
        for i, (r, c) in enumerate(zip(raw, comp, strict=True)):
            rows.append(
                {
                    "row_id": f"q{i}",
                    "reader": reader,
                    "family": "big" if reader == "strong" else "small",
                    "compressor": "recomp",
                    "raw_em": r,
                    "comp_em": c,
                    "raw_f1": r * 0.5 + 0.25,
                    "comp_f1": c * 0.5 + 0.25,
                    **({"artifact_sha256": f"{i:064x}"} if hashes else {}),
                }
            )
    return pd.DataFrame(rows)


def test_score_files_are_audited_like_records(tmp_path):
    path = tmp_path / "scores.csv"
    score_table().to_csv(path, index=False)
    result = audit_scores([path], FAST)
    pairs = result.tables["audit_pairs"]
    ends = pairs[(pairs.kind == "endpoints") & (pairs.metric == "em")].iloc[0]
    assert (ends.reader_a, ends.reader_b) == ("weak", "strong")
    assert ends.raw_upgrade == pytest.approx(0.8) and ends.comp_upgrade == pytest.approx(0.1)
    assert ends.retention == pytest.approx(0.1 / 0.8)
    f1 = pairs[(pairs.kind == "endpoints") & (pairs.metric == "f1")].iloc[0]
    assert f1.retention == pytest.approx(0.1 / 0.8)  # f1 = em / 2 + 1/4: the same ratio
    panel = result.tables["audit_panel"].set_index("metric")
    assert panel.loc["em", "artifact_check"] == "identical text artifact"
    assert panel.loc["em", "rescue"] == pytest.approx(6 / 30) and panel.loc["em", "damage"] == pytest.approx(
        4 / 15
    )
    assert math.isnan(panel.loc["f1", "rescue"])  # not binary: no rescue/damage
    assert panel.loc["em", "n_families"] == 2
    readers = result.tables["audit_readers"].query("metric == 'em'").set_index("reader")
    assert readers.loc["weak", "rescue"] == pytest.approx(0.4) and readers.loc["strong", "family"] == "big"
    # JSONL gives the same tables
    jsonl = tmp_path / "scores.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in score_table().to_dict("records")))
    again = audit_scores([jsonl], FAST).tables["audit_pairs"]
    pd.testing.assert_frame_equal(again, pairs)


def test_a_tampered_artifact_in_a_score_file_refuses_the_panel(tmp_path):
    table = score_table()
    table.loc[(table.reader == "mid") & (table.row_id == "q3"), "artifact_sha256"] = "f" * 64
    path = tmp_path / "scores.csv"
    table.to_csv(path, index=False)
    result = audit_scores([path], FAST)
    refused = [p for p in result.problems if p.check == "artifact_hash"]
    assert len(refused) == 1 and "row q3" in refused[0].message and "mid=ffffffffffff" in refused[0].message
    assert result.tables["audit_panel"]["artifact_check"].str.startswith("refused").all()
    assert result.tables["audit_readers"].empty and result.tables["audit_pairs"].empty


def test_score_file_errors_and_the_cli(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    score_table().drop(columns=["comp_em", "comp_f1"]).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="no raw_<metric>/comp_<metric> column pair"):
        read_scores(bad)
    assert main(["--scores", str(bad), "--no-log", "--quiet", "--out", str(tmp_path / "o")]) == 2
    assert "column pair" in capsys.readouterr().err
    good = tmp_path / "scores.csv"
    score_table().to_csv(good, index=False)
    out = tmp_path / "report"
    args = ["--scores", str(good), "--out", str(out), "--no-log", "--no-plots", "--quiet", "--splits", "50"]
    assert main([*args, "--boot", "50", "--family", "mid=big"]) == 0
    headline = "audit imported x recomp + text@- (em): weak -> strong raw +80.0 pp, compressed +10.0 pp"
    assert f"{headline}, retention 12%" in capsys.readouterr().out
    panel = pd.read_csv(out / "audit_panel.csv")
    assert set(panel["metric"]) == {"em", "f1"} and (panel["n_rows"] == 10).all()
    readers = pd.read_csv(out / "audit_readers.csv")
    assert readers.query("reader == 'mid'")["family"].eq("big").all()  # --family overrides the file
    assert main(["--scores", str(good), "--records", str(tmp_path)]) == 2


def swap_rows() -> pd.DataFrame:
    """Two evidence conditions (BM25 and dense order of the whole pool) for three readers."""
    rows = []
    for reader, (raw, comp) in PANEL.items():
        for i in range(10):
            for evidence, value in (
                ("bm25_top_k[k=10,order=rank]", raw[i]),
                ("dense_top_k[k=10,order=rank]", comp[i]),
            ):
                rows.append(
                    {
                        "status": "supported", "task": "t", "evidence": evidence,
                        "transform": evidence.split("[")[0],
                        "compressor": "none", "setting": "-", "reader": reader, "revision": "r",
                        "family": reader, "prompt_format": "plain", "row_id": f"q{i}",
                        "full_correct": 0.0, "comp_correct": float(value), "full_score": 0.0,
                        "comp_score": float(value), "text_hash": f"{evidence[:2]}{i}".ljust(64, "0"),
                    }
                )  # fmt: skip
    return pd.DataFrame(rows)


def test_a_retriever_swap_is_audited_from_one_condition_to_the_other():
    rows = swap_rows()
    swap, problems = swapped(rows, "bm25_top_k", "dense_top_k")
    assert (
        not problems
        and len(swap) == 30
        and set(swap["evidence"]) == {"bm25_top_k[k=10,order=rank] -> dense_top_k[k=10,order=rank]"}
    )
    tables = audit(swap, [], 200, 200, 1)
    ends = tables.pairs.query("kind == 'endpoints' and metric == 'correct'").iloc[0]
    assert ends.raw_upgrade == pytest.approx(0.8) and ends.comp_upgrade == pytest.approx(0.1)  # bm25 -> dense
    assert tables.panel.query("metric == 'correct'").iloc[0].artifact_check == "identical text artifact"
    # one reader saw another dense artifact on one row: the swap panel is refused too
    rows.loc[
        (rows.reader == "mid") & (rows.row_id == "q2") & rows.evidence.str.startswith("dense"), "text_hash"
    ] = "9" * 64
    refused = audit(swapped(rows, "bm25_top_k", "dense_top_k")[0], [], 50, 50, 1)
    assert refused.panel["artifact_check"].str.startswith("refused").all()
    _, missing = swapped(rows, "bm25_top_k", "splade")
    assert missing and "no condition 'splade'" in missing[0].message
    # a transform swept as a cell field labels each condition's compressors apart: nothing pairs, said so
    labelled = rows.assign(compressor="none[transform=" + rows["transform"] + "]")
    nothing, apart = swapped(labelled, "bm25_top_k", "dense_top_k")
    assert nothing.empty and "share no (task, compressor, setting, reader, row) to pair" in apart[0].message


def test_family_by_row_bootstrap_resamples_families():
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 2, (4, 40)).astype(float)
    gain = rng.integers(0, 2, (4, 40)).astype(float) - raw
    rows_only = eiv_bootstrap(raw, gain, n_boot=100, seed=3)
    by_family = eiv_bootstrap(raw, gain, n_boot=100, seed=3, families=["a", "a", "b", "c"])
    assert by_family.n_draws == 100 and by_family != rows_only
    assert by_family == eiv_bootstrap(raw, gain, n_boot=100, seed=3, families=["a", "a", "b", "c"])
    # one family per reader and one family in all: still every draw counted, none hidden
    single = eiv_bootstrap(raw, gain, n_boot=50, seed=3, families=["a"] * 4)
    assert single.n_finite + single.n_nonfinite == 50
    with pytest.raises(ValueError, match="families has 3 labels for 4 readers"):
        eiv_bootstrap(raw, gain, n_boot=10, families=["a", "b", "c"])


def test_tied_raw_readers_have_no_endpoint_pair():
    rows = swap_rows()
    rows = rows[rows.evidence.str.startswith("bm25")].assign(full_correct=1.0, full_score=1.0)
    tables = audit(rows, [], 50, 50, 1)
    assert tables.pairs.query("kind == 'endpoints'").empty  # not a reader paired with itself
    assert len(tables.readers.query("metric == 'correct'")) == 3


def test_a_varying_split_size_is_its_own_matrix_column():
    from kvx.aggregate.read.cells import with_varying

    matrix = pd.DataFrame({"task": ["t", "t"], "reader": ["r", "r"], "compressor": ["a", "b"]})
    matrix = matrix.assign(setting="-", n_sources=[100, 50])
    rows = matrix.assign(cell_id=["c1", "c2"])
    cells = {"c1": {"n_sources": 100}, "c2": {"n_sources": 50}}
    out = with_varying(matrix, rows, cells, ["n_sources"])
    assert list(out["cell.n_sources"]) == ["100", "50"] and list(out["n_sources"]) == [100, 50]


def test_a_panel_whose_readers_share_no_row_is_refused_not_a_crash(tmp_path) -> None:
    """Two readers that answered different sources: no row to compare on. The panel is listed with the
    reason and a warning counts the rows (it raised KeyError before)."""
    from kvx.testing.crafted import panel, problems, run, write

    records = panel({"a": ([1, 0], [1, 1])}) + [
        r | {"source_id": f"other{i}"} for i, r in enumerate(panel({"b": ([1, 1], [0, 1])}))
    ]
    result = run(write(tmp_path, records))
    panels = result.tables["audit_panel"]
    assert set(panels["metric"]) == {"correct", "score"}
    assert set(panels["artifact_check"]) == {"no row every reader answered"} and set(panels["n_rows"]) == {0}
    assert result.tables["audit_pairs"].empty and result.tables["audit_readers"].empty
    [warning] = problems(result, "audit_rows")["message"]
    assert warning.startswith("4 of 4 rows lack a supported result for some reader")
