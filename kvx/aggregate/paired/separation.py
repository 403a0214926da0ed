"""C→W vs C→C separation of each diagnostic with a declared risk direction (KVDiagnosis Figure 6).

AUROC is stratified by task x reader x compressor x setting: a failure is only ranked against
successes of its own stratum, and only strata with both outcomes (and a valid value) count.
Intervals are descriptive percentile intervals (sources recur across cells).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvx.aggregate.read.rows import Metric
from kvx.aggregate.stats.ranks import stratified_auroc
from kvx.aggregate.stats.resampling import stratified_auroc_interval
from kvx.core.records import CC, CELL, CW, SUPPORTED

COLUMNS = ["metric", "direction", "auroc", "ci_low", "ci_high", "n_strata", "n_cw", "n_cc"]


def separation(rows: pd.DataFrame, metrics: list[Metric], n_boot: int, seed: int) -> pd.DataFrame:
    paired = rows[(rows["status"] == SUPPORTED) & rows["transition"].isin([CW, CC])]
    out = []
    for m in metrics:
        valid = paired.dropna(subset=[m.name])
        risk = valid[m.name].to_numpy(dtype=float) * (1.0 if m.direction == "higher" else -1.0)
        failed = (valid["transition"] == CW).to_numpy()
        strata = []
        for idx in valid.groupby(CELL, sort=True).indices.values():
            pos, neg = risk[idx][failed[idx]], risk[idx][~failed[idx]]
            if len(pos) and len(neg):
                strata.append((pos, neg))
        auc, n_strata = stratified_auroc(strata)
        low, high = stratified_auroc_interval(strata, n_boot=n_boot, seed=seed) if strata else (None, None)
        out.append(
            {
                "metric": m.name,
                "direction": m.direction,
                "auroc": np.nan if auc is None else auc,
                "ci_low": np.nan if low is None else low,
                "ci_high": np.nan if high is None else high,
                "n_strata": n_strata,
                "n_cw": int(sum(len(p) for p, _ in strata)),
                "n_cc": int(sum(len(n) for _, n in strata)),
            }
        )
    return pd.DataFrame(out, columns=COLUMNS)
