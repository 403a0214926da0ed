"""A leave-one-cell-out check of whether compressor-class dispersion predicts excess flips beyond raw
reader spacing (after ragscale B.7, Table 18).

The paper names its frozen index ("raw reader spacing with compressor-class dispersion estimated
without the held-out cell") and its baseline ("raw-upgrade spacing") but neither the release nor the
paper gives their formulas, so this is kvx's own, well-defined version (docs/rag-audit-controls.md):

* a cell is one audited panel and metric with at least 3 readers and a defined excess-flip median;
* spacing s = the median gap between adjacent raw reader means (readers sorted by raw mean);
* dispersion d = the cross-reader SD (ddof 1) of the readers' gains (compressed - raw mean); for the
  held-out cell it is the mean d of the OTHER cells with the same compressor (else of every other
  cell), so the held-out cell's own compressed scores never enter its index;
* baseline: excess ~ a + b s; index: excess ~ a + b (d / s), each an OLS line fitted on the other
  cells of the same metric (every training cell's index uses its class dispersion without the
  held-out cell too) and evaluated on the held-out cell by absolute error;
* the interval of the mean error difference (index - baseline) resamples tasks (benchmarks) with
  replacement: a task-clustered percentile bootstrap
  (:func:`kvx.aggregate.stats.resampling.cluster_interval`, tasks drawn as indices in sorted order).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.stats.resampling import cluster_interval
from kvx.core.records import PANEL_METRIC

CELL_COLUMNS = [
    *PANEL_METRIC,
    "n_readers",
    "excess_flips",
    "spacing",
    "dispersion",
    "class_dispersion",
    "baseline_error",
    "index_error",
    "status",
]
SUMMARY_COLUMNS = [
    "metric",
    "n_cells",
    "n_tasks",
    "baseline_mae",
    "index_mae",
    "mae_difference",
    "mae_difference_low",
    "mae_difference_high",
    "status",
]


def spacing(raw_means: np.ndarray) -> float:
    """Median gap between adjacent sorted raw reader means."""
    return float(np.median(np.diff(np.sort(raw_means))))


def _fit_predict(x: np.ndarray, y: np.ndarray, x_new: float) -> float | None:
    """OLS line through (x, y) evaluated at ``x_new``; None without two distinct finite x."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0 or not np.isfinite(x_new):
        return None
    slope, intercept = np.polyfit(x[ok], y[ok], 1)
    return float(intercept + slope * x_new)


def _class_dispersion(dispersion: np.ndarray, classes: np.ndarray, cell: int, without: int) -> float:
    """Mean dispersion of cells of ``cell``'s compressor class, leaving out ``cell`` and ``without``."""
    others = np.ones(len(dispersion), dtype=bool)
    others[[cell, without]] = False
    same = others & (classes == classes[cell])
    pool = same if same.any() else others
    return float(np.mean(dispersion[pool])) if pool.any() else np.nan


def loco_errors(
    excess: np.ndarray, spacings: np.ndarray, dispersion: np.ndarray, classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(baseline error, index error, held-out class dispersion) per cell, leave one cell out."""
    k = len(excess)
    base, index, held_d = np.full(k, np.nan), np.full(k, np.nan), np.full(k, np.nan)
    for c in range(k):
        train = np.arange(k) != c
        held_d[c] = _class_dispersion(dispersion, classes, c, c)
        train_index = np.array([_class_dispersion(dispersion, classes, j, c) for j in range(k)])[train]
        with np.errstate(divide="ignore", invalid="ignore"):
            x_index = train_index / spacings[train]
            new_index = held_d[c] / spacings[c]
        b = _fit_predict(spacings[train], excess[train], spacings[c])
        i = _fit_predict(x_index, excess[train], new_index)
        base[c] = np.nan if b is None else abs(b - excess[c])
        index[c] = np.nan if i is None else abs(i - excess[c])
    return base, index, held_d


def predictive_audit(
    readers: pd.DataFrame, panel: pd.DataFrame, n_boot: int, seed: int
) -> dict[str, pd.DataFrame]:
    """``audit_predictive`` (per metric) and ``audit_predictive_cells`` from the audit's reader and
    panel tables."""
    cells, summary = [], []
    if readers.empty or panel.empty:
        return {
            "audit_predictive": pd.DataFrame(columns=SUMMARY_COLUMNS),
            "audit_predictive_cells": pd.DataFrame(columns=CELL_COLUMNS),
        }
    flips = panel.set_index(PANEL_METRIC)["excess_flips"]
    for keys, group in readers.groupby(PANEL_METRIC, sort=True):
        row = dict(zip(PANEL_METRIC, keys, strict=True)) | {"n_readers": len(group)}
        excess = flips.get(keys, np.nan)
        if len(group) < 3 or not np.isfinite(excess):
            cells.append(row | {"status": "not a cell: needs 3 readers and a defined excess-flip median"})
            continue
        means = group["raw_mean"].to_numpy(float)
        row |= {
            "excess_flips": float(excess),
            "spacing": spacing(means),
            "dispersion": float(np.std(group["gain"].to_numpy(float), ddof=1)),
        }
        cells.append(row | {"status": "ok" if row["spacing"] > 0 else "not a cell: raw readers tie"})
    table = pd.DataFrame(cells, columns=CELL_COLUMNS)
    for metric, group in table[table["status"] == "ok"].groupby("metric", sort=True):
        idx = group.index.to_numpy()
        if len(idx) < 3:
            summary.append({"metric": metric, "n_cells": len(idx), "status": "needs 3 cells of the metric"})
            continue
        base, index, held = loco_errors(
            group["excess_flips"].to_numpy(float),
            group["spacing"].to_numpy(float),
            group["dispersion"].to_numpy(float),
            group["compressor"].astype(str).to_numpy(),
        )
        table.loc[idx, "baseline_error"], table.loc[idx, "index_error"] = base, index
        table.loc[idx, "class_dispersion"] = held
        ok = np.isfinite(base) & np.isfinite(index)
        out = {"metric": metric, "n_cells": int(ok.sum()), "n_tasks": int(group["task"][ok].nunique())}
        if ok.sum() < 2:
            summary.append(out | {"status": "fewer than 2 cells with both predictions"})
            continue
        diff = index[ok] - base[ok]
        tasks = group["task"].to_numpy()[ok]
        order = np.argsort(tasks, kind="stable")  # tasks numbered in sorted order
        low, high = cluster_interval(diff[order], tasks[order], n_boot, seed, draw="indices")
        summary.append(
            out
            | {
                "baseline_mae": float(base[ok].mean()),
                "index_mae": float(index[ok].mean()),
                "mae_difference": float(diff.mean()),
                "mae_difference_low": low,
                "mae_difference_high": high,
                "status": "ok",
            }
        )
    return {
        "audit_predictive": pd.DataFrame(summary, columns=SUMMARY_COLUMNS),
        "audit_predictive_cells": table,
    }
