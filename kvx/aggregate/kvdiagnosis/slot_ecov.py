"""KVDiagnosis Figure 9B: does slot-ECov rank the position-method cells the same way on every reader?

The unit is a (compressor, setting) cell: the mean slot ECov over its C->W rows with a measured or
projected coverage map (structural methods have no ECov), pooled over the tasks the records hold (the
paper pools RULER-16K and QA: 6 position methods x 3 settings = 18 cells). For every pair of readers,
the Spearman rank correlation over the cells both have (paper: Falcon 0.969 and Mistral 0.957 against
Qwen). Fewer than two readers, or fewer than three shared cells, is N/A with its reason.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from kvx.aggregate.stats.ranks import spearman
from kvx.core.records import CW

MAPPED = ("measured", "projected")
MIN_CELLS = 3  # a rank correlation over two points is ±1 by construction


def slot_ecov_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean slot ECov per reader and (compressor, setting) over mapped C->W rows."""
    if "ecov" not in rows or "coverage_status" not in rows:
        return pd.DataFrame(columns=["reader", "compressor", "setting", "rows", "ecov", "tasks"])
    mapped = rows[(rows["transition"] == CW) & rows["coverage_status"].isin(MAPPED) & rows["ecov"].notna()]
    out = [
        {
            "reader": reader,
            "compressor": compressor,
            "setting": setting,
            "rows": len(part),
            "ecov": float(part["ecov"].mean()),
            "tasks": ",".join(sorted(set(part["task"].astype(str)))),
        }
        for (reader, compressor, setting), part in mapped.groupby(
            ["reader", "compressor", "setting"], sort=True
        )
    ]
    return pd.DataFrame(out, columns=["reader", "compressor", "setting", "rows", "ecov", "tasks"])


def slot_ecov_rank(cells: pd.DataFrame) -> pd.DataFrame:
    """Spearman ρ between every two readers' cell means (over their shared cells)."""
    readers = sorted(set(cells["reader"]))
    na = {"reader_a": None, "reader_b": None, "n_cells": 0, "rho": np.nan, "p": np.nan}
    if len(readers) < 2:
        reason = f"{len(readers)} reader(s) with mapped C→W coverage: a rank correlation needs two"
        return pd.DataFrame([{**na, "status": "not_applicable", "reason": reason}])
    wide = cells.pivot_table(index=["compressor", "setting"], columns="reader", values="ecov")
    out = []
    for a, b in combinations(readers, 2):
        shared = wide[[a, b]].dropna()
        row = {"reader_a": a, "reader_b": b, "n_cells": len(shared)}
        if len(shared) < MIN_CELLS:
            reason = f"{len(shared)} shared (compressor, setting) cells; needs {MIN_CELLS}"
            out.append({**row, "rho": np.nan, "p": np.nan, "status": "not_applicable", "reason": reason})
            continue
        if shared[a].nunique() < 2 or shared[b].nunique() < 2:
            reason = "one reader's cell means are all equal: no ranking"
            out.append({**row, "rho": np.nan, "p": np.nan, "status": "not_applicable", "reason": reason})
            continue
        rho, p = spearman(shared[a], shared[b])
        out.append({**row, "rho": rho, "p": p, "status": "ok", "reason": ""})
    return pd.DataFrame(out)
