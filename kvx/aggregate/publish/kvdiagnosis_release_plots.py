"""KVDiagnosis Figure 12 (context-demand labels and scores) and Figure 9B (slot ECov per cell and
reader), from ``kvd_demand_profile`` and ``kvd_slot_ecov_cells``. An N/A-only frame draws nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvx.aggregate.catalogue import figure
from kvx.aggregate.publish.canvas import save_png

LOW_COVERAGE = 0.5  # Table 4's low mapped-coverage threshold, dashed in Figure 9B
DPI = 150  # as kvx.aggregate.publish.plots (which imports this module, so not imported from it)


def _figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(min(width, 30.0), min(height, 30.0)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(np.atleast_1d(fig.subplots(1, ncols)).ravel())


def _save(fig: Figure, path: Path) -> Path:
    return save_png(fig, path, DPI)


def _settings(labels: pd.Series) -> list[str]:
    """Numeric setting labels ascending, then the others ("-") in first-seen order."""
    seen = list(dict.fromkeys(labels.astype(str)))
    numeric = sorted((s for s in seen if s.replace(".", "", 1).isdigit()), key=float)
    return numeric + [s for s in seen if s not in numeric]


@figure("kvd_demand_profile", "kvd_demand_profile")  # KVDiagnosis Figure 12
def demand_profile_plot(profile: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 12: left, the share of labelled C→W rows at each value of the five task-template labels;
    right, the distribution of the distribution and access demand scores."""
    ok = profile[profile.get("status", pd.Series(dtype=str)) == "ok"] if not profile.empty else profile
    if ok.empty:
        return []
    fig, (left, right) = _figure(11.0, 4.0, ncols=2)
    labels = ok[ok["panel"] == "labels"]
    axes = list(dict.fromkeys(labels["axis"]))
    values = sorted(set(labels["value"]))
    width = 0.8 / max(len(values), 1)
    for i, value in enumerate(values):
        shares = [
            float(labels.loc[(labels["axis"] == a) & (labels["value"] == value), "share"].sum()) for a in axes
        ]
        left.bar(np.arange(len(axes)) + i * width, shares, width, label=f"{value:g}")
    ticks = np.arange(len(axes)) + width * (len(values) - 1) / 2
    left.set_xticks(ticks, labels=axes, rotation=20, fontsize=8)
    left.set_ylabel("share of labelled C→W rows")
    left.set_title("task-template labels")
    left.legend(title="label", fontsize=7)
    for axis, part in ok[ok["panel"] == "scores"].groupby("axis", sort=True):
        part = part.sort_values("value")
        right.plot(part["value"], part["share"], marker="o", label=f"{axis} (n={int(part['rows'].sum())})")
    right.set_xlabel("demand score")
    right.set_ylabel("share of rows with the score")
    right.set_ylim(0, 1.05)
    right.set_title("metric-derived demand scores")
    right.legend(fontsize=7)
    return [_save(fig, out / "kvd_demand_profile.png")]


@figure("kvd_slot_ecov", "kvd_slot_ecov_cells")  # KVDiagnosis Figure 9B
def slot_ecov_plot(cells: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 9B: mean slot ECov of each compressor's mapped C→W rows, one panel per setting, one bar per
    reader; dashed: the low-coverage threshold."""
    if cells.empty:
        return []
    settings = _settings(cells["setting"])
    readers = sorted(set(cells["reader"].astype(str)))
    compressors = sorted(set(cells["compressor"].astype(str)))
    fig, axes = _figure(4.0 * len(settings), 3.6, ncols=len(settings))
    width = 0.8 / len(readers)
    for ax, setting in zip(axes, settings, strict=True):
        panel = cells[cells["setting"].astype(str) == setting]
        for i, reader in enumerate(readers):
            ys = [
                float(panel.loc[(panel["compressor"] == c) & (panel["reader"] == reader), "ecov"].mean())
                for c in compressors
            ]
            xs = np.arange(len(compressors)) + i * width
            ax.bar(xs, ys, width, label=reader)
            for x, y in zip(xs, ys, strict=True):
                if np.isnan(y):  # no mapped C→W row for this reader: N/A, never a 0 bar
                    ax.text(x, 0.02, "N/A", rotation=90, ha="center", fontsize=6, color="0.4")
        ax.axhline(LOW_COVERAGE, linestyle="--", color="0.3", linewidth=1)
        ax.set_xticks(
            np.arange(len(compressors)) + width * (len(readers) - 1) / 2, labels=compressors, rotation=30
        )
        ax.set_ylim(0, 1)
        ax.set_title(f"setting {setting} (a ratio is the share removed)", fontsize=9)
    axes[0].set_ylabel("mean slot ECov (C→W, mapped)")
    axes[0].legend(fontsize=7)
    return [_save(fig, out / "kvd_slot_ecov.png")]
