"""TPBench Figure 3 as the paper draws it, from ``tpbench_deletion``.

The paper's Figure 3 (MultiWOZ P2, seed 42): three columns — full context, the update turn removed,
one matched irrelevant turn removed — each a dialogue sketch (initial goal turn, unrelated turn, update
turn, answer-repeating turn) with the removed turn in red, and what the reader answers under it: the
current value (strict accuracy), the superseded value and no answer (explicit abstention). A heavy box
marks the condition whose answers change: here the deletion, when the exact McNemar test against its
matched control gives p < 0.05. One PNG per corpus, task, reader and seed (``all`` pools seeds).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from kvx.aggregate.catalogue import figure
from kvx.aggregate.publish.plots import NA_COLOR, groups_of, is_missing, new_figure, save, slug

__all__ = ["tpbench_figure3"]

#: the dialogue sketch, top to bottom, and which turn each column removes
TURNS = ("initial goal turn", "unrelated turn", "update turn", "answer-repeating turn")
COLUMNS = (("full", "full context", None), ("deleted", "remove the update turn", 2))
COLUMNS += (("control", "remove one matched\nirrelevant turn", 1),)
#: the three answers counted under each column: (label, the table's column suffix)
ANSWERS = (("current value", "strict_accuracy"), ("superseded value", "superseded_rate"))
ANSWERS += (("no answer", "abstain_rate"),)
REMOVED, KEPT, BAR = "#D55E00", "#e8e8e8", "#0072B2"
CHANGED_P = 0.05


@figure("tpbench_figure3", "tpbench_deletion")
def tpbench_figure3(deletion: pd.DataFrame, out: Path) -> list[Path]:
    """TPBench Figure 3 from the update-turn deletion and its matched control (one PNG per corpus,
    task, reader and seed)."""
    if deletion.empty:
        return []
    update = deletion[deletion["deletion"] == "update"]
    paths = []
    for (corpus, task, reader, seed), rows in groups_of(update, ["corpus", "task", "reader", "seed"]):
        row = rows.iloc[0]
        fig, axes = new_figure(9.0, 4.6, ncols=len(COLUMNS))
        changed = not is_missing(row["mcnemar_p"]) and float(row["mcnemar_p"]) < CHANGED_P
        for ax, (side, title, removed) in zip(axes, COLUMNS, strict=True):
            _column(ax, row, side, title, removed, heavy=changed and side == "deleted")
        fig.suptitle(
            f"TPBench Figure 3 · {corpus} · {task} · {reader} · seed {seed} "
            f"(n = {row['n_paired']} paired; red: the turn removed)",
            fontsize=9,
        )
        paths.append(save(fig, out / f"{slug('tpbench_figure3', corpus, task, reader, seed)}.png"))
    return paths


def _column(ax: Axes, row: pd.Series, side: str, title: str, removed: int | None, heavy: bool) -> None:
    """One condition: the dialogue sketch (the removed turn red) over its three answer rates."""
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title(title, fontsize=9)
    for i, turn in enumerate(TURNS):
        y = 0.92 - 0.1 * i
        gone = i == removed
        ax.add_patch(Rectangle((0.05, y - 0.07), 0.9, 0.08, color=REMOVED if gone else KEPT))
        label = f"{turn} removed" if gone else turn
        ax.text(
            0.5, y - 0.03, label, ha="center", va="center", fontsize=7, color="white" if gone else "black"
        )
    for j, (label, suffix) in enumerate(ANSWERS):
        y = 0.42 - 0.13 * j
        value = row.get(f"{side}_{suffix}", math.nan)
        missing = is_missing(value)
        width = 0.0 if missing else 0.55 * float(value)
        ax.text(0.05, y + 0.05, label, fontsize=7, va="bottom")
        ax.add_patch(Rectangle((0.05, y), 0.55, 0.045, color=NA_COLOR if missing else "#f4f4f4"))
        ax.add_patch(Rectangle((0.05, y), width, 0.045, color=BAR))
        ax.text(0.63, y + 0.022, "N/A" if missing else f"{float(value):.3f}", fontsize=8, va="center")
    ax.add_patch(
        Rectangle((0.01, 0.01), 0.98, 0.98, fill=False, linewidth=3.0 if heavy else 0.8, edgecolor="black")
    )
