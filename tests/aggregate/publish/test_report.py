"""Output layer of ``python -m kvx.aggregate``: figures, CSV/Markdown tables and the HTML report."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvx.aggregate.catalogue import load
from kvx.aggregate.paired.costs import frontier
from kvx.aggregate.publish import plots, report

#: the figures plots.py declares, by key
PLOTS = {f.key: f for f in load(figures=True).figures if f.draw.__module__ == plots.__name__}

NAN = math.nan
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HOSTILE = "<script>alert('x')</script>"

MATRIX_COLS = [
    "task", "reader", "compressor", "setting", "ratio", "n_sources", "n_supported", "n_unsupported",
    "n_error", "quality", "accuracy", "n_fc", "n_cc", "n_cw", "n_wc", "n_ww", "cw_rate",
]  # fmt: skip


def _matrix() -> pd.DataFrame:
    rows = []
    for task in ("niah", "qa", "pooled"):
        rows.append(
            [task, "tiny", "FullCache", "", NAN, 20, 20, 0, 0, 0.9, 0.85, 17, NAN, NAN, NAN, NAN, NAN]
        )
        for comp, setting, ratio in [
            ("snapkv", "0.5", 0.5),
            ("snapkv", "0.25", 0.25),
            ("tova", "0.25", 0.25),
        ]:
            rows.append(
                [task, "tiny", comp, setting, ratio, 20, 20, 0, 0, 0.7, 0.65, 17, 12, 5, 1, 2, 5 / 17]
            )
        # all-unsupported cell and a quantized setting label that does not parse as a float
        rows.append([task, "tiny", "think", "0.25", 0.25, 20, 0, 20, 0, NAN, NAN, 0, 0, 0, 0, 0, NAN])
        rows.append([task, "tiny", "quant", "4b", NAN, 20, 19, 0, 1, 0.8, 0.8, 16, 15, 1, 0, 3, 1 / 16])
    return pd.DataFrame(rows, columns=MATRIX_COLS)


def _costs() -> pd.DataFrame:
    cols = ["level", "task", "reader", "compressor", "setting", "retained_share", "n_supported",
            "bytes_ratio", "kv_mib_median", "accuracy", "cw_rate"]  # fmt: skip
    rows = [
        ["task", "niah", "tiny", "FullCache", "", 1.0, 20, 1.0, 8.0, 0.85, NAN],
        ["task", "niah", "tiny", "snapkv", "0.5", 0.5, 20, 0.52, 4.2, 0.65, 5 / 17],
        ["task", "niah", "tiny", "quant", "4b", NAN, 19, 0.28, 2.2, 0.8, 1 / 16],
        ["task", "niah", "tiny", "think", "0.25", 0.25, 0, NAN, NAN, NAN, NAN],  # left out of the frontier
    ]
    return pd.DataFrame(rows, columns=cols)


def _matched() -> pd.DataFrame:
    cols = ["task", "reader", "setting", "compressor_a", "compressor_b", "n_a", "n_b", "intersection",
            "union", "jaccard", "kl_n", "kl_mean_a", "kl_mean_b"]  # fmt: skip
    rows = [
        ["niah", "tiny", "0.25", "snapkv", "tova", 4, 4, 2, 6, 1 / 3, 2, 0.4, 0.5],
        ["qa", "tiny", "0.25", "snapkv", "tova", 0, 0, 0, 0, NAN, 0, NAN, NAN],
        ["qa", "tiny", "0.5", "snapkv", "tova", 3, 1, 1, 3, 1 / 3, 1, 0.2, 0.1],
    ]
    return pd.DataFrame(rows, columns=cols)


def _categories() -> pd.DataFrame:
    cols = ["task", "reader", "compressor", "setting", "category", "rows", "share"]
    rows = [
        ["niah", "tiny", "snapkv", "0.25", "low_mapped_coverage", 3, 0.6],
        ["niah", "tiny", "snapkv", "0.25", "ambiguous", 2, 0.4],
        ["niah", "tiny", "tova", "0.25", "low_ear_candidate", 1, 1.0],
        ["all", "all", "all", "all", "low_mapped_coverage", 3, 0.5],
        ["all", "all", "all", "all", "ambiguous", 2, 1 / 3],
        ["all", "all", "all", "all", "low_ear_candidate", 1, 1 / 6],
    ]
    return pd.DataFrame(rows, columns=cols)


def _failures() -> pd.DataFrame:
    cols = ["task", "reader", "compressor", "setting", "n_failures", "ecov_mean", "ecov_n", "kl_mean", "kl_n"]
    return pd.DataFrame([["niah", "tiny", "snapkv", "0.25", 5, 0.41, 4, NAN, 0]], columns=cols)


def _separation() -> pd.DataFrame:
    cols = ["metric", "direction", "auroc", "ci_low", "ci_high", "n_strata", "n_cw", "n_cc"]
    rows = [
        ["kl", "higher", 0.87, 0.8, 0.93, 4, 40, 60],
        ["ear", "lower", 0.62, 0.45, 0.77, 3, 20, 30],
        ["ecov", "lower", NAN, NAN, NAN, 0, 0, 0],
        ["top50", "lower", 0.7, 0.72, 0.9, 2, 5, 5],  # bootstrap interval excluding the estimate
    ]
    return pd.DataFrame(rows, columns=cols)


def _audit_readers() -> pd.DataFrame:
    cols = ["task", "compressor", "setting", "metric", "reader", "n_rows", "raw_mean", "comp_mean", "gain",
            "rescue", "damage"]  # fmt: skip
    rows = [
        ["qa", "recomp", "fixed", "correct", "r1", 50, 0.30, 0.52, 0.22, 0.3, 0.1],
        ["qa", "recomp", "fixed", "correct", "r2", 50, 0.45, 0.55, 0.10, 0.2, 0.1],
        ["qa", "recomp", "fixed", "correct", "r3", 50, 0.62, 0.60, -0.02, 0.1, 0.15],
        ["qa", "recomp", "fixed", "score", "r1", 50, 0.40, NAN, NAN, NAN, NAN],  # one valid reader: skipped
        ["qa", "recomp", "fixed", "score", "r2", 50, 0.50, 0.55, 0.05, 0.1, 0.1],
    ]
    return pd.DataFrame(rows, columns=cols)


def _contrast() -> pd.DataFrame:
    from kvx.aggregate.kvexec.contrast import COLUMNS

    rows = [
        ["tool_call", "smollm2", "snapkv", "0.25", 0.25, "name_substring", "schema_valid", 8, 1.0, 1.0, 1.0,
         0.8, 0.6, 0.75],
        ["tool_call", "smollm2", "snapkv", "0.5", 0.5, "name_substring", "schema_valid", 8, 1.0, 0.9, 0.9,
         0.8, 0.2, 0.25],
        ["tool_call", "smollm2", "tova", "0.5", 0.5, "name_substring", "schema_valid", 8, 1.0, 1.0, 1.0,
         0.0, 0.0, NAN],
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def _contrast_by_ratio() -> pd.DataFrame:
    from kvx.aggregate.kvexec.contrast import BY_RATIO

    rows = [
        ["tool_call", "smollm2", 0.25, "json_valid", "anchor", 2, 2, 1.0, 1.0, 1.0, ""],
        ["tool_call", "smollm2", 0.5, "json_valid", "anchor", 2, 1, 1.0, 0.9, 0.9, "tova: FullCache mean 0"],
        ["tool_call", "smollm2", 0.25, "schema_valid", "structural", 2, 2, 0.8, 0.6, 0.75, ""],
        ["tool_call", "smollm2", 0.5, "schema_valid", "structural", 2, 0, NAN, NAN, NAN,
         "snapkv: no supported answer"],
        ["tool_call", "smollm2", 0.5, "args_exact", "", 2, 2, 0.5, 0.1, 0.2, ""],
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=BY_RATIO)


def _intervention_empty() -> pd.DataFrame:
    cols = ["task", "reader", "compressor", "setting", "n_cw_rows", "n_reproduced", "repaired_evidence",
            "repaired_sham", "repair_rate_evidence", "repair_rate_sham", "paired_diff", "diff_ci_low",
            "diff_ci_high", "evidence_only", "sham_only", "mcnemar_p", "n_cc_controls", "degraded_evidence",
            "degraded_sham", "degradation_rate_evidence", "degradation_rate_sham"]  # fmt: skip
    return pd.DataFrame(columns=cols)


def _problems() -> pd.DataFrame:
    cols = ["check", "severity", "run", "key", "message"]
    return pd.DataFrame(
        [["partner", "error", "run-1", "k1", f"no FullCache partner {HOSTILE}"]], columns=cols
    )


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return {
        "matrix": _matrix(),
        "costs": _costs(),
        "frontier": frontier(_costs()),
        "failures": _failures(),
        "categories": _categories(),
        "matched": _matched(),
        "separation": _separation(),
        "intervention": _intervention_empty(),
        "audit_readers": _audit_readers(),
        "audit_pairs": pd.DataFrame(),
        "contrast": _contrast(),
        "contrast_by_ratio": _contrast_by_ratio(),
        "problems": _problems(),
    }


@pytest.fixture(scope="module")
def figures(tables, tmp_path_factory) -> dict[str, list[Path]]:
    return plots.plot_all(tables, tmp_path_factory.mktemp("figures"), list(PLOTS.values()))


def _assert_pngs(paths: list[Path]) -> None:
    assert paths
    for path in paths:
        assert path.suffix == ".png"
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert path.stat().st_size > 1000


@pytest.mark.slow
def test_every_plot_writes_pngs(figures):
    assert set(figures) == set(PLOTS) - {"tpbench_rank_change"}  # no TPBench table here
    for paths in figures.values():
        _assert_pngs(paths)
    assert len(figures["heatmaps"]) == 3  # niah, qa, pooled x one reader
    assert figures["heatmaps"][-1].name == "heatmap_pooled_tiny.png"
    assert [p.name for p in figures["frontier_plot"]] == ["frontier_niah_tiny.png"]
    assert len(figures["jaccard_heatmap"]) == 1  # one reader, one pair
    assert len(figures["category_bars"]) == 1  # niah x tiny, with the pooled bar
    assert len(figures["forest_plot"]) == 1
    assert [p.name for p in figures["reader_scaling"]] == ["scaling_qa_recomp_fixed_correct.png"]
    assert [p.name for p in figures["contrast_ratio_plot"]] == ["contrast_by_ratio_tool_call_smollm2.png"]


@pytest.mark.parametrize("name", sorted(PLOTS))
def test_empty_frame_plots_nothing(name, tmp_path):
    plot = PLOTS[name].draw
    assert plot(pd.DataFrame(), tmp_path) == []
    assert not any(tmp_path.iterdir())


def test_category_bars_with_only_pooled_rows(tmp_path):
    pooled = _categories().query("task == 'all'")
    _assert_pngs(plots.category_bars(pooled, tmp_path))


def test_settings_sort_numerically_then_as_given():
    assert plots.order_settings(["0.5", "4b", "0.25", "2b", "0.75", "0.5"]) == [
        "0.25",
        "0.5",
        "0.75",
        "4b",
        "2b",
    ]


def test_markdown_formats_na_rates_counts_and_p_values():
    frame = pd.DataFrame(
        {
            "compressor": ["snapkv", "a|b"],
            "cw_rate": [0.1234, NAN],
            "n_fc": [40.0, NAN],
            "mcnemar_p": [0.012345, 1.234e-7],
            "jaccard": [1 / 3, 0.0],
        }
    )
    lines = report.markdown_table(frame).splitlines()
    assert lines[0] == "| compressor | cw_rate (%) | n_fc | mcnemar_p | jaccard |"
    assert lines[1] == "| --- | ---: | ---: | ---: | ---: |"
    assert lines[2] == "| snapkv | 12.3 | 40 | 0.0123 | 0.333 |"
    assert lines[3] == "| a\\|b | N/A | N/A | 1.23e-07 | 0.000 |"


def test_write_tables_round_trips_csv_exactly(tables, tmp_path):
    frame = tables["matrix"].copy()
    frame.loc[0, "quality"] = 0.1 + 0.2  # not representable in few digits
    frame.loc[1, "cw_rate"] = 1e-300
    written = report.write_tables({"matrix": frame, "intervention": tables["intervention"]}, tmp_path)
    csv_path, md_path = written["matrix"]
    assert (csv_path, md_path) == (tmp_path / "matrix.csv", tmp_path / "matrix.md")
    numeric = frame.select_dtypes("number").columns
    back = pd.read_csv(csv_path, float_precision="round_trip")  # pandas' default parser is not bit-exact
    pd.testing.assert_frame_equal(back[numeric], frame[numeric], check_exact=True)
    text = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(text[["task", "setting"]], frame[["task", "setting"]])
    assert ",,," in csv_path.read_text()  # NaN written as empty fields
    assert "N/A" in md_path.read_text()
    assert pd.read_csv(written["intervention"][0]).columns.tolist() == tables["intervention"].columns.tolist()


def test_html_is_self_contained_and_complete(tables, figures, tmp_path):
    report.write_tables(tables, tmp_path)
    meta = {"sweep ids": "s1, s2", "tracking URI": "file:///tmp/mlruns", "note": HOSTILE}
    page = report.write_html(tables, figures, tmp_path, f"kvx aggregate {HOSTILE}", meta).read_text()
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) is None
    # no external resources: one inline script (table sorting), no src, no stylesheet links
    assert "<link" not in page and re.findall(r"<script\b[^>]*>", page) == ["<script>"]
    n_images = sum(len(paths) for paths in figures.values())
    assert page.count('src="data:image/png;base64,') == n_images
    for heading in ["Validation", *(s.heading for s in report.placed() if not s.optional)]:
        assert f">{heading.replace('&', '&amp;')}</h2>" in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page  # autoescaped
    assert "no FullCache partner" in page and "1 error" in page
    assert "No intervention records in the selected runs." in page
    assert 'href="matrix.csv"' in page
    assert "C→W rate = C→W / FullCache-correct supported sources\n(<code>n_FC</code>)" in page  # its prose


def test_html_without_problems_or_frames(tmp_path):
    page = report.write_html({}, {}, tmp_path, "empty", {}).read_text()
    assert "No problems found" in page
    for section in (s for s in report.placed() if not s.optional):
        assert section.empty[1:] in page
    assert "href=" in page and ".csv" not in page


def test_html_caps_long_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "MAX_HTML_ROWS", 2)
    frame = pd.DataFrame({"metric": ["a", "b", "c"], "auroc": np.array([0.5, 0.6, 0.7])})
    page = report.write_html({"separation": frame}, {}, tmp_path, "t", {}).read_text()
    assert "Showing the first 2 of 3 rows" in page
    assert "0.600" in page and "0.700" not in page
