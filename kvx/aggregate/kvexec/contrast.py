"""String anchors next to the structural metrics they stand in for (kv-exec-bench's contrast).

Tasks declare pairs such as json_valid -> schema_valid, name_substring -> schema_valid or edit_sim ->
pass; per cell each metric's compressed mean is shown with its FullCache mean over the same records and
the share it keeps, and (``contrast_by_ratio``, the paper's Figure 1) that share averaged over the
compressors at each ratio. An anchor that keeps ~100% while its structural metric falls is exactly the
damage a string-only evaluation reports as lossless.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.kvexec.answer_metrics import cell_means, cell_table, missing_reason, task_metrics
from kvx.core.records import CELL, SUPPORTED

COLUMNS = [
    *CELL,
    "ratio",
    "anchor",
    "structural",
    "n",
    "anchor_full",
    "anchor_comp",
    "anchor_kept",
    "structural_full",
    "structural_comp",
    "structural_kept",
]


def _side(means: pd.DataFrame, key: tuple[str, ...], name: str) -> tuple[int, float, float, float]:
    """n, FullCache mean, compressed mean and share kept of one metric in one cell (0 and NaN: no pair)."""
    if (*key, name) not in means.index:
        return 0, np.nan, np.nan, np.nan
    row = means.loc[(*key, name)]
    return int(row["n"]), float(row["full_mean"]), float(row["comp_mean"]), float(row["kept"])


def contrast(rows: pd.DataFrame, paired: pd.DataFrame, pairs: dict[str, dict[str, str]]) -> pd.DataFrame:
    """One row per cell and declared (anchor, structural) pair of its task; empty without pairs.
    ``paired`` is ``answer_metrics.paired_answers(rows)``, whose per-cell means are read here."""
    out = []
    means = cell_means(paired).set_index([*CELL, "metric"])
    supported = rows[rows["status"] == SUPPORTED]
    for keys, group in supported.groupby(CELL, sort=True):
        for anchor, structural in sorted(pairs.get(keys[0], {}).items()):
            n_a, a_full, a_comp, a_kept = _side(means, keys, anchor)
            n_s, s_full, s_comp, s_kept = _side(means, keys, structural)
            out.append(
                dict(zip(CELL, keys, strict=True))
                | {
                    "ratio": float(group["ratio"].iloc[0]),
                    "anchor": anchor,
                    "structural": structural,
                    "n": min(n_a, n_s),
                    "anchor_full": a_full,
                    "anchor_comp": a_comp,
                    "anchor_kept": a_kept,
                    "structural_full": s_full,
                    "structural_comp": s_comp,
                    "structural_kept": s_kept,
                }
            )
    return pd.DataFrame(out, columns=COLUMNS)


BY_RATIO = [
    "task",
    "reader",
    "ratio",
    "metric",
    "role",
    "n_compressors",
    "n_defined",
    "full_mean",
    "comp_mean",
    "kept",
    "undefined",
]


def _role(metric: str, pairs: dict[str, str]) -> str:
    if metric in pairs:
        return "anchor"
    return "structural" if metric in pairs.values() else ""


def contrast_by_ratio(
    rows: pd.DataFrame, paired: pd.DataFrame, pairs: dict[str, dict[str, str]]
) -> pd.DataFrame:
    """kv-exec-bench Figure 1: per task, reader, ratio and answer metric, the mean over compressors of
    each one's ``kept`` (compressed mean / FullCache mean over its paired answers), "retains 0.58 of its
    uncompressed value". ``paired`` is ``answer_metrics.paired_answers(rows)``.

    A compressor whose share is undefined there (no supported answer, no pair carrying the metric, a
    FullCache mean of 0) is named in ``undefined`` and counted in ``n_compressors`` but not in
    ``n_defined``: the mean is over the defined ones, never with a made-up 0 or 1, and N/A when none is.
    Only ratio settings have a place on this axis (cells with another setting are in ``contrast``).
    """
    if paired.empty:
        return pd.DataFrame(columns=BY_RATIO)
    means = cell_means(paired).set_index([*CELL, "metric"])
    cells = cell_table(rows)
    placed = cells[cells["ratio"].notna()].reset_index()
    out = []
    for task, metrics in task_metrics(paired).items():
        for (reader, ratio), group in placed[placed["task"] == task].groupby(["reader", "ratio"], sort=True):
            for metric in metrics:
                kept, full, comp, undefined = [], [], [], []
                for cell in group.itertuples(index=False):
                    key = (task, reader, cell.compressor, cell.setting)
                    row = means.loc[(*key, metric)] if (*key, metric) in means.index else None
                    if row is None or np.isnan(row["kept"]):
                        full_mean = None if row is None else float(row["full_mean"])
                        undefined.append(f"{cell.compressor}: {missing_reason(cells, key, full_mean)}")
                        continue
                    kept.append(float(row["kept"]))
                    full.append(float(row["full_mean"]))
                    comp.append(float(row["comp_mean"]))
                out.append(
                    {
                        "task": task,
                        "reader": reader,
                        "ratio": float(ratio),
                        "metric": metric,
                        "role": _role(metric, pairs.get(task, {})),
                        "n_compressors": len(group),
                        "n_defined": len(kept),
                        "full_mean": float(np.mean(full)) if full else np.nan,
                        "comp_mean": float(np.mean(comp)) if comp else np.nan,
                        "kept": float(np.mean(kept)) if kept else np.nan,
                        "undefined": "; ".join(undefined),
                    }
                )
    return pd.DataFrame(out, columns=BY_RATIO)
