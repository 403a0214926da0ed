"""Figures of the aggregate report: KVDiagnosis Figures 3, 4B, 6 and Table 4; ragscale Figure 2.

Each function takes one analysis frame and an output directory, writes one PNG per panel group and
returns the written paths; an empty frame writes nothing. Undefined cells (NaN, unsupported) are
drawn gray and hatched with the text "N/A" so they can never be read as a measured 0.
Figures are built on the Agg canvas directly (no pyplot state, no display needed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps, rcParams, ticker
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Rectangle
from matplotlib.textpath import TextPath

from kvx.aggregate.catalogue import Figure as Declared
from kvx.aggregate.catalogue import figure
from kvx.aggregate.publish import kept_figures
from kvx.aggregate.publish.canvas import save_png
from kvx.aggregate.workers import can_fork, cpus, pool
from kvx.core.records import CELL, PANEL_METRIC, TASK_READER
from kvx.diagnostics.categories import CATEGORIES

__all__ = [
    "CATEGORY_COLORS",
    "EXTRA_COLORS",
    "LINE_COLORS",
    "MARKERS",
    "CellValue",
    "category_bars",
    "category_order",
    "cell_values",
    "count_text",
    "first_seen",
    "groups_of",
    "heat",
    "is_missing",
    "new_figure",
    "save",
    "slug",
    "forest_plot",
    "frontier_plot",
    "heatmaps",
    "jaccard_heatmap",
    "order_settings",
    "plot_all",
    "reader_scaling",
    "tpbench_rank_change",
]

DPI = 150
NA_COLOR = "#d0d0d0"
NA_HATCH_COLOR = "#8c8c8c"
# Okabe-Ito (colorblind-safe) for the six Table-4 rules; conflicting/ambiguous get purple/gray.
CATEGORY_COLORS: dict[str, str] = dict(
    zip(
        CATEGORIES,
        ("#0072B2", "#56B4E9", "#D55E00", "#E69F00", "#009E73", "#F0E442", "#CC79A7", "#999999"),
        strict=True,
    )
)
EXTRA_COLORS = ("#000000", "#661100", "#332288", "#117733")
_POOLED = "all"
PANELS_PER_ROW = 5  # small multiples wrap after this many panels
#: inches of row labels every figure's width already leaves room for (about 18 characters); longer
#: labels (a plugin's composed compressor, a pair of them) widen the figure by the rest
LABEL_ROOM = 1.5


def order_settings(labels: Iterable[object]) -> list[str]:
    """Distinct setting labels: numeric ones ascending, then the others in first-seen order.

    Mixed sweeps (retention ratios next to "4b"-style bit widths) keep every label visible.
    """
    seen = list(dict.fromkeys(str(label) for label in labels))
    numeric = [s for s in seen if _as_float(s) is not None]
    other = [s for s in seen if _as_float(s) is None]
    return sorted(numeric, key=lambda s: _as_float(s) or 0.0) + other


@figure("heatmaps", "matrix", split=TASK_READER)
def heatmaps(matrix: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 3 per task (pooled included) x reader: (A) mean task score, (B) C→W rate.

    Rows are compressors, columns settings. The FullCache control is not a cell; its score,
    accuracy and n_FC go into the title because every C→W rate is relative to it.
    """
    if matrix.empty:
        return []
    paths = []
    for (task, reader), group in groups_of(_tasks_pooled_last(matrix), TASK_READER):
        compressed = group[group["compressor"] != "FullCache"]
        if compressed.empty:
            continue
        rows = first_seen(compressed["compressor"])
        cols = order_settings(compressed["setting"])
        cells = cell_values(compressed, "compressor", "setting")
        fig, (ax_a, ax_b) = new_figure(
            2 * (1.1 * len(cols) + 2.2), 0.55 * len(rows) + 1.8, ncols=2, labels=rows, labelled=2
        )
        heat(ax_a, cells, rows, cols, _score_cell, "viridis", (0.0, 100.0), "mean task score (%)")
        heat(ax_b, cells, rows, cols, _rate_cell, "magma_r", (0.0, _rate_vmax(compressed)), "C→W rate (%)")
        ax_a.set_title("(A) mean task score (%)")
        ax_b.set_title("(B) C→W rate (%), C→W / n_FC")
        fig.suptitle(f"{task} · {reader}\n{_fullcache_line(group)}", fontsize=10)
        paths.append(save(fig, out / f"{slug('heatmap', task, reader)}.png"))
    return paths


@figure("jaccard_heatmap", "matched", split=("reader",))
def jaccard_heatmap(matched: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 4B per reader, as small multiples: one panel per task (pooled last), rows compressor pairs,
    columns settings, one shared color scale. One figure instead of one per pair keeps dozens of pairs
    readable side by side (and fast to draw).

    Counts are annotated because a low Jaccard only means "different failures" next to its union.
    """
    if matched.empty:
        return []
    paths = []
    for (reader,), group in groups_of(matched, ["reader"]):
        group = group.assign(
            pair=group["compressor_a"].astype(str) + " vs " + group["compressor_b"].astype(str)
        )
        rows = first_seen(group["pair"])
        cols = order_settings(group["setting"])
        panels = [
            (task, cell_values(panel, "pair", "setting"))
            for (task,), panel in groups_of(_tasks_pooled_last(group), ["task"])
        ]
        fig = jaccard_panels(panels, rows, cols, _jaccard_cell, row_height=0.32)
        fig.suptitle(f"Failure-set Jaccard of compressor pairs · reader {reader}", fontsize=10)
        paths.append(save(fig, out / f"{slug('jaccard', reader)}.png"))
    return paths


def jaccard_panels(
    panels: Sequence[tuple[str, Mapping[tuple[str, str], pd.Series]]],
    rows: Sequence[str],
    cols: Sequence[str],
    cell: Callable[[pd.Series], CellValue],
    row_height: float,
) -> Figure:
    """Jaccard heat maps as small multiples on one colour scale (0–1), wrapping after
    ``PANELS_PER_ROW`` panels; only the first panel of a row keeps its row labels."""
    ncols = min(len(panels), PANELS_PER_ROW)
    nrows = -(-len(panels) // ncols)
    width = ncols * (0.9 * len(cols) + 1.0) + 3.0
    fig, axes = new_figure(width, nrows * (row_height * len(rows) + 1.2) + 1.0, ncols, nrows, rows)
    for i, (ax, (title, cells)) in enumerate(zip(axes, panels, strict=False)):
        heat(ax, cells, rows, cols, cell, "viridis", (0.0, 1.0), "")
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        if i % ncols:
            ax.tick_params(labelleft=False)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.colorbar(axes[0].images[0], ax=axes, label="Jaccard", shrink=0.8)
    return fig


@figure("category_bars", "categories")
def category_bars(categories: pd.DataFrame, out: Path) -> list[Path]:
    """Table 4 as stacked shares per compressor@setting, one figure per task x reader.

    Each figure ends with the pooled ("all") bar so a cell can be read against the whole ledger. Cells
    without diagnostics have no categories: they are omitted, never drawn as empty bars.
    """
    if categories.empty:
        return []
    categories = categories[categories["share"].notna()]  # N/A cells (no diagnostics) draw no bar
    if categories.empty:
        return []
    pooled = categories[categories["task"] == _POOLED]
    per_cell = categories[categories["task"] != _POOLED]
    order = category_order(categories["category"])
    groups = list(groups_of(per_cell, TASK_READER)) or [((_POOLED, _POOLED), per_cell)]
    paths = []
    for (task, reader), group in groups:
        bars = _bars(group, "") + _bars(pooled, "all tasks (pooled)")
        if not bars:
            continue
        fig, (ax,) = new_figure(9.0, 0.45 * len(bars) + 1.8, labels=[label for label, _ in bars])
        _stacked(ax, bars, order)
        title = "all tasks (pooled)" if task == _POOLED else f"{task} · {reader}"
        ax.set_title(f"C→W diagnostic categories: {title}", fontsize=10)
        paths.append(save(fig, out / f"{slug('categories', task, reader)}.png"))
    return paths


@figure("forest_plot", "separation")
def forest_plot(separation: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 6: stratified AUROC per diagnostic with its 95% interval against the 0.5 baseline."""
    if separation.empty:
        return []
    n = len(separation)
    labels = [_forest_label(row) for row in separation.itertuples(index=False)]
    fig, (ax,) = new_figure(7.5, 0.5 * n + 1.4, labels=labels)
    ys = np.arange(n)
    for y, row in zip(ys, separation.itertuples(index=False), strict=True):
        _forest_row(ax, float(y), row)
    ax.axvline(0.5, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(ys, labels=labels)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("stratified AUROC, C→W vs C→C (95% interval, descriptive)")
    ax.set_title("Diagnostic separation of failed from successful compression", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return [save(fig, out / "forest_separation.png")]


@figure("reader_scaling", "audit_readers", split=PANEL_METRIC)
def reader_scaling(audit_readers: pd.DataFrame, out: Path) -> list[Path]:
    """ragscale Figure 2 per task x evidence x compressor x setting x metric: raw vs compressed score.

    Points above the diagonal gain under compression; a least-squares slope below 1 means the
    raw reader upgrade is attenuated. Groups with fewer than two valid readers are skipped.
    """
    if audit_readers.empty:
        return []
    paths = []
    for key, group in groups_of(audit_readers, [c for c in PANEL_METRIC if c in audit_readers]):
        valid = group[np.isfinite(group["raw_mean"]) & np.isfinite(group["comp_mean"])]
        if len(valid) < 2:
            continue
        *task, compressor, setting, metric = key
        fig, (ax,) = new_figure(6.0, 6.0)
        _scaling(ax, valid)
        ax.set_title(f"{' · '.join(task)} · {compressor}@{setting} · {metric}", fontsize=10)
        paths.append(save(fig, out / f"{slug('scaling', *key)}.png"))
    return paths


@figure("contrast_plot", "contrast", split=(*TASK_READER, "anchor", "structural"))
def contrast_plot(contrast: pd.DataFrame, out: Path) -> list[Path]:
    """kv-exec-bench's contrast per task x reader x pair: the share of its FullCache value each
    metric keeps across settings, string anchor dashed next to its structural metric solid.
    A metric whose FullCache value is 0 has no share kept: it is named N/A, not drawn at 0."""
    if contrast.empty:
        return []
    paths = []
    for key, group in groups_of(contrast, [*TASK_READER, "anchor", "structural"]):
        task, reader, anchor, structural = key
        fig, (ax,) = new_figure(7.5, 4.5)
        for i, (compressor, rows) in enumerate(group.sort_values("ratio").groupby("compressor", sort=True)):
            color = LINE_COLORS[i % len(LINE_COLORS)]
            for metric, column, style in (
                (structural, "structural_kept", "-o"),
                (anchor, "anchor_kept", "--s"),
            ):
                values = rows[column]
                label = f"{compressor}: {metric}" + (
                    " (N/A: FullCache value 0)" if values.isna().all() else ""
                )
                ax.plot(rows["ratio"], values, style, color=color, label=label)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
        ax.set_ylim(0.0, 1.1)
        ax.set_xlabel("compression ratio (share of the cache removed)")
        ax.set_ylabel("share of the FullCache value kept")
        ax.set_title(f"{task} · {reader}: {anchor} (dashed) vs {structural} (solid)", fontsize=10)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        ax.grid(alpha=0.3)
        paths.append(save(fig, out / f"{slug('contrast', *key)}.png"))
    return paths


@figure("contrast_ratio_plot", "contrast_by_ratio", split=TASK_READER)  # kv-exec-bench Figure 1
def contrast_ratio_plot(by_ratio: pd.DataFrame, out: Path) -> list[Path]:
    """kv-exec-bench Figure 1 per task x reader: the share of its FullCache value each anchor (dashed)
    and structural metric (solid) keeps, averaged over the compressors at each ratio, one line each; the
    FullCache point (ratio 0) keeps 1 by definition. A ratio where no compressor's share is defined is a
    gap, named N/A in the legend, never drawn at 0."""
    drawn = by_ratio[by_ratio["role"].isin(("anchor", "structural"))] if not by_ratio.empty else by_ratio
    if drawn.empty:
        return []
    paths = []
    for (task, reader), group in groups_of(drawn, TASK_READER):
        fig, (ax,) = new_figure(7.0, 4.5)
        metrics = sorted(
            group["metric"].unique(), key=lambda m: (group[group["metric"] == m]["role"].iloc[0], m)
        )
        for i, metric in enumerate(metrics):
            rows = group[group["metric"] == metric].sort_values("ratio")
            role = str(rows["role"].iloc[0])
            na = rows.loc[rows["kept"].isna(), "ratio"]
            label = f"{metric} ({role})" + (f" N/A at {', '.join(f'{r:g}' for r in na)}" if len(na) else "")
            x = np.concatenate([[0.0], rows["ratio"].to_numpy(float)])
            y = np.concatenate([[1.0], rows["kept"].to_numpy(float)])
            style = "--s" if role == "anchor" else "-o"
            ax.plot(x, y, style, color=LINE_COLORS[i % len(LINE_COLORS)], label=label)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
        top = float(np.nanmax(group["kept"].to_numpy(float), initial=1.0))  # a share may pass 1: keep it
        ax.set_ylim(-0.02, max(1.1, top + 0.1))
        ax.set_xlim(-0.03, max(0.8, float(group["ratio"].max()) + 0.05))
        ax.set_xlabel("compression ratio (share of the cache removed; 0 = FullCache)")
        ax.set_ylabel("share of the FullCache value kept")
        n = int(group["n_compressors"].max())
        ax.set_title(f"{task} · {reader}: mean over {n} compressor(s) per ratio", fontsize=10)
        ax.legend(fontsize=8, loc="lower left")
        ax.grid(alpha=0.3)
        paths.append(save(fig, out / f"{slug('contrast_by_ratio', task, reader)}.png"))
    return paths


LINE_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
_FRONTIER_PANELS = (
    ("accuracy", "(A) accuracy, higher is better", "accuracy (%)"),
    ("cw_rate", "(B) C→W rate, lower is better", "C→W rate (%), C→W / n_FC"),
)


@figure("frontier_plot", "frontier", split=TASK_READER)
def frontier_plot(frontier: pd.DataFrame, out: Path) -> list[Path]:
    """Accuracy and C→W rate against the measured KV bytes ratio, one figure per task x reader: each
    compressor one color and marker, its settings labelled points, FullCache a star at 1. The Pareto
    front is a step line through ringed points: what the best method achieves with at most that many
    bytes. Rows left out (no cost data) are counted in the title and listed in the frontier table.
    """
    if frontier.empty:
        return []
    paths = []
    for (task, reader), group in groups_of(_tasks_pooled_last(frontier), TASK_READER):
        placed = group[group["left_out"] == ""]
        methods = sorted(set(placed["compressor"]) - {"FullCache"})
        if not methods:
            continue
        styles = {
            m: (LINE_COLORS[i % len(LINE_COLORS)], MARKERS[i % len(MARKERS)]) for i, m in enumerate(methods)
        }
        fig, axes = new_figure(13.0, 5.5, ncols=2)
        for ax, (metric, title, label) in zip(axes, _FRONTIER_PANELS, strict=True):
            _front_panel(ax, placed[placed["metric"] == metric], styles)
            ax.set_title(title, fontsize=10)
            ax.set_ylabel(label)
        left = group.loc[group["left_out"] != "", ["compressor", "setting"]].drop_duplicates()
        note = f"\n{len(left)} row(s) left out, see the frontier table" if len(left) else ""
        fig.suptitle(f"{task} · {reader}: accuracy and C→W rate vs KV bytes{note}", fontsize=10)
        paths.append(save(fig, out / f"{slug('frontier', task, reader)}.png"))
    return paths


def _front_panel(ax: Axes, points: pd.DataFrame, styles: Mapping[str, tuple[str, str]]) -> None:
    for compressor, rows in points.groupby("compressor", sort=True):
        x, y = rows["bytes_ratio"].to_numpy(float), 100 * rows["rate"].to_numpy(float)
        if compressor == "FullCache":
            ax.scatter(x, y, marker="*", s=180, color="black", label="FullCache", zorder=4)
            continue
        color, marker = styles[str(compressor)]
        ax.scatter(x, y, marker=marker, s=40, color=color, label=str(compressor), zorder=3)
        for xi, yi, setting in zip(x, y, rows["setting"].astype(str), strict=True):
            ax.annotate(setting, (xi, yi), xytext=(5, 4), textcoords="offset points", fontsize=7, color=color)
    front = points[points["on_front"].to_numpy(dtype=bool, na_value=False)]
    front = front.sort_values(["bytes_ratio", "rate"], kind="stable")
    x, y = front["bytes_ratio"].to_numpy(float), 100 * front["rate"].to_numpy(float)
    ax.step(x, y, where="post", color="gray", linewidth=1.2, zorder=2, label="Pareto front")
    ring = {"s": 150, "facecolors": "none", "edgecolors": "black", "linewidths": 1.2, "zorder": 5}
    ax.scatter(x, y, label="on the front", **ring)
    ratios = points["bytes_ratio"]
    if (ratios > 0).all():  # a log axis, in plain numbers; a decade or less also labels its minor ticks
        ax.set_xscale("log")
        plain = ticker.FuncFormatter(lambda value, _: f"{value:g}")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain if ratios.max() <= 10 * ratios.min() else ticker.NullFormatter())
        ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("KV bytes held at decoding start, compressed / FullCache")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="best")


_RANK_COLUMNS = (
    ("P1-strict", "p1_strict_rank"),
    ("P1-loose", "p1_loose_rank"),
    ("P2-strict", "p2_strict_rank"),
)


@figure("tpbench_rank_change", "tpbench_rank_change")
def tpbench_rank_change(ranks: pd.DataFrame, out: Path) -> list[Path]:
    """TPBench Figure 2 per reader x budget, one panel per corpus: each method's rank under P1-strict,
    P1-loose and P2-strict (1 = best at the top, ties averaged), among the methods both probes share.

    Solid lines are position-only turn selectors, dashed the others; a line falling steeply into
    P2-strict marks a method that keeps the opening of the dialogue but loses the revision. A method
    without ranks (not run under the paper's rule) draws no line and is named under the panel's title.
    """
    if ranks.empty:
        return []
    paths = []
    for (reader, budget), group in groups_of(ranks, ["reader", "budget"]):
        panels = list(groups_of(group, ["corpus", "p1_task", "p2_task"]))
        most = max(len(panel) for _, panel in panels)
        methods = sorted(group["method"].astype(str).unique())  # one color per method in every panel
        colors = {m: LINE_COLORS[i % len(LINE_COLORS)] for i, m in enumerate(methods)}
        fig, axes = new_figure(5.2 * len(panels), 0.42 * most + 2.0, ncols=len(panels))
        for ax, ((corpus, p1_task, p2_task), panel) in zip(axes, panels, strict=True):
            ranked = panel.dropna(subset=[column for _, column in _RANK_COLUMNS])
            _rank_lines(ax, ranked, colors)
            unranked = ", ".join(sorted(set(panel["method"].astype(str)) - set(ranked["method"].astype(str))))
            title = f"{corpus or 'corpus N/A'}\n{p1_task} vs {p2_task}"
            ax.set_title(title + (f"\nunranked (not run): {unranked}" if unranked else ""), fontsize=9)
        fig.suptitle(
            f"TPBench rank changes · {reader} · {budget} (solid: position-only selectors)", fontsize=10
        )
        paths.append(save(fig, out / f"{slug('tpbench_rank_change', reader, budget)}.png"))
    return paths


def _rank_lines(ax: Axes, panel: pd.DataFrame, colors: Mapping[str, str]) -> None:
    """One line per method; methods tied at the last column share one label there."""
    xs = np.arange(len(_RANK_COLUMNS))
    ends: dict[float, list[str]] = {}
    for row in panel.itertuples(index=False):
        ys = [float(getattr(row, column)) for _, column in _RANK_COLUMNS]
        style = "-" if row.kind == "position" else "--"
        ax.plot(xs, ys, style, marker="o", color=colors[str(row.method)], label=str(row.method))
        ends.setdefault(ys[-1], []).append(str(row.method))
    for y, names in ends.items():
        ax.annotate(
            ", ".join(names), (xs[-1], y), xytext=(8, 0), textcoords="offset points", va="center", fontsize=7
        )
    n = len(panel)
    ax.set_xticks(xs, labels=[label for label, _ in _RANK_COLUMNS])
    ax.set_yticks(np.arange(1, n + 1))
    ax.set_ylim(n + 0.5, 0.5)
    ax.set_xlim(-0.3, len(xs) - 0.4)
    ax.set_ylabel("rank (1 = best)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)


Job = tuple[Callable[[pd.DataFrame, Path], list[Path]], pd.DataFrame, Path, Path | None]


def plot_all(
    tables: Mapping[str, pd.DataFrame], out: Path, declared: Sequence[Declared], workers: int | None = None
) -> dict[str, list[Path]]:
    """Every ``declared`` figure whose table is in ``tables``, by figure key, drawn by ``workers``
    processes (default: the CPUs this process may use)."""
    drawer = Drawer(out, declared, workers)
    for name, frame in tables.items():
        drawer.add(name, frame)
    return drawer.figures()


class Drawer:
    """Draws each table's figures in worker processes as soon as the table exists (``add`` is
    ``analyse``'s ``on_table``), so drawing, most of an aggregate's time, overlaps the analysis."""

    def __init__(
        self, out: Path, declared: Sequence[Declared], workers: int | None = None, kept: Path | None = None
    ) -> None:
        self.out = out
        self.kept = kept  # the cache of figures already drawn for the same tables (``kept_figures``)
        self.declared = declared
        workers = cpus() if workers is None else workers
        self.executor = pool(workers) if can_fork(workers) else None
        self.drawn: dict[str, list[Any]] = {}  # figure key -> futures (path lists when drawn here)

    def add(self, name: str, frame: pd.DataFrame) -> None:
        for fig in self.declared:
            if fig.table != name:
                continue
            for part in _parts(frame, fig.split):
                job: Job = (fig.draw, part, self.out, self.kept)
                if self.executor is None or part.empty:
                    self.drawn.setdefault(fig.key, []).append(_draw_one(job))
                else:
                    self.drawn.setdefault(fig.key, []).append(self.executor.submit(_draw_one, job))

    def figures(self) -> dict[str, list[Path]]:
        """Every figure drawn, by figure key (a key whose table never came is absent)."""
        try:
            figures: dict[str, list[Path]] = {}
            for key, results in self.drawn.items():
                for result in results:
                    figures.setdefault(key, []).extend(
                        result if isinstance(result, list) else result.result()
                    )
            return figures
        finally:
            if self.executor is not None:
                self.executor.shutdown()

    def cancel(self) -> None:
        """Drop the figures not begun and return at once (the aggregate is leaving: Ctrl-C, bad input)."""
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


def _parts(frame: pd.DataFrame, keys: Sequence[str]) -> list[pd.DataFrame]:
    """The frame split into one part per figure, in the order the function itself would draw them."""
    keys = [k for k in keys if k in frame]
    if frame.empty or not keys:
        return [frame]
    ordered = _tasks_pooled_last(frame) if "task" in keys else frame
    return [group for _, group in groups_of(ordered, keys)]


def _draw_one(job: Job) -> list[Path]:
    plot, frame, out, kept = job
    return kept_figures.draw(plot, frame, out, kept)


# --- grouping and labels -------------------------------------------------------------------------


def _as_float(label: str) -> float | None:
    try:
        value = float(label)
    except ValueError:
        return None
    return value if np.isfinite(value) else None


def first_seen(values: pd.Series) -> list[str]:
    return list(dict.fromkeys(str(v) for v in values))


def groups_of(frame: pd.DataFrame, keys: list[str]) -> Iterable[tuple[tuple[str, ...], pd.DataFrame]]:
    """Groups in first-seen order; keys as strings so labels and file names agree."""
    for key, group in frame.groupby(keys, sort=False, dropna=False):
        yield tuple(str(k) for k in key), group


def _tasks_pooled_last(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("task", key=lambda s: s == "pooled", kind="stable")


def cell_values(frame: pd.DataFrame, row_key: str, col_key: str) -> dict[tuple[str, str], pd.Series]:
    return {(str(r[row_key]), str(r[col_key])): r for _, r in frame.iterrows()}


def slug(*parts: Hashable) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(str(p) for p in parts)).strip("-")


def _pct(value: object) -> str:
    return "N/A" if is_missing(value) else f"{100 * float(value):.1f}%"


def count_text(value: object) -> str:
    return "N/A" if is_missing(value) else str(int(float(value)))


def is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float | np.floating) and not np.isfinite(value))


# --- heatmap cells -------------------------------------------------------------------------------

CellValue = tuple[float, str]


def _na_text(row: pd.Series) -> str:
    unsupported = row["n_supported"] == 0 and row["n_unsupported"] > 0
    return "N/A\n(unsupported)" if unsupported else "N/A"


def _score_cell(row: pd.Series) -> CellValue:
    value = row["quality"]
    return (np.nan, _na_text(row)) if is_missing(value) else (100 * value, f"{100 * value:.1f}")


def _rate_cell(row: pd.Series) -> CellValue:
    value = row["cw_rate"]
    if is_missing(value):
        return np.nan, _na_text(row)
    return 100 * value, f"{100 * value:.1f}\n{count_text(row['n_cw'])}/{count_text(row['n_fc'])}"


def _jaccard_cell(row: pd.Series) -> CellValue:
    counts = f"({count_text(row['intersection'])}/{count_text(row['union'])})"
    value = row["jaccard"]
    return (np.nan, f"N/A\n{counts}") if is_missing(value) else (value, f"{value:.2f}\n{counts}")


def _rate_vmax(compressed: pd.DataFrame) -> float:
    """Color scale for C→W rates: the next 10% step above the largest rate (at least 10%)."""
    top = compressed["cw_rate"].max(skipna=True)
    return 10.0 if is_missing(top) else float(max(10.0, 10 * np.ceil(10 * top)))


def _fullcache_line(group: pd.DataFrame) -> str:
    control = group[group["compressor"] == "FullCache"]
    if control.empty:
        return "FullCache: N/A (no control rows)"
    row = control.iloc[0]
    return (
        f"FullCache: score {_pct(row['quality'])}, accuracy {_pct(row['accuracy'])}, "
        f"n_FC = {count_text(row['n_fc'])} of {count_text(row['n_sources'])} sources"
    )


def heat(
    ax: Axes,
    cells: Mapping[tuple[str, str], pd.Series],
    rows: Sequence[str],
    cols: Sequence[str],
    cell: Callable[[pd.Series], CellValue],
    cmap_name: str,
    limits: tuple[float, float],
    label: str,
) -> None:
    """An annotated heatmap; absent and NaN cells are gray, hatched and labelled N/A. An empty ``label``
    draws no colorbar (small multiples share one)."""
    values = np.full((len(rows), len(cols)), np.nan)
    texts = [["N/A"] * len(cols) for _ in rows]
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            if (r, c) in cells:
                values[i, j], texts[i][j] = cell(cells[(r, c)])
    cmap = colormaps[cmap_name]
    norm = Normalize(*limits)
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="auto")
    for (i, j), value in np.ndenumerate(values):
        if np.isnan(value):
            ax.add_patch(_na_patch(j, i))
        # inside the axes: left out of the layout, which would otherwise measure every annotation
        ax.text(
            j,
            i,
            texts[i][j],
            ha="center",
            va="center",
            fontsize=8,
            color=_ink(cmap(norm(value))),
            in_layout=False,
        )
    ax.set_xticks(range(len(cols)), labels=list(cols))
    ax.set_yticks(range(len(rows)), labels=list(rows))
    ax.set_xlabel("setting")
    if label:
        ax.figure.colorbar(image, ax=ax, label=label, shrink=0.9)


def _na_patch(x: int, y: int) -> Rectangle:
    return Rectangle(
        (x - 0.5, y - 0.5), 1, 1, facecolor=NA_COLOR, edgecolor=NA_HATCH_COLOR, hatch="//", linewidth=0
    )


def _ink(rgba: Sequence[float]) -> str:
    """Black text on light cells, white on dark ones (NaN maps to the colormap's 'bad' = light)."""
    r, g, b = rgba[:3]
    light = rgba[3] == 0 or 0.299 * r + 0.587 * g + 0.114 * b > 0.5
    return "black" if light else "white"


# --- category bars -------------------------------------------------------------------------------

Bar = tuple[str, dict[str, float]]


def category_order(categories: pd.Series) -> list[str]:
    present = set(categories.astype(str))
    known = [c for c in CATEGORIES if c in present]
    return known + sorted(present - set(CATEGORIES))


def _bars(frame: pd.DataFrame, pooled_label: str) -> list[Bar]:
    """One bar per compressor@setting (or the single pooled bar) with its category shares."""
    bars = []
    for (_, _, compressor, setting), cell in groups_of(frame, CELL):
        name = pooled_label or f"{compressor}@{setting}"
        label = f"{name} (n={count_text(cell['rows'].sum())})"
        bars.append((label, dict(zip(cell["category"].astype(str), cell["share"].astype(float)))))
    return bars


def _stacked(ax: Axes, bars: Sequence[Bar], order: Sequence[str]) -> None:
    extra = iter(EXTRA_COLORS * len(order))
    colors = {c: CATEGORY_COLORS.get(c) or next(extra) for c in order}
    ys = np.arange(len(bars))
    left = np.zeros(len(bars))
    for category in order:
        shares = np.array([100 * shares.get(category, 0.0) for _, shares in bars])
        shares = np.nan_to_num(shares)
        patches = ax.barh(ys, shares, left=left, color=colors[category], label=category, height=0.7)
        for patch, share in zip(patches, shares, strict=True):
            if share >= 8:
                x, y = patch.get_x() + patch.get_width() / 2, patch.get_y() + patch.get_height() / 2
                ax.text(
                    x,
                    y,
                    f"{share:.0f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color=_ink(patch.get_facecolor()),
                )
        left += shares
    ax.set_yticks(ys, labels=[label for label, _ in bars])
    ax.set_ylim(len(bars) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of C→W rows (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, fontsize=8, frameon=False)


# --- forest plot ---------------------------------------------------------------------------------


def _forest_label(row: Any) -> str:
    return (
        f"{row.metric} ({row.direction} = risk)\n"
        f"C→W {count_text(row.n_cw)} / C→C {count_text(row.n_cc)}, {count_text(row.n_strata)} strata"
    )


def _forest_row(ax: Axes, y: float, row: Any) -> None:
    """Point and whiskers where defined; the right margin always states the estimate or N/A."""
    if not is_missing(row.auroc):
        # a percentile bootstrap interval need not contain the estimate: clip, never a negative whisker
        low = max(0.0, row.auroc - row.ci_low) if not is_missing(row.ci_low) else 0.0
        high = max(0.0, row.ci_high - row.auroc) if not is_missing(row.ci_high) else 0.0
        ax.errorbar(row.auroc, y, xerr=[[low], [high]], fmt="o", color="#0072B2", capsize=3)
    text = "N/A" if is_missing(row.auroc) else f"{row.auroc:.3f}"
    if not (is_missing(row.ci_low) or is_missing(row.ci_high)):
        text += f" [{row.ci_low:.3f}, {row.ci_high:.3f}]"
    ax.text(1.02, y, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8, clip_on=False)


# --- reader scaling ------------------------------------------------------------------------------


def _scaling(ax: Axes, valid: pd.DataFrame) -> None:
    x = valid["raw_mean"].to_numpy(float)
    y = valid["comp_mean"].to_numpy(float)
    lo, hi = min(x.min(), y.min()), max(x.max(), y.max())
    pad = max(0.05 * (hi - lo), 0.02)
    lims = (lo - pad, hi + pad)
    ax.plot(lims, lims, linestyle="--", color="gray", linewidth=1, label="raw = compressed")
    ax.scatter(x, y, color="#0072B2", zorder=3, label="reader")
    ends = [int(np.argmin(x)), int(np.argmax(x))]
    ax.scatter(
        x[ends],
        y[ends],
        s=260,
        facecolors="none",
        edgecolors="black",
        linewidths=1.5,
        zorder=4,
        label="lowest / highest raw reader",
    )
    if np.ptp(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
        ax.plot(
            lims,
            intercept + slope * np.asarray(lims),
            color="#D55E00",
            linewidth=1.5,
            label=f"least squares (slope {slope:.2f})",
        )
    for xi, yi, name in zip(x, y, valid["reader"].astype(str), strict=True):
        ax.annotate(name, (xi, yi), xytext=(9, 7), textcoords="offset points", fontsize=7)
    ax.set_xlim(lims)
    ax.set_ylim(lims)
    ax.set_aspect("equal")
    ax.set_xlabel("raw-evidence mean")
    ax.set_ylabel("compressed-evidence mean")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)


# --- figure plumbing -----------------------------------------------------------------------------


def new_figure(
    width: float, height: float, ncols: int = 1, nrows: int = 1, labels: Iterable[str] = (), labelled: int = 1
) -> tuple[Figure, list[Axes]]:
    """A constrained-layout figure, widened for ``labels`` (the row labels, drawn left of ``labelled``
    panels in a row): constrained layout gives up, warning, when labels leave the axes no width."""
    width += labelled * max(0.0, _text_inches(labels) - LABEL_ROOM)
    fig = Figure(figsize=(min(width, 30.0), min(height, 30.0)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(np.atleast_1d(fig.subplots(nrows, ncols)).ravel())


def _text_inches(labels: Iterable[str]) -> float:
    """The widest of ``labels`` as a y tick label is drawn (rcParams' size), in inches."""
    font = FontProperties(size=rcParams["ytick.labelsize"])
    return max((TextPath((0, 0), str(t), prop=font).get_extents().width / 72 for t in labels), default=0.0)


def save(fig: Figure, path: Path) -> Path:
    return save_png(fig, path, DPI)
