"""KVDiagnosis's per-workload figures from the ``kvd_*`` tables: Figure 4A (C→W rate by workload and
setting tier), Figures 4B and 9C (failure-set Jaccard by workload and tier), Figure 9A (pooled QA C→W
rate by reader and tier), Figure 5 (C→W rows by task and method), Figure 7 (category shares per
workload, paired dots), Figure 10 (C→W rows by method and tier; by task) and Figure 11 (Table 14's
diagnostics by method and setting).

Drawn with :mod:`kvx.aggregate.publish.plots`'s helpers, so undefined cells look the same (gray,
hatched, "N/A"); each function takes one table and an output folder and returns the PNGs it wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from kvx.aggregate.catalogue import figure
from kvx.aggregate.kvdiagnosis.jaccard import PAPER_PAIR
from kvx.aggregate.kvdiagnosis.workloads import TIERS
from kvx.aggregate.paired.matrix import NO_DIAGNOSTICS
from kvx.aggregate.publish.plots import (
    CATEGORY_COLORS,
    EXTRA_COLORS,
    LINE_COLORS,
    MARKERS,
    CellValue,
    category_order,
    cell_values,
    count_text,
    first_seen,
    groups_of,
    heat,
    is_missing,
    jaccard_panels,
    new_figure,
    order_settings,
    save,
    slug,
)

__all__ = [
    "category_dots",
    "jaccard_tiers",
    "qa_tier_lines",
    "settings_profile",
    "task_bars",
    "task_heatmap",
    "tier_bars",
    "tier_heatmap",
]

TIER_LABELS = {
    "light": "light\n75% / 8b",
    "intermediate": "intermediate\n50% / 4b",
    "aggressive": "aggressive\n25% / 2b",
}


def _tier_rate(row: pd.Series) -> CellValue:
    value = row["cw_rate"]
    counts = f"{count_text(row['n_cw'])}/{count_text(row['n_fc'])}"
    return (np.nan, f"N/A\n{counts}") if is_missing(value) else (100 * value, f"{100 * value:.1f}\n{counts}")


@figure("kvd_tier_heatmap", "kvd_tiers")
def tier_heatmap(tiers: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 4A per reader: rows workloads, columns the three tiers, C→W / FullCache-correct supported
    pairs pooled over the tier's cells (ThinK at 25% adds to neither)."""
    if tiers.empty:
        return []
    pooled = tiers[tiers["level"] == "workload"]
    paths = []
    for (reader,), group in groups_of(pooled, ["reader"]):
        rows = first_seen(group["workload"])
        cells = {(k[0], TIER_LABELS[k[1]]): v for k, v in cell_values(group, "workload", "tier").items()}
        fig, (ax,) = new_figure(2.0 * len(TIERS) + 3.5, 0.55 * len(rows) + 1.9, labels=rows)
        vmax = max(10.0, 10 * float(np.ceil(10 * np.nan_to_num(group["cw_rate"].max()))))
        cols = [TIER_LABELS[t] for t in TIERS]
        heat(ax, cells, rows, cols, _tier_rate, "magma_r", (0.0, vmax), "C→W rate (%)")
        ax.set_xlabel("setting tier (retained share / QuantizedCache bits)")
        ax.set_title(f"C→W rate by workload and tier (C→W / n_FC) · {reader}", fontsize=10)
        paths.append(save(fig, out / f"{slug('kvd-tier-rate', reader)}.png"))
    return paths


@figure("kvd_tier_bars", "kvd_tiers")
def tier_bars(tiers: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 10 (left) per workload and reader: C→W rows of each method at each tier. A tier where the
    method has no supported record is marked N/A, not drawn as 0; cells in no tier are counted in the
    title (their reasons are in kvd_tiers)."""
    if tiers.empty:
        return []
    cells = tiers[tiers["level"] == "cell"]
    paths = []
    for (name, reader), group in groups_of(cells, ["workload", "reader"]):
        placed = group[group["tier"] != ""]
        if placed.empty:
            continue
        sums = placed.groupby(["method", "tier"])[["n_cw", "n_supported"]].sum()
        methods = first_seen(placed["method"])
        fig, (ax,) = new_figure(0.9 * len(methods) + 3.0, 4.2)
        width = 0.8 / len(TIERS)
        xs = np.arange(len(methods))
        for i, tier in enumerate(TIERS):
            heights = []
            for method in methods:
                n = sums.loc[(method, tier)] if (method, tier) in sums.index else None
                defined = n is not None and n["n_supported"] > 0
                heights.append(float(n["n_cw"]) if defined else np.nan)
            x = xs + (i - 1) * width
            ax.bar(
                x,
                np.nan_to_num(heights),
                width,
                label=TIER_LABELS[tier].replace("\n", " "),
                color=LINE_COLORS[i],
            )
            for xi, h in zip(x, heights, strict=True):
                ax.text(
                    xi,
                    0 if np.isnan(h) else h,
                    "N/A" if np.isnan(h) else f"{h:.0f}",
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=90,
                )
        ax.set_xticks(xs, labels=methods, rotation=30, ha="right")
        ax.set_ylabel("C→W rows")
        left_out = int((group["tier"] == "").sum())
        note = f"; {left_out} cells in no tier (kvd_tiers)" if left_out else ""
        ax.set_title(f"C→W rows by method and tier · {name} · {reader}{note}", fontsize=10)
        ax.legend(fontsize=7, frameon=False)
        paths.append(save(fig, out / f"{slug('kvd-tier-bars', name, reader)}.png"))
    return paths


def _jaccard(row: pd.Series) -> CellValue:
    if is_missing(row["union"]):  # a method without supported records here: no failure set
        return np.nan, "N/A\n(unsupported)"
    counts = f"{count_text(row['intersection'])}/{count_text(row['union'])}"
    value = row["jaccard"]
    return (np.nan, f"N/A\n{counts}") if is_missing(value) else (float(value), f"{value:.2f}\n{counts}")


@figure("kvd_jaccard_heatmap", "kvd_jaccard")
def jaccard_tiers(jaccard: pd.DataFrame, out: Path) -> list[Path]:
    """Figures 4B and 9C per reader: one panel per method pair (the paper's SnapKV–TOVA first), rows
    workloads, columns tiers, each cell the Jaccard of the two C→W sets with |∩|/|∪| below it; a pair
    with no failure set (unsupported, or 0/0) is N/A."""
    if jaccard.empty:
        return []
    paths = []
    for (reader,), group in groups_of(jaccard, ["reader"]):
        group = group.assign(pair=group["method_a"].astype(str) + " vs " + group["method_b"].astype(str))
        paper = " vs ".join(PAPER_PAIR)
        pairs = sorted(first_seen(group["pair"]), key=lambda p: p != paper)
        rows = first_seen(group["workload"])
        cols = [TIER_LABELS[t] for t in TIERS]
        panels = []
        for pair in pairs:
            values = cell_values(group[group["pair"] == pair], "workload", "tier")
            panels.append((pair, {(k[0], TIER_LABELS[k[1]]): v for k, v in values.items()}))
        fig = jaccard_panels(panels, rows, cols, _jaccard, row_height=0.4)
        fig.suptitle(f"Failure-set Jaccard by workload and tier (|∩|/|∪|) · {reader}", fontsize=10)
        paths.append(save(fig, out / f"{slug('kvd-jaccard', reader)}.png"))
    return paths


@figure("kvd_qa_tier_lines", "kvd_qa_tiers")
def qa_tier_lines(qa_tiers: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 9A: the pooled QA C→W rate (Qasper + HotpotQA, ThinK left out) across the tiers, one line
    per reader, each point labelled with its rate and C→W / n_FC; an undefined rate is marked N/A."""
    if qa_tiers.empty:
        return []
    fig, (ax,) = new_figure(6.5, 4.2)
    xs = np.arange(len(TIERS))
    for i, (reader, group) in enumerate(qa_tiers.groupby("reader", sort=False)):
        by_tier = group.set_index("tier").reindex(list(TIERS))
        ys = 100 * by_tier["cw_rate"].to_numpy(float)
        style = {"marker": MARKERS[i % len(MARKERS)], "color": LINE_COLORS[i % len(LINE_COLORS)]}
        ax.plot(xs, ys, label=reader, **style)
        for x, y, row in zip(xs, ys, by_tier.itertuples(), strict=True):
            counts = f"{count_text(row.n_cw)}/{count_text(row.n_fc)}"
            label = f"N/A ({counts})" if np.isnan(y) else f"{y:.1f}% ({counts})"
            ax.annotate(label, (x, 0 if np.isnan(y) else y), xytext=(0, 7), textcoords="offset points",
                        ha="center", fontsize=7)  # fmt: skip
    ax.set_xticks(xs, labels=[TIER_LABELS[t] for t in TIERS])
    ax.set_ylabel("pooled QA C→W rate (%)")
    top = np.nan_to_num(100 * qa_tiers["cw_rate"].max())
    ax.set_ylim(0, max(10.0, 1.2 * float(top)))
    ax.set_xlim(-0.4, len(TIERS) - 0.6)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("QA C→W rate by tier: Qasper + HotpotQA, ThinK left out (C→W / n_FC)", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    return [save(fig, out / "kvd-qa-tiers.png")]


def _task_count(row: pd.Series) -> CellValue:
    if row["n_supported"] == 0:
        return np.nan, "N/A"
    return float(row["n_cw"]), count_text(row["n_cw"])


def _with_tasks(frame: pd.DataFrame) -> list[tuple[tuple[str, ...], pd.DataFrame]]:
    """Workload x reader groups with two or more tasks: a task-by-method view of one task says nothing."""
    return [(k, g) for k, g in groups_of(frame, ["workload", "reader"]) if g["task"].nunique() > 1]


@figure("kvd_task_heatmap", "kvd_task_failures")
def task_heatmap(task_failures: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 5 per workload and reader with two or more tasks: C→W rows by task (numbered variants
    pooled) and method over all settings: composition counts, not difficulty."""
    if task_failures.empty:
        return []
    paths = []
    for (name, reader), group in _with_tasks(task_failures):
        rows, cols = first_seen(group["task"]), first_seen(group["method"])
        fig, (ax,) = new_figure(1.0 * len(cols) + 4.0, 0.5 * len(rows) + 2.0, labels=rows)
        top = max(1.0, float(group["n_cw"].max()))
        heat(
            ax,
            cell_values(group, "task", "method"),
            rows,
            cols,
            _task_count,
            "magma_r",
            (0.0, top),
            "C→W rows",
        )
        ax.set_xlabel("method (all settings)")
        ax.tick_params(axis="x", labelrotation=30)
        ax.set_title(f"C→W rows by task and method · {name} · {reader}", fontsize=10)
        paths.append(save(fig, out / f"{slug('kvd-task-method', name, reader)}.png"))
    return paths


@figure("kvd_task_bars", "kvd_task_failures")
def task_bars(task_failures: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 10 (right) per workload and reader with two or more tasks: C→W rows per task, every
    method and setting pooled."""
    if task_failures.empty:
        return []
    paths = []
    for (name, reader), group in _with_tasks(task_failures):
        per = group.groupby("task", sort=False)["n_cw"].sum()
        fig, (ax,) = new_figure(7.0, 0.4 * len(per) + 1.6, labels=per.index)
        ys = np.arange(len(per))
        ax.barh(ys, per.to_numpy(float), color=LINE_COLORS[0])
        for y, n in zip(ys, per.to_numpy(), strict=True):
            ax.text(n, y, f" {n}", va="center", fontsize=7)
        ax.set_yticks(ys, labels=list(per.index))
        ax.set_ylim(len(per) - 0.5, -0.5)
        ax.set_xlabel("C→W rows (every method and setting)")
        ax.set_title(f"C→W rows by task · {name} · {reader}", fontsize=10)
        paths.append(save(fig, out / f"{slug('kvd-task-bars', name, reader)}.png"))
    return paths


@figure("kvd_category_dots", "kvd_workload_categories")
def category_dots(workload_categories: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 7 per reader: each category's share of a workload's C→W rows, one marker per workload,
    labelled with its row count; the same category's points joined. Workloads without any categorized
    C→W row (one N/A row) are named in the title, never drawn at 0."""
    if workload_categories.empty:
        return []
    paths = []
    for (reader,), group in groups_of(workload_categories, ["reader"]):
        missing = first_seen(group.loc[group["category"] == NO_DIAGNOSTICS, "workload"])
        shown = group[group["category"] != NO_DIAGNOSTICS]
        if shown.empty:
            continue
        order = category_order(shown["category"])
        ys = {c: i for i, c in enumerate(order)}
        fig, (ax,) = new_figure(8.5, 0.45 * len(order) + 2.2, labels=order)
        for category in order:
            shares = 100 * shown.loc[shown["category"] == category, "share"].astype(float)
            if len(shares) > 1:
                ax.plot(
                    [shares.min(), shares.max()], [ys[category]] * 2, color="#b0b0b0", linewidth=1, zorder=1
                )
        for i, (name, part) in enumerate(shown.groupby("workload", sort=False)):
            n_cw, derived = int(part["n_cw"].iloc[0]), int(part["n_derived"].sum())
            label = f"{name} (n={n_cw}" + (f", {derived} derived)" if derived else ")")
            x = 100 * part["share"].to_numpy(float)
            y = part["category"].map(ys).to_numpy(float)
            color = (LINE_COLORS + EXTRA_COLORS)[i % (len(LINE_COLORS) + len(EXTRA_COLORS))]
            ax.scatter(x, y, marker=MARKERS[i % len(MARKERS)], color=color, label=label, zorder=3)
            offset = 9 if i % 2 == 0 else -11
            for xi, yi, rows in zip(x, y, part["rows"].to_numpy(), strict=True):
                ax.annotate(
                    str(int(rows)),
                    (xi, yi),
                    xytext=(0, offset),
                    textcoords="offset points",
                    ha="center",
                    va="center",
                    fontsize=7,
                )
        ax.set_yticks(range(len(order)), labels=order)
        for tick, category in zip(ax.get_yticklabels(), order, strict=True):
            tick.set_color(CATEGORY_COLORS.get(category, "black"))
        ax.set_ylim(len(order) - 0.5, -0.7)
        ax.set_xlabel("share of the workload's C→W rows (%)")
        ax.grid(axis="x", alpha=0.3)
        note = f"\nno categorized C→W rows: {', '.join(missing)}" if missing else ""
        ax.set_title(f"Diagnostic categories by workload (labels: rows) · {reader}{note}", fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
        paths.append(save(fig, out / f"{slug('kvd-category-dots', reader)}.png"))
    return paths


#: Figure 11's panels: Table 14's column, its title, and whether a higher value is preferred
PROFILE_PANELS = (
    ("err", "ERR", True),
    ("ecov", "ECov", True),
    ("delta_nll", "ΔNLL", False),
    ("kl", "KL", False),
    ("top50", "Top-50", True),
    ("ear", "EAR", True),
)
STRUCTURAL = "structural"


def _profile_cell(column: str) -> Callable[[pd.Series], CellValue]:
    def cell(row: pd.Series) -> CellValue:
        if row.get("status") != "ok":
            return np.nan, "N/A\nunsupported"
        if column in ("err", "ecov") and STRUCTURAL in str(row.get("coverage") or "").split("/"):
            return np.nan, "N/A (S)"  # structural addressability: coverage is not one, it is undefined
        value = row.get(column)
        return (np.nan, "N/A") if is_missing(value) else (float(value), f"{value:.3f}")

    return cell


@figure("kvd_settings_profile", "kvd_demand_settings")  # Figure 11
def settings_profile(settings: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 11 per task: Table 14 (``kvd_demand_settings``) as six panels, ERR, ECov, ΔNLL, KL, Top-50
    and EAR means of the cell's C→W rows by method and setting (their row counts are in the table).
    Structural ERR/ECov, unsupported cells and cells without a valid value are N/A, never 0 or 1; a panel
    with no valid value anywhere says so; each panel has its own scale (higher preferred: viridis, lower
    preferred: magma reversed)."""
    if settings.empty:
        return []
    paths = []
    for (task,), group in groups_of(settings, ["task"]):
        rows, cols = first_seen(group["compressor"]), order_settings(group["setting"])
        cells = cell_values(group, "compressor", "setting")
        fig, axes = new_figure(
            3 * (0.9 * len(cols) + 2.6),
            2 * (0.42 * len(rows) + 1.3),
            ncols=3,
            nrows=2,
            labels=rows,
            labelled=3,
        )
        for ax, (column, title, higher) in zip(axes, PROFILE_PANELS, strict=True):
            values = pd.to_numeric(group.get(column, pd.Series(dtype=float)), errors="coerce")
            if values.isna().all():  # one note, not a grid of N/A cells (each costs a hatch and a label)
                ax.text(0.5, 0.5, f"{title}: N/A in every cell\n(no valid value)", ha="center", va="center")
                ax.set_axis_off()
                continue
            top = float(np.nanmax(values))
            limits = (
                (0.0, max(1.0, top))
                if higher
                else (min(0.0, float(np.nanmin(values.fillna(0)))), max(top, 1e-9))
            )
            cmap = "viridis" if higher else "magma_r"
            heat(ax, cells, rows, cols, _profile_cell(column), cmap, limits, title)
            ax.set_title(f"{title} ({'higher' if higher else 'lower'} preferred)", fontsize=9)
        fig.suptitle(f"C→W diagnostics by method and setting (Table 14) · {task}", fontsize=10)
        paths.append(save(fig, out / f"{slug('kvd-settings-profile', task)}.png"))
    return paths
