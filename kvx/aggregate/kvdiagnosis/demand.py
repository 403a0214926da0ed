"""KVDiagnosis Tables 13-14 and Figure 12: the C->W rows by task and by method-setting, with their
context-demand profile.

The diagnostic columns come from the records (means over each column's own valid rows, never imputed;
structural coverage leaves ERR/ECov N/A). The demand columns come from the release's context-demand labels
(``context_demand.jsonl``, written by ``kvx.importers kvdiagnosis``), joined by record key: the release
publishes the labels but not their lookup or thresholds, so a run kvx made has none and its demand
columns stay N/A. Access demand is averaged over the rows that have it (a valid eager-attention trace).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from kvx.aggregate.read import text
from kvx.aggregate.read.release_tables import ReleaseTables
from kvx.core.records import CW, SUPPORTED, UNSUPPORTED

#: RULER task name (kvx's ruler_<name>, the release's official_task_name) -> KVDiagnosis Table 13 row
TASK_GROUPS = (
    (r"niah_single", "Single NIAH"),
    (r"niah_multikey", "Multi-key NIAH"),
    (r"niah_multivalue", "Multi-value NIAH"),
    (r"niah_multiquery", "Multi-query NIAH"),
    (r"(^|_)vt($|_)|variable_tracking", "Variable tracking"),
    (r"(^|_)cwe($|_)|common_words", "CWE"),
    (r"(^|_)fwe($|_)|freq_words", "FWE"),
)
METRICS = ("err", "ecov", "delta_nll", "kl", "top50", "ear")
DEMANDS = ("distribution_demand", "access_demand")
NO_LABELS = (
    "no context-demand labels: they come from the KVDiagnosis release (kvx.importers kvdiagnosis writes "
    "context_demand.jsonl), which publishes neither their lookup nor their thresholds for other runs"
)


def task_group(name: str) -> str:
    """The Table 13 row of a RULER task name; any other name stands for itself."""
    return next((label for pattern, label in TASK_GROUPS if re.search(pattern, name)), name)


def _mean(frame: pd.DataFrame, column: str) -> tuple[float, int]:
    values = pd.to_numeric(frame[column], errors="coerce") if column in frame else pd.Series(dtype=float)
    values = values.dropna()
    return (float(values.mean()) if len(values) else np.nan), len(values)


def joined(rows: pd.DataFrame, release: ReleaseTables) -> pd.DataFrame:
    """The supported C->W rows with their demand labels (NaN where a row has none)."""
    cw = rows[(rows["transition"] == CW) & (rows["status"] == SUPPORTED)].copy()
    demand = release.demand
    if demand.empty or "record_key" not in demand:
        cw["demand_task"] = None
        return cw
    demand = demand[demand["record_key"].notna()].drop_duplicates("record_key")
    keep = ["record_key", "task_name", *DEMANDS, *[c for c in demand if c.startswith("label.")]]
    merged = cw.merge(demand[keep], how="left", left_on="key", right_on="record_key")
    return merged.drop(columns="record_key").rename(columns={"task_name": "demand_task"})


def _profile(frame: pd.DataFrame) -> dict[str, float]:
    out: dict[str, float] = {"rows": len(frame), "n_sources": text.n_distinct(frame["source_id"])}
    for column in (*METRICS, "label.evidence_presence", *DEMANDS):
        out[column.removeprefix("label.")], out[f"n_{column.removeprefix('label.')}"] = _mean(frame, column)
    return out


def demand_by_task(cw: pd.DataFrame) -> pd.DataFrame:
    """Table 13: per RULER task group, over the C->W rows that carry demand labels."""
    labelled = cw[cw["demand_task"].notna()] if "demand_task" in cw else cw.iloc[:0]
    if labelled.empty:
        return pd.DataFrame([{"task": None, "status": "not_applicable", "reason": NO_LABELS}])
    groups = labelled["demand_task"].astype(str).map(task_group)
    out = [
        {"task": group, "status": "ok", "reason": "", **_profile(part)}
        for group, part in labelled.groupby(groups, sort=True)
    ]
    return pd.DataFrame(out)


def demand_by_setting(rows: pd.DataFrame, cw: pd.DataFrame) -> pd.DataFrame:
    """Table 14: per task, compressor and setting, the C->W diagnostics and (where labelled) demand. A
    cell without supported runs (ThinK at 25%) is listed as unsupported, with its reason."""
    out = []
    for (task, compressor, setting), cell in rows.groupby(["task", "compressor", "setting"], sort=True):
        if compressor == "FullCache":
            continue
        part = cw[(cw["task"] == task) & (cw["compressor"] == compressor) & (cw["setting"] == setting)]
        coverage = part.get("coverage_status", pd.Series(dtype=object)).dropna().astype(str)
        row = {"task": task, "compressor": compressor, "setting": setting}
        if not (cell["status"] == SUPPORTED).any():
            statuses = ", ".join(sorted(set(cell["status"].astype(str))))
            out.append({**row, "status": UNSUPPORTED, "reason": f"no supported run ({statuses})"})
            continue
        labelled = int(part["distribution_demand"].notna().sum()) if "distribution_demand" in part else 0
        out.append(
            {
                **row,
                "status": "ok",
                "reason": "no C→W row" if part.empty else ("" if labelled else NO_LABELS),
                "coverage": "/".join(sorted(set(coverage))) or "none",
                **_profile(part),
            }
        )
    return pd.DataFrame(out)


def demand_profile(cw: pd.DataFrame) -> pd.DataFrame:
    """Figure 12: the distribution of each task-template label (left panel) and of the two demand
    scores (right panel) over the labelled C->W rows; access demand over the rows that have it."""
    axes = [c for c in cw if c.startswith("label.")]
    if not axes:
        return pd.DataFrame([{"panel": None, "axis": None, "status": "not_applicable", "reason": NO_LABELS}])
    out = []
    for panel, columns in (("labels", axes), ("scores", list(DEMANDS))):
        for column in columns:
            values = pd.to_numeric(cw[column], errors="coerce").dropna().round(3)
            for value, n in values.value_counts().sort_index().items():
                out.append(
                    {
                        "panel": panel,
                        "axis": column.removeprefix("label."),
                        "value": float(value),
                        "rows": int(n),
                        "share": n / len(values),
                        "status": "ok",
                        "reason": "",
                    }
                )
    return pd.DataFrame(out)


def demand_tables(rows: pd.DataFrame, release: ReleaseTables) -> dict[str, pd.DataFrame]:
    cw = joined(rows, release)
    return {
        "kvd_demand_tasks": demand_by_task(cw),
        "kvd_demand_settings": demand_by_setting(rows, cw),
        "kvd_demand_profile": demand_profile(cw),
    }
