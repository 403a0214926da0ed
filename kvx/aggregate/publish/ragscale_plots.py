"""ragscale's Figures 1 and 3, drawn from the audit's tables (Figure 2 is ``plots.reader_scaling``).

- Figure 1 (``audit_endpoints``): the lowest- and highest-scoring raw readers' raw and compressed
  means as bars, each reader's gain above its pair, the upgrade before and after and the share lost.
- Figure 3, left (``audit_panel``): per panel and metric, the pair reversal rate after changing only
  the raw question half (open point) and under compression (filled), the middle 95% of the split
  excesses as a shaded bar from the raw rate, labelled with the median excess.
- Figure 3, right (``audit_shortlist``): the raw top three's raw and compressed means, the winner under
  each evidence condition marked.

Means and rates are drawn ×100 (percentage points for binary and [0, 1] scores); a figure whose table
has nothing defined draws nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from kvx.aggregate.catalogue import figure
from kvx.aggregate.publish.plots import LINE_COLORS, groups_of, is_missing, new_figure, save, slug
from kvx.core.records import PANEL, PANEL_METRIC

__all__ = ["endpoint_bars", "excess_flips_plot", "shortlist_plot"]

RAW_COLOR, COMP_COLOR = "#9ecae1", "#0072B2"


def _title(task: str, evidence: str, compressor: str, setting: str, metric: str) -> str:
    """A panel as the figures name it; a text compressor's ``text@-`` goes unsaid."""
    press = "" if (compressor, setting) == ("text", "-") else f" · {compressor}@{setting}"
    return f"{task} · {evidence}{press} · {metric}"


def _pp(value: Any) -> str:
    return "N/A" if is_missing(value) else f"{100 * float(value):+.1f} pp"


@figure("endpoint_bars", "audit_endpoints", split=PANEL_METRIC)  # ragscale Figure 1
def endpoint_bars(endpoints: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 1 per panel x metric: how compression moves each endpoint reader and their upgrade."""
    if endpoints.empty:
        return []
    paths = []
    for key, group in groups_of(endpoints, [c for c in PANEL_METRIC if c in endpoints]):
        row = group.iloc[0]
        means = [row.low_raw_mean, row.low_comp_mean, row.high_raw_mean, row.high_comp_mean]
        if any(is_missing(v) for v in means):
            continue
        fig, (ax,) = new_figure(6.5, 4.8)
        _endpoint_panel(ax, row)
        lost = "" if is_missing(row.lost_share) else f"; {100 * row.lost_share:.0f}% of it disappears"
        ax.set_title(
            f"{_title(*key)}\nreader upgrade {_pp(row.raw_upgrade)} raw → "
            f"{_pp(row.comp_upgrade)} compressed{lost}",
            fontsize=9,
        )
        paths.append(save(fig, out / f"{slug('endpoints', *key)}.png"))
    return paths


def _endpoint_panel(ax: Axes, row: Any) -> None:
    x = np.arange(2)
    width = 0.38
    raw = 100 * np.array([row.low_raw_mean, row.high_raw_mean], dtype=float)
    comp = 100 * np.array([row.low_comp_mean, row.high_comp_mean], dtype=float)
    ax.bar(x - width / 2, raw, width, color=RAW_COLOR, edgecolor="black", linewidth=0.6, label="raw evidence")
    ax.bar(x + width / 2, comp, width, color=COMP_COLOR, edgecolor="black", linewidth=0.6, label="compressed")
    for xi, top, gain in zip(x, np.maximum(raw, comp), (row.low_gain, row.high_gain), strict=True):
        ax.annotate(
            f"gain {_pp(gain)}", (xi, top), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8
        )
    names = [f"lowest raw\n{row.reader_low}", f"highest raw\n{row.reader_high}"]
    ax.set_xticks(x, labels=names, fontsize=8)
    ax.set_ylim(0, max(100.0, float(np.max(np.concatenate([raw, comp]))) * 1.12))
    ax.set_ylabel("mean score × 100")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)


@figure("excess_flips_plot", "audit_panel")  # ragscale Figure 3, left
def excess_flips_plot(panel: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 3 (left): reversal rates of raw-separated reader pairs, raw replay against compression,
    one row per panel x metric (HotpotQA EM, HotpotQA F1, MuSiQue EM ... as the paper orders them); a
    row without an eligible pair says N/A."""
    if panel.empty or not np.isfinite(panel["excess_flips"].astype(float)).any():
        return []
    # each panel's metrics together (the table lists panels within a metric), panels as first seen
    panel = pd.concat([group for _, group in groups_of(panel, PANEL)], ignore_index=True)
    labels = [_title(*key) for key in panel[PANEL_METRIC].astype(str).itertuples(index=False)]
    fig, (ax,) = new_figure(8.0, 0.55 * len(panel) + 1.6, labels=labels)
    ys = np.arange(len(panel))
    for y, row in zip(ys, panel.itertuples(index=False), strict=True):
        _flip_row(ax, float(y), row)
    ax.set_yticks(ys, labels=labels, fontsize=8)
    ax.set_ylim(len(panel) - 0.5, -0.5)
    ax.set_xlim(-2.0, 102.0)
    ax.set_xlabel("reversal rate of raw-separated pairs (%): median over row splits")
    ax.set_title(
        "Reader pairs change order more often under compressed evidence\n"
        "open: raw question half changed; filled: compressed; bar: 95% of split excesses",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    return [save(fig, out / "excess_flips.png")]


def _flip_row(ax: Axes, y: float, row: Any) -> None:
    if is_missing(row.excess_flips):
        ax.text(1.02, y, "N/A: no eligible pair", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
        return
    raw, comp = 100 * float(row.raw_reversal), 100 * float(row.comp_reversal)
    if not (is_missing(row.excess_low) or is_missing(row.excess_high)):
        low, high = raw + 100 * float(row.excess_low), raw + 100 * float(row.excess_high)
        ax.barh(y, high - low, left=low, height=0.45, color=COMP_COLOR, alpha=0.25, linewidth=0)
    ax.plot([raw, comp], [y, y], color="gray", linewidth=1, zorder=2)
    ax.scatter([raw], [y], s=45, facecolors="white", edgecolors=COMP_COLOR, linewidths=1.5, zorder=3)
    ax.scatter([comp], [y], s=45, color=COMP_COLOR, zorder=3)
    text = f"{_pp(row.excess_flips)} excess, median {row.eligible_pairs:g} eligible pairs"
    ax.text(1.02, y, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8, clip_on=False)


@figure("shortlist_plot", "audit_shortlist", split=PANEL_METRIC)  # ragscale Figure 3, right
def shortlist_plot(shortlist: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 3 (right) per panel x metric: the shortlisted readers from raw to compressed evidence,
    each condition's winner ringed."""
    if shortlist.empty:
        return []
    paths = []
    for key, group in groups_of(shortlist, [c for c in PANEL_METRIC if c in shortlist]):
        fig, (ax,) = new_figure(6.5, 4.8)
        _shortlist_panel(ax, group)
        row = group.iloc[0]
        verdict = "changes" if row.winner_changed else "stays"
        ax.set_title(
            f"{_title(*key)}\nraw top-{row.shortlist_size} shortlist: the winner {verdict}\n"
            f"raw: {row.raw_winner}; compressed: {row.comp_winner}",
            fontsize=8,
        )
        paths.append(save(fig, out / f"{slug('shortlist', *key)}.png"))
    return paths


def _shortlist_panel(ax: Axes, group: pd.DataFrame) -> None:
    for i, row in enumerate(group.itertuples(index=False)):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        ys = 100 * np.array([row.raw_mean, row.comp_mean], dtype=float)
        ax.plot(
            [0, 1], ys, marker="o", color=color, linewidth=1.8, label=f"{row.reader} (raw #{row.raw_rank})"
        )
        for x, won in ((0, row.raw_rank == 1), (1, row.comp_rank == 1)):
            if won:
                ax.scatter(
                    [x], [ys[x]], s=260, facecolors="none", edgecolors="black", linewidths=1.5, zorder=4
                )
        ax.annotate(
            f"{ys[1]:.1f}", (1, ys[1]), xytext=(8, 0), textcoords="offset points", va="center", fontsize=8
        )
    ax.set_xticks([0, 1], labels=["raw evidence", "compressed evidence"])
    ax.set_xlim(-0.3, 1.4)
    ax.set_ylabel("mean score × 100 (ringed: the winner)")
    ax.legend(fontsize=7, loc="best")
    ax.grid(axis="y", alpha=0.3)
