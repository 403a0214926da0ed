"""Each answer metric of a task (``Score.metrics``: json_valid, schema_valid, pass, edit_sim...) paired
source by source: a supported record's compressed value next to its FullCache control's.

The press-averaged contrast (kv-exec-bench Figure 1) and the degradation onset read these pairs. A
metric an answer does not carry is missing, never 0: a pair enters only when both answers carry it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.paired.matrix import metric_names
from kvx.core.records import CELL, SUPPORTED

PAIRED = [*CELL, "ratio", "unit", "metric", "full", "comp"]
MEANS = [*CELL, "ratio", "metric", "n", "full_mean", "comp_mean", "kept"]


def paired_answers(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per supported record and answer metric both its answers carry; empty (at once) when no
    record carries any answer metric."""
    names = metric_names(rows)
    if not names:
        return pd.DataFrame(columns=PAIRED)
    supported = rows[rows["status"] == SUPPORTED]
    parts = []
    for name in names:
        full, comp = supported.get(f"full_m.{name}"), supported.get(f"comp_m.{name}")
        if full is None or comp is None:
            continue
        both = (full.notna() & comp.notna()).to_numpy()
        part = supported.loc[both, [*CELL, "ratio", "unit"]]
        parts.append(part.assign(metric=name, full=full[both].astype(float), comp=comp[both].astype(float)))
    if not parts:
        return pd.DataFrame(columns=PAIRED)
    return pd.concat(parts, ignore_index=True)[PAIRED]


def cell_means(paired: pd.DataFrame) -> pd.DataFrame:
    """Per cell and metric over its pairs: n, the FullCache and compressed means and ``kept`` = compressed
    / FullCache mean (the share of its uncompressed value the metric keeps; NaN when the FullCache mean
    is 0: nothing to keep a share of)."""
    if paired.empty:
        return pd.DataFrame(columns=MEANS)
    out = (
        paired.groupby([*CELL, "metric"], sort=True)
        .agg(
            ratio=("ratio", "first"),
            n=("full", "size"),
            full_mean=("full", "mean"),
            comp_mean=("comp", "mean"),
        )
        .reset_index()
    )
    out["kept"] = out["comp_mean"] / out["full_mean"].where(out["full_mean"] > 0)
    return out[MEANS]


def task_metrics(paired: pd.DataFrame) -> dict[str, list[str]]:
    """The metrics each task's answers carry (a pair of one of its records has it)."""
    return {str(task): sorted(group.unique()) for task, group in paired.groupby("task", sort=True)["metric"]}


def missing_reason(cells: pd.DataFrame, key: tuple[str, ...], full_mean: float | None) -> str:
    """Why a cell has no share kept for a metric: its answers, or its FullCache mean of 0."""
    if key not in cells.index or not cells.loc[key, "n_supported"]:
        return "no supported answer"
    if full_mean is None or np.isnan(full_mean):
        return "no answer pair carries it"
    return "FullCache mean 0"


def cell_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Every cell (any status) indexed by ``CELL``: its ratio, median retained share and supported count."""
    frame = rows[[*CELL, "ratio", "retained_share"]].assign(n_supported=(rows["status"] == SUPPORTED))
    return frame.groupby(CELL, sort=True).agg(
        ratio=("ratio", "first"),
        retained_share=("retained_share", "median"),
        n_supported=("n_supported", "sum"),
    )
