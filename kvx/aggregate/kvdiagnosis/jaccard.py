"""KVDiagnosis Figures 4B and 9C: do two methods fail on the same sources of a workload?

The paper compares SnapKV's and TOVA's C→W sets per *workload* (RULER-8K, RULER-16K, Qasper, HotpotQA)
and setting tier: F_{d,m,b} over every source of workload d, not per RULER subtask as kvx's ``matched``
table does ("11 of 12 workload–setting cells at or below 0.385; Qasper 0.70 at 25%"; the release's
``failure_views.csv`` computes it from each workload's C→W ``sample_id`` sets). Every pair of methods is
compared here, on the basis of the same tier (75/50/25% retained, QuantizedCache 8/4/2 bits), as the
release's ``matched_method_pair_summary.csv`` pairs them; the paper's pair is one row of each group.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from kvx.aggregate.kvdiagnosis.workloads import tier_rank
from kvx.aggregate.read import text
from kvx.aggregate.stats.overlap import jaccard
from kvx.core.records import CW, SUPPORTED

__all__ = ["PAPER_PAIR", "workload_jaccard"]

#: the methods the paper's Figures 4B and 9C compare
PAPER_PAIR = ("snapkv", "tova")
_KEYS = ["workload", "reader", "tier"]
COLUMNS = [*_KEYS, "method_a", "method_b", "n_a", "n_b", "intersection", "union", "jaccard", "reason"]


def workload_jaccard(rows: pd.DataFrame) -> pd.DataFrame:
    """Per workload, reader and tier, every pair of methods with records there: |F_a|, |F_b|, |F_a ∩ F_b|,
    |F_a ∪ F_b| and their Jaccard, a source being the same source id of the same task (``unit``). A
    method with no supported record at the tier (ThinK at 25%) has no failure set: its pairs are N/A with
    that reason, as is a pair where neither method has a C→W row (0/0). Cells in no tier are compared
    nowhere (``kvd_tiers`` lists them)."""
    placed = rows[rows["tier"] != ""]
    placed = placed.assign(unit=text.exact(placed["unit"]))
    supported = placed["status"] == SUPPORTED
    fails = placed[supported & (placed["transition"] == CW)]
    sets = {key: set(g["unit"]) for key, g in fails.groupby([*_KEYS, "method"], sort=False)}
    has = set(placed[supported].groupby([*_KEYS, "method"], sort=False).groups)
    out = []
    for (name, reader, tier), group in placed.groupby(_KEYS, sort=False):
        for a, b in combinations(sorted(group["method"].unique()), 2):
            ka, kb = (name, reader, tier, a), (name, reader, tier, b)
            fa, fb = sets.get(ka, set()), sets.get(kb, set())
            row = {"workload": name, "reader": reader, "tier": tier, "method_a": a, "method_b": b}
            missing = [m for m, k in ((a, ka), (b, kb)) if k not in has]
            if missing:
                why = f"{' and '.join(missing)}: no supported record at this tier"
                out.append({**row, "n_a": np.nan, "n_b": np.nan, "intersection": np.nan, "union": np.nan,
                            "jaccard": np.nan, "reason": why})  # fmt: skip
                continue
            jac = jaccard(fa, fb)
            out.append(
                {
                    **row,
                    "n_a": len(fa),
                    "n_b": len(fb),
                    "intersection": len(fa & fb),
                    "union": len(fa | fb),
                    "jaccard": np.nan if jac is None else jac,
                    "reason": "neither method has a C→W row" if jac is None else "",
                }
            )
    frame = pd.DataFrame(out, columns=COLUMNS)
    frame = frame.assign(_tier=tier_rank(frame["tier"]))
    frame = frame.sort_values(["workload", "reader", "_tier", "method_a", "method_b"])
    return frame.drop(columns="_tier").reset_index(drop=True)
