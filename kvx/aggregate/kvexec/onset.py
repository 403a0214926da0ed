"""Degradation onset (kv-exec-bench §Discussion, "threshold framing"): for each task, reader, compressor
and answer metric, the first setting, in increasing compression, at which the metric's compressed mean
falls below its FullCache mean by at least a threshold.

The drop is paired: FullCache minus compressed mean over the cell's supported sources where both answers
carry the metric, with a bootstrap interval resampling those sources (``mean_interval``). Settings
are ordered by their ratio (the share of the cache removed), else by 1 - their median retained share;
a setting with neither, or without paired answers, is not scanned and is named in ``skipped``. When no
scanned setting reaches the threshold the onset is "none" and ``reason`` says why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kvx.aggregate.kvexec.answer_metrics import cell_table, missing_reason, task_metrics
from kvx.aggregate.options import ONSET_DROP
from kvx.aggregate.stats.resampling import mean_interval
from kvx.core.records import CELL

COLUMNS = [
    "task",
    "reader",
    "compressor",
    "metric",
    "threshold",
    "n_settings",
    "onset_setting",
    "onset_ratio",
    "n",
    "full_mean",
    "comp_mean",
    "drop",
    "drop_low",
    "drop_high",
    "skipped",
    "reason",
]
NONE = "none"
#: a drop this close below the threshold reaches it: 1.0 - 0.9 is a drop of 0.1 however the floats round
TOLERANCE = 1e-9


def check_threshold(threshold: float, name: str = "onset threshold") -> None:
    """Answer metrics lie in [0, 1]: a drop threshold outside (0, 1] can never be a reading. ``name`` is
    how the message calls it (the CLI: the option as typed)."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"{name} must be in (0, 1] (an absolute drop of a metric), got {threshold:g}")


def _order(cells: pd.DataFrame) -> pd.Series:
    """The compression of each cell: its ratio, else 1 - its median retained share (NaN: no order)."""
    return cells["ratio"].where(cells["ratio"].notna(), 1.0 - cells["retained_share"])


def onset(
    rows: pd.DataFrame,
    paired: pd.DataFrame,
    threshold: float = ONSET_DROP,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per task, reader, compressor and answer metric of the task; ``paired`` is
    ``answer_metrics.paired_answers(rows)``. Empty (at once) when no record carries an answer metric."""
    check_threshold(threshold)
    if paired.empty:
        return pd.DataFrame(columns=COLUMNS)
    cells = cell_table(rows)
    cells["order"] = _order(cells)
    pairs = {key: group for key, group in paired.groupby([*CELL, "metric"])}
    out = []
    for task, metrics in task_metrics(paired).items():
        for (reader, compressor), group in cells.loc[task].groupby(["reader", "compressor"], sort=True):
            ordered = group[group["order"].notna()].sort_values("order", kind="stable")
            unordered = [
                f"{setting} (no compression order)"
                for setting in group[group["order"].isna()].index.get_level_values("setting")
            ]
            scan = [((task, reader, compressor, setting), row) for (_, _, setting), row in ordered.iterrows()]
            for metric in metrics:
                found = _scan(scan, pairs, metric, cells, threshold)
                found["skipped"] = "; ".join(found["skipped"] + unordered)
                if found["onset_setting"] != NONE:
                    x = pairs[(task, reader, compressor, found["onset_setting"], metric)]
                    drop = (x["full"] - x["comp"]).to_numpy(float)
                    _, found["drop_low"], found["drop_high"] = mean_interval(drop, n_boot, seed)
                out.append(
                    {"task": task, "reader": reader, "compressor": compressor, "metric": metric}
                    | {"threshold": threshold}
                    | found
                )
    return pd.DataFrame(out, columns=COLUMNS)


def _scan(
    scan: list[tuple[tuple[str, str, str, str], pd.Series]],
    pairs: dict[tuple[str, ...], pd.DataFrame],
    metric: str,
    cells: pd.DataFrame,
    threshold: float,
) -> dict[str, Any]:
    """The first scanned setting whose paired drop reaches ``threshold``, else "none" with the reason."""
    skipped: list[str] = []
    largest: tuple[float, str] | None = None
    n_settings = 0
    for key, cell in scan:
        setting = key[3]
        x = pairs.get((*key, metric))
        if x is None:
            skipped.append(f"{setting} ({missing_reason(cells, key, None)})")
            continue
        n_settings += 1
        full, comp = float(x["full"].mean()), float(x["comp"].mean())
        drop = full - comp
        if largest is None or drop > largest[0]:
            largest = (drop, setting)
        if drop >= threshold - TOLERANCE:
            return {
                "n_settings": n_settings,
                "onset_setting": setting,
                "onset_ratio": float(cell["ratio"]),
                "n": len(x),
                "full_mean": full,
                "comp_mean": comp,
                "drop": drop,
                "drop_low": np.nan,  # the caller's bootstrap
                "drop_high": np.nan,
                "skipped": skipped,
                "reason": "",
            }
    if largest is None:
        reason = "no setting has supported answers carrying the metric"
    else:
        reason = f"no setting drops by {threshold:g} or more (largest drop {largest[0]:.3f}, at {largest[1]})"
    return {
        "n_settings": n_settings,
        "onset_setting": NONE,
        "onset_ratio": np.nan,
        "n": 0,
        "full_mean": np.nan,
        "comp_mean": np.nan,
        "drop": np.nan,
        "drop_low": np.nan,
        "drop_high": np.nan,
        "skipped": skipped,
        "reason": reason,
    }
