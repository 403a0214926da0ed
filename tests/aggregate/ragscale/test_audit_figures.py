"""ragscale Figure 1 (endpoint bars: ``audit_endpoints``), Figure 3 left (excess flips, from
``audit_panel``) and Figure 3 right (the shortlist winner: ``audit_shortlist``), every number of a
four-reader, ten-row miniature computed by hand, and each figure drawn into the aggregate folder and the
report."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from kvx.aggregate.__main__ import main
from kvx.aggregate.publish.ragscale_plots import endpoint_bars, excess_flips_plot, shortlist_plot
from kvx.aggregate.publish.report import write_html
from kvx.aggregate.ragscale.endpoint_scores import endpoint_scores
from kvx.aggregate.ragscale.shortlist import shortlist

PNG = b"\x89PNG\r\n\x1a\n"
# em is 1 on rows 0..k-1 for each reader (sums over ten rows):
#   raw:  a 2, b 5, c 6, d 8    compressed: a 5, b 6, c 7, d 6
# Endpoints a (0.2) and d (0.8): raw upgrade 0.6, compressed 0.6 - 0.5 = 0.1, retention 1/6, lost 5/6;
# gains a +0.3, d -0.2. The raw top three is d, c, b; compressed c 0.7, then b and d tied at 0.6: the
# winner changes from d to c. f1 is each reader's raw em under both conditions: nothing moves, d keeps it.
RAW = {"a": 2, "b": 5, "c": 6, "d": 8}
COMP = {"a": 5, "b": 6, "c": 7, "d": 6}


def _scores(folder: Path) -> Path:
    rows = []
    for reader in RAW:
        for i in range(10):
            raw, comp = int(i < RAW[reader]), int(i < COMP[reader])
            rows.append(
                {"row_id": f"r{i}", "reader": reader, "compressor": "summary"}
                | {"raw_em": raw, "comp_em": comp, "raw_f1": raw, "comp_f1": raw}
            )
    path = folder / "scores.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("figures")
    out = folder / "out"
    args = ["--scores", str(_scores(folder)), "--out", str(out), "--no-log", "--quiet", "--no-plots"]
    assert main([*args, "--boot", "20", "--splits", "20"]) == 0
    return out


def _table(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / f"{name}.csv", keep_default_na=False, na_values=[""])


def test_endpoint_scores_by_hand(audited: Path) -> None:
    table = _table(audited, "audit_endpoints").set_index("metric")
    em, f1 = table.loc["em"], table.loc["f1"]
    assert (em.reader_low, em.reader_high) == ("a", "d")
    assert (em.low_raw_mean, em.low_comp_mean, em.high_raw_mean, em.high_comp_mean) == (0.2, 0.5, 0.8, 0.6)
    assert em.low_gain == pytest.approx(0.3) and em.high_gain == pytest.approx(-0.2)
    assert em.raw_upgrade == pytest.approx(0.6) and em.comp_upgrade == pytest.approx(0.1)
    assert em.retention == pytest.approx(1 / 6) and em.lost_share == pytest.approx(5 / 6)
    assert f1.retention == pytest.approx(1.0) and f1.lost_share == pytest.approx(0.0)
    pairs = _table(audited, "audit_pairs").query("kind == 'endpoints'").set_index("metric")
    for column in ("raw_upgrade", "comp_upgrade", "retention"):  # the same pair and numbers as audit_pairs
        assert table[column].to_dict() == pairs[column].to_dict()


def test_shortlist_by_hand(audited: Path) -> None:
    table = _table(audited, "audit_shortlist")
    em = table[table["metric"] == "em"]
    assert em["reader"].tolist() == ["d", "c", "b"]  # the raw top three, in raw order
    assert em["raw_rank"].tolist() == [1, 2, 3] and em["comp_rank"].tolist() == [2, 1, 2]
    assert em["comp_mean"].tolist() == [0.6, 0.7, 0.6]
    assert set(em["raw_winner"]) == {"d"} and set(em["comp_winner"]) == {"c"}
    assert em["winner_changed"].all() and (em["n_readers"] == 4).all() and (em["shortlist_size"] == 3).all()
    f1 = table[table["metric"] == "f1"]
    assert set(f1["comp_winner"]) == {"d"} and not f1["winner_changed"].any()  # "EM keeps its winner"


def test_ties_are_named_together_and_a_small_panel_is_its_own_shortlist() -> None:
    readers = pd.DataFrame(
        {
            "task": "t",
            "evidence": "e",
            "compressor": "text",
            "setting": "-",
            "metric": "em",
            "reader": ["x", "w", "v"],
            "raw_mean": [0.5, 0.5, 0.2],
            "comp_mean": [0.4, 0.6, 0.6],
        }
    )
    table = shortlist(readers, size=2)
    assert table["reader"].tolist() == ["w", "x"]  # tied on raw: the name first, not the row order
    assert set(table["raw_winner"]) == {"w / x"} and set(table["comp_winner"]) == {"w"}
    assert table["winner_changed"].all()  # the raw tie is not a single winner the compressed one keeps
    whole = shortlist(readers.assign(comp_mean=[0.4, 0.3, 0.6]))
    assert whole["reader"].tolist() == ["w", "x", "v"] and set(whole["comp_winner"]) == {"v"}
    assert shortlist(readers.head(1)).empty  # one reader: no shortlist to win
    with pytest.raises(ValueError, match="at least one reader"):
        shortlist(readers, size=0)


def test_retention_under_the_gap_leaves_the_lost_share_na() -> None:
    readers = pd.DataFrame(
        {"task": "t", "evidence": "e", "compressor": "text", "setting": "-", "metric": "em"}
        | {"reader": ["a", "b"], "raw_mean": [0.5, 0.52], "comp_mean": [0.6, 0.6], "gain": [0.1, 0.08]}
    )
    pairs = readers.head(1)[["task", "evidence", "compressor", "setting", "metric"]].assign(
        kind="endpoints", reader_a="a", reader_b="b", raw_upgrade=0.02, comp_upgrade=0.0, retention=math.nan
    )
    row = endpoint_scores(readers, pairs).iloc[0]
    assert row.low_gain == 0.1 and row.high_gain == 0.08 and math.isnan(row.lost_share)
    assert endpoint_scores(readers, pairs.iloc[:0]).empty


def test_each_figure_is_drawn_from_the_miniature(audited: Path, tmp_path: Path) -> None:
    endpoints = _table(audited, "audit_endpoints").query("metric == 'em'")
    panel = _table(audited, "audit_panel")
    short = _table(audited, "audit_shortlist").query("metric == 'em'")
    drawn = (
        endpoint_bars(endpoints, tmp_path)
        + excess_flips_plot(panel, tmp_path)
        + shortlist_plot(short, tmp_path)
    )
    assert [p.name for p in drawn] == [
        "endpoints_imported_summary_text_-_em.png",
        "excess_flips.png",
        "shortlist_imported_summary_text_-_em.png",
    ]
    assert all(p.read_bytes()[:8] == PNG for p in drawn)
    # the report places each below its table, as the aggregate's other figures
    tables = {"audit_endpoints": endpoints, "audit_panel": panel, "audit_shortlist": short}
    keys = ("endpoint_bars", "excess_flips_plot", "shortlist_plot")
    html = write_html(tables, dict(zip(keys, ([p] for p in drawn))), tmp_path, "audit", {}).read_text()
    for name in ("audit_endpoints", "audit_shortlist", *(p.stem for p in drawn)):
        assert name in html, name
    for draw in (endpoint_bars, excess_flips_plot, shortlist_plot):
        assert draw(pd.DataFrame(), tmp_path / "none") == []
    assert excess_flips_plot(panel.assign(excess_flips=math.nan), tmp_path / "none") == []
    assert not (tmp_path / "none").exists()


def test_the_musique_preset_names_the_shortlist_panel() -> None:
    from kvx.core.conf import conf_dir

    text = (Path(conf_dir()) / "experiment" / "ragscale" / "musique_summary.yaml").read_text()
    assert "audit_shortlist" in text and "shortlist_<panel>_<metric>.png" in text
    assert "python -m kvx.aggregate --sweep latest --seed 20260821 --boot 5000 --splits 5000" in text
